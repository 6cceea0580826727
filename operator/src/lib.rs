//! initializer-operator: deploys initializers and registers them with the API server only while
//! they are ready and answering.
//!
//! The pure core ([`validate`], [`cel`], [`selector`], [`build`], [`health`], [`status`], [`tls`],
//! the counting rules of [`missed`]) never
//! touches a client and holds most of the logic and tests; the IO shell ([`apply`],
//! [`controller`], [`supervisor`], [`leader`], [`server`]) is kept thin.

pub mod apply;
pub mod build;
pub mod bundle;
pub mod cel;
pub mod controller;
pub mod error;
pub mod guard;
pub mod health;
pub mod install;
pub mod leader;
pub mod manifest;
pub mod metrics;
pub mod missed;
pub mod monitoring;
pub mod probe;
pub mod rbac;
pub mod run;
pub mod selector;
pub mod server;
pub mod status;
pub mod supervisor;
pub mod tls;
pub mod validate;
pub mod watchdog;

pub use error::{Error, Result};
