//! What the bodies share: error messages, fixtures and the few calls every body makes (create,
//! merge patch, waiting for an object to go); raw requests come from
//! `initializer_e2e::conformance` and `initializer-test-support`, polling and error codes from
//! the latter.

use initializer_e2e::conformance::Scoped;
use std::fmt::Debug;
use std::time::Duration;

use anyhow::bail;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub use initializer_e2e::conformance::{get, patch, post, put};
pub use initializer_test_support::api::{api_code, raw};
pub use initializer_test_support::eventually;

use crate::target::Target;

/// The ConfigMap kube-controller-manager publishes into every namespace (the sandbox does not;
/// see `sandbox/README.md`'s differences). Bodies that count ConfigMaps leave it out.
pub const ROOT_CA: &str = "kube-root-ca.crt";

/// How long a controller (garbage collector, namespace deleter) may take to act.
pub const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(60);

/// Creates `object` through `api`.
pub async fn create<K>(api: &Api<K>, object: &K) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Serialize + Debug,
{
    api.create(&PostParams::default(), object).await
}

/// Merge-patches the object `name` of `api` with `patch`.
pub async fn merge<K>(api: &Api<K>, name: &str, patch: Value) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// Merge-patches the status of the object `name` of `api` with `patch`.
pub async fn merge_status<K>(api: &Api<K>, name: &str, patch: Value) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Debug,
{
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// Whether the object `name` of `api` is gone within [`CONTROLLER_TIMEOUT`].
pub async fn gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: Clone + DeserializeOwned + Debug,
{
    eventually(CONTROLLER_TIMEOUT, || async {
        matches!(api.get_opt(name).await, Ok(None))
    })
    .await
}

/// `GET uri` as a Table (what `kubectl get` prints): the code and the table.
pub async fn get_table(client: &kube::Client, uri: &str) -> anyhow::Result<(u16, Value)> {
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    raw(client, "GET", uri, Some(accept), None, None).await
}

/// Creates ConfigMap `name` with `labels` in the body's namespace; returns the namespace's
/// ConfigMaps and the created object.
pub async fn create_configmap(
    t: &Target,
    name: &str,
    labels: Value,
) -> anyhow::Result<(Api<ConfigMap>, ConfigMap)> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    let created = create(&cms, &cm(name, labels)).await?;
    Ok((cms, created))
}

/// The message of an API error.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => format!("{other}"),
    }
}

/// The error of a result that must have failed.
pub fn refused<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> anyhow::Result<kube::Error> {
    match result {
        Ok(value) => bail!("expected the API to refuse, it answered {value:?}"),
        Err(e) => Ok(e),
    }
}

/// Names of ConfigMaps, without the published root CA.
pub fn names(items: Vec<ConfigMap>) -> Vec<String> {
    let mut names: Vec<String> = items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n != ROOT_CA)
        .collect();
    names.sort();
    names
}

/// A ConfigMap with `data: {k: v}`.
pub fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"}
    }))
    .unwrap()
}

/// A one-replica Deployment.
pub fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "example/app:1", "env": [{"name": "A", "value": "1"}]}]}
            }
        }
    }))
    .unwrap()
}

/// A namespaced CRD of `kind` in `group` (plural `<kind>s`, lowercase) with one served and
/// stored version `v1` whose schema is `schema`; `version` adds to that version's fields.
pub fn namespaced_crd(group: &str, kind: &str, schema: Value, version: Value) -> Value {
    let singular = kind.to_lowercase();
    let plural = format!("{singular}s");
    let mut served = json!({
        "name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": schema}
    });
    if let (Some(fields), Value::Object(extra)) = (served.as_object_mut(), version) {
        fields.extend(extra);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": singular, "kind": kind},
            "versions": [served]
        }
    })
}

/// The Widget CRD in `group`: a status subresource, printer columns, a schema with a default,
/// a required field, an enum and bounds.
pub fn widget_crd(group: &str) -> Value {
    namespaced_crd(
        group,
        "Widget",
        json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "required": ["color"], "properties": {
                    "size": {"type": "integer", "default": 3, "minimum": 1, "maximum": 10},
                    "color": {"type": "string", "enum": ["red", "blue"]}
                }},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
            }
        }),
        json!({
            "subresources": {"status": {}},
            "additionalPrinterColumns": [
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}
            ]
        }),
    )
}

/// The Widget resource of `group` in `version`.
pub fn widget_resource(group: &str, version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, "Widget"), "widgets")
}

/// Installs the Widget CRD in the body's group; the Widgets of its namespace.
pub async fn install_widgets(t: &Target) -> anyhow::Result<Api<DynamicObject>> {
    t.install_crd(widget_crd(&t.group())).await?;
    Ok(Api::namespaced_with(
        t.client(),
        t.namespace(),
        &widget_resource(&t.group(), "v1"),
    ))
}

/// Installs the Widget CRD in the body's group and creates Widget `name` with `spec`; the
/// Widgets of the namespace and the created one.
pub async fn install_widgets_with(
    t: &Target,
    name: &str,
    spec: Value,
) -> anyhow::Result<(Api<DynamicObject>, DynamicObject)> {
    let widgets = install_widgets(t).await?;
    let created = create(&widgets, &widget(t, name, spec)).await?;
    Ok((widgets, created))
}

/// A Widget of the body's group.
pub fn widget(t: &Target, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{}/v1", t.group()), "kind": "Widget",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}
