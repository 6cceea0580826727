//! One pod as local processes: the kubelet's pod worker.
//!
//! The worker materializes volumes, starts each container's executable (from the image map),
//! runs its probes, restarts it per `restartPolicy` with backoff (1 s doubling to 60 s; the real
//! kubelet uses 10 s to 5 min), reports status (phase, conditions, container states), and on
//! deletion sends SIGTERM, waits the grace period, sends SIGKILL and removes the pod object.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Pod, Secret, ServiceAccountTokenProjection,
};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cache::Caches;
use crate::credentials::{self, PodCredentials};
use crate::env::{self, Lookup, Placement};
use crate::imagemap::ImageMap;
use crate::probe::{self, Timing, Tracker};
use crate::process::{self, Exit, Launch, Running};
use crate::token::{TokenKey, Tokens};
use crate::volume::{self, Mounts, Source};

/// First restart delay; doubles per crash up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Longest restart delay.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A container that ran this long resets its backoff.
const BACKOFF_RESET: Duration = Duration::from_secs(60);
/// How often a pod waiting on an image, a Secret or a ConfigMap tries again.
const RETRY: Duration = Duration::from_secs(2);
/// Grace period when the node itself stops.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// What every pod worker shares: the API client, caches, the node's identity, paths, and the
/// running processes.
pub struct Node {
    /// Client for the API server.
    pub client: Client,
    /// Watch-fed caches.
    pub caches: Caches,
    /// The node's name (`spec.nodeName` in the downward API).
    pub node_name: String,
    /// The node's address (`status.hostIP`).
    pub host_ip: String,
    /// Root of pods' volumes and logs.
    pub state_dir: PathBuf,
    /// The image map file.
    pub image_map: Option<PathBuf>,
    /// How pods reach the API server.
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

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A container's state as containerStatuses shows it.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started_at: String,
    },
    Terminated {
        exit: Exit,
        reason: String,
        started_at: String,
        finished_at: String,
    },
}

impl State {
    fn to_json(&self) -> Value {
        match self {
            Self::Waiting { reason, message } if message.is_empty() => {
                json!({"waiting": {"reason": reason}})
            }
            Self::Waiting { reason, message } => {
                json!({"waiting": {"reason": reason, "message": message}})
            }
            Self::Running { started_at } => json!({"running": {"startedAt": started_at}}),
            Self::Terminated {
                exit,
                reason,
                started_at,
                finished_at,
            } => {
                let mut t = json!({"exitCode": exit.code, "reason": reason, "startedAt": started_at, "finishedAt": finished_at});
                if let Some(sig) = exit.signal {
                    t["signal"] = json!(sig);
                }
                json!({"terminated": t})
            }
        }
    }
}

/// One container of the pod.
struct Slot {
    spec: Container,
    generation: u64,
    running: Option<Running>,
    started_instant: Option<Instant>,
    program: Option<PathBuf>,
    state: State,
    last_state: Option<State>,
    restart_count: i32,
    ready: bool,
    readiness: Tracker,
    liveness: Tracker,
    startup: Tracker,
    started: bool,
    probes: Vec<tokio::task::JoinHandle<()>>,
    next_start: Option<Instant>,
    backoff: Duration,
    pull_failures: u32,
    done: bool,
}

impl Slot {
    fn new(spec: Container) -> Self {
        Self {
            spec,
            generation: 0,
            running: None,
            started_instant: None,
            program: None,
            state: State::Waiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
            },
            last_state: None,
            restart_count: 0,
            ready: false,
            readiness: Tracker::default(),
            liveness: Tracker::default(),
            startup: Tracker::default(),
            started: false,
            probes: Vec::new(),
            next_start: Some(Instant::now()),
            backoff: INITIAL_BACKOFF,
            pull_failures: 0,
            done: false,
        }
    }

    fn stop_probes(&mut self) {
        for p in self.probes.drain(..) {
            p.abort();
        }
    }
}

