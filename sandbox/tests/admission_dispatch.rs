//! Admission against a real HTTPS webhook server and an in-memory view: the fastest tier, calling
//! `Admission::admit` directly.

#![allow(clippy::unwrap_used, clippy::panic)]

mod admission_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use admission_support::{
    Ca, FakeView, MUTATING, Script, VALIDATING, WebhookServer, allow, allows, allows_after,
    closed_port, patches, pod_create, replies, webhook_configuration,
};
use initializer_sandbox::admission::{Admission, Attributes, Outcome};
use serde_json::{Value, json};

const NS: &str = "webhooks";
const SVC: &str = "hook";
const SVC_DNS: &str = "hook.webhooks.svc";

fn allowed(outcome: Outcome) -> (Value, Vec<String>) {
    match outcome {
        Outcome::Allowed { object, warnings } => (object.unwrap(), warnings),
        Outcome::Denied(status) => panic!("expected allowed, got denied: {status}"),
    }
}

fn denied(outcome: Outcome) -> Value {
    match outcome {
        Outcome::Allowed { object, .. } => panic!("expected denied, got allowed: {object:?}"),
        Outcome::Denied(status) => status,
    }
}

async fn setup(script: Script) -> (Ca, WebhookServer, FakeView) {
    let ca = Ca::new("webhook-ca");
    let server = WebhookServer::start("127.0.0.1", &ca, &[SVC_DNS], script).await;
    let view = FakeView::default();
    view.namespace("team", json!({"env": "test"}));
    view.namespace(NS, json!({}));
    view.service_at(NS, SVC, server.addr);
    (ca, server, view)
}

/// Like [`setup`], but the service's endpoint is a port nothing listens on, also returned.
fn setup_down() -> (Ca, FakeView, SocketAddr) {
    let ca = Ca::new("ca");
    let view = FakeView::default();
    view.namespace("team", json!({}));
    let closed = closed_port();
    view.service_at(NS, SVC, closed);
    (ca, view, closed)
}

/// Adds configuration `config` of `resource` whose one webhook, `CONFIG.example.com`, calls the
/// `hook` service; `extra` is merged into the webhook.
fn configure(view: &FakeView, resource: &'static str, config: &str, ca: &Ca, extra: Value) {
    let webhook = format!("{config}.example.com");
    let configuration = webhook_configuration(resource, config, &webhook, NS, SVC, ca, extra);
    view.add(resource, configuration);
}

/// The reinvocation tests' webhooks: `first.example.com` (reinvoked if needed), then
/// `second.example.com`.
fn configure_first_and_second(view: &FakeView, ca: &Ca) {
    for (config, webhook, extra) in [
        (
            "a-first",
            "first.example.com",
            json!({"reinvocationPolicy": "IfNeeded"}),
        ),
        ("b-second", "second.example.com", json!({})),
    ] {
        let configuration = webhook_configuration(MUTATING, config, webhook, NS, SVC, ca, extra);
        view.add(MUTATING, configuration);
    }
}

/// Adds the usual mutating webhook, `m.example.com` in configuration `m`.
fn mutating(view: &FakeView, ca: &Ca, extra: Value) {
    configure(view, MUTATING, "m", ca, extra);
}

/// Runs the admission chain (it keeps no state between requests) for `attrs`.
async fn admit(view: &FakeView, attrs: Attributes) -> Outcome {
    Admission::default().admit(view, attrs).await
}

/// Admits the creation of pod `team/p`, without labels.
async fn admit_pod(view: &FakeView) -> Outcome {
    admit(view, pod_create("team", "p", json!({}))).await
}

/// The message of a denial's status.
fn message(status: &Value) -> &str {
    status["message"].as_str().unwrap()
}

