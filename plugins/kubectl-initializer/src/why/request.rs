//! What `why` observes about one request: the attributes the API server's webhook matching reads.

use std::collections::BTreeMap;

use serde_json::Value;

/// What the API server knows about one request: the attributes webhook matching reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// API group (`""` for core).
    pub group: String,
    /// API version (`v1`); another version of the same resource matches a rule too unless its
    /// `matchPolicy` is `Exact`.
    pub version: String,
    /// Plural resource name (`deployments`), as rules name it.
    pub resource: String,
    /// Subresource, empty for the object itself.
    pub subresource: String,
    /// The object's kind (`Deployment`), shown in messages only.
    pub kind: String,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
    /// The object's namespace (namespaced resources only).
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    /// The object as it would be sent (labels and annotations are read from it).
    pub object: Value,
    /// The labels of the object's namespace (for a Namespace, its own).
    pub namespace_labels: BTreeMap<String, String>,
}

impl Request {
    /// `group/version resource` as shown in messages (`v1 pods`, `apps/v1 deployments`).
    pub fn resource_shown(&self) -> String {
        let gv = if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        format!("{gv} {resource}")
    }

    /// `namespace/name` or `name`.
    pub fn object_shown(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{}/{}", self.kind, ns, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }

    pub(super) fn labels(&self) -> BTreeMap<String, String> {
        string_map(self.object.pointer("/metadata/labels"))
    }

    /// Whether this is a request for a Namespace object (cluster-scoped, matched against its own
    /// labels by `namespaceSelector`).
    pub(super) fn is_namespace_object(&self) -> bool {
        self.group.is_empty() && self.resource == "namespaces" && self.subresource.is_empty()
    }
}

/// The labels (or annotations) of a JSON map; non-string values are skipped.
pub fn string_map(map: Option<&Value>) -> BTreeMap<String, String> {
    map.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}
