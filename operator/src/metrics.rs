//! Prometheus metrics of the operator, served on `/metrics`.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use initializer_crds::conditions::{FALLBACK_IN_FORCE, STALLED};
use initializer_crds::{EngineInForce, InitializerStatus, Phase};

use crate::api_requests::VerbLabels;
use crate::error::Error;

/// Labels naming an Initializer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InitializerLabels {
    /// The Initializer's name.
    pub initializer: String,
}

/// Labels of a reconcile error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// [`Error::metric_label`].
    pub error: String,
}

/// Labels of a deregistration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeregistrationLabels {
    /// The Initializer's name.
    pub initializer: String,
    /// Why (`ProbesFailed`, `NoReadyEndpoints`, `Suspended`, ...).
    pub cause: String,
}

/// Labels of the phase gauge: one series per phase, 1 for the Initializer's phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The Initializer's name.
    pub initializer: String,
    /// [`Phase::as_str`].
    pub phase: String,
}

/// Labels of the engine gauge: one series per engine, 1 for the one in force.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EngineLabels {
    /// The Initializer's name.
    pub initializer: String,
    /// [`EngineInForce::as_str`].
    pub engine: String,
}

/// Labels of the stalled gauge: one series per reason, 1 for the reason that holds.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StalledLabels {
    /// The Initializer's name.
    pub initializer: String,
    /// [`Stalled::as_str`].
    pub reason: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 1 ms .. ~16 s
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Every metric the operator exports.
pub struct Metrics {
    registry: Registry,
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconciles that failed, by error.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// Duration of one reconcile.
    pub reconcile_duration: Histogram,
    /// Latency of active probes, by Initializer.
    pub probe_latency: HistogramFamily<InitializerLabels>,
    /// Failed probes, by Initializer.
    pub probe_failures: Family<InitializerLabels, Counter>,
    /// Timed-out probes not counted because the operator itself stalled meanwhile.
    pub probes_excused: Family<InitializerLabels, Counter>,
    /// Registrations, by Initializer.
    pub registrations: Family<InitializerLabels, Counter>,
    /// Deregistrations, by Initializer and cause.
    pub deregistrations: Family<DeregistrationLabels, Counter>,
    /// Time from the first sign of trouble (first failed probe, endpoints at zero) to the
    /// configuration being deleted.
    pub unresponsive_to_deregistered: Histogram,
    /// 1 while this replica holds the leader Lease.
    pub leader: Gauge,
    /// 1 while an Initializer's configuration is registered with `failurePolicy: Fail`: the
    /// cluster's matching creates then depend on the initializer answering, and on this
    /// operator to take it out of the path when it does not.
    pub fail_closed: Family<InitializerLabels, Gauge>,
    /// 1 while an Initializer's configuration exists (normal or degraded), 0 while it does not.
    /// Exported by the leader only, for the Initializers it supervises.
    pub registered: Family<InitializerLabels, Gauge>,
    /// 1 while an Initializer's configuration is degraded (`failurePolicy: Ignore`, short
    /// timeout) after a failed probe, or fails open while a changed route is proven.
    pub degraded: Family<InitializerLabels, Gauge>,
    /// 1 while an Initializer is suspended (`spec.suspend` or the break-glass annotation):
    /// deregistered on purpose.
    pub suspended: Family<InitializerLabels, Gauge>,
    /// Expiry of an Initializer's serving certificate, in Unix seconds.
    pub certificate_expiry: Family<InitializerLabels, Gauge>,
    /// An Initializer's probe latency budget (`spec.health.latencyBudgetMillis`), in seconds: a
    /// slower probe fails.
    pub probe_budget: Family<InitializerLabels, Gauge<f64, AtomicU64>>,
    /// Requests this replica made to the API server, by verb ([`crate::api_requests`]).
    pub api_requests: Family<VerbLabels, Counter>,
    /// 1 for an Initializer's phase, 0 for the others. Exported by the leader for every
    /// Initializer it reconciled, supervised or not (refused, in conflict).
    pub phase: Family<PhaseLabels, Gauge>,
    /// 1 for the engine an Initializer's injection runs on now, 0 for the other.
    pub engine: Family<EngineLabels, Gauge>,
    /// 1 while an Initializer's fallback policy is in force.
    pub fallback_in_force: Family<InitializerLabels, Gauge>,
    /// 1 for why an Initializer is stalled (the operator cannot deploy or register it until
    /// something changes), 0 for the other reasons; all 0 while it is not.
    pub stalled: Family<StalledLabels, Gauge>,
    /// Objects created without their initializer while it was out of the path, as counted
    /// after each fail-open window.
    pub missed_initializations: Family<InitializerLabels, Counter>,
}

