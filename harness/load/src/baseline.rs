//! The yardstick: the plainest hand-written admission webhook in Rust, on the SDK's stack (axum
//! on hyper, rustls) and without the SDK. It decodes the review as kube's
//! `AdmissionReview<DynamicObject>` and adds one label with a hand-made JSON patch, as kube-rs's
//! `admission_controller` example does. No budget, no panic guard, no metrics, no reload, no
//! connection limits: benchmark code, never shipped.
//!
//! Its no-work floor ([`floor_router`]) is the same server with the review's work taken out: it
//! answers every review with the bytes the baseline gave the first one. What the floor measures
//! is what is left when the work is taken out: the stack, the kernel and the load generator.

use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use axum::Json;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The label the baseline adds.
pub const LABEL: &str = "admission";
/// Its value.
pub const VALUE: &str = "modified-by-admission-controller";
/// The baseline's admission path.
pub const PATH: &str = "/mutate";

/// Answer one review: add [`LABEL`] unless the object has it.
pub fn mutate(review: AdmissionReview<DynamicObject>) -> AdmissionReview<DynamicObject> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(e) => return AdmissionResponse::invalid(e.to_string()).into_review(),
    };
    let response = AdmissionResponse::from(&request);
    let Some(obj) = request.object else {
        return response.into_review();
    };
    if obj.labels().contains_key(LABEL) {
        return response.into_review();
    }
    let mut ops = Vec::with_capacity(2);
    if obj.metadata.labels.is_none() {
        ops.push(json_patch::PatchOperation::Add(json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "labels"]),
            value: serde_json::json!({}),
        }));
    }
    ops.push(json_patch::PatchOperation::Add(json_patch::AddOperation {
        path: json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "labels", LABEL]),
        value: serde_json::Value::String(VALUE.into()),
    }));
    match response.clone().with_patch(json_patch::Patch(ops)) {
        Ok(patched) => patched.into_review(),
        Err(e) => response.deny(e.to_string()).into_review(),
    }
}

/// The routes: `POST /mutate` and `GET /readyz`.
pub fn router() -> Router {
    Router::new()
        .route(
            PATH,
            post(|Json(review): Json<AdmissionReview<DynamicObject>>| async move {
                Json(mutate(review))
            }),
        )
        .route("/readyz", get(|| async { "ok" }))
}

/// The no-work floor's routes: `POST /mutate` reads the whole review and answers it with the
/// bytes the baseline gave the first review it read (the benchmark sends one review over and
/// over, so the answer is the right one), and `GET /readyz`.
pub fn floor_router() -> Router {
    let canned: Arc<OnceLock<bytes::Bytes>> = Arc::default();
    Router::new()
        .route(
            PATH,
            post(move |body: bytes::Bytes| async move { canned_answer(&canned, &body) }),
        )
        .route("/readyz", get(|| async { "ok" }))
}

/// The answer `canned` holds, else the baseline's answer to `body`, kept for every later review
/// when it allows the object (a review the baseline refuses, one without a request, is answered
/// but not kept).
fn canned_answer(canned: &OnceLock<bytes::Bytes>, body: &[u8]) -> Response {
    if let Some(answer) = canned.get() {
        return json(answer.clone());
    }
    let answer = serde_json::from_slice(body).map(mutate).and_then(|review| {
        let allowed = review.response.as_ref().is_some_and(|r| r.allowed);
        serde_json::to_vec(&review).map(|bytes| (bytes, allowed))
    });
    match answer {
        Ok((answer, true)) => json(canned.get_or_init(|| answer.into()).clone()),
        Ok((answer, false)) => json(answer.into()),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            format!("failed to read the AdmissionReview: {e}"),
        )
            .into_response(),
    }
}

