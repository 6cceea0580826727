//! Reconcile tests: the real operator (`run_with`: controller, supervisor, leader election)
//! deploying a real SDK-built initializer (examples/test_initializer.rs) as local processes, and
//! registering, deregistering and cleaning up for real. Each test has one body, run on the
//! sandbox (`<topic>::<test>::on_sandbox`) and on the real control plane, kube-apiserver and
//! kube-controller-manager from the Go modules (`<topic>::<test>::on_real`; see `support`), as
//! `on_backends!` writes them; a body one backend cannot run says why, beside its name.
//!
//! The `on_real` tests need root (the control plane's network namespace): a plain `cargo test`
//! lists them as ignored, and `make unit-real` (or `cargo test -p initializer-operator --tests
//! -- --ignored`) runs them.
//!
//! One test binary with a module per topic, rather than a binary per topic: each binary links the
//! whole operator. The topics, in the order of an Initializer's life:
//!
//! - `lifecycle`: registered, out of the path, back, suspended, deleted;
//! - `validation`: what is refused is marked Invalid and neither deployed nor registered;
//! - `probe`: what the probe catches before and while the initializer is registered;
//! - `outage`: out of the path at once, without waiting for the probes;
//! - `leadership`: one leader writes, an old one writes nothing;
//! - `ownership`: what is the operator's is kept as it wants it, what is not is left alone;
//! - `namespaces`: where workloads run and with which rights;
//! - `guard`: who may create Initializers;
//! - `bounds`: what the operator's own account may not touch;
//! - `engine`: a preset moved into the API server once proven, and back.

// Test helpers outside #[test] functions may unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::panic)]

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod bounds;
mod engine;
mod guard;
mod leadership;
mod lifecycle;
mod namespaces;
mod outage;
mod ownership;
mod probe;
mod validation;

use std::time::Duration;

use initializer_crds::constants::INITIALIZER_LABEL;
use initializer_crds::{Initializer, Phase};
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::TestCluster;
// `on_backends!` runs each body through `crate::run`.
use support::operator::{GUARD_IMAGE as IMAGE, Operator, run};

const NS: &str = "initializer-system";
/// The operator's service account, as the bundle names it.
const OPERATOR_ACCOUNT: &str = initializer_packaging::manifest::OPERATOR_NAME;

/// A replica with leader election and the default 15 s lease, as pod `pod_name`, making its
/// API calls with `client`. (A shorter lease makes a loaded machine's slow renewals cost the
/// leader its right to write, by design.)
fn spawn_as(cluster: &TestCluster, client: Client, pod_name: &str) -> Operator {
    let flags = ["--leader-election", "--lease-duration-seconds", "15"];
    Operator::spawn_with(cluster, client, NS, pod_name, &flags)
}

/// A replica as [`spawn_as`] starts one, with the cluster's client.
fn spawn(cluster: &TestCluster, pod_name: &str) -> Operator {
    spawn_as(cluster, cluster.client(), pod_name)
}

/// Installs the CRD and the operator's namespace, and starts one operator replica.
async fn start(cluster: &TestCluster) -> (Client, Operator) {
    let client = install(cluster).await;
    let operator = spawn(cluster, "operator-test-0");
    (client, operator)
}

/// Installs the CRD and the operator's namespace.
async fn install(cluster: &TestCluster) -> Client {
    let client = cluster.client();
    support::install::install_crd_and_namespace(&client, NS).await;
    client
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|status| status.conditions.iter().flatten())
        .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

fn guard(name: &str) -> Initializer {
    support::initializer(
        name,
        json!({
            "image": IMAGE,
            "replicas": 1,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
            "health": {"periodSeconds": 1, "failureThreshold": 2, "successThreshold": 2, "latencyBudgetMillis": 500},
        }),
    )
}

/// Creates `initializer`, and returns the Initializers' API for what the test does next.
async fn create(client: &Client, initializer: &Initializer) -> Api<Initializer> {
    let api: Api<Initializer> = Api::all(client.clone());
    create_object(&api, initializer).await;
    api
}

/// Creates `object` with `api`; what the API server stored.
async fn create_object<K>(api: &Api<K>, object: &K) -> K
where
    K: Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    api.create(&PostParams::default(), object).await.unwrap()
}

/// Waits until the pods of the Initializer `name`, as listed, satisfy `holds`, failing as `what`
/// after `timeout`.
async fn wait_pods(
    client: &Client,
    name: &str,
    what: &str,
    timeout: Duration,
    holds: impl Fn(&[Pod]) -> bool,
) {
    wait_for(what, timeout, || async {
        holds(&pods_of(client, name).await)
    })
    .await;
}

/// Creates `initializer` and waits (as "registration", up to 90 s) until its configuration is
/// registered.
async fn create_registered(client: &Client, initializer: &Initializer) -> Api<Initializer> {
    let api = create(client, initializer).await;
    let name = initializer.name_any();
    wait_registered(client, &name, "registration", Duration::from_secs(90)).await;
    api
}

/// Merges `spec` into the spec of the Initializer `name`.
async fn patch_spec(api: &Api<Initializer>, name: &str, spec: serde_json::Value) {
    let patch = Patch::Merge(json!({ "spec": spec }));
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .unwrap();
}

/// Deletes the Initializer `name` and waits until it is gone, failing as `what` after
/// `timeout`.
async fn delete_and_wait_gone(api: &Api<Initializer>, name: &str, what: &str, timeout: Duration) {
    api.delete(name, &DeleteParams::default()).await.unwrap();
    wait_for(what, timeout, || async {
        api.get_opt(name).await.unwrap().is_none()
    })
    .await;
}

