//! Kubernetes 1.7–1.13 Initializers on the sandbox (legacy mode), through real HTTPS requests:
//! the `InitializerConfiguration` kind and its validation, pending names on create, the create
//! that waits for them, hidden list and watch, failure results, the era's timeout, deletion.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api_support;
mod workload_support;

use std::time::{Duration, Instant};

use api_support::{TestSandbox, raw, start, start_with};
use futures::{StreamExt, TryStreamExt};
use kube::api::WatchEvent;
use serde_json::{Value, json};

const CONFIGS: &str = "/apis/admissionregistration.k8s.io/v1alpha1/initializerconfigurations";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// A request whose body (if any) is JSON, answered with its status code and JSON body.
async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    raw(client, method, path, None, None, body).await.unwrap()
}

async fn legacy() -> TestSandbox {
    start_with(|c| c.legacy_initializers = true).await
}

/// A configuration whose initializers apply to one core resource.
async fn configure(sb: &TestSandbox, config: &str, initializers: &[&str], resource: &str) {
    configure_group(&sb.client(), config, initializers, "", resource).await;
}

/// A configuration whose initializers apply to `group`'s `resource`.
async fn configure_group(
    client: &kube::Client,
    config: &str,
    initializers: &[&str],
    group: &str,
    resource: &str,
) {
    let initializers: Vec<Value> = initializers
        .iter()
        .map(|n| json!({"name": n, "rules": [{"apiGroups": [group], "apiVersions": ["*"], "resources": [resource]}]}))
        .collect();
    let body = json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": {"name": config},
        "initializers": initializers,
    });
    let (code, out) = send(client, "POST", CONFIGS, Some(body)).await;
    assert_eq!(code, 201, "{out}");
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}})
}

async fn get(sb: &TestSandbox, name: &str) -> (u16, Value) {
    send(&sb.client(), "GET", &format!("{CONFIGMAPS}/{name}"), None).await
}

/// Waits until the object exists (GET shows uninitialized objects, as it did then).
async fn stored(sb: &TestSandbox, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, obj) = get(sb, name).await;
        if code == 200 {
            return obj;
        }
        assert!(Instant::now() < deadline, "{name} never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates in the background (the request blocks); returns the task answering (code, body).
fn create_in_background(
    sb: &TestSandbox,
    query: &str,
    body: Value,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let client = sb.client();
    let uri = format!("{CONFIGMAPS}{query}");
    tokio::spawn(async move { send(&client, "POST", &uri, Some(body)).await })
}

/// Creates with `?includeUninitialized=true`: answered at once, 202 while names are pending.
async fn create_uninitialized(sb: &TestSandbox, body: Value) -> (u16, Value) {
    send(
        &sb.client(),
        "POST",
        &format!("{CONFIGMAPS}?includeUninitialized=true"),
        Some(body),
    )
    .await
}

async fn put(sb: &TestSandbox, name: &str, body: Value) -> (u16, Value) {
    send(
        &sb.client(),
        "PUT",
        &format!("{CONFIGMAPS}/{name}"),
        Some(body),
    )
    .await
}

/// The object with its first pending name removed (and whatever `mutate` changes), as an
/// initializer writes it back in one update.
fn initialized_by_first(mut obj: Value, mutate: impl FnOnce(&mut Value)) -> Value {
    let pending = obj["metadata"]["initializers"]["pending"]
        .as_array_mut()
        .unwrap();
    pending.remove(0);
    mutate(&mut obj);
    obj
}

#[tokio::test]
async fn discovery_lists_v1alpha1_only_in_legacy_mode() {
    let sb = legacy().await;
    let (code, list) = send(
        &sb.client(),
        "GET",
        "/apis/admissionregistration.k8s.io/v1alpha1",
        None,
    )
    .await;
    assert_eq!(code, 200);
    let resource = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "initializerconfigurations")
        .expect("initializerconfigurations served");
    assert_eq!(resource["kind"], "InitializerConfiguration");
    assert_eq!(resource["namespaced"], false);
    let (_, group) = send(
        &sb.client(),
        "GET",
        "/apis/admissionregistration.k8s.io",
        None,
    )
    .await;
    assert_eq!(group["preferredVersion"]["version"], "v1");
    assert!(group["versions"].to_string().contains("v1alpha1"));

    let plain = start().await;
    let (code, _) = send(&plain.client(), "GET", CONFIGS, None).await;
    assert_eq!(code, 404);
    let (_, group) = send(
        &plain.client(),
        "GET",
        "/apis/admissionregistration.k8s.io",
        None,
    )
    .await;
    assert!(!group["versions"].to_string().contains("v1alpha1"));
}