fn json(body: bytes::Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A TLS acceptor for the PEM certificate chain and key in `dir` (`tls.crt`, `tls.key`).
pub fn acceptor(dir: &Path) -> io::Result<TlsAcceptor> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    let certs = CertificateDer::pem_slice_iter(&std::fs::read(dir.join("tls.crt"))?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("failed to parse tls.crt: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&std::fs::read(dir.join("tls.key"))?)
        .map_err(|e| invalid(format!("failed to find a private key in tls.key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("failed to build the TLS configuration: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| invalid(format!("failed to use the certificate: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serve `app` forever: TLS, then HTTP/1.1 keep-alive, one task per connection.
pub async fn serve(listener: TcpListener, acceptor: TlsAcceptor, app: Router) -> io::Result<()> {
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            if let Ok(tls) = acceptor.accept(tcp).await {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use base64::Engine as _;
    use kube_initializer::testing::review;
    use sidecar_initializer::tutorial;

    fn answer(body: &[u8]) -> serde_json::Value {
        let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).unwrap();
        serde_json::to_value(mutate(review)).unwrap()
    }

    /// kube's `AdmissionResponse` writes the patch bytes as an array of numbers (which the
    /// API server's decoder accepts for a byte slice); base64 text is read too.
    fn patch_of(answer: &serde_json::Value) -> Option<serde_json::Value> {
        let bytes: Vec<u8> = match &answer["response"]["patch"] {
            serde_json::Value::String(b64) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
            serde_json::Value::Array(_) => {
                serde_json::from_value(answer["response"]["patch"].clone()).unwrap()
            }
            _ => return None,
        };
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    #[test]
    fn the_tutorial_pod_gets_the_label_by_one_add() {
        let answer = answer(&review(&tutorial::nginx_pod()).to_bytes());
        assert_eq!(answer["response"]["allowed"], true);
        assert_eq!(
            answer["response"]["uid"],
            "00000000-0000-0000-0000-000000000001"
        );
        assert_eq!(
            patch_of(&answer).unwrap(),
            serde_json::json!([{"op": "add", "path": "/metadata/labels/admission", "value": VALUE}])
        );
    }

    #[test]
    fn the_floor_answers_every_review_with_the_baselines_answer_to_the_first() {
        let first = review(&tutorial::nginx_pod()).to_bytes();
        let canned = OnceLock::new();
        let expected =
            serde_json::to_vec(&mutate(serde_json::from_slice(&first).unwrap())).unwrap();
        assert_eq!(canned_answer(&canned, &first).status(), StatusCode::OK);
        assert_eq!(canned.get().unwrap().as_ref(), &expected[..]);

        let mut other = tutorial::nginx_pod();
        other.metadata.labels = None;
        assert_eq!(
            canned_answer(&canned, &review(&other).to_bytes()).status(),
            StatusCode::OK
        );
        assert_eq!(canned.get().unwrap().as_ref(), &expected[..]);
    }

    #[test]
    fn the_floor_refuses_a_first_body_that_is_no_review_and_keeps_nothing() {
        let canned = OnceLock::new();
        assert_eq!(
            canned_answer(&canned, b"not json").status(),
            StatusCode::BAD_REQUEST
        );
        assert!(canned.get().is_none());
        let without_request =
            br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#;
        assert_eq!(
            canned_answer(&canned, without_request).status(),
            StatusCode::OK
        );
        assert!(canned.get().is_none(), "a refusal is not kept");
    }

    #[test]
    fn an_object_without_labels_gets_the_map_first_and_a_labelled_one_no_patch() {
        let mut pod = tutorial::nginx_pod();
        pod.metadata.labels = None;
        let patch = patch_of(&answer(&review(&pod).to_bytes())).unwrap();
        assert_eq!(patch[0]["path"], "/metadata/labels");
        assert_eq!(patch[1]["path"], "/metadata/labels/admission");

        pod.metadata.labels = Some([(LABEL.to_owned(), "x".to_owned())].into());
        assert_eq!(patch_of(&answer(&review(&pod).to_bytes())), None);
    }
}
