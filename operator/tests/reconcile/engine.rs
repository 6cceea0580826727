//! The engine of a preset Initializer: moved into the API server only once its policy is
//! proven against its webhook in the canary namespace, and back to the webhook, with no create
//! left uninjected, when someone edits the policy or binding; proven again for a new spec.
//! Where the proof cannot run, the webhook, with the reason in the status.

use std::time::{Duration, Instant};

use initializer_crds::constants::{INITIALIZED_BY_ANNOTATION, INITIALIZER_LABEL};
use initializer_crds::{EngineInForce, Initializer, Phase};
use initializer_operator::engine::proof;
use initializer_operator::policy::served;
use initializer_test_support::Latencies;
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::support::install::create_namespace;
use crate::support::operator::Operator;
use crate::support::{self, TestCluster};
use crate::{
    NS, configuration, create, create_object, create_registered, install, patch_spec, pods_of,
    status_of, wait_for_event, wait_registered, wait_removed,
};

on_backends!(sandbox and real:
    without_a_place_to_prove_it_a_preset_stays_on_the_webhook_and_says_why,
);
on_backends! {
    /// The sandbox serves no MutatingAdmissionPolicy.
    real only: a_proven_preset_runs_in_the_api_server_and_comes_back_when_its_policy_drifts,
        the_api_server_engine_survives_a_restart_and_leaves_with_suspend_and_a_pin,
        a_same_named_policy_is_never_taken_over,
        a_preset_policy_never_outlives_its_initializer,
        an_api_server_that_stops_running_the_policy_gets_the_webhook_back,
        a_policy_in_force_goes_when_its_spec_stops_compiling,
}

/// Where the operator proves the policy: a namespace the Initializer intercepts.
const CANARY: &str = "team-canary";
/// Where the test's creates land.
const TEAM: &str = "team-a";
/// The label the preset injects.
const INJECTED: &str = "engine.example.com/injected";

fn preset(name: &str) -> Initializer {
    support::initializer(
        name,
        json!({
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
        }),
    )
}

/// Installs the CRD and the operator's namespace, and creates the canary and team namespaces.
async fn install_with_namespaces(cluster: &TestCluster) -> Client {
    let client = install(cluster).await;
    for namespace in [CANARY, TEAM] {
        create_namespace(&client, namespace).await;
    }
    client
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

/// How many creates each engine's latency is measured over.
const LATENCY_CREATES: usize = 1_000;

/// The latency of `count` dry-run pod creates one after another; every one must be injected.
async fn create_latencies(client: &Client, count: usize) -> Latencies {
    let mut latencies = Latencies::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let pod = create_pod(client).await;
        latencies.push(started.elapsed());
        assert!(injected(&pod), "a create was not injected");
    }
    latencies
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

/// Waits until the preset `name` is proven and its policy in force, failing after `timeout`.
async fn wait_proven(client: &Client, name: &str, timeout: Duration) {
    wait_engine(client, name, EngineInForce::Policy, "Proven", timeout).await;
}

/// Waits up to 30 s until the Deployment of the preset `engine`'s webhook is at zero replicas.
async fn wait_webhook_scaled_down(client: &Client) {
    wait_for(
        "the Deployment at zero replicas",
        Duration::from_secs(30),
        || async { deployment_replicas(client, "engine").await == Some(0) },
    )
    .await;
}

/// Whether `api` holds an object `name`.
async fn stored(api: Api<DynamicObject>, name: &str) -> bool {
    api.get_opt(name).await.unwrap().is_some()
}

/// Whether the policy and the binding `name` are both gone (the binding is read only when the
/// policy is gone).
async fn policy_and_binding_gone(client: &Client, name: &str) -> bool {
    !stored(policies(client).await, name).await && !stored(bindings(client).await, name).await
}

/// The version the API server serves MutatingAdmissionPolicy at (v1 from 1.36, v1beta1 on 1.35
/// with the beta on), as the operator finds it.
async fn served_version(client: &Client) -> &'static str {
    proof::served_version(client).await.unwrap().unwrap()
}

async fn policy_objects(client: &Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let version = served_version(client).await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(served::GROUP, version, kind),
        plural,
    );
    Api::all_with(client.clone(), &resource)
}

async fn bindings(client: &Client) -> Api<DynamicObject> {
    policy_objects(
        client,
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
    )
    .await
}

async fn policies(client: &Client) -> Api<DynamicObject> {
    policy_objects(
        client,
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
    )
    .await
}

