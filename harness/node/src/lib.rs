//! initializer-node: a node agent that runs pods as local processes, against any Kubernetes API
//! server (the sandbox's, or a real kube-apiserver).
//!
//! [`start`] fills watch caches of Pods, Secrets and ConfigMaps ([`cache`]), then runs the pod
//! runner ([`kubelet`]): one worker per pod bound to this node (or to no node), which
//! materializes its volumes ([`volume`]), starts each container's executable from the image map
//! ([`imagemap`], [`process`]) as an unprivileged user ([`user`]) with nothing of the node's own
//! environment but the kubelet's ([`env`](mod@env)), runs its
//! probes ([`probe`]) and reports its status through the API ([`pod`]). The returned
//! [`NodeHandle`] controls running pods (freeze, thaw, kill) and ends every child process on
//! [`NodeHandle::shutdown`]. Everything the agent knows about the cluster comes through the
//! Kubernetes API. See `README.md`.

pub mod binding;
pub mod cache;
pub mod clock;
pub mod credentials;
pub mod env;
pub mod exchange;
pub mod imagemap;
pub mod kubelet;
pub mod node_status;
pub mod pod;
pub mod probe;
pub mod process;
pub mod token;
pub mod user;
pub mod volume;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use credentials::PodCredentials;
pub use kubelet::PodAddresses;
use process::GroupSignal;

/// Failures of the node agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The image map could not be read or parsed.
    #[error("failed to load image map: {0}")]
    ImageMap(String),
    /// The pod address range is not a usable IPv4 CIDR.
    #[error("failed to parse the pod address range {0}")]
    PodAddresses(String),
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
        source: std::io::Error,
    },
}

/// How to run a node: the API server to follow, the node's identity and addresses, and where its
/// pods' files go.
#[derive(Clone)]
pub struct NodeConfig {
    /// A client for the API server; it must be allowed to watch Pods, Secrets and ConfigMaps in
    /// every namespace, write pods' status and delete pods.
    pub client: kube::Client,
    /// The node's name: pods whose `spec.nodeName` is unset or equal to it run here, and the
    /// downward API answers it for `spec.nodeName`.
    pub node_name: String,
    /// The node's address: `status.hostIP` of its pods.
    pub host_ip: IpAddr,
    /// The range pods' addresses (`status.podIP`) come from; each pod's servers listen on its
    /// own address.
    pub pod_addresses: PodAddresses,
    /// Root of pods' files: `pods/<namespace>_<pod>/` (volumes, kubeconfig; elsewhere when the
    /// node is root and this directory is private, see [`pod::pods_root`]) and
    /// `logs/<namespace>_<pod>/<container>.log`.
    pub state_dir: PathBuf,
    /// The image map file (image reference → executable), if any; read again at every container
    /// start, refused at [`start`] if it does not parse.
    pub image_map: Option<PathBuf>,
    /// How pods reach the API server (through `KUBECONFIG`): a shared kubeconfig on the
    /// sandbox; their own service-account tokens, issued by TokenRequest, on a real API server.
    pub pod_credentials: PodCredentials,
    /// Register as a Node (with a Lease renewed every 10 s) and bind unbound pods to it, as on
    /// a real API server; then only pods bound to this node run here. Off on the sandbox, which
    /// has no Node objects and runs every pod unbound.
    pub register: bool,
    /// Cancelling it stops the node as [`NodeHandle::shutdown`] does, without waiting.
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("node_name", &self.node_name)
            .field("host_ip", &self.host_ip)
            .field("pod_addresses", &self.pod_addresses)
            .field("state_dir", &self.state_dir)
            .field("image_map", &self.image_map)
            .field("pod_credentials", &self.pod_credentials)
            .field("register", &self.register)
            .finish_non_exhaustive()
    }
}

/// Controls a running node: its pods' processes, and its shutdown.
#[derive(Clone, Debug)]
pub struct NodeHandle {
    shutdown: CancellationToken,
    node: Arc<pod::Node>,
    tracker: TaskTracker,
}

