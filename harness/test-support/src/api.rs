//! Raw requests through a kube client, and what an API error says: for tests that check the
//! API server's answers byte for byte rather than through typed calls.

use anyhow::Context;
use serde_json::Value;

/// Sends `method uri` (with optional `accept`, `content-type` and JSON `body`) through `client`;
/// returns the status code and the body as JSON (as a JSON string when it is not JSON).
pub async fn raw(
    client: &kube::Client,
    method: &str,
    uri: &str,
    accept: Option<&str>,
    content_type: Option<&str>,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    let mut req = http::Request::builder().method(method).uri(uri);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    if let Some(c) = content_type {
        req = req.header("content-type", c);
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let req = req
        .body(bytes)
        .with_context(|| format!("failed to build {method} {uri}"))?;
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .with_context(|| format!("{method} {uri}"))?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect_bytes().await?;
    Ok((status, json_or_text(&body)))
}

/// The code and reason of an API error; panics (failing the test) on any other error.
#[allow(clippy::panic)]
pub fn api_code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A body as JSON, or as a JSON string of its text when it is not JSON.
fn json_or_text(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::String(String::from_utf8_lossy(body).into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_json_or_their_text() {
        assert_eq!(json_or_text(br#"{"a":1}"#), serde_json::json!({"a": 1}));
        assert_eq!(json_or_text(b"not json"), Value::String("not json".into()));
    }

    #[test]
    fn api_errors_give_code_and_reason() {
        let error = kube::Error::Api(
            kube::core::Status::failure("gone", "NotFound")
                .with_code(404)
                .boxed(),
        );
        assert_eq!(api_code(&error), (404, "NotFound".to_string()));
    }
}
