//! What the verbs do differently by kind, as kube-apiserver's per-kind strategies and the
//! controllers behind them do: one [`KindHooks`] implementation per special kind, looked up in
//! one table by group and kind. Kinds not in the table take the defaults (no special case).

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::{ApiServer, meta_str, metadata_mut};
use crate::clock::now_rfc3339 as now;
use crate::crd;
use crate::error::ApiError;
use crate::ids::new_uid;
use crate::resource::ResourceType;
use crate::store::ResKey;

/// Per-kind behaviour of the write verbs; every method's default is "nothing special".
pub(super) trait KindHooks: Sync {
    /// Whether names must be DNS subdomains (RBAC names are path segments and may hold `:`).
    fn names_are_dns_subdomains(&self) -> bool {
        true
    }

    /// Sets what the server sets on a new object once its metadata is reset, before defaulting.
    fn prepare_create(&self, _obj: &mut Value) {}

    /// Sets what the server keeps on an update from the current object's metadata.
    fn prepare_update(&self, _obj: &mut Value, _current_metadata: &Value) {}

    /// Validates and assigns server-owned fields on create and update, after defaulting.
    fn normalize(
        &self,
        _server: &ApiServer,
        _rt: &ResourceType,
        _obj: &mut Value,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Sets the status the server owns, on create (`current` is `None`) and on writes to the
    /// main resource.
    fn server_status(&self, _obj: &mut Value, _current: Option<&Value>) {}

    /// Side effects of a stored create, after [`KindHooks::after_write`].
    fn after_create(&self, _server: &ApiServer, _obj: &Value) {}

    /// Side effects of every stored create or update.
    fn after_write(&self, _server: &ApiServer, _obj: &Value) {}

    /// Side effects of the object's removal from the store.
    fn after_remove(&self, _server: &ApiServer, _obj: &Value) {}

    /// Whether an object being deleted whose finalizers are gone must still stay.
    fn holds_removal(&self, _obj: &Value) -> bool {
        false
    }

    /// Whether a delete always marks the object (deletionTimestamp) instead of removing it at
    /// once, even without finalizers.
    fn deletes_in_two_phases(&self) -> bool {
        false
    }

    /// Sets what changes when the object is marked for deletion, besides its metadata.
    fn deletion_started(&self, _obj: &mut Value) {}

    /// Whether a delete that removes the object at once answers with the object rather than a
    /// `Status`.
    fn delete_answers_with_object(&self) -> bool {
        false
    }
}

/// The hooks of `group`/`kind`.
pub(super) fn hooks(group: &str, kind: &str) -> &'static dyn KindHooks {
    KINDS
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)
        .map_or(&Plain, |(_, _, h)| *h)
}

const RBAC: &str = "rbac.authorization.k8s.io";

/// The special kinds; every other kind is [`Plain`].
static KINDS: &[(&str, &str, &dyn KindHooks)] = &[
    ("", "Namespace", &Namespace),
    ("", "Service", &Service),
    ("", "Pod", &Pod),
    ("apiextensions.k8s.io", "CustomResourceDefinition", &Crd),
    (RBAC, "Role", &Rbac),
    (RBAC, "RoleBinding", &Rbac),
    (RBAC, "ClusterRole", &Rbac),
    (RBAC, "ClusterRoleBinding", &Rbac),
    (
        super::initialization::GROUP,
        super::initialization::KIND,
        &InitializerConfiguration,
    ),
];

struct Plain;
impl KindHooks for Plain {}

/// RBAC objects: names are path segments (`system:controller:x`), not DNS subdomains.
struct Rbac;
impl KindHooks for Rbac {
    fn names_are_dns_subdomains(&self) -> bool {
        false
    }
}

/// Pods: a delete answers with the pod, as kube-apiserver's pod storage does.
struct Pod;
impl KindHooks for Pod {
    fn delete_answers_with_object(&self) -> bool {
        true
    }
}

/// Namespaces: the `kubernetes.io/metadata.name` label, the `kubernetes` finalizer in
/// `spec.finalizers`, a `default` ServiceAccount, and deletion through `Terminating`.
struct Namespace;
impl KindHooks for Namespace {
    fn prepare_create(&self, obj: &mut Value) {
        let name = meta_str(obj, "name").unwrap_or("").to_string();
        set_name_label(obj, json!(name));
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
    }

    fn prepare_update(&self, obj: &mut Value, current_metadata: &Value) {
        let name = current_metadata.get("name").cloned().unwrap_or(Value::Null);
        set_name_label(obj, name);
    }

    fn after_create(&self, server: &ApiServer, obj: &Value) {
        // What the service account controller does a moment later on a cluster.
        let namespace = meta_str(obj, "name").unwrap_or("");
        let sa = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": namespace, "uid": new_uid(), "creationTimestamp": now()},
        });
        // Already there is fine.
        let _ = server.store.create(&ResKey::new("", "serviceaccounts"), sa);
    }

    fn holds_removal(&self, obj: &Value) -> bool {
        obj.pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
    }

    fn deletes_in_two_phases(&self) -> bool {
        true
    }

    fn deletion_started(&self, obj: &mut Value) {
        obj["status"] = json!({"phase": "Terminating"});
    }
}

fn set_name_label(obj: &mut Value, name: Value) {
    let labels = metadata_mut(obj)
        .entry("labels")
        .or_insert_with(|| json!({}));
    if let Some(l) = labels.as_object_mut() {
        l.insert("kubernetes.io/metadata.name".into(), name);
    }
}

