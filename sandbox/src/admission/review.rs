//! AdmissionReview v1 requests and responses, and the `metav1.Status` bodies the real API server
//! returns when admission refuses a write. Pure: no IO.

use base64::Engine as _;
use serde_json::{Value, json};

use super::{Attributes, Operation};

/// Builds the `AdmissionReview` sent to a webhook, carrying `object` (the current, possibly
/// already mutated, object).
pub fn request(uid: &str, attrs: &Attributes, object: Option<&Value>) -> Value {
    let kind = json!({"group": attrs.group, "version": attrs.version, "kind": attrs.kind});
    let resource =
        json!({"group": attrs.group, "version": attrs.version, "resource": attrs.resource});
    let (operation, options_kind) = match attrs.operation {
        Operation::Create => ("CREATE", Some("CreateOptions")),
        Operation::Update => ("UPDATE", Some("UpdateOptions")),
        Operation::Delete => ("DELETE", Some("DeleteOptions")),
        Operation::Connect => ("CONNECT", None),
    };
    let mut req = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": attrs.name,
        "operation": operation,
        "userInfo": {"username": attrs.user.username, "groups": attrs.user.groups},
        "object": object,
        "oldObject": attrs.old_object,
        "dryRun": attrs.dry_run,
    });
    if let Some(map) = req.as_object_mut() {
        if !attrs.subresource.is_empty() {
            map.insert("subResource".into(), json!(attrs.subresource));
            map.insert("requestSubResource".into(), json!(attrs.subresource));
        }
        if let Some(ns) = attrs.namespace.as_deref().filter(|n| !n.is_empty()) {
            map.insert("namespace".into(), json!(ns));
        }
        if let Some(kind) = options_kind {
            let mut options = json!({"apiVersion": "meta.k8s.io/v1", "kind": kind});
            if attrs.dry_run {
                options["dryRun"] = json!(["All"]);
            }
            map.insert("options".into(), options);
        }
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// What a webhook answered, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// `response.allowed`.
    pub allowed: bool,
    /// `response.status` (used when denied).
    pub status: Option<Value>,
    /// The decoded JSON patch, if any.
    pub patch: Option<json_patch::Patch>,
    /// `response.warnings`.
    pub warnings: Vec<String>,
}

/// A response the real API server would refuse as an invalid webhook response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("received invalid webhook response: {0}")]
pub struct InvalidResponse(pub String);

/// A JSON patch the API server could not decode; a hard internal error whatever the failure policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadPatch(pub String);

/// Checks a webhook's answer to the request `uid`.
pub fn parse_response(
    uid: &str,
    body: &[u8],
) -> Result<Result<Verdict, BadPatch>, InvalidResponse> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| InvalidResponse(format!("failed to decode: {e}")))?;
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = review
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(InvalidResponse(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        )));
    }
    let Some(response) = review.get("response").filter(|r| r.is_object()) else {
        return Err(InvalidResponse("webhook response was absent".into()));
    };
    let got_uid = response
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if got_uid != uid {
        return Err(InvalidResponse(format!(
            "expected response.uid={uid:?}, got {got_uid:?}"
        )));
    }
    let allowed = response
        .get("allowed")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let warnings = response
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let patch_type = response.get("patchType").and_then(Value::as_str);
    let patch_b64 = response
        .get("patch")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    let patch = match (patch_b64, patch_type) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(InvalidResponse(
                "webhook returned response.patch but not response.patchType".into(),
            ));
        }
        (Some(_), Some(t)) if t != "JSONPatch" => {
            return Err(InvalidResponse(format!(
                "webhook returned invalid response.patchType of {t:?}"
            )));
        }
        (Some(p), Some(_)) => {
            let bytes = match base64::engine::general_purpose::STANDARD.decode(p) {
                Ok(b) => b,
                Err(e) => return Ok(Err(BadPatch(format!("failed to decode patch: {e}")))),
            };
            match serde_json::from_slice::<json_patch::Patch>(&bytes) {
                Ok(p) => Some(p),
                Err(e) => return Ok(Err(BadPatch(format!("failed to decode patch: {e}")))),
            }
        }
    };
    Ok(Ok(Verdict {
        allowed,
        status: response.get("status").cloned(),
        patch,
        warnings,
    }))
}

/// A failure `metav1.Status`; an empty `reason` is left out, as the webhook denials that give
/// none are served.
fn status_body(code: u64, reason: &str, message: String, details: Option<Value>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    });
    if !reason.is_empty() {
        status["reason"] = json!(reason);
    }
    if let Some(d) = details {
        status["details"] = d;
    }
    status
}

/// `Internal error occurred: ...` (500, `InternalError`), as `apierrors.NewInternalError` forms it.
pub fn internal_error(cause: &str) -> Value {
    status_body(
        500,
        "InternalError",
        format!("Internal error occurred: {cause}"),
        Some(json!({"causes": [{"message": cause}]})),
    )
}

/// A 400 `BadRequest` status.
pub fn bad_request(message: String) -> Value {
    status_body(400, "BadRequest", message, None)
}