#[tokio::test]
async fn mutating_webhook_patch_is_applied_and_warnings_are_returned() {
    let (ca, server, view) = setup(replies(|r| {
        allow(r, Some(json!([{"op": "add", "path": "/metadata/annotations", "value": {"mutated": "yes"}}])), &["be careful"])
    }))
    .await;
    mutating(&view, &ca, json!({}));
    let (object, warnings) = allowed(admit_pod(&view).await);
    assert_eq!(object["metadata"]["annotations"]["mutated"], "yes");
    assert_eq!(warnings, vec!["be careful".to_owned()]);
    assert_eq!(server.calls(), 1);
    let review = server.reviews.lock().unwrap()[0].clone();
    assert_eq!(review["request"]["operation"], "CREATE");
    assert_eq!(review["request"]["namespace"], "team");
    assert_eq!(review["request"]["kind"]["kind"], "Pod");
    assert_eq!(review["request"]["userInfo"]["username"], "admin");
    assert_eq!(review["request"]["object"]["metadata"]["name"], "p");
}

#[tokio::test]
async fn denial_carries_the_webhooks_message_and_code() {
    let (ca, _server, view) = setup(replies(|r| {
        json!({"uid": r["request"]["uid"], "allowed": false, "status": {"code": 403, "message": "pods must say please"}})
    }))
    .await;
    mutating(&view, &ca, json!({}));
    let status = denied(admit_pod(&view).await);
    assert_eq!(
        status["message"],
        "admission webhook \"m.example.com\" denied the request: pods must say please"
    );
    assert_eq!(status["code"], 403);
    assert_eq!(status["status"], "Failure");
}

#[tokio::test]
async fn validating_webhook_sees_the_mutated_object_and_can_deny() {
    let (ca, server, view) = setup(replies(|r| {
        if r["request"]["object"]["metadata"]["labels"]["mutated"] == "true" {
            json!({"uid": r["request"]["uid"], "allowed": false, "status": {"message": "saw the mutation"}})
        } else {
            allow(r, Some(json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "true"}])), &[])
        }
    }))
    .await;
    mutating(&view, &ca, json!({}));
    configure(&view, VALIDATING, "v", &ca, json!({}));
    let status = denied(admit_pod(&view).await);
    assert_eq!(
        status["message"],
        "admission webhook \"v.example.com\" denied the request: saw the mutation"
    );
    assert_eq!(status["code"], 400);
    assert_eq!(server.calls(), 2);
}

#[tokio::test]
async fn configurations_run_in_name_order_sharing_one_uid() {
    let (ca, server, view) = setup(replies(|r| {
        let trail = r["request"]["object"]["metadata"]["annotations"]["trail"].as_str().unwrap_or_default().to_owned();
        allow(r, Some(json!([{"op": "add", "path": "/metadata/annotations", "value": {"trail": format!("{trail}x")}}])), &[])
    }))
    .await;
    for name in ["zeta", "alpha", "mid"] {
        let webhook = format!("{name}.example.com");
        let mut config = webhook_configuration(MUTATING, name, &webhook, NS, SVC, &ca, json!({}));
        config["webhooks"][0]["clientConfig"]["service"]["path"] = json!(format!("/{name}"));
        view.add(MUTATING, config);
    }
    let (object, _) = allowed(admit_pod(&view).await);
    // Each webhook saw the previous one's patch.
    assert_eq!(object["metadata"]["annotations"]["trail"], "xxx");
    assert_eq!(
        *server.paths.lock().unwrap(),
        vec!["/alpha", "/mid", "/zeta"]
    );
    let reviews = server.reviews.lock().unwrap().clone();
    let uid = reviews[0]["request"]["uid"].clone();
    assert!(uid.as_str().is_some_and(|u| u.len() == 36));
    assert!(reviews.iter().all(|r| r["request"]["uid"] == uid));
}

#[tokio::test]
async fn failure_policy_fail_rejects_with_the_api_servers_message_when_the_server_is_down() {
    let (ca, view, closed) = setup_down();
    mutating(&view, &ca, json!({"timeoutSeconds": 5}));
    let status = denied(admit_pod(&view).await);
    assert_eq!(status["code"], 500);
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(
        status["message"],
        format!(
            "Internal error occurred: failed calling webhook \"m.example.com\": failed to call webhook: Post \"https://hook.webhooks.svc:443/mutate?timeout=5s\": dial tcp {closed}: connect: connection refused"
        )
    );
}

