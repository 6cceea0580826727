//! The AdmissionReview wire format (`admission.k8s.io/v1`) and what a handler sees of a request.
//!
//! A review is parsed once into [`ReviewIn`]; its objects stay raw JSON text ([`RawValue`], no
//! `Value` tree) until the handler for their kind deserializes them, and the patch is computed
//! from that text and the handler's result (see `diff`). Responses are written by
//! [`Response::to_json`].

use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::authentication::v1::UserInfo;
pub use kube::core::admission::Operation;
use kube::core::{GroupVersionKind, GroupVersionResource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// `apiVersion` of every review this SDK accepts and answers.
pub(crate) const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";
/// `kind` of every review this SDK accepts and answers.
pub(crate) const REVIEW_KIND: &str = "AdmissionReview";

/// An incoming review, parsed once.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReviewIn {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub request: Option<RequestIn>,
}

/// An incoming request with the objects still untyped.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RequestIn {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub resource: GroupVersionResource,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default)]
    pub user_info: UserInfo,
    #[serde(default)]
    pub object: Option<Box<RawValue>>,
    #[serde(default)]
    pub old_object: Option<Box<RawValue>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// The parts of a request a handler can read, without the objects.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    /// The request's uid, echoed in the response.
    pub uid: String,
    /// Group, version and kind of the object as the API server sent it.
    pub kind: GroupVersionKind,
    /// The resource being requested.
    pub resource: GroupVersionResource,
    /// The subresource, if any (`status`, `scale`, ...).
    pub sub_resource: Option<String>,
    /// The object's name; empty on creates that use `generateName`.
    pub name: String,
    /// The namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// What is being done.
    pub operation: Operation,
    /// Who is doing it.
    pub user_info: UserInfo,
    /// True when the request will not be persisted (a dry run or a health probe).
    pub dry_run: bool,
}

/// A handler's view of one admission request: who, what, where, the configuration in force
/// for this request, and a place to put warnings.
#[derive(Debug)]
pub struct Review<C = ()> {
    info: Arc<RequestInfo>,
    old_object: Option<Box<RawValue>>,
    config: Arc<C>,
    initializer: Arc<str>,
    warnings: Mutex<Vec<String>>,
}

impl<C> Review<C> {
    pub(crate) fn new(
        info: Arc<RequestInfo>,
        old_object: Option<Box<RawValue>>,
        config: Arc<C>,
        initializer: Arc<str>,
    ) -> Self {
        Self {
            info,
            old_object,
            config,
            initializer,
            warnings: Mutex::new(Vec::new()),
        }
    }

    /// Everything about the request except the objects.
    pub fn info(&self) -> &RequestInfo {
        &self.info
    }

    /// The operation: `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub fn operation(&self) -> &Operation {
        &self.info.operation
    }

    /// The request's namespace, `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        self.info.namespace.as_deref()
    }

    /// The object's name (empty on creates with `generateName`).
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The user making the request.
    pub fn user_info(&self) -> &UserInfo {
        &self.info.user_info
    }

    /// True for dry runs (including the operator's health probes): do nothing with side effects.
    pub fn dry_run(&self) -> bool {
        self.info.dry_run
    }

    /// The configuration in force for this request; it never changes during one request.
    pub fn config(&self) -> &C {
        &self.config
    }

    /// The configuration as a shared pointer, to keep it beyond the request.
    pub fn config_arc(&self) -> Arc<C> {
        Arc::clone(&self.config)
    }

    /// This initializer's name (from `INITIALIZER_NAME` or the builder).
    pub fn initializer(&self) -> &str {
        &self.initializer
    }

    /// The object before the update, typed; `None` on creates. Deserialized on each call.
    pub fn old_object<K: DeserializeOwned>(&self) -> Option<Result<K, serde_json::Error>> {
        self.old_object
            .as_ref()
            .map(|raw| serde_json::from_str(raw.get()))
    }

    /// The object before the update as JSON text; `None` on creates.
    pub fn old_object_raw(&self) -> Option<&RawValue> {
        self.old_object.as_deref()
    }

    /// Attach a warning, shown by kubectl to the user who made the request.
    pub fn warn(&self, message: impl Into<String>) {
        self.warnings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message.into());
    }

    pub(crate) fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A handler's refusal: the object is not admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// HTTP-style status code shown to the user (403 unless set).
    pub code: u16,
    /// Why, in words the user can act on.
    pub message: String,
}

impl Denial {
    /// A refusal with code 403 (Forbidden).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            code: 403,
            message: message.into(),
        }
    }

    /// The same refusal with another code, e.g. 400 for an invalid object or 422.
    pub fn with_code(mut self, code: u16) -> Self {
        self.code = code;
        self
    }
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for Denial {}

/// A refusal (403) with this message, so a handler can write `Err(format!(...))?` or
/// `return Err("...".into())`.
impl From<String> for Denial {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

/// A refusal (403) with this message.
impl From<&str> for Denial {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// A refusal with code 400: something the handler decodes from the request (the old object,
/// an annotation holding JSON) is malformed, so `?` works on `serde_json` results.
impl From<serde_json::Error> for Denial {
    fn from(e: serde_json::Error) -> Self {
        Self::new(format!("failed to decode the request: {e}")).with_code(400)
    }
}

/// A refusal with code 500: an API call the handler depends on failed (an asynchronous
/// handler looking up a Namespace, say), so `?` works on `kube` results. The caller may retry.
impl From<kube::Error> for Denial {
    fn from(e: kube::Error) -> Self {
        Self::new(format!("failed to query the API server: {e}")).with_code(500)
    }
}

/// How a request was answered, as counted in the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Admitted unchanged.
    Allowed,
    /// Admitted with a patch.
    Patched,
    /// Refused by the handler.
    Denied,
    /// The handler failed (panic, timeout, undecodable object) and the failure policy answered.
    Error,
}

impl Verdict {
    /// The label value used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Patched => "patched",
            Verdict::Denied => "denied",
            Verdict::Error => "error",
        }
    }
}

