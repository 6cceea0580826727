//! Test helpers for admission: a small HTTPS admission webhook server with a scripted handler
//! (its certificates from `initializer-test-support`'s CA), and an in-memory `ClusterView`.

#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use initializer_sandbox::view::{ClusterView, MemoryView, ResourceRef};
use serde_json::{Value, json};

/// The test CA of every test crate, under the name these tests use.
pub use initializer_test_support::TestCa as Ca;

/// What the scripted webhook answers for one review: the `response` object and a delay.
pub type Script = Arc<dyn Fn(&Value) -> (Value, Duration) + Send + Sync>;

/// A running HTTPS admission webhook server.
pub struct WebhookServer {
    pub addr: SocketAddr,
    pub calls: Arc<AtomicUsize>,
    /// Every AdmissionReview request received, in order.
    pub reviews: Arc<Mutex<Vec<Value>>>,
    /// The request path of every call, in order.
    pub paths: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WebhookServer {
    /// Serves on `ip` (port chosen by the OS) with a certificate from `ca` for `names`.
    pub async fn start(ip: &str, ca: &Ca, names: &[&str], script: Script) -> Self {
        let (cert_pem, key_pem) = ca.issue(names);
        let acceptor = initializer_test_support::pki::tls_acceptor(&cert_pem, &key_pem);
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let (calls2, reviews2, paths2) = (calls.clone(), reviews.clone(), paths.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let (script, calls, reviews, paths) = (
                    script.clone(),
                    calls2.clone(),
                    reviews2.clone(),
                    paths2.clone(),
                );
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let (script, calls, reviews, paths) = (
                                script.clone(),
                                calls.clone(),
                                reviews.clone(),
                                paths.clone(),
                            );
                            async move {
                                calls.fetch_add(1, Ordering::SeqCst);
                                paths.lock().unwrap().push(req.uri().path().to_owned());
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let review: Value = serde_json::from_slice(&body).unwrap();
                                reviews.lock().unwrap().push(review.clone());
                                let (response, delay) = script(&review);
                                tokio::time::sleep(delay).await;
                                let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
                                Ok::<_, std::convert::Infallible>(
                                    http::Response::builder()
                                        .header("content-type", "application/json")
                                        .body(http_body_util::Full::new(bytes::Bytes::from(
                                            answer.to_string(),
                                        )))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            calls,
            reviews,
            paths,
            task,
        }
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// Allows with an optional JSON patch (operations as JSON) and warnings.
pub fn allow(review: &Value, patch: Option<Value>, warnings: &[&str]) -> Value {
    let mut r = json!({"uid": review["request"]["uid"], "allowed": true, "warnings": warnings});
    if let Some(p) = patch {
        r["patchType"] = json!("JSONPatch");
        r["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(p.to_string()));
    }
    r
}

/// A script answering every review at once with what `answer` makes of it.
pub fn replies(answer: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Script {
    Arc::new(move |review: &Value| (answer(review), Duration::ZERO))
}

/// A script allowing every review unchanged after `delay`.
pub fn allows_after(delay: Duration) -> Script {
    Arc::new(move |review: &Value| (allow(review, None, &[]), delay))
}

/// A script allowing every review unchanged at once.
pub fn allows() -> Script {
    allows_after(Duration::ZERO)
}

/// A script allowing every review at once with the JSON patch `patch`.
pub fn patches(patch: Value) -> Script {
    replies(move |review| allow(review, Some(patch.clone()), &[]))
}

/// A local address nothing listens on (bound, read, closed): a webhook that is down.
pub fn closed_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The sandbox's in-memory view, with the objects admission tests need.
#[derive(Default)]
pub struct FakeView {
    objects: MemoryView,
}

impl std::ops::Deref for FakeView {
    type Target = MemoryView;

    fn deref(&self) -> &MemoryView {
        &self.objects
    }
}

impl FakeView {
    /// A namespace with labels (and `kubernetes.io/metadata.name`, as the API server sets).
    pub fn namespace(&self, name: &str, labels: Value) {
        let mut l = labels;
        l["kubernetes.io/metadata.name"] = json!(name);
        self.add("namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": l}}));
    }

    /// A Service `name` in `ns` with port 443 → target 8443, and a ready endpoint at `addr`.
    pub fn service_at(&self, ns: &str, name: &str, addr: SocketAddr) {
        self.add(
            "services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": "https"}]}}),
        );
        self.add(
            "endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{name}-abc"), "namespace": ns, "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "ports": [{"name": "https", "port": addr.port(), "protocol": "TCP"}],
                "endpoints": [{"addresses": [addr.ip().to_string()], "conditions": {"ready": true}}]}),
        );
    }
}

// Admission takes a `&dyn ClusterView`, which a `Deref` does not give.
impl ClusterView for FakeView {
    fn list(&self, resource: ResourceRef<'_>, namespace: Option<&str>) -> Vec<Value> {
        self.objects.list(resource, namespace)
    }

    fn get(&self, resource: ResourceRef<'_>, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.objects.get(resource, namespace, name)
    }
}

/// The resource of MutatingWebhookConfigurations.
pub const MUTATING: &str = "mutatingwebhookconfigurations";
/// The resource of ValidatingWebhookConfigurations.
pub const VALIDATING: &str = "validatingwebhookconfigurations";

/// A webhook configuration of `resource` ([`MUTATING`] or [`VALIDATING`]) named `config`, with
/// one webhook `webhook` for pod creates calling service `svc` in `ns` at `/mutate`. `extra` is
/// merged into the webhook.
pub fn webhook_configuration(
    resource: &str,
    config: &str,
    webhook: &str,
    ns: &str,
    svc: &str,
    ca: &Ca,
    extra: Value,
) -> Value {
    let kind = match resource {
        MUTATING => "MutatingWebhookConfiguration",
        VALIDATING => "ValidatingWebhookConfiguration",
        other => panic!("{other} is not a webhook configuration resource"),
    };
    let mut hook = json!({
        "name": webhook,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "clientConfig": {"service": {"name": svc, "namespace": ns, "path": "/mutate", "port": 443}, "caBundle": ca.bundle()},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        hook[k] = v;
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": config}, "webhooks": [hook]})
}

/// Pod-create attributes in `ns` for a pod with `labels`.
pub fn pod_create(
    ns: &str,
    name: &str,
    labels: Value,
) -> initializer_sandbox::admission::Attributes {
    initializer_sandbox::admission::Attributes {
        group: String::new(),
        version: "v1".into(),
        kind: "Pod".into(),
        resource: "pods".into(),
        subresource: String::new(),
        namespace: Some(ns.into()),
        name: name.into(),
        operation: initializer_sandbox::admission::Operation::Create,
        object: Some(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        ),
        old_object: None,
        dry_run: false,
        user: initializer_sandbox::admission::UserInfo {
            username: "admin".into(),
            groups: vec!["system:masters".into()],
        },
    }
}