/// What kube-apiserver v1.13.0 answered to the configuration below (run by hand against the
/// binary `tools/legacy-apiserver/build.sh` builds), verbatim.
const REAL_1_13_REFUSAL: &str = r#"InitializerConfiguration.admissionregistration.k8s.io "sidecar" is invalid: [initializers[0].name: Invalid value: "sidecar": should be a domain with at least three segments separated by dots, initializers[1].name: Invalid value: "Sidecar.Example.Com": a DNS-1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), initializers[1].rules[0].apiGroups: Required value, initializers[1].rules[0].apiVersions: Invalid value: []string{"*", "v1"}: if '*' is present, must not specify other API versions, initializers[1].rules[0].resources: Invalid value: []string{"*", "pods"}: if '*' is present, must not specify other resources, initializers[2].name: Required value, initializers[3].rules[0].apiGroups: Invalid value: []string{"*", "apps"}: if '*' is present, must not specify other API groups, initializers[3].rules[0].apiVersions[0]: Required value, initializers[3].rules[0].resources[0]: Invalid value: "pods/status": must not specify subresources, initializers[3].rules[0].resources[1]: Invalid value: "*/*": must not specify subresources]"#;

#[tokio::test]
async fn configurations_are_refused_with_the_messages_of_1_13() {
    let sb = legacy().await;
    let body = json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": {"name": "sidecar"},
        "initializers": [
            {"name": "sidecar", "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["deployments"]}]},
            {"name": "Sidecar.Example.Com", "rules": [{"apiGroups": [], "apiVersions": ["*", "v1"], "resources": ["*", "pods"]}]},
            {"name": ""},
            {"name": "ok.example.com", "rules": [{"apiGroups": ["*", "apps"], "apiVersions": [""], "resources": ["pods/status", "*/*"]}]}
        ],
    });
    let (code, status) = send(&sb.client(), "POST", CONFIGS, Some(body)).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["message"], REAL_1_13_REFUSAL);
    assert_eq!(status["details"]["causes"].as_array().unwrap().len(), 10);
    assert_eq!(
        status["details"]["causes"][5],
        json!({"reason": "FieldValueRequired", "message": "Required value", "field": "initializers[2].name"})
    );
}

#[tokio::test]
async fn an_empty_initializers_list_is_stored_without_the_field_as_1_13_did() {
    let sb = legacy().await;
    let empty = json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": {"name": "empty"},
        "initializers": [],
    });
    let (code, created) = send(&sb.client(), "POST", CONFIGS, Some(empty)).await;
    assert_eq!(code, 201, "{created}");
    assert!(created.get("initializers").is_none(), "{created}");
    let path = format!("{CONFIGS}/empty");
    let (code, stored) = send(&sb.client(), "GET", &path, None).await;
    assert_eq!(code, 200, "{stored}");
    assert!(stored.get("initializers").is_none(), "{stored}");

    // An update emptying the list drops it too.
    configure(&sb, "emptied", &["a.example.com"], "configmaps").await;
    let path = format!("{CONFIGS}/emptied");
    let (_, mut config) = send(&sb.client(), "GET", &path, None).await;
    config["initializers"] = json!([]);
    let (code, updated) = send(&sb.client(), "PUT", &path, Some(config)).await;
    assert_eq!(code, 200, "{updated}");
    assert!(updated.get("initializers").is_none(), "{updated}");
}

