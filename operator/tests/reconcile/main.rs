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

use futures::future::BoxFuture;
use initializer_crds::{Initializer, Phase};
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::json;
use support::operator::{self, Operator};
use support::{Backend, TestCluster};

const NS: &str = "initializer-system";
/// The operator's service account, as the bundle names it.
const OPERATOR_ACCOUNT: &str = initializer_packaging::manifest::OPERATOR_NAME;
const IMAGE_REPOSITORY: &str = "ghcr.io/initializer-dev/secret-guard-initializer";
const IMAGE: &str = "ghcr.io/initializer-dev/secret-guard-initializer:test";

/// Runs one test body on `backend`, with the test initializer as the guard's image.
async fn run<F>(backend: Backend, body: F)
where
    F: for<'a> FnOnce(&'a TestCluster) -> BoxFuture<'a, ()>,
{
    operator::run_with_test_initializer(backend, IMAGE_REPOSITORY, body).await;
}

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
    serde_json::from_value(json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {"name": name},
        "spec": {
            "image": IMAGE,
            "replicas": 1,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
            "health": {"periodSeconds": 1, "failureThreshold": 2, "successThreshold": 2, "latencyBudgetMillis": 500},
        }
    }))
    .unwrap()
}

async fn configuration(client: &Client, name: &str) -> Option<MutatingWebhookConfiguration> {
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

/// Waits until the configuration `name` is registered, failing as `what` after `timeout`; how
/// long that took.
async fn wait_registered(client: &Client, name: &str, what: &str, timeout: Duration) -> Duration {
    wait_configuration(client, name, true, what, timeout).await
}

/// Waits until the configuration `name` is gone, failing as `what` after `timeout`; how long
/// that took.
async fn wait_removed(client: &Client, name: &str, what: &str, timeout: Duration) -> Duration {
    wait_configuration(client, name, false, what, timeout).await
}

async fn wait_configuration(
    client: &Client,
    name: &str,
    registered: bool,
    what: &str,
    timeout: Duration,
) -> Duration {
    wait_for(what, timeout, || {
        let (client, name) = (client.clone(), name.to_string());
        // A proving configuration is not a registration yet: it fails open.
        async move {
            let found = configuration(&client, &name).await;
            found.is_some_and(|c| !initializer_operator::route::is_proving(&c)) == registered
        }
    })
    .await
}

async fn phase(client: &Client, name: &str) -> Option<Phase> {
    Api::<Initializer>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
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