/// The status attached to a refused (or failed) request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// HTTP-style code.
    pub code: u16,
    /// Message shown to the user.
    pub message: String,
}

/// The answer to one review, before it is written as JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    /// The request's uid.
    pub uid: String,
    /// Whether the object is admitted.
    pub allowed: bool,
    /// The JSON patch to apply, `None` when nothing changes.
    pub patch: Option<json_patch::Patch>,
    /// Why the request was refused, or what failed.
    pub status: Option<Status>,
    /// Warnings for the user.
    pub warnings: Vec<String>,
    /// How the request was answered.
    pub verdict: Verdict,
}

impl Response {
    /// An admitting answer without a patch.
    pub fn allow(uid: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            allowed: true,
            patch: None,
            status: None,
            warnings: Vec::new(),
            verdict: Verdict::Allowed,
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    // The document as serde writes it from plain structs: the oracle for `to_json`.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ReviewOut<'a> {
        api_version: &'static str,
        kind: &'static str,
        response: ResponseOut<'a>,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ResponseOut<'a> {
        uid: &'a str,
        allowed: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        patch_type: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        patch: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<StatusOut<'a>>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        warnings: &'a [String],
    }

    #[derive(Serialize)]
    struct StatusOut<'a> {
        status: &'static str,
        code: u16,
        message: &'a str,
    }

    fn serialized(response: &Response) -> Vec<u8> {
        let patch = response.patch_json();
        serde_json::to_vec(&ReviewOut {
            api_version: REVIEW_API_VERSION,
            kind: REVIEW_KIND,
            response: ResponseOut {
                uid: &response.uid,
                allowed: response.allowed,
                patch_type: patch.as_ref().map(|_| "JSONPatch"),
                patch: patch.map(|p| base64::engine::general_purpose::STANDARD.encode(p)),
                status: response.status.as_ref().map(|s| StatusOut {
                    status: if response.allowed {
                        "Success"
                    } else {
                        "Failure"
                    },
                    code: s.code,
                    message: &s.message,
                }),
                warnings: &response.warnings,
            },
        })
        .unwrap()
    }

    #[test]
    fn the_written_patch_is_byte_for_byte_what_serde_writes() {
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "add", "path": "/metadata/annotations/a~1b~0c", "value": {"k": [1, 2.5, null, true, "é\"\n"]}},
            {"op": "remove", "path": "/spec/containers/1"},
            {"op": "replace", "path": "", "value": "whole"},
            {"op": "move", "from": "/a", "path": "/b"},
            {"op": "copy", "from": "/c", "path": "/d/-"},
            {"op": "test", "path": "/e", "value": 7},
        ]))
        .unwrap();
        let mut response = Response::allow("u");
        assert_eq!(response.patch_json(), None);
        for ops in [0, 1, patch.0.len()] {
            let some = json_patch::Patch(patch.0[..ops].to_vec());
            response.patch = Some(some.clone());
            assert_eq!(
                String::from_utf8(response.patch_json().unwrap()).unwrap(),
                serde_json::to_string(&some).unwrap()
            );
        }
    }

    #[test]
    fn the_written_document_is_byte_for_byte_what_serde_writes() {
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "add", "path": "/metadata/labels/a~1b", "value": "x\"yé"},
            {"op": "remove", "path": "/spec/containers/1"},
        ]))
        .unwrap();
        let mut responses = vec![Response::allow("plain-uid")];
        let mut patched = Response::allow("uid \"quoted\" \\ \n");
        patched.patch = Some(patch);
        patched.verdict = Verdict::Patched;
        patched.warnings = vec!["one".into(), "two \"2\" é".into()];
        responses.push(patched);
        let mut denied = Response::allow("d");
        denied.allowed = false;
        denied.status = Some(Status {
            code: 403,
            message: "no <b>\"way\"</b>\t".into(),
        });
        responses.push(denied.clone());
        denied.allowed = true;
        denied.status = Some(Status {
            code: 200,
            message: String::new(),
        });
        responses.push(denied);
        for response in &responses {
            let (ours, patch_len) = response.to_json();
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                String::from_utf8(serialized(response)).unwrap()
            );
            assert_eq!(patch_len, response.patch_json().map_or(0, |p| p.len()));
        }
    }

    fn refuse_with_question_mark(input: &str) -> Result<u32, Denial> {
        let value: serde_json::Value = serde_json::from_str(input)?;
        let n = value.as_u64().ok_or("not a number")?;
        if n > 10 {
            Err(format!("{n} is over 10"))?;
        }
        Ok(u32::try_from(n).map_err(|e| e.to_string())?)
    }

    #[test]
    fn question_mark_turns_messages_and_errors_into_denials() {
        assert_eq!(refuse_with_question_mark("3"), Ok(3));
        assert_eq!(
            refuse_with_question_mark("\"x\""),
            Err(Denial::new("not a number"))
        );
        assert_eq!(
            refuse_with_question_mark("11"),
            Err(Denial::new("11 is over 10"))
        );
        let malformed = refuse_with_question_mark("{").unwrap_err();
        assert_eq!(malformed.code, 400);
        assert!(
            malformed
                .message
                .starts_with("failed to decode the request: "),
            "{}",
            malformed.message
        );
    }

    #[test]
    fn api_errors_become_code_500() {
        let e = kube::Error::Service("connection refused".into());
        let denial = Denial::from(e);
        assert_eq!(denial.code, 500);
        assert!(denial.message.contains("connection refused"), "{denial}");
    }
}