async fn deployment_replicas(client: &Client, name: &str) -> Option<i32> {
    Api::<Deployment>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|d| d.spec.replicas)
}

async fn without_a_place_to_prove_it_a_preset_stays_on_the_webhook_and_says_why(
    cluster: &TestCluster,
) {
    let client = install(cluster).await;
    create_namespace(&client, TEAM).await;
    // No --policy-canary-namespace: on the real control plane, nowhere to prove the policy; on
    // the sandbox, no MutatingAdmissionPolicy at all.
    let _operator = spawn(cluster, &[]);
    let api = create_registered(&client, &preset("plain")).await;
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
    // The status is written after the registration it reports.
    wait_for("phase Registered", Duration::from_secs(10), || async {
        engine_of(&client, "plain").await.1 == Some(Phase::Registered)
    })
    .await;
    let (_, _, why) = engine_of(&client, "plain").await;
    println!("kept on the webhook: {why}");
    let pod = create_pod(&client).await;
    assert!(
        injected(&pod) && marked(&pod),
        "the webhook injects and marks"
    );

    // Asked for the API server: the same reason, as a warning.
    let mut wanted = preset("wanted");
    wanted.spec.engine = initializer_crds::Engine::Policy;
    create_object(&api, &wanted).await;
    wait_for_event(
        &client,
        "PolicyUnavailable",
        "spec.engine is Policy, but the webhook runs",
    )
    .await;
}

