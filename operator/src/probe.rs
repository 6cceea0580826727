//! The active probe: a synthetic dry-run AdmissionReview POSTed to the initializer's webhook
//! path through the API server's service proxy. That path works in a cluster, from a laptop and
//! on the sandbox, and it tests what the API server itself will do: reach the Service over HTTPS
//! and get a well-formed answer for the same uid in time.
//!
//! Building the review and judging the answer are pure; [`probe`] is the only IO.

use std::time::{Duration, Instant};

use initializer_crds::InterceptRule;
use initializer_crds::constants::{SERVICE_PORT, WEBHOOK_PATH};
use serde_json::{Value, json};

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
    /// Kind.
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

/// Checks an answer: a v1 AdmissionReview whose response has the same `uid` and says whether
/// the request is allowed (denying the probe object is a correct answer too). Returns whether
/// it was allowed.
pub fn check_answer(body: &[u8], uid: &str) -> Result<bool, String> {
    let answer: Value =
        serde_json::from_slice(body).map_err(|e| format!("the answer is not JSON: {e}"))?;
    if answer.get("kind").and_then(Value::as_str) != Some("AdmissionReview") {
        return Err("the answer is not an AdmissionReview".into());
    }
    if answer.get("apiVersion").and_then(Value::as_str) != Some("admission.k8s.io/v1") {
        return Err("the answer is not admission.k8s.io/v1".into());
    }
    let response = answer.get("response").ok_or("the answer has no response")?;
    match response.get("uid").and_then(Value::as_str) {
        Some(got) if got == uid => {}
        Some(got) => return Err(format!("the answer is for uid {got}, not {uid}")),
        None => return Err("the answer has no uid".into()),
    }
    let allowed = response
        .get("allowed")
        .and_then(Value::as_bool)
        .ok_or("the answer does not say whether the request is allowed")?;
    if response.get("patch").is_some()
        && response.get("patchType").and_then(Value::as_str) != Some("JSONPatch")
    {
        return Err("the answer has a patch without patchType JSONPatch".into());
    }
    Ok(allowed)
}

/// The service proxy path of the webhook of Service `service` in `namespace`.
pub fn proxy_path(namespace: &str, service: &str) -> String {
    format!(
        "/api/v1/namespaces/{namespace}/services/https:{service}:{SERVICE_PORT}/proxy{WEBHOOK_PATH}"
    )
}

/// Why a probe failed: the signals a failed probe carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the latency budget (a hung or overloaded initializer).
    TimedOut,
    /// The connection was refused: nothing listens at the endpoint (crashed, or exiting).
    Refused,
    /// The connection was reset: the initializer went away mid-request.
    Reset,
    /// The API server found no ready endpoint for the Service.
    NoEndpoints,
    /// An answer came, but not a well-formed review for the same uid.
    BadAnswer,
    /// Anything else on the way (an API server error, TLS, DNS).
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
            Failure::Unreachable => "ProbeFailed",
        }
    }
}

/// Classifies a failure to reach the initializer from the error text: the API server's service
/// proxy passes the dialer's error on (`connect: connection refused`, `connection reset by
/// peer`, `no endpoints available for service`), and so does the sandbox.
pub fn classify(message: &str) -> Failure {
    let m = message.to_ascii_lowercase();
    if m.contains("connection refused") {
        Failure::Refused
    } else if m.contains("connection reset") || m.contains("broken pipe") {
        Failure::Reset
    } else if m.contains("no endpoints available") || m.contains("no ready endpoint") {
        Failure::NoEndpoints
    } else {
        Failure::Unreachable
    }
}

/// The outcome of one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Whether it counts as a success.
    pub ok: bool,
    /// How long it took (the budget when it timed out).
    pub latency: Duration,
    /// What happened.
    pub message: String,
    /// Why it failed, when it did.
    pub failure: Option<Failure>,
}

/// Sends one probe through the API server and judges it; a probe slower than `budget` fails.
pub async fn probe(
    client: &kube::Client,
    namespace: &str,
    service: &str,
    target: &ProbeTarget,
    user: &str,
    budget: Duration,
) -> Outcome {
    let uid = format!("{:032x}", rand::random::<u128>());
    let body = match serde_json::to_vec(&review(target, &uid, user)) {
        Ok(body) => body,
        Err(e) => {
            return Outcome {
                ok: false,
                latency: Duration::ZERO,
                message: format!("failed to serialize the probe: {e}"),
                failure: Some(Failure::Unreachable),
            };
        }
    };
    let request = match http::Request::post(proxy_path(namespace, service))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(body)
    {
        Ok(r) => r,
        Err(e) => {
            return Outcome {
                ok: false,
                latency: Duration::ZERO,
                message: format!("failed to build the probe request: {e}"),
                failure: Some(Failure::Unreachable),
            };
        }
    };
    let started = Instant::now();
    let result = tokio::time::timeout(budget, client.request_text(request)).await;
    let latency = started.elapsed();
    match result {
        Err(_) => Outcome {
            ok: false,
            latency: budget,
            message: format!(
                "no answer within the latency budget of {} ms",
                budget.as_millis()
            ),
            failure: Some(Failure::TimedOut),
        },
        Ok(Err(e)) => {
            let message = format!("failed to reach the initializer: {e}");
            Outcome {
                ok: false,
                latency,
                failure: Some(classify(&message)),
                message,
            }
        }
        Ok(Ok(text)) => match check_answer(text.as_bytes(), &uid) {
            Ok(allowed) => Outcome {
                ok: true,
                latency,
                message: format!(
                    "answered in {} ms ({})",
                    latency.as_millis(),
                    if allowed { "allowed" } else { "denied" }
                ),
                failure: None,
            },
            Err(why) => Outcome {
                ok: false,
                latency,
                message: format!("failed to get a well-formed answer: {why}"),
                failure: Some(Failure::BadAnswer),
            },
        },
    }
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
    fn malformed_answers_are_failures() {
        let cases: [&[u8]; 6] = [
            b"not json",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"Status"}"#,
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"uid":"abc","allowed":true}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"other","allowed":true}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc"}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"abc","allowed":true,"patch":"W10="}}"#,
        ];
        for body in cases {
            assert!(
                check_answer(body, "abc").is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn refused_and_reset_connections_are_told_apart_from_the_rest() {
        let refused = "failed to reach the initializer: ApiError: error trying to reach service: dial tcp 10.244.0.7:8443: connect: connection refused: ServiceUnavailable (ErrorResponse { status: \"Failure\", code: 503 })";
        assert_eq!(classify(refused), Failure::Refused);
        assert_eq!(
            classify("error trying to reach service: Connection refused (os error 111)"),
            Failure::Refused
        );
        assert_eq!(
            classify("error trying to reach service: read tcp: connection reset by peer"),
            Failure::Reset
        );
        assert_eq!(
            classify("no endpoints available for service \"guard\""),
            Failure::NoEndpoints
        );
        assert_eq!(
            classify("certificate signed by unknown authority"),
            Failure::Unreachable
        );
        assert_eq!(Failure::Refused.reason(), "ConnectionRefused");
    }

    #[test]
    fn the_proxy_path_names_the_https_port_and_the_webhook_path() {
        assert_eq!(
            proxy_path("ops", "sidecar"),
            "/api/v1/namespaces/ops/services/https:sidecar:443/proxy/initialize"
        );
    }
}