#[tokio::test]
async fn failure_policy_fail_rejects_when_the_service_has_no_endpoints() {
    let ca = Ca::new("ca");
    let view = FakeView::default();
    view.namespace("team", json!({}));
    view.add(
        "services",
        json!({"metadata": {"name": SVC, "namespace": NS}, "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}}),
    );
    mutating(&view, &ca, json!({}));
    let status = denied(admit_pod(&view).await);
    assert_eq!(
        status["message"],
        "Internal error occurred: failed calling webhook \"m.example.com\": failed to call webhook: Post \"https://hook.webhooks.svc:443/mutate?timeout=10s\": no endpoints available for service \"hook\""
    );
}

#[tokio::test]
async fn failure_policy_ignore_proceeds_unchanged_when_the_server_is_down() {
    let (ca, view, _) = setup_down();
    mutating(&view, &ca, json!({"failurePolicy": "Ignore"}));
    let attrs = pod_create("team", "p", json!({"a": "b"}));
    let original = attrs.object.clone().unwrap();
    let (object, _) = allowed(admit(&view, attrs).await);
    assert_eq!(object, original);
}

async fn timed_admission(policy: &str, timeout_seconds: u64) -> (Outcome, Duration) {
    let (ca, _server, view) = setup(allows_after(Duration::from_secs(30))).await;
    let extra = json!({"failurePolicy": policy, "timeoutSeconds": timeout_seconds});
    mutating(&view, &ca, extra);
    let started = Instant::now();
    let outcome = admit_pod(&view).await;
    (outcome, started.elapsed())
}

#[tokio::test]
async fn timeout_seconds_is_honoured_within_ten_percent_under_fail() {
    let (outcome, elapsed) = timed_admission("Fail", 2).await;
    println!("timeoutSeconds=2 (Fail): admission took {elapsed:?}");
    let status = denied(outcome);
    assert!(
        message(&status).ends_with("?timeout=2s\": context deadline exceeded"),
        "{status}"
    );
    assert!(
        elapsed >= Duration::from_millis(1800) && elapsed <= Duration::from_millis(2200),
        "took {elapsed:?}"
    );
}

#[tokio::test]
async fn timeout_seconds_is_honoured_within_ten_percent_under_ignore() {
    let (outcome, elapsed) = timed_admission("Ignore", 2).await;
    println!("timeoutSeconds=2 (Ignore): admission took {elapsed:?}");
    allowed(outcome);
    assert!(
        elapsed >= Duration::from_millis(1800) && elapsed <= Duration::from_millis(2200),
        "took {elapsed:?}"
    );
}

#[tokio::test]
async fn ca_bundle_check_rejects_a_server_signed_by_another_ca() {
    let (_ca, _server, view) = setup(allows()).await;
    let other = Ca::new("someone-else");
    mutating(&view, &other, json!({}));
    let status = denied(admit_pod(&view).await);
    assert!(
        message(&status).ends_with(
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        ),
        "{status}"
    );
}

#[tokio::test]
async fn server_certificate_must_name_the_service() {
    let ca = Ca::new("ca");
    let server = WebhookServer::start("127.0.0.1", &ca, &["other.webhooks.svc"], allows()).await;
    let view = FakeView::default();
    view.namespace("team", json!({}));
    view.service_at(NS, SVC, server.addr);
    mutating(&view, &ca, json!({}));
    let status = denied(admit_pod(&view).await);
    assert!(
        message(&status).contains("x509: certificate is not valid"),
        "{status}"
    );
    assert_eq!(server.calls(), 0);
}

#[tokio::test]
async fn namespace_selector_is_matched_against_the_namespaces_labels() {
    let (ca, server, view) = setup(allows()).await;
    view.namespace("prod", json!({"env": "prod"}));
    view.namespace("kube-system", json!({}));
    let selector = json!({
        "matchLabels": {"env": "test"},
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]});
    mutating(&view, &ca, json!({"namespaceSelector": selector}));
    allowed(admit(&view, pod_create("prod", "p", json!({}))).await);
    allowed(admit(&view, pod_create("kube-system", "p", json!({}))).await);
    assert_eq!(server.calls(), 0);
    allowed(admit(&view, pod_create("team", "p", json!({}))).await);
    assert_eq!(server.calls(), 1);
}

#[tokio::test]
async fn object_selector_excludes_labelled_objects() {
    let (ca, server, view) = setup(allows()).await;
    let selector = json!({
        "matchExpressions": [{"key": "initializer.dev/excluded", "operator": "DoesNotExist"}]});
    mutating(&view, &ca, json!({"objectSelector": selector}));
    allowed(
        admit(
            &view,
            pod_create("team", "own", json!({"initializer.dev/excluded": "true"})),
        )
        .await,
    );
    assert_eq!(server.calls(), 0);
    allowed(admit(&view, pod_create("team", "other", json!({"app": "x"}))).await);
    assert_eq!(server.calls(), 1);
}

#[tokio::test]
async fn rules_that_do_not_match_the_request_skip_the_webhook() {
    let (ca, server, view) = setup(allows()).await;
    let secrets = json!({"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"], "operations": ["CREATE"]});
    mutating(&view, &ca, json!({"rules": [secrets]}));
    allowed(admit_pod(&view).await);
    assert_eq!(server.calls(), 0);
}

