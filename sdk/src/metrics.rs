//! Prometheus metrics: requests and latency per kind and verdict, patch sizes, refused requests,
//! and where handlers ran. Handler runs of both modes count in the same families, told apart by
//! the `mode` label (`webhook` or `controller`), so one dashboard serves both backends; the
//! controller's writes have a family of their own (`initializer_controller_updates`).

use std::sync::{OnceLock, PoisonError, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

/// The series one kind, verdict and mode count in, kept so that answering a request finds them
/// with one short scan instead of building label sets (two string copies) and looking each
/// family up (three hashed lookups under locks).
struct Answered {
    kind: String,
    verdict: &'static str,
    mode: &'static str,
    requests: Counter,
    latency: Histogram,
    /// Made on the first patch, so that a kind never patched has no patch-size series.
    patch_bytes: OnceLock<Histogram>,
}

/// Most (kind, verdict, mode) triples kept in [`Metrics::answered`]; beyond them the families
/// are looked up as before.
const MAX_ANSWERED: usize = 64;

/// The `kind` label of everything that is not a kind this initializer handles.
pub(crate) const OTHER_KIND: &str = "other";

/// `kind` as a label value: itself when it reads as a Kubernetes kind (a letter, then letters
/// and digits, at most 63), else [`OTHER_KIND`]. Callers pass only kinds the SDK knows (handled
/// kinds, see `Initializer::kind_label`); this makes sure no value ever needs escaping in the
/// text format.
fn kind_value(kind: &str) -> &str {
    let mut chars = kind.chars();
    let reads_as_kind = kind.len() <= 63
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric());
    if reads_as_kind { kind } else { OTHER_KIND }
}

/// The initializer's metrics and their registry.
pub(crate) struct Metrics {
    answered: RwLock<Vec<Answered>>,
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RequestLabels, Histogram, fn() -> Histogram>,
    patch_bytes: Family<KindLabels, Histogram, fn() -> Histogram>,
    invalid: Family<ReasonLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    lanes: [Counter; 3],
    updates: Family<UpdateLabels, Counter>,
    conflicts: Counter,
    closed_when_full: Family<ReasonLabels, Counter>,
    body_bytes: Gauge,
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
        let closed_when_full = Family::<ReasonLabels, Counter>::default();
        let body_bytes = Gauge::default();
        registry.register(
            "request_body_bytes",
            "Bytes the server holds for request bodies being received or answered (its budget is half of the memory limit)",
            body_bytes.clone(),
        );
        registry.register(
            "connections_closed_when_full",
            "Connections closed because the server was full: evicted (an idle or half-sent one, to make room), peer_holds_its_share or all_busy (a new one, refused)",
            closed_when_full.clone(),
        );
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
            answered: RwLock::new(Vec::new()),
            registry,
            requests,
            latency,
            patch_bytes,
            invalid,
            reloads,
            lanes,
            updates,
            conflicts,
            closed_when_full,
            body_bytes,
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
        let kind = kind_value(kind);
        let verdict = verdict.as_str();
        let seen = |a: &&Answered| a.verdict == verdict && a.mode == mode && a.kind == kind;
        {
            let answered = self.answered.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(series) = answered.iter().find(seen) {
                self.record(series, elapsed, patch_len);
                return;
            }
        }
        let labels = RequestLabels {
            kind: kind.to_owned(),
            verdict,
            mode,
        };
        let series = Answered {
            requests: self.requests.get_or_create(&labels).clone(),
            latency: self.latency.get_or_create(&labels).clone(),
            kind: labels.kind,
            verdict,
            mode,
            patch_bytes: OnceLock::new(),
        };
        self.record(&series, elapsed, patch_len);
        let mut answered = self
            .answered
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // Another request may have added the same series meanwhile: the handles share the
        // families' series either way, so counts are never lost.
        if answered.len() < MAX_ANSWERED && !answered.iter().any(|a| seen(&a)) {
            answered.push(series);
        }
    }

    fn record(&self, series: &Answered, elapsed: Duration, patch_len: usize) {
        series.requests.inc();
        series.latency.observe(elapsed.as_secs_f64());
        if patch_len > 0 {
            series
                .patch_bytes
                .get_or_init(|| {
                    self.patch_bytes
                        .get_or_create(&KindLabels {
                            kind: series.kind.clone(),
                        })
                        .clone()
                })
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
                kind: kind_value(kind).to_owned(),
                result,
            })
            .inc();
    }

    /// Count one update answered 409 Conflict.
    pub(crate) fn observe_conflict(&self) {
        self.conflicts.inc();
    }

    /// The gauge of the bytes request bodies hold, which the body budget keeps.
    pub(crate) fn body_bytes(&self) -> Gauge {
        self.body_bytes.clone()
    }

    /// Count one connection closed because the server was full, by `reason`.
    pub(crate) fn observe_closed_when_full(&self, reason: &'static str) {
        self.closed_when_full
            .get_or_create(&ReasonLabels { reason })
            .inc();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn kept_series_count_into_the_same_families() {
        let metrics = Metrics::new();
        for _ in 0..3 {
            metrics.observe(
                "Pod",
                Verdict::Patched,
                Duration::from_micros(80),
                120,
                MODE_WEBHOOK,
            );
        }
        metrics.observe(
            "Pod",
            Verdict::Allowed,
            Duration::from_micros(80),
            0,
            MODE_WEBHOOK,
        );
        metrics.observe(
            "Job",
            Verdict::Allowed,
            Duration::from_micros(80),
            0,
            MODE_CONTROLLER,
        );
        let text = metrics.encode();
        assert_eq!(
            line(
                &text,
                r#"initializer_admission_requests_total{kind="Pod",verdict="patched",mode="webhook"}"#
            ),
            Some(
                r#"initializer_admission_requests_total{kind="Pod",verdict="patched",mode="webhook"} 3"#
            ),
            "{text}"
        );
        assert!(line(&text, r#"initializer_admission_requests_total{kind="Pod",verdict="allowed",mode="webhook"} 1"#).is_some(), "{text}");
        assert!(line(&text, r#"initializer_admission_duration_seconds_count{kind="Job",verdict="allowed",mode="controller"} 1"#).is_some(), "{text}");
        assert!(
            line(&text, r#"initializer_patch_bytes_count{kind="Pod"} 3"#).is_some(),
            "{text}"
        );
        // Never patched: no patch-size series.
        assert!(
            line(&text, r#"initializer_patch_bytes_count{kind="Job"}"#).is_none(),
            "{text}"
        );
    }

    #[test]
    fn kind_values_that_would_need_escaping_are_counted_as_other() {
        let metrics = Metrics::new();
        for kind in [
            "Pod\"} 1\nfake_metric{a=\"",
            "a\\b",
            "",
            "9Lives",
            &"K".repeat(64),
        ] {
            metrics.observe(kind, Verdict::Allowed, Duration::ZERO, 0, MODE_WEBHOOK);
            metrics.observe_update(kind, "released");
        }
        let text = metrics.encode();
        assert!(!text.contains("fake_metric"), "{text}");
        assert!(
            line(&text, r#"initializer_admission_requests_total{kind="other",verdict="allowed",mode="webhook"} 5"#).is_some(),
            "{text}"
        );
        assert!(
            line(
                &text,
                r#"initializer_controller_updates_total{kind="other",result="released"} 5"#
            )
            .is_some(),
            "{text}"
        );
        assert_eq!(kind_value("CronJob"), "CronJob");
    }
}
