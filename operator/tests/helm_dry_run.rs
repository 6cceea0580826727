//! kube-apiserver accepts every object the committed Helm chart renders (its CRD and its guard
//! hook included): `helm template`, then a server-side apply of every object with `dryRun=All` on the real
//! control plane (here because the operator's tests own the cluster harness; the chart's other
//! tests are `packaging/tests/helm.rs`).

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Only the cluster's start and its client are used here.
#[allow(dead_code)]
#[macro_use]
mod support;

// Only the rendering is used here.
#[allow(dead_code)]
#[path = "../../packaging/tests/helm_support/mod.rs"]
mod helm_support;

use futures::future::BoxFuture;
use helm_support::{NS, template};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::{Backend, TestCluster};

on_backends! {
    /// The sandbox is not the API server whose acceptance counts here.
    real only: kube_apiserver_accepts_the_rendered_chart_in_a_server_side_dry_run,
}

/// Runs one test body on `backend`, with no image mapped: nothing here runs a pod.
async fn run<F>(backend: Backend, body: F)
where
    F: for<'a> FnOnce(&'a TestCluster) -> BoxFuture<'a, ()>,
{
    support::run(backend, &[], body).await;
}

/// `helm template` (hooks included), then a server-side apply of every object with `dryRun=All`
/// against kube-apiserver: the API server's schema validation, defaulting and admission accept
/// the whole chart (the namespace exists first, as `helm install --create-namespace` makes it).
async fn kube_apiserver_accepts_the_rendered_chart_in_a_server_side_dry_run(cluster: &TestCluster) {
    let objects = template(&[]).unwrap();
    assert!(
        objects.len() > 5,
        "the chart rendered {} objects",
        objects.len()
    );
    let client = cluster.client();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let params = PatchParams::apply("helm-chart-dry-run").force().dry_run();
    for object in &objects {
        let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        let types = object
            .types
            .clone()
            .expect("rendered objects carry their kind");
        let gvk = GroupVersionKind::try_from(&types).unwrap();
        let (resource, capabilities) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("kube-apiserver does not serve {gvk:?}"));
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(client.clone(), NS, &resource),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let name = object.name_any();
        api.patch(&name, &params, &Patch::Apply(&object))
            .await
            .unwrap_or_else(|err| panic!("{} {name} refused: {err}", types.kind));
    }
}
