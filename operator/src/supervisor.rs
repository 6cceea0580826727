//! The health supervisor: per Initializer, a prober task (a dry-run AdmissionReview through the
//! API server every period) and an EndpointSlice watcher (zero ready endpoints removes the
//! configuration at once). Both feed the Initializer's [`Machine`] and carry out its actions
//! through the [`Registrar`], under one lock per Initializer so that registration and removal
//! never race. The reconciler calls [`Supervisor::sync`] with the latest target; the supervisor
//! writes the status itself (under the same lock, so writes never reorder) on every sync and on
//! every transition, so the status follows within one API call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use initializer_crds::InitializerStatus;
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};

use crate::apply::{self, Registrar, WebhookRegistrar};
use crate::error::Result;
use crate::health::{Action, Cause, HealthConfig, Input, Machine, Snapshot};
use crate::metrics::Metrics;
use crate::probe::{self, ProbeTarget};
use crate::status::{self, Observation, ProbeRecord, WorkloadObservation};

/// What the reconciler wants supervised for one Initializer.
#[derive(Clone, Debug)]
pub struct Target {
    /// The Initializer's name.
    pub initializer: String,
    /// Reference to the Initializer, for Events.
    pub reference: ObjectReference,
    /// Namespace of the workload.
    pub namespace: String,
    /// Name of the Service.
    pub service: String,
    /// What the probe pretends to create.
    pub probe: ProbeTarget,
    /// Time between probes.
    pub period: Duration,
    /// A slower probe fails.
    pub budget: Duration,
    /// Thresholds and hold-down.
    pub health: HealthConfig,
    /// The configuration to register.
    pub webhook: MutatingWebhookConfiguration,
    /// Whether the Deployment is available.
    pub available: bool,
    /// `spec.suspend`.
    pub suspended: bool,
    /// `metadata.generation` of the Initializer.
    pub generation: Option<i64>,
    /// The Deployment's figures.
    pub workload: WorkloadObservation,
    /// Expiry of the serving certificate.
    pub certificate_not_after: Option<Timestamp>,
    /// The status stored on the Initializer when the reconcile read it.
    pub stored_status: Option<InitializerStatus>,
}

/// Namespace, Service, period, budget and probe target: what the tasks were started with.
type TaskKey = (String, String, Duration, Duration, ProbeTarget);

impl Target {
    fn configuration(&self) -> String {
        self.webhook.name_any()
    }

    /// What, when changed, needs the tasks restarted.
    fn task_key(&self) -> TaskKey {
        (
            self.namespace.clone(),
            self.service.clone(),
            self.period,
            self.budget,
            self.probe.clone(),
        )
    }
}

/// What the reconciler needs for the status.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Whether the configuration is registered now.
    pub registered: bool,
    /// The health machine.
    pub snapshot: Snapshot,
    /// The last probe.
    pub probe: Option<ProbeRecord>,
    /// The status as last computed.
    pub status: InitializerStatus,
}

struct EntryState {
    machine: Machine,
    target: Target,
    last_probe: Option<ProbeRecord>,
    applied: Option<MutatingWebhookConfiguration>,
    written: Option<InitializerStatus>,
}

struct Entry {
    state: tokio::sync::Mutex<EntryState>,
    tasks: Mutex<(Option<TaskKey>, Vec<AbortHandle>)>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.get_mut() {
            for t in &tasks.1 {
                t.abort();
            }
        }
    }
}

struct Inner {
    client: Client,
    registrar: WebhookRegistrar,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    probe_user: String,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
}

