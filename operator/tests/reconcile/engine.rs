//! The engine of a preset Initializer: moved into the API server only once its policy is
//! proven against its webhook in the canary namespace, and back to the webhook, with no create
//! left uninjected, when someone edits the policy or binding; proven again for a new spec.
//! Where the proof cannot run, the webhook, with the reason in the status.

use std::time::{Duration, Instant};

use initializer_crds::constants::INITIALIZED_BY_ANNOTATION;
use initializer_crds::{EngineInForce, Initializer, Phase};
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use serde_json::json;

use crate::support::TestCluster;
use crate::support::operator::Operator;
use crate::{NS, configuration, install, status_of, wait_for_event, wait_registered, wait_removed};

on_backends!(sandbox and real:
    without_a_place_to_prove_it_a_preset_stays_on_the_webhook_and_says_why,
);
on_backends! {
    /// The sandbox serves no MutatingAdmissionPolicy.
    real only: a_proven_preset_runs_in_the_api_server_and_comes_back_when_its_policy_drifts,
}

/// Where the operator proves the policy: a namespace the Initializer intercepts.
const CANARY: &str = "team-canary";
/// Where the test's creates land.
const TEAM: &str = "team-a";
/// The label the preset injects.
const INJECTED: &str = "engine.example.com/injected";

fn preset(name: &str) -> Initializer {
    serde_json::from_value(json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "rules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
                {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}
            ],
            "health": {"periodSeconds": 1, "failureThreshold": 2, "successThreshold": 2, "latencyBudgetMillis": 500},
            "preset": {
                "inject": {
                    "containers": [{"name": "engine-proxy", "image": "registry.example/proxy:1.0"}],
                    "env": [{"name": "ENGINE", "value": "on"}],
                    "labels": {INJECTED: "true"}
                }
            }
        }
    }))
    .unwrap()
}

async fn create_namespace(client: &Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
}

fn spawn(cluster: &TestCluster, flags: &[&str]) -> Operator {
    let mut all = vec!["--leader-election", "--lease-duration-seconds", "15"];
    all.extend_from_slice(flags);
    Operator::spawn_with(cluster, cluster.client(), NS, "operator-test-0", &all)
}

/// A dry-run create of a plain pod in [`TEAM`]: what the API server would store.
async fn create_pod(client: &Client) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), TEAM);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "app-"},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}
    }))
    .unwrap();
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    pods.create(&params, &pod).await.unwrap()
}

fn injected(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get(INJECTED).is_some_and(|v| v == "true"))
}

fn marked(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(INITIALIZED_BY_ANNOTATION))
}

async fn engine_of(client: &Client, name: &str) -> (Option<EngineInForce>, Option<Phase>, String) {
    let status = status_of(client, name).await;
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "InApiServer")
        .map(|c| format!("{}: {}", c.reason, c.message))
        .unwrap_or_default();
    (status.engine, status.phase, reason)
}

async fn wait_engine(
    client: &Client,
    name: &str,
    wanted: EngineInForce,
    reason: &str,
    timeout: Duration,
) -> Duration {
    wait_for(
        &format!("engine {wanted:?} ({reason})"),
        timeout,
        || async {
            let (engine, _, why) = engine_of(client, name).await;
            engine == Some(wanted) && why.starts_with(reason)
        },
    )
    .await
}

fn bindings(client: &Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1beta1",
            "MutatingAdmissionPolicyBinding",
        ),
        "mutatingadmissionpolicybindings",
    );
    Api::all_with(client.clone(), &resource)
}

fn policies(client: &Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1beta1",
            "MutatingAdmissionPolicy",
        ),
        "mutatingadmissionpolicies",
    );
    Api::all_with(client.clone(), &resource)
}

async fn deployment_replicas(client: &Client, name: &str) -> Option<i32> {
    Api::<Deployment>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|d| d.spec)
        .and_then(|s| s.replicas)
}

async fn without_a_place_to_prove_it_a_preset_stays_on_the_webhook_and_says_why(
    cluster: &TestCluster,
) {
    let client = install(cluster).await;
    create_namespace(&client, TEAM).await;
    // No --policy-canary-namespace: on the real control plane, nowhere to prove the policy; on
    // the sandbox, no MutatingAdmissionPolicy at all.
    let _operator = spawn(cluster, &[]);
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &preset("plain"))
        .await
        .unwrap();
    wait_registered(
        &client,
        "initializer-plain",
        "registration",
        Duration::from_secs(90),
    )
    .await;
    let reason = if cluster.is_real() {
        "NoCanaryNamespace"
    } else {
        "NotServed"
    };
    wait_engine(
        &client,
        "plain",
        EngineInForce::Webhook,
        reason,
        Duration::from_secs(30),
    )
    .await;
    let (_, phase, why) = engine_of(&client, "plain").await;
    assert_eq!(phase, Some(Phase::Registered), "{why}");
    println!("kept on the webhook: {why}");
    let pod = create_pod(&client).await;
    assert!(
        injected(&pod) && marked(&pod),
        "the webhook injects and marks"
    );
}

