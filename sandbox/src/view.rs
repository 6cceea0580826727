//! Read access to the API server's stored objects, for the parts that act on them from inside
//! the request path (admission) or beside it (the service proxy).

use std::collections::BTreeMap;

use parking_lot::Mutex;
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

impl<'a> ResourceRef<'a> {
    /// The resource `resource` of `group`/`version`.
    pub const fn new(group: &'a str, version: &'a str, resource: &'a str) -> Self {
        ResourceRef {
            group,
            version,
            resource,
        }
    }
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

/// A view over objects held in memory, keyed by resource plural (group and version are not
/// told apart): for exercising what reads a [`ClusterView`] without an API server.
#[derive(Debug, Default)]
pub struct MemoryView {
    objects: Mutex<BTreeMap<String, Vec<Value>>>,
}

impl MemoryView {
    /// Adds `object` to the objects of `resource`.
    pub fn add(&self, resource: &str, object: Value) {
        self.objects
            .lock()
            .entry(resource.to_owned())
            .or_default()
            .push(object);
    }
}

impl ClusterView for MemoryView {
    fn list(&self, resource: ResourceRef<'_>, namespace: Option<&str>) -> Vec<Value> {
        let objects = self.objects.lock();
        objects
            .get(resource.resource)
            .into_iter()
            .flatten()
            .filter(|o| {
                namespace.is_none()
                    || o.pointer("/metadata/namespace").and_then(Value::as_str) == namespace
            })
            .cloned()
            .collect()
    }

    fn get(&self, resource: ResourceRef<'_>, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.list(resource, namespace)
            .into_iter()
            .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
    }
}
