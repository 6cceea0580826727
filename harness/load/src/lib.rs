//! The benchmark tools: an HTTPS client for admission endpoints ([`client`]) and the load
//! generator on it ([`load`]) behind the `initializer-load` binary, the hand-written baseline
//! server the SDK is compared with, reading a server process's memory and CPU, and the
//! comparison table. Not an initializer; nothing here is shipped in an image.

pub mod baseline;
pub mod client;
pub mod load;
pub mod proc;
pub mod report;