#[tokio::test]
async fn matching_names_are_appended_and_the_create_waits_until_they_are_removed() {
    let sb = legacy().await;
    configure(&sb, "b-config", &["second.example.com"], "configmaps").await;
    configure(&sb, "a-config", &["first.example.com"], "configmaps").await;
    configure(&sb, "other", &["pods.example.com"], "pods").await;

    let started = Instant::now();
    let create = create_in_background(&sb, "?timeout=20s", configmap("held"));
    let obj = stored(&sb, "held").await;
    assert_eq!(
        obj["metadata"]["initializers"]["pending"],
        json!([{"name": "first.example.com"}, {"name": "second.example.com"}])
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !create.is_finished(),
        "the create answered before initialization"
    );

    // The first initializer mutates and removes itself in one update.
    let first = initialized_by_first(obj, |o| o["data"]["first"] = json!("yes"));
    let (code, after_first) = put(&sb, "held", first).await;
    assert_eq!(code, 200, "{after_first}");
    assert_eq!(
        after_first["metadata"]["initializers"]["pending"],
        json!([{"name": "second.example.com"}])
    );
    assert!(!create.is_finished());

    // A stale resourceVersion is a conflict.
    let mut stale = initialized_by_first(after_first.clone(), |_| {});
    stale["metadata"]["resourceVersion"] = json!("1");
    assert_eq!(put(&sb, "held", stale).await.0, 409);

    let last = initialized_by_first(after_first, |o| o["data"]["second"] = json!("yes"));
    let (code, done) = put(&sb, "held", last).await;
    assert_eq!(code, 200, "{done}");
    assert!(done["metadata"].get("initializers").is_none(), "{done}");

    let (code, answer) = create.await.unwrap();
    assert_eq!(code, 201, "{answer}");
    assert_eq!(
        answer["data"],
        json!({"a": "1", "first": "yes", "second": "yes"})
    );
    assert!(answer["metadata"].get("initializers").is_none());
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn include_uninitialized_answers_at_once_with_202() {
    let sb = legacy().await;
    configure(&sb, "c", &["held.example.com"], "configmaps").await;
    for (name, param) in [("one", "1"), ("two", "true")] {
        let (code, obj) = send(
            &sb.client(),
            "POST",
            &format!("{CONFIGMAPS}?includeUninitialized={param}"),
            Some(configmap(name)),
        )
        .await;
        assert_eq!(code, 202, "{obj}");
        assert_eq!(
            obj["metadata"]["initializers"]["pending"],
            json!([{"name": "held.example.com"}])
        );
    }
}

#[tokio::test]
async fn initializers_set_by_the_creator_are_kept() {
    let sb = legacy().await;
    configure(&sb, "c", &["sidecar.example.com"], "configmaps").await;

    // The walkthrough's self-exclusion: an explicit empty list means initialized at once.
    let mut excluded = configmap("excluded");
    excluded["metadata"]["initializers"] = json!({"pending": []});
    let (code, obj) = send(&sb.client(), "POST", CONFIGMAPS, Some(excluded)).await;
    assert_eq!(code, 201, "{obj}");
    assert!(obj["metadata"].get("initializers").is_none(), "{obj}");

    // A canary: only the creator's own name.
    let mut canary = configmap("canary");
    canary["metadata"]["initializers"] = json!({"pending": [{"name": "mine.example.com"}]});
    let (code, obj) = create_uninitialized(&sb, canary).await;
    assert_eq!(code, 202, "{obj}");
    assert_eq!(
        obj["metadata"]["initializers"],
        json!({"pending": [{"name": "mine.example.com"}]})
    );
}

#[tokio::test]
async fn nothing_is_assigned_when_no_rule_matches_or_legacy_mode_is_off() {
    let sb = legacy().await;
    configure(&sb, "c", &["pods.example.com"], "pods").await;
    let (code, obj) = send(&sb.client(), "POST", CONFIGMAPS, Some(configmap("free"))).await;
    assert_eq!(code, 201);
    assert!(obj["metadata"].get("initializers").is_none());

    let plain = start().await;
    let mut body = configmap("dropped");
    body["metadata"]["initializers"] = json!({"pending": [{"name": "a.example.com"}]});
    let (code, obj) = send(&plain.client(), "POST", CONFIGMAPS, Some(body)).await;
    assert_eq!(code, 201, "{obj}");
    assert!(obj["metadata"].get("initializers").is_none(), "{obj}");
}

#[tokio::test]
async fn invalid_pending_names_are_refused() {
    let sb = legacy().await;
    let mut body = configmap("bad");
    body["metadata"]["initializers"] = json!({"pending": [{"name": "short.io"}]});
    let (code, status) = send(&sb.client(), "POST", CONFIGMAPS, Some(body)).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "ConfigMap \"bad\" is invalid: metadata.initializers.pending[0].name: Invalid value: \"short.io\": should be a domain with at least three segments separated by dots"
    );

    // An initialized object cannot get initializers back.
    let (_, free) = send(&sb.client(), "POST", CONFIGMAPS, Some(configmap("free"))).await;
    let mut again = free.clone();
    again["metadata"]["initializers"] = json!({"pending": [{"name": "late.example.com"}]});
    let (code, status) = put(&sb, "free", again).await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with("metadata.initializers: Invalid value: \"null\": field is immutable once initialization has completed"),
        "{status}"
    );
}