/// Which probe a result is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProbeKind {
    Startup,
    Readiness,
    Liveness,
}

enum Event {
    Exited {
        idx: usize,
        generation: u64,
        exit: Exit,
    },
    Probe {
        idx: usize,
        generation: u64,
        kind: ProbeKind,
        result: Result<(), String>,
    },
}

/// The pod's directory under the state directory.
pub fn pod_dir(state_dir: &Path, namespace: &str, name: &str) -> PathBuf {
    state_dir.join("pods").join(format!("{namespace}_{name}"))
}

/// A container's log file: `<state>/logs/<namespace>_<pod>/<container>.log`.
pub fn log_path(state_dir: &Path, namespace: &str, name: &str, container: &str) -> PathBuf {
    state_dir
        .join("logs")
        .join(format!("{namespace}_{name}"))
        .join(format!("{container}.log"))
}

struct Worker {
    node: Arc<Node>,
    namespace: String,
    name: String,
    uid: String,
    ip: Ipv4Addr,
    slots: Vec<Slot>,
    events: mpsc::UnboundedSender<Event>,
    volume_dirs: BTreeMap<String, PathBuf>,
    published: BTreeMap<String, Source>,
    volumes_error: Option<String>,
    kubeconfig: PathBuf,
    start_time: String,
    transitions: HashMap<&'static str, (bool, String)>,
    last_status: Option<Value>,
    report_failed: bool,
    /// Something happened since the last report (an exit, a probe result, a start attempt).
    dirty: bool,
    /// The pod's resourceVersion and the config generation at the last look, so wake-ups for
    /// other objects' changes cost nothing.
    seen_version: Option<String>,
    seen_config: Option<u64>,
}

/// Runs the pod until it is deleted (then removes it) or `cancel` fires (node shutdown, or the
/// pod object vanished or no longer runs here).
pub async fn run(
    node: Arc<Node>,
    pod: Arc<Pod>,
    ip: Ipv4Addr,
    cancel: CancellationToken,
    shutdown: CancellationToken,
) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let dir = pod_dir(&node.state_dir, &namespace, &name);
    let volume_dirs: BTreeMap<String, PathBuf> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .map(|v| {
            let path = match &v.host_path {
                Some(h) => PathBuf::from(&h.path),
                None => dir.join("volumes").join(&v.name),
            };
            (v.name.clone(), path)
        })
        .collect();
    let kubeconfig = match &node.credentials {
        PodCredentials::Shared(shared) => pod_kubeconfig(shared, &dir, &pod),
        PodCredentials::ServiceAccount { server } => {
            service_account_kubeconfig_file(server, &dir, &pod, &volume_dirs)
        }
    };
    let mut w = Worker {
        node: node.clone(),
        namespace,
        name,
        uid,
        ip,
        slots: containers.into_iter().map(Slot::new).collect(),
        events: tx,
        volume_dirs,
        published: BTreeMap::new(),
        volumes_error: None,
        kubeconfig,
        start_time: now(),
        transitions: HashMap::new(),
        last_status: None,
        report_failed: false,
        dirty: true,
        seen_version: None,
        seen_config: None,
    };
    let mut changes = node.caches.subscribe();
    loop {
        let current = node
            .caches
            .pod(&w.namespace, &w.name)
            .filter(|p| p.metadata.uid.as_deref() == Some(w.uid.as_str()));
        let Some(pod) = current else {
            let grace = if shutdown.is_cancelled() {
                SHUTDOWN_GRACE
            } else {
                grace_of(&pod)
            };
            w.terminate(&mut rx, grace).await;
            if !shutdown.is_cancelled() {
                w.remove_files();
            }
            break;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or_else(|| grace_of(&pod), Duration::from_secs);
            w.terminate(&mut rx, grace).await;
            w.remove_files();
            w.finalize_deletion().await;
            break;
        }
        let config = node.caches.config_generation();
        let pod_changed = pod.metadata.resource_version != w.seen_version;
        let tokens_changed = match &node.tokens {
            Some(tokens) => tokens.ensure(&pod).await.unwrap_or_else(|e| {
                tracing::warn!(pod = %format!("{}/{}", w.namespace, w.name), error = %e, "failed to get a service-account token");
                false
            }),
            None => false,
        };
        if pod_changed
            || tokens_changed
            || w.seen_config != Some(config)
            || w.volumes_error.is_some()
        {
            w.sync_volumes(&pod);
            w.seen_config = Some(config);
        }
        w.seen_version = pod.metadata.resource_version.clone();
        if w.start_due(&pod) {
            w.dirty = true;
        }
        if w.dirty || pod_changed || w.report_failed {
            w.report(&pod).await;
            w.dirty = false;
        }
        let next = w
            .slots
            .iter()
            .filter(|s| s.running.is_none() && !s.done)
            .filter_map(|s| s.next_start)
            .min();
        let mut sleep = next.map_or(Duration::from_secs(3600), |n| {
            n.saturating_duration_since(Instant::now())
        });
        if w.report_failed {
            sleep = sleep.min(Duration::from_millis(500));
        }
        if w.volumes_error.is_some() {
            sleep = sleep.min(RETRY);
        }
        if let Some(refresh) = node.tokens.as_ref().and_then(|t| t.next_refresh(&pod)) {
            sleep = sleep.min(refresh.saturating_duration_since(Instant::now()));
        }
        tokio::select! {
            () = cancel.cancelled() => {
                let grace = if shutdown.is_cancelled() { SHUTDOWN_GRACE } else { grace_of(&pod) };
                w.terminate(&mut rx, grace).await;
                if !shutdown.is_cancelled() {
                    w.remove_files();
                }
                break;
            }
            changed = changes.changed() => {
                if changed.is_err() { break; }
            }
            Some(event) = rx.recv() => {
                w.handle(event, &pod);
                w.dirty = true;
            }
            () = tokio::time::sleep(sleep) => {}
        }
        // Apply every event already queued before reporting, so one report covers them.
        while let Ok(event) = rx.try_recv() {
            w.handle(event, &pod);
            w.dirty = true;
        }
    }
    w.node
        .groups
        .lock()
        .map(|mut g| g.remove(&(w.namespace.clone(), w.name.clone())))
        .ok();
}