/// Services: a cluster IP from 10.96.0.0/16 for every type but `ExternalName`.
struct Service;
impl KindHooks for Service {
    fn normalize(
        &self,
        server: &ApiServer,
        _rt: &ResourceType,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        let ty = obj
            .pointer("/spec/type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP");
        if ty != "ExternalName"
            && obj
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            let n = server.next_ip.fetch_add(1, Ordering::Relaxed);
            let ip = format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff);
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("clusterIP".into(), json!(ip));
                spec.insert("clusterIPs".into(), json!([ip]));
            }
        }
        Ok(())
    }
}

/// InitializerConfigurations (legacy mode): validated as
/// `ValidateInitializerConfiguration` did, and stored without an empty `initializers` list as
/// 1.13 stored them (protobuf keeps no empty repeated field, so it was served without it).
struct InitializerConfiguration;
impl KindHooks for InitializerConfiguration {
    fn normalize(
        &self,
        _server: &ApiServer,
        rt: &ResourceType,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        let causes = super::initialization::validate_configuration(obj);
        if causes.is_empty() {
            if let Some(fields) = obj.as_object_mut()
                && fields.get("initializers").is_some_and(|list| {
                    list.is_null() || list.as_array().is_some_and(Vec::is_empty)
                })
            {
                fields.remove("initializers");
            }
            return Ok(());
        }
        let name = meta_str(obj, "name").unwrap_or("");
        Err(ApiError::invalid(&rt.group, &rt.kind, name, causes))
    }
}

/// CustomResourceDefinitions: the name must be `plural.group`; a stored CRD registers (and a
/// removed one unregisters) its resource types; status is set once, established.
struct Crd;
impl KindHooks for Crd {
    fn normalize(
        &self,
        _server: &ApiServer,
        rt: &ResourceType,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        let name = meta_str(obj, "name").unwrap_or("");
        let types = crd::resource_types(obj);
        let Some(first) = types.first() else {
            return Err(ApiError::invalid(
                &rt.group,
                &rt.kind,
                name,
                vec![(
                    "spec".into(),
                    "Invalid value: a CRD needs group, names.plural, names.kind and a served version".into(),
                )],
            ));
        };
        let expected = format!("{}.{}", first.plural, first.group);
        if name != expected {
            return Err(ApiError::invalid(
                &rt.group,
                &rt.kind,
                name,
                vec![(
                    "metadata.name".into(),
                    format!(
                        "Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                    ),
                )],
            ));
        }
        Ok(())
    }

    fn server_status(&self, obj: &mut Value, current: Option<&Value>) {
        obj["status"] = current
            .and_then(|c| c.get("status").cloned())
            .unwrap_or_else(|| crd::established_status(obj, &now()));
    }

    fn after_write(&self, server: &ApiServer, obj: &Value) {
        let types = crd::resource_types(obj);
        let mut reg = server.store.registry_mut();
        if let Some(first) = types.first() {
            reg.remove_custom(&first.group, &first.plural);
        }
        for t in types {
            reg.insert(t);
        }
    }

    fn after_remove(&self, server: &ApiServer, obj: &Value) {
        let Some(first) = crd::resource_types(obj).into_iter().next() else {
            return;
        };
        let key = ResKey::new(&first.group, &first.plural);
        for o in server.store.list(&key, None).0 {
            let (ns, name) = crate::store::names(&o);
            let _ = server.store.remove(&key, &ns, &name, None);
        }
        server
            .store
            .registry_mut()
            .remove_custom(&first.group, &first.plural);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_outside_the_table_are_plain() {
        let plain = hooks("apps", "Deployment");
        assert!(plain.names_are_dns_subdomains());
        assert!(!plain.deletes_in_two_phases());
        assert!(!plain.delete_answers_with_object());
        // A custom resource that borrows a built-in kind's name is not that kind.
        assert!(!hooks("example.com", "Namespace").deletes_in_two_phases());
        assert!(hooks("example.com", "Role").names_are_dns_subdomains());
    }

    #[test]
    fn rbac_names_are_not_dns_subdomains() {
        for kind in ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"] {
            assert!(!hooks(RBAC, kind).names_are_dns_subdomains(), "{kind}");
        }
    }

    #[test]
    fn a_new_namespace_gets_its_name_label_and_finalizer() {
        let mut ns = json!({"metadata": {"name": "team-a", "labels": {"x": "y"}}});
        hooks("", "Namespace").prepare_create(&mut ns);
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "team-a"
        );
        assert_eq!(ns["metadata"]["labels"]["x"], "y");
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    }

    #[test]
    fn an_updated_namespace_keeps_its_name_label() {
        let mut ns = json!({"metadata": {"name": "team-a", "labels": {}}});
        hooks("", "Namespace").prepare_update(&mut ns, &json!({"name": "team-a"}));
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "team-a"
        );
    }

    #[test]
    fn a_namespace_stays_while_its_spec_finalizers_remain() {
        let h = hooks("", "Namespace");
        assert!(h.holds_removal(&json!({"spec": {"finalizers": ["kubernetes"]}})));
        assert!(!h.holds_removal(&json!({"spec": {"finalizers": []}})));
        assert!(h.deletes_in_two_phases());
        let mut ns = json!({});
        h.deletion_started(&mut ns);
        assert_eq!(ns["status"]["phase"], "Terminating");
    }

    #[test]
    fn a_crd_keeps_the_status_it_has() {
        let mut crd = json!({"status": {"x": 1}});
        hooks("apiextensions.k8s.io", "CustomResourceDefinition")
            .server_status(&mut crd, Some(&json!({"status": {"kept": true}})));
        assert_eq!(crd["status"], json!({"kept": true}));
    }
}
