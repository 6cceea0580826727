//! The controller mode against a sandbox in its Kubernetes 1.7–1.13 Initializers mode: the same
//! typed handler a webhook serves, acting on objects whose `metadata.initializers.pending` starts
//! with its name; creates that block until it acts, denials, hung and panicking handlers under
//! both failure policies, restarts and conflicts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{TestPki, eventually};
use initializer_load::client::{Connection, Trust, connector};
use initializer_sandbox::{Sandbox, SandboxConfig, SandboxHandle};
use initializer_test_support::api::raw;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use kube_initializer::advanced::Server;
use kube_initializer::mutate::{self, INITIALIZED_BY_ANNOTATION, PodSpecHolder};
use kube_initializer::{
    Denial, FailurePolicy, Initialize, InitializeAsync, Initializer, Review, ServeArgs,
};
use serde_json::{Value, json};

const MINE: &str = "sidecar.initializer.kubernetes.io";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const RULES: &str = r#"[{"apiGroups":["apps"],"apiVersions":["v1"],"resources":["deployments"]}]"#;

/// The handler under test, the same code a webhook would serve: injects `sidecar-nginx`, and
/// misbehaves on request by label (`hang`, `panic`, `deny`). Records every run by name.
#[derive(Clone, Default)]
struct Sidecar {
    runs: Arc<Mutex<Vec<String>>>,
}

impl Sidecar {
    fn runs_of(&self, name: &str) -> usize {
        self.runs
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    }
}

impl Initialize<Deployment> for Sidecar {
    fn initialize(&self, deployment: &mut Deployment, _: &Review) -> Result<(), Denial> {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        self.runs.lock().unwrap().push(name);
        let label = |key: &str| {
            deployment
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(key))
        };
        if label("hang") {
            std::thread::sleep(Duration::from_secs(3));
        }
        if label("panic") {
            panic!("the handler has a bug");
        }
        if label("deny") {
            return Err("deployments labelled deny are refused by the sidecar initializer".into());
        }
        if let Some(spec) = deployment.pod_spec_mut() {
            let sidecar = Container {
                name: "sidecar-nginx".into(),
                image: Some("nginx:1.8.1".into()),
                ..Container::default()
            };
            mutate::add_container(spec, &sidecar);
        }
        Ok(())
    }
}

struct Env {
    sandbox: SandboxHandle,
    client: kube::Client,
    tls: tempfile::TempDir,
    _state: tempfile::TempDir,
}

impl Env {
    /// The end of a test: `server` first, then the sandbox it watches.
    async fn shutdown(self, server: Server) {
        server.shutdown().await;
        self.sandbox.shutdown().await;
    }
}

/// A sandbox in legacy mode with one `InitializerConfiguration` naming `initializers` (in
/// order) for Deployments.
async fn env(initializers: &[&str]) -> Env {
    let rules: Value = serde_json::from_str(RULES).unwrap();
    let initializers = initializers
        .iter()
        .map(|name| json!({"name": name, "rules": rules}))
        .collect();
    legacy_env(false, initializers).await
}

/// [`env`] with this initializer alone, and a serving certificate in place.
async fn env_with_pki() -> (Env, TestPki) {
    let env = env(&[MINE]).await;
    let pki = TestPki::new("controller");
    pki.write(env.tls.path());
    (env, pki)
}

/// A sandbox in legacy mode (its workload controllers and node agent running when
/// `workloads`) with one `InitializerConfiguration`, `sidecar`, holding `initializers`.
async fn legacy_env(workloads: bool, initializers: Value) -> Env {
    let state = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::new(state.path());
    config.legacy_initializers = true;
    config.workloads = workloads;
    let sandbox = Sandbox::start(config).await.unwrap();
    let client = sandbox.client();
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": {"name": "sidecar"},
        "initializers": initializers,
    });
    let (code, body) = send(
        &client,
        "POST",
        "/apis/admissionregistration.k8s.io/v1alpha1/initializerconfigurations",
        Some(configuration),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    Env {
        sandbox,
        client,
        tls: tempfile::tempdir().unwrap(),
        _state: state,
    }
}