/// Why the operator cannot deploy or register an Initializer until something changes: the
/// reason of its `Stalled=True` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stalled {
    /// The spec was refused (`Valid=False`), or it is held back until its spec changes.
    Refused,
    /// An object the operator would create belongs to someone else (`Conflict=True`).
    Conflict,
    /// The workload never became ready within its Deployment's progress deadline.
    ProgressDeadlineExceeded,
    /// The API server was not seen reaching the initializer through its Service within
    /// [`crate::status::ROUTE_DEADLINE`]; it stays registered failing open.
    RouteNotProven,
}

impl Stalled {
    /// Every reason.
    pub const ALL: [Stalled; 4] = [
        Stalled::Refused,
        Stalled::Conflict,
        Stalled::ProgressDeadlineExceeded,
        Stalled::RouteNotProven,
    ];

    /// The metric label, the condition's reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Stalled::Refused => "Refused",
            Stalled::Conflict => "Conflict",
            Stalled::ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
            Stalled::RouteNotProven => "RouteNotProven",
        }
    }
}

/// What an Initializer's status shows, as the gauges every reconciled Initializer has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusGauges {
    /// `status.phase`.
    pub phase: Phase,
    /// `status.engine`, when the status says.
    pub engine: Option<EngineInForce>,
    /// `FallbackInForce=True`.
    pub fallback_in_force: bool,
    /// Why it is stalled, if it is.
    pub stalled: Option<Stalled>,
}

impl StatusGauges {
    /// The gauges of `status`.
    pub fn of(status: &InitializerStatus) -> Self {
        let holds = |type_: &str, value: &str| {
            status
                .conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == value)
        };
        let stalled = status
            .conditions
            .iter()
            .find(|c| c.type_ == STALLED && c.status == "True")
            .and_then(|c| Stalled::ALL.into_iter().find(|r| r.as_str() == c.reason));
        Self {
            phase: status.phase.unwrap_or_default(),
            engine: status.engine,
            fallback_in_force: holds(FALLBACK_IN_FORCE, "True"),
            stalled,
        }
    }
}

/// What the operator knows about one supervised Initializer, as its gauges show it.
#[derive(Clone, Debug, PartialEq)]
pub struct InitializerGauges {
    /// The configuration exists (normal or degraded).
    pub registered: bool,
    /// The configuration is degraded.
    pub degraded: bool,
    /// Suspended (`spec.suspend` or the break-glass annotation).
    pub suspended: bool,
    /// Expiry of the serving certificate, in Unix seconds, when known.
    pub certificate_expiry: Option<i64>,
    /// The probe latency budget.
    pub probe_budget: Duration,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("initializer_operator"),
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: latency_histogram(),
            probe_latency: Family::new_with_constructor(latency_histogram),
            probe_failures: Family::default(),
            probes_excused: Family::default(),
            registrations: Family::default(),
            deregistrations: Family::default(),
            unresponsive_to_deregistered: latency_histogram(),
            leader: Gauge::default(),
            fail_closed: Family::default(),
            registered: Family::default(),
            degraded: Family::default(),
            suspended: Family::default(),
            certificate_expiry: Family::default(),
            probe_budget: Family::default(),
            api_requests: Family::default(),
            phase: Family::default(),
            engine: Family::default(),
            fallback_in_force: Family::default(),
            stalled: Family::default(),
            missed_initializations: Family::default(),
        };
        let mut registry = std::mem::take(&mut metrics.registry);
        metrics.register_reconciles_and_probes(&mut registry);
        metrics.register_configurations(&mut registry);
        metrics.register_status(&mut registry);
        metrics.registry = registry;
        metrics
    }
}