async fn a_proven_preset_runs_in_the_api_server_and_comes_back_when_its_policy_drifts(
    cluster: &TestCluster,
) {
    let client = install_with_namespaces(cluster).await;
    let _operator = spawn(cluster, &["--policy-canary-namespace", CANARY]);
    let applied = Instant::now();
    let api = create(&client, &preset("engine")).await;
    let configuration_name = "initializer-engine";
    wait_registered(
        &client,
        "engine",
        "the webhook first",
        Duration::from_secs(90),
    )
    .await;
    let webhook_in_force = applied.elapsed();

    // Proven and cut over: the policy in force, the webhook deregistered, its Deployment at 0.
    wait_proven(&client, "engine", Duration::from_secs(60)).await;
    let policy_in_force = applied.elapsed();
    let (_, phase, why) = engine_of(&client, "engine").await;
    assert_eq!(phase, Some(Phase::InApiServer), "{why}");
    println!(
        "apply → in force: the webhook {:.1}s, the policy {:.1}s ({why})",
        webhook_in_force.as_secs_f64(),
        policy_in_force.as_secs_f64()
    );
    // Every pod of the old webhook's Deployment killed: nothing changes for creates or the
    // status (no outage, no missed initializations: the webhook is out of the path already).
    let before = status_of(&client, "engine").await;
    let webhook_pods = pods_of(&client, "engine").await;
    for pod in &webhook_pods {
        cluster.kill(NS, &pod.name_any()).await.unwrap();
    }
    let (mut failed, mut missed) = (0, 0);
    let team: Api<Pod> = Api::namespaced(client.clone(), TEAM);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for _ in 0..300 {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"generateName": "app-"},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}
        }))
        .unwrap();
        match team.create(&dry_run, &pod).await {
            Ok(created) if injected(&created) => {}
            Ok(_) => missed += 1,
            Err(_) => failed += 1,
        }
    }
    let after = status_of(&client, "engine").await;
    println!(
        "webhook pods killed with the policy in force ({} killed): {failed} of 300 creates \
         failed, {missed} uninjected; phase {:?} -> {:?}",
        webhook_pods.len(),
        before.phase,
        after.phase
    );
    assert_eq!((failed, missed), (0, 0));
    assert_eq!(after.phase, Some(Phase::InApiServer));
    assert_eq!(after.last_outage, None, "no outage");
    assert_eq!(after.missed_initializations, None);

    wait_removed(
        &client,
        "engine",
        "the webhook's deregistration",
        Duration::from_secs(10),
    )
    .await;
    wait_webhook_scaled_down(&client).await;
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

    let by_policy = create_latencies(&client, LATENCY_CREATES).await;

    // Someone deletes the binding: the operator sees it (a watch), puts the proven binding back
    // and brings the webhook back, and removes the policy only once the webhook is registered.
    // Until the API server has the binding again (its policies reload on a one-second tick),
    // creates pass uninjected, as they would after a webhook configuration's deletion; from the
    // first injected create after it is back, every one is injected, the way back included.
    let name = "initializer-engine-preset";
    bindings(&client)
        .await
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    let (mut creates, mut gap, mut after_restore) = (0, 0, 0);
    let mut restored_at = None;
    loop {
        let binding_back = stored(bindings(&client).await, name).await;
        let pod = create_pod(&client).await;
        creates += 1;
        match (injected(&pod), restored_at) {
            (true, None) if binding_back => restored_at = Some(deleted.elapsed()),
            (false, None) => gap += 1,
            (false, Some(_)) => after_restore += 1,
            _ => {}
        }
        let registered = configuration(&client, configuration_name).await.is_some();
        let policy_gone = !stored(policies(&client).await, name).await;
        if registered && policy_gone {
            break;
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(120),
            "the way back took over 120 s: {:?}",
            engine_of(&client, "engine").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Some(restored_at) = restored_at else {
        panic!("no create was injected again after the binding's deletion");
    };
    println!(
        "way back: injected again {:.2}s after the binding's deletion ({gap} creates uninjected \
         before); webhook registered and policy removed {:.1}s after it; {after_restore} of the \
         {} creates after the restore uninjected",
        restored_at.as_secs_f64(),
        deleted.elapsed().as_secs_f64(),
        creates - gap
    );
    assert_eq!(
        after_restore, 0,
        "every create from the restore on, through the way back, is injected"
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

    // The same creates through the webhook, for the side-by-side latency.
    let by_webhook = create_latencies(&client, LATENCY_CREATES).await;
    println!(
        "pod create latency over {LATENCY_CREATES} dry-run creates each, the same injection: \
         policy p50 {:.1} ms p99 {:.1} ms; webhook p50 {:.1} ms p99 {:.1} ms",
        by_policy.millis(50),
        by_policy.millis(99),
        by_webhook.millis(50),
        by_webhook.millis(99)
    );

    // A new spec is proven again.
    patch_spec(&api, "engine", json!({"timeoutSeconds": 4})).await;
    wait_proven(&client, "engine", Duration::from_secs(60)).await;

    // Deleted: the policy and binding go with it.
    api.delete("engine", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the policy and binding removed",
        Duration::from_secs(30),
        || policy_and_binding_gone(&client, name),
    )
    .await;
}

/// How often the operator checks a policy in force (its drift check, and the in-force check
/// with it).
const CHECK_PERIOD: Duration = Duration::from_secs(10);

/// kube-apiserver restarted without the MutatingAdmissionPolicy admission plugin, as a replica
/// of another version may run during an upgrade: it still serves the policy's API, so the
/// policy stays stored and bound, but creates pass uninjected while the status says
/// `InApiServer`. The operator's in-force check finds that and brings the webhook
/// back within a check period, saying why.
async fn an_api_server_that_stops_running_the_policy_gets_the_webhook_back(cluster: &TestCluster) {
    let client = install_with_namespaces(cluster).await;
    create_witness_policy(&client).await;
    wait_for(
        "the witness policy in force",
        Duration::from_secs(30),
        || witness_ran(&client),
    )
    .await;
    let _operator = spawn(cluster, &["--policy-canary-namespace", CANARY]);
    in_api_server(&client, "engine").await;
    assert!(injected(&create_pod(&client).await), "the policy injects");

    cluster
        .restart_apiserver(&["--disable-admission-plugins=MutatingAdmissionPolicy"])
        .await
        .unwrap();
    let ready = Instant::now();
    // The operator may already have its webhook back (a reconcile retried after the restart's
    // errors runs the same check), so what the API server itself does is read off the witness,
    // and a create's injection must never be the policy's alone.
    assert!(
        !witness_ran(&client).await,
        "the restarted API server must not run MutatingAdmissionPolicies"
    );
    let pod = create_pod(&client).await;
    assert!(
        !injected(&pod) || marked(&pod),
        "only the webhook may inject once the API server stops running the policy: {:?}",
        pod.metadata
    );
    wait_engine(
        &client,
        "engine",
        EngineInForce::Webhook,
        "NotEnforced: the API server stored a create",
        CHECK_PERIOD + Duration::from_secs(15),
    )
    .await;
    let back = ready.elapsed();
    let (_, _, why) = engine_of(&client, "engine").await;
    wait_for_event(&client, "EngineSwitched", "without running it").await;
    wait_registered(
        &client,
        "engine",
        "the webhook back",
        Duration::from_secs(90),
    )
    .await;
    let registered = ready.elapsed();
    let pod = create_pod(&client).await;
    assert!(
        injected(&pod) && marked(&pod),
        "the webhook injects again: {:?}",
        pod.metadata
    );
    println!(
        "API server without the policy's plugin: back on the webhook {:.1}s after it was \
         ready (check period {}s), registered {:.1}s after it was ready; {why}",
        back.as_secs_f64(),
        CHECK_PERIOD.as_secs(),
        registered.as_secs_f64(),
    );
}

/// The webhook registered again, then the policy removed after its return.
async fn webhook_back_then_policy_gone(client: &Client) {
    wait_registered(
        client,
        "engine",
        "the webhook back",
        Duration::from_secs(90),
    )
    .await;
    wait_for(
        "the policy removed after the webhook's return",
        Duration::from_secs(60),
        || async { !policy_present(client).await },
    )
    .await;
}

/// Whether the preset's policy and binding both exist.
async fn policy_present(client: &Client) -> bool {
    let name = "initializer-engine-preset";
    stored(policies(client).await, name).await && stored(bindings(client).await, name).await
}

async fn the_api_server_engine_survives_a_restart_and_leaves_with_suspend_and_a_pin(
    cluster: &TestCluster,
) {
    let client = install_with_namespaces(cluster).await;
    let flags = ["--no-leader-election", "--policy-canary-namespace", CANARY];
    let first = Operator::spawn_with(cluster, cluster.client(), NS, "operator-test-0", &flags);
    let api = create(&client, &preset("engine")).await;
    let minute = Duration::from_secs(60);
    wait_proven(&client, "engine", Duration::from_secs(90)).await;
    wait_webhook_scaled_down(&client).await;

    // A new operator takes over what the status and the API server hold: the policy stays in
    // force (through a drift check), nothing is registered or scaled up.
    first.stop();
    drop(first);
    let _second = Operator::spawn_with(cluster, cluster.client(), NS, "operator-test-1", &flags);
    let steady_until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < steady_until {
        let (engine, phase, why) = engine_of(&client, "engine").await;
        assert_eq!(
            (engine, phase),
            (Some(EngineInForce::Policy), Some(Phase::InApiServer)),
            "after the restart: {why}"
        );
        assert!(configuration(&client, "initializer-engine").await.is_none());
        assert!(policy_present(&client).await);
        assert_eq!(deployment_replicas(&client, "engine").await, Some(0));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pod = create_pod(&client).await;
    assert!(injected(&pod) && !marked(&pod), "the policy still injects");

    // Suspended: the break-glass takes the policy out of the path too.
    patch_spec(&api, "engine", json!({"suspend": true})).await;
    wait_for("the policy removed by the suspend", minute, || async {
        !policy_present(&client).await
    })
    .await;
    wait_engine(
        &client,
        "engine",
        EngineInForce::Webhook,
        "Suspended",
        minute,
    )
    .await;
    assert!(configuration(&client, "initializer-engine").await.is_none());
    wait_for(
        "creates no longer injected",
        Duration::from_secs(10),
        || async { !injected(&create_pod(&client).await) },
    )
    .await;

    // Resumed: proven again, in the API server again.
    patch_spec(&api, "engine", json!({"suspend": false})).await;
    wait_proven(&client, "engine", Duration::from_secs(90)).await;

    // Pinned to the webhook: it comes back (registered, scaled up), then the policy goes.
    patch_spec(&api, "engine", json!({"engine": "Webhook"})).await;
    webhook_back_then_policy_gone(&client).await;
    wait_engine(&client, "engine", EngineInForce::Webhook, "Pinned", minute).await;
    assert_eq!(deployment_replicas(&client, "engine").await, Some(1));
    // The API server drops a deleted policy at its next reload (about a second): until then
    // the policy still injects first, and the webhook finds nothing to do.
    wait_for(
        "the webhook injecting and marking",
        Duration::from_secs(10),
        || async {
            let pod = create_pod(&client).await;
            injected(&pod) && marked(&pod)
        },
    )
    .await;
}

/// A preset in the API server whose spec changes to one no policy can stand in for (here a
/// custom image reading the preset): the webhook comes back, and the policy that was in force
/// goes once it is registered, instead of injecting beside it for good.
async fn a_policy_in_force_goes_when_its_spec_stops_compiling(cluster: &TestCluster) {
    let client = install_with_namespaces(cluster).await;
    let _operator = spawn(cluster, &["--policy-canary-namespace", CANARY]);
    in_api_server(&client, "engine").await;
    // The webhook's pods gone, so the reconcile that goes back cannot find it registered.
    wait_webhook_scaled_down(&client).await;
    let image = initializer_crds::images::image(initializer_crds::images::PRESET_INITIALIZER);
    patch_spec(&Api::all(client.clone()), "engine", json!({"image": image})).await;
    let minute = Duration::from_secs(60);
    // A custom image shows no `InApiServer` condition: only the engine in force.
    wait_engine(&client, "engine", EngineInForce::Webhook, "", minute).await;
    webhook_back_then_policy_gone(&client).await;
}

/// The policy and binding an Initializer named `name` would write.
fn policy_name(name: &str) -> String {
    initializer_operator::policy::compile::policy_name_of(
        &initializer_operator::naming::names(name).base,
    )
}

/// Someone else's MutatingAdmissionPolicy of the name the operator would give a preset's
/// policy (adding a label to ConfigMaps, nothing the preset does).
async fn create_foreign_policy(client: &Client, name: &str) {
    let version = served_version(client).await;
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/{version}", served::GROUP),
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {"team": "platform"}},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"]
            }]},
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "mutations": [{
                "patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression":
                    "Object{metadata: Object.metadata{labels: {\"theirs\": \"true\"}}}"}
            }]
        }
    }))
    .unwrap();
    policies(client)
        .await
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
}

