//! Unit tests of [`crate::probe`].

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
        endpoints: Some(vec![
            endpoint("127.0.0.2", Some(true)),
            endpoint("127.0.0.3", None),
            endpoint("127.0.0.4", Some(false)),
        ]),
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
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
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
                        Ok::<_, hyper::Error>(http::Response::new(Full::new(bytes::Bytes::from(
                            answer,
                        ))))
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
    round_with(&Connector::direct(), bundle, endpoints, budget).await
}

async fn round_with(
    connector: &Connector,
    bundle: &str,
    endpoints: &[SocketAddr],
    budget: Duration,
) -> Outcome {
    let target = target_for(&[]);
    probe(
        connector,
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
    assert!(
        outcome.message.contains("(waiting for the answer)"),
        "{outcome:?}"
    );
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

/// A timeout says how far the exchange got: a full listen backlog (never connected) and a
/// server short of CPU (connected, no handshake) are told apart from a slow handler.
#[tokio::test]
async fn a_timeout_says_where_the_exchange_stalled() {
    use crate::tls;
    let now = jiff::Timestamp::now();
    let ca = tls::new_ca(now).unwrap();
    let budget = Duration::from_millis(200);
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    // Accepted by the kernel, never answered: the handshake stalls.
    let outcome = round(&ca.cert_pem, &[addr], budget).await;
    assert_eq!(outcome.failure, Some(Failure::TimedOut), "{outcome:?}");
    assert!(
        outcome.message.contains("(in the TLS handshake)"),
        "{outcome:?}"
    );
    let never_connects = Connector::new(|_| std::future::pending());
    let outcome = round_with(&never_connects, &ca.cert_pem, &[addr], budget).await;
    assert_eq!(outcome.failure, Some(Failure::TimedOut), "{outcome:?}");
    assert!(
        outcome.message.contains("(still connecting)"),
        "{outcome:?}"
    );
    drop(silent);
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