/// Every metric registered with its name and help, by subject.
impl Metrics {
    /// The reconciles and the probes.
    fn register_reconciles_and_probes(&self, registry: &mut Registry) {
        registry.register("reconciles", "Reconciles run", self.reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by error",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "probe_latency_seconds",
            "Latency of a dry-run AdmissionReview probe round (the slowest ready endpoint)",
            self.probe_latency.clone(),
        );
        registry.register(
            "probe_failures",
            "Failed probes",
            self.probe_failures.clone(),
        );
        registry.register(
                "probes_excused",
                "Timed-out probes not counted against the initializer because the operator itself stalled meanwhile (its runtime or machine starved)",
                self.probes_excused.clone(),
            );
    }

    /// What happens to the configurations, and who leads.
    fn register_configurations(&self, registry: &mut Registry) {
        registry.register(
            "registrations",
            "Webhook configurations registered",
            self.registrations.clone(),
        );
        registry.register(
            "deregistrations",
            "Webhook configurations removed",
            self.deregistrations.clone(),
        );
        registry.register(
                "unresponsive_to_deregistered_seconds",
                "Time from the first failed probe (or zero ready endpoints) to the configuration's removal",
                self.unresponsive_to_deregistered.clone(),
            );
        registry.register("leader", "1 while this replica leads", self.leader.clone());
        registry.register(
                "fail_closed",
                "1 while the Initializer's configuration is registered with failurePolicy Fail (creates it matches are refused whenever it cannot answer)",
                self.fail_closed.clone(),
            );
    }

    /// What each Initializer's status and spec show, and the API requests made.
    fn register_status(&self, registry: &mut Registry) {
        registry.register(
                "registered",
                "1 while the Initializer's webhook configuration exists (normal or degraded); exported by the leader",
                self.registered.clone(),
            );
        registry.register(
                "degraded",
                "1 while the Initializer's configuration is degraded to failurePolicy Ignore after a failed probe, or while a changed route is proven",
                self.degraded.clone(),
            );
        registry.register(
                "suspended",
                "1 while the Initializer is suspended (spec.suspend or the break-glass annotation initializer.dev/break-glass): deregistered on purpose",
                self.suspended.clone(),
            );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "Expiry of the Initializer's serving certificate, in Unix seconds",
            self.certificate_expiry.clone(),
        );
        registry.register(
            "probe_budget_seconds",
            "The Initializer's probe latency budget: a slower probe fails",
            self.probe_budget.clone(),
        );
        registry.register(
            "api_requests",
            "Requests this replica made to the API server, by verb",
            self.api_requests.clone(),
        );
        registry.register(
                "phase",
                "1 for the Initializer's phase (status.phase), 0 for the others; exported by the leader for every Initializer it reconciled",
                self.phase.clone(),
            );
        registry.register(
                "engine",
                "1 for the engine the Initializer's injection runs on now (status.engine: Webhook, or Policy in the API server), 0 for the other",
                self.engine.clone(),
            );
        registry.register(
            "fallback_in_force",
            "1 while the Initializer's fallback policy is in force (FallbackInForce=True)",
            self.fallback_in_force.clone(),
        );
        registry.register(
                "stalled",
                "1 for why the operator cannot deploy or register the Initializer until something changes, the reason of its Stalled condition (Refused: Valid=False, held back included; Conflict: an object in its way is someone else's; ProgressDeadlineExceeded: the workload never became ready within its Deployment's progress deadline; RouteNotProven: the API server was not seen reaching it through its Service for 5 minutes, so it stays registered failing open), 0 for the other reasons",
                self.stalled.clone(),
            );
        registry.register(
                "missed_initializations",
                "Objects created without the initializer while it was out of the path, counted after each fail-open window",
                self.missed_initializations.clone(),
            );
    }
}

