//! Errors: [`Error`] for the library's own failures, [`ApiError`] for answers the REST API gives
//! as `metav1.Status` bodies.

use serde_json::{Value, json};

/// Failures of the sandbox itself (startup, files, TLS).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CA or serving certificate could not be made.
    #[error("failed to generate certificates: {0}")]
    GenerateCertificates(String),
    /// The TLS configuration could not be built.
    #[error("failed to configure tls: {0}")]
    ConfigureTls(String),
    /// The listening socket could not be opened.
    #[error("failed to bind {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    /// A file in the state directory could not be written or read.
    #[error("failed to access {path}: {source}")]
    StateFile {
        path: String,
        source: std::io::Error,
    },
    /// The client for the sandbox's own API could not be built.
    #[error("failed to build client: {0}")]
    BuildClient(String),
    /// The workload controllers failed to start.
    #[error("failed to start workloads: {0}")]
    StartWorkloads(String),
    /// A snapshot could not be encoded or decoded.
    #[error("failed to process snapshot: {0}")]
    Snapshot(String),
}

/// An API error answered as a `metav1.Status` with the real API server's code and reason.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `reason` (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `details`, if any.
    pub details: Option<Value>,
}

impl ApiError {
    /// An error with this code, reason and message and no details.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    /// The `details` naming the object the error is about, as the real server gives them.
    fn naming(self, group: &str, plural: &str, name: &str) -> Self {
        ApiError {
            details: Some(json!({"name": name, "group": group, "kind": plural})),
            ..self
        }
    }

    /// 404 `"<resource>" "<name>" not found`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let qualified = qualified(group, plural);
        ApiError::new(404, "NotFound", format!("{qualified} \"{name}\" not found"))
            .naming(group, plural, name)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let qualified = qualified(group, plural);
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{qualified} \"{name}\" already exists"),
        )
        .naming(group, plural, name)
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        let qualified = qualified(group, plural);
        let message = format!(
            "Operation cannot be fulfilled on {qualified} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        );
        ApiError::new(409, "Conflict", message).naming(group, plural, name)
    }

    /// 422 Invalid with field causes `(field, message)`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<(String, String)>) -> Self {
        let text: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let gk = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let message = if text.len() == 1 {
            format!("{gk} \"{name}\" is invalid: {}", text[0])
        } else {
            format!("{gk} \"{name}\" is invalid: [{}]", text.join(", "))
        };
        let causes: Vec<Value> = causes
            .into_iter()
            .map(|(f, m)| json!({"reason": cause_reason(&m), "message": m, "field": f}))
            .collect();
        ApiError {
            code: 422,
            reason: "Invalid".into(),
            message,
            details: Some(json!({"name": name, "group": group, "kind": kind, "causes": causes})),
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// 404 NotFound for a URL that names no served resource, subresource or route.
    pub fn no_such_resource() -> Self {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    /// 410 Expired for a resourceVersion older than the kept history.
    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media(content_type: &str) -> Self {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json; got {content_type:?}"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(500, "InternalError", message)
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }

    /// Parses a `metav1.Status` (from admission denials or faults) back into an error.
    pub fn from_status(status: &Value) -> Self {
        let code = status
            .get("code")
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(500);
        ApiError {
            code,
            reason: status
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            message: status
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            details: status.get("details").cloned(),
        }
    }
}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// The `StatusCause` reason of a field error, from the way its message starts (the same words
/// kube-apiserver's `field.Error` types print).
fn cause_reason(message: &str) -> &'static str {
    const REASONS: [(&str, &str); 8] = [
        ("Required value", "FieldValueRequired"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Forbidden", "FieldValueForbidden"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Not found", "FieldValueNotFound"),
        ("Internal error", "InternalError"),
    ];
    REASONS
        .iter()
        .find(|(prefix, _)| message.starts_with(prefix))
        .map_or("FieldValueInvalid", |(_, reason)| reason)
}
