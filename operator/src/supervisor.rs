//! The health supervisor: per Initializer, a prober task (a dry-run AdmissionReview to every
//! ready endpoint, as the API server calls a webhook, as often as the health machine asks) and an
//! endpoint watcher (it hands the prober the ready endpoints; zero ready endpoints removes
//! the configuration at once), fed by one EndpointSlice watch per namespace. Both feed the Initializer's [`Machine`]; after
//! every input the supervisor converges the cluster on what the machine wants (the
//! configuration registered, degraded or absent; the fallback policy in force or not), under one
//! lock per Initializer so that registration, degradation and removal never race. A step out of
//! the path waits until the fallback, if any, is in force, so that what it enforces never has a
//! gap. After a fail-open window it counts the objects that slipped through
//! ([`crate::missed`]). The reconciler calls [`Supervisor::sync`] with the latest
//! [`Supervision`]. The supervisor is the only writer of an Initializer's status: on every sync
//! and every transition (under the same lock, so writes never reorder), and for the reconciler
//! when it refuses a spec, leaves someone else's object alone or fails to deploy
//! ([`Supervisor::report_unsupervised`], [`Supervisor::report_failure`]); the failure is an
//! input of [`status::compute`], so no write drops another's `details.lastError`.
//!
//! The tasks live in `tasks`, the shared EndpointSlice watches in `slices`, the fallback's
//! bookkeeping in `fallback`, and the pure comparisons with the live configuration in `drift`.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use initializer_crds::constants::{INITIALIZER_LABEL, RELEASED_OBJECTS_DETAIL};
use initializer_crds::{
    AnnotationGate, Initializer, InitializerStatus, InterceptRule, MissedInitializations, Outage,
};
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::DynamicObject;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::apply::legacy::{Canary, InitializerConfigurationRegistrar};
use crate::apply::{self, FallbackCheck, Registrar, WebhookRegistrar};
use crate::build::{self, FallbackPolicy};
use crate::error::{Error, Result};
use crate::health::{Action, Cause, HealthConfig, Input, Machine, State};
use crate::lag::LagMeter;
use crate::leader::Leadership;
use crate::metrics::{InitializerGauges, Metrics};
use crate::missed;
use crate::pending::Served;
use crate::probe::{Connector, ProbeTarget};
use crate::status::{self, Observation, ProbeRecord, WorkloadObservation};
use crate::validate::Refusal;
use crate::watchdog::Watchdog;

/// How long after the fallback policy and binding are created the API server enforces them:
/// kube-apiserver reloads admission policies on a one-second tick once its informers have seen
/// them (`policyRefreshInterval` in k8s.io/apiserver), plus margin.
pub const FALLBACK_SETTLE: Duration = Duration::from_millis(1200);
/// Smallest gap between two probes, so that an initializer refusing connections at once is
/// probed again at once without spinning.
pub const PROBE_SPACING: Duration = Duration::from_millis(50);
/// Longest any one API call made under an Initializer's lock may take: a hung call must not
/// hold the lock (and with it every probe, registration and removal) for longer.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// What a prober's step may take beyond its probe's budget before it counts as wedged: waiting
/// for the Initializer's lock and converging, a handful of calls of at most [`CALL_TIMEOUT`].
const PROBER_STEP_SLACK: Duration = Duration::from_secs(60);
/// First delay before retrying a failed removal; doubles up to [`MAX_REMOVAL_RETRY`].
const FIRST_REMOVAL_RETRY: Duration = Duration::from_millis(100);
/// Longest delay between two attempts to remove a configuration that must go.
const MAX_REMOVAL_RETRY: Duration = Duration::from_secs(5);
/// Creates may land this long after the window closes (an API server still calling the old
/// configuration); the count waits for them.
const WINDOW_TAIL: Duration = Duration::from_secs(1);

/// What the reconciler wants supervised for one Initializer.
#[derive(Clone, Debug)]
pub struct Supervision {
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
    /// The fallback to keep in force while the initializer is out of the path.
    pub fallback: Option<FallbackPolicy>,
    /// The rules, for counting missed initializations.
    pub rules: Vec<InterceptRule>,
    /// The annotation gate, for counting missed initializations.
    pub gate: Option<AnnotationGate>,
    /// The webhook's timeout.
    pub timeout: Duration,
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
    /// The Initializer's resourceVersion when the reconcile read it: the next status write is
    /// made onto it ([`apply::apply_status`]), unless this replica's own writes moved past it.
    pub stored_version: Option<String>,
    /// With `backend: InitializerConfiguration`: what is registered instead of
    /// [`Supervision::webhook`] (which then only names and labels the configuration), the
    /// canary the prober creates, and what a deregistration releases.
    pub legacy: Option<LegacySupervision>,
    /// The keys the initializer's marks are checked with when missed initializations are
    /// counted ([`crate::tls::mark_keys`]).
    pub mark_keys: initializer_mark::Keys,
}

/// What the `InitializerConfiguration` backend supervises beyond the webhook's.
#[derive(Clone, Debug, PartialEq)]
pub struct LegacySupervision {
    /// The configuration to register.
    pub configuration: DynamicObject,
    /// The end-to-end probe's canary.
    pub canary: Canary,
    /// The resources the rules reach: where objects pending on the name are looked for when
    /// the configuration is removed.
    pub reached: Vec<Served>,
}

/// What the cluster holds under the configuration's name.
enum Live {
    /// Nothing.
    Absent,
    /// Someone else's object.
    NotOurs,
    /// Ours: whether it is degraded, and whether someone changed what the operator set in it
    /// (compared with the configuration the given presence wants).
    Ours {
        degraded: bool,
        webhook: Option<Box<MutatingWebhookConfiguration>>,
        legacy: Option<Box<DynamicObject>>,
    },
}

/// Namespace, Service, budget, probe target, `caBundle` and canary: what the tasks were
/// started with.
type TaskKey = (
    String,
    String,
    Duration,
    ProbeTarget,
    Vec<u8>,
    Option<Canary>,
);

/// The ready endpoints the prober dials: `None` until the endpoint watch has listed them.
type ReadyEndpoints = Option<Vec<SocketAddr>>;

impl Supervision {
    fn configuration(&self) -> String {
        self.webhook.name_any()
    }

    /// The kind of the configuration this backend registers.
    fn configuration_kind(&self) -> &'static str {
        if self.legacy.is_some() {
            "InitializerConfiguration"
        } else {
            "MutatingWebhookConfiguration"
        }
    }

    /// The value of the Initializer label the configuration carries.
    fn label(&self) -> String {
        self.webhook
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(INITIALIZER_LABEL))
            .cloned()
            .unwrap_or_default()
    }

    /// Under `failurePolicy: Fail`, how soon a hung initializer is taken out of the path: at the
    /// first failed probe (a period and the budget), and at the failure threshold.
    fn fail_closed_bounds(&self) -> Option<status::FailClosedBounds> {
        let fail = self
            .webhook
            .webhooks
            .iter()
            .flatten()
            .any(|w| w.failure_policy.as_deref() == Some("Fail"));
        fail.then(|| status::FailClosedBounds {
            degraded_within: self.period + self.budget,
            removed_within: self.period * self.health.failure_threshold + self.budget,
        })
    }

    /// The configuration to hold for `presence`.
    fn desired(&self, presence: Presence) -> Option<MutatingWebhookConfiguration> {
        match presence {
            Presence::Normal => Some(self.webhook.clone()),
            Presence::Degraded => Some(build::degraded(&self.webhook)),
            Presence::Absent => None,
        }
    }

    /// What, when changed, needs the tasks restarted.
    fn task_key(&self) -> TaskKey {
        (
            self.namespace.clone(),
            self.service.clone(),
            self.budget,
            self.probe.clone(),
            self.ca_bundle(),
            self.legacy.as_ref().map(|l| l.canary.clone()),
        )
    }

    /// The `caBundle` the API server verifies the initializer's certificate with.
    fn ca_bundle(&self) -> Vec<u8> {
        self.webhook
            .webhooks
            .iter()
            .flatten()
            .next()
            .and_then(|w| w.client_config.ca_bundle.as_ref())
            .map(|b| b.0.clone())
            .unwrap_or_default()
    }
}