/// Starts the node agent; returns once its caches are filled and its tasks run.
pub async fn start(config: NodeConfig) -> anyhow::Result<NodeHandle> {
    if let Some(map) = &config.image_map {
        // Refuse a broken map at startup rather than at every pod.
        imagemap::ImageMap::load(map)?;
    }
    let shutdown = config.shutdown.child_token();
    let caches = cache::Caches::start(&config.client, &shutdown);
    if let Err(e) = caches.ready().await {
        shutdown.cancel();
        return Err(e.into());
    }
    let tokens = matches!(
        config.pod_credentials,
        PodCredentials::ServiceAccount { .. }
    )
    .then(|| token::Tokens::new(config.client.clone()));
    let identity = if config.register {
        // The node reports the API server's version as its own, as a kubelet of the same
        // release would.
        let version = config
            .client
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .unwrap_or_default();
        let (cpus, memory_kib) = node_status::machine_capacity();
        Some(node_status::NodeIdentity {
            name: config.node_name.clone(),
            host_ip: config.host_ip,
            version,
            cpus,
            memory_kib,
        })
    } else {
        None
    };
    let run_as_others = user::node_is_root();
    let (pods_root, pods_root_guard) = pod::pods_root(&config.state_dir, run_as_others)
        .map_err(|e| anyhow::anyhow!("failed to make a directory for pods' files: {e}"))?;
    if pods_root_guard.is_some() {
        tracing::info!(pods = %pods_root.display(), state_dir = %config.state_dir.display(), "the state directory is private; pods' files live in a directory of their own");
    }
    let node = Arc::new(pod::Node {
        client: config.client,
        caches,
        node_name: config.node_name,
        host_ip: config.host_ip.to_string(),
        state_dir: config.state_dir,
        pods_root,
        pods_root_guard,
        run_as_others,
        image_map: config.image_map,
        credentials: config.pod_credentials,
        tokens,
        register: config.register,
        groups: Mutex::new(HashMap::new()),
    });
    if let Some(identity) = &identity {
        // Registered before anything runs, so the first pods find their node.
        node_status::heartbeat(&node.client, identity)
            .await
            .map_err(|e| anyhow::anyhow!("failed to register node {}: {e}", identity.name))?;
    }
    let tracker = TaskTracker::new();
    spawn_tasks(&node, identity, config.pod_addresses, &shutdown, &tracker);
    Ok(NodeHandle {
        shutdown,
        node,
        tracker,
    })
}

/// Spawns the agent's long-running tasks on `tracker`: the pod runner and, on a registered
/// node, the heartbeat (Node status and Lease) and the binder. Each runs until `shutdown` is
/// cancelled, and [`NodeHandle::shutdown`] waits for all of them.
fn spawn_tasks(
    node: &Arc<pod::Node>,
    identity: Option<node_status::NodeIdentity>,
    pod_addresses: PodAddresses,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) {
    if let Some(identity) = identity {
        tracker.spawn(node_status::run(
            node.client.clone(),
            identity,
            shutdown.clone(),
        ));
        tracker.spawn(binding::run(node.clone(), shutdown.clone()));
    }
    tracker.spawn(kubelet::run(
        node.clone(),
        pod_addresses,
        shutdown.clone(),
        tracker.clone(),
    ));
}

impl NodeHandle {
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

    /// The name this node runs pods for (their `spec.nodeName`).
    pub fn node_name(&self) -> &str {
        &self.node.node_name
    }

    /// Stops every process of the pod (SIGSTOP to its process groups): it stays Running and
    /// stops answering.
    pub async fn freeze(&self, namespace: &str, name: &str) -> Result<(), Error> {
        self.signal(namespace, name, GroupSignal::Stop)
    }

    /// Resumes a frozen pod (SIGCONT). A pod with no running container has nothing frozen
    /// (a liveness probe may have restarted a frozen container meanwhile, as a kubelet would):
    /// that is not an error.
    pub async fn thaw(&self, namespace: &str, name: &str) -> Result<(), Error> {
        match self.signal(namespace, name, GroupSignal::Continue) {
            Err(Error::NotRunning(_)) => Ok(()),
            other => other,
        }
    }

    /// Kills the pod's processes (SIGKILL); the restart policy then applies.
    pub async fn kill(&self, namespace: &str, name: &str) -> Result<(), Error> {
        self.signal(namespace, name, GroupSignal::Kill)
    }

    /// The process group ids of the pod's running containers, by container name.
    pub fn process_groups(&self, namespace: &str, name: &str) -> BTreeMap<String, i32> {
        self.groups(namespace, name).unwrap_or_default()
    }

    /// Stops the node's tasks and ends every child process (SIGTERM, then SIGKILL after a grace
    /// period of [`pod::SHUTDOWN_GRACE`]); returns when all are gone.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}
