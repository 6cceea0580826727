//! One pod as local processes: the kubelet's pod worker.
//!
//! The worker ([`run`], in `worker.rs`) is the process supervisor: it materializes volumes,
//! starts each container's executable (from the image map), runs its probes, restarts it per
//! `restartPolicy` with backoff, and on deletion sends SIGTERM, waits the grace period, sends
//! SIGKILL and removes the pod object. What it decides without IO lives beside it:
//! `status.rs` renders the status it reports (phase, conditions, container states) from what
//! it observed, `restart.rs` holds the restart policy, backoff and grace periods, `probes.rs`
//! what a probe result does, `launch.rs` what each container runs, and `files.rs` lays out the
//! pod's directory (its user's, see [`crate::user`]) and writes its kubeconfig.

mod files;
mod launch;
mod probes;
mod restart;
mod status;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use kube::Client;

use crate::cache::Caches;
use crate::credentials::PodCredentials;
use crate::token::Tokens;

pub use files::{log_path, pod_dir, pods_root};
pub use worker::run;

/// Grace period of every pod when the node itself stops.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// What every pod worker shares: the API client, caches, the node's identity, paths, and the
/// running processes.
pub struct Node {
    /// Writes pod status and removes deleted pods.
    pub client: Client,
    /// The pods, Secrets and ConfigMaps the workers read instead of asking the API.
    pub caches: Caches,
    /// The node's name (`spec.nodeName` in the downward API).
    pub node_name: String,
    /// The node's address (`status.hostIP`).
    pub host_ip: String,
    /// Root of pods' logs (`logs/`).
    pub state_dir: PathBuf,
    /// Root of pods' directories (volumes, kubeconfig): `<state>/pods`, or a directory of its
    /// own when the pods' user cannot reach the state directory ([`files::pods_root`]).
    pub pods_root: PathBuf,
    /// Holds (and removes when the node goes) the pods' root when it is a temporary directory.
    pub pods_root_guard: Option<tempfile::TempDir>,
    /// Whether the node is root, and so runs pods as their own unprivileged user
    /// ([`crate::user`]).
    pub run_as_others: bool,
    /// Maps container images to local executables; read again at each container start, so
    /// edits apply without a restart. `None`: no image runs.
    pub image_map: Option<PathBuf>,
    /// Which kubeconfig each pod gets.
    pub credentials: PodCredentials,
    /// Service-account tokens issued to pods (`None`: placeholders, on the sandbox).
    pub tokens: Option<Tokens>,
    /// Whether this node is registered (and so runs only the pods bound to it).
    pub register: bool,
    /// Process groups of the running containers, per pod `(namespace, name)`.
    pub groups: Mutex<HashMap<(String, String), BTreeMap<String, i32>>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node_name", &self.node_name)
            .field("host_ip", &self.host_ip)
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}