/// The witness: someone else's policy, bound, that labels ConfigMaps (which no Initializer of
/// these tests intercepts), so whether the API server runs MutatingAdmissionPolicies can be
/// seen apart from anything the operator does about its own policy.
const WITNESS: &str = "witness";

async fn create_witness_policy(client: &Client) {
    create_foreign_policy(client, WITNESS).await;
    let version = served_version(client).await;
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/{version}", served::GROUP),
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": WITNESS},
        "spec": {"policyName": WITNESS}
    }))
    .unwrap();
    bindings(client)
        .await
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// Whether the API server ran the witness policy on a dry-run ConfigMap create.
async fn witness_ran(client: &Client) -> bool {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), TEAM);
    let configmap: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "witness-"}})).unwrap();
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let stored = configmaps.create(&params, &configmap).await.unwrap();
    stored.labels().get("theirs").is_some_and(|v| v == "true")
}

/// Whether the policy `name` is still exactly someone else's: their label, none of ours, their
/// rule, and no field of it managed by the operator.
async fn left_alone(client: &Client, name: &str) -> bool {
    let Some(live) = policies(client).await.get_opt(name).await.unwrap() else {
        return false;
    };
    let labels = live.labels();
    let rule = &live.data["spec"]["matchConstraints"]["resourceRules"][0]["resources"][0];
    labels.get("team").map(String::as_str) == Some("platform")
        && !labels.contains_key(INITIALIZER_LABEL)
        && rule == "configmaps"
        && live
            .managed_fields()
            .iter()
            .all(|m| m.manager.as_deref() != Some(initializer_crds::constants::FIELD_MANAGER))
}

