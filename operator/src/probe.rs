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
            let result = tokio::time::timeout(budget, call(connector, tls, *addr, body, uid)).await;
            match result {
                Ok(result) => (*addr, started.elapsed(), result),
                Err(_) => (
                    *addr,
                    budget,
                    Err(Rejection::new(
                        Failure::TimedOut,
                        format!(
                            "no answer within the latency budget of {} ms",
                            budget.as_millis()
                        ),
                    )),
                ),
            }
        }
    });
    Ok(futures::future::join_all(calls).await)
}

/// One exchange with one endpoint: connect, TLS, POST over HTTP/1.1, read at most
/// [`MAX_ANSWER_BYTES`], judge. Dropping it (the budget ran out) closes the connection.
async fn call(
    connector: &Connector,
    tls: &TlsTarget,
    addr: SocketAddr,
    body: bytes::Bytes,
    uid: &str,
) -> Result<Answer, Rejection> {
    let tcp = connector
        .connect(addr)
        .await
        .map_err(|e| io_rejection("connect", &e))?;
    let _ = tcp.set_nodelay(true);
    let stream = tokio_rustls::TlsConnector::from(tls.config.clone())
        .connect(tls.server_name.clone(), tcp)
        .await
        .map_err(|e| io_rejection("complete the TLS handshake", &e))?;
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
mod tests {
    use super::*;
    use initializer_crds::Operation;

    fn rule(groups: &[&str], versions: &[&str], resources: &[&str]) -> InterceptRule {
        let s = |l: &[&str]| l.iter().map(|x| x.to_string()).collect();
        InterceptRule {
            api_groups: s(groups),
            api_versions: s(versions),
            resources: s(resources),
            operations: vec![Operation::Create],
            scope: None,
        }
    }

    #[test]
    fn common_resources_map_to_their_kinds_and_the_rest_are_singularised() {
        assert_eq!(kind_for("pods"), "Pod");
        assert_eq!(kind_for("deployments"), "Deployment");
        assert_eq!(kind_for("secrets"), "Secret");
        assert_eq!(kind_for("configmaps"), "ConfigMap");
        assert_eq!(kind_for("widgets"), "Widget");
        assert_eq!(kind_for("policies"), "Policy");
        assert_eq!(kind_for("classes"), "Class");
    }

    #[test]
    fn the_probe_targets_the_first_rule_and_falls_back_from_wildcards() {
        let t = target_for(&[rule(&["apps"], &["v1"], &["deployments"])]);
        assert_eq!(
            (t.group.as_str(), t.version.as_str(), t.kind.as_str()),
            ("apps", "v1", "Deployment")
        );
        let t = target_for(&[rule(&[""], &["*"], &["pods/status"])]);
        assert_eq!(
            (t.resource.as_str(), t.version.as_str(), t.kind.as_str()),
            ("pods", "v1", "Pod")
        );
        let t = target_for(&[rule(&["*"], &["*"], &["*"])]);
        assert_eq!((t.group.as_str(), t.resource.as_str()), ("", "pods"));
        let t = target_for(&[]);
        assert_eq!(t.kind, "Pod");
    }

    #[test]
    fn the_review_is_a_dry_run_create_with_the_given_uid() {
        let t = target_for(&[rule(&["apps"], &["v1"], &["deployments"])]);
        let r = review(&t, "abc", "system:serviceaccount:ops:initializer-operator");
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(r["request"]["uid"], "abc");
        assert_eq!(r["request"]["dryRun"], true);
        assert_eq!(r["request"]["operation"], "CREATE");
        assert_eq!(r["request"]["object"]["kind"], "Deployment");
        assert_eq!(r["request"]["object"]["apiVersion"], "apps/v1");
        assert!(r["request"]["object"]["spec"]["template"]["spec"]["containers"].is_array());
        let d: k8s_openapi::api::apps::v1::Deployment =
            serde_json::from_value(r["request"]["object"].clone()).unwrap();
        assert_eq!(d.metadata.name.as_deref(), Some(PROBE_OBJECT_NAME));
        let pod = object_for(&target_for(&[rule(&[""], &["v1"], &["pods"])]));
        let _: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod).unwrap();
    }

    #[test]
    fn a_well_formed_answer_for_the_same_uid_is_accepted_allowed_or_not() {
        let ok = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc","allowed":true,"patchType":"JSONPatch","patch":"W10="}}"#;
        assert_eq!(check_answer(ok, "abc"), Ok(true));
        let denied = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc","allowed":false,"status":{"message":"no"}}}"#;
        assert_eq!(check_answer(denied, "abc"), Ok(false));
    }

    #[test]
    fn malformed_answers_are_bad_answers() {
        let cases: [&[u8]; 6] = [
            b"not json",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"Status"}"#,
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"uid":"abc","allowed":true}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"other","allowed":true}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc"}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc","allowed":true,"patch":"W10="}}"#,
        ];
        for body in cases {
            let rejected = check_answer(body, "abc").unwrap_err();
            assert_eq!(
                rejected.failure,
                Failure::BadAnswer,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_denial_with_a_server_error_code_is_a_failure_and_other_denials_are_not() {
        let panicked = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc","allowed":false,"status":{"code":500,"message":"the initializer panicked"}}}"#;
        let rejected = check_answer(panicked, "abc").unwrap_err();
        assert_eq!(rejected.failure, Failure::InternalError);
        assert_eq!(rejected.failure.reason(), "InternalError");
        assert!(rejected.why.contains("panicked"), "{}", rejected.why);
        let overran = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc","allowed":false,"status":{"code":504}}}"#;
        assert_eq!(
            check_answer(overran, "abc").unwrap_err().failure,
            Failure::InternalError
        );
        let policy = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc","allowed":false,"status":{"code":403,"message":"too short"}}}"#;
        assert_eq!(check_answer(policy, "abc"), Ok(false));
        // An allowed answer is what every call gets, whatever code it carries.
        let allowed = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc","allowed":true,"status":{"code":500}}}"#;
        assert_eq!(check_answer(allowed, "abc"), Ok(true));
    }

    #[test]
    fn io_errors_are_classified_by_kind_and_certificate_errors_apart() {
        use io::ErrorKind::*;
        let kind = |k: io::ErrorKind| classify(&io::Error::from(k));
        assert_eq!(kind(ConnectionRefused), Failure::Refused);
        assert_eq!(kind(ConnectionReset), Failure::Reset);
        assert_eq!(kind(BrokenPipe), Failure::Reset);
        assert_eq!(kind(UnexpectedEof), Failure::Reset);
        assert_eq!(kind(TimedOut), Failure::TimedOut);
        assert_eq!(kind(PermissionDenied), Failure::Unreachable);
        let tls = |e: rustls::Error| classify(&io::Error::new(InvalidData, e));
        assert_eq!(
            tls(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            )),
            Failure::BadCertificate
        );
        assert_eq!(
            tls(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Expired
            )),
            Failure::BadCertificate
        );
        assert_eq!(
            tls(rustls::Error::AlertReceived(
                rustls::AlertDescription::HandshakeFailure
            )),
            Failure::Unreachable
        );
        assert_eq!(Failure::Refused.reason(), "ConnectionRefused");
        assert_eq!(Failure::BadCertificate.reason(), "CertificateRejected");
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn answered(allowed: bool) -> Result<Answer, Rejection> {
        Ok(Answer {
            allowed,
            current_ca: true,
        })
    }

    #[test]
    fn a_round_fails_when_any_endpoint_fails_and_names_it() {
        let ms = Duration::from_millis;
        let good = combine(&[
            (addr("127.0.0.2:8443"), ms(3), answered(true)),
            (addr("127.0.0.3:8443"), ms(7), answered(true)),
        ]);
        assert!(good.ok);
        assert_eq!(good.latency, ms(7));
        assert!(
            good.message.contains("2 ready endpoints"),
            "{}",
            good.message
        );
        let hung = Rejection::new(Failure::TimedOut, "no answer within the latency budget");
        let one_hung = combine(&[
            (addr("127.0.0.2:8443"), ms(3), answered(true)),
            (addr("127.0.0.3:8443"), ms(500), Err(hung)),
        ]);
        assert!(!one_hung.ok);
        assert_eq!(one_hung.failure, Some(Failure::TimedOut));
        assert_eq!(one_hung.latency, ms(500));
        assert!(
            one_hung.message.contains("1 of 2") && one_hung.message.contains("127.0.0.3:8443"),
            "{}",
            one_hung.message
        );
        // The first failed endpoint in address order gives the reason, whatever the order.
        let two_failed = combine(&[
            (
                addr("127.0.0.9:8443"),
                ms(1),
                Err(Rejection::new(Failure::Refused, "refused")),
            ),
            (
                addr("127.0.0.4:8443"),
                ms(1),
                Err(Rejection::new(Failure::BadCertificate, "unknown issuer")),
            ),
        ]);
        assert_eq!(two_failed.failure, Some(Failure::BadCertificate));
        assert!(two_failed.message.contains("127.0.0.4:8443"));
        let none = combine(&[]);
        assert!(!none.ok);
        assert_eq!(none.failure, Some(Failure::NoEndpoints));
        let denied = combine(&[(addr("127.0.0.2:8443"), ms(3), answered(false))]);
        assert!(denied.ok && denied.message.contains("denied") && denied.current_ca);
        let old_ca = Ok(Answer {
            allowed: true,
            current_ca: false,
        });
        let moving = combine(&[
            (addr("127.0.0.2:8443"), ms(3), answered(true)),
            (addr("127.0.0.3:8443"), ms(3), old_ca),
        ]);
        assert!(moving.ok && !moving.current_ca);
    }

    #[test]
    fn an_endpoint_that_left_the_ready_set_while_probed_is_not_judged() {
        let ms = Duration::from_millis;
        let closed = Rejection::new(Failure::Reset, "connection closed before message completed");
        let results = vec![
            (addr("127.0.0.2:8443"), ms(3), answered(true)),
            (addr("127.0.0.3:8443"), ms(3), Err(closed)),
        ];
        assert!(!combine(&results).ok);
        let kept = still_ready(results.clone(), &[addr("127.0.0.2:8443")]);
        assert_eq!(kept.len(), 1);
        assert!(combine(&kept).ok);
        // Still ready, its failure counts.
        let both = [addr("127.0.0.2:8443"), addr("127.0.0.3:8443")];
        assert!(!combine(&still_ready(results, &both)).ok);
    }

    #[test]
    fn ready_endpoints_are_dialled_on_the_named_port() {
        use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
        let endpoint = |ip: &str, ready: Option<bool>| Endpoint {
            addresses: vec![ip.into()],
            conditions: Some(EndpointConditions {
                ready,
                ..Default::default()
            }),
            ..Default::default()
        };
        let port = |name: &str, port: i32| EndpointPort {
            name: Some(name.into()),
            port: Some(port),
            ..Default::default()
        };
        let slice = EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: vec![
                endpoint("127.0.0.2", Some(true)),
                endpoint("127.0.0.3", None),
                endpoint("127.0.0.4", Some(false)),
            ],
            ports: Some(vec![port("metrics", 9090), port("https", 8443)]),
            ..Default::default()
        };
        assert_eq!(
            ready_addresses(&slice),
            [addr("127.0.0.2:8443"), addr("127.0.0.3:8443")]
        );
        let unnamed = EndpointSlice {
            ports: Some(vec![port("", 9443)]),
            ..slice.clone()
        };
        assert_eq!(ready_addresses(&unnamed)[0], addr("127.0.0.2:9443"));
        let portless = EndpointSlice {
            ports: None,
            ..slice
        };
        assert!(ready_addresses(&portless).is_empty());
    }

    #[test]
    fn a_ca_bundle_without_a_certificate_is_rejected() {
        let err = TlsTarget::new(b"not a certificate", "sidecar", "ops").unwrap_err();
        assert_eq!(err.failure, Failure::BadCertificate);
        assert_eq!(server_name("sidecar", "ops"), "sidecar.ops.svc");
    }

    /// A local initializer: TLS with `cert`/`key`, answering every review with `answer(uid)`,
    /// after `delay`.
    async fn serve(
        cert_pem: &str,
        key_pem: &str,
        delay: Duration,
        answer: fn(&str) -> Value,
    ) -> SocketAddr {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |request: http::Request<hyper::body::Incoming>| async move {
                            let body = request.into_body().collect().await?.to_bytes();
                            let review: Value = serde_json::from_slice(&body).unwrap();
                            let uid = review["request"]["uid"].as_str().unwrap().to_string();
                            tokio::time::sleep(delay).await;
                            let answer = serde_json::to_vec(&answer(&uid)).unwrap();
                            Ok::<_, hyper::Error>(http::Response::new(Full::new(
                                bytes::Bytes::from(answer),
                            )))
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        local
    }

    fn allow(uid: &str) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "response": {"uid": uid, "allowed": true}})
    }

    fn internal_error(uid: &str) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "response": {"uid": uid, "allowed": false,
                            "status": {"code": 500, "message": "the handler panicked"}}})
    }

    async fn round(bundle: &str, endpoints: &[SocketAddr], budget: Duration) -> Outcome {
        let target = target_for(&[]);
        probe(
            &Connector::direct(),
            &Round {
                service: "sidecar",
                namespace: "initializer-system",
                ca_bundle: bundle.as_bytes(),
                endpoints,
                target: &target,
                user: "system:serviceaccount:initializer-system:initializer-operator",
                budget,
            },
        )
        .await
    }

    fn names() -> Vec<String> {
        crate::tls::dns_names("sidecar", "initializer-system")
    }

    #[tokio::test]
    async fn the_probe_verifies_the_certificate_as_the_api_server_does() {
        use crate::tls;
        let now = jiff::Timestamp::now();
        let budget = Duration::from_secs(2);
        let ca = tls::new_ca(now).unwrap();
        let good = tls::issue(&ca, &names(), now).unwrap();
        let up = serve(&good.cert_pem, &good.key_pem, Duration::ZERO, allow).await;
        let outcome = round(&ca.cert_pem, &[up], budget).await;
        assert!(outcome.ok, "{outcome:?}");

        // Another CA in the bundle.
        let other = tls::new_ca(now).unwrap();
        let outcome = round(&other.cert_pem, &[up], budget).await;
        assert_eq!(
            outcome.failure,
            Some(Failure::BadCertificate),
            "{outcome:?}"
        );
        // Both CAs in the bundle (a rotation under way): trusted, and the pod is known to
        // serve a certificate of the replaced CA until it serves one of the current.
        let both = format!("{}{}", other.cert_pem, ca.cert_pem);
        let moving = round(&both, &[up], budget).await;
        assert!(moving.ok && !moving.current_ca, "{moving:?}");
        let moved = tls::issue(&other, &names(), now).unwrap();
        let moved = serve(&moved.cert_pem, &moved.key_pem, Duration::ZERO, allow).await;
        let settled = round(&both, &[up, moved], budget).await;
        assert!(settled.ok && !settled.current_ca, "{settled:?}");
        assert!(round(&both, &[moved], budget).await.current_ca);

        // A certificate for another name.
        let wrong = tls::issue(&ca, &tls::dns_names("other", "initializer-system"), now).unwrap();
        let wrong_name = serve(&wrong.cert_pem, &wrong.key_pem, Duration::ZERO, allow).await;
        let outcome = round(&ca.cert_pem, &[wrong_name], budget).await;
        assert_eq!(
            outcome.failure,
            Some(Failure::BadCertificate),
            "{outcome:?}"
        );

        // An expired certificate.
        let long_ago = now - jiff::SignedDuration::from_hours(24 * 400);
        let old_ca = tls::new_ca(long_ago).unwrap();
        let expired = tls::issue(&old_ca, &names(), long_ago).unwrap();
        let stale = serve(&expired.cert_pem, &expired.key_pem, Duration::ZERO, allow).await;
        let outcome = round(&old_ca.cert_pem, &[stale], budget).await;
        assert_eq!(
            outcome.failure,
            Some(Failure::BadCertificate),
            "{outcome:?}"
        );
        assert!(outcome.message.contains(&stale.to_string()), "{outcome:?}");
    }

    #[tokio::test]
    async fn one_hung_endpoint_of_two_fails_the_round_within_the_budget() {
        use crate::tls;
        let now = jiff::Timestamp::now();
        let ca = tls::new_ca(now).unwrap();
        let m = tls::issue(&ca, &names(), now).unwrap();
        let fast = serve(&m.cert_pem, &m.key_pem, Duration::ZERO, allow).await;
        let hung = serve(&m.cert_pem, &m.key_pem, Duration::from_secs(30), allow).await;
        let budget = Duration::from_millis(300);
        let started = Instant::now();
        let outcome = round(&ca.cert_pem, &[fast, hung], budget).await;
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(outcome.failure, Some(Failure::TimedOut), "{outcome:?}");
        assert!(outcome.message.contains(&hung.to_string()), "{outcome:?}");
        // Without endpoints there is nothing to probe.
        let outcome = round(&ca.cert_pem, &[], budget).await;
        assert_eq!(outcome.failure, Some(Failure::NoEndpoints));
        // A closed port is refused.
        let closed = {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        let outcome = round(&ca.cert_pem, &[closed], budget).await;
        assert_eq!(outcome.failure, Some(Failure::Refused), "{outcome:?}");
    }

    #[tokio::test]
    async fn a_server_error_denial_fails_the_probe() {
        use crate::tls;
        let now = jiff::Timestamp::now();
        let ca = tls::new_ca(now).unwrap();
        let m = tls::issue(&ca, &names(), now).unwrap();
        let panicking = serve(&m.cert_pem, &m.key_pem, Duration::ZERO, internal_error).await;
        let outcome = round(&ca.cert_pem, &[panicking], Duration::from_secs(2)).await;
        assert_eq!(outcome.failure, Some(Failure::InternalError), "{outcome:?}");
    }

    #[tokio::test]
    async fn an_answer_over_the_cap_is_a_bad_answer() {
        use crate::tls;
        let now = jiff::Timestamp::now();
        let ca = tls::new_ca(now).unwrap();
        let m = tls::issue(&ca, &names(), now).unwrap();
        let huge = serve(&m.cert_pem, &m.key_pem, Duration::ZERO, |uid| {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": uid, "allowed": true,
                                "warnings": ["x".repeat(MAX_ANSWER_BYTES)]}})
        })
        .await;
        let outcome = round(&ca.cert_pem, &[huge], Duration::from_secs(2)).await;
        assert_eq!(outcome.failure, Some(Failure::BadAnswer), "{outcome:?}");
        assert!(outcome.message.contains("64 KiB"), "{outcome:?}");
    }
}