#[tokio::test]
async fn if_needed_webhook_is_reinvoked_once_after_a_later_webhook_changes_the_object() {
    let (ca, server, view) = setup(replies(|r| {
        let labels = &r["request"]["object"]["metadata"]["labels"];
        // "/first" adds label a when absent; "/second" adds label b when absent.
        let patch = if labels.get("a").is_none() {
            Some(json!([{"op": "add", "path": "/metadata/labels/a", "value": "1"}]))
        } else if labels.get("b").is_none() {
            Some(json!([{"op": "add", "path": "/metadata/labels/b", "value": "1"}]))
        } else {
            None
        };
        allow(r, patch, &[])
    }))
    .await;
    configure_first_and_second(&view, &ca);
    let (object, _) = allowed(admit_pod(&view).await);
    assert_eq!(object["metadata"]["labels"], json!({"a": "1", "b": "1"}));
    // first, second, then first again because second changed the object.
    assert_eq!(server.calls(), 3);
}

#[tokio::test]
async fn if_needed_webhook_is_not_reinvoked_when_nothing_changes_after_it() {
    let (ca, server, view) = setup(replies(|r| {
        let labels = &r["request"]["object"]["metadata"]["labels"];
        let patch = labels
            .get("a")
            .is_none()
            .then(|| json!([{"op": "add", "path": "/metadata/labels/a", "value": "1"}]));
        allow(r, patch, &[])
    }))
    .await;
    configure_first_and_second(&view, &ca);
    allowed(admit_pod(&view).await);
    assert_eq!(server.calls(), 2);
}

#[tokio::test]
async fn response_for_another_uid_is_a_failed_call() {
    let (ca, _server, view) =
        setup(replies(|_| json!({"uid": "not-yours", "allowed": true}))).await;
    mutating(&view, &ca, json!({}));
    let status = denied(admit_pod(&view).await);
    assert!(
        message(&status).contains("received invalid webhook response: expected response.uid="),
        "{status}"
    );
}

#[tokio::test]
async fn dry_run_is_refused_by_a_webhook_with_side_effects() {
    let (ca, server, view) = setup(allows()).await;
    mutating(&view, &ca, json!({"sideEffects": "Some"}));
    let mut attrs = pod_create("team", "p", json!({}));
    attrs.dry_run = true;
    let status = denied(admit(&view, attrs).await);
    assert_eq!(status["code"], 400);
    assert_eq!(
        status["message"],
        "admission webhook \"m.example.com\" does not support dry run"
    );
    assert_eq!(server.calls(), 0);
}

#[tokio::test]
async fn dry_run_reaches_a_side_effect_free_webhook_flagged_as_dry_run() {
    let (ca, server, view) = setup(allows()).await;
    mutating(&view, &ca, json!({}));
    let mut attrs = pod_create("team", "p", json!({}));
    attrs.dry_run = true;
    allowed(admit(&view, attrs).await);
    assert_eq!(server.reviews.lock().unwrap()[0]["request"]["dryRun"], true);
}

