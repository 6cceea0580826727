//! What the bodies share: error messages and fixtures; raw requests, polling and error codes
//! come from `initializer-test-support`.

use std::time::Duration;

use anyhow::bail;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

pub use initializer_test_support::api::{api_code, raw};
pub use initializer_test_support::eventually;

use crate::target::Target;

/// The ConfigMap kube-controller-manager publishes into every namespace (the sandbox does not;
/// see `sandbox/README.md`'s differences). Bodies that count ConfigMaps leave it out.
pub const ROOT_CA: &str = "kube-root-ca.crt";

/// How long a controller (garbage collector, namespace deleter) may take to act.
pub const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(60);

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

/// The Widget CRD in `group`: a status subresource, printer columns, a schema with a default,
/// a required field, an enum and bounds.
pub fn widget_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["color"], "properties": {
                            "size": {"type": "integer", "default": 3, "minimum": 1, "maximum": 10},
                            "color": {"type": "string", "enum": ["red", "blue"]}
                        }},
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
                    }
                }}
            }]
        }
    })
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

/// A Widget of the body's group.
pub fn widget(t: &Target, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{}/v1", t.group()), "kind": "Widget",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}
