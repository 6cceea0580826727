//! The pod worker, the process supervisor: starts each container's executable, runs its
//! probes, restarts it (see `restart.rs`), reports the status `status.rs` renders, and stops
//! the processes and removes the pod object when the pod goes.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::files::{self, NodeLookup, log_path, pod_dir};
use super::launch::{self, Entrypoint};
use super::probes::{self, ProbeAction, ProbeKind};
use super::restart::{self, Backoff, RETRY, deletion_grace, grace_of};
use super::status::{self, ContainerView, PodView, State, Transitions};
use super::{Node, SHUTDOWN_GRACE};
use crate::clock;
use crate::env::{self, Placement};
use crate::imagemap::ImageMap;
use crate::probe::{self, Timing, Tracker};
use crate::process::{self, Exit, Launch, Running};
use crate::user::{self, RunAs};
use crate::volume::{self, Mounts, Source};

/// What the worker tracks of one container across its restarts: its process, state, probes
/// and backoff.
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
    backoff: Backoff,
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
            state: State::creating(""),
            last_state: None,
            restart_count: 0,
            ready: false,
            readiness: Tracker::default(),
            liveness: Tracker::default(),
            startup: Tracker::default(),
            started: false,
            probes: Vec::new(),
            next_start: Some(Instant::now()),
            backoff: Backoff::default(),
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

impl Event {
    /// The container (its index) and the run of it the event is about.
    fn run(&self) -> (usize, u64) {
        match self {
            Event::Exited {
                idx, generation, ..
            }
            | Event::Probe {
                idx, generation, ..
            } => (*idx, *generation),
        }
    }
}

/// Container `idx` if an event of its run `generation` is about its current run: an event
/// from an earlier run arrives late and is dropped.
fn current_run(slots: &mut [Slot], idx: usize, generation: u64) -> Option<&mut Slot> {
    slots
        .get_mut(idx)
        .filter(|slot| slot.generation == generation)
}

/// One pod's supervisor: its containers, its files, and what it last reported.
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
    /// The pod's kubeconfig, or why it could not be written (its containers then wait).
    kubeconfig: Result<PathBuf, String>,
    /// Who owns the pod's files (`None`: the node, which runs the pod as itself).
    owner: Option<RunAs>,
    start_time: String,
    transitions: Transitions,
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
    let dir = pod_dir(&node.pods_root, &namespace, &name);
    let volume_dirs = files::volume_dirs(&pod, &dir);
    let owner = user::pod_owner(node.run_as_others, &pod);
    let kubeconfig = files::create_pod_dir(&dir, owner)
        .map_err(|e| format!("failed to create the pod's directory: {e}"))
        .and_then(|()| files::kubeconfig(&node.credentials, &dir, &pod, &volume_dirs, owner));
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
        owner,
        start_time: clock::api_now(),
        transitions: Transitions::default(),
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
            w.terminate(&mut rx, deletion_grace(&pod)).await;
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
        let now = Instant::now();
        let next_start = w
            .slots
            .iter()
            .filter(|s| s.running.is_none() && !s.done)
            .filter_map(|s| s.next_start)
            .min();
        let next_refresh = node.tokens.as_ref().and_then(|t| t.next_refresh(&pod));
        let sleep = restart::wake_after(
            next_start.map(|at| at.saturating_duration_since(now)),
            next_refresh.map(|at| at.saturating_duration_since(now)),
            w.report_failed,
            w.volumes_error.is_some(),
        );
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

