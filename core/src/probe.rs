//! The active probe: a synthetic dry-run AdmissionReview POSTed to the initializer's webhook
//! path the way the API server calls a webhook. Every ready endpoint of the initializer's
//! Service is dialled directly, over TLS trusting only the configuration's `caBundle`, with the
//! server name `<service>.<namespace>.svc`; the answer must be a well-formed review for the same
//! uid, within the latency budget. So a wrong `caBundle`, a certificate for another name or an
//! expired one fail the probe exactly as they fail the API server's calls, and one hung pod
//! among several fails the round (the API server would send it a share of the calls).
//!
//! Building the review, judging an answer, classifying an IO error and combining the endpoints'
//! results are pure; [`probe`] is the only IO. How the TCP connection is opened is a
//! [`Connector`]: a plain connect by default, another for a test that runs the operator outside
//! the cluster's network.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use initializer_crds::InterceptRule;
use initializer_crds::constants::{INITIALIZER_PORT_NAME, SERVICE_PORT, WEBHOOK_PATH};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::net::TcpStream;

/// Name of the synthetic object in every probe.
pub const PROBE_OBJECT_NAME: &str = "initializer-operator-probe";
/// Namespace of the synthetic object in every probe.
pub const PROBE_NAMESPACE: &str = "default";

/// The API group, version, resource and kind a probe pretends to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Kind of the object the synthetic review pretends to create ([`kind_for`]).
    pub kind: String,
}

/// The kind of a plural resource name: common resources by table, the rest by singularising and
/// capitalising (`widgets` → `Widget`, `policies` → `Policy`).
pub fn kind_for(resource: &str) -> String {
    let known = [
        ("pods", "Pod"),
        ("deployments", "Deployment"),
        ("statefulsets", "StatefulSet"),
        ("daemonsets", "DaemonSet"),
        ("replicasets", "ReplicaSet"),
        ("jobs", "Job"),
        ("cronjobs", "CronJob"),
        ("secrets", "Secret"),
        ("configmaps", "ConfigMap"),
        ("services", "Service"),
        ("namespaces", "Namespace"),
        ("persistentvolumeclaims", "PersistentVolumeClaim"),
        ("ingresses", "Ingress"),
        ("networkpolicies", "NetworkPolicy"),
        ("serviceaccounts", "ServiceAccount"),
    ];
    if let Some((_, kind)) = known.iter().find(|(r, _)| *r == resource) {
        return kind.to_string();
    }
    let singular = if let Some(stem) = resource.strip_suffix("ies") {
        format!("{stem}y")
    } else if let Some(stem) = resource.strip_suffix("sses") {
        format!("{stem}ss")
    } else if let Some(stem) = resource.strip_suffix('s') {
        stem.to_string()
    } else {
        resource.to_string()
    };
    let mut chars = singular.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => "Unknown".to_string(),
    }
}

/// What a probe for these rules pretends to create: the first rule's first concrete group,
/// version and resource (wildcards fall back to core `v1` `pods`).
pub fn target_for(rules: &[InterceptRule]) -> ProbeTarget {
    let rule = rules.first();
    let pick = |list: Option<&Vec<String>>| {
        list.and_then(|l| l.iter().find(|x| !x.contains('*')).cloned())
    };
    let resource = pick(rule.map(|r| &r.resources))
        .map(|r| r.split('/').next().unwrap_or_default().to_string())
        .filter(|r| !r.is_empty());
    let (group, resource) = match resource {
        Some(resource) => (
            pick(rule.map(|r| &r.api_groups)).unwrap_or_default(),
            resource,
        ),
        None => (String::new(), "pods".to_string()),
    };
    let version = pick(rule.map(|r| &r.api_versions)).unwrap_or_else(|| "v1".to_string());
    let version = if group.is_empty() && resource == "pods" && version.is_empty() {
        "v1".to_string()
    } else {
        version
    };
    ProbeTarget {
        kind: kind_for(&resource),
        group,
        version,
        resource,
    }
}

