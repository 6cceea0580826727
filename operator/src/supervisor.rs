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
//! [`Supervision`]. The supervisor is the only writer of an Initializer's status: each entry
//! has one writer task, which every sync, transition, converge and count only marks due, and
//! the reconciler's refusals and failures go through it too ([`Supervisor::report_unsupervised`],
//! [`Supervisor::report_failure`]); see `status_writes`.
//!
//! One Initializer's life, file by file, in the order things happen:
//! - this file: the handle and its public calls ([`Supervisor::sync`] and the rest), and the
//!   per-Initializer state: two maps by name, the supervised entries (tasks and state under
//!   one lock) and what else the status and the reconcile need of each Initializer, supervised
//!   or not (`Known`: the reconcile's last failure, the CA its pods serve); what the reconcile
//!   remembers for itself is [`crate::controller::Memory`];
//! - `entry`: the entry made on the first sync (what the API server holds taken over) and its
//!   two tasks started;
//! - `tasks`: the prober and the endpoint watcher, fed by the shared watches of `slices`;
//! - `registration`: where the two backends' paths differ (what is registered, how it is
//!   probed, what a removal releases); reading and writing either kind is [`crate::backend`]'s;
//! - `transitions`: every input through `Supervisor::observe` into the machine, the outage's
//!   steps recorded and published as Events;
//! - `converge`: the cluster made to hold what the machine wants (`decide`, pure: the next
//!   presence and the write; `drift`, pure: the live configuration compared; `fallback`: the
//!   fallback's bookkeeping);
//! - `status_writes`: the entry's status writer, the one writer of `.status`;
//! - `aftermath`: after a fail-open window, pending objects released and missed ones counted.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use initializer_crds::constants::INITIALIZER_LABEL;
use initializer_crds::{
    AnnotationGate, FailurePolicy, InitializerStatus, InterceptRule, MissedInitializations, Outage,
    Suspension,
};
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::apply::legacy::Canary;
use crate::build::{self, FallbackPolicy};
use crate::engine::EngineView;
use crate::error::{Error, Result};
use crate::events::Reason;
use crate::health::{Aside, Cause, HealthConfig, Input, Machine};
use crate::lag::LagMeter;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::probe::{Connector, ProbeTarget};
use crate::status::{self, ProbeRecord, WorkloadObservation};
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
/// First delay before the next route check after one that saw no answer; doubles up to
/// [`MAX_ROUTE_CHECK_RETRY`].
const FIRST_ROUTE_CHECK_RETRY: Duration = Duration::from_millis(100);
/// Longest delay between two route checks of an initializer the API server does not reach.
const MAX_ROUTE_CHECK_RETRY: Duration = Duration::from_secs(5);
/// How long after what admits the API server is written ([`Supervisor::route_written`]) the
/// first route check is made: a network plugin enforces a NetworkPolicy some time after it is stored,
/// and a check answered before then proves the old path. Nothing tells when a plugin has
/// enforced a policy; the common ones do within a second or two. The SDK counts a connection as
/// new when its first request came within a second of its accept, so the plugin has this less
/// that second.
const ROUTE_CHANGE_SETTLE: Duration = Duration::from_secs(5);
/// First delay before the status writer tries a failed write again; doubles up to
/// [`MAX_STATUS_RETRY`].
const FIRST_STATUS_RETRY: Duration = Duration::from_millis(200);
/// Longest delay between two attempts to write a status the API server did not take.
const MAX_STATUS_RETRY: Duration = Duration::from_secs(10);
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
    /// What the API server does with a matching create while the initializer does not answer
    /// (the spec's, which the registered configuration carries).
    pub failure_policy: FailurePolicy,
    /// Whether the Deployment is available.
    pub available: bool,
    /// Whether, and by which switch, it is suspended.
    pub suspended: Option<Suspension>,
    /// `metadata.generation` of the Initializer.
    pub generation: Option<i64>,
    /// The Deployment's figures.
    pub workload: WorkloadObservation,
    /// Expiry of the serving certificate.
    pub certificate_not_after: Option<Timestamp>,
    /// The status stored on the Initializer when the reconcile read it.
    pub stored_status: Option<InitializerStatus>,
    /// The Initializer's resourceVersion when the reconcile read it: the next status write is
    /// made onto it ([`crate::apply::apply_status`]), unless this replica's own writes moved
    /// past it.
    pub stored_version: Option<String>,
    /// How it is registered and probed: the webhook configuration itself, or with
    /// `backend: InitializerConfiguration` what is registered instead of
    /// [`Supervision::webhook`] (which then only names and labels the configuration), the
    /// canary the prober creates, and what a deregistration releases.
    pub registration: Registration,
    /// The keys the initializer's marks are checked with when missed initializations are
    /// counted ([`crate::tls::mark_keys`]).
    pub mark_keys: initializer_mark::Keys,
    /// Where a preset's injection runs ([`crate::engine`]). With the policy in force the
    /// configuration is removed and stays removed, as under `spec.suspend`: on purpose, so no
    /// outage, fallback or missed-initializations window.
    pub engine: Option<EngineView>,
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
    /// Whether the preset runs in the API server (the configuration stays removed).
    pub fn in_api_server(&self) -> bool {
        self.engine.as_ref().is_some_and(EngineView::in_api_server)
    }

    /// Why the Initializer is out of the path on purpose, if it is: a suspension says so
    /// before the engine does.
    pub fn aside(&self) -> Option<Aside> {
        match (self.suspended, self.in_api_server()) {
            (Some(_), _) => Some(Aside::Suspended),
            (None, true) => Some(Aside::InApiServer),
            (None, false) => None,
        }
    }

    fn configuration(&self) -> String {
        self.webhook.name_any()
    }

    /// The kind of the configuration this backend registers.
    fn configuration_kind(&self) -> &'static str {
        self.registration.kind()
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
        (self.failure_policy == FailurePolicy::Fail).then(|| status::FailClosedBounds {
            degraded_within: self.period + self.budget,
            removed_within: self.period * self.health.failure_threshold + self.budget,
        })
    }

    /// The configuration to hold for `presence`.
    fn desired(&self, presence: Presence) -> Option<MutatingWebhookConfiguration> {
        match presence {
            Presence::Normal => Some(self.webhook.clone()),
            Presence::Degraded => Some(build::degraded(&self.webhook)),
            Presence::Proving => Some(crate::route::proving(
                &self.webhook,
                &self.namespace,
                &self.label(),
            )),
            Presence::Absent => None,
        }
    }

    /// The name of the route check's webhook in its proving configuration.
    fn route_check_name(&self) -> String {
        self.webhook
            .webhooks
            .iter()
            .flatten()
            .next()
            .map(|own| crate::route::check_name(&own.name))
            .unwrap_or_default()
    }

    /// What, when changed, needs the tasks restarted.
    fn task_key(&self) -> TaskKey {
        (
            self.namespace.clone(),
            self.service.clone(),
            self.budget,
            self.probe.clone(),
            self.ca_bundle(),
            self.registration.canary().cloned(),
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
/// next look depends on it) and the status as the sync left it.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Whether the configuration is registered now.
    pub registered: bool,
    /// The status as the sync left it, which the entry's writer writes (unless only probe
    /// figures changed).
    pub status: InitializerStatus,
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
    /// The configuration as this entry last wrote or read it.
    applied: Option<MutatingWebhookConfiguration>,
    presence: Presence,
    /// What the next change of the configuration stands for, for its effects.
    pending: PendingChange,
    /// The current or last outage, and what it left to count.
    outage: OutageLog,
    fallback: FallbackRun,
    /// The retries of a removal that failed.
    removal_retry: RemovalRetry,
    /// The route checks while the proving configuration is registered.
    route: RouteChecks,
    /// The status as this replica wrote it, and the version it wrote onto.
    status: StatusFence,
    /// Cancelled when supervision stops: nothing is written after that.
    stopped: CancellationToken,
}

/// What the next change of the configuration stands for, remembered from when the health
/// machine (or a sync) decided it until the write that carries it out.
#[derive(Debug, Default)]
struct PendingChange {
    /// A probe failed at this instant: the configuration is to be degraded.
    degrade_since: Option<Instant>,
    /// Why the configuration is to be removed.
    removal: Option<Removal>,
}

/// Why a configuration is to be removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Removal {
    /// The health machine took the initializer out of the path, for `Cause`, at the instant.
    Deregister(Cause, Instant),
    /// A sync found a configuration of ours live while this entry held none: one that
    /// appeared behind its back (a registration a replica frozen past its lease sent late, or
    /// someone's create). Removing it is not a deregistration of the initializer.
    Stray,
}

