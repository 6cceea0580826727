//! `MutatingAdmissionPolicy` and `MutatingAdmissionPolicyBinding` as the compiler writes them:
//! k8s-openapi's `admissionregistration.k8s.io/v1` types. Their spec is the same at v1beta1
//! (Kubernetes 1.34 and 1.35), so the operator writes them at whichever version the API server
//! serves ([`super::served`]), with only `apiVersion` changed.

pub use k8s_openapi::api::admissionregistration::v1::{
    ApplyConfiguration, JSONPatch, MatchCondition, MatchResources, MutatingAdmissionPolicy,
    MutatingAdmissionPolicyBinding, MutatingAdmissionPolicyBindingSpec,
    MutatingAdmissionPolicySpec, Mutation, NamedRuleWithOperations,
};