/// Supervises the health of every Initializer this replica leads.
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor probing as `probe_user` (shown to initializers as the requesting user).
    pub fn new(
        client: Client,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        probe_user: String,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                registrar: WebhookRegistrar::new(client.clone()),
                client,
                recorder,
                metrics,
                probe_user,
                entries: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        // A poisoned map only means a panic elsewhere; the map itself is still consistent.
        self.inner
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops supervising `initializer` (deleted or refused); its configuration is left to the
    /// caller.
    pub fn stop(&self, initializer: &str) {
        self.entries().remove(initializer);
    }

    /// Stops everything (this replica lost the lead).
    pub fn stop_all(&self) {
        self.entries().clear();
    }

    /// Stops supervising every Initializer not named in `existing` (deleted while the
    /// controller could not see it).
    pub fn retain(&self, existing: &[String]) {
        self.entries().retain(|name, _| existing.contains(name));
    }

    /// Names of the supervised Initializers.
    pub fn supervised(&self) -> Vec<String> {
        self.entries().keys().cloned().collect()
    }

    /// Updates the target of one Initializer (starting its tasks the first time), feeds the
    /// workload's availability and the suspend flag to its machine, carries out the result, and
    /// makes the cluster agree with the machine (re-applying a changed configuration, removing
    /// one that must not exist).
    pub async fn sync(&self, target: Target) -> Result<Report> {
        let configuration = target.configuration();
        let existing = self.entries().get(&target.initializer).cloned();
        let entry = match existing {
            Some(entry) => entry,
            None => {
                let mut machine = Machine::new(target.health);
                // After an operator restart the configuration may already be registered: adopt
                // it so failures remove it, instead of removing a healthy one.
                if self.inner.registrar.is_registered(&configuration).await? {
                    machine.adopt_registered(Instant::now());
                }
                let entry = Arc::new(Entry {
                    state: tokio::sync::Mutex::new(EntryState {
                        machine,
                        target: target.clone(),
                        last_probe: None,
                        applied: None,
                        written: None,
                    }),
                    tasks: Mutex::new((None, Vec::new())),
                });
                self.entries()
                    .entry(target.initializer.clone())
                    .or_insert(entry)
                    .clone()
            }
        };
        self.ensure_tasks(&entry, &target);
        let mut st = entry.state.lock().await;
        st.machine.set_config(target.health);
        // The reconciler just read the stored status: compare with that, so that anything
        // written by others (a deploy failure in `details.lastError`) is replaced.
        st.written = target.stored_status.clone();
        st.target = target.clone();
        let now = Instant::now();
        for input in [
            Input::Suspend(target.suspended),
            Input::Available(target.available),
        ] {
            let action = st.machine.observe(input, now);
            self.act(&mut st, action).await;
        }
        let exists = self.inner.registrar.is_registered(&configuration).await?;
        if st.machine.is_registered() {
            if !exists || st.applied.as_ref() != Some(&target.webhook) {
                if let Err(e) = self.inner.registrar.register(&target.webhook).await {
                    st.machine.registration_failed();
                    return Err(e);
                }
                st.applied = Some(target.webhook.clone());
            }
        } else if exists {
            self.inner.registrar.deregister(&configuration).await?;
            st.applied = None;
        }
        let status = self.write_status(&mut st).await?;
        Ok(Report {
            registered: st.machine.is_registered(),
            snapshot: st.machine.snapshot(),
            probe: st.last_probe.clone(),
            status,
        })
    }

    /// Computes the status from everything known and writes it unless only the probe figures
    /// changed and were written recently.
    async fn write_status(&self, st: &mut EntryState) -> Result<InitializerStatus> {
        let target = &st.target;
        let previous = st.written.as_ref().or(target.stored_status.as_ref());
        let configuration = target.configuration();
        let status = status::compute(&Observation {
            generation: target.generation,
            refusals: &[],
            suspended: target.suspended,
            workload: Some(target.workload.clone()),
            health: Some(st.machine.snapshot()),
            probe: st.last_probe.clone(),
            registered: st.machine.is_registered(),
            configuration_name: &configuration,
            certificate_not_after: target.certificate_not_after,
            now: Timestamp::now(),
            previous,
        });
        if !status::only_probe_figures_changed(previous, &status, Timestamp::now()) {
            apply::apply_status(&self.inner.client, &target.initializer, &status).await?;
            st.written = Some(status.clone());
        }
        Ok(status)
    }

    async fn refresh_status(&self, st: &mut EntryState) {
        if let Err(e) = self.write_status(st).await {
            warn!(initializer = %st.target.initializer, error = %e, "failed to write status");
        }
    }

    fn ensure_tasks(&self, entry: &Arc<Entry>, target: &Target) {
        let key = target.task_key();
        let mut tasks = entry
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tasks.0.as_ref() == Some(&key) {
            return;
        }
        for t in tasks.1.drain(..) {
            t.abort();
        }
        let weak = Arc::downgrade(entry);
        let prober = tokio::spawn(prober(self.clone(), weak.clone(), target.clone()));
        let watcher = tokio::spawn(endpoints(self.clone(), weak, target.clone()));
        tasks.1 = vec![prober.abort_handle(), watcher.abort_handle()];
        tasks.0 = Some(key);
    }

    async fn publish(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if let Err(e) = self.inner.recorder.publish(&event, reference).await {
            warn!(error = %e, reason, "failed to publish event");
        }
    }

    async fn act(&self, st: &mut EntryState, action: Action) {
        let name = st.target.initializer.clone();
        let configuration = st.target.configuration();
        match action {
            Action::None => {}
            Action::Register => {
                match self.inner.registrar.register(&st.target.webhook).await {
                    Ok(()) => {
                        st.applied = Some(st.target.webhook.clone());
                        self.inner.metrics.registered(&name);
                        info!(initializer = %name, %configuration, "registered");
                        self.publish(
                        &st.target.reference,
                        EventType::Normal,
                        "Registered",
                        format!("registered {configuration}: the initializer is available and answering"),
                    )
                    .await;
                    }
                    Err(e) => {
                        warn!(initializer = %name, error = %e, "registration failed; retrying on the next good probe");
                        st.machine.registration_failed();
                    }
                }
            }
            Action::Deregister { cause, since } => {
                let mut result = self.inner.registrar.deregister(&configuration).await;
                for _ in 0..3 {
                    if result.is_ok() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    result = self.inner.registrar.deregister(&configuration).await;
                }
                let took = since.elapsed();
                match result {
                    Ok(_) => {
                        st.applied = None;
                        let measured = (cause != Cause::Suspended).then_some(took);
                        self.inner
                            .metrics
                            .deregistered(&name, cause.reason(), measured);
                        info!(initializer = %name, %configuration, cause = cause.reason(), took_ms = took.as_millis() as u64, "deregistered");
                        let (type_, note) = match cause {
                            Cause::Suspended => (
                                EventType::Normal,
                                format!("removed {configuration}: spec.suspend is true"),
                            ),
                            Cause::ProbesFailed => (
                                EventType::Warning,
                                format!(
                                    "removed {configuration} (fail open) {} ms after the first failed probe: the initializer stopped answering",
                                    took.as_millis()
                                ),
                            ),
                            Cause::NoReadyEndpoints => (
                                EventType::Warning,
                                format!(
                                    "removed {configuration} (fail open) {} ms after the Service lost its last ready endpoint",
                                    took.as_millis()
                                ),
                            ),
                        };
                        self.publish(&st.target.reference, type_, "Deregistered", note)
                            .await;
                    }
                    Err(e) => {
                        // The next sync sees the configuration still there while the machine
                        // says unregistered, and deletes it again.
                        warn!(initializer = %name, error = %e, "failed to deregister");
                    }
                }
            }
        }
    }

    async fn observe(&self, entry: &Entry, input: Input, always_write: bool) {
        let mut st = entry.state.lock().await;
        let before = st.machine.state();
        let action = st.machine.observe(input, Instant::now());
        self.act(&mut st, action).await;
        if always_write || st.machine.state() != before {
            self.refresh_status(&mut st).await;
        }
    }
}

