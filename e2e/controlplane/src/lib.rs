//! initializer-controlplane: the real Kubernetes control plane, for tests and for `make cluster`.
//!
//! etcd, kube-apiserver and kube-controller-manager, built from the official Go modules
//! (`tools/controlplane/go.mod`, `make controlplane`), run as local processes inside a network
//! namespace of their own, with the node agent (`initializer-node`) in place of the kubelet: it
//! registers a Node, binds pods to it and runs them as processes. Everything runs inside the
//! namespace; [`ControlPlane::kubeconfig_path`] reaches the API server through a port forward
//! on `127.0.0.1`, so kubectl and the tests need no namespace of their own.
//!
//! ```no_run
//! # async fn demo() -> Result<(), initializer_controlplane::Error> {
//! use initializer_controlplane::{ControlPlane, ControlPlaneConfig};
//! let config = ControlPlaneConfig::new("/tmp/cp", "target/debug/initializer-node");
//! let cluster = ControlPlane::start(config).await?;
//! let client = cluster.client(); // cluster-admin
//! cluster.shutdown().await;      // every process and the namespace are gone
//! # Ok(()) }
//! ```

pub mod binaries;
pub mod component;
pub mod forward;
pub mod layout;
pub mod legacy;
pub mod netns;
pub mod pki;
pub mod signal;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use component::Component;
use forward::Forward;
use layout::{API_PORT, Layout, NODE_NAME};
pub use legacy::{LegacyApiServer, LegacyConfig};
use netns::NetNs;

/// The API server's component name (its log is `logs/kube-apiserver.log`).
const APISERVER: &str = "kube-apiserver";
/// How long the API server may take to answer `/readyz` (etcd included).
const API_READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the node and the controllers may take once the API server is ready.
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(90);

/// Failures of the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The network namespace could not be made or prepared.
    #[error("failed to create the control plane's network namespace: {message}")]
    Netns {
        /// The command, its error, and what to do.
        message: String,
    },
    /// The Go build of the control plane failed.
    #[error("failed to build the control plane: {0}")]
    Build(String),
    /// Certificates or keys could not be made.
    #[error("failed to make the control plane's certificates: {0}")]
    Certificates(String),
    /// A file of the state directory could not be written or read.
    #[error("failed to use {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A component could not be started.
    #[error("failed to start {component} ({program}): {source}")]
    Start {
        /// etcd, kube-apiserver, ...
        component: &'static str,
        program: PathBuf,
        source: std::io::Error,
    },
    /// A component exited while the control plane was meant to be up.
    #[error("{component} exited ({status}); its last log lines:\n{last_lines}")]
    Died {
        /// etcd, kube-apiserver, ...
        component: &'static str,
        status: String,
        /// The end of its log.
        last_lines: String,
    },
    /// A component asked for is not among those running.
    #[error("{component} is not running")]
    NotRunning {
        /// etcd, kube-apiserver, ...
        component: &'static str,
    },
    /// The port forward could not listen.
    #[error("failed to listen on 127.0.0.1:{port} for the API server: {source}")]
    Forward { port: u16, source: std::io::Error },
    /// A client for the API server could not be made.
    #[error("failed to build a client for the control plane: {0}")]
    Client(String),
    /// The control plane did not become ready in time.
    #[error("timed out after {seconds}s waiting for {what}; last seen: {last}")]
    NotReady {
        /// What was awaited.
        what: &'static str,
        seconds: u64,
        /// The last observation.
        last: String,
    },
}

impl Error {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct ControlPlaneConfig {
    /// Certificates, kubeconfigs, etcd's data, logs (`logs/<component>.log`) and pods' files.
    pub state_dir: PathBuf,
    /// The node agent's executable (`initializer-node`).
    pub node_binary: PathBuf,
    /// The image map the node agent runs containers from.
    pub image_map: Option<PathBuf>,
    /// The local port of the forward (0: any free port).
    pub port: u16,
}

impl ControlPlaneConfig {
    /// Defaults: no image map, any port.
    pub fn new(state_dir: impl Into<PathBuf>, node_binary: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            node_binary: node_binary.into(),
            image_map: None,
            port: 0,
        }
    }
}

/// How long starting took, for the notes and the timings table.
#[derive(Clone, Copy, Debug, Default)]
pub struct Startup {
    /// From the first process started to the API server answering `/readyz`.
    pub api_ready: Duration,
    /// From the first process started to the node Ready and the `default` ServiceAccount made.
    pub cluster_ready: Duration,
}