/// A request whose body (if any) is JSON, answered with its status code and JSON body.
async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let content_type = body.as_ref().map(|_| "application/json");
    raw(client, method, path, None, content_type, body)
        .await
        .unwrap()
}

fn args(env: &Env, pending_name: &str) -> ServeArgs {
    let mut args = ServeArgs::new(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        env.tls.path(),
        env.tls.path(),
    )
    .controller(pending_name);
    args.rules = Some(kube_initializer::advanced::Rules(
        serde_json::from_str(RULES).unwrap(),
    ));
    args.shutdown_grace_seconds = 1;
    args
}

fn sidecar_initializer(handler: &Sidecar) -> Initializer {
    Initializer::new("sidecar")
        .budget(Duration::from_millis(300))
        .handle::<Deployment>(handler.clone())
}

/// A fresh [`Sidecar`] handler, served by [`sidecar_controller`].
async fn serve_sidecar(env: &Env) -> (Sidecar, Server) {
    let handler = Sidecar::default();
    let server = sidecar_controller(env, &handler).await;
    (handler, server)
}

/// The sidecar initializer with `handler`, pending name [`MINE`], started in controller mode.
async fn sidecar_controller(env: &Env, handler: &Sidecar) -> Server {
    controller(env, sidecar_initializer(handler), &args(env, MINE)).await
}

async fn controller(env: &Env, initializer: Initializer, args: &ServeArgs) -> Server {
    initializer
        .bind_controller(args, env.client.clone())
        .await
        .unwrap()
}

fn nginx(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.8.1"}]}
            }
        }
    })
}

/// Create and wait for the answer, as `kubectl create` did in 1.7: the API server holds the
/// request until the object is initialized or fails.
async fn create(env: &Env, object: Value) -> (u16, Value) {
    post(env, "timeout=15s", object).await
}

/// Creates `object` as [`create`] does and checks the answer's code.
async fn create_expecting(env: &Env, object: Value, code: u16) -> Value {
    let (got, body) = create(env, object).await;
    assert_eq!(got, code, "{body}");
    body
}

/// Create and answer at once with the uninitialized object.
async fn create_uninitialized(env: &Env, object: Value) -> Value {
    let (code, body) = post(env, "includeUninitialized=true", object).await;
    assert!(code == 201 || code == 202, "{code} {body}");
    body
}

/// POSTs a Deployment with the query `query`.
async fn post(env: &Env, query: &str, object: Value) -> (u16, Value) {
    let path = format!("{DEPLOYMENTS}?{query}");
    send(&env.client, "POST", &path, Some(object)).await
}

/// Whether `name` is initialized (no name pending) within `within`.
async fn initialized_within(env: &Env, name: &str, within: Duration) -> bool {
    eventually(within, || async {
        get(env, name)
            .await
            .1
            .pointer("/metadata/initializers")
            .is_none()
    })
    .await
}

/// Creates `object`, which the handler fails on, and checks that the create is refused with a
/// 500 whose message says `says` (the failure policy `Deny`).
async fn assert_failed_closed(env: &Env, object: Value, says: &str) {
    let status = create_expecting(env, object, 500).await;
    assert!(
        status["message"].as_str().unwrap().contains(says),
        "{status}"
    );
}

/// Creates `object`, which the handler fails on, and checks that it is created unchanged (the
/// failure policy `Allow`) and that the controller keeps working after it.
async fn assert_failed_open(env: &Env, object: Value) {
    let created = create_expecting(env, object, 201).await;
    assert_eq!(containers(&created), ["nginx"]);
    let created = create_expecting(env, nginx("after", json!({})), 201).await;
    assert_eq!(containers(&created), ["nginx", "sidecar-nginx"]);
}

async fn get(env: &Env, name: &str) -> (u16, Value) {
    send(
        &env.client,
        "GET",
        &format!("{DEPLOYMENTS}/{name}?includeUninitialized=true"),
        None,
    )
    .await
}

fn containers(deployment: &Value) -> Vec<&str> {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|cs| cs.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default()
}

fn pending(deployment: &Value) -> Vec<&str> {
    deployment
        .pointer("/metadata/initializers/pending")
        .and_then(Value::as_array)
        .map(|p| p.iter().filter_map(|e| e["name"].as_str()).collect())
        .unwrap_or_default()
}

