//! Read access to the API server's stored objects, for the parts that act on them from inside
//! the request path (admission) or beside it (the service proxy).

use serde_json::Value;

/// A resource as the REST API names it: `("", "v1", "services")`,
/// `("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResourceRef<'a> {
    /// API group; empty for the core group.
    pub group: &'a str,
    /// API version within the group.
    pub version: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
}

/// A consistent, read-only view of the objects the API server stores.
///
/// Objects are returned as the JSON the REST API would serve (with `apiVersion` and `kind`).
pub trait ClusterView: Send + Sync {
    /// All objects of `resource`, in `namespace` or across all namespaces when `None`.
    fn list(&self, resource: ResourceRef<'_>, namespace: Option<&str>) -> Vec<Value>;

    /// One object, if it exists.
    fn get(&self, resource: ResourceRef<'_>, namespace: Option<&str>, name: &str) -> Option<Value>;
}