/// A minimal object of the target's kind, shaped so that typed handlers can read it.
pub fn object_for(target: &ProbeTarget) -> Value {
    let api_version = if target.group.is_empty() {
        target.version.clone()
    } else {
        format!("{}/{}", target.group, target.version)
    };
    let metadata = json!({
        "name": PROBE_OBJECT_NAME,
        "namespace": PROBE_NAMESPACE,
        "labels": {"app": PROBE_OBJECT_NAME},
    });
    let pod_spec = json!({"containers": [{"name": "probe", "image": "probe"}]});
    let template = json!({"metadata": {"labels": {"app": PROBE_OBJECT_NAME}}, "spec": pod_spec});
    let selector = json!({"matchLabels": {"app": PROBE_OBJECT_NAME}});
    let mut object = json!({"apiVersion": api_version, "kind": target.kind, "metadata": metadata});
    let extra = match target.kind.as_str() {
        "Pod" => json!({"spec": pod_spec}),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => {
            json!({"spec": {"replicas": 1, "selector": selector, "template": template}})
        }
        "Job" => json!({"spec": {"template": template}}),
        "CronJob" => {
            json!({"spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": template}}}})
        }
        "Secret" => json!({"type": "Opaque", "data": {}}),
        "ConfigMap" => json!({"data": {}}),
        _ => json!({}),
    };
    if let (Some(obj), Value::Object(more)) = (object.as_object_mut(), extra) {
        obj.extend(more);
    }
    object
}

/// The synthetic AdmissionReview: v1, dry run, CREATE, with a fresh `uid`.
pub fn review(target: &ProbeTarget, uid: &str, user: &str) -> Value {
    let gvk = json!({"group": target.group, "version": target.version, "kind": target.kind});
    let gvr =
        json!({"group": target.group, "version": target.version, "resource": target.resource});
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": PROBE_OBJECT_NAME,
            "namespace": PROBE_NAMESPACE,
            "operation": "CREATE",
            "userInfo": {"username": user},
            "object": object_for(target),
            "oldObject": null,
            "dryRun": true,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "dryRun": ["All"]},
        }
    })
}

/// The most of an answer a probe reads; a larger answer is a bad one.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Why a probe of one endpoint did not count as healthy: the signal, and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The kind of failure.
    pub failure: Failure,
    /// What happened, for the status and the log.
    pub why: String,
}

impl Rejection {
    fn new(failure: Failure, why: impl Into<String>) -> Self {
        Self {
            failure,
            why: why.into(),
        }
    }
}

