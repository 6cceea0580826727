//! Admission through the sandbox's API with kube-rs clients: mutation, denial messages, Fail
//! versus Ignore when the webhook is down, dry runs, and the self-exclusion that lets an
//! initializer's own pods start while its webhook is down.

#![allow(clippy::unwrap_used, clippy::panic)]

mod admission_support;
mod workload_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use admission_support::{
    Ca, Script, WebhookServer, allows, allows_after, closed_port, patches, replies,
};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use workload_support::{Env, app_deployment, wait_for};

const NS: &str = "webhooks";

/// A selector-less Service `hook` whose hand-written EndpointSlice points at `addr`.
async fn service_at(env: &Env, addr: SocketAddr) {
    env.namespace(NS).await;
    let _: Service = env
        .create(
            NS,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hook"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}}),
        )
        .await;
    let _: EndpointSlice = env
        .create(
            NS,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "hook-manual", "labels": {"kubernetes.io/service-name": "hook"}},
                "addressType": "IPv4",
                "ports": [{"name": "https", "port": addr.port(), "protocol": "TCP"}],
                "endpoints": [{"addresses": [addr.ip().to_string()], "conditions": {"ready": true}}]}),
        )
        .await;
}

async fn register(env: &Env, ca: &Ca, resource: &str, extra: Value) {
    let mut hook = json!({
        "name": "hook.example.com",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "clientConfig": {"service": {"name": "hook", "namespace": NS, "path": "/mutate"}, "caBundle": ca.bundle()},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": [resource], "operations": ["CREATE"]}],
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NS, "kube-system"]}]},
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        hook[k] = v;
    }
    let api: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    let config: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": "hook"}, "webhooks": [hook]})).unwrap();
    api.create(&PostParams::default(), &config).await.unwrap();
}

/// A sandbox and a webhook server answering with `script` behind the `hook` service.
async fn start(script: Script) -> (Env, Ca, WebhookServer) {
    let env = Env::start().await;
    let ca = Ca::new("ca");
    let server = WebhookServer::start("127.0.0.1", &ca, &["hook.webhooks.svc"], script).await;
    service_at(&env, server.addr).await;
    (env, ca, server)
}

/// A sandbox whose `hook` service points at a port nothing listens on, also returned.
async fn start_down() -> (Env, Ca, SocketAddr) {
    let env = Env::start().await;
    let ca = Ca::new("ca");
    let closed = closed_port();
    service_at(&env, closed).await;
    (env, ca, closed)
}

/// The ConfigMaps of namespace `team`, created first.
async fn team_config_maps(env: &Env) -> Api<ConfigMap> {
    env.namespace("team").await;
    Api::namespaced(env.client.clone(), "team")
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test]
async fn mutation_is_applied_to_the_stored_object() {
    let (env, ca, server) = start(patches(json!([
        {"op": "add", "path": "/data/injected", "value": "yes"}
    ])))
    .await;
    register(&env, &ca, "configmaps", json!({})).await;
    let api = team_config_maps(&env).await;
    let created = api
        .create(&PostParams::default(), &config_map("c"))
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["injected"], "yes");
    assert_eq!(api.get("c").await.unwrap().data.unwrap()["injected"], "yes");
    let review = server.reviews.lock().unwrap()[0].clone();
    assert_eq!(review["request"]["namespace"], "team");
    assert_eq!(review["request"]["operation"], "CREATE");
    assert_eq!(review["request"]["dryRun"], false);
    env.stop().await;
}

