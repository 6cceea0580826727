//! Prometheus metrics of the operator, served on `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("initializer_operator");
        let reconciles = Counter::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = latency_histogram();
        let probe_latency: HistogramFamily<InitializerLabels> =
            Family::new_with_constructor(latency_histogram);
        let probe_failures = Family::<InitializerLabels, Counter>::default();
        let registrations = Family::<InitializerLabels, Counter>::default();
        let deregistrations = Family::<DeregistrationLabels, Counter>::default();
        let unresponsive_to_deregistered = latency_histogram();
        let leader = Gauge::default();
        let fail_closed = Family::<InitializerLabels, Gauge>::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by error",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile",
            reconcile_duration.clone(),
        );
        registry.register(
            "probe_latency_seconds",
            "Latency of a dry-run AdmissionReview probe round (the slowest ready endpoint)",
            probe_latency.clone(),
        );
        registry.register("probe_failures", "Failed probes", probe_failures.clone());
        registry.register(
            "registrations",
            "Webhook configurations registered",
            registrations.clone(),
        );
        registry.register(
            "deregistrations",
            "Webhook configurations removed",
            deregistrations.clone(),
        );
        registry.register(
            "unresponsive_to_deregistered_seconds",
            "Time from the first failed probe (or zero ready endpoints) to the configuration's removal",
            unresponsive_to_deregistered.clone(),
        );
        registry.register("leader", "1 while this replica leads", leader.clone());
        registry.register(
            "fail_closed",
            "1 while the Initializer's configuration is registered with failurePolicy Fail (creates it matches are refused whenever it cannot answer)",
            fail_closed.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            probe_latency,
            probe_failures,
            registrations,
            deregistrations,
            unresponsive_to_deregistered,
            leader,
            fail_closed,
        }
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

    /// Records whether `initializer`'s configuration is registered with `failurePolicy: Fail`.
    pub fn set_fail_closed(&self, initializer: &str, in_force: bool) {
        self.fail_closed
            .get_or_create(&InitializerLabels {
                initializer: initializer.to_string(),
            })
            .set(i64::from(in_force));
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

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
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
}