/// Checks an answer: a v1 AdmissionReview whose response has the same `uid` and says whether
/// the request is allowed. Denying the probe object is a correct answer too, unless the denial
/// carries a server error code (`status.code` ≥ 500: the SDK's answer for a handler that
/// panicked or overran under a fail-closed policy), which is what every real call would get.
/// Returns whether it was allowed.
pub fn check_answer(body: &[u8], uid: &str) -> Result<bool, Rejection> {
    let bad = |why: String| Rejection::new(Failure::BadAnswer, why);
    let answer: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("the answer is not JSON: {e}")))?;
    if answer.get("kind").and_then(Value::as_str) != Some("AdmissionReview") {
        return Err(bad("the answer is not an AdmissionReview".into()));
    }
    if answer.get("apiVersion").and_then(Value::as_str) != Some("admission.k8s.io/v1") {
        return Err(bad("the answer is not admission.k8s.io/v1".into()));
    }
    let response = answer
        .get("response")
        .ok_or_else(|| bad("the answer has no response".into()))?;
    match response.get("uid").and_then(Value::as_str) {
        Some(got) if got == uid => {}
        Some(got) => return Err(bad(format!("the answer is for uid {got}, not {uid}"))),
        None => return Err(bad("the answer has no uid".into())),
    }
    let allowed = response
        .get("allowed")
        .and_then(Value::as_bool)
        .ok_or_else(|| bad("the answer does not say whether the request is allowed".into()))?;
    if response.get("patch").is_some()
        && response.get("patchType").and_then(Value::as_str) != Some("JSONPatch")
    {
        return Err(bad(
            "the answer has a patch without patchType JSONPatch".into()
        ));
    }
    let status = response.get("status");
    let code = status
        .and_then(|s| s.get("code"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if !allowed && code >= 500 {
        let message = status
            .and_then(|s| s.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(Rejection::new(
            Failure::InternalError,
            format!(
                "the initializer failed internally and denied the request (code {code}): {message}"
            ),
        ));
    }
    Ok(allowed)
}

/// The TLS server name the API server verifies for Service `service` in `namespace`.
pub fn server_name(service: &str, namespace: &str) -> String {
    format!("{service}.{namespace}.svc")
}

/// Why a probe failed: the signals a failed probe carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the latency budget (a hung or overloaded initializer).
    TimedOut,
    /// The connection was refused: nothing listens at the endpoint (crashed, or exiting).
    Refused,
    /// The connection was reset or closed: the initializer went away mid-request.
    Reset,
    /// The Service has no ready endpoint.
    NoEndpoints,
    /// An answer came, but not a well-formed review for the same uid.
    BadAnswer,
    /// The serving certificate does not verify against the `caBundle` for the Service's name
    /// (another CA, another name, expired), or the `caBundle` holds no certificate.
    BadCertificate,
    /// The initializer answered with a server error: an HTTP 5xx, or a denial with code ≥ 500.
    InternalError,
    /// Anything else on the way.
    Unreachable,
}

impl Failure {
    /// The `Responding` condition's reason for this failure.
    pub fn reason(self) -> &'static str {
        match self {
            Failure::TimedOut => "ProbeTimedOut",
            Failure::Refused => "ConnectionRefused",
            Failure::Reset => "ConnectionReset",
            Failure::NoEndpoints => "NoReadyEndpoints",
            Failure::BadAnswer => "BadAnswer",
            Failure::BadCertificate => "CertificateRejected",
            Failure::InternalError => "InternalError",
            Failure::Unreachable => "ProbeFailed",
        }
    }
}

/// Classifies an IO error on the way to an endpoint: a TLS error that rejects the certificate,
/// or the error's kind.
pub fn classify(error: &io::Error) -> Failure {
    if let Some(tls) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        return match tls {
            rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
                Failure::BadCertificate
            }
            _ => Failure::Unreachable,
        };
    }
    match error.kind() {
        io::ErrorKind::ConnectionRefused => Failure::Refused,
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => Failure::Reset,
        io::ErrorKind::TimedOut => Failure::TimedOut,
        _ => Failure::Unreachable,
    }
}

fn io_rejection(step: &str, error: &io::Error) -> Rejection {
    Rejection::new(classify(error), format!("failed to {step}: {error}"))
}

/// Classifies an HTTP error: by the IO error under it when there is one.
fn http_rejection(error: &(dyn std::error::Error + 'static)) -> Rejection {
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return io_rejection("exchange the review", io);
        }
        if e.is::<http_body_util::LengthLimitError>() {
            return Rejection::new(
                Failure::BadAnswer,
                format!("the answer is larger than {} KiB", MAX_ANSWER_BYTES / 1024),
            );
        }
        source = e.source();
    }
    let failure = match error.downcast_ref::<hyper::Error>() {
        Some(e) if e.is_incomplete_message() || e.is_canceled() => Failure::Reset,
        Some(e) if e.is_parse() => Failure::BadAnswer,
        _ => Failure::Unreachable,
    };
    Rejection::new(failure, format!("failed to exchange the review: {error}"))
}

/// The outcome of one probe round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Whether it counts as a success.
    pub ok: bool,
    /// How long it took: the slowest endpoint (the budget when one timed out).
    pub latency: Duration,
    /// What happened.
    pub message: String,
    /// Why it failed, when it did.
    pub failure: Option<Failure>,
    /// Every endpoint answered with a certificate of the current CA: a replaced CA may leave
    /// the `caBundle` (false when the round failed).
    pub current_ca: bool,
}

/// What an endpoint that answered well said, and with which certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Whether it allowed the probe object.
    pub allowed: bool,
    /// Whether its certificate was signed by the current CA (the first of the `caBundle`),
    /// rather than by one a rotation replaced.
    pub current_ca: bool,
}

