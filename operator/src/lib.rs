//! initializer-operator: deploys initializers and registers them with the API server only while
//! they are ready and answering.
//!
//! The pure core ([`validate`], [`cel`], [`selector`], [`build`], [`policy`], [`health`],
//! [`status`], [`tls`], the counting rules of [`missed`]) never
//! touches a client and holds most of the logic and tests; the IO shell ([`apply`],
//! [`controller`], [`supervisor`], [`leader`], [`server`]) is kept thin. What ships the operator
//! (OLM bundle, Helm chart, installer, manifests, RBAC tables, monitoring objects) is the
//! `initializer-packaging` crate, which the binary's packaging subcommands call.

pub mod api_client;
pub mod api_requests;
pub mod apply;
pub mod build;
pub mod cel;
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
pub mod naming;
pub mod pending;
pub mod policy;
pub mod probe;
pub mod run;
pub mod selector;
pub mod server;
pub mod status;
pub mod supervisor;
pub mod tls;
pub mod validate;
pub mod watchdog;

pub use error::{Error, Result};
