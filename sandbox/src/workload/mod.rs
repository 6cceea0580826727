//! Workloads as local processes, driven like kube-controller-manager and the kubelet: kube-rs
//! clients over the sandbox's own HTTPS API.
//!
//! [`start`] launches the Deployment controller ([`deployment`]), the EndpointSlice controller
//! ([`endpoints`]) and the pod runner ([`kubelet`], [`pod`]); the returned [`WorkloadHandle`]
//! controls running pods (freeze, thaw, kill) and ends every child process on
//! [`WorkloadHandle::shutdown`].

pub mod cache;
pub mod deployment;
pub mod endpoints;
pub mod env;
pub mod imagemap;
pub mod kubelet;
pub mod pod;
pub mod probe;
pub mod process;
pub mod volume;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use process::GroupSignal;

/// Failures of the workload side.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The image map could not be read or parsed.
    #[error("failed to load image map: {0}")]
    ImageMap(String),
    /// A watch ended before its first listing.
    #[error("failed to watch the api: {0}")]
    Watch(String),
    /// The pod has no running process to signal.
    #[error("failed to signal pod {0}: it has no running container")]
    NotRunning(String),
    /// Sending a signal failed.
    #[error("failed to signal pod {pod}: {source}")]
    Signal {
        /// `namespace/name`.
        pod: String,
        /// Cause.
        source: std::io::Error,
    },
}

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
    node: Arc<pod::Node>,
    tracker: TaskTracker,
}

/// Starts the workload controllers and the pod runner; returns once their caches are filled.
pub async fn start(ctx: WorkloadContext) -> anyhow::Result<WorkloadHandle> {
    if let Some(map) = &ctx.image_map {
        // Refuse a broken map at startup rather than at every pod.
        imagemap::ImageMap::load(map)?;
    }
    let shutdown = ctx.shutdown.child_token();
    let caches = cache::Caches::start(&ctx.client, &shutdown);
    caches.ready().await?;
    let node = Arc::new(pod::Node {
        client: ctx.client.clone(),
        caches: caches.clone(),
        state_dir: ctx.state_dir.clone(),
        image_map: ctx.image_map.clone(),
        kubeconfig: ctx.kubeconfig_path.clone(),
        groups: Mutex::new(HashMap::new()),
    });
    let tracker = TaskTracker::new();
    tracker.spawn(kubelet::run(
        node.clone(),
        shutdown.clone(),
        tracker.clone(),
    ));
    tracker.spawn(deployment::run(
        ctx.client.clone(),
        caches.clone(),
        shutdown.clone(),
    ));
    tracker.spawn(endpoints::run(ctx.client.clone(), caches, shutdown.clone()));
    Ok(WorkloadHandle {
        shutdown,
        node,
        tracker,
    })
}

impl WorkloadHandle {
    fn groups(&self, namespace: &str, name: &str) -> Result<BTreeMap<String, i32>, Error> {
        let groups = self
            .node
            .groups
            .lock()
            .ok()
            .and_then(|g| g.get(&(namespace.to_owned(), name.to_owned())).cloned())
            .unwrap_or_default();
        if groups.is_empty() {
            return Err(Error::NotRunning(format!("{namespace}/{name}")));
        }
        Ok(groups)
    }

    fn signal(&self, namespace: &str, name: &str, signal: GroupSignal) -> Result<(), Error> {
        for pgid in self.groups(namespace, name)?.values() {
            process::signal_group(*pgid, signal).map_err(|source| Error::Signal {
                pod: format!("{namespace}/{name}"),
                source,
            })?;
        }
        Ok(())
    }

    /// Stops every process of the pod (SIGSTOP to its process groups): it stays Running and
    /// stops answering.
    pub async fn freeze(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        Ok(self.signal(namespace, name, GroupSignal::Stop)?)
    }

    /// Resumes a frozen pod (SIGCONT).
    pub async fn thaw(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        Ok(self.signal(namespace, name, GroupSignal::Continue)?)
    }

    /// Kills the pod's processes (SIGKILL); the restart policy then applies.
    pub async fn kill(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        Ok(self.signal(namespace, name, GroupSignal::Kill)?)
    }

    /// The process group ids of the pod's running containers, by container name.
    pub fn process_groups(&self, namespace: &str, name: &str) -> BTreeMap<String, i32> {
        self.groups(namespace, name).unwrap_or_default()
    }

    /// Stops the controllers and ends every child process (SIGTERM, then SIGKILL after a grace
    /// period of [`pod::SHUTDOWN_GRACE`]); returns when all are gone.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}
