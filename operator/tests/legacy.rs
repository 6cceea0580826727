//! Reconcile tests of the `InitializerConfiguration` backend (`spec.backend:
//! InitializerConfiguration`, Kubernetes 1.7–1.13 Initializers) on the sandbox in legacy mode:
//! the real operator deploying the SDK-built secret guard (examples/test_initializer.rs) in
//! controller mode, registering its configuration only after a canary came back initialized,
//! removing it when the initializer stops answering and releasing what still waited on its
//! name, and registering it again when it recovers. On the sandbox without legacy mode the
//! backend is refused and nothing is deployed, and the backend cannot be changed afterwards.

// Test helpers outside #[test] functions may unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::panic)]

// The real control plane has no InitializerConfiguration (removed in 1.14), and no fault
// injection or kill is needed here.
#[allow(dead_code)]
mod support;

use std::time::Duration;

use initializer_crds::constants::RELEASED_OBJECTS_DETAIL;
use initializer_crds::{Initializer, Phase};
use initializer_test_support::api::raw;
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::operator::{GUARD_IMAGE as IMAGE, Operator, run};
use support::{Backend, TestCluster, refusal};

const NS: &str = "initializer-system";
const CONFIGS: &str = "/apis/admissionregistration.k8s.io/v1alpha1/initializerconfigurations";
const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const PENDING: &str = "guard.initializer-system.initializer-operator.io";

/// Installs the CRD and the operator's namespace and starts one operator replica (stopped when
/// it drops).
async fn start(cluster: &TestCluster) -> (Client, Operator) {
    let client = cluster.client();
    support::install::install_crd_and_namespace(&client, NS).await;
    let operator = Operator::spawn_with(cluster, client.clone(), NS, "operator-test-0", &[]);
    (client, operator)
}

fn legacy_guard() -> Initializer {
    support::initializer(
        "guard",
        json!({
            "image": IMAGE,
            "replicas": 1,
            "backend": "InitializerConfiguration",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
            "health": {"periodSeconds": 1, "failureThreshold": 2, "successThreshold": 2, "latencyBudgetMillis": 2000},
        }),
    )
}

async fn configuration(client: &Client) -> Option<Value> {
    let (code, body) = raw(
        client,
        "GET",
        &format!("{CONFIGS}/initializer-guard"),
        None,
        None,
        None,
    )
    .await
    .unwrap();
    (code == 200).then_some(body)
}

/// Creates the legacy guard and returns how long its InitializerConfiguration took to appear
/// (the operator registers it only after a canary came back initialized).
async fn create_guard_and_wait_registered(client: &Client) -> Duration {
    Api::<Initializer>::all(client.clone())
        .create(&PostParams::default(), &legacy_guard())
        .await
        .unwrap();
    wait_registered(
        client,
        true,
        "the InitializerConfiguration",
        Duration::from_secs(90),
    )
    .await
}

/// Waits until the InitializerConfiguration is there (`registered`) or gone, failing as `what`
/// after `timeout`; how long that took.
async fn wait_registered(
    client: &Client,
    registered: bool,
    what: &str,
    timeout: Duration,
) -> Duration {
    wait_for(what, timeout, || async {
        configuration(client).await.is_some() == registered
    })
    .await
}

/// Waits up to 10 s until the guard is in `phase`, failing as `what`.
async fn wait_phase(client: &Client, phase: Phase, what: &str) {
    wait_for(what, Duration::from_secs(10), || async {
        status(client).await.phase == Some(phase)
    })
    .await;
}

/// Waits up to 10 s for an Event with `reason`.
async fn wait_for_event(client: &Client, reason: &str) {
    wait_for(
        &format!("a {reason} event"),
        Duration::from_secs(10),
        || event_seen(client, reason),
    )
    .await;
}

/// Creates the Secret `name` holding `password` (POSTed to `path`), as the API server answers.
async fn post_secret(client: &Client, path: &str, name: &str, password: &str) -> (u16, Value) {
    let body = Some(secret(name, password));
    raw(client, "POST", path, None, None, body).await.unwrap()
}

async fn status(client: &Client) -> initializer_crds::InitializerStatus {
    Api::<Initializer>::all(client.clone())
        .get("guard")
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

async fn event_seen(client: &Client, reason: &str) -> bool {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .any(|e| e.reason.as_deref() == Some(reason))
}

fn secret(name: &str, value: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "Opaque",
        "stringData": {"password": value},
    })
}

