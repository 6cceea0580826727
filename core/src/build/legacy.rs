//! The objects of the `InitializerConfiguration` backend, pure: the initializer's controller-mode
//! arguments, the ClusterRole and ClusterRoleBinding its ServiceAccount needs to watch and update
//! what it initializes, and the `InitializerConfiguration` itself
//! (`admissionregistration.k8s.io/v1alpha1`, as in Kubernetes 1.7–1.13:
//! `{"initializers": [{"name", "rules": [{"apiGroups", "apiVersions", "resources"}]}]}`, without
//! operations or scope, which that API did not have).

use initializer_crds::InterceptRule;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use super::labels;
use crate::selector;
use crate::validate::Validated;

/// What the `InitializerConfiguration` backend adds to an Initializer's objects.
#[derive(Clone, Debug, PartialEq)]
pub struct LegacyDesired {
    /// The name the initializer is pending as.
    pub pending_name: String,
    /// The configuration registered only while the initializer is healthy.
    pub configuration: DynamicObject,
    /// What the initializer's ServiceAccount may do cluster-wide.
    pub cluster_role: ClusterRole,
    /// Binds [`LegacyDesired::cluster_role`] to the initializer's ServiceAccount.
    pub cluster_role_binding: ClusterRoleBinding,
}

/// The API resource of `InitializerConfiguration` (cluster-scoped).
pub fn configuration_resource() -> ApiResource {
    initializer_crds::constants::legacy_configuration_resource()
}

/// The rules as the configuration and the controller's `--rules` take them.
pub fn rules_json(rules: &[InterceptRule]) -> Value {
    Value::Array(
        rules
            .iter()
            .map(|r| {
                json!({
                    "apiGroups": r.api_groups,
                    "apiVersions": r.api_versions,
                    "resources": r.resources,
                })
            })
            .collect(),
    )
}

/// The arguments that run the initializer in controller mode, before the spec's own: the
/// pending name, the rules, and the same namespace selector (and object selector) a webhook
/// would get, so that both backends intercept exactly the same objects.
pub fn controller_args(v: &Validated, pending_name: &str) -> Vec<String> {
    let namespace_selector = selector::namespace_selector(
        v.spec.namespaces.as_ref(),
        &v.operator_namespace,
        &v.namespace,
    );
    let mut args = vec![
        "--mode".to_string(),
        "controller".to_string(),
        "--pending-name".to_string(),
        pending_name.to_string(),
        "--rules".to_string(),
        rules_json(&v.spec.rules).to_string(),
        "--namespace-selector".to_string(),
        serde_json::to_string(&namespace_selector).unwrap_or_else(|_| "{}".into()),
    ];
    if let Some(object_selector) = &v.spec.object_selector {
        args.push("--object-selector".to_string());
        args.push(serde_json::to_string(object_selector).unwrap_or_else(|_| "{}".into()));
    }
    args
}

/// The ClusterRole of the initializer's ServiceAccount, least privilege for a controller that
/// initializes what the rules match: get, list and watch (with `includeUninitialized`), update
/// (the one write that mutates the object and removes its name) and `initialize` (the verb the
/// era's `Initializers` admission plugin checks before any update of an uninitialized object,
/// `canInitialize` in `plugin/pkg/admission/initialization/initialization.go`, k8s 1.7–1.13) on
/// the rules' resources, in every namespace (the API server adds the name in any namespace the
/// selector does not exclude); list and watch on namespaces, for the namespace selector.
pub fn cluster_role(v: &Validated, owner: Option<&OwnerReference>) -> ClusterRole {
    let mut rules: Vec<PolicyRule> = v
        .spec
        .rules
        .iter()
        .map(|r| PolicyRule {
            api_groups: Some(r.api_groups.clone()),
            resources: Some(r.resources.clone()),
            verbs: ["get", "list", "watch", "update", "initialize"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        })
        .collect();
    rules.push(PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["namespaces".into()]),
        verbs: ["list", "watch"].map(String::from).to_vec(),
        ..Default::default()
    });
    ClusterRole {
        metadata: cluster_meta(v, owner),
        rules: Some(rules),
        aggregation_rule: None,
    }
}

/// Binds the ClusterRole to the initializer's ServiceAccount.
pub fn cluster_role_binding(v: &Validated, owner: Option<&OwnerReference>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: cluster_meta(v, owner),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: v.names.cluster_role.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: v.names.base.clone(),
            namespace: Some(v.namespace.clone()),
            api_group: None,
        }]),
    }
}

/// Metadata of the cluster-scoped RBAC objects: labelled and owned like the workload (a
/// cluster-scoped object may be owned by the cluster-scoped Initializer, so they go with it).
fn cluster_meta(v: &Validated, owner: Option<&OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(v.names.cluster_role.clone()),
        labels: Some(labels(v)),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..Default::default()
    }
}

/// The `InitializerConfiguration`: one initializer, the pending name, the rules. Never owned:
/// the finalizer deletes it first, explicitly, as it does the webhook configuration.
pub fn configuration(v: &Validated, pending_name: &str) -> DynamicObject {
    let mut object = DynamicObject::new(&v.names.configuration, &configuration_resource());
    object.metadata.labels = Some(labels(v));
    object.data = json!({
        "initializers": [{"name": pending_name, "rules": rules_json(&v.spec.rules)}],
    });
    object
}

/// Every legacy object, when the spec asks for the `InitializerConfiguration` backend.
pub fn legacy(v: &Validated, owner: Option<&OwnerReference>) -> Option<LegacyDesired> {
    let pending_name = v.pending_name.clone()?;
    Some(LegacyDesired {
        configuration: configuration(v, &pending_name),
        cluster_role: cluster_role(v, owner),
        cluster_role_binding: cluster_role_binding(v, owner),
        pending_name,
    })
}

/// The names of the initializers a configuration found in the cluster registers, with their
/// rules: what the operator set in it, for comparing with what it wants.
pub fn registered_initializers(configuration: &DynamicObject) -> Option<&Value> {
    configuration.data.get("initializers")
}

/// What a configuration found in the cluster registers: each initializer's name and its rules
/// (as [`InterceptRule`]s, for [`crate::pending::reached`]), so that what waits on an orphaned
/// configuration's names can be released.
pub fn registered(configuration: &DynamicObject) -> Vec<(String, Vec<InterceptRule>)> {
    registered_initializers(configuration)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|initializer| {
            let name = initializer.get("name")?.as_str()?.to_string();
            let rules = serde_json::from_value(initializer.get("rules")?.clone()).ok()?;
            Some((name, rules))
        })
        .collect()
}