#[tokio::test]
async fn denial_reaches_the_kube_client_with_the_webhooks_message() {
    let (env, ca, _server) = start(replies(|r| {
        json!({"uid": r["request"]["uid"], "allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "config maps need a reason"}})
    }))
    .await;
    register(&env, &ca, "configmaps", json!({})).await;
    let api = team_config_maps(&env).await;
    match api.create(&PostParams::default(), &config_map("c")).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                "admission webhook \"hook.example.com\" denied the request: config maps need a reason"
            );
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    assert!(matches!(api.get("c").await, Err(kube::Error::Api(s)) if s.code == 404));
    env.stop().await;
}

#[tokio::test]
async fn fail_policy_rejects_and_ignore_policy_admits_while_the_webhook_is_down() {
    let (env, ca, closed) = start_down().await;
    register(&env, &ca, "configmaps", json!({"timeoutSeconds": 3})).await;
    let api = team_config_maps(&env).await;
    match api.create(&PostParams::default(), &config_map("c")).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
            assert_eq!(
                s.message,
                format!(
                    "Internal error occurred: failed calling webhook \"hook.example.com\": failed to call webhook: Post \"https://hook.webhooks.svc:443/mutate?timeout=3s\": dial tcp {closed}: connect: connection refused"
                )
            );
        }
        other => panic!("expected an internal error, got {other:?}"),
    }
    let configs: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    configs
        .patch(
            "hook",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    api.create(&PostParams::default(), &config_map("c"))
        .await
        .unwrap();
    env.stop().await;
}

#[tokio::test]
async fn ignore_policy_waits_no_longer_than_the_timeout_through_the_api() {
    let (env, ca, _server) = start(allows_after(Duration::from_secs(30))).await;
    register(
        &env,
        &ca,
        "configmaps",
        json!({"timeoutSeconds": 2, "failurePolicy": "Ignore"}),
    )
    .await;
    let api = team_config_maps(&env).await;
    let started = Instant::now();
    api.create(&PostParams::default(), &config_map("c"))
        .await
        .unwrap();
    let took = started.elapsed();
    println!("create with a hung Ignore webhook (timeoutSeconds=2) took {took:?}");
    assert!(
        took >= Duration::from_millis(1800) && took <= Duration::from_millis(2200),
        "took {took:?}"
    );
    env.stop().await;
}

#[tokio::test]
async fn dry_run_create_reaches_the_webhook_flagged_and_stores_nothing() {
    let (env, ca, server) = start(allows()).await;
    register(&env, &ca, "configmaps", json!({})).await;
    let api = team_config_maps(&env).await;
    api.create(
        &PostParams {
            dry_run: true,
            ..Default::default()
        },
        &config_map("c"),
    )
    .await
    .unwrap();
    assert_eq!(server.reviews.lock().unwrap()[0]["request"]["dryRun"], true);
    assert!(matches!(api.get("c").await, Err(kube::Error::Api(s)) if s.code == 404));
    env.stop().await;
}

#[tokio::test]
async fn excluded_pods_start_while_a_failing_webhook_blocks_everything_else() {
    let (env, ca, _) = start_down().await;
    register(
        &env,
        &ca,
        "pods",
        json!({"objectSelector": {"matchExpressions": [{"key": "initializer.dev/excluded", "operator": "DoesNotExist"}]}}),
    )
    .await;
    env.namespace("team").await;
    let mut own = app_deployment("own", 1, json!([]), json!([]));
    own["spec"]["template"]["metadata"]["labels"]["initializer.dev/excluded"] = json!("true");
    let _: Deployment = env.create("team", own).await;
    let _: Deployment = env
        .create("team", app_deployment("other", 1, json!([]), json!([])))
        .await;
    let within = Duration::from_secs(20);
    env.ready_pods("the excluded pod to be ready", within, "team", "own", 1)
        .await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "team");
    let failure = wait_for(
        "the blocked deployment to report FailedCreate",
        Duration::from_secs(20),
        || async {
            let d = deployments.get("other").await.ok()?;
            d.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_.as_deref() == Some("ReplicaFailure"))
        },
    )
    .await;
    assert_eq!(failure.reason.as_deref(), Some("FailedCreate"));
    assert!(
        failure
            .message
            .unwrap()
            .contains("failed calling webhook \"hook.example.com\"")
    );
    assert!(env.pods("team", "app=other").await.is_empty());
    // The configuration goes (fail open): the blocked Deployment gets its pod.
    let configs: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    configs.delete("hook", &Default::default()).await.unwrap();
    let within = Duration::from_secs(40);
    env.ready_pods("the unblocked pod to be ready", within, "team", "other", 1)
        .await;
    let d = deployments.get("other").await.unwrap();
    assert!(
        d.status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .all(|c| c.type_.as_deref() != Some("ReplicaFailure"))
    );
    env.stop().await;
}