/// What one endpoint did: its address, how long it took, and its answer.
pub type EndpointResult = (SocketAddr, Duration, Result<Answer, Rejection>);

/// Combines the endpoints' results into the round's outcome: it fails when there is no
/// endpoint or when any endpoint failed (the first failed endpoint, in address order, gives the
/// reason and is named in the message).
pub fn combine(results: &[EndpointResult]) -> Outcome {
    let latency = results
        .iter()
        .map(|(_, latency, _)| *latency)
        .max()
        .unwrap_or_default();
    if results.is_empty() {
        return Outcome {
            ok: false,
            latency,
            message: "the Service has no ready endpoint to probe".into(),
            failure: Some(Failure::NoEndpoints),
            current_ca: false,
        };
    }
    let mut sorted: Vec<&EndpointResult> = results.iter().collect();
    sorted.sort_by_key(|(addr, _, _)| *addr);
    let failed: Vec<(&SocketAddr, &Rejection)> = sorted
        .iter()
        .filter_map(|(addr, _, r)| r.as_ref().err().map(|e| (addr, e)))
        .collect();
    if let Some((addr, first)) = failed.first() {
        return Outcome {
            ok: false,
            latency,
            message: format!(
                "{} of {} ready endpoints failed; endpoint {addr}: {}",
                failed.len(),
                results.len(),
                first.why
            ),
            failure: Some(first.failure),
            current_ca: false,
        };
    }
    let allowed = sorted
        .iter()
        .all(|(_, _, r)| r.as_ref().is_ok_and(|a| a.allowed));
    let current_ca = sorted
        .iter()
        .all(|(_, _, r)| r.as_ref().is_ok_and(|a| a.current_ca));
    Outcome {
        ok: true,
        latency,
        message: format!(
            "{} ready endpoint{} answered in {} ms ({})",
            results.len(),
            if results.len() == 1 { "" } else { "s" },
            latency.as_millis(),
            if allowed { "allowed" } else { "denied" }
        ),
        failure: None,
        current_ca,
    }
}

/// The ready endpoints of a slice as addresses to dial: each ready endpoint's addresses with the
/// slice's port named like the Service's port (or its only port). An endpoint without a `ready`
/// condition counts as ready, as the EndpointSlice API says consumers should treat it.
pub fn ready_addresses(slice: &EndpointSlice) -> Vec<SocketAddr> {
    let ports = slice.ports.iter().flatten();
    let named = ports
        .clone()
        .find(|p| p.name.as_deref() == Some(INITIALIZER_PORT_NAME));
    let only = (ports.clone().count() == 1)
        .then(|| ports.clone().next())
        .flatten();
    let Some(port) = named
        .or(only)
        .and_then(|p| p.port)
        .and_then(|p| u16::try_from(p).ok())
    else {
        return Vec::new();
    };
    slice
        .endpoints
        .iter()
        .flatten()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| &e.addresses)
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, port))
        .collect()
}

type ConnectFn = dyn Fn(SocketAddr) -> BoxFuture<'static, io::Result<TcpStream>> + Send + Sync;

/// Opens the TCP connection to one endpoint. The default is a plain connect, right wherever the
/// operator runs in the cluster's network; a test running the operator outside it passes one
/// that connects from inside.
#[derive(Clone)]
pub struct Connector(Arc<ConnectFn>);

impl Connector {
    /// A connector that opens connections with `connect`.
    pub fn new<F, Fut>(connect: F) -> Self
    where
        F: Fn(SocketAddr) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = io::Result<TcpStream>> + Send + 'static,
    {
        Self(Arc::new(move |addr| Box::pin(connect(addr))))
    }

    /// A plain TCP connect.
    pub fn direct() -> Self {
        Self::new(TcpStream::connect)
    }

    /// Opens a connection to `addr`.
    pub async fn connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        (self.0)(addr).await
    }
}

impl Default for Connector {
    fn default() -> Self {
        Self::direct()
    }
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Connector")
    }
}

/// A TLS client that trusts only the certificates of a `caBundle` and verifies the Service's
/// name, as the API server does.
#[derive(Clone)]
pub struct TlsTarget {
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    authority: String,
    /// The subject of the bundle's first certificate (the current CA).
    current_subject: Option<Vec<u8>>,
}

