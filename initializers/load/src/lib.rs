//! The benchmark tools: the load generator's binary, the hand-written baseline server it is
//! compared with, reading a server process's memory and CPU, and the comparison table. Not an
//! initializer; nothing here is shipped in an image.

pub mod baseline;
pub mod proc;
pub mod report;