impl PendingChange {
    /// The health machine decided a removal: it stands for the next one, a stray's included.
    fn deregister(&mut self, cause: Cause, since: Instant) {
        self.removal = Some(Removal::Deregister(cause, since));
    }

    /// Whether a sync found a stray configuration live: the machine's own decision, if any,
    /// still stands for its removal.
    fn stray_found(&mut self, found: bool) {
        match (found, self.removal) {
            (true, None) => self.removal = Some(Removal::Stray),
            (false, Some(Removal::Stray)) => self.removal = None,
            _ => {}
        }
    }

    /// The cause of the deregistration decided, if one is.
    fn deregister_cause(&self) -> Option<Cause> {
        match self.removal {
            Some(Removal::Deregister(cause, _)) => Some(cause),
            _ => None,
        }
    }
}

/// The current or last outage, and what it left to count.
#[derive(Debug, Default)]
struct OutageLog {
    /// Its steps, as the status shows them.
    last: Option<Outage>,
    /// Since when objects may have been created without the initializer: the fail-open
    /// window, handed to the missed count when the configuration is back.
    window_from: Option<Timestamp>,
    /// The last missed count.
    missed: Option<MissedInitializations>,
    /// With the legacy backend: how many objects pending on the name the last removal of the
    /// configuration released (`details.releasedObjects`).
    released: Option<u64>,
}

