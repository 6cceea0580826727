//! `kubectl initializer probe`: one probe now, from outside the cluster.
//!
//! A client outside the cluster cannot dial the initializer's pods the way the operator does.
//! What it can honestly do is ask the API server: the probe POSTs the operator's own synthetic
//! dry-run AdmissionReview ([`initializer_core::probe::review`]) through the API server's
//! service proxy (`/api/v1/namespaces/NS/services/https:NAME:443/proxy/initialize`) to the
//! Service the configuration names, and judges the answer with the operator's own check
//! ([`initializer_core::probe::check_answer`]). The latency measured includes the hop through
//! the API server. Two limits, said in the help text: the service proxy sends the request to one
//! ready endpoint of its choosing (the operator probes every ready endpoint), and it does not
//! verify the serving certificate against the `caBundle` (the operator does, as the API server
//! does for webhook calls).

use std::time::Duration;

use base64::Engine as _;
use initializer_core::probe::{Failure, check_answer, review, target_for};
use initializer_crds::Initializer;
use initializer_crds::constants::{SERVICE_PORT, WEBHOOK_PATH};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::ResourceExt;
use serde::Serialize;
use serde_json::Value;

/// The user the synthetic review names as its requester.
pub const PROBE_USER: &str = "kubectl-initializer";

/// The Service a probe is sent to, and the path on it the webhook serves: what the live
/// configuration's `clientConfig.service` names, or what the operator would deploy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbedService {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub service: String,
    /// The Service port the API server would call (443 unless the configuration says otherwise).
    pub port: i32,
    /// The webhook path on that port.
    pub path: String,
}

impl ProbedService {
    /// The API server path of the service proxy to this Service's webhook path.
    pub fn proxy_path(&self) -> String {
        format!(
            "/api/v1/namespaces/{}/services/https:{}:{}/proxy{}",
            self.namespace, self.service, self.port, self.path
        )
    }
}

/// The Service to probe: the one the live configuration calls, or, when nothing is registered,
/// the one the operator deploys for the Initializer (its derived name, in `spec.namespace` or
/// the operator's namespace).
pub fn probed_service(
    initializer: &Initializer,
    live: Option<&MutatingWebhookConfiguration>,
    operator_namespace: Option<&str>,
) -> Result<ProbedService, String> {
    let service = live
        .and_then(|c| c.webhooks.as_ref())
        .and_then(|hooks| hooks.first())
        .and_then(|hook| hook.client_config.service.as_ref());
    if let Some(service) = service {
        return Ok(ProbedService {
            namespace: service.namespace.clone(),
            service: service.name.clone(),
            port: service.port.unwrap_or(i32::from(SERVICE_PORT)),
            path: service
                .path
                .clone()
                .unwrap_or_else(|| WEBHOOK_PATH.to_string()),
        });
    }
    let namespace = initializer
        .spec
        .namespace
        .clone()
        .or_else(|| operator_namespace.map(str::to_string))
        .ok_or_else(|| {
            "nothing is registered and the operator's namespace was not found (pass --operator-namespace)"
                .to_string()
        })?;
    Ok(ProbedService {
        namespace,
        service: initializer_core::naming::names(&initializer.name_any()).base,
        port: i32::from(SERVICE_PORT),
        path: WEBHOOK_PATH.to_string(),
    })
}

/// The synthetic review for `initializer` with `uid`, as the operator builds it.
pub fn synthetic_review(initializer: &Initializer, uid: &str) -> Value {
    review(&target_for(&initializer.spec.rules), uid, PROBE_USER)
}

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The probed Initializer's name.
    pub initializer: String,
    /// Where the review went (`target` in JSON).
    pub target: ProbedService,
    /// The API server path it was POSTed to.
    pub path: String,
    /// Whether the answer is a well-formed review for the same uid and not an internal error.
    pub ok: bool,
    /// Whether the initializer allowed the probe object (when it answered well).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed: Option<bool>,
    /// The answer or the failure, for a person.
    pub message: String,
    /// The failure's reason, as the operator's `Responding` condition names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The HTTP status the API server returned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Round-trip latency through the API server, in milliseconds.
    pub latency_millis: u64,
    /// The Initializer's latency budget, in milliseconds.
    pub budget_millis: u64,
    /// The JSON patch the initializer answered with, decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<Value>,
}