impl Metrics {
    /// A shared set of metrics.
    pub fn shared() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Counts a failed reconcile.
    pub fn reconcile_failed(&self, err: &Error) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                error: err.metric_label().to_string(),
            })
            .inc();
    }

    /// Records one probe.
    pub fn probe(&self, initializer: &str, latency: Duration, ok: bool) {
        let labels = InitializerLabels {
            initializer: initializer.to_string(),
        };
        self.probe_latency
            .get_or_create(&labels)
            .observe(latency.as_secs_f64());
        if !ok {
            self.probe_failures.get_or_create(&labels).inc();
        }
    }

    /// Records a timed-out probe of `initializer` not counted: the operator stalled meanwhile.
    pub fn probe_excused(&self, initializer: &str) {
        self.probes_excused
            .get_or_create(&InitializerLabels {
                initializer: initializer.to_string(),
            })
            .inc();
    }

    /// Records whether `initializer`'s configuration is registered with `failurePolicy: Fail`.
    pub fn set_fail_closed(&self, initializer: &str, in_force: bool) {
        self.fail_closed
            .get_or_create(&InitializerLabels {
                initializer: initializer.to_string(),
            })
            .set(i64::from(in_force));
    }

    /// Sets the gauges of one supervised Initializer.
    pub fn observe_initializer(&self, initializer: &str, gauges: &InitializerGauges) {
        let labels = InitializerLabels {
            initializer: initializer.to_string(),
        };
        self.registered
            .get_or_create(&labels)
            .set(i64::from(gauges.registered));
        self.degraded
            .get_or_create(&labels)
            .set(i64::from(gauges.degraded));
        self.suspended
            .get_or_create(&labels)
            .set(i64::from(gauges.suspended));
        match gauges.certificate_expiry {
            Some(expiry) => {
                self.certificate_expiry.get_or_create(&labels).set(expiry);
            }
            None => {
                self.certificate_expiry.remove(&labels);
            }
        }
        self.probe_budget
            .get_or_create(&labels)
            .set(gauges.probe_budget.as_secs_f64());
    }

    /// Sets the gauges any reconciled Initializer has, from what its status shows.
    pub fn observe_status(&self, initializer: &str, gauges: &StatusGauges) {
        for phase in Phase::ALL {
            self.phase
                .get_or_create(&phase_labels(initializer, phase))
                .set(i64::from(phase == gauges.phase));
        }
        for engine in EngineInForce::ALL {
            let labels = engine_labels(initializer, engine);
            match gauges.engine {
                Some(in_force) => {
                    self.engine
                        .get_or_create(&labels)
                        .set(i64::from(engine == in_force));
                }
                None => {
                    self.engine.remove(&labels);
                }
            }
        }
        self.fallback_in_force
            .get_or_create(&InitializerLabels {
                initializer: initializer.to_string(),
            })
            .set(i64::from(gauges.fallback_in_force));
        for reason in Stalled::ALL {
            self.stalled
                .get_or_create(&stalled_labels(initializer, reason))
                .set(i64::from(gauges.stalled == Some(reason)));
        }
    }

    /// Counts the objects a fail-open window of `initializer` let through without it.
    pub fn missed(&self, initializer: &str, count: i64) {
        self.missed_initializations
            .get_or_create(&InitializerLabels {
                initializer: initializer.to_string(),
            })
            .inc_by(u64::try_from(count).unwrap_or(0));
    }

    /// Drops the gauges of an Initializer this replica no longer supervises or reconciles
    /// (deleted, refused, or the lead went elsewhere): the replica that does now exports them,
    /// and a stale 1 or 0 here would contradict it. A refused Initializer's status gauges are
    /// set again by the write that refuses it.
    pub fn forget_initializer(&self, initializer: &str) {
        let labels = InitializerLabels {
            initializer: initializer.to_string(),
        };
        self.fail_closed.remove(&labels);
        self.registered.remove(&labels);
        self.degraded.remove(&labels);
        self.suspended.remove(&labels);
        self.certificate_expiry.remove(&labels);
        self.probe_budget.remove(&labels);
        self.fallback_in_force.remove(&labels);
        for phase in Phase::ALL {
            self.phase.remove(&phase_labels(initializer, phase));
        }
        for engine in EngineInForce::ALL {
            self.engine.remove(&engine_labels(initializer, engine));
        }
        for reason in Stalled::ALL {
            self.stalled.remove(&stalled_labels(initializer, reason));
        }
    }

    /// Counts a registration.
    pub fn registered(&self, initializer: &str) {
        self.registrations
            .get_or_create(&InitializerLabels {
                initializer: initializer.to_string(),
            })
            .inc();
    }

    /// Counts a deregistration and, unless it was a suspension, how long it took.
    pub fn deregistered(&self, initializer: &str, cause: &str, took: Option<Duration>) {
        self.deregistrations
            .get_or_create(&DeregistrationLabels {
                initializer: initializer.to_string(),
                cause: cause.to_string(),
            })
            .inc();
        if let Some(took) = took {
            self.unresponsive_to_deregistered
                .observe(took.as_secs_f64());
        }
    }

    /// Every series name the exposition can carry, as Prometheus stores it: a counter `x` as
    /// `x_total`, a histogram `x` as `x_bucket`, `x_sum` and `x_count`, a gauge as is. Read
    /// from the `# TYPE` lines of a fresh registry in which every recording method has been
    /// called once (a labelled family without series is not written at all). Alert rules and
    /// the dashboard may query only these.
    pub fn exported_names() -> std::collections::BTreeSet<String> {
        let m = Self::default();
        m.reconciles.inc();
        m.reconcile_failed(&Error::CleanupPending(String::new()));
        m.reconcile_duration.observe(0.0);
        m.probe("x", Duration::ZERO, false);
        m.registered("x");
        m.deregistered("x", "ProbesFailed", Some(Duration::ZERO));
        m.leader.set(0);
        m.set_fail_closed("x", false);
        m.observe_initializer(
            "x",
            &InitializerGauges {
                registered: false,
                degraded: false,
                suspended: false,
                certificate_expiry: Some(0),
                probe_budget: Duration::ZERO,
            },
        );
        m.observe_status(
            "x",
            &StatusGauges {
                phase: Phase::Pending,
                engine: Some(EngineInForce::Webhook),
                fallback_in_force: false,
                stalled: None,
            },
        );
        m.missed("x", 0);
        series_names(&m.encode())
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

fn phase_labels(initializer: &str, phase: Phase) -> PhaseLabels {
    PhaseLabels {
        initializer: initializer.to_string(),
        phase: phase.as_str().to_string(),
    }
}

fn engine_labels(initializer: &str, engine: EngineInForce) -> EngineLabels {
    EngineLabels {
        initializer: initializer.to_string(),
        engine: engine.as_str().to_string(),
    }
}

fn stalled_labels(initializer: &str, reason: Stalled) -> StalledLabels {
    StalledLabels {
        initializer: initializer.to_string(),
        reason: reason.as_str().to_string(),
    }
}

/// The series names declared by the `# TYPE` lines of an OpenMetrics text exposition.
pub fn series_names(exposition: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in exposition.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#") || words.next() != Some("TYPE") {
            continue;
        }
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "summary" => &["", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|suffix| format!("{name}{suffix}")));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_figures_appear_in_the_exposition() {
        let m = Metrics::default();
        m.reconciles.inc();
        m.reconcile_failed(&Error::CleanupPending("x".into()));
        m.probe("sidecar", Duration::from_millis(20), false);
        m.registered("sidecar");
        m.deregistered("sidecar", "ProbesFailed", Some(Duration::from_millis(1500)));
        let text = m.encode();
        assert!(
            text.contains("initializer_operator_reconciles_total 1"),
            "{text}"
        );
        assert!(
            text.contains(
                r#"initializer_operator_reconcile_errors_total{error="cleanup_pending"} 1"#
            )
        );
        assert!(
            text.contains(r#"initializer_operator_probe_failures_total{initializer="sidecar"} 1"#)
        );
        assert!(
            text.contains(r#"initializer_operator_registrations_total{initializer="sidecar"} 1"#)
        );
        assert!(text.contains(r#"cause="ProbesFailed""#));
        assert!(text.contains("initializer_operator_unresponsive_to_deregistered_seconds_sum 1.5"));
        assert!(text.contains(
            "initializer_operator_probe_latency_seconds_count{initializer=\"sidecar\"} 1"
        ));
    }

    #[test]
    fn an_initializers_gauges_appear_and_go_when_it_is_forgotten() {
        let m = Metrics::default();
        m.observe_initializer(
            "sidecar",
            &InitializerGauges {
                registered: true,
                degraded: true,
                suspended: false,
                certificate_expiry: Some(1_800_000_000),
                probe_budget: Duration::from_millis(500),
            },
        );
        m.set_fail_closed("sidecar", true);
        let text = m.encode();
        for line in [
            r#"initializer_operator_registered{initializer="sidecar"} 1"#,
            r#"initializer_operator_degraded{initializer="sidecar"} 1"#,
            r#"initializer_operator_suspended{initializer="sidecar"} 0"#,
            r#"initializer_operator_certificate_expiry_timestamp_seconds{initializer="sidecar"} 1800000000"#,
            r#"initializer_operator_probe_budget_seconds{initializer="sidecar"} 0.5"#,
            r#"initializer_operator_fail_closed{initializer="sidecar"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        m.forget_initializer("sidecar");
        let text = m.encode();
        assert!(!text.contains(r#"initializer="sidecar""#), "{text}");
    }

    #[test]
    fn an_unknown_certificate_expiry_exports_no_series_rather_than_zero() {
        let m = Metrics::default();
        let mut gauges = InitializerGauges {
            registered: false,
            degraded: false,
            suspended: true,
            certificate_expiry: Some(1_800_000_000),
            probe_budget: Duration::from_secs(1),
        };
        m.observe_initializer("guard", &gauges);
        gauges.certificate_expiry = None;
        m.observe_initializer("guard", &gauges);
        let text = m.encode();
        assert!(
            !text.contains(r#"certificate_expiry_timestamp_seconds{initializer="guard"}"#),
            "{text}"
        );
        assert!(text.contains(r#"initializer_operator_suspended{initializer="guard"} 1"#));
    }

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn status_with(phase: Phase, conditions: &[(&str, &str)]) -> InitializerStatus {
        InitializerStatus {
            phase: Some(phase),
            conditions: conditions
                .iter()
                .map(|(type_, status)| Condition {
                    type_: type_.to_string(),
                    status: status.to_string(),
                    reason: "Test".to_string(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// A status whose `Stalled` condition is `True` for `reason`.
    fn stalled_by(phase: Phase, reason: &str) -> InitializerStatus {
        let mut status = status_with(phase, &[(STALLED, "True")]);
        status.conditions[0].reason = reason.to_string();
        status
    }

    /// A refused or conflicting Initializer, never supervised, is seen by its phase and why it
    /// is stalled (its `Stalled` condition's reason); one in the API server by its engine; each
    /// series one per value, 1 for the value that holds.
    #[test]
    fn status_gauges_show_phase_engine_fallback_and_why_it_is_stalled() {
        let refused = StatusGauges::of(&stalled_by(Phase::Invalid, "Refused"));
        assert_eq!(refused.stalled, Some(Stalled::Refused));
        let conflict = StatusGauges::of(&stalled_by(Phase::Pending, "Conflict"));
        assert_eq!(conflict.stalled, Some(Stalled::Conflict));
        let never_ready =
            StatusGauges::of(&stalled_by(Phase::Deploying, "ProgressDeadlineExceeded"));
        assert_eq!(never_ready.stalled, Some(Stalled::ProgressDeadlineExceeded));
        let mut in_api_server = status_with(
            Phase::InApiServer,
            &[(STALLED, "False"), (FALLBACK_IN_FORCE, "False")],
        );
        in_api_server.engine = Some(EngineInForce::Policy);
        let in_api_server = StatusGauges::of(&in_api_server);
        assert_eq!(in_api_server.stalled, None);
        assert!(!in_api_server.fallback_in_force);
        let degraded = StatusGauges::of(&status_with(
            Phase::Degraded,
            &[(STALLED, "False"), (FALLBACK_IN_FORCE, "True")],
        ));
        assert!(degraded.fallback_in_force);

        let m = Metrics::default();
        m.observe_status("refused", &refused);
        m.observe_status("preset", &in_api_server);
        m.missed("preset", 3);
        let text = m.encode();
        for line in [
            r#"initializer_operator_phase{initializer="refused",phase="Invalid"} 1"#,
            r#"initializer_operator_phase{initializer="refused",phase="Registered"} 0"#,
            r#"initializer_operator_stalled{initializer="refused",reason="Refused"} 1"#,
            r#"initializer_operator_stalled{initializer="refused",reason="Conflict"} 0"#,
            r#"initializer_operator_phase{initializer="preset",phase="InApiServer"} 1"#,
            r#"initializer_operator_engine{initializer="preset",engine="Policy"} 1"#,
            r#"initializer_operator_engine{initializer="preset",engine="Webhook"} 0"#,
            r#"initializer_operator_stalled{initializer="preset",reason="Refused"} 0"#,
            r#"initializer_operator_missed_initializations_total{initializer="preset"} 3"#,
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
        // No engine in the status: no engine series, rather than a made-up one.
        assert!(!text.contains(r#"engine{initializer="refused""#), "{text}");
        // Fixed: the refusal's series falls to 0; forgotten: its series go.
        m.observe_status(
            "refused",
            &StatusGauges::of(&status_with(Phase::Deploying, &[])),
        );
        let text = m.encode();
        assert!(
            text.contains(
                r#"initializer_operator_stalled{initializer="refused",reason="Refused"} 0"#
            )
        );
        assert!(
            text.contains(r#"initializer_operator_phase{initializer="refused",phase="Invalid"} 0"#)
        );
        m.forget_initializer("refused");
        assert!(!m.encode().contains(r#"initializer="refused""#));
    }

    #[test]
    fn exported_names_expand_counters_and_histograms_as_prometheus_stores_them() {
        let names = Metrics::exported_names();
        for name in [
            "initializer_operator_reconcile_errors_total",
            "initializer_operator_probe_latency_seconds_bucket",
            "initializer_operator_probe_latency_seconds_count",
            "initializer_operator_leader",
            "initializer_operator_registered",
            "initializer_operator_probe_budget_seconds",
            "initializer_operator_certificate_expiry_timestamp_seconds",
            "initializer_operator_deregistrations_total",
            "initializer_operator_phase",
            "initializer_operator_engine",
            "initializer_operator_fallback_in_force",
            "initializer_operator_stalled",
            "initializer_operator_missed_initializations_total",
        ] {
            assert!(names.contains(name), "{name} missing from {names:?}");
        }
        assert!(!names.contains("initializer_operator_reconcile_errors"));
        assert!(!names.contains("initializer_operator_probe_latency_seconds"));
    }
}