#[tokio::test]
async fn list_hides_uninitialized_objects_unless_asked() {
    let sb = legacy().await;
    configure(&sb, "c", &["held.example.com"], "configmaps").await;
    send(
        &sb.client(),
        "POST",
        &format!("{CONFIGMAPS}?includeUninitialized=1"),
        Some(configmap("hidden")),
    )
    .await;
    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, plain) = send(&sb.client(), "GET", CONFIGMAPS, None).await;
    assert!(!names(&plain).contains(&"hidden".to_string()));
    let (_, all) = send(
        &sb.client(),
        "GET",
        &format!("{CONFIGMAPS}?includeUninitialized=true"),
        None,
    )
    .await;
    assert!(names(&all).contains(&"hidden".to_string()));
}

/// A watch of default's configmaps from the start, as raw JSON objects (typed objects would
/// drop `metadata.initializers`, which today's API types no longer have).
async fn watch_configmaps(
    sb: &TestSandbox,
    extra: &str,
) -> futures::stream::BoxStream<'static, kube::Result<WatchEvent<Value>>> {
    let request = http::Request::builder()
        .uri(format!("{CONFIGMAPS}?watch=true&resourceVersion=0{extra}"))
        .body(Vec::new())
        .unwrap();
    sb.client()
        .request_events::<Value>(request)
        .await
        .unwrap()
        .boxed()
}

/// The first `n` events: their type and whether the object still had initializers.
async fn first_events(
    events: futures::stream::BoxStream<'static, kube::Result<WatchEvent<Value>>>,
    n: usize,
) -> Vec<(&'static str, bool)> {
    let events = tokio::time::timeout(
        Duration::from_secs(10),
        events.take(n).try_collect::<Vec<_>>(),
    )
    .await
    .expect("watch events in time")
    .unwrap();
    events
        .into_iter()
        .map(|e| match e {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            other => panic!("unexpected event {other:?}"),
        })
        .map(|(t, o)| (t, o["metadata"].get("initializers").is_some()))
        .collect()
}

#[tokio::test]
async fn an_unaware_watcher_sees_the_object_added_once_initialized() {
    let sb = legacy().await;
    configure(&sb, "c", &["held.example.com"], "configmaps").await;
    let unaware = watch_configmaps(&sb, "").await;
    let aware = watch_configmaps(&sb, "&includeUninitialized=true").await;

    let (code, created) = send(
        &sb.client(),
        "POST",
        &format!("{CONFIGMAPS}?includeUninitialized=1"),
        Some(configmap("watched")),
    )
    .await;
    assert_eq!(code, 202);
    let (code, _) = put(&sb, "watched", initialized_by_first(created, |_| {})).await;
    assert_eq!(code, 200);

    // The sandbox has no configmaps of its own in default: these events are all ours.
    assert_eq!(first_events(unaware, 1).await, [("ADDED", false)]);
    assert_eq!(
        first_events(aware, 2).await,
        [("ADDED", true), ("MODIFIED", false)]
    );
}

