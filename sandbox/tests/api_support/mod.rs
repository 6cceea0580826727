//! Shared helpers for the API tests: a sandbox without workloads per test; raw requests and
//! error codes come from `initializer-test-support`.

#![allow(dead_code, unused_imports, clippy::unwrap_used)]

use std::time::Duration;

use initializer_sandbox::{Sandbox, SandboxConfig, SandboxHandle};
pub use initializer_test_support::api::{api_code, raw};

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