/// The status returned when webhook `name` denied the request, from the webhook's own `status`,
/// as `ToStatusErr` in k8s.io/apiserver forms it: code at least 400 (400 when absent),
/// `status: Failure`, message prefixed with `admission webhook "NAME" denied the request`.
pub fn denial(name: &str, result: Option<&Value>) -> Value {
    let denied_by = format!("admission webhook {name:?} denied the request");
    let result = result.filter(|r| r.is_object());
    let field = |key: &str| {
        result
            .and_then(|r| r.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let code = result
        .and_then(|r| r.get("code"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let code = if code < 400 { 400 } else { code };
    let message = field("message");
    let reason = field("reason");
    let message = if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    let details = result.and_then(|r| r.get("details")).cloned();
    status_body(code, &reason, message, details)
}

#[cfg(test)]
mod tests {
    use super::super::UserInfo;
    use super::*;

    fn attrs(op: Operation) -> Attributes {
        Attributes {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
            resource: "pods".into(),
            subresource: String::new(),
            namespace: Some("team".into()),
            name: "p".into(),
            operation: op,
            object: Some(json!({"metadata": {"name": "p"}})),
            old_object: None,
            dry_run: true,
            user: UserInfo {
                username: "admin".into(),
                groups: vec!["system:masters".into()],
            },
        }
    }

    #[test]
    fn request_carries_every_field_the_real_server_sends() {
        let a = attrs(Operation::Create);
        let r = request("u-1", &a, a.object.as_ref());
        let req = &r["request"];
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(req["uid"], "u-1");
        assert_eq!(
            req["kind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        assert_eq!(
            req["resource"],
            json!({"group": "", "version": "v1", "resource": "pods"})
        );
        assert_eq!(req["requestKind"], req["kind"]);
        assert_eq!(req["requestResource"], req["resource"]);
        assert_eq!(req["namespace"], "team");
        assert_eq!(req["name"], "p");
        assert_eq!(req["operation"], "CREATE");
        assert_eq!(req["userInfo"]["username"], "admin");
        assert_eq!(req["object"]["metadata"]["name"], "p");
        assert_eq!(req["oldObject"], Value::Null);
        assert_eq!(req["dryRun"], true);
        assert_eq!(req["options"]["kind"], "CreateOptions");
        assert_eq!(req["options"]["dryRun"], json!(["All"]));
        assert!(req.get("subResource").is_none());
    }

    fn response(body: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": body})).unwrap()
    }

    #[test]
    fn response_with_another_uid_is_invalid() {
        let err = parse_response("a", &response(json!({"uid": "b", "allowed": true}))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "received invalid webhook response: expected response.uid=\"a\", got \"b\""
        );
    }

    #[test]
    fn response_patch_is_decoded_from_base64() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"add","path":"/x","value":1}]"#);
        let v = parse_response("a", &response(json!({"uid": "a", "allowed": true, "patchType": "JSONPatch", "patch": patch, "warnings": ["w"]})))
            .unwrap()
            .unwrap();
        assert!(v.allowed);
        assert_eq!(v.warnings, vec!["w".to_owned()]);
        assert_eq!(v.patch.unwrap().0.len(), 1);
    }

    #[test]
    fn undecodable_patch_is_a_bad_patch() {
        let v = parse_response(
            "a",
            &response(
                json!({"uid": "a", "allowed": true, "patchType": "JSONPatch", "patch": "!!"}),
            ),
        )
        .unwrap();
        assert!(v.is_err());
    }

    #[test]
    fn wrong_kind_and_absent_response_are_invalid() {
        assert!(parse_response("a", br#"{"apiVersion":"v1","kind":"Status"}"#).is_err());
        assert!(
            parse_response(
                "a",
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#
            )
            .is_err()
        );
        assert!(parse_response("a", b"not json").is_err());
    }

    #[test]
    fn denial_message_and_code_follow_the_real_server() {
        let s = denial(
            "pods.example.com",
            Some(&json!({"code": 403, "message": "no"})),
        );
        assert_eq!(
            s["message"],
            "admission webhook \"pods.example.com\" denied the request: no"
        );
        assert_eq!(s["code"], 403);
        let s = denial("w", Some(&json!({"message": "m"})));
        assert_eq!(s["code"], 400);
        let s = denial("w", None);
        assert_eq!(
            s["message"],
            "admission webhook \"w\" denied the request without explanation"
        );
        let s = denial("w", Some(&json!({"reason": "Forbidden"})));
        assert_eq!(
            s["message"],
            "admission webhook \"w\" denied the request: Forbidden"
        );
    }

    #[test]
    fn internal_error_prefixes_the_cause() {
        let s = internal_error("failed calling webhook \"w\": boom");
        assert_eq!(
            s["message"],
            "Internal error occurred: failed calling webhook \"w\": boom"
        );
        assert_eq!(s["code"], 500);
        assert_eq!(s["reason"], "InternalError");
    }
}