/// Where a pod with address `pod_ip` runs on `node`.
fn placement<'a>(node: &'a Node, pod_ip: &'a str) -> Placement<'a> {
    Placement {
        node_name: &node.node_name,
        host_ip: &node.host_ip,
        pod_ip,
    }
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
                    let owner = self.owner;
                    let written = match &source {
                        Source::Files(files) => {
                            volume::write_atomically_as(&dir, files, owner).map(|_| ())
                        }
                        // The pod's to write in.
                        Source::EmptyDir => std::fs::create_dir_all(&dir).and_then(|()| {
                            owner.map_or(Ok(()), |o| {
                                std::os::unix::fs::lchown(&dir, Some(o.uid), Some(o.gid))
                            })
                        }),
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
        let images = match &self.node.image_map {
            Some(file) => ImageMap::load(file),
            None => Ok(ImageMap::default()),
        };
        let resolved = match &images {
            Ok(m) => m.resolve(&image).map(|p| (m, p.to_path_buf())),
            Err(_) => None,
        };
        let slot = &mut self.slots[idx];
        let Some((map, program)) = resolved else {
            slot.pull_failures += 1;
            let why = launch::unmapped(&images, self.node.image_map.as_deref());
            slot.state = State::image_missing(&image, &why, slot.pull_failures);
            slot.next_start = Some(Instant::now() + restart::image_retry(slot.pull_failures));
            return;
        };
        slot.pull_failures = 0;
        if let Some(e) = &self.volumes_error {
            slot.state = State::creating(e.clone());
            slot.next_start = Some(Instant::now() + RETRY);
            return;
        }
        let run_as = match user::container_user(self.node.run_as_others, pod, &slot.spec) {
            Ok(run_as) => run_as,
            Err(e) => {
                slot.state = State::config_error(e);
                slot.next_start = Some(Instant::now() + RETRY);
                return;
            }
        };
        let kubeconfig = match &self.kubeconfig {
            Ok(path) => path.clone(),
            Err(e) => {
                slot.state = State::config_error(e.clone());
                slot.next_start = Some(Instant::now() + RETRY);
                return;
            }
        };
        let ip = self.ip.to_string();
        let at = placement(&self.node, &ip);
        let env = match env::container_env(pod, &slot.spec, &at, &self.node.caches) {
            Ok(e) => e,
            Err(e) => {
                slot.state = State::config_error(e);
                slot.next_start = Some(Instant::now() + RETRY);
                return;
            }
        };
        let mounts = Mounts::of(&slot.spec, &self.volume_dirs);
        let env = launch::mounted_env(env, &mounts);
        let dir = pod_dir(&self.node.pods_root, &self.namespace, &self.name);
        let Entrypoint { program, args, cwd } =
            launch::entrypoint(&slot.spec, program, map, &env, &mounts, &dir);
        // The pod's own variables come last and win, `KUBECONFIG` included: a pod may name
        // another file, but it runs as its own user, who can read no credentials of the node.
        let mut full_env = process::base_env(&self.name, &kubeconfig, &dir);
        full_env.extend(env);
        let to_run = Launch {
            program: program.clone(),
            args,
            env: full_env,
            cwd,
            log: log_path(
                &self.node.state_dir,
                &self.namespace,
                &self.name,
                &slot.spec.name,
            ),
            user: run_as,
        };
        slot.generation += 1;
        let generation = slot.generation;
        let events = self.events.clone();
        let spawned = process::spawn(&to_run, move |exit| {
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
                slot.state = State::Running {
                    started_at: clock::api_now(),
                };
                slot.next_start = None;
                slot.readiness = Tracker::default();
                slot.liveness = Tracker::default();
                slot.startup = Tracker::default();
                slot.started = slot.spec.startup_probe.is_none();
                slot.ready = slot.started && slot.spec.readiness_probe.is_none();
                if slot.started {
                    self.spawn_probes(idx, &ProbeKind::AFTER_START);
                } else {
                    self.spawn_probes(idx, &[ProbeKind::Startup]);
                }
            }
            Err(e) => {
                slot.state = State::start_failed(&slot.spec.name, &program, &e.to_string());
                slot.next_start = Some(Instant::now() + slot.backoff.next_delay());
            }
        }
    }

    fn spawn_probes(&mut self, idx: usize, kinds: &[ProbeKind]) {
        let slot = &mut self.slots[idx];
        let generation = slot.generation;
        let ip = self.ip.to_string();
        for kind in kinds {
            let kind = *kind;
            let Some(probe) = kind.of(&slot.spec).cloned() else {
                continue;
            };
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
                    if events.send(event).is_err() || (kind.ends_on_success() && passed) {
                        break;
                    }
                }
            }));
        }
    }

    fn handle(&mut self, event: Event, pod: &Pod) {
        let (idx, generation) = event.run();
        let Some(slot) = current_run(&mut self.slots, idx, generation) else {
            return;
        };
        match event {
            Event::Exited { exit, .. } => {
                slot.stop_probes();
                slot.running = None;
                slot.ready = false;
                let started_at = match &slot.state {
                    State::Running { started_at } => started_at.clone(),
                    _ => clock::api_now(),
                };
                let terminated = State::terminated(exit, started_at, clock::api_now());
                tracing::info!(pod = %format!("{}/{}", self.namespace, self.name), container = %slot.spec.name, code = exit.code, "container exited");
                if restart::restarts(pod, exit) {
                    if let Some(started) = slot.started_instant {
                        slot.backoff.ran_for(started.elapsed());
                    }
                    let delay = slot.backoff.next_delay();
                    slot.last_state = Some(terminated);
                    slot.restart_count += 1;
                    slot.state = State::crash_loop(
                        delay,
                        &slot.spec.name,
                        &self.name,
                        &self.namespace,
                        &self.uid,
                    );
                    slot.next_start = Some(Instant::now() + delay);
                } else {
                    slot.state = terminated;
                    slot.done = true;
                    slot.next_start = None;
                }
                self.register_groups();
            }
            Event::Probe { kind, result, .. } => {
                if slot.running.is_none() {
                    return;
                }
                let Some(timing) = kind.of(&slot.spec).map(Timing::of) else {
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
                let passed = result.is_ok();
                let verdict = tracker.record(passed, &timing);
                match probes::action(kind, passed, verdict) {
                    ProbeAction::Ready(ready) => slot.ready = ready,
                    ProbeAction::Started => {
                        slot.started = true;
                        slot.ready = slot.spec.readiness_probe.is_none();
                        self.spawn_probes(idx, &ProbeKind::AFTER_START);
                    }
                    ProbeAction::Restart => {
                        tracing::info!(pod = %format!("{}/{}", self.namespace, self.name), container = %slot.spec.name, ?kind, "probe failed too often; restarting container");
                        slot.ready = false;
                        slot.stop_probes();
                        if let Some(r) = slot.running.as_mut() {
                            r.stop(grace_of(pod));
                        }
                    }
                    ProbeAction::Keep => {}
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
                    if let Some(slot) = current_run(&mut self.slots, idx, generation) {
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
        let dir = pod_dir(&self.node.pods_root, &self.namespace, &self.name);
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

    /// The pod's status now, from its containers' slots.
    fn status(&mut self) -> Value {
        let pod_ip = self.ip.to_string();
        let containers = self
            .slots
            .iter()
            .map(|s| ContainerView {
                name: &s.spec.name,
                image: s.spec.image.as_deref().unwrap_or_default(),
                program: s.program.as_deref(),
                ready: s.ready,
                started: s.running.is_some() && s.started,
                restart_count: s.restart_count,
                state: &s.state,
                last_state: s.last_state.as_ref(),
                pgid: s.running.as_ref().map(|r| r.pgid),
                done: s.done,
                ever_started: s.generation > 0,
            })
            .collect();
        let view = PodView {
            host_ip: &self.node.host_ip,
            pod_ip: &pod_ip,
            start_time: &self.start_time,
            containers,
        };
        status::render(&view, &mut self.transitions, &clock::api_now())
    }

    /// Writes the pod's status when it differs from what the API and the last report hold.
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
