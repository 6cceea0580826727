//! initializer-packaging: how the operator is shipped and installed: the OLM bundle (generated
//! from the manifests and RBAC tables, and validated), the Helm chart made from the bundle, the
//! installer that applies a bundle without OLM, and the monitoring objects (alert rules,
//! ServiceMonitor, metrics Service).
//!
//! Layering: this crate depends on `initializer-crds` and the Kubernetes crates, never on
//! `initializer-operator`. The operator depends on it for its binary's packaging subcommands
//! (`bundle`, `chart`, `install`, `uninstall`, `monitoring`) and for the few pure pieces both
//! sides must agree on, which therefore live here, below the operator:
//!
//! - the names of the objects the operator ships or makes: [`manifest::OPERATOR_NAME`],
//!   [`manifest::GUARD_NAME`], [`rbac::WORKLOADS_CLUSTER_ROLE`];
//! - [`readiness`]: the one "Deployment available" predicate,
//!   `initializer_packaging::readiness::deployment_available`, used by the operator's status, the
//!   installer and the end-to-end tests.
//!
//! The operator's metric names, which the alert rules query, stay with the gauges in the
//! operator; a test there checks every rule's metric against what the operator exports.

// The Kubernetes version is the binary's choice (k8s-openapi's rule for libraries); this crate is
// written against the newest types, in which several specs are no longer optional (1.37).
k8s_openapi::k8s_if_le_1_36! {
    compile_error!("initializer-packaging needs k8s-openapi's v1_37 feature (or a later one)");
}

pub mod bounds;
pub mod bundle;
pub mod error;
pub mod guard;
pub mod install;
pub mod manifest;
pub mod monitoring;
pub mod rbac;
pub mod readiness;

pub use error::Error;
