//! Decoding built-in kinds as kube-apiserver does before anything else: a body whose fields
//! have the wrong JSON types (`"spec": "nonsense"`) is refused with 400, naming the kind.
//! Unknown fields are not refused here (see the README's deviations).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

fn check<T: DeserializeOwned>(obj: &Value) -> Result<(), String> {
    serde_json::from_value::<T>(obj.clone())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Checks that `obj` (with `apiVersion` and `kind` set) decodes as the built-in `group`/`kind`;
/// kinds the sandbox has no type for pass.
pub fn built_in(group: &str, version: &str, kind: &str, obj: &Value) -> Result<(), ApiError> {
    use k8s_openapi::api::{
        admissionregistration::v1 as admission, apps::v1 as apps, coordination::v1 as coordination,
        core::v1 as core, discovery::v1 as discovery, events::v1 as events, policy::v1 as policy,
        rbac::v1 as rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    let result = match (group, kind) {
        ("", "Namespace") => check::<core::Namespace>(obj),
        ("", "Pod") => check::<core::Pod>(obj),
        ("", "Service") => check::<core::Service>(obj),
        ("", "Endpoints") => check::<core::Endpoints>(obj),
        ("", "ConfigMap") => check::<core::ConfigMap>(obj),
        ("", "Secret") => check::<core::Secret>(obj),
        ("", "ServiceAccount") => check::<core::ServiceAccount>(obj),
        ("", "Event") => check::<core::Event>(obj),
        ("apps", "Deployment") => check::<apps::Deployment>(obj),
        ("apps", "ReplicaSet") => check::<apps::ReplicaSet>(obj),
        ("discovery.k8s.io", "EndpointSlice") => check::<discovery::EndpointSlice>(obj),
        ("policy", "PodDisruptionBudget") => check::<policy::PodDisruptionBudget>(obj),
        ("coordination.k8s.io", "Lease") => check::<coordination::Lease>(obj),
        ("events.k8s.io", "Event") => check::<events::Event>(obj),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            check::<admission::MutatingWebhookConfiguration>(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            check::<admission::ValidatingWebhookConfiguration>(obj)
        }
        ("rbac.authorization.k8s.io", "Role") => check::<rbac::Role>(obj),
        ("rbac.authorization.k8s.io", "RoleBinding") => check::<rbac::RoleBinding>(obj),
        ("rbac.authorization.k8s.io", "ClusterRole") => check::<rbac::ClusterRole>(obj),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            check::<rbac::ClusterRoleBinding>(obj)
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            check::<apiextensions::CustomResourceDefinition>(obj)
        }
        _ => Ok(()),
    };
    result.map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrong_types_are_refused_and_unknown_fields_pass() {
        let bad = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": "nonsense"});
        let err = built_in("", "v1", "Service", &bad).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.message
                .starts_with("Service in version \"v1\" cannot be handled as a Service: ")
        );
        let extra =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "extra": 1});
        assert!(built_in("", "v1", "ConfigMap", &extra).is_ok());
    }
}