async fn a_proven_preset_runs_in_the_api_server_and_comes_back_when_its_policy_drifts(
    cluster: &TestCluster,
) {
    let client = install(cluster).await;
    for namespace in [CANARY, TEAM] {
        create_namespace(&client, namespace).await;
    }
    let _operator = spawn(cluster, &["--policy-canary-namespace", CANARY]);
    let api: Api<Initializer> = Api::all(client.clone());
    let applied = Instant::now();
    api.create(&PostParams::default(), &preset("engine"))
        .await
        .unwrap();
    let configuration_name = "initializer-engine";
    wait_registered(
        &client,
        configuration_name,
        "the webhook first",
        Duration::from_secs(90),
    )
    .await;
    let webhook_in_force = applied.elapsed();

    // Proven and cut over: the policy in force, the webhook deregistered, its Deployment at 0.
    wait_engine(
        &client,
        "engine",
        EngineInForce::Policy,
        "Proven",
        Duration::from_secs(60),
    )
    .await;
    let policy_in_force = applied.elapsed();
    let (_, phase, why) = engine_of(&client, "engine").await;
    assert_eq!(phase, Some(Phase::InApiServer), "{why}");
    println!(
        "apply → in force: the webhook {:.1}s, the policy {:.1}s ({why})",
        webhook_in_force.as_secs_f64(),
        policy_in_force.as_secs_f64()
    );
    wait_removed(
        &client,
        configuration_name,
        "the webhook's deregistration",
        Duration::from_secs(10),
    )
    .await;
    wait_for(
        "the Deployment at zero replicas",
        Duration::from_secs(30),
        || async { deployment_replicas(&client, "engine").await == Some(0) },
    )
    .await;
    wait_for_event(&client, "EngineSwitched", "runs in the API server").await;
    let pod = create_pod(&client).await;
    assert!(
        injected(&pod),
        "the policy injects: {:?}",
        pod.metadata.labels
    );
    assert!(
        !marked(&pod),
        "no webhook marked it: {:?}",
        pod.metadata.annotations
    );
    assert_eq!(
        pod.spec.as_ref().unwrap().containers.len(),
        2,
        "the container is added"
    );

    // Someone deletes the binding: put back at once, the webhook comes back, then the policy
    // goes; every create in between is injected.
    let name = "initializer-engine-preset";
    bindings(&client)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    let mut uninjected = 0;
    let mut creates = 0;
    loop {
        let pod = create_pod(&client).await;
        creates += 1;
        if !injected(&pod) {
            uninjected += 1;
        }
        let registered = configuration(&client, configuration_name).await.is_some();
        let policy_gone = policies(&client).get_opt(name).await.unwrap().is_none();
        if registered && policy_gone {
            break;
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(120),
            "the way back took over 120 s: {:?}",
            engine_of(&client, "engine").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "way back: webhook registered and policy removed {:.1}s after the binding's deletion; \
         {uninjected} of {creates} creates in between uninjected",
        deleted.elapsed().as_secs_f64()
    );
    assert_eq!(
        uninjected, 0,
        "every create during the way back is injected"
    );
    wait_engine(
        &client,
        "engine",
        EngineInForce::Webhook,
        "Drifted",
        Duration::from_secs(10),
    )
    .await;
    wait_for_event(&client, "EngineSwitched", "back to the webhook").await;
    assert!(
        deployment_replicas(&client, "engine")
            .await
            .is_some_and(|r| r > 0)
    );
    // Drifted holds for this generation: still on the webhook a drift check later.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (engine, _, why) = engine_of(&client, "engine").await;
    assert_eq!(engine, Some(EngineInForce::Webhook), "{why}");

    // A new spec is proven again.
    api.patch(
        "engine",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"timeoutSeconds": 4}})),
    )
    .await
    .unwrap();
    wait_engine(
        &client,
        "engine",
        EngineInForce::Policy,
        "Proven",
        Duration::from_secs(60),
    )
    .await;

    // Deleted: the policy and binding go with it.
    api.delete("engine", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the policy and binding removed",
        Duration::from_secs(30),
        || async {
            policies(&client).get_opt(name).await.unwrap().is_none()
                && bindings(&client).get_opt(name).await.unwrap().is_none()
        },
    )
    .await;
}
