//! Certificates and waiting for the socket-level tests, from the workspace's one test-support
//! crate.

#![allow(unused_imports)]

pub use initializer_test_support::{TestPki, eventually};