#[tokio::test]
async fn a_failure_result_deletes_the_object_and_fails_the_create_with_it() {
    let sb = legacy().await;
    configure(&sb, "c", &["deny.example.com"], "configmaps").await;
    let create = create_in_background(&sb, "", configmap("refused"));
    let mut obj = stored(&sb, "refused").await;
    obj["metadata"]["initializers"]["result"] = json!({
        "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 403,
        "reason": "Forbidden", "message": "refused by deny.example.com: no sidecar today",
    });
    let (code, written) = put(&sb, "refused", obj).await;
    assert_eq!(code, 200, "{written}");

    let (code, status) = create.await.unwrap();
    assert_eq!(code, 403, "{status}");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "refused by deny.example.com: no sidecar today"
    );
    assert_eq!(get(&sb, "refused").await.0, 404);
}

/// Creates `body` with `query` (which sets `timeout=1s`) and checks the answer is 1.13's 504
/// `Timeout`, given after the second and not long after.
async fn times_out_after_one_second(sb: &TestSandbox, query: &str, body: Value) {
    let started = Instant::now();
    let (code, status) = send(
        &sb.client(),
        "POST",
        &format!("{CONFIGMAPS}{query}"),
        Some(body),
    )
    .await;
    let waited = started.elapsed();
    assert_eq!(code, 504, "{status}");
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(
        status["message"],
        "Timeout: request did not complete within requested timeout 1s"
    );
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

#[tokio::test]
async fn a_create_times_out_with_504_after_its_timeout_and_the_object_stays() {
    let sb = legacy().await;
    configure(&sb, "c", &["gone.example.com"], "configmaps").await;
    times_out_after_one_second(&sb, "?timeout=1s", configmap("stuck")).await;
    let (code, obj) = get(&sb, "stuck").await;
    assert_eq!(code, 200);
    assert_eq!(
        obj["metadata"]["initializers"]["pending"],
        json!([{"name": "gone.example.com"}])
    );
}

#[tokio::test]
async fn a_dry_run_create_waits_for_an_initialization_that_cannot_come_as_1_13_did() {
    let sb = legacy().await;
    configure(&sb, "c", &["never.example.com"], "configmaps").await;
    times_out_after_one_second(&sb, "?dryRun=All&timeout=1s", configmap("dry")).await;
    assert_eq!(get(&sb, "dry").await.0, 404);

    // Asking for the uninitialized object answers at once, as without the dry run.
    let (code, obj) = send(
        &sb.client(),
        "POST",
        &format!("{CONFIGMAPS}?dryRun=All&includeUninitialized=true"),
        Some(configmap("dry")),
    )
    .await;
    assert_eq!(code, 202, "{obj}");
    assert_eq!(
        obj["metadata"]["initializers"]["pending"],
        json!([{"name": "never.example.com"}])
    );
    assert_eq!(get(&sb, "dry").await.0, 404);
}

#[tokio::test]
async fn an_uninitialized_object_can_be_deleted_and_its_waiting_create_fails() {
    let sb = legacy().await;
    configure(&sb, "c", &["gone.example.com"], "configmaps").await;
    let create = create_in_background(&sb, "?timeout=20s", configmap("doomed"));
    stored(&sb, "doomed").await;
    let (code, _) = send(
        &sb.client(),
        "DELETE",
        &format!("{CONFIGMAPS}/doomed"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    let (code, status) = create.await.unwrap();
    assert_eq!(code, 500, "{status}");
    assert_eq!(
        status["message"],
        "Internal error occurred: object deleted while waiting for creation"
    );
    assert_eq!(
        status["details"],
        json!({"causes": [{"message": "object deleted while waiting for creation"}]})
    );
    assert_eq!(get(&sb, "doomed").await.0, 404);
}

/// Pods of `app` in `ns`, initialized or not.
async fn all_pods(client: &kube::Client, ns: &str, app: &str) -> Vec<Value> {
    let (code, list) = send(
        client,
        "GET",
        &format!(
            "/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}&includeUninitialized=true"
        ),
        None,
    )
    .await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Removes the first pending name of `ns/plural/name` in one update, as an initializer does.
async fn initialize(client: &kube::Client, path: &str) {
    let (code, obj) = send(client, "GET", path, None).await;
    assert_eq!(code, 200, "{obj}");
    let (code, out) = send(client, "PUT", path, Some(initialized_by_first(obj, |_| {}))).await;
    assert_eq!(code, 200, "{out}");
}

const WORKLOAD_WAIT: Duration = Duration::from_secs(30);

/// Waits until the app `app` in `apps` runs exactly one pod, and it is ready.
async fn one_ready_pod(env: &workload_support::Env, what: &str, app: &str) {
    let selector = format!("app={app}");
    workload_support::wait_for(what, WORKLOAD_WAIT, || async {
        let pods = env.pods("apps", &selector).await;
        (pods.len() == 1 && pods.iter().all(workload_support::is_ready)).then_some(())
    })
    .await;
}

/// Runs `check` (which asserts) every 200 ms for two seconds: what must stay true for a while,
/// not merely become true.
async fn keeps_holding<F, Fut>(mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let quiet_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < quiet_until {
        check().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_deployment_created_uninitialized_gets_no_pods_until_initialized() {
    let env = workload_support::Env::start_with(|c| c.legacy_initializers = true).await;
    env.namespace("apps").await;
    configure_group(
        &env.client,
        "sidecar",
        &["sidecar.example.com"],
        "apps",
        "deployments",
    )
    .await;
    let (code, created) = send(
        &env.client,
        "POST",
        "/apis/apps/v1/namespaces/apps/deployments?includeUninitialized=1",
        Some(workload_support::app_deployment(
            "held",
            1,
            json!([]),
            json!([]),
        )),
    )
    .await;
    assert_eq!(code, 202, "{created}");

    // The controller does not see the Deployment: no pod, not even an uninitialized one.
    keeps_holding(|| async {
        assert!(all_pods(&env.client, "apps", "held").await.is_empty());
    })
    .await;

    initialize(
        &env.client,
        "/apis/apps/v1/namespaces/apps/deployments/held",
    )
    .await;
    one_ready_pod(&env, "a ready pod of the initialized deployment", "held").await;
    env.stop().await;
}

#[tokio::test]
async fn pods_of_a_deployment_get_pending_names_and_run_only_once_initialized() {
    let env = workload_support::Env::start_with(|c| c.legacy_initializers = true).await;
    env.namespace("apps").await;
    configure_group(&env.client, "pods", &["pods.example.com"], "", "pods").await;
    let _: k8s_openapi::api::apps::v1::Deployment = env
        .create(
            "apps",
            workload_support::app_deployment("web", 1, json!([]), json!([])),
        )
        .await;

    let pod = workload_support::wait_for("an uninitialized pod", WORKLOAD_WAIT, || async {
        all_pods(&env.client, "apps", "web")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(
        pod["metadata"]["initializers"]["pending"],
        json!([{"name": "pods.example.com"}])
    );
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();

    // Not run: the node agent does not see it, so it gets no address and no phase; and the
    // controller, which does not see it either, makes no second one.
    keeps_holding(|| async {
        let pods = all_pods(&env.client, "apps", "web").await;
        assert_eq!(pods.len(), 1, "{pods:?}");
        assert!(pods[0]["status"].get("podIP").is_none(), "{}", pods[0]);
        assert!(env.pods("apps", "app=web").await.is_empty());
    })
    .await;

    initialize(&env.client, &format!("/api/v1/namespaces/apps/pods/{name}")).await;
    one_ready_pod(&env, "the initialized pod running and ready", "web").await;
    env.stop().await;
}

#[tokio::test]
async fn a_json_patch_can_remove_a_name_and_change_the_object_in_one_write() {
    let sb = legacy().await;
    configure(&sb, "c", &["patcher.example.com"], "configmaps").await;
    let create = create_in_background(&sb, "?timeout=20s", configmap("patched"));
    let obj = stored(&sb, "patched").await;
    let patch = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]},
        {"op": "remove", "path": "/metadata/initializers/pending/0"},
        {"op": "add", "path": "/data/patched", "value": "yes"},
    ]);
    let (code, out) = raw(
        &sb.client(),
        "PATCH",
        &format!("{CONFIGMAPS}/patched"),
        None,
        Some("application/json-patch+json"),
        Some(patch),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{out}");
    assert!(out["metadata"].get("initializers").is_none(), "{out}");
    let (code, answer) = create.await.unwrap();
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["data"]["patched"], "yes");
}

/// Starts `sandbox up` with `args` and `env`; returns the child and its stdout lines up to the
/// kubeconfig line and the start line.
fn sandbox_up(
    state: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Child, Vec<String>) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["up", "--state-dir"])
        .arg(state)
        .args(args)
        .env_remove("SANDBOX_LEGACY_INITIALIZERS")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let done = line.starts_with("started in ");
        lines.push(line);
        if done {
            break;
        }
    }
    (child, lines)
}

async fn serves_v1alpha1(lines: &[String]) -> bool {
    let kubeconfig = lines
        .iter()
        .find_map(|l| l.strip_prefix("kubeconfig: "))
        .unwrap();
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    send(&client, "GET", CONFIGS, None).await.0 == 200
}

fn stop(mut child: std::process::Child) {
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(child.wait().unwrap().success());
}

#[tokio::test]
async fn sandbox_up_turns_legacy_mode_on_by_flag_or_environment() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (args, env, on)) in [
        (vec!["--legacy-initializers"], vec![], true),
        (vec![], vec![("SANDBOX_LEGACY_INITIALIZERS", "1")], true),
        (vec![], vec![("SANDBOX_LEGACY_INITIALIZERS", "0")], false),
        (vec![], vec![], false),
    ]
    .into_iter()
    .enumerate()
    {
        let (child, lines) = sandbox_up(&dir.path().join(format!("s{i}")), &args, &env);
        let announced = lines.iter().any(|l| l.starts_with("legacy mode:"));
        let served = serves_v1alpha1(&lines).await;
        stop(child);
        assert_eq!((announced, served), (on, on), "{args:?} {env:?}: {lines:?}");
    }
}