async fn prober(sup: Supervisor, entry: std::sync::Weak<Entry>, target: Target) {
    let mut ticker = tokio::time::interval(target.period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_ok = None;
    loop {
        ticker.tick().await;
        let outcome = probe::probe(
            &sup.inner.client,
            &target.namespace,
            &target.service,
            &target.probe,
            &sup.inner.probe_user,
            target.budget,
        )
        .await;
        let Some(entry) = entry.upgrade() else {
            return;
        };
        sup.inner
            .metrics
            .probe(&target.initializer, outcome.latency, outcome.ok);
        debug!(initializer = %target.initializer, ok = outcome.ok, latency_ms = outcome.latency.as_millis() as u64, message = %outcome.message, "probe");
        {
            let mut st = entry.state.lock().await;
            st.last_probe = Some(ProbeRecord {
                at: Timestamp::now(),
                latency: outcome.latency,
                ok: outcome.ok,
                message: outcome.message.clone(),
            });
        }
        let input = if outcome.ok {
            Input::ProbeSucceeded
        } else {
            Input::ProbeFailed
        };
        let flipped = last_ok != Some(outcome.ok);
        last_ok = Some(outcome.ok);
        sup.observe(&entry, input, flipped).await;
    }
}

/// Ready endpoints in a slice; an endpoint without a `ready` condition counts as ready, as the
/// EndpointSlice API says consumers should treat an unknown state.
pub fn ready_endpoints(slice: &EndpointSlice) -> u32 {
    let ready = slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .count();
    u32::try_from(ready).unwrap_or(u32::MAX)
}

async fn endpoints(sup: Supervisor, entry: std::sync::Weak<Entry>, target: Target) {
    let api: Api<EndpointSlice> = Api::namespaced(sup.inner.client.clone(), &target.namespace);
    let config = watcher::Config::default()
        .labels(&format!("kubernetes.io/service-name={}", target.service));
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut slices: HashMap<String, u32> = HashMap::new();
    let mut initial: Option<HashMap<String, u32>> = None;
    let mut listed = false;
    let mut last: Option<u32> = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => initial = Some(HashMap::new()),
            Ok(watcher::Event::InitApply(s)) => {
                if let Some(buffer) = initial.as_mut() {
                    buffer.insert(s.name_any(), ready_endpoints(&s));
                }
            }
            Ok(watcher::Event::InitDone) => {
                slices = initial.take().unwrap_or_default();
                listed = true;
            }
            Ok(watcher::Event::Apply(s)) => {
                slices.insert(s.name_any(), ready_endpoints(&s));
            }
            Ok(watcher::Event::Delete(s)) => {
                slices.remove(&s.name_any());
            }
            Err(e) => {
                warn!(initializer = %target.initializer, error = %e, "endpoint watch failed");
                continue;
            }
        }
        if !listed {
            continue;
        }
        let ready: u32 = slices.values().sum();
        if last == Some(ready) {
            continue;
        }
        last = Some(ready);
        let Some(entry) = entry.upgrade() else {
            return;
        };
        debug!(initializer = %target.initializer, ready, "ready endpoints");
        sup.observe(&entry, Input::Endpoints(ready), ready == 0)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};

    fn endpoint(ready: Option<bool>) -> Endpoint {
        Endpoint {
            addresses: vec!["127.0.0.2".into()],
            conditions: Some(EndpointConditions {
                ready,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_endpoints_not_marked_unready_count_as_ready() {
        let slice = EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: vec![endpoint(Some(true)), endpoint(None), endpoint(Some(false))],
            ..Default::default()
        };
        assert_eq!(ready_endpoints(&slice), 2);
        assert_eq!(ready_endpoints(&EndpointSlice::default()), 0);
    }
}
