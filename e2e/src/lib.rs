//! initializer-e2e: the end-to-end suite's harness and the `make run` demo.
//!
//! One suite, several targets. By default the harness starts the embedded sandbox in-process with
//! an image map pointing at the cargo-built binaries; with `E2E_CLUSTER=kind` (or
//! `E2E_KUBECONTEXT=<context>`) it drives the cluster of a kubeconfig context instead. Either
//! way the operator is installed from the bundle, every scenario runs in fresh namespaces and
//! cleans up after itself, and the timings the safety story promises are recorded and printed.
//!
//! This crate is test infrastructure: it uses `anyhow` for errors, because every error ends up
//! in front of a person reading a failed scenario, and context is what they need.

pub mod cluster;
pub mod conformance;
pub mod env;
pub mod fixtures;
pub mod images;
pub mod install;
pub mod kind;
pub mod legacy;
pub mod load;
pub mod olm;
pub mod ops;
pub mod paths;
pub mod procfs;
pub mod prometheus;
pub mod real;
pub mod release;
pub mod runner;
pub mod sandbox;
pub mod scale;
pub mod scope;
pub mod sharing;
pub mod starve;
pub mod target;
pub mod timings;
pub use initializer_test_support::wait;
pub mod watch;

pub use env::Env;
pub use scope::Scope;
pub use target::Target;