#[tokio::test]
async fn a_strategic_merge_patch_merges_pending_by_name() {
    let sb = legacy().await;
    configure(
        &sb,
        "c",
        &["first.example.com", "second.example.com"],
        "configmaps",
    )
    .await;
    let (code, _) = create_uninitialized(&sb, configmap("merged")).await;
    assert_eq!(code, 202);
    let smp = |patch: Value| {
        let client = sb.client();
        async move {
            raw(
                &client,
                "PATCH",
                &format!("{CONFIGMAPS}/merged"),
                None,
                Some("application/strategic-merge-patch+json"),
                Some(patch),
            )
            .await
            .unwrap()
        }
    };
    // An empty list merges nothing: the era's merge strategy for `pending`.
    let (code, out) = smp(json!({"metadata": {"initializers": {"pending": []}}})).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["metadata"]["initializers"]["pending"],
        json!([{"name": "first.example.com"}, {"name": "second.example.com"}])
    );
    let (code, out) = smp(json!({"metadata": {"initializers": {"pending": [
        {"name": "first.example.com", "$patch": "delete"}
    ]}}}))
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["metadata"]["initializers"]["pending"],
        json!([{"name": "second.example.com"}])
    );
}

#[tokio::test]
async fn pending_lists_are_checked_as_1_13_checked_them() {
    let sb = legacy().await;
    // Verbatim what kube-apiserver v1.13.0 answered to the same create.
    let mut bad = configmap("bad");
    bad["metadata"]["initializers"] =
        json!({"pending": [{"name": "Bad_Name"}, {"name": ""}, {"name": "short.io"}]});
    let (code, status) = create_uninitialized(&sb, bad).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        r#"ConfigMap "bad" is invalid: [metadata.initializers.pending[0].name: Invalid value: "Bad_Name": a DNS-1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), metadata.initializers.pending[1].name: Required value, metadata.initializers.pending[2].name: Invalid value: "short.io": should be a domain with at least three segments separated by dots]"#
    );

    let mut success = configmap("success");
    success["metadata"]["initializers"] =
        json!({"pending": [{"name": "a.example.com"}], "result": {"status": "Success"}});
    let (code, status) = create_uninitialized(&sb, success).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        r#"ConfigMap "success" is invalid: metadata.initializers.result.status: Invalid value: "Success": must be 'Failure'"#
    );

    // Duplicate names pass, as they did.
    let mut twice = configmap("twice");
    twice["metadata"]["initializers"] =
        json!({"pending": [{"name": "a.example.com"}, {"name": "a.example.com"}]});
    let (code, obj) = create_uninitialized(&sb, twice).await;
    assert_eq!(code, 202, "{obj}");

    // A PUT without the field initializes the object (200), as 1.13 did.
    let mut without = obj.clone();
    without["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("initializers");
    let (code, out) = put(&sb, "twice", without).await;
    assert_eq!(code, 200, "{out}");
    assert!(out["metadata"].get("initializers").is_none(), "{out}");
}