/// Writes the pod's kubeconfig for its own service account (see [`crate::credentials`]); falls
/// back to an anonymous one in the pod's directory.
fn service_account_kubeconfig_file(
    server: &str,
    pod_dir: &Path,
    pod: &Pod,
    volume_dirs: &BTreeMap<String, PathBuf>,
) -> PathBuf {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let token_dir = credentials::token_volume(pod).and_then(|name| volume_dirs.get(&name));
    let text =
        credentials::service_account_kubeconfig(server, namespace, token_dir.map(PathBuf::as_path));
    let path = pod_dir.join("kubeconfig");
    let written = std::fs::create_dir_all(pod_dir)
        .and_then(|()| std::fs::write(&path, text))
        .and_then(|()| {
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        });
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "failed to write the pod's kubeconfig");
    }
    path
}

/// What volumes are made of: the node's caches, and the tokens issued to its pods.
struct NodeLookup<'a> {
    caches: &'a Caches,
    tokens: Option<&'a Tokens>,
}

impl Lookup for NodeLookup<'_> {
    fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.caches.secret(namespace, name)
    }

    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.caches.config_map(namespace, name)
    }

    fn service_account_token(
        &self,
        pod: &Pod,
        source: &ServiceAccountTokenProjection,
    ) -> Result<Vec<u8>, String> {
        let Some(tokens) = self.tokens else {
            return Ok(b"sandbox".to_vec());
        };
        tokens
            .get(&TokenKey::of(pod, source))
            .map(String::into_bytes)
            .ok_or_else(|| "the service-account token is not issued yet".to_owned())
    }
}