/// Judges what the API server returned for the probe: its HTTP status and body, against `uid`.
pub fn judge(
    initializer: &str,
    service: &ProbedService,
    status: Option<u16>,
    body: &[u8],
    uid: &str,
    latency: Duration,
    budget: Duration,
) -> Report {
    let base = Report {
        initializer: initializer.to_string(),
        target: service.clone(),
        path: service.proxy_path(),
        ok: false,
        allowed: None,
        message: String::new(),
        failure: None,
        http_status: status,
        latency_millis: u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
        budget_millis: u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
        patch: None,
    };
    let Some(code) = status else {
        return Report {
            message: format!(
                "no answer within {} ms",
                u64::try_from(latency.as_millis()).unwrap_or(u64::MAX)
            ),
            failure: Some(Failure::TimedOut.reason().to_string()),
            ..base
        };
    };
    if !(200..300).contains(&code) {
        let said = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
        let failure = if code >= 500 {
            Failure::Unreachable
        } else {
            Failure::BadAnswer
        };
        return Report {
            message: format!("the API server's service proxy returned HTTP {code}: {said}"),
            failure: Some(failure.reason().to_string()),
            ..base
        };
    }
    match check_answer(body, uid) {
        Ok(allowed) => {
            let answer: Value = serde_json::from_slice(body).unwrap_or_default();
            let patch = answer
                .pointer("/response/patch")
                .and_then(Value::as_str)
                .and_then(|p| base64::engine::general_purpose::STANDARD.decode(p).ok())
                .and_then(|p| serde_json::from_slice::<Value>(&p).ok());
            let denial = answer
                .pointer("/response/status/message")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let mut message = if allowed {
                "allowed".to_string()
            } else {
                format!("denied: {denial}")
            };
            if let Some(ops) = patch.as_ref().and_then(Value::as_array) {
                let shown: Vec<String> = ops
                    .iter()
                    .map(|op| {
                        format!(
                            "{} {}",
                            op.get("op").and_then(Value::as_str).unwrap_or("?"),
                            op.get("path").and_then(Value::as_str).unwrap_or("?")
                        )
                    })
                    .collect();
                message.push_str(&format!(
                    ", with a patch of {} operation{}: {}",
                    ops.len(),
                    if ops.len() == 1 { "" } else { "s" },
                    shown.join(", ")
                ));
            } else if allowed {
                message.push_str(", unchanged");
            }
            Report {
                ok: true,
                allowed: Some(allowed),
                message,
                patch,
                ..base
            }
        }
        Err(rejection) => Report {
            message: rejection.why,
            failure: Some(rejection.failure.reason().to_string()),
            ..base
        },
    }
}