#[tokio::test]
async fn a_failed_initialization_is_modified_then_deleted_for_aware_watchers_only() {
    let sb = legacy().await;
    configure(&sb, "c", &["deny.example.com"], "configmaps").await;
    let unaware = watch_configmaps(&sb, "").await;
    let aware = watch_configmaps(&sb, "&includeUninitialized=true").await;
    let create = create_in_background(&sb, "", configmap("failing"));
    let mut obj = stored(&sb, "failing").await;
    obj["metadata"]["initializers"]["result"] =
        json!({"status": "Failure", "code": 403, "message": "no"});
    assert_eq!(put(&sb, "failing", obj).await.0, 200);
    assert_eq!(create.await.unwrap().0, 403);
    // A result set at creation fails the create at once; the object stays (1.13 observed).
    let mut born_failed = configmap("born-failed");
    born_failed["metadata"]["initializers"] = json!({
        "pending": [{"name": "a.example.com"}],
        "result": {"status": "Failure", "code": 409, "message": "born failed"},
    });
    let (code, status) = send(&sb.client(), "POST", CONFIGMAPS, Some(born_failed)).await;
    assert_eq!(
        (code, status["message"].as_str()),
        (409, Some("born failed"))
    );
    assert_eq!(get(&sb, "born-failed").await.0, 200);
    // An unaware watcher saw none of it: its first event is the next initialized object.
    send(
        &sb.client(),
        "POST",
        CONFIGMAPS,
        Some({
            let mut free = configmap("free");
            free["metadata"]["initializers"] = json!({"pending": []});
            free
        }),
    )
    .await;
    assert_eq!(
        first_events(aware, 4).await,
        [
            ("ADDED", true),
            ("MODIFIED", true),
            ("DELETED", true),
            ("ADDED", true)
        ]
    );
    assert_eq!(first_events(unaware, 1).await, [("ADDED", false)]);
}