/// What a sync leaves behind: whether the configuration is registered now (the reconciler's
/// next look depends on it) and the status as last computed.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Whether the configuration is registered now.
    pub registered: bool,
    /// The status as last computed (and written, unless only probe figures changed).
    pub status: InitializerStatus,
}

/// What the cluster holds for one Initializer's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// No configuration.
    Absent,
    /// Registered with the spec's values.
    Normal,
    /// Registered degraded: `failurePolicy: Ignore`, short timeout.
    Degraded,
}

impl Presence {
    fn of(state: State) -> Self {
        match state {
            State::Registered => Presence::Normal,
            State::Degraded => Presence::Degraded,
            State::Waiting | State::Unresponsive | State::Suspended => Presence::Absent,
        }
    }
}

/// The configuration to hold now: what the machine wants, except that a step out of the path
/// (from the spec's values to degraded or absent) waits while the fallback is not ready yet.
pub fn next_presence(applied: Presence, wanted: Presence, fallback_ready: bool) -> Presence {
    if applied == Presence::Normal && wanted != Presence::Normal && !fallback_ready {
        applied
    } else {
        wanted
    }
}

/// What to write to make the cluster hold one configuration state.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigurationWrite {
    /// The cluster already holds it.
    Nothing,
    /// Register (create or update) this configuration.
    Apply(Box<MutatingWebhookConfiguration>),
    /// Delete the configuration.
    Remove,
}

/// The write that takes the cluster from `presence` (with `applied` the configuration last
/// written and still live) to `next`, whose configuration is `desired` (`None` for
/// [`Presence::Absent`]).
pub fn configuration_write(
    presence: Presence,
    applied: Option<&MutatingWebhookConfiguration>,
    next: Presence,
    desired: Option<MutatingWebhookConfiguration>,
) -> ConfigurationWrite {
    match desired {
        Some(desired) if presence == next && applied == Some(&desired) => {
            ConfigurationWrite::Nothing
        }
        Some(desired) => ConfigurationWrite::Apply(Box::new(desired)),
        None if presence == Presence::Absent => ConfigurationWrite::Nothing,
        None => ConfigurationWrite::Remove,
    }
}

/// The delay before the next attempt to remove a configuration, after one that failed.
pub fn removal_retry(previous: Option<Duration>) -> Duration {
    previous.map_or(FIRST_REMOVAL_RETRY, |d| (d * 2).min(MAX_REMOVAL_RETRY))
}

/// Where the fail-open window of an outage found in progress (no `restoredAt`) started: at its
/// first step out of the path, less a second for the write that made it (the step's time is
/// taken when the write had finished; nothing admitted before that write began lacked the
/// initializer).
pub fn resumed_window(outage: &Outage) -> Option<Timestamp> {
    if outage.restored_at.is_some() {
        return None;
    }
    let first = [outage.degraded_at.as_ref(), outage.deregistered_at.as_ref()]
        .into_iter()
        .flatten()
        .map(|t| t.0)
        .min()?;
    first.checked_sub(jiff::SignedDuration::from_secs(1)).ok()
}

/// Key of `status.details` naming the pending name of a legacy-backend Initializer.
pub const PENDING_NAME_DETAIL: &str = "pendingName";

/// Runs one API call with [`CALL_TIMEOUT`].
async fn bounded<T>(
    what: impl FnOnce() -> String,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result,
        Err(_) => Err(Error::TimedOut {
            what: what(),
            after: CALL_TIMEOUT,
        }),
    }
}

/// What the supervisor knows and holds for one Initializer, behind its lock.
struct SupervisedState {
    machine: Machine,
    target: Supervision,
    last_probe: Option<ProbeRecord>,
    applied: Option<MutatingWebhookConfiguration>,
    presence: Presence,
    written: Option<InitializerStatus>,
    /// The Initializer's resourceVersion as this replica last read or wrote it: each status
    /// write is made onto it, so one computed before someone else's write is refused.
    version: Option<String>,
    /// The versions this replica's own latest status writes were made onto: a reconcile that
    /// read one of them read a cache not yet showing those writes.
    replaced: Replaced,
    outage: Option<Outage>,
    window_from: Option<Timestamp>,
    fallback: FallbackRun,
    missed: Option<MissedInitializations>,
    deregister_cause: Option<(Cause, Instant)>,
    /// A sync found a configuration of ours live while it held none: one that appeared behind
    /// its back (a registration a replica frozen past its lease sent late, or someone's
    /// create). Removing it, unless a probe or endpoint decided it, is not a deregistration of
    /// the initializer. Taken by that removal, cleared when the sync keeps the configuration.
    adopted_stray: bool,
    degrade_since: Option<Instant>,
    /// Cancelled when supervision stops: nothing is written after that.
    stopped: CancellationToken,
    /// The delay before the next attempt to remove the configuration, after a failed one.
    removal_retry: Option<Duration>,
    /// A retry of the removal is scheduled.
    removal_retry_pending: bool,
    /// With the legacy backend: how many objects pending on the name the last removal of the
    /// configuration released (`details.releasedObjects`).
    released: Option<u64>,
}

impl SupervisedState {
    /// Takes the status and version a reconcile read: compared with that, what an earlier
    /// replica or this one without an entry wrote is brought up to date. Unless what it read is
    /// older than this replica's own writes (its cache lags them): then what was written stays.
    fn adopt(&mut self, stored: Option<&InitializerStatus>, version: Option<&str>) {
        if !self.replaced.contains(version) {
            self.written = stored.cloned();
            self.version = version.map(str::to_string);
        }
    }
}

/// The newest few versions of an Initializer that this replica's status writes replaced.
#[derive(Debug, Default)]
struct Replaced(VecDeque<String>);

impl Replaced {
    /// More than a reconcile's cache lags behind in practice (one write per probe round).
    const KEPT: usize = 8;

    fn record(&mut self, version: Option<String>) {
        if let Some(version) = version {
            if self.0.len() == Self::KEPT {
                self.0.pop_front();
            }
            self.0.push_back(version);
        }
    }

    fn contains(&self, version: Option<&str>) -> bool {
        version.is_some_and(|v| self.0.iter().any(|r| r == v))
    }
}

/// One supervised Initializer: its state, its tasks, and the signal that wakes its prober.
struct Supervised {
    stopped: CancellationToken,
    state: tokio::sync::Mutex<SupervisedState>,
    wake: Arc<Notify>,
    tasks: Mutex<(Option<TaskKey>, Vec<AbortHandle>)>,
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stopped.cancel();
        if let Ok(tasks) = self.tasks.get_mut() {
            for t in &tasks.1 {
                t.abort();
            }
        }
    }
}