#[tokio::test]
async fn url_client_config_is_called_with_its_host_verified() {
    let ca = Ca::new("ca");
    let server = WebhookServer::start(
        "127.0.0.1",
        &ca,
        &["127.0.0.1"],
        patches(json!([{"op": "add", "path": "/metadata/labels/url", "value": "yes"}])),
    )
    .await;
    let view = FakeView::default();
    view.namespace("team", json!({}));
    let url = format!("https://127.0.0.1:{}/mutate", server.addr.port());
    let client_config = json!({"url": url, "caBundle": ca.bundle()});
    mutating(&view, &ca, json!({"clientConfig": client_config}));
    let (object, _) = allowed(admit_pod(&view).await);
    assert_eq!(object["metadata"]["labels"]["url"], "yes");
}

#[tokio::test]
async fn patch_that_cannot_apply_is_an_internal_error_even_under_ignore() {
    let (ca, _server, view) = setup(patches(json!([
        {"op": "replace", "path": "/no/such/path", "value": 1}
    ])))
    .await;
    mutating(&view, &ca, json!({"failurePolicy": "Ignore"}));
    let status = denied(admit_pod(&view).await);
    assert_eq!(status["code"], 500);
}

#[tokio::test]
async fn validating_webhooks_are_called_in_parallel() {
    let (ca, server, view) = setup(allows_after(Duration::from_secs(1))).await;
    for name in ["v1", "v2"] {
        configure(&view, VALIDATING, name, &ca, json!({}));
    }
    let started = Instant::now();
    allowed(admit_pod(&view).await);
    let took = started.elapsed();
    println!("two validating webhooks answering after 1 s each: admission took {took:?}");
    assert_eq!(server.calls(), 2);
    // One after the other would take two seconds.
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(1800),
        "took {took:?}"
    );
}

#[tokio::test]
async fn first_validating_refusal_in_configuration_order_decides() {
    let (ca, _server, view) = setup(replies(
        |r| json!({"uid": r["request"]["uid"], "allowed": false, "status": {"message": "no"}}),
    ))
    .await;
    for name in ["b", "a"] {
        configure(&view, VALIDATING, name, &ca, json!({}));
    }
    let status = denied(admit_pod(&view).await);
    assert_eq!(
        status["message"],
        "admission webhook \"a.example.com\" denied the request: no"
    );
}

#[tokio::test]
async fn the_step_between_runs_after_mutating_and_before_validating_webhooks() {
    let (ca, server, view) = setup(allows()).await;
    mutating(&view, &ca, json!({}));
    configure(&view, VALIDATING, "v", &ca, json!({}));
    // Where kube-apiserver 1.13 ran its Initializers plugin.
    let between = |obj: &mut Value| -> Result<(), Value> {
        obj["metadata"]["initializers"] = json!({"pending": [{"name": "a.example.com"}]});
        Ok(())
    };
    let (object, _) = allowed(
        Admission::default()
            .admit_with(&view, pod_create("team", "p", json!({})), Some(&between))
            .await,
    );
    assert_eq!(
        object["metadata"]["initializers"]["pending"][0]["name"],
        "a.example.com"
    );
    let reviews = server.reviews.lock().unwrap().clone();
    let seen: Vec<bool> = reviews
        .iter()
        .map(|r| {
            r["request"]["object"]["metadata"]
                .get("initializers")
                .is_some()
        })
        .collect();
    // The mutating webhook is called first, then the validating one.
    assert_eq!(seen, [false, true]);

    let refuse =
        |_: &mut Value| -> Result<(), Value> { Err(json!({"code": 422, "message": "no"})) };
    let status = denied(
        Admission::default()
            .admit_with(&view, pod_create("team", "q", json!({})), Some(&refuse))
            .await,
    );
    assert_eq!(status["message"], "no");
}

#[tokio::test]
async fn the_step_between_runs_when_no_webhook_applies() {
    let view = FakeView::default();
    let between = |obj: &mut Value| -> Result<(), Value> {
        obj["metadata"]["labels"] = json!({"stepped": "yes"});
        Ok(())
    };
    let (object, _) = allowed(
        Admission::default()
            .admit_with(&view, pod_create("team", "p", json!({})), Some(&between))
            .await,
    );
    assert_eq!(object["metadata"]["labels"]["stepped"], "yes");
}
