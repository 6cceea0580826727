//! `admissionregistration.k8s.io/v1beta1` `MutatingAdmissionPolicy` and
//! `MutatingAdmissionPolicyBinding`, field for field as k8s-openapi 0.27 defines them under its
//! `v1_34`/`v1_35` features.
//!
//! The workspace builds k8s-openapi with `v1_31` (the oldest Kubernetes it supports), and
//! k8s-openapi allows one version feature per build, so its own types are out of reach; these
//! carry the same JSON and implement the same traits, so `kube::Api` serves them as it serves
//! k8s-openapi's. The parts shared with ValidatingAdmissionPolicy (`MatchResources`,
//! `MatchCondition`, `NamedRuleWithOperations`, `ParamRef`) are k8s-openapi's own v1beta1
//! types. When the workspace moves to `v1_34` or later, replace this module with a `pub use` of
//! `k8s_openapi::api::admissionregistration::v1beta1::*`.

use k8s_openapi::api::admissionregistration::v1beta1::{MatchCondition, MatchResources, ParamRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

/// The API version both kinds are served at.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1beta1";

/// A mutation, in the API server, of the objects a binding selects.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct MutatingAdmissionPolicy {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What it matches and how it mutates.
    pub spec: Option<MutatingAdmissionPolicySpec>,
}

/// The policy's specification.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MutatingAdmissionPolicySpec {
    /// `Fail` or `Ignore`: what an evaluation error does to the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<String>,
    /// Every condition must be true for the policy to act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_conditions: Option<Vec<MatchCondition>>,
    /// The requests the policy may act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_constraints: Option<MatchResources>,
    /// The mutations, evaluated in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutations: Option<Vec<Mutation>>,
    /// `Never` or `IfNeeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reinvocation_policy: Option<String>,
}

/// One mutation: a JSON patch or an apply configuration, computed by CEL.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mutation {
    /// `JSONPatch` or `ApplyConfiguration`.
    pub patch_type: String,
    /// With `patchType: JSONPatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_patch: Option<JsonPatch>,
    /// With `patchType: ApplyConfiguration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_configuration: Option<ApplyConfiguration>,
}

/// A CEL expression returning a list of `JSONPatch` values.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct JsonPatch {
    /// The expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

/// A CEL expression returning an `Object` merged by server-side apply rules.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ApplyConfiguration {
    /// The expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

/// Puts a policy in force, for all it matches or a narrower set.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct MutatingAdmissionPolicyBinding {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Which policy, and where.
    pub spec: Option<MutatingAdmissionPolicyBindingSpec>,
}

/// The binding's specification.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MutatingAdmissionPolicyBindingSpec {
    /// Narrows what the policy matches (unset: all of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_resources: Option<MatchResources>,
    /// The parameter object (unused here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_ref: Option<ParamRef>,
    /// The policy bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_name: Option<String>,
}

macro_rules! cluster_resource {
    ($type:ty, $kind:literal, $plural:literal) => {
        impl k8s_openapi::Resource for $type {
            const API_VERSION: &'static str = API_VERSION;
            const GROUP: &'static str = "admissionregistration.k8s.io";
            const KIND: &'static str = $kind;
            const VERSION: &'static str = "v1beta1";
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::ClusterResourceScope;
        }

        impl k8s_openapi::ListableResource for $type {
            const LIST_KIND: &'static str = concat!($kind, "List");
        }

        impl k8s_openapi::Metadata for $type {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        // With `apiVersion` and `kind`, as k8s-openapi writes its objects: server-side apply
        // needs both in the body.
        impl Serialize for $type {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let fields = 3 + usize::from(self.spec.is_some());
                let mut state = serializer.serialize_struct($kind, fields)?;
                state.serialize_field("apiVersion", API_VERSION)?;
                state.serialize_field("kind", $kind)?;
                state.serialize_field("metadata", &self.metadata)?;
                if let Some(spec) = &self.spec {
                    state.serialize_field("spec", spec)?;
                }
                state.end()
            }
        }
    };
}

cluster_resource!(
    MutatingAdmissionPolicy,
    "MutatingAdmissionPolicy",
    "mutatingadmissionpolicies"
);
cluster_resource!(
    MutatingAdmissionPolicyBinding,
    "MutatingAdmissionPolicyBinding",
    "mutatingadmissionpolicybindings"
);
