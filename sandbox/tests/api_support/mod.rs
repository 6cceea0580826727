//! Shared helpers for the API conformance tests: a sandbox without workloads per test.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use initializer_sandbox::{Sandbox, SandboxConfig, SandboxHandle};
use serde_json::Value;

/// A running sandbox and the directory it lives in (removed on drop).
pub struct TestSandbox {
    pub handle: SandboxHandle,
    pub dir: tempfile::TempDir,
}

impl TestSandbox {
    pub fn client(&self) -> kube::Client {
        self.handle.client()
    }
}

/// Starts a sandbox with no workload controllers.
pub async fn start() -> TestSandbox {
    start_with(|_| {}).await
}

/// Starts a sandbox after `tweak` adjusts its configuration.
pub async fn start_with(tweak: impl FnOnce(&mut SandboxConfig)) -> TestSandbox {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.workloads = false;
    config.bookmark_interval = Duration::from_millis(200);
    tweak(&mut config);
    let handle = Sandbox::start(config).await.unwrap();
    TestSandbox { handle, dir }
}

/// A raw request through the client, returning status code and JSON body.
pub async fn raw(
    client: &kube::Client,
    method: &str,
    uri: &str,
    accept: Option<&str>,
    content_type: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http::Request::builder().method(method).uri(uri);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    if let Some(c) = content_type {
        req = req.header("content-type", c);
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let req = req.body(bytes).unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let value = serde_json::from_slice(&body)
        .unwrap_or(Value::String(String::from_utf8_lossy(&body).into()));
    (status, value)
}

/// Polls `check` every 20 ms until it holds or `secs` pass.
pub async fn eventually<F, Fut>(secs: u64, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The code of a kube API error.
pub fn api_code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}
