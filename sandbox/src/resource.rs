//! The resource types the API serves: built-in kinds and those registered by
//! CustomResourceDefinitions, with what discovery, storage and tables need to know of each.

use std::collections::BTreeMap;

use serde_json::Value;

/// A column of server-side Table output.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// Column header.
    pub name: String,
    /// OpenAPI type of the cells (`string`, `integer`, `date`, ...).
    pub type_: String,
    /// Simple JSONPath (`.status.phase`) evaluated against each object.
    pub json_path: String,
    /// Priority: 0 is shown by default, higher only with `-o wide`.
    pub priority: i64,
    /// Description shown by `kubectl explain`-like tools.
    pub description: String,
}

/// One served version of a resource.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group; empty for core.
    pub group: String,
    /// Version served under this entry.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name (URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether the `status` subresource exists.
    pub status_subresource: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Extra table columns besides Name (and Age, appended when not given).
    pub columns: Vec<Column>,
    /// The OpenAPI v3 schema of a custom resource version, for defaulting and validation.
    pub schema: Option<Value>,
    /// Whether this version is the one objects are stored in.
    pub storage: bool,
    /// Whether the resource came from a CustomResourceDefinition.
    pub custom: bool,
}

impl ResourceType {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` (or just `plural` for core), as error messages name resources.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The verbs discovery advertises.
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

fn col(name: &str, type_: &str, json_path: &str, priority: i64) -> Column {
    Column {
        name: name.to_string(),
        type_: type_.to_string(),
        json_path: json_path.to_string(),
        priority,
        description: String::new(),
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    status: bool,
    short: &[&str],
    columns: Vec<Column>,
) -> ResourceType {
    ResourceType {
        group: group.to_string(),
        version: version.to_string(),
        kind: kind.to_string(),
        plural: plural.to_string(),
        singular: kind.to_lowercase(),
        namespaced,
        status_subresource: status,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        columns,
        schema: None,
        storage: true,
        custom: false,
    }
}

/// The built-in kinds the sandbox serves.
pub fn builtins() -> Vec<ResourceType> {
    let mut all = vec![
        builtin(
            "",
            "v1",
            "Namespace",
            "namespaces",
            false,
            true,
            &["ns"],
            vec![col("Status", "string", ".status.phase", 0)],
        ),
        builtin("", "v1", "Pod", "pods", true, true, &["po"], Vec::new()),
        builtin(
            "",
            "v1",
            "Service",
            "services",
            true,
            true,
            &["svc"],
            Vec::new(),
        ),
        builtin(
            "",
            "v1",
            "Endpoints",
            "endpoints",
            true,
            false,
            &["ep"],
            Vec::new(),
        ),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
            false,
            &["cm"],
            Vec::new(),
        ),
        builtin(
            "",
            "v1",
            "Secret",
            "secrets",
            true,
            false,
            &[],
            vec![col("Type", "string", ".type", 0)],
        ),
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            false,
            &["sa"],
            Vec::new(),
        ),
        builtin(
            "",
            "v1",
            "Event",
            "events",
            true,
            false,
            &["ev"],
            // Both Event APIs print kube-apiserver's event columns (`table::to_table`).
            Vec::new(),
        ),
        builtin(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
            true,
            &["deploy"],
            Vec::new(),
        ),
        builtin(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            true,
            true,
            &["rs"],
            vec![
                col("Desired", "integer", ".spec.replicas", 0),
                col("Current", "integer", ".status.replicas", 0),
                col("Ready", "integer", ".status.readyReplicas", 0),
            ],
        ),
        builtin(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
            false,
            &[],
            vec![col("AddressType", "string", ".addressType", 0)],
        ),
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            true,
            &["pdb"],
            vec![
                col("Min Available", "string", ".spec.minAvailable", 0),
                col("Max Unavailable", "string", ".spec.maxUnavailable", 0),
                col(
                    "Allowed Disruptions",
                    "integer",
                    ".status.disruptionsAllowed",
                    0,
                ),
            ],
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            false,
            &[],
            vec![col("Holder", "string", ".spec.holderIdentity", 0)],
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            false,
            &["ev"],
            // Both Event APIs print kube-apiserver's event columns (`table::to_table`).
            Vec::new(),
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            false,
            false,
            &[],
            Vec::new(),
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            false,
            false,
            &[],
            Vec::new(),
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            true,
            false,
            &[],
            Vec::new(),
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
            false,
            &[],
            vec![col("Role", "string", ".roleRef.name", 0)],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            false,
            &[],
            Vec::new(),
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            false,
            &[],
            vec![col("Role", "string", ".roleRef.name", 0)],
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
            &["crd", "crds"],
            vec![col("Created At", "date", ".metadata.creationTimestamp", 0)],
        ),
    ];
    for r in &mut all {
        if matches!(
            r.kind.as_str(),
            "Pod"
                | "Service"
                | "Deployment"
                | "ReplicaSet"
                | "ConfigMap"
                | "Secret"
                | "ServiceAccount"
        ) && r.group != "events.k8s.io"
        {
            r.categories = vec!["all".to_string()];
        }
        if matches!(r.kind.as_str(), "ConfigMap" | "Secret" | "ServiceAccount") {
            r.categories.clear();
        }
    }
    all
}

/// All served resource types, indexed for lookup by URL and by kind.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    /// (group, version, plural) → type.
    by_path: BTreeMap<(String, String, String), ResourceType>,
}

impl Registry {
    /// A registry holding the built-in kinds.
    pub fn with_builtins() -> Self {
        let mut reg = Registry::default();
        for r in builtins() {
            reg.insert(r);
        }
        reg
    }

    /// Adds or replaces a resource type.
    pub fn insert(&mut self, r: ResourceType) {
        self.by_path
            .insert((r.group.clone(), r.version.clone(), r.plural.clone()), r);
    }

    /// Removes every version of a custom resource `plural.group`.
    pub fn remove_custom(&mut self, group: &str, plural: &str) {
        self.by_path
            .retain(|(g, _, p), r| !(r.custom && g == group && p == plural));
    }

    /// The type served at `/apis/group/version/plural`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.by_path
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// The type of `kind` in `apiVersion`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceType> {
        let (group, version) = split_api_version(api_version);
        self.by_path
            .values()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
    }

    /// The storage version's type for `plural.group`.
    pub fn storage(&self, group: &str, plural: &str) -> Option<&ResourceType> {
        let mut found = None;
        for r in self.by_path.values() {
            if r.group == group && r.plural == plural {
                if r.storage {
                    return Some(r);
                }
                found.get_or_insert(r);
            }
        }
        found
    }

    /// Every served type.
    pub fn all(&self) -> impl Iterator<Item = &ResourceType> {
        self.by_path.values()
    }

    /// Groups with their versions, core group first, in a stable order.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for r in self.by_path.values() {
            match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, vs)) => {
                    if !vs.contains(&r.version) {
                        vs.push(r.version.clone());
                    }
                }
                None => out.push((r.group.clone(), vec![r.version.clone()])),
            }
        }
        for (_, vs) in &mut out {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }
}

/// Splits `group/version` (or `version`) into its parts.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// Kubernetes version ordering: GA > beta > alpha, higher numbers first.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major: u32 = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    (level, major, num.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ga_versions_sort_before_beta_and_alpha() {
        let mut v = vec!["v1alpha1", "v1", "v2beta1", "v1beta2", "v2"];
        v.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(v, vec!["v2", "v1", "v2beta1", "v1beta2", "v1alpha1"]);
    }

    #[test]
    fn registry_finds_builtins_by_path_and_kind() {
        let reg = Registry::with_builtins();
        assert_eq!(
            reg.get("apps", "v1", "deployments")
                .map(|r| r.kind.as_str()),
            Some("Deployment")
        );
        assert_eq!(
            reg.by_kind("v1", "Pod").map(|r| r.plural.as_str()),
            Some("pods")
        );
        assert!(reg.get("", "v1", "deployments").is_none());
    }
}