/// The generation a fallback was compiled for, and the API server's refusal, if any.
type FallbackChecked = (Option<i64>, Option<String>);

struct Inner {
    client: Client,
    registrar: WebhookRegistrar,
    legacy_registrar: InitializerConfigurationRegistrar,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    probe_user: String,
    connector: Connector,
    /// Per Initializer: the `caBundle` of its last probe round, and whether every ready pod
    /// served a certificate of the bundle's current CA.
    served: Mutex<HashMap<String, (Vec<u8>, bool)>>,
    leadership: Leadership,
    watchdog: Watchdog,
    prober_count: std::sync::atomic::AtomicU64,
    entries: Mutex<HashMap<String, Arc<Supervised>>>,
    checked: Mutex<HashMap<String, FallbackChecked>>,
    /// Per Initializer: why its last reconcile failed (`details.lastError`), until a reconcile
    /// deploys its workload again.
    failures: Mutex<HashMap<String, String>>,
    /// Per legacy-backend Initializer: the resources its rules reached at a generation, and
    /// when that was discovered ([`Supervisor::discovered`]).
    discovered: Mutex<HashMap<String, Discovered>>,
    /// The operator's webhook configurations as its watch last saw them
    /// ([`Supervisor::with_configurations`]); none without that watch.
    configurations: Option<Store<MutatingWebhookConfiguration>>,
    /// The EndpointSlice watches, one per namespace, shared by the Initializers there.
    endpoint_slices: slices::EndpointSliceWatches,
    /// The operator's own stalls, so that its starvation is not blamed on an initializer.
    lag: LagMeter,
}

/// The generation discovery ran for, when, and what the rules reached.
type Discovered = (Option<i64>, Instant, Vec<Served>);

/// How long what an Initializer's rules reach is reused before discovery runs again (a CRD
/// installed meanwhile is seen within it; a spec change at once).
pub const DISCOVERY_TTL: Duration = Duration::from_secs(60);

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

fn micro_now() -> MicroTime {
    let now = Timestamp::now();
    MicroTime(Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now))
}

