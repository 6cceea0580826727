//! initializer-sandbox: an embedded Kubernetes control plane for one machine.
//!
//! [`Sandbox::start`] serves the Kubernetes REST API over HTTPS (store, discovery, watch,
//! patches, server-side apply, tables, CRDs, garbage collection, faults), calls admission
//! webhooks, and runs Deployments' pods as local processes. See `README.md`.

pub mod admission;
pub mod apiserver;
pub mod cel;
pub mod clock;
pub mod crd;
pub mod decode;
pub mod defaults;
pub mod discovery;
pub mod error;
pub mod event;
pub mod faults;
pub mod fields;
pub mod gc;
pub mod http;
pub mod ids;
pub(crate) mod json;
pub mod patch;
pub mod proxy;
pub mod resource;
pub mod sandbox;
pub mod selector;
pub mod snapshot;
pub mod store;
pub mod table;
pub mod tls;
pub mod view;
pub mod workload;

pub use error::{ApiError, Error};
pub use faults::{FaultAction, FaultRule};
pub use sandbox::{Sandbox, SandboxConfig, SandboxHandle};