async fn guard_pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels("initializer.dev/initializer=guard"))
        .await
        .unwrap()
        .items
}

async fn registered_after_the_canary_released_when_dead_and_registered_again(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    // Where the canaries are made: seen once initialized (before, a watch does not show them).
    let canary_namespaces = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watching = {
        use futures::StreamExt;
        let seen = canary_namespaces.clone();
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::all(client.clone());
        let config = kube::runtime::watcher::Config::default()
            .labels(initializer_crds::constants::CANARY_LABEL);
        tokio::spawn(async move {
            let mut events = std::pin::pin!(kube::runtime::watcher(secrets, config));
            while let Some(event) = events.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(secret)) = event {
                    seen.lock().unwrap().extend(secret.metadata.namespace);
                }
            }
        })
    };
    let took = create_guard_and_wait_registered(&client).await;
    println!("registered {took:?} after creation");
    wait_for("a canary seen", Duration::from_secs(20), || {
        let seen = canary_namespaces.clone();
        async move { !seen.lock().unwrap().is_empty() }
    })
    .await;
    watching.abort();
    let namespaces = canary_namespaces.lock().unwrap().clone();
    assert!(
        namespaces.iter().all(|ns| ns == NS),
        "canaries only in the operator's namespace, never in a shared one: {namespaces:?}"
    );
    let config = configuration(&client).await.unwrap();
    assert_eq!(config["initializers"][0]["name"], PENDING);
    assert_eq!(
        config["initializers"][0]["rules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}])
    );
    wait_phase(&client, Phase::Registered, "phase Registered").await;
    let registered = status(&client).await;
    assert_eq!(registered.details["pendingName"], PENDING);
    assert!(registered.last_probe_latency_millis.is_some());
    println!(
        "canary initialized in {:?} ms",
        registered.last_probe_latency_millis
    );

    // The workload runs in controller mode, with its token, and never waited on its own name.
    let deployment = Api::<Deployment>::namespaced(client.clone(), NS)
        .get("guard")
        .await
        .unwrap();
    let args = deployment.spec.template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert_eq!(
        args[..4],
        ["--mode", "controller", "--pending-name", PENDING]
    );
    let account = Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .get("guard")
        .await
        .unwrap();
    assert_eq!(account.automount_service_account_token, Some(true));
    assert!(
        Api::<ClusterRole>::all(client.clone())
            .get_opt("initializer-guard-controller")
            .await
            .unwrap()
            .is_some()
    );

    // The handler's denial fails the create with its message.
    let (code, refused) = post_secret(&client, SECRETS, "short", "x").await;
    assert_eq!(code, 403, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("must be at least 20 characters"),
        "{refused}"
    );

    // The initializer stops answering: an object created meanwhile waits on its name...
    let pod = guard_pods(&client).await.remove(0);
    let pod_name = pod.metadata.name.clone().unwrap();
    cluster.freeze(NS, &pod_name).await.unwrap();
    // Only once a probe has failed is the freeze known to have taken hold: an object created
    // before that may still be initialized by the pod, and then nothing waits to be released.
    wait_phase(&client, Phase::Degraded, "a failed probe (phase Degraded)").await;
    let uninitialized = format!("{SECRETS}?includeUninitialized=true");
    let long_enough = "long-enough-to-pass-the-guard";
    let (code, waiting) = post_secret(&client, &uninitialized, "waiting", long_enough).await;
    assert!(code == 201 || code == 202, "{code}: {waiting}");
    assert_eq!(
        waiting["metadata"]["initializers"]["pending"][0]["name"],
        PENDING
    );
    // ...the configuration is removed, and the waiting object released.
    let took = wait_registered(
        &client,
        false,
        "the configuration removed",
        Duration::from_secs(30),
    )
    .await;
    println!("deregistered {took:?} after the freeze");
    wait_for(
        "the waiting secret released",
        Duration::from_secs(15),
        || {
            let c = client.clone();
            async move {
                let (code, body) = raw(&c, "GET", &format!("{SECRETS}/waiting"), None, None, None)
                    .await
                    .unwrap();
                code == 200
                    && body["metadata"]
                        .get("initializers")
                        .is_none_or(|i| i["pending"].as_array().is_none_or(Vec::is_empty))
            }
        },
    )
    .await;
    wait_for(
        "releasedObjects in the status",
        Duration::from_secs(15),
        || {
            let c = client.clone();
            async move {
                status(&c)
                    .await
                    .details
                    .contains_key(RELEASED_OBJECTS_DETAIL)
            }
        },
    )
    .await;
    // The waiting secret; a canary the probes had pending then is released too, not counted.
    assert_eq!(
        status(&client).await.details[RELEASED_OBJECTS_DETAIL],
        "1",
        "releasedObjects counts the users' objects only"
    );
    wait_for_event(&client, "ReleasedPendingObjects").await;
    // Nothing waits on the dead name now: a create no longer blocks.
    let (code, body) = post_secret(&client, SECRETS, "after", "x").await;
    assert_eq!(code, 201, "unintercepted while deregistered: {body}");

    // Recovery: registered again, and the guard refuses again.
    cluster.thaw(NS, &pod_name).await.unwrap();
    let took = wait_registered(&client, true, "registered again", Duration::from_secs(60)).await;
    println!("registered again {took:?} after the thaw");
    let (code, refused) = post_secret(&client, SECRETS, "short-again", "x").await;
    assert_eq!(code, 403, "{refused}");
}