impl Supervisor {
    /// A supervisor probing as `probe_user` (shown to initializers as the requesting user),
    /// writing only while `leadership` says this replica leads.
    pub fn new(
        client: Client,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        probe_user: String,
        leadership: Leadership,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                registrar: WebhookRegistrar::new(client.clone()),
                endpoint_slices: slices::EndpointSliceWatches::new(client.clone()),
                lag: LagMeter::new(),
                legacy_registrar: InitializerConfigurationRegistrar::new(client.clone()),
                client,
                recorder,
                metrics,
                probe_user,
                connector: Connector::direct(),
                served: Mutex::new(HashMap::new()),
                leadership,
                watchdog: Watchdog::new(),
                prober_count: std::sync::atomic::AtomicU64::new(0),
                entries: Mutex::new(HashMap::new()),
                checked: Mutex::new(HashMap::new()),
                failures: Mutex::new(HashMap::new()),
                discovered: Mutex::new(HashMap::new()),
                configurations: None,
            }),
        }
    }

    /// The supervisor checking a healthy registration against `configurations`, the watched
    /// copy of the operator's webhook configurations, and reading the live object only when
    /// that copy differs from what it wants: one watch instead of a read per probe and
    /// Initializer. Call it on the supervisor `new` returned, before it is cloned.
    pub fn with_configurations(
        mut self,
        configurations: Store<MutatingWebhookConfiguration>,
    ) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.configurations = Some(configurations),
            None => warn!(
                "the watched configurations were given after the supervisor was shared; every probe reads the live one"
            ),
        }
        self
    }

    /// Opens the probes' connections with `connector` instead of a plain connect (a test runs
    /// the operator outside the cluster's network). Call it before the supervisor is cloned.
    pub fn with_connector(mut self, connector: Connector) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.connector = connector,
            None => warn!(
                "the probe connector was set after the supervisor was shared; kept the plain connect"
            ),
        }
        self
    }

    /// Whether the last probe round of `initializer`, made with `ca_bundle`, found every ready
    /// pod serving a certificate of the bundle's current CA: a CA it replaced may then leave the
    /// bundle.
    pub fn serves_current_ca(&self, initializer: &str, ca_bundle: &[u8]) -> bool {
        self.inner
            .served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(initializer)
            .is_some_and(|(bundle, current)| *current && bundle == ca_bundle)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Supervised>>> {
        // A poisoned map only means a panic elsewhere; the map itself is still consistent.
        self.inner
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The supervisor reporting its probers' steps to `watchdog`. Call it on the supervisor
    /// `new` returned, before it is cloned: a shared one keeps its own watchdog.
    pub fn with_watchdog(mut self, watchdog: Watchdog) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.watchdog = watchdog,
            None => warn!(
                "the watchdog was set after the supervisor was shared; its probers report to their own"
            ),
        }
        self
    }

    /// Where reconciles and probers report their steps in progress.
    pub fn watchdog(&self) -> &Watchdog {
        &self.inner.watchdog
    }

    /// Whether this replica may write now.
    pub fn leadership(&self) -> &Leadership {
        &self.inner.leadership
    }

    /// Stops supervising `initializer` (deleted or refused), and returns once any write in
    /// flight for it has finished, so that the caller's own writes (removing the
    /// configuration) come after it; its configuration is left to the caller.
    pub async fn stop(&self, initializer: &str) {
        let entry = self.entries().remove(initializer);
        if let Some(entry) = entry {
            entry.stopped.cancel();
            // Every call made under the lock is bounded, so this wait is too.
            drop(entry.state.lock().await);
        }
        // Its configuration is the caller's to remove; either way no longer supervised here.
        self.inner.metrics.forget_initializer(initializer);
    }

    /// Stops everything (this replica lost the lead).
    pub fn stop_all(&self) {
        for (name, entry) in self.entries().drain() {
            entry.stopped.cancel();
            self.inner.metrics.forget_initializer(&name);
        }
    }

    /// Stops supervising every Initializer not named in `existing` (deleted while the
    /// controller could not see it).
    pub fn retain(&self, existing: &[String]) {
        self.failures().retain(|name, _| existing.contains(name));
        self.inner
            .discovered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|name, _| existing.contains(name));
        self.entries().retain(|name, entry| {
            let keep = existing.contains(name);
            if !keep {
                entry.stopped.cancel();
                self.inner.metrics.forget_initializer(name);
            }
            keep
        });
    }

    /// `Ok` while this supervision may write: it was not stopped, and this replica leads.
    fn may_write(&self, st: &SupervisedState, action: impl FnOnce() -> String) -> Result<()> {
        if st.stopped.is_cancelled() {
            return Err(Error::SupervisionStopped { action: action() });
        }
        self.inner.leadership.check(action)
    }

    /// What the rules of `initializer` at `generation` reached when discovery last ran for it,
    /// unless that was more than [`DISCOVERY_TTL`] ago or for another generation.
    pub fn discovered(&self, initializer: &str, generation: Option<i64>) -> Option<Vec<Served>> {
        self.inner
            .discovered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(initializer)
            .filter(|(g, at, _)| *g == generation && at.elapsed() < DISCOVERY_TTL)
            .map(|(_, _, reached)| reached.clone())
    }

    /// Remembers what the rules of `initializer` at `generation` reach.
    pub fn remember_discovered(
        &self,
        initializer: &str,
        generation: Option<i64>,
        reached: Vec<Served>,
    ) {
        self.inner
            .discovered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                initializer.to_string(),
                (generation, Instant::now(), reached),
            );
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.inner
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The last failure the reconciler reported for `initializer`.
    fn failure(&self, initializer: &str) -> Option<String> {
        self.failures().get(initializer).cloned()
    }

    /// Records why a reconcile of `obj` could not deploy its workload and shows it in the
    /// status (`details.lastError`) until a reconcile succeeds: a supervised Initializer's
    /// status is computed with it from now on; any other keeps its stored status beside it.
    /// The registration is left as it is. A supervised status is written onto the version the
    /// reconcile handed over first ([`Supervisor::observed`]).
    pub async fn report_failure(&self, obj: &Initializer, configuration: &str, error: String) {
        let name = obj.name_any();
        self.failures().insert(name.clone(), error.clone());
        let entry = self.entries().get(&name).cloned();
        if let Some(entry) = entry {
            let mut st = entry.state.lock().await;
            self.refresh_status(&mut st).await;
            return;
        }
        let status = status::after_failure(obj, configuration, &error, Timestamp::now());
        if let Err(e) = self.write_unsupervised(obj, &status).await {
            warn!(initializer = %name, error = %e, "failed to report the failure in the status");
        }
    }

    /// Takes the status and version of `obj` as a reconcile just read them into its entry, if
    /// it has one, so that the prober's next status is written onto that version even when the
    /// reconcile fails before [`Supervisor::sync`] (otherwise every write after someone's edit
    /// would be refused until a reconcile succeeds).
    pub async fn observed(&self, obj: &Initializer) {
        let entry = self.entries().get(&obj.name_any()).cloned();
        if let Some(entry) = entry {
            entry.state.lock().await.adopt(
                obj.status.as_ref(),
                obj.metadata.resource_version.as_deref(),
            );
        }
    }

    /// Writes the status of an Initializer nothing is registered or supervised for (call
    /// [`Supervisor::stop`] first): refused for `refusals`, or, with `conflict`, leaving
    /// someone else's object alone (then `details.lastError` says which).
    pub async fn report_unsupervised(
        &self,
        obj: &Initializer,
        refusals: &[Refusal],
        configuration: &str,
        conflict: Option<String>,
    ) -> Result<InitializerStatus> {
        let name = obj.name_any();
        match &conflict {
            Some(why) => self.failures().insert(name, why.clone()),
            None => self.failures().remove(&name),
        };
        let now = Timestamp::now();
        let status = status::unsupervised(obj, refusals, configuration, conflict.as_deref(), now);
        let status = match conflict {
            Some(why) => status::with_conflict(status, why, obj.status.as_ref(), now),
            None => status,
        };
        self.write_unsupervised(obj, &status).await?;
        Ok(status)
    }

    /// Writes `status` for an Initializer without an entry, unless only the probe figures
    /// changed (bounded, only while this replica leads, and only onto the version of `obj`).
    async fn write_unsupervised(
        &self,
        obj: &Initializer,
        status: &InitializerStatus,
    ) -> Result<()> {
        if status::only_probe_figures_changed(obj.status.as_ref(), status, Timestamp::now()) {
            return Ok(());
        }
        let name = obj.name_any();
        self.inner
            .leadership
            .check(|| format!("write the status of initializer {name}"))?;
        bounded(
            || format!("write the status of initializer {name}"),
            apply::apply_status(
                &self.inner.client,
                &name,
                status,
                obj.metadata.resource_version.as_deref(),
            ),
        )
        .await
        .map(|_| ())
    }

    /// Asks the API server to compile an Initializer's fallback (a dry-run apply), once per
    /// generation: `Ok(None)` when it was accepted or cannot be checked here (no
    /// ValidatingAdmissionPolicy), `Ok(Some(why))` when it was refused.
    pub async fn check_fallback(
        &self,
        initializer: &str,
        generation: Option<i64>,
        fallback: &FallbackPolicy,
    ) -> Result<Option<String>> {
        let cached = self
            .inner
            .checked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(initializer)
            .filter(|(g, _)| *g == generation)
            .map(|(_, why)| why.clone());
        if let Some(why) = cached {
            return Ok(why);
        }
        let why = match apply::check_fallback(&self.inner.client, fallback).await? {
            FallbackCheck::Refused(why) => Some(why),
            FallbackCheck::Accepted | FallbackCheck::Unsupported => None,
        };
        self.inner
            .checked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(initializer.to_string(), (generation, why.clone()));
        Ok(why)
    }

    /// Updates the target of one Initializer (starting its tasks the first time), feeds the
    /// workload's availability and the suspend flag to its machine, and converges the cluster
    /// on the machine (re-applying a changed configuration, removing one that must not exist).
    pub async fn sync(&self, target: Supervision) -> Result<Report> {
        let existing = self.entries().get(&target.initializer).cloned();
        let entry = match existing {
            Some(entry) => entry,
            None => self.new_entry(&target).await?,
        };
        self.ensure_tasks(&entry, &target);
        // The workload was deployed: the last failure is over.
        self.failures().remove(&target.initializer);
        let mut st = entry.state.lock().await;
        st.machine.set_config(target.health);
        st.adopt(
            target.stored_status.as_ref(),
            target.stored_version.as_deref(),
        );
        st.target = target.clone();
        let now = Instant::now();
        for input in [
            Input::Suspend(target.suspended),
            Input::Available(target.available),
        ] {
            let action = st.machine.observe(input, now);
            self.note(&mut st, action);
        }
        // Someone else may have removed, left or edited the configuration: the converge below
        // puts it right.
        let held = st.presence;
        self.observe_live(&mut st).await?;
        st.adopted_stray = held == Presence::Absent && st.presence != Presence::Absent;
        let converged = self.converge(&entry, &mut st).await;
        // A stray whose removal failed keeps its flag for the retry; one kept (the initializer
        // is to be registered) is no stray.
        if converged.is_ok() {
            st.adopted_stray = false;
        }
        converged?;
        let status = self.write_status(&mut st).await?;
        Ok(Report {
            registered: st.presence != Presence::Absent,
            status,
        })
    }

    async fn new_entry(&self, target: &Supervision) -> Result<Arc<Supervised>> {
        let configuration = target.configuration();
        let mut machine = Machine::new(target.health);
        // After an operator restart the configuration may already be registered (maybe
        // degraded): adopt it so failures remove it, instead of removing a healthy one.
        let found = bounded(|| format!("read {configuration}"), self.live(target)).await?;
        let presence = match found {
            Live::Absent | Live::NotOurs => Presence::Absent,
            Live::Ours { degraded: true, .. } => Presence::Degraded,
            Live::Ours { .. } => Presence::Normal,
        };
        let stored = target.stored_status.as_ref();
        if presence != Presence::Absent {
            machine.adopt_registered(presence == Presence::Degraded, Instant::now());
        } else if stored.and_then(|s| s.phase) == Some(initializer_crds::Phase::Unresponsive) {
            // An outage in progress: keep its fallback in force until the initializer is back.
            machine.adopt_unresponsive(Instant::now());
        }
        let fallback = FallbackRun::default();
        let had_fallback = target.fallback.is_some()
            || stored.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == status::FALLBACK_IN_FORCE)
            });
        if had_fallback && !machine.in_outage() {
            // A fallback left by an earlier run is lifted; an outage in progress keeps it.
            if let Err(e) =
                apply::remove_fallback(&self.inner.client, &validate_fallback_name(target)).await
            {
                warn!(initializer = %target.initializer, error = %e, "failed to lift a stale fallback");
            }
        }
        // An outage in progress when this replica took over: its window started before, and
        // the count after recovery must cover it.
        let window_from = stored
            .and_then(|s| s.last_outage.as_ref())
            .filter(|_| presence != Presence::Normal || machine.in_outage())
            .and_then(resumed_window);
        let stopped = CancellationToken::new();
        let entry = Arc::new(Supervised {
            stopped: stopped.clone(),
            state: tokio::sync::Mutex::new(SupervisedState {
                machine,
                target: target.clone(),
                last_probe: None,
                applied: None,
                presence,
                written: None,
                version: target.stored_version.clone(),
                replaced: Replaced::default(),
                outage: stored.and_then(|s| s.last_outage.clone()),
                // An outage in progress when this replica took over: its window started
                // before, and the count after recovery must cover it.
                window_from,
                fallback,
                missed: stored.and_then(|s| s.missed_initializations.clone()),
                deregister_cause: None,
                adopted_stray: false,
                degrade_since: None,
                stopped,
                removal_retry: None,
                removal_retry_pending: false,
                released: stored
                    .and_then(|s| s.details.get(RELEASED_OBJECTS_DETAIL))
                    .and_then(|n| n.parse().ok()),
            }),
            wake: Arc::new(Notify::new()),
            tasks: Mutex::new((None, Vec::new())),
        });
        Ok(self
            .entries()
            .entry(target.initializer.clone())
            .or_insert(entry)
            .clone())
    }

    /// Computes the status from everything known and writes it unless only the probe figures
    /// changed and were written recently; only onto the version last read or written.
    async fn write_status(&self, st: &mut SupervisedState) -> Result<InitializerStatus> {
        let target = &st.target;
        let previous = st.written.as_ref().or(target.stored_status.as_ref());
        let configuration = target.configuration();
        let now = Instant::now();
        let failure = self.failure(&target.initializer);
        let mut status = status::compute(&Observation {
            generation: target.generation,
            refusals: &[],
            suspended: target.suspended,
            workload: Some(target.workload.clone()),
            health: Some(st.machine.snapshot()),
            probe: st.last_probe.clone(),
            registered: st.presence != Presence::Absent,
            configuration_name: &configuration,
            configuration_kind: target.configuration_kind(),
            certificate_not_after: target.certificate_not_after,
            now: Timestamp::now(),
            previous,
            degraded: st.presence == Presence::Degraded,
            outage: st.outage.clone(),
            fallback: target.fallback.as_ref().map(|_| st.fallback.view(now)),
            missed: st.missed.clone(),
            fail_closed: target.fail_closed_bounds(),
            last_error: failure.as_deref(),
        });
        if let Some(legacy) = &target.legacy {
            status.details.insert(
                PENDING_NAME_DETAIL.to_string(),
                legacy.canary.pending_name.clone(),
            );
            if let Some(released) = st.released {
                status
                    .details
                    .insert(RELEASED_OBJECTS_DETAIL.to_string(), released.to_string());
            }
        }
        self.inner.metrics.set_fail_closed(
            &target.initializer,
            status
                .conditions
                .iter()
                .any(|c| c.type_ == status::FAIL_CLOSED && c.status == "True"),
        );
        self.inner.metrics.observe_initializer(
            &target.initializer,
            &InitializerGauges {
                registered: st.presence != Presence::Absent,
                degraded: st.presence == Presence::Degraded,
                suspended: target.suspended,
                certificate_expiry: target.certificate_not_after.map(|t| t.as_second()),
                probe_budget: target.budget,
            },
        );
        if !status::only_probe_figures_changed(previous, &status, Timestamp::now()) {
            self.may_write(st, || {
                format!("write the status of initializer {}", target.initializer)
            })?;
            let version = bounded(
                || format!("write the status of initializer {}", target.initializer),
                apply::apply_status(
                    &self.inner.client,
                    &target.initializer,
                    &status,
                    st.version.as_deref(),
                ),
            )
            .await?;
            st.written = Some(status.clone());
            st.replaced
                .record(std::mem::replace(&mut st.version, version));
        }
        Ok(status)
    }

    async fn refresh_status(&self, st: &mut SupervisedState) {
        match self.write_status(st).await {
            Ok(_) => {}
            // Someone wrote the Initializer since this replica read it: the reconcile of that
            // change brings the new version, and the status is written onto it then.
            Err(e) if e.is_stale_write() => {
                info!(initializer = %st.target.initializer, error = %e, "status not written: the Initializer changed since it was read");
            }
            Err(e) => {
                warn!(initializer = %st.target.initializer, error = %e, "failed to write status");
            }
        }
    }

    fn ensure_tasks(&self, entry: &Arc<Supervised>, target: &Supervision) {
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
        self.inner.lag.start();
        let weak = Arc::downgrade(entry);
        let (ready_tx, ready_rx) = watch::channel(None);
        let prober = tokio::spawn(prober(
            self.clone(),
            weak.clone(),
            entry.wake.clone(),
            ready_rx,
            target.clone(),
        ));
        let watcher = tokio::spawn(endpoints(self.clone(), weak, ready_tx, target.clone()));
        tasks.1 = vec![prober.abort_handle(), watcher.abort_handle()];
        tasks.0 = Some(key);
    }

    /// Publishes an Event about `reference` while this replica leads (bounded; a failure is
    /// logged, never returned).
    pub(crate) async fn publish(
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
        if !self.inner.leadership.is_leading() {
            return;
        }
        match tokio::time::timeout(CALL_TIMEOUT, self.inner.recorder.publish(&event, reference))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, reason, "failed to publish event"),
            Err(_) => warn!(reason, "failed to publish event: no answer in time"),
        }
    }

    /// Remembers what an action needs for its Event once the cluster follows.
    fn note(&self, st: &mut SupervisedState, action: Action) {
        match action {
            Action::Degrade { since } => {
                st.degrade_since = Some(since);
                // An outage whose restore failed (the configuration still degraded) keeps its
                // record; any other degrade starts one.
                let unrestored = st.presence == Presence::Degraded
                    && st.outage.as_ref().is_some_and(|o| o.restored_at.is_none());
                if !unrestored {
                    st.outage = Some(Outage {
                        started_at: Some(micro_now()),
                        ..Outage::default()
                    });
                }
            }
            Action::Deregister { cause, since } => {
                st.deregister_cause = Some((cause, since));
                if cause != Cause::Suspended
                    && st.outage.as_ref().is_none_or(|o| o.restored_at.is_some())
                {
                    st.outage = Some(Outage {
                        started_at: Some(micro_now()),
                        ..Outage::default()
                    });
                }
            }
            Action::Register | Action::Restore | Action::None => {}
        }
    }

    /// Makes the cluster hold what the machine wants: the fallback first (when the machine is
    /// out of the path), then the configuration (a step out of the path waits for the
    /// fallback to be in force), then the fallback lifted once the configuration is back.
    async fn converge(&self, entry: &Arc<Supervised>, st: &mut SupervisedState) -> Result<()> {
        let now = Instant::now();
        let name = st.target.initializer.clone();
        let want_fallback = st.target.fallback.is_some() && st.machine.in_outage();
        if want_fallback {
            self.install_fallback(entry, st).await;
        }
        let wanted = Presence::of(st.machine.state());
        let ready = !want_fallback || st.fallback.ready(now);
        let next = next_presence(st.presence, wanted, ready);
        if next != wanted {
            debug!(initializer = %name, "waiting for the fallback to be in force before failing open");
        }
        match self.apply_presence(st, next).await {
            Ok(()) => st.removal_retry = None,
            Err(e) => {
                if next == Presence::Absent {
                    self.retry_removal(entry, st, &e);
                }
                return Err(e);
            }
        }
        let lift = !want_fallback
            && (st.fallback.applied.is_some() || st.fallback.installed_at.is_some())
            && (st.presence == Presence::Normal || !st.machine.in_outage());
        if lift {
            let fallback_name = validate_fallback_name(&st.target);
            let removed =
                match self.may_write(st, || format!("remove the fallback {fallback_name}")) {
                    Ok(()) => {
                        bounded(
                            || format!("remove the fallback {fallback_name}"),
                            apply::remove_fallback(&self.inner.client, &fallback_name),
                        )
                        .await
                    }
                    Err(e) => Err(e),
                };
            match removed {
                Ok(_) => {
                    st.fallback = FallbackRun::default();
                    info!(initializer = %name, "fallback lifted");
                    self.publish(
                        &st.target.reference,
                        EventType::Normal,
                        "FallbackRemoved",
                        format!(
                            "removed the fallback {}: the initializer is back in the path",
                            validate_fallback_name(&st.target)
                        ),
                    )
                    .await;
                }
                Err(e) => warn!(initializer = %name, error = %e, "failed to lift the fallback"),
            }
        }
        Ok(())
    }

    async fn install_fallback(&self, entry: &Arc<Supervised>, st: &mut SupervisedState) {
        let Some(fallback) = st.target.fallback.clone() else {
            return;
        };
        if st.fallback.unsupported
            || (st.fallback.installed_at.is_some()
                && st.fallback.applied.as_ref() == Some(&fallback))
        {
            return;
        }
        let name = st.target.initializer.clone();
        let policy = fallback.policy.name_any();
        if let Err(e) = self.may_write(st, || format!("install the fallback {policy}")) {
            debug!(initializer = %name, error = %e, "not installing the fallback");
            return;
        }
        let applied = bounded(
            || format!("install the fallback {policy}"),
            apply::apply_fallback(&self.inner.client, &fallback),
        )
        .await;
        match applied {
            Ok(FallbackCheck::Accepted) => {
                let first = st.fallback.installed_at.is_none();
                st.fallback.installed_at = Some(Instant::now());
                st.fallback.applied = Some(fallback.clone());
                st.fallback.failed = None;
                if let Some(outage) = st.outage.as_mut() {
                    outage.fallback_installed_at = Some(micro_now());
                }
                info!(initializer = %name, "fallback installed");
                if first {
                    self.publish(
                        &st.target.reference,
                        EventType::Normal,
                        "FallbackInstalled",
                        format!(
                            "installed the fallback ValidatingAdmissionPolicy {} and its binding: its validations stay enforced while the initializer is out of the path",
                            fallback.policy.name_any()
                        ),
                    )
                    .await;
                }
                // Converge again once the API server enforces it.
                tokio::spawn(
                    self.clone()
                        .reconverge_after(Arc::downgrade(entry), FALLBACK_SETTLE),
                );
            }
            Ok(FallbackCheck::Unsupported) => {
                st.fallback.unsupported = true;
                warn!(initializer = %name, "the API server does not serve ValidatingAdmissionPolicy: no fallback");
                self.publish(
                    &st.target.reference,
                    EventType::Warning,
                    "FallbackUnsupported",
                    "the API server does not serve ValidatingAdmissionPolicy: the fallback cannot be put in force".into(),
                )
                .await;
            }
            Ok(FallbackCheck::Refused(why)) => {
                warn!(initializer = %name, %why, "the fallback was refused");
                st.fallback.failed = Some(why);
            }
            Err(e) => {
                warn!(initializer = %name, error = %e, "failed to install the fallback");
                st.fallback.failed = Some(e.to_string());
            }
        }
    }

    /// After a failed removal, converges again with backoff until the API server confirms the
    /// configuration is gone (one retry pending at a time; none once supervision stopped or
    /// when retrying cannot help).
    fn retry_removal(&self, entry: &Arc<Supervised>, st: &mut SupervisedState, failure: &Error) {
        let hopeless = matches!(
            failure,
            Error::NotLeading { .. } | Error::SupervisionStopped { .. } | Error::NotOurs { .. }
        );
        if hopeless || st.stopped.is_cancelled() || st.removal_retry_pending {
            return;
        }
        let delay = removal_retry(st.removal_retry);
        st.removal_retry = Some(delay);
        st.removal_retry_pending = true;
        warn!(initializer = %st.target.initializer, error = %failure, retry_in_ms = delay.as_millis() as u64, "failed to remove the configuration; retrying");
        let sup = self.clone();
        let weak = Arc::downgrade(entry);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(entry) = weak.upgrade() else {
                return;
            };
            let mut st = entry.state.lock().await;
            st.removal_retry_pending = false;
            if let Err(e) = sup.converge(&entry, &mut st).await {
                debug!(initializer = %st.target.initializer, error = %e, "removal retry failed");
            }
            sup.refresh_status(&mut st).await;
        });
    }

    /// Converges one entry again after `delay` (boxed: converging may schedule this again).
    fn reconverge_after(
        self,
        entry: std::sync::Weak<Supervised>,
        delay: Duration,
    ) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let Some(entry) = entry.upgrade() else {
                return;
            };
            let mut st = entry.state.lock().await;
            if let Err(e) = self.converge(&entry, &mut st).await {
                warn!(initializer = %st.target.initializer, error = %e, "failed to converge");
            }
            self.refresh_status(&mut st).await;
        })
    }

    /// What the cluster holds under the configuration's name, of the backend's kind.
    async fn live(&self, target: &Supervision) -> Result<Live> {
        let configuration = target.configuration();
        let label = target.label();
        if target.legacy.is_some() {
            return Ok(
                match self.inner.legacy_registrar.get(&configuration).await? {
                    None => Live::Absent,
                    Some(found) if !apply::fallback_is_ours(&found.metadata, Some(&label)) => {
                        Live::NotOurs
                    }
                    Some(found) => Live::Ours {
                        degraded: false,
                        webhook: None,
                        legacy: Some(Box::new(found)),
                    },
                },
            );
        }
        Ok(match self.inner.registrar.get(&configuration).await? {
            None => Live::Absent,
            Some(found) if !is_ours(&found, &label) => Live::NotOurs,
            Some(found) => Live::Ours {
                degraded: build::is_degraded(&found),
                webhook: Some(Box::new(found)),
                legacy: None,
            },
        })
    }

    /// Whether the watched copy of the configuration is this Initializer's and holds what is
    /// wanted for its presence (then reading the live one would change nothing).
    fn watched_as_wanted(&self, st: &SupervisedState) -> bool {
        if st.target.legacy.is_some() || st.applied.is_none() {
            return false;
        }
        let Some(configurations) = &self.inner.configurations else {
            return false;
        };
        let watched = configurations.get(&ObjectRef::new(&st.target.configuration()));
        drift::unchanged(
            st.target.desired(st.presence).as_ref(),
            watched.as_deref(),
            &st.target.label(),
        )
    }

    /// Reads the live configuration and records what the cluster holds: nothing, someone
    /// else's object (an error: it is never taken over), or ours, edited or not (an edited one
    /// is re-applied by the next converge).
    async fn observe_live(&self, st: &mut SupervisedState) -> Result<()> {
        let configuration = st.target.configuration();
        let live = bounded(|| format!("read {configuration}"), self.live(&st.target)).await?;
        match live {
            Live::Absent => {
                st.presence = Presence::Absent;
                st.applied = None;
            }
            Live::NotOurs => {
                st.presence = Presence::Absent;
                st.applied = None;
                return Err(Error::NotOurs {
                    kind: st.target.configuration_kind(),
                    name: configuration,
                });
            }
            Live::Ours {
                degraded,
                webhook,
                legacy,
            } => {
                if st.presence == Presence::Absent {
                    // Left by an earlier run or another replica: the converge removes it if
                    // it must not be there.
                    st.presence = if degraded {
                        Presence::Degraded
                    } else {
                        Presence::Normal
                    };
                }
                let desired = st.target.desired(st.presence);
                let changed = match (&st.target.legacy, &legacy) {
                    // What the operator sets in an InitializerConfiguration: its initializers.
                    (Some(wanted), Some(found)) => {
                        build::legacy::registered_initializers(found)
                            != build::legacy::registered_initializers(&wanted.configuration)
                    }
                    _ => desired
                        .as_ref()
                        .zip(webhook.as_ref())
                        .is_some_and(|(d, found)| drifted(d, found)),
                };
                if changed {
                    // Someone else edited it (rather than the spec changing what is wanted):
                    // what was last applied is not what is live.
                    let edited = match (&st.target.legacy, &webhook) {
                        (None, Some(found)) => {
                            st.applied.as_ref().is_some_and(|a| drifted(a, found))
                        }
                        _ => st.applied.is_some(),
                    };
                    if edited {
                        info!(initializer = %st.target.initializer, %configuration, "the live configuration was changed by someone else: applying it again");
                    }
                    st.applied = None;
                } else {
                    st.applied = desired;
                }
            }
        }
        Ok(())
    }

    /// Applies one configuration state, with its Event and metrics.
    async fn apply_presence(&self, st: &mut SupervisedState, next: Presence) -> Result<()> {
        // Taken before the write: the API server cannot call the changed configuration before
        // it is written, so an outage's window that starts here misses no create.
        let write_started = Timestamp::now();
        let name = st.target.initializer.clone();
        let configuration = st.target.configuration();
        let before = st.presence;
        match configuration_write(
            st.presence,
            st.applied.as_ref(),
            next,
            st.target.desired(next),
        ) {
            ConfigurationWrite::Nothing => return Ok(()),
            ConfigurationWrite::Apply(desired) => {
                let desired = *desired;
                self.may_write(st, || format!("register {configuration}"))?;
                if st.applied.is_none() {
                    // Never take over a configuration of the same name that is not ours.
                    self.observe_live(st).await?;
                }
                let registered = bounded(|| format!("register {configuration}"), async {
                    match &st.target.legacy {
                        Some(legacy) => {
                            self.inner
                                .legacy_registrar
                                .register(&legacy.configuration)
                                .await
                        }
                        None => self.inner.registrar.register(&desired).await,
                    }
                })
                .await;
                if let Err(e) = registered {
                    warn!(initializer = %name, error = %e, "failed to apply the configuration");
                    // A registration that failed is tried again after the probes it needs; a
                    // restore that failed leaves the degraded configuration in place and is
                    // tried again at the next converge (resetting the machine would remove it).
                    if next == Presence::Normal && before == Presence::Absent {
                        st.machine.registration_failed();
                    }
                    return Err(e);
                }
                st.applied = Some(desired);
                st.presence = next;
            }
            ConfigurationWrite::Remove => {
                self.may_write(st, || format!("deregister {configuration}"))?;
                // Never delete a configuration of the same name that is not ours.
                self.observe_live(st).await?;
                if st.presence != Presence::Absent {
                    bounded(|| format!("deregister {configuration}"), async {
                        if st.target.legacy.is_some() {
                            self.inner.legacy_registrar.deregister(&configuration).await
                        } else {
                            self.inner.registrar.deregister(&configuration).await
                        }
                    })
                    .await?;
                }
                st.applied = None;
                st.presence = Presence::Absent;
            }
        }
        self.transitioned(st, before, next, write_started).await;
        Ok(())
    }

    /// Events, metrics, the outage's steps and the missed-initializations window, for one
    /// change of the configuration written from `write_started` on.
    async fn transitioned(
        &self,
        st: &mut SupervisedState,
        before: Presence,
        now_is: Presence,
        write_started: Timestamp,
    ) {
        let name = st.target.initializer.clone();
        let configuration = st.target.configuration();
        let reference = st.target.reference.clone();
        let outage_step = st.machine.in_outage()
            || st
                .deregister_cause
                .is_some_and(|(c, _)| c != Cause::Suspended);
        if before == Presence::Normal && now_is != Presence::Normal && outage_step {
            st.window_from.get_or_insert(write_started);
        }
        match (before, now_is) {
            (Presence::Normal, Presence::Degraded) => {
                let took = st
                    .degrade_since
                    .take()
                    .map(|s| s.elapsed())
                    .unwrap_or_default();
                if let Some(outage) = st.outage.as_mut() {
                    outage.degraded_at = Some(micro_now());
                }
                info!(initializer = %name, %configuration, took_ms = took.as_millis() as u64, "degraded");
                let now = if st.target.legacy.is_some() {
                    "stays registered (an InitializerConfiguration has no failure policy to relax)"
                        .to_string()
                } else {
                    format!(
                        "fails open now (failurePolicy Ignore, timeoutSeconds 1), {} ms after the failed probe",
                        took.as_millis()
                    )
                };
                self.publish(
                    &reference,
                    EventType::Warning,
                    "Degraded",
                    format!(
                        "a probe failed: {configuration} {now}; it is removed after {} failed probes in a row and restored after {} good ones",
                        st.machine.config().failure_threshold,
                        st.machine.config().success_threshold,
                    ),
                )
                .await;
            }
            (_, Presence::Absent)
                if std::mem::take(&mut st.adopted_stray) && st.deregister_cause.is_none() =>
            {
                // A configuration that appeared while the initializer was out of the path (a
                // registration a replica frozen past its lease sent late, or someone's create)
                // was removed: no probe, endpoint or suspend removed the initializer now. An
                // outage in progress, its figures and the deregistration count stay the first
                // removal's.
                info!(initializer = %name, %configuration, "removed a configuration that appeared while the initializer was out of the path");
                self.publish(
                    &reference,
                    EventType::Warning,
                    // Its own reason: the recorder folds a second `Deregistered` Event into the
                    // first one's series, note and all.
                    "StrayConfigurationRemoved",
                    format!(
                        "removed {configuration}: it appeared while the initializer is out of the path (a registration that landed late, or someone else's write)"
                    ),
                )
                .await;
                if let Some(legacy) = st.target.legacy.clone() {
                    self.release_pending(&name, legacy);
                }
            }
            (_, Presence::Absent) => {
                let (cause, since) = st
                    .deregister_cause
                    .take()
                    .unwrap_or((Cause::ProbesFailed, Instant::now()));
                let took = since.elapsed();
                let measured = (cause != Cause::Suspended).then_some(took);
                self.inner
                    .metrics
                    .deregistered(&name, cause.reason(), measured);
                if cause != Cause::Suspended
                    && let Some(outage) = st.outage.as_mut()
                {
                    outage.deregistered_at = Some(micro_now());
                }
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
                self.publish(&reference, type_, "Deregistered", note).await;
                if cause != Cause::Suspended
                    && let Some(legacy) = st.target.legacy.clone()
                {
                    self.release_pending(&name, legacy);
                }
            }
            (from, Presence::Normal) => {
                if from == Presence::Absent {
                    self.inner.metrics.registered(&name);
                }
                let restored = from == Presence::Degraded;
                if let Some(outage) = st.outage.as_mut().filter(|o| o.restored_at.is_none()) {
                    outage.restored_at = Some(micro_now());
                }
                info!(initializer = %name, %configuration, restored, "registered");
                let (reason, note) = if restored {
                    (
                        "Restored",
                        format!(
                            "restored {configuration} to the spec's failurePolicy and timeoutSeconds: the initializer answers again"
                        ),
                    )
                } else {
                    (
                        "Registered",
                        format!(
                            "registered {configuration}: the initializer is available and answering"
                        ),
                    )
                };
                self.publish(&reference, EventType::Normal, reason, note)
                    .await;
                if let Some(from) = st.window_from.take() {
                    self.count_missed(st, from);
                }
            }
            _ => {}
        }
    }

    /// Releases, in the background, every object still pending on the name of a legacy-backend
    /// initializer whose configuration was just removed: the configuration's removal stops new
    /// objects from getting the name, but those already waiting would wait until their creates
    /// time out and stay uninitialized. A second pass after [`WINDOW_TAIL`] catches creates the
    /// API server admitted just before the removal. The count goes to the status
    /// (`details.releasedObjects`) and an Event `ReleasedPendingObjects`.
    fn release_pending(&self, initializer: &str, legacy: LegacySupervision) {
        let sup = self.clone();
        let name = initializer.to_string();
        tokio::spawn(async move {
            let pending_name = legacy.canary.pending_name.clone();
            let mut released =
                apply::legacy::release(&sup.inner.client, &legacy.reached, &pending_name).await;
            tokio::time::sleep(WINDOW_TAIL).await;
            let again =
                apply::legacy::release(&sup.inner.client, &legacy.reached, &pending_name).await;
            released.count += again.count;
            released.failed.extend(again.failed);
            let Some(entry) = sup.entries().get(&name).cloned() else {
                return;
            };
            let mut st = entry.state.lock().await;
            st.released = Some(released.count);
            sup.refresh_status(&mut st).await;
            let reference = st.target.reference.clone();
            drop(st);
            let failed = if released.failed.is_empty() {
                String::new()
            } else {
                format!(
                    "; could not release everything: {}",
                    released.failed.join("; ")
                )
            };
            sup.publish(
                &reference,
                if released.failed.is_empty() { EventType::Normal } else { EventType::Warning },
                "ReleasedPendingObjects",
                format!(
                    "released {} object(s) still pending on {pending_name} after its configuration was removed, so that their creates do not stay stuck{failed}",
                    released.count
                ),
            )
            .await;
        });
    }

    /// Counts, once the window's tail has passed, the objects created in the window without the
    /// initializer's mark; reports them in the status and an Event.
    fn count_missed(&self, st: &SupervisedState, from: Timestamp) {
        let tail = st.target.timeout + WINDOW_TAIL;
        let to = Timestamp::now()
            .checked_add(jiff::SignedDuration::try_from(tail).unwrap_or_default())
            .unwrap_or_else(|_| Timestamp::now());
        let scope = missed::Scope {
            initializer: st.target.initializer.clone(),
            namespace_selector: st
                .target
                .webhook
                .webhooks
                .iter()
                .flatten()
                .next()
                .and_then(|w| w.namespace_selector.clone()),
            object_selector: st
                .target
                .webhook
                .webhooks
                .iter()
                .flatten()
                .next()
                .and_then(|w| w.object_selector.clone()),
            gate: st.target.gate.clone(),
            keys: st.target.mark_keys.clone(),
            from,
            to,
        };
        let rules = st.target.rules.clone();
        let sup = self.clone();
        let name = st.target.initializer.clone();
        tokio::spawn(async move {
            tokio::time::sleep(tail).await;
            let report = missed::count(&sup.inner.client, &rules, &scope).await;
            let Some(entry) = sup.entries().get(&name).cloned() else {
                return;
            };
            let mut st = entry.state.lock().await;
            info!(initializer = %name, count = report.count, "missed initializations counted");
            let (type_, reason, note) = if report.count > 0 {
                (
                    EventType::Warning,
                    "MissedInitializations",
                    format!(
                        "{}{} object(s) in scope were created without the initializer between {} and {}{}: recreate them to initialize them",
                        if report.truncated { "at least " } else { "" },
                        report.count,
                        report.from.0,
                        report.to.0,
                        if report.examples.is_empty() {
                            String::new()
                        } else {
                            format!(", for example {}", report.examples.join(", "))
                        }
                    ),
                )
            } else {
                (
                    EventType::Normal,
                    "NoMissedInitializations",
                    format!(
                        "no object in scope was created without the initializer between {} and {}",
                        report.from.0, report.to.0
                    ),
                )
            };
            st.missed = Some(report);
            sup.refresh_status(&mut st).await;
            let reference = st.target.reference.clone();
            drop(st);
            sup.publish(&reference, type_, reason, note).await;
        });
    }

    /// Feeds one input, converges, and writes the status when something changed; returns when
    /// the next probe is due.
    async fn observe(&self, entry: &Arc<Supervised>, input: Input, always_write: bool) -> Duration {
        let mut st = entry.state.lock().await;
        let before = (st.machine.state(), st.presence);
        let now = Instant::now();
        let action = st.machine.observe(input, now);
        self.note(&mut st, action);
        // A healthy registration is compared with the live object once per probe, so an edit
        // by someone else is put right within a probe period: with the watched copy when it is
        // exactly what is wanted, read from the API server otherwise (an edit, a removal, or a
        // write of this replica the watch has not shown yet). A failing one is being changed
        // anyway; its converge needs no extra call on the way to failing open.
        if input == Input::ProbeSucceeded
            && st.presence != Presence::Absent
            && !self.watched_as_wanted(&st)
            && let Err(e) = self.observe_live(&mut st).await
        {
            warn!(initializer = %st.target.initializer, error = %e, "failed to read the live configuration");
        }
        let needed = action != Action::None
            || st.machine.in_outage()
            || st.presence != Presence::of(st.machine.state())
            || (st.presence != Presence::Absent && st.applied.is_none());
        if needed && let Err(e) = self.converge(entry, &mut st).await {
            warn!(initializer = %st.target.initializer, error = %e, "failed to converge");
        }
        if always_write || (st.machine.state(), st.presence) != before {
            self.refresh_status(&mut st).await;
        }
        st.machine.next_probe_in(Instant::now())
    }
}

/// The fallback's name (the policy and the binding share it).
fn validate_fallback_name(target: &Supervision) -> String {
    format!("{}-fallback", target.configuration())
}

mod drift;
mod fallback;
mod slices;
mod tasks;

pub use drift::{drifted, is_ours};
use fallback::FallbackRun;
pub use tasks::ready_endpoints;
use tasks::{endpoints, prober};

#[cfg(test)]
mod tests;