async fn conflict_in_status(client: &Client, initializer: &str, about: &str) {
    wait_for(
        "the Conflict condition",
        Duration::from_secs(60),
        || async {
            status_of(client, initializer)
                .await
                .conditions
                .iter()
                .any(|c| c.type_ == "Conflict" && c.status == "True" && c.message.contains(about))
        },
    )
    .await;
}

async fn a_same_named_policy_is_never_taken_over(cluster: &TestCluster) {
    let client = install_with_namespaces(cluster).await;
    let _operator = spawn(cluster, &["--policy-canary-namespace", CANARY]);
    let name = policy_name("engine");

    // Someone else's policy of that name first: a Conflict before anything is deployed, as for
    // every other object of ours, and their policy as it was.
    create_foreign_policy(&client, &name).await;
    create(&client, &preset("engine")).await;
    conflict_in_status(&client, "engine", &name).await;
    wait_for_event(&client, "Conflict", &name).await;
    assert!(left_alone(&client, &name).await, "their policy was changed");
    assert_eq!(deployment_replicas(&client, "engine").await, None);
    assert!(configuration(&client, "initializer-engine").await.is_none());

    // Once it goes, the preset is proven and moves into the API server.
    policies(&client)
        .await
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_proven(&client, "engine", Duration::from_secs(120)).await;

    // Our policy stripped of our labels is someone else's now: not re-applied over, a Conflict.
    let stripped = json!({"metadata": {"labels": {INITIALIZER_LABEL: null,
        initializer_crds::constants::MANAGED_BY_LABEL: null, "team": "platform"}}});
    policies(&client)
        .await
        .patch(&name, &PatchParams::default(), &Patch::Merge(&stripped))
        .await
        .unwrap();
    conflict_in_status(&client, "engine", &name).await;
    let live = policies(&client).await.get(&name).await.unwrap();
    assert!(
        !live.labels().contains_key(INITIALIZER_LABEL),
        "our labels were put back: {:?}",
        live.labels()
    );
}