/// The report as text.
pub fn text(report: &Report) -> String {
    let verdict = if report.ok { "answered" } else { "FAILED" };
    let over = if report.latency_millis > report.budget_millis {
        format!(" (over the latency budget of {} ms)", report.budget_millis)
    } else {
        format!(" (latency budget {} ms)", report.budget_millis)
    };
    format!(
        "probe {}: {verdict} in {} ms{over}\n  answer: {}\n  path:   POST {} (the API server's service proxy: one ready endpoint, certificate not verified)\n",
        report.initializer, report.latency_millis, report.message, report.path
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn initializer() -> Initializer {
        serde_json::from_value(json!({
            "apiVersion": "initializer.dev/v1alpha1",
            "kind": "Initializer",
            "metadata": {"name": "sidecar"},
            "spec": {"image": "x:1", "namespace": "sidecars", "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
        }))
        .unwrap()
    }

    fn t() -> ProbedService {
        probed_service(&initializer(), None, None).unwrap()
    }

    fn answer(uid: &str, allowed: bool, patch: Option<&Value>) -> Vec<u8> {
        let mut response = json!({"uid": uid, "allowed": allowed});
        if let Some(patch) = patch {
            response["patchType"] = json!("JSONPatch");
            response["patch"] =
                json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
        }
        if !allowed {
            response["status"] = json!({"code": 403, "message": "too short"});
        }
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})).unwrap()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_probed_service_is_the_live_one_or_the_one_the_operator_deploys() {
        assert_eq!(
            t().proxy_path(),
            "/api/v1/namespaces/sidecars/services/https:sidecar:443/proxy/initialize"
        );
        let mut init = initializer();
        init.spec.namespace = None;
        assert!(
            probed_service(&init, None, None)
                .unwrap_err()
                .contains("--operator-namespace")
        );
        assert_eq!(
            probed_service(&init, None, Some("ops")).unwrap().namespace,
            "ops"
        );
        let live: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": "initializer-sidecar"},
            "webhooks": [{"name": "a.b.c", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "clientConfig": {"service": {"namespace": "elsewhere", "name": "svc", "port": 8443, "path": "/x"}}}],
        }))
        .unwrap();
        assert_eq!(
            probed_service(&init, Some(&live), None)
                .unwrap()
                .proxy_path(),
            "/api/v1/namespaces/elsewhere/services/https:svc:8443/proxy/x"
        );
    }

    #[test]
    fn the_review_is_the_operators_dry_run_for_the_first_rule() {
        let review = synthetic_review(&initializer(), "u1");
        assert_eq!(review["request"]["uid"], "u1");
        assert_eq!(review["request"]["dryRun"], true);
        assert_eq!(review["request"]["kind"]["kind"], "Deployment");
        assert_eq!(review["request"]["userInfo"]["username"], PROBE_USER);
    }

    #[test]
    fn an_answer_with_a_patch_is_reported_with_its_operations() {
        let patch = json!([{"op": "add", "path": "/spec/template/spec/containers/-", "value": {}}]);
        let r = judge(
            "sidecar",
            &t(),
            Some(200),
            &answer("u1", true, Some(&patch)),
            "u1",
            12 * MS,
            500 * MS,
        );
        assert!(r.ok);
        assert_eq!(r.allowed, Some(true));
        assert_eq!(r.latency_millis, 12);
        assert_eq!(r.patch, Some(patch));
        assert!(
            r.message
                .contains("patch of 1 operation: add /spec/template/spec/containers/-"),
            "{}",
            r.message
        );
        let text = text(&r);
        assert!(
            text.contains("answered in 12 ms (latency budget 500 ms)"),
            "{text}"
        );
        assert!(text.contains("services/https:sidecar:443/proxy/initialize"));
    }

    #[test]
    fn a_denial_is_an_answer_and_a_wrong_uid_is_not() {
        // Both answered with HTTP 200 to the review `u1`.
        let answered = |body: &[u8]| judge("g", &t(), Some(200), body, "u1", MS, MS);
        let denied = answered(&answer("u1", false, None));
        assert!(denied.ok);
        assert_eq!(denied.allowed, Some(false));
        assert!(denied.message.contains("denied: too short"));
        let wrong = answered(&answer("u2", true, None));
        assert!(!wrong.ok);
        assert_eq!(wrong.failure.as_deref(), Some("BadAnswer"));
        assert!(text(&wrong).contains("FAILED"));
    }

    #[test]
    fn a_proxy_error_and_a_timeout_are_failures() {
        let body = serde_json::to_vec(
            &json!({"kind": "Status", "message": "no endpoints available for service \"sidecar\""}),
        )
        .unwrap();
        let r = judge("s", &t(), Some(503), &body, "u", 3 * MS, 500 * MS);
        assert!(!r.ok);
        assert!(r.message.contains("HTTP 503"), "{}", r.message);
        assert!(r.message.contains("no endpoints available"));
        let slow = judge("s", &t(), None, b"", "u", 600 * MS, 500 * MS);
        assert_eq!(slow.failure.as_deref(), Some("ProbeTimedOut"));
        assert!(text(&slow).contains("over the latency budget of 500 ms"));
    }
}
