//! The sandbox backend: the embedded control plane started in-process with a temporary state
//! directory and the image map of our cargo-built binaries.
//!
//! Pods are frozen, thawed and killed through the sandbox's own HTTPS API
//! (`POST /sandbox/v1/pods/{namespace}/{name}/{freeze|thaw|kill}`), with the same client and
//! credentials as every other request, so the harness also works against a sandbox started by
//! `sandbox up` in another process.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use futures::FutureExt;
use futures::future::BoxFuture;
use kube::Client;

use crate::backend::Backend;
use crate::images;

/// The embedded sandbox, owned by this process.
pub struct SandboxBackend {
    client: Client,
    kubeconfig: PathBuf,
    state_dir: tempfile::TempDir,
}

impl SandboxBackend {
    /// Starts a sandbox with a fresh state directory and the image map of our binaries.
    pub async fn start() -> anyhow::Result<Self> {
        let state_dir = tempfile::Builder::new()
            .prefix("initializer-e2e-sandbox")
            .tempdir()
            .context("failed to create the sandbox's state directory")?;
        let image_map = images::write_image_map(state_dir.path())?;
        let _ = image_map;
        bail!(
            "failed to start the sandbox: the initializer-sandbox library does not export \
             Sandbox::start yet (issue 4); state directory was {}",
            state_dir.path().display()
        )
    }

    /// The sandbox's state directory (pod logs and volumes live under it).
    pub fn state_dir(&self) -> &Path {
        self.state_dir.path()
    }

    async fn pod_action(&self, namespace: &str, name: &str, action: &str) -> anyhow::Result<()> {
        pod_action(&self.client, namespace, name, action).await
    }
}

/// Asks the sandbox to `freeze`, `thaw` or `kill` a pod, over its HTTPS API.
pub async fn pod_action(
    client: &Client,
    namespace: &str,
    name: &str,
    action: &str,
) -> anyhow::Result<()> {
    let request = http::Request::post(format!("/sandbox/v1/pods/{namespace}/{name}/{action}"))
        .body(Vec::new())
        .with_context(|| {
            format!("failed to build the {action} request for pod {namespace}/{name}")
        })?;
    client.request_text(request).await.with_context(|| {
        format!("failed to {action} pod {namespace}/{name} through the sandbox API")
    })?;
    Ok(())
}

impl Backend for SandboxBackend {
    fn name(&self) -> &str {
        "sandbox"
    }

    fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    fn client(&self) -> Client {
        self.client.clone()
    }

    fn freeze_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        self.pod_action(namespace, name, "freeze").boxed()
    }

    fn thaw_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        self.pod_action(namespace, name, "thaw").boxed()
    }

    fn kill_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        self.pod_action(namespace, name, "kill").boxed()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }
}
