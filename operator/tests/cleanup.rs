//! The finalizer's request sequence, against a mock API server (kube's mock-service pattern):
//! cleanup deletes the webhook configuration and keeps the finalizer until a GET answers 404.

// Test helpers outside #[test] functions may unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use initializer_crds::Initializer;
use initializer_crds::constants::{INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use initializer_operator::Error;
use initializer_operator::build::Settings;
use initializer_operator::controller::{Context, reconcile};
use initializer_operator::metrics::Metrics;
use initializer_operator::supervisor::Supervisor;
use kube::Client;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};

const CONFIG_PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/initializer-guard";

fn deleted_initializer() -> Initializer {
    serde_json::from_value(json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {
            "name": "guard",
            "uid": "uid-1",
            "resourceVersion": "7",
            "finalizers": ["initializer.dev/cleanup"],
            "deletionTimestamp": "2026-11-21T10:00:00Z",
        },
        "spec": {
            "image": "example/guard:1",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
        }
    }))
    .unwrap()
}

fn respond(code: StatusCode, body: Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn not_found() -> Response<Body> {
    respond(
        StatusCode::NOT_FOUND,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}

/// A mock API server where the configuration exists while `exists` is true (its deletion is
/// still pending), recording every request as "METHOD path". With `ours` it carries the
/// operator's labels for this Initializer; without, it is someone else's of the same name.
fn mock(exists: Arc<AtomicBool>, log: Arc<Mutex<Vec<String>>>, ours: bool) -> Client {
    let service = tower::service_fn(move |req: Request<Body>| {
        let exists = exists.clone();
        let log = log.clone();
        async move {
            let line = format!("{} {}", req.method(), req.uri().path());
            log.lock().unwrap().push(line.clone());
            let labels = if ours {
                json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE, INITIALIZER_LABEL: "guard"})
            } else {
                json!({"team": "platform"})
            };
            let config = json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "initializer-guard", "labels": labels},
            });
            let response = match (req.method().as_str(), req.uri().path()) {
                ("DELETE" | "GET", CONFIG_PATH) if exists.load(Ordering::SeqCst) => {
                    respond(StatusCode::OK, config)
                }
                ("DELETE" | "GET", CONFIG_PATH) => not_found(),
                ("POST", "/apis/events.k8s.io/v1/namespaces/default/events") => respond(
                    StatusCode::CREATED,
                    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"}, "eventTime": null}),
                ),
                ("PATCH", "/apis/initializer.dev/v1alpha1/initializers/guard") => {
                    let mut obj = serde_json::to_value(deleted_initializer()).unwrap();
                    obj["metadata"]["finalizers"] = json!([]);
                    respond(StatusCode::OK, obj)
                }
                _ => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"kind": "Status", "code": 500, "message": line}),
                ),
            };
            Ok::<_, Infallible>(response)
        }
    });
    Client::new(service, "default")
}

fn context(client: Client) -> Arc<Context> {
    let metrics = Metrics::shared();
    let recorder = Recorder::new(client.clone(), Reporter::from("test"));
    Arc::new(Context {
        client: client.clone(),
        recorder: recorder.clone(),
        metrics: metrics.clone(),
        settings: Settings {
            preset_image: "example/preset:1".into(),
            network_policy: None,
        },
        operator_namespace: "initializer-system".into(),
        supervisor: Supervisor::new(
            client,
            recorder,
            metrics,
            "test".into(),
            initializer_operator::leader::Leadership::unconditional(),
        ),
        memory: Default::default(),
        guard: tokio::sync::watch::channel(initializer_operator::guard::GuardState::NotServed).1,
        policy_canary: None,
        policy_api: Default::default(),
        seen_ranges: Default::default(),
    })
}

#[tokio::test]
async fn cleanup_keeps_the_finalizer_until_the_configuration_is_gone() {
    let exists = Arc::new(AtomicBool::new(true));
    let log = Arc::new(Mutex::new(Vec::new()));
    let ctx = context(mock(exists.clone(), log.clone(), true));

    // The deletion is pending: the configuration still answers GET.
    let err = reconcile(Arc::new(deleted_initializer()), ctx.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Finalizer(inner) if matches!(inner.as_ref(), kube::runtime::finalizer::Error::CleanupFailed(Error::CleanupPending(_)))
        ),
        "{err}"
    );
    assert!(!err.is_permanent());
    let first: Vec<String> = log.lock().unwrap().drain(..).collect();
    // Read first (never delete what is not ours), read again for the UID and version the
    // delete is conditioned on, then delete, then check it is gone.
    assert_eq!(first[0], format!("GET {CONFIG_PATH}"), "{first:?}");
    assert_eq!(first[1], format!("GET {CONFIG_PATH}"), "{first:?}");
    assert_eq!(first[2], format!("DELETE {CONFIG_PATH}"), "{first:?}");
    assert!(
        first[3..].contains(&format!("GET {CONFIG_PATH}")),
        "{first:?}"
    );
    assert!(
        !first.iter().any(|l| l.starts_with("PATCH")),
        "the finalizer must stay while the configuration exists: {first:?}"
    );

    // Gone: 404 on both, and only then the finalizer is removed.
    exists.store(false, Ordering::SeqCst);
    reconcile(Arc::new(deleted_initializer()), ctx)
        .await
        .unwrap();
    let second: Vec<String> = log.lock().unwrap().drain(..).collect();
    assert_eq!(
        second,
        [
            format!("GET {CONFIG_PATH}"),
            format!("GET {CONFIG_PATH}"),
            "PATCH /apis/initializer.dev/v1alpha1/initializers/guard".to_string(),
        ]
    );
}

#[tokio::test]
async fn cleanup_never_deletes_a_configuration_of_the_same_name_that_is_not_ours() {
    let exists = Arc::new(AtomicBool::new(true));
    let log = Arc::new(Mutex::new(Vec::new()));
    let ctx = context(mock(exists, log.clone(), false));
    // Ours was never registered: nothing to wait for, and theirs is left alone.
    reconcile(Arc::new(deleted_initializer()), ctx)
        .await
        .unwrap();
    let requests: Vec<String> = log.lock().unwrap().drain(..).collect();
    assert!(
        !requests.iter().any(|l| l.starts_with("DELETE")),
        "{requests:?}"
    );
    assert!(
        requests.contains(&"PATCH /apis/initializer.dev/v1alpha1/initializers/guard".to_string()),
        "the finalizer is removed: {requests:?}"
    );
}
