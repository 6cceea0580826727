//! Prometheus metrics: requests and latency per kind and verdict, patch sizes, refused requests,
//! and where handlers ran. Handler runs of both modes count in the same families, told apart by
//! the `mode` label (`webhook` or `controller`), so one dashboard serves both backends; the
//! controller's writes have a family of their own (`initializer_controller_updates`).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::review::Verdict;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    kind: String,
    verdict: &'static str,
    mode: &'static str,
}

/// Handler runs for the webhook's admission reviews.
pub(crate) const MODE_WEBHOOK: &str = "webhook";
/// Handler runs for objects the controller mode found pending on this initializer.
pub(crate) const MODE_CONTROLLER: &str = "controller";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpdateLabels {
    kind: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    what: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneLabels {
    lane: &'static str,
}

/// A handler ran as a task on the async workers.
pub(crate) const LANE_WORKER: usize = 0;
/// A handler ran on tokio's blocking pool.
pub(crate) const LANE_BLOCKING: usize = 1;
/// A handler ran inside its connection's task (`inline_handlers`).
pub(crate) const LANE_INLINE: usize = 2;
const LANES: [&str; 3] = ["worker", "blocking_pool", "inline"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

fn latency_histogram() -> Histogram {
    // 50 µs to about 1.6 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

fn size_histogram() -> Histogram {
    // 64 B to 128 KiB.
    Histogram::new(exponential_buckets(64.0, 2.0, 12))
}

/// The initializer's metrics and their registry.
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RequestLabels, Histogram, fn() -> Histogram>,
    patch_bytes: Family<KindLabels, Histogram, fn() -> Histogram>,
    invalid: Family<ReasonLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    lanes: [Counter; 3],
    updates: Family<UpdateLabels, Counter>,
    conflicts: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Fresh metrics registered under the `initializer` prefix.
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("initializer");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RequestLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let patch_bytes = Family::<KindLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            size_histogram,
        );
        let invalid = Family::<ReasonLabels, Counter>::default();
        let reloads = Family::<ReloadLabels, Counter>::default();
        let handler_runs = Family::<LaneLabels, Counter>::default();
        let lanes = LANES.map(|lane| handler_runs.get_or_create_owned(&LaneLabels { lane }));
        registry.register(
            "reloads",
            "Certificate and configuration files read after a change, by what and result",
            reloads.clone(),
        );
        let updates = Family::<UpdateLabels, Counter>::default();
        let conflicts = Counter::default();
        registry.register(
            "controller_updates",
            "Controller mode: objects written back (the name removed, or a failure result set), by kind and result (mutated, unchanged, released, denied, failed, failed_open), or given up (gave_up)",
            updates.clone(),
        );
        registry.register(
            "controller_conflicts",
            "Controller mode: updates answered 409 Conflict, each followed by a fresh read and a redo",
            conflicts.clone(),
        );
        registry.register(
            "admission_requests",
            "Handler runs answered, by kind, verdict and mode (webhook: admission reviews; controller: pending objects)",
            requests.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "Time from the review's arrival (or the handler's start, in controller mode) to its answer, by kind, verdict and mode",
            latency.clone(),
        );
        registry.register(
            "patch_bytes",
            "Size of the JSON patches returned, by kind",
            patch_bytes.clone(),
        );
        registry.register(
            "invalid_requests",
            "Requests refused with an HTTP error because they are not valid admission reviews",
            invalid.clone(),
        );
        registry.register(
            "handler_runs",
            "Synchronous handler runs by where they ran: worker (a task on the async workers), blocking_pool, or inline",
            handler_runs,
        );
        Self {
            registry,
            requests,
            latency,
            patch_bytes,
            invalid,
            reloads,
            lanes,
            updates,
            conflicts,
        }
    }

    /// Count one answered review (`mode` is [`MODE_WEBHOOK`] or [`MODE_CONTROLLER`]).
    pub(crate) fn observe(
        &self,
        kind: &str,
        verdict: Verdict,
        elapsed: Duration,
        patch_len: usize,
        mode: &'static str,
    ) {
        let labels = RequestLabels {
            kind: kind.to_owned(),
            verdict: verdict.as_str(),
            mode,
        };
        self.requests.get_or_create(&labels).inc();
        self.latency
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if patch_len > 0 {
            self.patch_bytes
                .get_or_create(&KindLabels { kind: labels.kind })
                .observe(patch_len as f64);
        }
    }

    /// Count one reload of `what` (`certificate` or `configuration`) with `result`
    /// (`applied` or `rejected`).
    pub(crate) fn observe_reload(&self, what: &'static str, result: &'static str) {
        self.reloads
            .get_or_create(&ReloadLabels { what, result })
            .inc();
    }

    /// Count one handler run in `lane` (one of the `LANE_` constants).
    pub(crate) fn observe_lane(&self, lane: usize) {
        if let Some(counter) = self.lanes.get(lane) {
            counter.inc();
        }
    }

    /// Count one object the controller wrote back (or gave up on), by `result`.
    pub(crate) fn observe_update(&self, kind: &str, result: &'static str) {
        self.updates
            .get_or_create(&UpdateLabels {
                kind: kind.to_owned(),
                result,
            })
            .inc();
    }

    /// Count one update answered 409 Conflict.
    pub(crate) fn observe_conflict(&self) {
        self.conflicts.inc();
    }

    /// Count one refused (HTTP error) request.
    pub(crate) fn observe_invalid(&self, reason: &'static str) {
        self.invalid.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// The metrics in the Prometheus text format.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