/// A running control plane.
pub struct ControlPlane {
    layout: Layout,
    version: String,
    /// The API server's executable, for a restart.
    apiserver: PathBuf,
    /// In start order; stopped in reverse. Behind a lock so that one can be restarted.
    components: Mutex<Vec<Component>>,
    client: Client,
    kubeconfig: PathBuf,
    startup: Startup,
    // Dropped last: the forward, then the namespace.
    forward: Forward,
    netns: Arc<NetNs>,
}

impl ControlPlane {
    /// Builds the binaries if needed, makes the namespace and the certificates, and starts
    /// etcd, the API server, the controller manager and the node agent; returns once the node
    /// is Ready and the controllers have made the `default` ServiceAccount.
    pub async fn start(config: ControlPlaneConfig) -> Result<Self, Error> {
        let binaries = binaries::locate()?;
        std::fs::create_dir_all(&config.state_dir).map_err(|e| Error::io(&config.state_dir, e))?;
        let state_dir = std::fs::canonicalize(&config.state_dir)
            .map_err(|e| Error::io(&config.state_dir, e))?;
        let placeholder = Layout::new("", &state_dir);
        let netns = Arc::new(NetNs::create(&placeholder.netns_setup())?);
        let layout = Layout {
            netns: netns.name().to_owned(),
            ..placeholder
        };
        pki::write_all(&layout, NODE_NAME)?;
        let target = SocketAddr::from((layout.host_ip, API_PORT));
        let forward = Forward::start(netns.clone(), target, config.port).await?;
        let outside = format!("https://{}", forward.local_addr());
        let identities = pki::identities(NODE_NAME);
        for identity in &identities {
            let text = pki::kubeconfig(&layout, identity, &layout.api_url())?;
            pki::write(&layout.kubeconfig(identity.file), &text)?;
        }
        let kubeconfig = layout.dir.join("kubeconfig");
        let admin = pki::kubeconfig(&layout, &identities[0], &outside)?;
        pki::write(&kubeconfig, &admin)?;
        let client = client_for(&admin).await?;

        let prefix = netns.exec_prefix();
        let started = Instant::now();
        let mut components = Vec::new();
        let logs = layout.clone();
        let start = |name, program: &Path, args: Vec<String>| {
            Component::start(name, &prefix, program, &args, &logs.log(name))
        };
        components.push(start("etcd", &binaries.etcd, layout.etcd_args())?);
        components.push(start(
            APISERVER,
            &binaries.apiserver,
            layout.apiserver_args(&binaries.version),
        )?);
        let mut plane = Self {
            version: binaries.version.clone(),
            apiserver: binaries.apiserver.clone(),
            components: Mutex::new(components),
            client,
            kubeconfig,
            startup: Startup::default(),
            forward,
            netns,
            layout,
        };
        if let Err(err) = plane.wait_api_ready().await {
            plane.shutdown_ref().await;
            return Err(err);
        }
        plane.startup.api_ready = started.elapsed();
        let more = [
            start(
                "kube-controller-manager",
                &binaries.controller_manager,
                plane.layout.controller_manager_args(),
            ),
            start(
                "node",
                &config.node_binary,
                plane.layout.node_args(config.image_map.as_deref()),
            ),
        ];
        for component in more {
            match component {
                Ok(component) => plane.components().push(component),
                Err(err) => {
                    plane.shutdown_ref().await;
                    return Err(err);
                }
            }
        }
        if let Err(err) = plane.wait_cluster_ready().await {
            plane.shutdown_ref().await;
            return Err(err);
        }
        plane.startup.cluster_ready = started.elapsed();
        Ok(plane)
    }

    /// A cluster-admin client, through the forward.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The cluster-admin kubeconfig, reaching the API server through the forward on
    /// `127.0.0.1`: for kubectl and child processes.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where the forward listens: `127.0.0.1:PORT`.
    pub fn api_address(&self) -> SocketAddr {
        self.forward.local_addr()
    }

    /// The Kubernetes version running.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The network namespace's name.
    pub fn netns(&self) -> &str {
        self.netns.name()
    }

    /// Connects to an address inside the cluster's network (a pod's IP) from inside the network
    /// namespace, as a process in the cluster would: for a client running on the host, such as
    /// an operator under test. Blocking: the connect runs on a thread of its own.
    pub fn connector(
        &self,
    ) -> impl Fn(SocketAddr) -> std::io::Result<std::net::TcpStream> + Clone + Send + Sync + 'static
    {
        let netns = self.netns.clone();
        move |addr| netns::connect(&netns, addr)
    }