/// Whether the policy and the binding of the Initializer `name` are both gone.
async fn policy_gone(client: &Client, name: &str) -> bool {
    policy_and_binding_gone(client, &policy_name(name)).await
}

/// Takes the Initializer `name` away as an administrator would who skipped the operator's
/// cleanup: its finalizer stripped, then deleted.
async fn remove_without_cleanup(client: &Client, name: &str) {
    let api: Api<Initializer> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    api.delete(name, &DeleteParams::default()).await.unwrap();
    wait_for("the Initializer gone", Duration::from_secs(10), || async {
        api.get_opt(name).await.unwrap().is_none()
    })
    .await;
}

/// Stops the operator and gives its tasks a moment to end, so that what follows is not its work.
async fn stop(operator: Operator) {
    operator.stop();
    drop(operator);
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Applies `preset(name)` and waits until it runs in the API server.
async fn in_api_server(client: &Client, name: &str) {
    create(client, &preset(name)).await;
    wait_proven(client, name, Duration::from_secs(120)).await;
}

/// A preset's policy and binding never outlive their Initializer: owned by it (the garbage
/// collector removes them when it goes without the operator's cleanup), swept by the operator
/// when they carry no owner (applied by an operator before they did), removed by `uninstall`.
async fn a_preset_policy_never_outlives_its_initializer(cluster: &TestCluster) {
    let client = install_with_namespaces(cluster).await;
    let flags = ["--policy-canary-namespace", CANARY];

    // Owned: gone with the Initializer, the operator stopped.
    let operator = spawn(cluster, &flags);
    in_api_server(&client, "owned").await;
    let uid = initializer_uid(&client, "owned").await;
    for object in [
        policies(&client)
            .await
            .get(&policy_name("owned"))
            .await
            .unwrap(),
        bindings(&client)
            .await
            .get(&policy_name("owned"))
            .await
            .unwrap(),
    ] {
        assert!(
            object
                .owner_references()
                .iter()
                .any(|o| o.kind == "Initializer" && o.uid == uid),
            "{} is not owned by its Initializer: {:?}",
            object.name_any(),
            object.owner_references()
        );
    }
    stop(operator).await;
    remove_without_cleanup(&client, "owned").await;
    let took = wait_for(
        "the garbage collector to remove the policy",
        Duration::from_secs(60),
        || async { policy_gone(&client, "owned").await },
    )
    .await;
    println!("an owned policy removed {took:?} after its Initializer");

    // Unowned (as an earlier operator applied it): the sweep at the next start removes it.
    let operator = spawn(cluster, &flags);
    in_api_server(&client, "unowned").await;
    for api in [policies(&client).await, bindings(&client).await] {
        api.patch(
            &policy_name("unowned"),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
        )
        .await
        .unwrap();
    }
    stop(operator).await;
    remove_without_cleanup(&client, "unowned").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !policy_gone(&client, "unowned").await,
        "nothing but the sweep may remove an unowned policy"
    );
    let operator = spawn(cluster, &flags);
    wait_for(
        "the sweep to remove the policy",
        Duration::from_secs(60),
        || async { policy_gone(&client, "unowned").await },
    )
    .await;

    // Uninstall removes what is in force.
    in_api_server(&client, "installed").await;
    stop(operator).await;
    initializer_packaging::install::deregister(&client)
        .await
        .unwrap();
    assert!(policy_gone(&client, "installed").await);
}

async fn initializer_uid(client: &Client, name: &str) -> String {
    Api::<Initializer>::all(client.clone())
        .get(name)
        .await
        .unwrap()
        .uid()
        .unwrap()
}
