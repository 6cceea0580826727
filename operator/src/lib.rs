//! initializer-operator: deploys initializers and registers them with the API server only while
//! they are ready and answering.
//!
//! The pure core never touches a client and holds most of the logic and tests: what the kubectl
//! plugin shares lives in the `initializer-core` crate ([`validate`], [`cel`], [`selector`],
//! [`build`], [`policy`], [`probe`], [`tls`], [`naming`], [`ownership`]), re-exported here under
//! the same paths; the rest is the operator's own ([`health`], [`status`], [`engine`], the
//! counting rules of [`missed`]). The IO shell ([`apply`], [`backend`], [`controller`],
//! [`supervisor`], [`leader`], [`server`]) is kept thin. What ships the operator
//! (OLM bundle, Helm chart, installer, manifests, RBAC tables, monitoring objects) is the
//! `initializer-packaging` crate, which the binary's packaging subcommands call.

pub mod api_client;
pub mod api_requests;
pub mod apply;
pub mod backend;
pub mod bounds;
pub mod controller;
pub mod engine;
pub mod error;
pub mod events;
pub mod guard;
pub mod health;
pub mod lag;
pub mod leader;
pub mod metrics;
pub mod missed;
pub mod retry;
pub mod run;
pub mod server;
pub mod status;
pub mod supervisor;
pub mod watchdog;

// The pure core the kubectl plugin shares (initializer-core), under the paths the operator has
// always used for it.
pub use initializer_core::{
    build, cel, naming, ownership, pending, policy, probe, route, selector, tls, validate,
};

pub use error::{Error, Result};
