//! The real target (`E2E_CLUSTER=real`): etcd, kube-apiserver and kube-controller-manager
//! built from the official Go modules, with our node agent, in a network namespace of their own
//! (`initializer-controlplane`). The test process stays outside and reaches the API server
//! through the control plane's port forward.
//!
//! Pods are frozen, thawed and killed where that is honest: on the node, by signalling their
//! process groups (`initializer_controlplane::signal`, shared with the operator's tests).

use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;
use futures::FutureExt;
use futures::future::BoxFuture;
use initializer_controlplane::{ControlPlane, ControlPlaneConfig};

use crate::target::{self, Access, PodAction, PodFuture, PodRef, Target};
use crate::{images, paths};

pub const NODE_BINARY: &str = "initializer-node";

/// The real control plane, owned by this process.
pub struct RealTarget {
    access: Access,
    plane: Mutex<Option<ControlPlane>>,
    // Removed when the target is dropped, after the control plane has stopped.
    _state_dir: tempfile::TempDir,
}

impl RealTarget {
    /// Builds the control plane if needed and starts it, with the image map of our binaries.
    pub async fn start() -> anyhow::Result<Self> {
        let state_dir = paths::state_dir("real", "cluster/logs/, cluster/node/")?;
        let image_map = images::write_image_map(state_dir.path())?;
        let mut config = ControlPlaneConfig::new(
            state_dir.path().join("cluster"),
            paths::binary(NODE_BINARY)?,
        );
        config.image_map = Some(image_map);
        let plane = ControlPlane::start(config)
            .await
            .context("failed to start the real control plane")?;
        let startup = plane.startup();
        eprintln!(
            "e2e: Kubernetes v{} in network namespace {}: API ready after {:.2}s, node ready after {:.2}s",
            plane.version(),
            plane.netns(),
            startup.api_ready.as_secs_f64(),
            startup.cluster_ready.as_secs_f64()
        );
        Ok(Self {
            access: Access {
                name: format!("real (Kubernetes v{})", plane.version()),
                client: plane.client(),
                kubeconfig: plane.kubeconfig_path().to_path_buf(),
            },
            plane: Mutex::new(Some(plane)),
            _state_dir: state_dir,
        })
    }
}

impl Target for RealTarget {
    fn access(&self) -> &Access {
        &self.access
    }

    fn control_pod<'a>(&'a self, pod: PodRef<'a>, action: PodAction) -> PodFuture<'a> {
        let client = &self.access.client;
        initializer_controlplane::signal::signal_pod(client, pod.namespace, pod.name, action)
            .boxed()
    }

    fn command_inside(&self, program: &Path) -> Option<std::process::Command> {
        let plane = self.plane.lock().ok()?;
        Some(plane.as_ref()?.command_inside(program))
    }

    fn failure(&self) -> BoxFuture<'_, anyhow::Error> {
        // Polled rather than awaited: the control plane sits behind a mutex (shutdown takes it
        // out), so its exit futures cannot be held across awaits here.
        async move {
            loop {
                let check = self
                    .plane
                    .lock()
                    .ok()
                    .and_then(|plane| plane.as_ref().map(ControlPlane::check));
                if let Some(Err(err)) = check {
                    return anyhow::Error::new(err);
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
        .boxed()
    }

    fn resources(&self) -> Vec<String> {
        let memory = self
            .plane
            .lock()
            .ok()
            .and_then(|plane| plane.as_ref().map(ControlPlane::memory))
            .unwrap_or_default();
        memory
            .into_iter()
            .map(|(name, pid, rss)| match rss {
                Some(kib) => format!(
                    "{name} (pid {pid}): {:.0} MiB resident",
                    kib as f64 / 1024.0
                ),
                None => format!("{name} (pid {pid}): exited"),
            })
            .collect()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        target::shut_down_once(&self.plane, ControlPlane::shutdown)
    }
}
