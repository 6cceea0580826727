//! Starting and stopping the whole sandbox: HTTPS server, store, garbage collector, workload
//! controllers; the [`SandboxHandle`] tests and `sandbox up` hold.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::Admission;
use crate::apiserver::{ApiServer, WriteOptions};
use crate::error::Error;
use crate::faults::{FaultRule, Faults};
use crate::http::{AppState, router};
use crate::resource::Registry;
use crate::store::Store;
use crate::tls;
use crate::view::ClusterView;
use crate::workload::{self, WorkloadContext, WorkloadHandle};

/// How to start a sandbox.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Directory for the CA, the kubeconfig, pods' files and logs. Created if missing.
    pub state_dir: PathBuf,
    /// Image map file (image reference → executable), if pods should run.
    pub image_map: Option<PathBuf>,
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Changes kept for watch resumption; older versions answer 410 Expired.
    pub history: usize,
    /// How often watches that allow bookmarks receive one.
    pub bookmark_interval: Duration,
    /// Whether to start the workload controllers (Deployments, pods, EndpointSlices).
    pub workloads: bool,
    /// A snapshot to load at start.
    pub restore: Option<PathBuf>,
    /// Emulate Kubernetes 1.7–1.13 Initializers: serve `InitializerConfiguration`
    /// (`admissionregistration.k8s.io/v1alpha1`), assign `metadata.initializers.pending`,
    /// hold creates until initialized, hide uninitialized objects (see the README).
    pub legacy_initializers: bool,
}

impl SandboxConfig {
    /// Defaults for `state_dir`: any port, workloads on, 10,000 changes of history.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        SandboxConfig {
            state_dir: state_dir.into(),
            image_map: None,
            port: 0,
            history: 10_000,
            bookmark_interval: Duration::from_secs(5),
            workloads: true,
            restore: None,
            legacy_initializers: false,
        }
    }
}

/// Starts sandboxes: [`Sandbox::start`] returns the [`SandboxHandle`] of a running one.
#[derive(Debug)]
pub struct Sandbox;

/// A running sandbox.
pub struct SandboxHandle {
    url: String,
    addr: SocketAddr,
    state_dir: PathBuf,
    kubeconfig_path: PathBuf,
    ca_pem: String,
    client: kube::Client,
    api: Arc<ApiServer>,
    workloads: Arc<OnceLock<WorkloadHandle>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl std::fmt::Debug for SandboxHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxHandle")
            .field("url", &self.url)
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}

fn state_err(path: &Path, source: std::io::Error) -> Error {
    Error::StateFile {
        path: path.display().to_string(),
        source,
    }
}

