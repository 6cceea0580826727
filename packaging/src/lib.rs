//! initializer-packaging: how the operator is shipped and installed.
//!
//! Layering: this crate depends on `initializer-crds` and the Kubernetes crates, never on
//! `initializer-operator`; the operator depends on it for its binary's packaging subcommands and
//! for the pure predicates both sides must agree on.
//!
//! - [`readiness`]: the one "Deployment available" predicate,
//!   `initializer_packaging::readiness::deployment_available`, used by the operator's status, the
//!   installer and the end-to-end tests.

pub mod readiness;