/// The retries of a removal of the configuration that failed, with a delay doubling from
/// [`FIRST_REMOVAL_RETRY`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum RemovalRetry {
    /// No removal failed since the last write that succeeded.
    #[default]
    None,
    /// A retry is scheduled this long after the failure.
    Scheduled(Duration),
    /// The retry scheduled after this delay ran.
    Ran(Duration),
}

impl RemovalRetry {
    /// The delay of the last retry, which the next one doubles.
    fn last_delay(self) -> Option<Duration> {
        match self {
            RemovalRetry::None => None,
            RemovalRetry::Scheduled(delay) | RemovalRetry::Ran(delay) => Some(delay),
        }
    }
}

/// The route checks of one proving registration ([`crate::route`]): what the last one saw, and
/// when the next is due (from every probe at first, backing off while none is answered).
#[derive(Clone, Debug, Default)]
struct RouteChecks {
    last: Option<String>,
    /// When the first check went unanswered.
    since: Option<Instant>,
    next_at: Option<Instant>,
    backoff: Option<Duration>,
}

impl RouteChecks {
    /// Checks starting over once what admits the API server was written: the first
    /// `ROUTE_CHANGE_SETTLE` from now, and nothing unanswered yet.
    fn after_write() -> Self {
        Self {
            next_at: Some(Instant::now() + ROUTE_CHANGE_SETTLE),
            ..Self::default()
        }
    }
}

/// The status as this replica wrote it and the version it wrote onto, so that a status computed
/// before someone else's write is refused, and the signal that wakes the entry's status writer.
#[derive(Debug)]
struct StatusFence {
    written: Option<InitializerStatus>,
    /// The Initializer's resourceVersion as this replica last read or wrote it: each status
    /// write is made onto it.
    version: Option<String>,
    /// The versions this replica's own latest status writes were made onto: a reconcile that
    /// read one of them read a cache not yet showing those writes.
    replaced: Replaced,
    /// Wakes the entry's status writer ([`StatusFence::due`]).
    writer: Arc<Notify>,
}

impl StatusFence {
    fn new(version: Option<String>) -> Self {
        Self {
            written: None,
            version,
            replaced: Replaced::default(),
            writer: Arc::new(Notify::new()),
        }
    }

    /// Something that shows in the status changed: the entry's writer computes the status from
    /// the state as it then is and writes it ([`status_writes`]). Marks coalesce.
    fn due(&self) {
        self.writer.notify_one();
    }