/// 32 random bytes, hex: the bearer token of one sandbox.
fn new_token() -> String {
    rand::random::<[u8; 32]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Sandbox {
    /// Starts a sandbox and returns once it serves requests.
    pub async fn start(config: SandboxConfig) -> Result<SandboxHandle, Error> {
        let state_dir = config.state_dir.clone();
        std::fs::create_dir_all(&state_dir).map_err(|e| state_err(&state_dir, e))?;
        let state_dir = std::fs::canonicalize(&state_dir).map_err(|e| state_err(&state_dir, e))?;
        let logs = state_dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| state_err(&logs, e))?;
        let certs = tls::load_or_create(&state_dir)?;
        let tls_config = tls::server_config(&certs)?;

        let store = Arc::new(Store::new(
            Registry::with_builtins(),
            config.history.max(16),
        ));
        let faults = Arc::new(Faults::default());
        let api = Arc::new(
            ApiServer::new(store.clone(), Admission::default(), faults)
                .with_legacy_initializers(config.legacy_initializers),
        );
        if let Some(path) = &config.restore {
            let text = std::fs::read_to_string(path).map_err(|e| state_err(path, e))?;
            let snap: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Snapshot(e.to_string()))?;
            crate::snapshot::restore(&store, &snap)?;
            for obj in store
                .list(
                    &crate::store::ResKey::new("apiextensions.k8s.io", "customresourcedefinitions"),
                    None,
                )
                .0
            {
                let mut reg = store.registry_mut();
                for t in crate::crd::resource_types(&obj) {
                    reg.insert(t);
                }
            }
        }
        let ns_type = api
            .resolve("", "v1", "namespaces")
            .map_err(|e| Error::StartWorkloads(e.to_string()))?;
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if store
                .get(&crate::store::ResKey::new("", "namespaces"), "", ns)
                .is_none()
            {
                let body =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                let opts = WriteOptions {
                    field_manager: Some("sandbox".into()),
                    // A restored InitializerConfiguration matching namespaces must not hold
                    // the start.
                    include_uninitialized: true,
                    ..Default::default()
                };
                api.create(&ns_type, None, body, &opts)
                    .await
                    .map_err(|e| Error::StartWorkloads(e.to_string()))?;
            }
        }

        let addr = SocketAddr::from(([127, 0, 0, 1], config.port));
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind {
                addr: addr.to_string(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })?;
        let url = format!("https://127.0.0.1:{}", addr.port());

        // A fresh token per sandbox, known only through the kubeconfig (mode 0600): other local
        // users, and anything that merely reaches 127.0.0.1, are refused.
        let token: Arc<str> = new_token().into();
        let workloads: Arc<OnceLock<WorkloadHandle>> = Arc::new(OnceLock::new());
        let state = AppState {
            api: api.clone(),
            workloads: workloads.clone(),
            bookmark_interval: config.bookmark_interval,
            state_dir: state_dir.clone(),
            token: token.clone(),
        };
        let app = router(state);
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let acceptor = tokio_rustls::TlsAcceptor::from(tls_config);
        {
            let shutdown = shutdown.clone();
            let tracker2 = tracker.clone();
            tracker.spawn(async move {
                loop {
                    let accepted = tokio::select! {
                        _ = shutdown.cancelled() => return,
                        a = listener.accept() => a,
                    };
                    let Ok((stream, _)) = accepted else { continue };
                    let _ = stream.set_nodelay(true);
                    let acceptor = acceptor.clone();
                    let app = app.clone();
                    let shutdown = shutdown.clone();
                    tracker2.spawn(async move {
                        let Ok(tls) = acceptor.accept(stream).await else {
                            return;
                        };
                        let service = TowerToHyperService::new(app);
                        let builder =
                            hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                        let conn =
                            builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
                        tokio::select! {
                            _ = conn => {}
                            _ = shutdown.cancelled() => {}
                        }
                    });
                }
            });
        }
        {
            let api = api.clone();
            let shutdown = shutdown.clone();
            tracker.spawn(async move {
                tokio::select! {
                    _ = crate::gc::run(api) => {}
                    _ = shutdown.cancelled() => {}
                }
            });
        }
        tracker.close();

        let kubeconfig_path = state_dir.join("kubeconfig");
        let text = tls::kubeconfig(&url, &certs.ca_pem, "sandbox-admin", &token);
        tls::write_kubeconfig(&kubeconfig_path, &text)?;
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text)
            .map_err(|e| Error::BuildClient(e.to_string()))?;
        let mut kcfg = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| Error::BuildClient(e.to_string()))?;
        // Tests see every answer as the sandbox gives it (faults included), without kube's
        // retries.
        kcfg.default_retry = false;
        let client = kube::Client::try_from(kcfg).map_err(|e| Error::BuildClient(e.to_string()))?;

        let handle = SandboxHandle {
            url,
            addr,
            state_dir: state_dir.clone(),
            kubeconfig_path: kubeconfig_path.clone(),
            ca_pem: certs.ca_pem.clone(),
            client: client.clone(),
            api,
            workloads: workloads.clone(),
            shutdown: shutdown.clone(),
            tracker,
        };
        if config.workloads {
            let ctx = WorkloadContext {
                client,
                state_dir,
                image_map: config.image_map.clone(),
                kubeconfig_path,
                shutdown: shutdown.child_token(),
            };
            match workload::start(ctx).await {
                Ok(w) => {
                    let _ = workloads.set(w);
                }
                Err(e) => {
                    // Nothing may outlive a failed start.
                    shutdown.cancel();
                    return Err(Error::StartWorkloads(e.to_string()));
                }
            }
        }
        Ok(handle)
    }
}

impl SandboxHandle {
    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The kubeconfig file (`STATE_DIR/kubeconfig`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The state directory: CA, kubeconfig, pods' files and logs.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Where pods' logs go (`STATE_DIR/logs`).
    pub fn pod_log_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }

    /// The CA certificate clients trust, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client for the sandbox (cheap to clone).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Read access to stored objects.
    pub fn view(&self) -> Arc<dyn ClusterView> {
        self.api.clone()
    }

    /// The API server, for tests that call its verbs without HTTP.
    pub fn api(&self) -> Arc<ApiServer> {
        self.api.clone()
    }

    /// Adds an API fault rule; returns its id.
    pub fn add_fault(&self, rule: FaultRule) -> u64 {
        self.api.faults.add(rule)
    }

    /// Removes one fault rule.
    pub fn remove_fault(&self, id: u64) -> bool {
        self.api.faults.remove(id)
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.api.faults.clear()
    }

    /// Forgets the change history, as an etcd compaction does: a watch from any earlier
    /// resourceVersion then gets 410 `Expired`.
    pub fn compact_history(&self) {
        self.api.store.compact()
    }

    /// Ends every open watch stream.
    pub fn drop_watches(&self) {
        self.api.faults.drop_watches()
    }

    /// The workload controllers, if started.
    pub fn workloads(&self) -> Option<&WorkloadHandle> {
        self.workloads.get()
    }

    /// Writes every stored object to `path` as one JSON document.
    pub fn snapshot_to(&self, path: &Path) -> Result<(), Error> {
        let snap = crate::snapshot::take(&self.api.store);
        std::fs::write(path, snap.to_string()).map_err(|e| state_err(path, e))
    }

    /// Stops workloads (ending every child process), then the server.
    pub async fn shutdown(self) {
        if let Some(w) = self.workloads.get() {
            w.shutdown().await;
        }
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.tracker.wait()).await;
    }
}