    /// A command that runs `program` inside the cluster's network namespace, as a process in
    /// the cluster would run (pod IPs reachable), with `KUBECONFIG` set to a cluster-admin
    /// kubeconfig that reaches the API server from there. `ip netns exec` execs the program,
    /// so the child's pid is the program's.
    pub fn command_inside(&self, program: &Path) -> std::process::Command {
        let [ip, rest @ ..] = self.netns.exec_prefix();
        let mut command = std::process::Command::new(ip);
        command
            .args(rest)
            .arg(program)
            .env("KUBECONFIG", self.layout.kubeconfig("admin"));
        command
    }

    /// The state directory (logs under `logs/`, pods' files under `node/`).
    pub fn state_dir(&self) -> &Path {
        &self.layout.dir
    }

    /// How long starting took.
    pub fn startup(&self) -> Startup {
        self.startup
    }

    /// Stops kube-apiserver and starts it again with its usual flags followed by `extra` (a
    /// later flag wins: `--disable-admission-plugins=...` takes a plugin out); returns once it
    /// answers `/readyz` again. Everything else keeps running, as during an API server's
    /// rolling upgrade.
    pub async fn restart_apiserver(&self, extra: &[&str]) -> Result<(), Error> {
        let (at, old) = {
            let mut components = self.components();
            let at = components
                .iter()
                .position(|c| c.name() == APISERVER)
                .ok_or(Error::NotRunning {
                    component: APISERVER,
                })?;
            (at, components.remove(at))
        };
        old.stop().await;
        let mut args = self.layout.apiserver_args(&self.version);
        args.extend(extra.iter().map(|flag| (*flag).to_owned()));
        let started = Component::start(
            APISERVER,
            &self.netns.exec_prefix(),
            &self.apiserver,
            &args,
            &self.layout.log(APISERVER),
        )?;
        self.components().insert(at, started);
        self.wait_api_ready().await
    }

    fn components(&self) -> std::sync::MutexGuard<'_, Vec<Component>> {
        self.components
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Each component's name, process id and resident memory in KiB.
    pub fn memory(&self) -> Vec<(&'static str, u32, Option<u64>)> {
        self.components()
            .iter()
            .map(|c| (c.name(), c.pid(), c.rss_kib()))
            .collect()
    }

    /// `Err(Error::Died { .. })` naming the first component that has exited.
    pub fn check(&self) -> Result<(), Error> {
        self.components().iter().try_for_each(Component::check)
    }

    /// Stops the node agent (which ends every pod), the controller manager, the API server and
    /// etcd, then removes the namespace.
    pub async fn shutdown(self) {
        self.shutdown_ref().await;
    }

    async fn shutdown_ref(&self) {
        let components = std::mem::take(&mut *self.components());
        for component in components.iter().rev() {
            component.stop().await;
        }
    }

    async fn wait_api_ready(&self) -> Result<(), Error> {
        let started = Instant::now();
        loop {
            self.check()?;
            let request = http_get("/readyz");
            let last = match self.client.request_text(request).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => body,
                Err(e) => e.to_string(),
            };
            if started.elapsed() > API_READY_TIMEOUT {
                return Err(Error::NotReady {
                    what: "the API server's /readyz",
                    seconds: API_READY_TIMEOUT.as_secs(),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_cluster_ready(&self) -> Result<(), Error> {
        let started = Instant::now();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), "default");
        loop {
            self.check()?;
            let node = match nodes.get_opt(NODE_NAME).await {
                Ok(Some(node)) if node_is_ready(&node) => "Ready".to_owned(),
                Ok(Some(_)) => "not Ready".to_owned(),
                Ok(None) => "not registered".to_owned(),
                Err(e) => e.to_string(),
            };
            let account = matches!(accounts.get_opt("default").await, Ok(Some(_)));
            if node == "Ready" && account {
                return Ok(());
            }
            let last = format!("node {NODE_NAME}: {node}; default ServiceAccount: {account}");
            if started.elapsed() > NODE_READY_TIMEOUT {
                return Err(Error::NotReady {
                    what: "the node and the default ServiceAccount",
                    seconds: NODE_READY_TIMEOUT.as_secs(),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Whether a Node reports `Ready=True`.
pub fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

fn http_get(path: &'static str) -> http::Request<Vec<u8>> {
    let mut request = http::Request::new(Vec::new());
    *request.uri_mut() = http::Uri::from_static(path);
    request
}

async fn client_for(kubeconfig: &str) -> Result<Client, Error> {
    let parsed = Kubeconfig::from_yaml(kubeconfig).map_err(|e| Error::Client(e.to_string()))?;
    let mut config = Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Client(e.to_string()))?;
    // Tests see every answer as the API server gives it, without kube's retries.
    config.default_retry = false;
    Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
}