    /// Takes the status and version a reconcile read: compared with that, what an earlier
    /// replica or this one without an entry wrote is brought up to date. Unless what it read is
    /// older than this replica's own writes (its cache lags them): then what was written stays.
    fn adopt(&mut self, stored: Option<&InitializerStatus>, version: Option<&str>) {
        if !self.replaced.contains(version) {
            self.written = stored.cloned();
            self.version = version.map(str::to_string);
        }
    }

    /// `status` was written, making `version` the Initializer's.
    fn wrote(&mut self, status: InitializerStatus, version: Option<String>) {
        self.written = Some(status);
        self.replaced
            .record(std::mem::replace(&mut self.version, version));
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

/// One supervised Initializer: its state, its status writer, its tasks, and the signal that
/// wakes its prober.
struct Supervised {
    stopped: CancellationToken,
    state: tokio::sync::Mutex<SupervisedState>,
    wake: Arc<Notify>,
    /// The one task that writes its status ([`status_writes::status_writer`]).
    writer: AbortHandle,
    /// The prober and the endpoint watcher, and what they were started with.
    tasks: Mutex<(Option<TaskKey>, Vec<AbortHandle>)>,
}

impl Supervised {
    /// The entry holding `state`, with its status writer started (its other tasks start on
    /// [`Supervisor::ensure_tasks`]).
    fn start(sup: &Supervisor, state: SupervisedState) -> Arc<Self> {
        let stopped = state.stopped.clone();
        let due = state.status.writer.clone();
        Arc::new_cyclic(|weak| Self {
            stopped,
            state: tokio::sync::Mutex::new(state),
            wake: Arc::new(Notify::new()),
            writer: tokio::spawn(status_writes::status_writer(sup.clone(), weak.clone(), due))
                .abort_handle(),
            tasks: Mutex::new((None, Vec::new())),
        })
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stopped.cancel();
        self.writer.abort();
        if let Ok(tasks) = self.tasks.get_mut() {
            for t in &tasks.1 {
                t.abort();
            }
        }
    }
}

struct Inner {
    client: Client,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    probe_user: String,
    connector: Connector,
    leadership: Leadership,
    watchdog: Watchdog,
    prober_count: std::sync::atomic::AtomicU64,
    /// The Initializers supervised now: their tasks and state under one lock each.
    entries: Mutex<HashMap<String, Arc<Supervised>>>,
    /// Everything else known of each Initializer, supervised or not ([`Known`]).
    known: Mutex<HashMap<String, Known>>,
    /// The operator's webhook configurations as its watch last saw them
    /// ([`Supervisor::with_configurations`]); none without that watch.
    configurations: Option<Store<MutatingWebhookConfiguration>>,
    /// The EndpointSlice watches, one per namespace, shared by the Initializers there.
    endpoint_slices: slices::EndpointSliceWatches,
    /// The operator's own stalls, so that its starvation is not blamed on an initializer.
    lag: LagMeter,
    /// How long route checks may go unanswered before the Initializer is `Stalled`
    /// ([`Supervisor::with_route_deadline`]).
    route_deadline: Duration,
}

/// What the supervisor knows of one Initializer beyond its supervision (which starts at its
/// first sync and ends at [`Supervisor::stop`]): what the reconcile learned before or without
/// it, and what the probes found. Kept until the Initializer is gone ([`Supervisor::retain`]).
#[derive(Debug, Default)]
struct Known {
    /// Why its last reconcile failed (`details.lastError`), until a reconcile deploys its
    /// workload again.
    failure: Option<String>,
    /// The `caBundle` of its last probe round, and whether every ready pod served a
    /// certificate of the bundle's current CA ([`Supervisor::serves_current_ca`]).
    served: Option<(Vec<u8>, bool)>,
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
                endpoint_slices: slices::EndpointSliceWatches::new(client.clone()),
                lag: LagMeter::new(),
                client,
                recorder,
                metrics,
                probe_user,
                connector: Connector::direct(),
                leadership,
                watchdog: Watchdog::new(),
                prober_count: std::sync::atomic::AtomicU64::new(0),
                entries: Mutex::new(HashMap::new()),
                known: Mutex::new(HashMap::new()),
                configurations: None,
                route_deadline: status::ROUTE_DEADLINE,
            }),
        }
    }

    /// Route checks may go unanswered for `deadline` (instead of [`status::ROUTE_DEADLINE`])
    /// before the Initializer is `Stalled` and, under `--network-policy=auto`, its policy
    /// withdrawn. Call it before the supervisor is cloned.
    pub fn with_route_deadline(mut self, deadline: Duration) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.route_deadline = deadline,
            None => warn!(
                "the route deadline was set after the supervisor was shared; kept the default"
            ),
        }
        self
    }

    /// How long the route deadline is.
    pub fn route_deadline(&self) -> Duration {
        self.inner.route_deadline
    }

    /// While `initializer`'s proving configuration is registered and its route checks go
    /// unanswered: for how long, and what the last one saw.
    pub async fn route_unproven(&self, initializer: &str) -> Option<(Duration, String)> {
        let entry = self.entries().get(initializer).cloned()?;
        let st = entry.state.lock().await;
        if st.presence != Presence::Proving {
            return None;
        }
        let since = st.route.since?;
        let last = st.route.last.clone().unwrap_or_default();
        Some((since.elapsed(), last))
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
        self.known(initializer, |known| {
            known
                .served
                .as_ref()
                .is_some_and(|(bundle, current)| *current && bundle == ca_bundle)
        })
    }

    /// Whether the supervisor holds a configuration of `initializer` in the path, as far as it
    /// knows (what it last wrote or found live): what must come out before the initializer's
    /// pods may go. `None` for an Initializer it does not supervise yet (since this replica
    /// started leading): its first sync reads what is live.
    pub async fn holds_configuration(&self, initializer: &str) -> Option<bool> {
        let entry = self.entries().get(initializer).cloned()?;
        let st = entry.state.lock().await;
        Some(st.presence != Presence::Absent)
    }

    /// What admits the API server to `initializer`'s pods is about to change (its NetworkPolicy
    /// is to be written or narrowed): a registration fails open until the route is seen again
    /// ([`Input::RouteChanged`]), converged now, and the route checks start over, the first
    /// waiting for the write ([`Supervisor::route_written`]). Returns whether the change may be
    /// written now: the API server fails open for the initializer (or has no configuration of
    /// it). Not yet while the fallback is being put in force, nor for an Initializer this
    /// replica does not supervise yet: its first sync reads what is live, and the next
    /// reconcile asks again.
    pub async fn route_changing(&self, initializer: &str) -> Result<bool> {
        let Some(entry) = self.entries().get(initializer).cloned() else {
            return Ok(false);
        };
        let mut st = entry.state.lock().await;
        if !st.machine.config().prove_route {
            // An `InitializerConfiguration`'s route is its canary's, which every probe takes.
            return Ok(true);
        }
        let now = Instant::now();
        let action = st.machine.observe(Input::RouteChanged, now);
        self.note(&mut st, action);
        // Until the write, which a reconcile makes well within its bound.
        st.route = RouteChecks {
            next_at: Some(now + crate::controller::RECONCILE_BOUND + ROUTE_CHANGE_SETTLE),
            ..RouteChecks::default()
        };
        let converged = self.converge(&entry, &mut st).await;
        st.status.due();
        converged?;
        Ok(st.presence != Presence::Normal)
    }

    /// The change [`Supervisor::route_changing`] allowed is written: the first route check
    /// comes `ROUTE_CHANGE_SETTLE` from now, and the route deadline counts from its answer.
    pub async fn route_written(&self, initializer: &str) {
        let Some(entry) = self.entries().get(initializer).cloned() else {
            return;
        };
        entry.state.lock().await.route = RouteChecks::after_write();
    }

    /// Ranges were added to what admits the API server to `initializer`'s pods
    /// ([`crate::build::network_policy::widens`]): no route change, but while its route is being
    /// proven the checks start over as after [`Supervisor::route_written`], so the route
    /// deadline counts from the policy now in force, not from the narrower one.
    pub async fn route_widened(&self, initializer: &str) {
        let Some(entry) = self.entries().get(initializer).cloned() else {
            return;
        };
        let mut st = entry.state.lock().await;
        if st.presence == Presence::Proving {
            st.route = RouteChecks::after_write();
        }
    }

    /// Reads or updates what is known of `initializer` (a short critical section: no await).
    fn known<T>(&self, initializer: &str, f: impl FnOnce(&mut Known) -> T) -> T {
        let mut known = self
            .inner
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(known.entry(initializer.to_string()).or_default())
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

    /// Forgets everything known of a deleted `initializer` (call [`Supervisor::stop`] first), so
    /// that one created again under its name starts afresh.
    pub fn forget(&self, initializer: &str) {
        self.inner
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(initializer);
    }

    /// Stops everything (this replica lost the lead), and drops the metrics of every
    /// Initializer it knew, supervised or not: the new leader exports them.
    pub fn stop_all(&self) {
        for (name, entry) in self.entries().drain() {
            entry.stopped.cancel();
            self.inner.metrics.forget_initializer(&name);
        }
        let known: Vec<String> = self
            .inner
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        for name in known {
            self.inner.metrics.forget_initializer(&name);
        }
    }

    /// Stops supervising every Initializer not named in `existing` (deleted while the
    /// controller could not see it).
    pub fn retain(&self, existing: &[String]) {
        self.inner
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|name, _| {
                let keep = existing.contains(name);
                if !keep {
                    self.inner.metrics.forget_initializer(name);
                }
                keep
            });
        self.entries().retain(|name, entry| {
            let keep = existing.contains(name);
            if !keep {
                entry.stopped.cancel();
                self.inner.metrics.forget_initializer(name);
            }
            keep
        });
    }

    /// Publishes an Event about `reference` while this replica leads (bounded; a failure is
    /// logged, never returned).
    pub(crate) async fn publish(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: Reason,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.as_str().to_string(),
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
            Ok(Err(e)) => warn!(error = %e, %reason, "failed to publish event"),
            Err(_) => warn!(%reason, "failed to publish event: no answer in time"),
        }
    }

    /// `Ok` while this supervision may write: it was not stopped, and this replica leads.
    fn may_write(&self, st: &SupervisedState, action: impl FnOnce() -> String) -> Result<()> {
        if st.stopped.is_cancelled() {
            return Err(Error::SupervisionStopped { action: action() });
        }
        self.inner.leadership.check(action)
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
        self.known(&target.initializer, |known| known.failure = None);
        let mut st = entry.state.lock().await;
        st.machine.set_config(target.health);
        st.status.adopt(
            target.stored_status.as_ref(),
            target.stored_version.as_deref(),
        );
        st.target = target.clone();
        let now = Instant::now();
        for input in [
            Input::Aside(target.aside()),
            Input::Available(target.available),
        ] {
            let action = st.machine.observe(input, now);
            self.note(&mut st, action);
        }
        // Someone else may have removed, left or edited the configuration: the converge below
        // puts it right.
        let held = st.presence;
        self.observe_live(&mut st).await?;
        let stray = held == Presence::Absent && st.presence != Presence::Absent;
        st.pending.stray_found(stray);
        let converged = self.converge(&entry, &mut st).await;
        // A stray whose removal failed stays one for the retry; one kept (the initializer is
        // to be registered) is no stray.
        if converged.is_ok() {
            st.pending.stray_found(false);
        }
        converged?;
        st.status.due();
        Ok(Report {
            registered: st.presence.is_registered(),
            status: self.current_status(&st),
        })
    }
}

/// The fallback's name (the policy and the binding share it).
fn validate_fallback_name(target: &Supervision) -> String {
    format!("{}-fallback", target.configuration())
}

mod aftermath;
mod converge;
mod decide;
mod drift;
mod effects;
mod entry;
mod fallback;
mod registration;
mod slices;
mod status_writes;
mod tasks;
mod transitions;

pub use decide::{
    ConfigurationWrite, Presence, configuration_write, next_presence, removal_retry,
    resumed_window, route_check_retry, status_write_retry,
};
pub use drift::drifted;
use fallback::FallbackRun;
pub use registration::{LegacySupervision, Registration};
pub use slices::ready_endpoints;

#[cfg(test)]
mod tests;