/// The watch events of the Deployments (or only of `name`) after `since`, collected for two
/// seconds.
async fn changes_since(env: &Env, name: Option<&str>, since: &str) -> Vec<Value> {
    let only = name
        .map(|n| format!("&fieldSelector=metadata.name%3D{n}"))
        .unwrap_or_default();
    let (code, events) = send(&env.client, "GET", &format!("{DEPLOYMENTS}?watch=true&includeUninitialized=true&resourceVersion={since}&timeoutSeconds=2{only}"), None).await;
    assert_eq!(code, 200, "{events}");
    match events {
        Value::String(lines) => lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        one => vec![one],
    }
}

/// Whether `deployment` (in `default`) carries a mark of the `sidecar` initializer made with the
/// key of `pki`'s serving key, as the operator checks it.
fn verified_mark(deployment: &Value, pki: &TestPki) -> Result<(), initializer_mark::Refusal> {
    let key = initializer_mark::MarkKey::from_serving_key_pem(pki.key_pem.as_bytes()).unwrap();
    let created: k8s_openapi::jiff::Timestamp = deployment["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    initializer_mark::verify(
        &initializer_mark::Keys::current(key),
        "sidecar",
        deployment["metadata"]["annotations"][INITIALIZED_BY_ANNOTATION].as_str(),
        &initializer_mark::Stored {
            namespace: "default",
            group: "apps",
            resource: "deployments",
            name: deployment["metadata"]["name"].as_str().unwrap(),
            generate_name: "",
            created: created.as_second(),
        },
    )
}

