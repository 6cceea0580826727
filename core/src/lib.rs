//! initializer-core: the operator's pure core that more than the operator needs. The kubectl
//! plugin (`kubectl initializer`) explains, probes and diffs with the very code the operator
//! runs, so it depends on this crate and not on the operator with its controllers, supervisor
//! and metrics.
//!
//! - [`validate`]: what an Initializer may say (with [`cel`] and [`selector`]), and the legacy
//!   backend's pending names ([`pending`]);
//! - [`build`]: every object the operator deploys and the admission configuration it registers;
//! - [`probe`]: the review the operator sends an initializer, as the API server does, and the
//!   check of its answer; the serving certificates it verifies ([`tls`]); the [`route`] check
//!   that the API server reaches it through its Service;
//! - [`policy`]: a preset compiled to a MutatingAdmissionPolicy, and its interpreter;
//! - [`naming`] and [`ownership`]: the names the operator gives, and whether an object in the
//!   cluster is the operator's.
//!
//! Nothing here holds a client: the operator's IO shell (`initializer-operator`'s `apply`,
//! `controller`, `supervisor`) calls it.

// The Kubernetes version is the binary's choice (k8s-openapi's rule for libraries); this crate is
// written against the newest types, in which several specs are no longer optional (1.37).
k8s_openapi::k8s_if_le_1_36! {
    compile_error!("initializer-core needs k8s-openapi's v1_37 feature (or a later one)");
}

pub mod build;
pub mod cel;
pub mod naming;
pub mod ownership;
pub mod pending;
pub mod policy;
pub mod probe;
pub mod route;
pub mod selector;
pub mod tls;
pub mod validate;