impl fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTarget")
            .field("authority", &self.authority)
            .finish_non_exhaustive()
    }
}

impl TlsTarget {
    /// Trusts every certificate in `ca_bundle` (PEM; a malformed one is skipped, as Go's
    /// `AppendCertsFromPEM` does) and nothing else, for Service `service` in `namespace`.
    pub fn new(ca_bundle: &[u8], service: &str, namespace: &str) -> Result<Self, Rejection> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;
        let bad = |why: String| Rejection::new(Failure::BadCertificate, why);
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_bundle).flatten() {
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(bad("the caBundle holds no usable certificate".into()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(format!("failed to prepare TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = server_name(service, namespace);
        let server_name = ServerName::try_from(name.clone())
            .map_err(|e| bad(format!("failed to use {name:?} as a TLS server name: {e}")))?;
        let text = String::from_utf8_lossy(ca_bundle);
        let current_subject = crate::tls::certificate_blocks(&text)
            .first()
            .and_then(|pem| crate::tls::inspect(pem).ok())
            .map(|info| info.subject);
        Ok(Self {
            config: Arc::new(config),
            server_name,
            authority: format!("{name}:{SERVICE_PORT}"),
            current_subject,
        })
    }

    /// Whether the leaf certificate `der` was issued by the current CA.
    fn issued_by_current(&self, der: Option<&[u8]>) -> bool {
        let issuer = der
            .and_then(|der| x509_parser::parse_x509_certificate(der).ok())
            .map(|(_, cert)| cert.issuer().as_raw().to_vec());
        issuer.is_some() && issuer == self.current_subject
    }
}

/// Everything one probe round needs.
#[derive(Clone, Copy, Debug)]
pub struct Round<'a> {
    /// The initializer's Service.
    pub service: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// The configuration's `caBundle` (PEM).
    pub ca_bundle: &'a [u8],
    /// The ready endpoints to probe.
    pub endpoints: &'a [SocketAddr],
    /// What the probe pretends to create.
    pub target: &'a ProbeTarget,
    /// The requesting user shown to the initializer.
    pub user: &'a str,
    /// A slower endpoint fails.
    pub budget: Duration,
}

/// Probes every endpoint of `round` at once, each within the budget, and combines the results.
pub async fn probe(connector: &Connector, round: &Round<'_>) -> Outcome {
    match probe_each(connector, round).await {
        Ok(results) => combine(&results),
        Err(outcome) => outcome,
    }
}

/// Keeps the results of the endpoints still in `ready`: an endpoint that left the ready set
/// while it was probed (a pod shutting down in a rollout) no longer receives the API server's
/// calls, and its failure says nothing about the initializer.
pub fn still_ready(results: Vec<EndpointResult>, ready: &[SocketAddr]) -> Vec<EndpointResult> {
    results
        .into_iter()
        .filter(|(addr, _, _)| ready.contains(addr))
        .collect()
}

/// Probes every endpoint of `round` at once, each within the budget: each endpoint's result,
/// or the failed outcome when no endpoint could be tried (the `caBundle` holds no certificate).
pub async fn probe_each(
    connector: &Connector,
    round: &Round<'_>,
) -> Result<Vec<EndpointResult>, Outcome> {
    let tls = match TlsTarget::new(round.ca_bundle, round.service, round.namespace) {
        Ok(tls) => tls,
        Err(rejection) => {
            return Err(Outcome {
                ok: false,
                latency: Duration::ZERO,
                message: rejection.why,
                failure: Some(rejection.failure),
                current_ca: false,
            });
        }
    };
    let uid = format!("{:032x}", rand::random::<u128>());
    let body = match serde_json::to_vec(&review(round.target, &uid, round.user)) {
        Ok(body) => bytes::Bytes::from(body),
        Err(e) => {
            return Err(Outcome {
                ok: false,
                latency: Duration::ZERO,
                message: format!("failed to serialize the probe: {e}"),
                failure: Some(Failure::Unreachable),
                current_ca: false,
            });
        }
    };
    let mut endpoints = round.endpoints.to_vec();
    endpoints.sort();
    endpoints.dedup();
    let budget = round.budget;
    let calls = endpoints.iter().map(|addr| {
        let (tls, body, uid) = (&tls, body.clone(), uid.as_str());
        async move {
            let started = Instant::now();
            let reached = Reached::default();
            let result =
                tokio::time::timeout(budget, call(connector, tls, *addr, body, uid, &reached))
                    .await;
            match result {
                Ok(result) => (*addr, started.elapsed(), result),
                Err(_) => (
                    *addr,
                    budget,
                    Err(Rejection::new(
                        Failure::TimedOut,
                        format!(
                            "no answer within the latency budget of {} ms ({})",
                            budget.as_millis(),
                            reached.stalled_at()
                        ),
                    )),
                ),
            }
        }
    });
    Ok(futures::future::join_all(calls).await)
}

/// How far one exchange got, read when its budget runs out: a timeout while connecting (a full
/// listen backlog), in the TLS handshake (a server short of CPU) and waiting for the answer (a
/// slow handler) are different troubles.
#[derive(Default)]
struct Reached(AtomicU8);

impl Reached {
    const CONNECTED: u8 = 1;
    const HANDSHAKEN: u8 = 2;

    fn set(&self, stage: u8) {
        self.0.store(stage, Ordering::Relaxed);
    }

    /// Where the exchange was when it stopped.
    fn stalled_at(&self) -> &'static str {
        match self.0.load(Ordering::Relaxed) {
            0 => "still connecting",
            Self::CONNECTED => "in the TLS handshake",
            _ => "waiting for the answer",
        }
    }
}

/// One exchange with one endpoint: connect, TLS, POST over HTTP/1.1, read at most
/// [`MAX_ANSWER_BYTES`], judge. Dropping it (the budget ran out) closes the connection.
async fn call(
    connector: &Connector,
    tls: &TlsTarget,
    addr: SocketAddr,
    body: bytes::Bytes,
    uid: &str,
    reached: &Reached,
) -> Result<Answer, Rejection> {
    let tcp = connector
        .connect(addr)
        .await
        .map_err(|e| io_rejection("connect", &e))?;
    reached.set(Reached::CONNECTED);
    let _ = tcp.set_nodelay(true);
    let stream = tokio_rustls::TlsConnector::from(tls.config.clone())
        .connect(tls.server_name.clone(), tcp)
        .await
        .map_err(|e| io_rejection("complete the TLS handshake", &e))?;
    reached.set(Reached::HANDSHAKEN);
    let current_ca = tls.issued_by_current(
        stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|der| der.as_ref()),
    );
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http_rejection(&e))?;
    let request = http::Request::post(WEBHOOK_PATH)
        .header(http::header::HOST, tls.authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, */*")
        .body(Full::new(body))
        .map_err(|e| {
            Rejection::new(
                Failure::Unreachable,
                format!("failed to build the probe request: {e}"),
            )
        })?;
    let exchange = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| http_rejection(&e))?;
        let status = response.status();
        let answer = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| http_rejection(e.as_ref()))?
            .to_bytes();
        if !status.is_success() {
            let failure = if status.is_server_error() {
                Failure::InternalError
            } else {
                Failure::BadAnswer
            };
            let text = String::from_utf8_lossy(&answer);
            let text: String = text.trim().chars().take(200).collect();
            return Err(Rejection::new(
                failure,
                format!("the initializer answered HTTP {}: {text}", status.as_u16()),
            ));
        }
        check_answer(&answer, uid).map(|allowed| Answer {
            allowed,
            current_ca,
        })
    };
    // The connection is driven here, not on a task of its own: when the budget runs out, the
    // whole exchange is dropped and nothing is left waiting on a hung endpoint.
    let mut conn = std::pin::pin!(conn);
    let mut exchange = std::pin::pin!(exchange);
    tokio::select! {
        biased;
        result = &mut exchange => return result,
        _ = &mut conn => {}
    }
    exchange.await
}

#[cfg(test)]
mod tests;