/// Writes the pod's kubeconfig: the node's shared one, with the context namespace set to the
/// pod's namespace (an in-cluster client defaults to its own namespace) and the user named after
/// the pod's service account. Credentials stay the shared file's. Falls back to the shared file
/// when it cannot be read or written.
fn pod_kubeconfig(shared: &Path, pod_dir: &Path, pod: &Pod) -> PathBuf {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let rewrite = || -> Option<PathBuf> {
        let text = std::fs::read_to_string(shared).ok()?;
        let mut config: serde_yaml::Value = serde_yaml::from_str(&text).ok()?;
        let user = serde_yaml::Value::from(format!("system:serviceaccount:{ns}:{sa}"));
        let old_user = config["contexts"][0]["context"]["user"].clone();
        for context in config.get_mut("contexts")?.as_sequence_mut()? {
            if let Some(c) = context
                .get_mut("context")
                .and_then(serde_yaml::Value::as_mapping_mut)
            {
                c.insert("namespace".into(), ns.clone().into());
                c.insert("user".into(), user.clone());
            }
        }
        for entry in config.get_mut("users")?.as_sequence_mut()? {
            if entry.get("name") == Some(&old_user)
                && let Some(m) = entry.as_mapping_mut()
            {
                m.insert("name".into(), user.clone());
            }
        }
        let text = serde_yaml::to_string(&config).ok()?;
        std::fs::create_dir_all(pod_dir).ok()?;
        let path = pod_dir.join("kubeconfig");
        std::fs::write(&path, text).ok()?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .ok()?;
        Some(path)
    };
    rewrite().unwrap_or_else(|| shared.to_path_buf())
}

/// Where a pod with address `pod_ip` runs on `node`.
fn placement<'a>(node: &'a Node, pod_ip: &'a str) -> Placement<'a> {
    Placement {
        node_name: &node.node_name,
        host_ip: &node.host_ip,
        pod_ip,
    }
}

fn grace_of(pod: &Pod) -> Duration {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .map_or(Duration::from_secs(30), Duration::from_secs)
}