async fn https_get(server: &Server, pki: &TestPki, path: &str) -> (u16, String) {
    let url = format!("https://127.0.0.1:{}{path}", server.local_addr().port());
    let trust = Trust::CaPem(pki.ca_pem.as_bytes().to_vec());
    let mut conn = Connection::open(&url, &connector(&trust).unwrap())
        .await
        .unwrap();
    let reply = conn.request("GET", Some(path), Bytes::new()).await.unwrap();
    (
        reply.status,
        String::from_utf8_lossy(&reply.body).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_blocks_until_the_controller_mutates_it_and_removes_the_name_in_one_update() {
    let (env, pki) = env_with_pki().await;
    let (_, server) = serve_sidecar(&env).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            https_get(&server, &pki, "/readyz").await.0 == 200
        })
        .await,
        "never ready: {:?}",
        https_get(&server, &pki, "/readyz").await
    );

    // Blocking create: answered with the initialized, mutated object.
    let start = Instant::now();
    let (code, created) = create(&env, nginx("nginx", json!({"app": "nginx"}))).await;
    let took = start.elapsed();
    assert_eq!(code, 201, "{created}");
    assert_eq!(containers(&created), ["nginx", "sidecar-nginx"]);
    assert!(
        created.pointer("/metadata/initializers").is_none(),
        "{created}"
    );
    // Signed with the key of the serving key it loaded, for this very object, stamped with its
    // creation (the controller handles stored objects).
    assert_eq!(
        verified_mark(&created, &pki),
        Ok(()),
        "{}",
        created["metadata"]["annotations"]
    );
    eprintln!("blocking create answered after {took:?}");

    // One update carries both: the object's only change after its creation.
    let uninitialized = create_uninitialized(&env, nginx("nginx-2", json!({"app": "nginx"}))).await;
    assert_eq!(pending(&uninitialized), [MINE]);
    assert_eq!(containers(&uninitialized), ["nginx"]);
    let since = uninitialized["metadata"]["resourceVersion"]
        .as_str()
        .unwrap();
    let events = changes_since(&env, Some("nginx-2"), since).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "MODIFIED");
    let updated = &events[0]["object"];
    assert_eq!(containers(updated), ["nginx", "sidecar-nginx"]);
    assert!(
        updated.pointer("/metadata/initializers").is_none(),
        "{updated}"
    );

    let (_, metrics) = https_get(&server, &pki, "/metrics").await;
    for sample in [
        r#"initializer_admission_requests_total{kind="Deployment",verdict="patched",mode="controller"} 2"#,
        r#"initializer_controller_updates_total{kind="Deployment",result="mutated"} 2"#,
    ] {
        assert!(metrics.contains(sample), "{sample} not in {metrics}");
    }
    env.shutdown(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_is_left_alone_until_the_earlier_names_are_gone() {
    let first = "first.initializer.test.io";
    let env = env(&[first, MINE]).await;
    let (handler, server) = serve_sidecar(&env).await;

    let object = create_uninitialized(&env, nginx("queued", json!({}))).await;
    assert_eq!(pending(&object), [first, MINE]);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (_, still) = get(&env, "queued").await;
    assert_eq!(pending(&still), [first, MINE], "not its turn: {still}");
    assert_eq!(containers(&still), ["nginx"]);
    assert_eq!(handler.runs_of("queued"), 0);

    // The first initializer (this test) removes its name; now it is the controller's turn.
    let mut released = still.clone();
    released["metadata"]["initializers"]["pending"] = json!([{"name": MINE}]);
    let (code, body) = send(
        &env.client,
        "PUT",
        &format!("{DEPLOYMENTS}/queued"),
        Some(released),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(
        eventually(Duration::from_secs(10), || async {
            let (_, now) = get(&env, "queued").await;
            now.pointer("/metadata/initializers").is_none()
                && containers(&now) == ["nginx", "sidecar-nginx"]
        })
        .await,
        "{:?}",
        get(&env, "queued").await
    );
    env.shutdown(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_out_of_scope_lose_the_name_without_a_mutation() {
    let env = env(&[MINE]).await;
    for (name, labels) in [("team-a", json!({"team": "a"})), ("team-b", json!({}))] {
        let (code, body) = send(&env.client, "POST", "/api/v1/namespaces", Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}))).await;
        assert_eq!(code, 201, "{body}");
    }
    let handler = Sidecar::default();
    let mut args = args(&env, MINE);
    args.object_selector =
        Some(serde_json::from_value(json!({"matchLabels": {"inject": "yes"}})).unwrap());
    args.namespace_selector =
        Some(serde_json::from_value(json!({"matchLabels": {"team": "a"}})).unwrap());
    let initializer = sidecar_initializer(&handler).annotation_gate(Some(
        kube_initializer::AnnotationGate::new("initializer.kubernetes.io/sidecar", false),
    ));
    let server = controller(&env, initializer, &args).await;

    let create_in =
        |namespace: &'static str, name: &'static str, labels: Value, annotations: Value| {
            let client = env.client.clone();
            async move {
                let mut object = nginx(name, labels);
                object["metadata"]["namespace"] = json!(namespace);
                object["metadata"]["annotations"] = annotations;
                send(
                    &client,
                    "POST",
                    &format!("/apis/apps/v1/namespaces/{namespace}/deployments?timeout=15s"),
                    Some(object),
                )
                .await
            }
        };
    let (code, in_scope) =
        create_in("team-a", "in-scope", json!({"inject": "yes"}), json!({})).await;
    assert_eq!(code, 201, "{in_scope}");
    assert_eq!(containers(&in_scope), ["nginx", "sidecar-nginx"]);

    let (code, wrong_labels) = create_in("team-a", "no-label", json!({}), json!({})).await;
    assert_eq!(code, 201, "{wrong_labels}");
    assert_eq!(containers(&wrong_labels), ["nginx"]);
    assert!(wrong_labels.pointer("/metadata/initializers").is_none());

    let (code, wrong_namespace) =
        create_in("team-b", "other-team", json!({"inject": "yes"}), json!({})).await;
    assert_eq!(code, 201, "{wrong_namespace}");
    assert_eq!(containers(&wrong_namespace), ["nginx"]);

    let (code, opted_out) = create_in(
        "team-a",
        "opted-out",
        json!({"inject": "yes"}),
        json!({"initializer.kubernetes.io/sidecar": "false"}),
    )
    .await;
    assert_eq!(code, 201, "{opted_out}");
    assert_eq!(containers(&opted_out), ["nginx"]);

    assert_eq!(
        handler.runs_of("no-label") + handler.runs_of("other-team") + handler.runs_of("opted-out"),
        0
    );
    env.shutdown(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_fails_the_create_with_the_handlers_message() {
    let env = env(&[MINE]).await;
    let (_, server) = serve_sidecar(&env).await;
    let status = create_expecting(&env, nginx("refused", json!({"deny": "true"})), 403).await;
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "deployments labelled deny are refused by the sidecar initializer"
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            get(&env, "refused").await.0 == 404
        })
        .await,
        "the failed object is deleted"
    );
    env.shutdown(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_handler_is_answered_by_the_failure_policy_at_the_budget() {
    let env = env(&[MINE]).await;

    // Fail closed: the create fails with the reason.
    let handler = Sidecar::default();
    let initializer = sidecar_initializer(&handler).failure_policy(FailurePolicy::Deny);
    let server = controller(&env, initializer, &args(&env, MINE)).await;
    let start = Instant::now();
    assert_failed_closed(
        &env,
        nginx("hung-closed", json!({"hang": "true"})),
        "did not answer within 300ms",
    )
    .await;
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "answered at the budget, not when the handler returned: {:?}",
        start.elapsed()
    );
    server.shutdown().await;

    // Fail open: the object is initialized unchanged.
    let handler = Sidecar::default();
    let initializer = sidecar_initializer(&handler).failure_policy(FailurePolicy::Allow);
    let server = controller(&env, initializer, &args(&env, MINE)).await;
    assert_failed_open(&env, nginx("hung-open", json!({"hang": "true"}))).await;
    env.shutdown(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_answered_by_the_failure_policy_with_the_panic() {
    // A budget the panic cannot reach: with RUST_BACKTRACE set, the default hook resolves a
    // backtrace before the panic reaches the SDK, which on a loaded machine outlasts 300 ms.
    let generous = |handler: &Sidecar, policy| {
        sidecar_initializer(handler)
            .budget(Duration::from_secs(30))
            .failure_policy(policy)
    };
    let env = env(&[MINE]).await;
    let args = args(&env, MINE);

    let handler = Sidecar::default();
    let server = controller(&env, generous(&handler, FailurePolicy::Deny), &args).await;
    assert_failed_closed(
        &env,
        nginx("panic-closed", json!({"panic": "true"})),
        "panicked: the handler has a bug",
    )
    .await;
    server.shutdown().await;

    let handler = Sidecar::default();
    let server = controller(&env, generous(&handler, FailurePolicy::Allow), &args).await;
    assert_failed_open(&env, nginx("panic-open", json!({"panic": "true"}))).await;
    env.shutdown(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_does_not_act_twice_and_a_forged_mark_skips_nothing() {
    let (env, pki) = env_with_pki().await;
    let (_, server) = serve_sidecar(&env).await;
    let first = create_expecting(&env, nginx("once", json!({})), 201).await;
    server.shutdown().await;

    // Carrying this initializer's mark, written by the object's author: a mark is no proof the
    // handler ran, so the handler runs (before the fix, the name was removed without a run and
    // the object was created without the sidecar).
    let mut marked = nginx("marked", json!({}));
    marked["metadata"]["annotations"] = json!({INITIALIZED_BY_ANNOTATION: "sidecar"});
    create_uninitialized(&env, marked).await;
    // A signed mark in the right form, made with a key that is not the initializer's.
    let stolen = initializer_mark::MarkKey::from_serving_key_pem(
        TestPki::new("elsewhere").key_pem.as_bytes(),
    )
    .unwrap();
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let identity =
        initializer_mark::Identity::at_admission("default", "apps", "deployments", "forged", "");
    let forged_mark = initializer_mark::sign(&stolen, "sidecar", None, &identity, now);
    let mut forged = nginx("forged", json!({}));
    forged["metadata"]["annotations"] = json!({INITIALIZED_BY_ANNOTATION: forged_mark});
    let forged_created = create_uninitialized(&env, forged).await;
    assert_eq!(
        verified_mark(&forged_created, &pki),
        Err(initializer_mark::Refusal::BadMac)
    );

    let restarted = Sidecar::default();
    let server = sidecar_controller(&env, &restarted).await;
    create_expecting(&env, nginx("after-restart", json!({})), 201).await;
    for name in ["marked", "forged"] {
        assert!(
            initialized_within(&env, name, Duration::from_secs(5)).await,
            "{name}"
        );
    }
    let (_, once) = get(&env, "once").await;
    assert_eq!(
        once["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    assert_eq!(containers(&once), ["nginx", "sidecar-nginx"]);
    assert_eq!(restarted.runs_of("once"), 0);
    assert_eq!(restarted.runs_of("marked"), 1);
    assert_eq!(restarted.runs_of("forged"), 1);
    assert_eq!(restarted.runs_of("after-restart"), 1);
    // Both handled, and the forged entries replaced by the initializer's own.
    for name in ["marked", "forged"] {
        let (_, object) = get(&env, name).await;
        assert_eq!(containers(&object), ["nginx", "sidecar-nginx"], "{name}");
        assert_eq!(
            verified_mark(&object, &pki),
            Ok(()),
            "{name}: {}",
            object["metadata"]["annotations"]
        );
    }
    env.shutdown(server).await;
}

/// An asynchronous handler that, on its first run, changes the object through the API before
/// answering, so that the controller's update meets a newer resourceVersion.
#[derive(Clone)]
struct Contender {
    client: kube::Client,
    touched: Arc<AtomicBool>,
    runs: Arc<Mutex<Vec<String>>>,
}

impl InitializeAsync<Deployment> for Contender {
    async fn initialize(&self, deployment: &mut Deployment, _: &Review) -> Result<(), Denial> {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        self.runs.lock().unwrap().push(name.clone());
        if !self.touched.swap(true, Ordering::SeqCst) {
            let (code, body) = raw(
                &self.client,
                "PATCH",
                &format!("{DEPLOYMENTS}/{name}"),
                None,
                Some("application/merge-patch+json"),
                Some(json!({"metadata": {"labels": {"touched": "meanwhile"}}})),
            )
            .await
            .map_err(|e| Denial::new(e.to_string()))?;
            assert_eq!(code, 200, "{body}");
        }
        if let Some(spec) = deployment.pod_spec_mut() {
            mutate::add_container(
                spec,
                &Container {
                    name: "sidecar-nginx".into(),
                    ..Container::default()
                },
            );
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_write_is_redone_from_a_fresh_read() {
    let (env, pki) = env_with_pki().await;
    let contender = Contender {
        client: env.client.clone(),
        touched: Arc::new(AtomicBool::new(false)),
        runs: Arc::default(),
    };
    let initializer = Initializer::new("sidecar")
        .budget(Duration::from_secs(5))
        .handle_async::<Deployment>(contender.clone());
    let server = controller(&env, initializer, &args(&env, MINE)).await;
    let created = create_expecting(&env, nginx("contended", json!({})), 201).await;
    assert_eq!(containers(&created), ["nginx", "sidecar-nginx"]);
    assert_eq!(
        created["metadata"]["labels"]["touched"], "meanwhile",
        "the other writer's change is kept"
    );
    assert_eq!(
        contender.runs.lock().unwrap().len(),
        2,
        "run again on the fresh read"
    );
    let (_, metrics) = https_get(&server, &pki, "/metrics").await;
    assert!(
        metrics.contains("initializer_controller_conflicts_total 1"),
        "{metrics}"
    );
    env.shutdown(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_write_each_object_once() {
    let env = env(&[MINE]).await;
    let (one, two) = (Sidecar::default(), Sidecar::default());
    let first = sidecar_controller(&env, &one).await;
    let second = sidecar_controller(&env, &two).await;
    let names: Vec<String> = (0..10).map(|i| format!("replicated-{i}")).collect();
    let mut versions: Vec<String> = Vec::new();
    for name in &names {
        let uninitialized = create_uninitialized(&env, nginx(name, json!({}))).await;
        assert_eq!(pending(&uninitialized), [MINE]);
        versions.push(
            uninitialized["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    for name in &names {
        assert!(
            initialized_within(&env, name, Duration::from_secs(10)).await,
            "{name} never initialized"
        );
    }
    // Every change since the first create: each object created once and written once.
    let events = changes_since(&env, None, &versions[0]).await;
    for name in &names[1..] {
        let of_it: Vec<&Value> = events
            .iter()
            .filter(|e| e["object"]["metadata"]["name"] == name.as_str())
            .collect();
        let modified: Vec<&&Value> = of_it.iter().filter(|e| e["type"] == "MODIFIED").collect();
        assert_eq!(modified.len(), 1, "{name} written once: {of_it:?}");
        assert_eq!(
            containers(&modified[0]["object"]),
            ["nginx", "sidecar-nginx"]
        );
    }
    let runs = one.runs.lock().unwrap().len() + two.runs.lock().unwrap().len();
    assert!(runs >= names.len(), "{runs} runs");
    first.shutdown().await;
    second.shutdown().await;
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_watches_are_relisted_and_failed_writes_retried() {
    let env = env(&[MINE]).await;
    let (handler, server) = serve_sidecar(&env).await;
    create_expecting(&env, nginx("before", json!({})), 201).await;

    // The watch ends and its resourceVersion is compacted away: 410 on the rewatch, then a list.
    env.sandbox.compact_history();
    env.sandbox.drop_watches();
    // The first two updates of the next object fail as an overloaded API server's would.
    let fault: initializer_sandbox::FaultRule = serde_json::from_value(json!({
        "verb": "update",
        "group": "apps",
        "resource": "deployments",
        "name": "flaky",
        "action": {"type": "error", "code": 503, "message": "overloaded"},
        "times": 2
    }))
    .unwrap();
    env.sandbox.add_fault(fault);
    let created = create_expecting(&env, nginx("flaky", json!({})), 201).await;
    assert_eq!(containers(&created), ["nginx", "sidecar-nginx"]);
    assert_eq!(
        handler.runs_of("flaky"),
        3,
        "two failed writes, each redone from a fresh read"
    );
    env.shutdown(server).await;
}

/// A handler for every kind with pods that records the kinds it ran for.
#[derive(Clone, Default)]
struct PodKinds {
    kinds: Arc<Mutex<Vec<String>>>,
}

impl<K: PodSpecHolder + kube::Resource<DynamicType = ()>> Initialize<K> for PodKinds {
    fn initialize(&self, obj: &mut K, _: &Review) -> Result<(), Denial> {
        self.kinds.lock().unwrap().push(K::kind(&()).into_owned());
        if let Some(spec) = obj.pod_spec_mut() {
            mutate::add_container(
                spec,
                &Container {
                    name: "sidecar-nginx".into(),
                    image: Some("nginx:1.8.1".into()),
                    ..Container::default()
                },
            );
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_the_rules_match_is_watched_and_the_workload_controllers_wait_for_it() {
    let rules =
        json!([{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["deployments", "pods"]}]);
    let env = legacy_env(true, json!([{"name": MINE, "rules": rules}])).await;
    let handler = PodKinds::default();
    let mut args = args(&env, MINE);
    args.rules = Some(kube_initializer::advanced::Rules(
        serde_json::from_value(rules).unwrap(),
    ));
    let initializer = Initializer::new("sidecar").handle_pod_kinds(handler.clone());
    let server = controller(&env, initializer, &args).await;

    let created = create_expecting(&env, nginx("workload", json!({"app": "nginx"})), 201).await;
    assert_eq!(containers(&created), ["nginx", "sidecar-nginx"]);
    // The sandbox's workload controller created the pod from the initialized template; the pod
    // got the name too, and stays hidden until the same controller initialized it.
    let pods = || async {
        send(&env.client, "GET", "/api/v1/namespaces/default/pods", None)
            .await
            .1
    };
    assert!(
        eventually(Duration::from_secs(15), || async {
            pods().await["items"]
                .as_array()
                .is_some_and(|items| !items.is_empty())
        })
        .await,
        "no initialized pod"
    );
    let pod = &pods().await["items"][0];
    assert!(pod.pointer("/metadata/initializers").is_none(), "{pod}");
    let pod_containers: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(pod_containers, ["nginx", "sidecar-nginx"]);
    let kinds = handler.kinds.lock().unwrap().clone();
    assert!(kinds.iter().any(|k| k == "Deployment"), "{kinds:?}");
    assert!(
        kinds.iter().any(|k| k == "Pod"),
        "the pod went through the controller: {kinds:?}"
    );
    env.shutdown(server).await;
}
