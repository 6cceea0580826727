//! The sandbox target: the embedded control plane started in-process with a temporary state
//! directory and the image map of our cargo-built binaries.
//!
//! Pods are frozen, thawed and killed through the sandbox's own HTTPS API
//! (`POST /sandbox/v1/pods/{namespace}/{name}/{freeze|thaw|kill}`), with the same client and
//! credentials as every other request, so the harness also works against a sandbox started by
//! `sandbox up` in another process.

use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;
use futures::FutureExt;
use futures::future::BoxFuture;
use initializer_sandbox::{Sandbox, SandboxConfig, SandboxHandle};
use kube::Client;

use crate::target::{self, Access, PodAction, PodFuture, PodRef, Target};
use crate::{images, paths};

/// The embedded sandbox, owned by this process.
pub struct SandboxTarget {
    access: Access,
    handle: Mutex<Option<SandboxHandle>>,
    // Removed when the target is dropped, after the sandbox has stopped.
    state_dir: tempfile::TempDir,
}

impl SandboxTarget {
    /// Starts a sandbox with a fresh state directory and the image map of our binaries.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_in(Mode::Current).await
    }

    /// Starts a sandbox in legacy mode: it serves the Kubernetes 1.7–1.13 Initializers
    /// (`InitializerConfiguration`, `metadata.initializers`) besides everything else.
    pub async fn start_legacy() -> anyhow::Result<Self> {
        Self::start_in(Mode::LegacyInitializers).await
    }

    async fn start_in(mode: Mode) -> anyhow::Result<Self> {
        let name = match mode {
            Mode::Current => "sandbox",
            Mode::LegacyInitializers => LEGACY_NAME,
        };
        let state_dir = paths::state_dir(name, "pod logs under logs/")?;
        let image_map = images::write_image_map(state_dir.path())?;
        let mut config = SandboxConfig::new(state_dir.path());
        config.image_map = Some(image_map);
        config.legacy_initializers = mode == Mode::LegacyInitializers;
        let handle = Sandbox::start(config)
            .await
            .with_context(|| format!("failed to start the {name}"))?;
        Ok(Self {
            access: Access {
                name: name.to_string(),
                client: handle.client(),
                kubeconfig: handle.kubeconfig_path().to_path_buf(),
            },
            handle: Mutex::new(Some(handle)),
            state_dir,
        })
    }

    /// The sandbox's state directory (pod logs and volumes live under it).
    pub fn state_dir(&self) -> &Path {
        self.state_dir.path()
    }
}

/// The target's name when it serves the 1.7 Initializers (logs, the timings table's label).
pub const LEGACY_NAME: &str = "sandbox-legacy";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Current,
    LegacyInitializers,
}

/// Asks the sandbox to freeze, thaw or kill a pod, over its HTTPS API.
pub async fn pod_action(
    client: &Client,
    namespace: &str,
    name: &str,
    action: PodAction,
) -> anyhow::Result<()> {
    let action = action.verb();
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

impl Target for SandboxTarget {
    fn access(&self) -> &Access {
        &self.access
    }

    fn control_pod<'a>(&'a self, pod: PodRef<'a>, action: PodAction) -> PodFuture<'a> {
        pod_action(&self.access.client, pod.namespace, pod.name, action).boxed()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        target::shut_down_once(&self.handle, SandboxHandle::shutdown)
    }
}