#[tokio::test]
async fn a_status_write_takes_initializers_from_its_body_as_1_13_did() {
    let sb = legacy().await;
    configure_group(
        &sb.client(),
        "d",
        &["dep.example.com"],
        "apps",
        "deployments",
    )
    .await;
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let deployment = |name: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    };
    let status_put = |name: &str, body: Value| {
        let client = sb.client();
        let uri = format!("{deployments}/{name}/status");
        async move { send(&client, "PUT", &uri, Some(body)).await }
    };
    let listed = |name: &'static str| {
        let client = sb.client();
        async move {
            let (_, list) = send(&client, "GET", deployments, None).await;
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["metadata"]["name"] == name)
        }
    };

    // Without the field: initialized.
    let (code, mut obj) = send(
        &sb.client(),
        "POST",
        &format!("{deployments}?includeUninitialized=true"),
        Some(deployment("dropped")),
    )
    .await;
    assert_eq!(code, 202, "{obj}");
    obj["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("initializers");
    obj["status"] = json!({"replicas": 5});
    let (code, out) = status_put("dropped", obj).await;
    assert_eq!(code, 200, "{out}");
    assert!(out["metadata"].get("initializers").is_none(), "{out}");
    assert!(listed("dropped").await);

    // An emptied list through status stays (the plugin skipped subresources): still hidden.
    let (_, mut obj) = send(
        &sb.client(),
        "POST",
        &format!("{deployments}?includeUninitialized=true"),
        Some(deployment("emptied")),
    )
    .await;
    obj["metadata"]["initializers"]["pending"] = json!([]);
    let (code, out) = status_put("emptied", obj).await;
    assert_eq!(code, 200, "{out}");
    assert!(out["metadata"].get("initializers").is_some(), "{out}");
    assert!(!listed("emptied").await);
}
