//! What the bodies share: raw requests, polling, error codes and fixtures.

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::target::Target;

/// The ConfigMap kube-controller-manager publishes into every namespace (the sandbox does not;
/// see the README's differences). Bodies that count ConfigMaps leave it out.
pub const ROOT_CA: &str = "kube-root-ca.crt";

/// How long a controller (garbage collector, namespace deleter) may take to act.
pub const CONTROLLER_TIMEOUT: u64 = 60;

/// A raw request through the client: status code and JSON body (a string if not JSON).
pub async fn raw(
    client: &kube::Client,
    method: &str,
    uri: &str,
    accept: Option<&str>,
    content_type: Option<&str>,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    let mut req = http::Request::builder().method(method).uri(uri);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    if let Some(c) = content_type {
        req = req.header("content-type", c);
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let req = req.body(bytes)?;
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .with_context(|| format!("{method} {uri}"))?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect_bytes().await?;
    let value = serde_json::from_slice(&body)
        .unwrap_or(Value::String(String::from_utf8_lossy(&body).into()));
    Ok((status, value))
}

/// Polls `check` every 50 ms until it holds or `secs` pass.
pub async fn eventually<F, Fut>(secs: u64, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The code and reason of an API error.
pub fn api_code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
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