/// Waits until the Initializer `name`, as read, satisfies `holds`, failing as `what` after
/// `timeout`; how long that took.
async fn wait_initializer(
    api: &Api<Initializer>,
    name: &str,
    what: &str,
    timeout: Duration,
    holds: impl Fn(&Initializer) -> bool,
) -> Duration {
    wait_for(what, timeout, || async {
        holds(&api.get(name).await.unwrap())
    })
    .await
}

/// Waits until the status of the Initializer `name` has a `details.lastError` containing
/// `part`, failing as `what` after `timeout`.
async fn wait_last_error(
    api: &Api<Initializer>,
    name: &str,
    part: &str,
    what: &str,
    timeout: Duration,
) {
    wait_initializer(api, name, what, timeout, |initializer| {
        initializer
            .status
            .as_ref()
            .is_some_and(|s| s.details.get("lastError").is_some_and(|e| e.contains(part)))
    })
    .await;
}

/// Waits up to 10 s until the Initializer `name` is in `wanted`.
async fn wait_phase(client: &Client, name: &str, wanted: Phase) {
    wait_for(
        &format!("phase {wanted:?}"),
        Duration::from_secs(10),
        || async { phase(client, name).await == Some(wanted) },
    )
    .await;
}

/// The pods of the Initializer `name`'s workload in the operator's namespace.
async fn pods_of(client: &Client, name: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("{INITIALIZER_LABEL}={name}")))
        .await
        .unwrap()
        .items
}

/// Waits up to 60 s until a pod of the Initializer `name` is ready.
async fn wait_ready_pod(client: &Client, name: &str) {
    wait_pods(
        client,
        name,
        "a ready pod",
        Duration::from_secs(60),
        |pods| pods.iter().any(is_ready),
    )
    .await;
}

async fn configuration(client: &Client, name: &str) -> Option<MutatingWebhookConfiguration> {
    cluster_object(client, name).await
}

/// Waits until the configuration of the Initializer `name` is registered, failing as `what`
/// after `timeout`; how long that took.
async fn wait_registered(client: &Client, name: &str, what: &str, timeout: Duration) -> Duration {
    let configuration_name = format!("initializer-{name}");
    wait_configuration(client, &configuration_name, true, what, timeout).await
}

/// Waits until the configuration of the Initializer `name` is gone, failing as `what` after
/// `timeout`; how long that took.
async fn wait_removed(client: &Client, name: &str, what: &str, timeout: Duration) -> Duration {
    let configuration_name = format!("initializer-{name}");
    wait_configuration(client, &configuration_name, false, what, timeout).await
}

async fn wait_configuration(
    client: &Client,
    name: &str,
    registered: bool,
    what: &str,
    timeout: Duration,
) -> Duration {
    // A proving configuration is not a registration yet: it fails open.
    wait_configuration_where(client, name, what, timeout, |found| {
        found.is_some_and(|c| !initializer_operator::route::is_proving(&c)) == registered
    })
    .await
}

/// Waits until the configuration `name`, as read (`None` when there is none), satisfies `holds`,
/// failing as `what` after `timeout`; how long that took.
async fn wait_configuration_where(
    client: &Client,
    name: &str,
    what: &str,
    timeout: Duration,
    holds: impl Fn(Option<MutatingWebhookConfiguration>) -> bool,
) -> Duration {
    wait_for(what, timeout, || async {
        holds(configuration(client, name).await)
    })
    .await
}

/// Waits until the Initializer `name` has no configuration and is in `wanted`, failing as `what`
/// after `timeout`.
async fn wait_removed_in(
    client: &Client,
    name: &str,
    wanted: Phase,
    what: &str,
    timeout: Duration,
) {
    let configuration_name = format!("initializer-{name}");
    wait_for(what, timeout, || async {
        configuration(client, &configuration_name).await.is_none()
            && phase(client, name).await == Some(wanted)
    })
    .await;
}

/// The Initializer `name`, if there is one.
async fn initializer(client: &Client, name: &str) -> Option<Initializer> {
    cluster_object(client, name).await
}

/// The cluster-scoped object `name` of kind `K`, if there is one.
async fn cluster_object<K>(client: &Client, name: &str) -> Option<K>
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    Api::<K>::all(client.clone()).get_opt(name).await.unwrap()
}

async fn phase(client: &Client, name: &str) -> Option<Phase> {
    initializer(client, name)
        .await
        .and_then(|i| i.status)
        .and_then(|s| s.phase)
}

async fn status_of(client: &Client, name: &str) -> initializer_crds::InitializerStatus {
    Api::<Initializer>::all(client.clone())
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// Waits for an Event with `reason` whose note contains `note_part`. Events are written after
/// the change they report, so a test that sees the change may still have to wait for them.
async fn wait_for_event(client: &Client, reason: &str, note_part: &str) {
    let events = Api::<Event>::namespaced(client.clone(), "default");
    wait_for(
        &format!("a {reason} event mentioning {note_part:?}"),
        Duration::from_secs(10),
        || {
            let events = events.clone();
            async move {
                events
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .any(|e| {
                        e.reason.as_deref() == Some(reason)
                            && e.note.as_deref().is_some_and(|n| n.contains(note_part))
                    })
            }
        },
    )
    .await;
}
