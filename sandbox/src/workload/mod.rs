//! Workloads as local processes, driven like kube-controller-manager and the kubelet: kube-rs
//! clients over the sandbox's own HTTPS API.
//!
//! [`start`] launches the Deployment controller ([`deployment`]), the EndpointSlice controller
//! ([`endpoints`]) and the node agent ([`initializer_node`], re-exported here as [`node`]) that
//! runs the pods; the three meet the API server only through the Kubernetes API. The returned
//! [`WorkloadHandle`] controls running pods (freeze, thaw, kill) and ends every child process on
//! [`WorkloadHandle::shutdown`].

pub mod cache;
pub mod deployment;
pub mod endpoints;

pub use initializer_node as node;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use initializer_node::{NodeConfig, NodeHandle, PodCredentials};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The name of the sandbox's one node: what the downward API answers for `spec.nodeName` and
/// EndpointSlices record as `nodeName`.
pub const NODE_NAME: &str = "sandbox";
/// The node's address (`status.hostIP`).
pub const HOST_IP: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Where pods' addresses come from: loopback addresses, so their servers need no network setup.
pub const POD_CIDR: &str = "127.1.0.0/16";

/// Failures of the sandbox's controllers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A watch ended before its first listing.
    #[error("failed to watch the api: {0}")]
    Watch(String),
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
    node: NodeHandle,
    tracker: TaskTracker,
}

/// Starts the node agent and the workload controllers; returns once their caches are filled.
pub async fn start(ctx: WorkloadContext) -> anyhow::Result<WorkloadHandle> {
    let shutdown = ctx.shutdown.child_token();
    let node = initializer_node::start(NodeConfig {
        client: ctx.client.clone(),
        node_name: NODE_NAME.to_owned(),
        host_ip: HOST_IP,
        pod_addresses: POD_CIDR.parse()?,
        state_dir: ctx.state_dir.clone(),
        image_map: ctx.image_map.clone(),
        pod_credentials: PodCredentials::Shared(ctx.kubeconfig_path.clone()),
        register: false,
        shutdown: shutdown.clone(),
    })
    .await?;
    let caches = cache::Caches::start(&ctx.client, &shutdown);
    if let Err(e) = caches.ready().await {
        node.shutdown().await;
        shutdown.cancel();
        return Err(e.into());
    }
    let tracker = TaskTracker::new();
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
    /// The node agent running the pods.
    pub fn node(&self) -> &NodeHandle {
        &self.node
    }

    /// Stops every process of the pod (SIGSTOP to its process groups): it stays Running and
    /// stops answering.
    pub async fn freeze(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        Ok(self.node.freeze(namespace, name).await?)
    }

    /// Resumes a frozen pod (SIGCONT).
    pub async fn thaw(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        Ok(self.node.thaw(namespace, name).await?)
    }

    /// Kills the pod's processes (SIGKILL); the restart policy then applies.
    pub async fn kill(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        Ok(self.node.kill(namespace, name).await?)
    }

    /// The process group ids of the pod's running containers, by container name.
    pub fn process_groups(&self, namespace: &str, name: &str) -> BTreeMap<String, i32> {
        self.node.process_groups(namespace, name)
    }

    /// Stops the controllers and the node, ending every child process (SIGTERM, then SIGKILL
    /// after a grace period of [`node::pod::SHUTDOWN_GRACE`]); returns when all are gone.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.node.shutdown().await;
        self.tracker.wait().await;
    }
}
