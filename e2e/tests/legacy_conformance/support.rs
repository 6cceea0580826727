//! What the bodies share: the configuration collection, raw creates that may block, and
//! waiting for a pending object; pending lists are read with `initializer_e2e::legacy`.
//! Objects are raw JSON throughout: k8s-openapi has no `metadata.initializers` (removed in 1.14)
//! and a typed object would drop it.

use initializer_e2e::conformance::Scoped;
use std::time::Duration;

use anyhow::{Context, bail};
use initializer_e2e::legacy::pending_names;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

pub use initializer_e2e::conformance::{delete, get, patch, post, put};

use crate::target::Target;

/// The `InitializerConfiguration` collection (cluster-scoped).
pub const CONFIGURATIONS: &str =
    "/apis/admissionregistration.k8s.io/v1alpha1/initializerconfigurations";

/// How long after creating or deleting a configuration before relying on it: 1.13's plugin
/// re-lists configurations every second (`defaultInterval` in
/// `k8s.io/apiserver/pkg/admission/configuration/initializer_manager.go`, 1.13).
pub const SETTLE: Duration = Duration::from_millis(1500);

/// How long a body waits for something another client does (a name to appear pending).
pub const WAIT: Duration = Duration::from_secs(20);

/// A rule over `resources` in any group and version.
pub fn rule(resources: &[&str]) -> Value {
    json!({"apiGroups": ["*"], "apiVersions": ["*"], "resources": resources})
}

/// The rule matching ConfigMaps.
pub fn configmaps_rule() -> Value {
    json!({"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]})
}

/// The rule matching Deployments (`apps/v1`).
pub fn deployments_rule() -> Value {
    json!({"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]})
}

/// An initializer name unique to the body: `<base>.<suffix>.example.com`.
pub fn initializer_name(t: &Target, base: &str) -> String {
    format!("{base}.{}.example.com", t.suffix())
}

/// An `InitializerConfiguration` named `name` with `initializers` (`[{name, rules}]`).
pub fn configuration(name: &str, initializers: Value) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": {"name": name},
        "initializers": initializers,
    })
}

/// `?includeUninitialized=true` appended to a path.
pub fn uninit(path: &str) -> String {
    format!("{path}?includeUninitialized=true")
}

/// Creates `object` in the namespace's ConfigMaps with `?includeUninitialized=true`; returns
/// the answer.
pub async fn create_uninitialized(t: &Target, object: Value) -> anyhow::Result<(u16, Value)> {
    post(&t.client(), &uninit(&configmaps(t)), object).await
}

/// Posts configuration `name` with `initializers` (deleted after the body); returns the answer.
pub async fn post_configuration(
    t: &Target,
    name: &str,
    initializers: Value,
) -> anyhow::Result<(u16, Value)> {
    t.delete_afterwards(name);
    post(
        &t.client(),
        CONFIGURATIONS,
        configuration(name, initializers),
    )
    .await
}

/// Creates a configuration (deleted after the body) and waits until the API server uses it.
pub async fn configure(t: &Target, name: &str, initializers: Value) -> anyhow::Result<()> {
    let (code, body) = post_configuration(t, name, initializers).await?;
    if code != 201 {
        bail!("creating configuration {name} answered {code}: {body}");
    }
    tokio::time::sleep(SETTLE).await;
    Ok(())
}

/// One configuration `t.unique(base)` with one initializer on ConfigMaps, named
/// `initializer_name(t, initializer)`; returns that name.
pub async fn configure_configmaps(
    t: &Target,
    base: &str,
    initializer: &str,
) -> anyhow::Result<String> {
    let name = initializer_name(t, initializer);
    configure(
        t,
        &t.unique(base),
        json!([{"name": name, "rules": [configmaps_rule()]}]),
    )
    .await?;
    Ok(name)
}

/// The ConfigMaps collection of the body's namespace.
pub fn configmaps(t: &Target) -> String {
    format!("/api/v1/namespaces/{}/configmaps", t.namespace())
}

/// One ConfigMap's path in the body's namespace.
pub fn configmap_path(t: &Target, name: &str) -> String {
    format!("{}/{name}", configmaps(t))
}

/// A ConfigMap with `data: {a: b}`.
pub fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}})
}

/// Starts `POST path` with `body` in a task of its own: a create that blocks until
/// initialization ends answers when another client acts.
pub fn create_in_background(
    t: &Target,
    path: String,
    body: Value,
) -> JoinHandle<anyhow::Result<(u16, Value)>> {
    let client = t.client();
    tokio::spawn(async move { post(&client, &path, body).await })
}

/// Starts a blocking create of ConfigMap `name` and waits until it is stored with a pending
/// name; returns the create, the object's path and the stored object.
pub async fn blocked_create(
    t: &Target,
    name: &str,
) -> anyhow::Result<(JoinHandle<anyhow::Result<(u16, Value)>>, String, Value)> {
    let create = create_in_background(t, configmaps(t), cm(name));
    let path = configmap_path(t, name);
    let stored = wait_pending(t, &path).await?;
    Ok((create, path, stored))
}

/// Polls `GET path?includeUninitialized=true` until the object exists with a pending name;
/// returns it.
pub async fn wait_pending(t: &Target, path: &str) -> anyhow::Result<Value> {
    let uri = uninit(path);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (code, body) = get(&t.client(), &uri).await?;
        if code == 200 && !pending_names(&body).is_empty() {
            return Ok(body);
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{path} did not appear with a pending name within {}s: {code} {body}",
                WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The result of a background create, within `timeout`.
pub async fn answer_of(
    create: JoinHandle<anyhow::Result<(u16, Value)>>,
    timeout: Duration,
) -> anyhow::Result<(u16, Value)> {
    tokio::time::timeout(timeout, create)
        .await
        .context("the create did not answer in time")?
        .context("the create's task failed")?
}

/// `object` without its first pending name (the initializer's own removal).
pub fn without_first_pending(mut object: Value) -> Value {
    if let Some(pending) = object["metadata"]["initializers"]["pending"].as_array_mut()
        && !pending.is_empty()
    {
        pending.remove(0);
    }
    object
}

/// The names of the items of a list answer, sorted.
pub fn item_names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Fails unless the answer's `message` is `expected`, showing the answer.
pub fn expect_message(body: &Value, expected: &str) -> anyhow::Result<()> {
    if body["message"] != expected {
        bail!("{body}");
    }
    Ok(())
}

/// Fails unless `code` is `expected`, showing the answer.
pub fn expect_code(what: &str, code: u16, body: &Value, expected: u16) -> anyhow::Result<()> {
    if code != expected {
        bail!("{what}: expected {expected}, got {code}: {body}");
    }
    Ok(())
}