impl Worker {
    fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }

    fn register_groups(&self) {
        let groups: BTreeMap<String, i32> = self
            .slots
            .iter()
            .filter_map(|s| s.running.as_ref().map(|r| (s.spec.name.clone(), r.pgid)))
            .collect();
        if let Ok(mut g) = self.node.groups.lock() {
            g.insert(self.key(), groups);
        }
    }

    fn sync_volumes(&mut self, pod: &Pod) {
        let ip = self.ip.to_string();
        let mut error = None;
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some(dir) = self.volume_dirs.get(&v.name).cloned() else {
                continue;
            };
            let lookup = NodeLookup {
                caches: &self.node.caches,
                tokens: self.node.tokens.as_ref(),
            };
            match volume::desired(pod, &placement(&self.node, &ip), v, &lookup) {
                Ok(source) => {
                    if self.published.get(&v.name) == Some(&source) {
                        continue;
                    }
                    let written = match &source {
                        Source::Files(files) => volume::write_atomically(&dir, files).map(|_| ()),
                        Source::EmptyDir => std::fs::create_dir_all(&dir),
                        Source::HostPath(_) => Ok(()),
                    };
                    match written {
                        Ok(()) => {
                            self.published.insert(v.name.clone(), source);
                        }
                        Err(e) => error = Some(format!("failed to write volume {:?}: {e}", v.name)),
                    }
                }
                Err(e) => {
                    error = Some(format!(
                        "MountVolume.SetUp failed for volume {:?} : {e}",
                        v.name
                    ))
                }
            }
        }
        self.volumes_error = error;
    }

    /// Starts the containers whose time has come; returns whether it tried any.
    fn start_due(&mut self, pod: &Pod) -> bool {
        let now_i = Instant::now();
        let mut tried = false;
        for idx in 0..self.slots.len() {
            let slot = &self.slots[idx];
            if slot.running.is_some() || slot.done || slot.next_start.is_none_or(|t| t > now_i) {
                continue;
            }
            self.try_start(idx, pod);
            tried = true;
        }
        if tried {
            self.register_groups();
        }
        tried
    }

    fn try_start(&mut self, idx: usize, pod: &Pod) {
        let image = self.slots[idx].spec.image.clone().unwrap_or_default();
        let map = match &self.node.image_map {
            Some(file) => ImageMap::load(file),
            None => Ok(ImageMap::default()),
        };
        let program = match &map {
            Ok(m) => m.resolve(&image).map(Path::to_path_buf),
            Err(_) => None,
        };
        let slot = &mut self.slots[idx];
        let Some(program) = program else {
            slot.pull_failures += 1;
            let why = match (&map, &self.node.image_map) {
                (Err(e), _) => e.to_string(),
                (Ok(_), Some(file)) => {
                    format!("image is not in the sandbox image map {}", file.display())
                }
                (Ok(_), None) => "the sandbox has no image map".into(),
            };
            slot.state = if slot.pull_failures == 1 {
                State::Waiting {
                    reason: "ErrImagePull".into(),
                    message: format!("Failed to pull image {image:?}: {why}"),
                }
            } else {
                State::Waiting {
                    reason: "ImagePullBackOff".into(),
                    message: format!("Back-off pulling image {image:?}: {why}"),
                }
            };
            let delay = RETRY
                .saturating_mul(slot.pull_failures.min(15))
                .min(MAX_BACKOFF);
            slot.next_start = Some(Instant::now() + delay);
            return;
        };
        slot.pull_failures = 0;
        if let Some(e) = &self.volumes_error {
            slot.state = State::Waiting {
                reason: "ContainerCreating".into(),
                message: e.clone(),
            };
            slot.next_start = Some(Instant::now() + RETRY);
            return;
        }
        let ip = self.ip.to_string();
        let at = placement(&self.node, &ip);
        let mut env = match env::container_env(pod, &slot.spec, &at, &self.node.caches) {
            Ok(e) => e,
            Err(e) => {
                slot.state = State::Waiting {
                    reason: "CreateContainerConfigError".into(),
                    message: e,
                };
                slot.next_start = Some(Instant::now() + RETRY);
                return;
            }
        };
        let mounts = Mounts::of(&slot.spec, &self.volume_dirs);
        for v in env.values_mut() {
            *v = mounts.rewrite(v);
        }
        let command = slot.spec.command.clone().unwrap_or_default();
        let args = slot.spec.args.clone().unwrap_or_default();
        // The image's executable is the entrypoint: command[0] names it unless it is itself a
        // mapped executable; command[1..] and args follow.
        let (program, mut argv) = match command.split_first() {
            Some((first, rest)) => {
                let first_path = PathBuf::from(mounts.rewrite(&env::expand(first, &env)));
                let program = match &map {
                    Ok(m) if m.contains_executable(&first_path) => first_path,
                    _ => program,
                };
                (program, rest.to_vec())
            }
            None => (program, Vec::new()),
        };
        argv.extend(args);
        let argv: Vec<String> = argv
            .iter()
            .map(|a| mounts.rewrite(&env::expand(a, &env)))
            .collect();
        let dir = pod_dir(&self.node.state_dir, &self.namespace, &self.name);
        let cwd = match slot.spec.working_dir.as_deref().filter(|w| !w.is_empty()) {
            Some(w) => PathBuf::from(mounts.rewrite(w)),
            None => dir.clone(),
        };
        let _ = std::fs::create_dir_all(&dir);
        let mut full_env = process::base_env(&self.name, &self.kubeconfig);
        full_env.extend(env);
        let launch = Launch {
            program: program.clone(),
            args: argv,
            env: full_env,
            cwd,
            log: log_path(
                &self.node.state_dir,
                &self.namespace,
                &self.name,
                &slot.spec.name,
            ),
        };
        slot.generation += 1;
        let generation = slot.generation;
        let events = self.events.clone();
        let spawned = process::spawn(&launch, move |exit| {
            let _ = events.send(Event::Exited {
                idx,
                generation,
                exit,
            });
        });
        match spawned {
            Ok(running) => {
                tracing::info!(pod = %format!("{}/{}", self.namespace, self.name), container = %slot.spec.name, program = %program.display(), pid = running.pgid, "container started");
                slot.running = Some(running);
                slot.started_instant = Some(Instant::now());
                slot.program = Some(program);
                slot.state = State::Running { started_at: now() };
                slot.next_start = None;
                slot.readiness = Tracker::default();
                slot.liveness = Tracker::default();
                slot.startup = Tracker::default();
                slot.started = slot.spec.startup_probe.is_none();
                slot.ready = slot.started && slot.spec.readiness_probe.is_none();
                if slot.started {
                    self.spawn_probes(idx, &[ProbeKind::Readiness, ProbeKind::Liveness]);
                } else {
                    self.spawn_probes(idx, &[ProbeKind::Startup]);
                }
            }
            Err(e) => {
                slot.state = State::Waiting {
                    reason: "RunContainerError".into(),
                    message: format!(
                        "failed to start container {:?}: {}: {e}",
                        slot.spec.name,
                        program.display()
                    ),
                };
                slot.next_start = Some(Instant::now() + slot.backoff);
                slot.backoff = (slot.backoff * 2).min(MAX_BACKOFF);
            }
        }
    }

    fn spawn_probes(&mut self, idx: usize, kinds: &[ProbeKind]) {
        let slot = &mut self.slots[idx];
        let generation = slot.generation;
        let ip = self.ip.to_string();
        for kind in kinds {
            let kind = *kind;
            let probe = match kind {
                ProbeKind::Startup => slot.spec.startup_probe.clone(),
                ProbeKind::Readiness => slot.spec.readiness_probe.clone(),
                ProbeKind::Liveness => slot.spec.liveness_probe.clone(),
            };
            let Some(probe) = probe else { continue };
            let timing = Timing::of(&probe);
            let container = slot.spec.clone();
            let events = self.events.clone();
            let ip = ip.clone();
            slot.probes.push(tokio::spawn(async move {
                tokio::time::sleep(timing.initial_delay).await;
                let mut ticker = tokio::time::interval(timing.period);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticker.tick().await;
                    let result = probe::run(&probe, &container, &ip, timing.timeout).await;
                    let passed = result.is_ok();
                    let event = Event::Probe {
                        idx,
                        generation,
                        kind,
                        result,
                    };
                    // A startup probe ends with its first success.
                    if events.send(event).is_err() || (kind == ProbeKind::Startup && passed) {
                        break;
                    }
                }
            }));
        }
    }

    fn handle(&mut self, event: Event, pod: &Pod) {
        match event {
            Event::Exited {
                idx,
                generation,
                exit,
            } => {
                let Some(slot) = self.slots.get_mut(idx) else {
                    return;
                };
                if slot.generation != generation {
                    return;
                }
                slot.stop_probes();
                slot.running = None;
                slot.ready = false;
                let started_at = match &slot.state {
                    State::Running { started_at } => started_at.clone(),
                    _ => now(),
                };
                let terminated = State::Terminated {
                    exit,
                    reason: if exit.code == 0 {
                        "Completed".into()
                    } else {
                        "Error".into()
                    },
                    started_at,
                    finished_at: now(),
                };
                tracing::info!(pod = %format!("{}/{}", self.namespace, self.name), container = %slot.spec.name, code = exit.code, "container exited");
                let policy = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.restart_policy.clone())
                    .unwrap_or_else(|| "Always".into());
                let restart = match policy.as_str() {
                    "Never" => false,
                    "OnFailure" => exit.code != 0,
                    _ => true,
                };
                if !restart {
                    slot.state = terminated;
                    slot.done = true;
                    slot.next_start = None;
                } else {
                    if slot
                        .started_instant
                        .is_some_and(|s| s.elapsed() >= BACKOFF_RESET)
                    {
                        slot.backoff = INITIAL_BACKOFF;
                    }
                    let delay = slot.backoff;
                    slot.backoff = (slot.backoff * 2).min(MAX_BACKOFF);
                    slot.last_state = Some(terminated);
                    slot.restart_count += 1;
                    slot.state = State::Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: format!(
                            "back-off {}s restarting failed container={} pod={}_{}({})",
                            delay.as_secs(),
                            slot.spec.name,
                            self.name,
                            self.namespace,
                            self.uid
                        ),
                    };
                    slot.next_start = Some(Instant::now() + delay);
                }
                self.register_groups();
            }
            Event::Probe {
                idx,
                generation,
                kind,
                result,
            } => {
                let Some(slot) = self.slots.get_mut(idx) else {
                    return;
                };
                if slot.generation != generation || slot.running.is_none() {
                    return;
                }
                let probe = match kind {
                    ProbeKind::Startup => slot.spec.startup_probe.as_ref(),
                    ProbeKind::Readiness => slot.spec.readiness_probe.as_ref(),
                    ProbeKind::Liveness => slot.spec.liveness_probe.as_ref(),
                };
                let Some(timing) = probe.map(Timing::of) else {
                    return;
                };
                if let Err(message) = &result {
                    tracing::debug!(pod = %format!("{}/{}", self.namespace, self.name), container = %slot.spec.name, ?kind, %message, "probe failed");
                }
                let tracker = match kind {
                    ProbeKind::Startup => &mut slot.startup,
                    ProbeKind::Readiness => &mut slot.readiness,
                    ProbeKind::Liveness => &mut slot.liveness,
                };
                let verdict = tracker.record(result.is_ok(), &timing);
                match (kind, verdict) {
                    (ProbeKind::Readiness, Some(ready)) => slot.ready = ready,
                    (ProbeKind::Startup, _) if result.is_ok() => {
                        slot.started = true;
                        slot.ready = slot.spec.readiness_probe.is_none();
                        self.spawn_probes(idx, &[ProbeKind::Readiness, ProbeKind::Liveness]);
                    }
                    (ProbeKind::Startup | ProbeKind::Liveness, Some(false)) => {
                        tracing::info!(pod = %format!("{}/{}", self.namespace, self.name), container = %slot.spec.name, ?kind, "probe failed too often; restarting container");
                        slot.ready = false;
                        slot.stop_probes();
                        if let Some(r) = slot.running.as_mut() {
                            r.stop(grace_of(pod));
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Stops every container (SIGTERM, SIGKILL after `grace`) and waits for them to end.
    async fn terminate(&mut self, rx: &mut mpsc::UnboundedReceiver<Event>, grace: Duration) {
        for slot in &mut self.slots {
            slot.stop_probes();
            slot.done = true;
            if let Some(r) = slot.running.as_mut() {
                r.stop(grace);
            }
        }
        let deadline = Instant::now() + grace + Duration::from_secs(2);
        while self.slots.iter().any(|s| s.running.is_some()) {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(Event::Exited {
                    idx, generation, ..
                })) => {
                    if let Some(slot) = self.slots.get_mut(idx)
                        && slot.generation == generation
                    {
                        slot.running = None;
                    }
                }
                Ok(Some(Event::Probe { .. })) => {}
                Ok(None) | Err(_) => break,
            }
        }
        if let Ok(mut g) = self.node.groups.lock() {
            g.remove(&self.key());
        }
    }

    /// Removes the pod's volumes and kubeconfig (not its logs) once it is gone for good. Host
    /// paths are outside the pod's directory and stay.
    fn remove_files(&self) {
        if let Some(tokens) = &self.node.tokens {
            tokens.forget(&self.namespace, &self.name);
        }
        let dir = pod_dir(&self.node.state_dir, &self.namespace, &self.name);
        if let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), error = %e, "failed to remove the pod's files");
        }
    }

    /// Removes the pod object once its processes are gone, as the kubelet does.
    async fn finalize_deletion(&self) {
        let api: Api<Pod> = Api::namespaced(self.node.client.clone(), &self.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        if let Err(e) = api.delete(&self.name, &params).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 404)
        {
            tracing::warn!(pod = %format!("{}/{}", self.namespace, self.name), error = %e, "failed to remove the terminated pod");
        }
    }

    fn condition(&mut self, kind: &'static str, status: bool) -> String {
        let entry = self
            .transitions
            .entry(kind)
            .or_insert_with(|| (status, now()));
        if entry.0 != status {
            *entry = (status, now());
        }
        entry.1.clone()
    }

    fn status(&mut self) -> Value {
        let ip = self.ip.to_string();
        let all_ready = !self.slots.is_empty() && self.slots.iter().all(|s| s.ready);
        let unready: Vec<String> = self
            .slots
            .iter()
            .filter(|s| !s.ready)
            .map(|s| s.spec.name.clone())
            .collect();
        let all_done = !self.slots.is_empty() && self.slots.iter().all(|s| s.done);
        let ever_started = self.slots.iter().any(|s| s.generation > 0);
        let phase = if all_done {
            let ok = self
                .slots
                .iter()
                .all(|s| matches!(&s.state, State::Terminated { exit, .. } if exit.code == 0));
            if ok { "Succeeded" } else { "Failed" }
        } else if ever_started {
            "Running"
        } else {
            "Pending"
        };
        let scheduled = self.condition("PodScheduled", true);
        let initialized = self.condition("Initialized", true);
        let sandbox = self.condition("PodReadyToStartContainers", true);
        let containers_ready = self.condition("ContainersReady", all_ready);
        let ready = self.condition("Ready", all_ready);
        let unready_message = format!("containers with unready status: [{}]", unready.join(" "));
        let cond = |kind: &str, status: bool, time: &str| {
            let mut c = json!({"type": kind, "status": if status { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": time});
            if !status {
                c["reason"] = json!(if all_done {
                    "PodCompleted"
                } else {
                    "ContainersNotReady"
                });
                c["message"] = json!(unready_message);
            }
            c
        };
        let statuses: Vec<Value> = self
            .slots
            .iter()
            .map(|s| {
                let mut st = json!({
                    "name": s.spec.name,
                    "image": s.spec.image.clone().unwrap_or_default(),
                    "imageID": s.program.as_ref().map(|p| format!("process://{}", p.display())).unwrap_or_default(),
                    "ready": s.ready,
                    "started": s.running.is_some() && s.started,
                    "restartCount": s.restart_count,
                    "state": s.state.to_json(),
                    "lastState": s.last_state.as_ref().map_or(json!({}), State::to_json),
                });
                if let Some(r) = &s.running {
                    st["containerID"] = json!(format!("process://{}", r.pgid));
                }
                st
            })
            .collect();
        json!({
            "phase": phase,
            "conditions": [
                cond("PodReadyToStartContainers", true, &sandbox),
                cond("Initialized", true, &initialized),
                cond("Ready", all_ready, &ready),
                cond("ContainersReady", all_ready, &containers_ready),
                cond("PodScheduled", true, &scheduled),
            ],
            "hostIP": self.node.host_ip,
            "hostIPs": [{"ip": self.node.host_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.start_time,
            "containerStatuses": statuses,
        })
    }

    async fn report(&mut self, pod: &Pod) {
        let status = self.status();
        if self.last_status.as_ref() == Some(&status) {
            return;
        }
        let current = serde_json::to_value(&pod.status).unwrap_or(Value::Null);
        if current == status {
            self.last_status = Some(status);
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.node.client.clone(), &self.namespace);
        match api
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
        {
            Ok(_) => {
                self.last_status = Some(status);
                self.report_failed = false;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                self.report_failed = true;
                tracing::warn!(pod = %format!("{}/{}", self.namespace, self.name), error = %e, "failed to write pod status");
            }
        }
    }
}
