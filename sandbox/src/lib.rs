//! initializer-sandbox: an embedded Kubernetes control plane for one machine.

pub mod admission;
pub mod proxy;
pub mod view;
pub mod workload;