async fn its_own_pods_never_wait_on_its_name(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    // Another configuration (not the operator's) puts the guard's own name on every new pod:
    // the guard's controller does not watch pods, so its pods would wait forever, and the
    // guard, never available, would never be registered, unless the operator clears its name.
    let trap = json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": {"name": "own-pods-trap"},
        "initializers": [{"name": PENDING, "rules": [{"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods"]}]}],
    });
    let (code, body) = raw(&client, "POST", CONFIGS, None, None, Some(trap))
        .await
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let took = create_guard_and_wait_registered(&client).await;
    println!("registered {took:?} after creation, its pods released from its own name");
    let (_, pods) = raw(
        &client,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods?includeUninitialized=true"),
        None,
        None,
        None,
    )
    .await
    .unwrap();
    let pods = pods["items"].as_array().unwrap();
    assert!(!pods.is_empty());
    for pod in pods {
        assert!(
            pod["metadata"]
                .get("initializers")
                .is_none_or(|i| i["pending"].as_array().is_none_or(Vec::is_empty)),
            "{pod}"
        );
    }
}

async fn rules_without_a_canary_kind_are_refused(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let mut namespaces = legacy_guard();
    namespaces.spec.rules[0].resources = vec!["namespaces".into()];
    let (_, message) = refusal::create_and_wait_invalid(&client, &namespaces).await;
    assert!(message.contains("canary"), "{message}");
    assert!(
        refusal::nothing_deployed(&client, NS, "guard").await,
        "nothing deployed"
    );
}

async fn without_the_api_the_backend_is_refused_and_nothing_deployed(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let (valid, message) = refusal::create_and_wait_invalid(&client, &legacy_guard()).await;
    assert_eq!(valid, "False");
    assert!(
        message.contains("does not serve admissionregistration.k8s.io/v1alpha1"),
        "{message}"
    );
    assert!(
        refusal::nothing_deployed(&client, NS, "guard").await,
        "nothing deployed"
    );
    wait_for_event(&client, "Refused").await;

    // The backend is immutable: switching would strand what waits on the old one.
    let (code, refused) = raw(
        &client,
        "PATCH",
        "/apis/initializer.dev/v1alpha1/initializers/guard",
        None,
        Some("application/merge-patch+json"),
        Some(json!({"spec": {"backend": "Webhook"}})),
    )
    .await
    .unwrap();
    assert_eq!(code, 422, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("spec.backend is immutable"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_initializer_is_registered_after_its_canary_released_when_dead_and_registered_again()
 {
    run(Backend::LegacySandbox, |cluster| {
        Box::pin(registered_after_the_canary_released_when_dead_and_registered_again(cluster))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initializers_own_pods_never_wait_on_its_name() {
    run(Backend::LegacySandbox, |cluster| {
        Box::pin(its_own_pods_never_wait_on_its_name(cluster))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_rules_that_reach_no_canary_kind_are_refused_and_deploy_nothing() {
    run(Backend::LegacySandbox, |cluster| {
        Box::pin(rules_without_a_canary_kind_are_refused(cluster))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_backend_without_the_v1alpha1_api_is_refused_and_deploys_nothing() {
    run(Backend::Sandbox, |cluster| {
        Box::pin(without_the_api_the_backend_is_refused_and_nothing_deployed(
            cluster,
        ))
    })
    .await;
}
