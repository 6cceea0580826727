//! The operator's own lag: whether it was starved while a probe ran, so that a machine too busy
//! to run the operator does not fail healthy initializers open (issue 29, "saturation must not
//! become churn").
//!
//! A probe that times out may be the initializer's fault (hung, overloaded) or the operator's:
//! when the operator's runtime cannot run its tasks (too many of them, or a machine with no CPU
//! to spare), the probe's TLS handshake and the reading of the answer wait too, and the budget
//! runs out with the initializer's answer sent. The operator tells the two apart by its own
//! clock: a task wakes every [`TICK`] and records how late it woke. A tick later than [`STALL`]
//! is a stall, a time when nothing of the operator ran.
//!
//! [`excused`] (pure) decides: a timed-out probe during which the operator stalled for a fifth of
//! the budget or more is not counted against the initializer. The excuse is bounded
//! ([`MAX_EXCUSED`]): an initializer that is really hung while the operator is starved is
//! failed open all the same, at most that much later, so a starved operator never keeps a
//! dead webhook in the path of creates.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::task::AbortHandle;

/// How often the meter's task asks to be woken.
pub const TICK: Duration = Duration::from_millis(50);

/// A tick this late (or later) is a stall: the operator did not run for that long.
pub const STALL: Duration = Duration::from_millis(100);

/// How long an initializer's timed-out probes may be excused in a row; after that they count.
pub const MAX_EXCUSED: Duration = Duration::from_secs(10);

/// How long stalls are remembered (longer than any probe budget).
const KEEP: Duration = Duration::from_secs(60);

/// The stalls seen recently, each from when its tick was due to when it woke (pure).
#[derive(Debug, Default)]
pub struct Stalls {
    recent: VecDeque<(Instant, Instant)>,
}

impl Stalls {
    /// A tick due at `due` woke at `woke`.
    pub fn record(&mut self, due: Instant, woke: Instant) {
        if woke.saturating_duration_since(due) >= STALL {
            self.recent.push_back((due, woke));
        }
        while self
            .recent
            .front()
            .is_some_and(|(_, end)| woke.saturating_duration_since(*end) > KEEP)
        {
            self.recent.pop_front();
        }
    }

    /// The longest stall that overlapped `from..to` (zero if none).
    pub fn longest_within(&self, from: Instant, to: Instant) -> Duration {
        self.recent
            .iter()
            .filter(|(start, end)| *start < to && *end > from)
            .map(|(start, end)| end.saturating_duration_since(*start))
            .max()
            .unwrap_or_default()
    }
}

/// Whether a probe that timed out after `budget`, while the operator stalled for `stalled`,
/// is the operator's fault and so not counted; `excusing_since` is when this initializer's
/// current run of excused probes began (`None` if the last probe counted).
pub fn excused(
    stalled: Duration,
    budget: Duration,
    excusing_since: Option<Instant>,
    now: Instant,
) -> bool {
    let starved = stalled >= STALL && stalled >= budget / 5;
    let within_bound =
        excusing_since.is_none_or(|since| now.saturating_duration_since(since) < MAX_EXCUSED);
    starved && within_bound
}

/// The meter: [`Stalls`] kept by a task that runs from the first [`LagMeter::start`] until
/// the meter is dropped.
#[derive(Debug, Default)]
pub struct LagMeter {
    stalls: Arc<Mutex<Stalls>>,
    task: OnceLock<AbortHandle>,
}

impl LagMeter {
    /// A meter not yet running.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the ticking task (once; later calls do nothing). Call it inside the runtime whose
    /// lag it measures.
    pub fn start(&self) {
        self.task.get_or_init(|| {
            let stalls = self.stalls.clone();
            tokio::spawn(async move {
                loop {
                    let due = Instant::now() + TICK;
                    tokio::time::sleep_until(due.into()).await;
                    stalls
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .record(due, Instant::now());
                }
            })
            .abort_handle()
        });
    }

    /// The longest stall that overlapped `from..to`. A stall still in progress is seen only
    /// once it ends: wait one [`TICK`] before asking about a window that ends now.
    pub fn longest_within(&self, from: Instant, to: Instant) -> Duration {
        self.stalls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .longest_within(from, to)
    }
}

impl Drop for LagMeter {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn only_a_tick_late_by_a_stall_or_more_is_remembered() {
        let t0 = Instant::now();
        let mut stalls = Stalls::default();
        stalls.record(t0, t0 + 60 * MS);
        assert_eq!(stalls.longest_within(t0, t0 + 1000 * MS), Duration::ZERO);
        stalls.record(t0 + 100 * MS, t0 + 400 * MS);
        assert_eq!(stalls.longest_within(t0, t0 + 1000 * MS), 300 * MS);
    }

    #[test]
    fn a_stall_counts_for_a_probe_only_if_it_overlapped_the_probe() {
        let t0 = Instant::now();
        let mut stalls = Stalls::default();
        stalls.record(t0 + 1000 * MS, t0 + 1500 * MS);
        assert_eq!(
            stalls.longest_within(t0, t0 + 900 * MS),
            Duration::ZERO,
            "before"
        );
        assert_eq!(
            stalls.longest_within(t0 + 1600 * MS, t0 + 2000 * MS),
            Duration::ZERO,
            "after"
        );
        assert_eq!(
            stalls.longest_within(t0 + 1400 * MS, t0 + 1900 * MS),
            500 * MS
        );
        assert_eq!(
            stalls.longest_within(t0 + 500 * MS, t0 + 1100 * MS),
            500 * MS
        );
    }

    #[test]
    fn stalls_older_than_a_minute_are_forgotten() {
        let t0 = Instant::now();
        let mut stalls = Stalls::default();
        stalls.record(t0, t0 + 200 * MS);
        stalls.record(t0 + 61 * 1000 * MS, t0 + 61 * 1000 * MS);
        assert_eq!(stalls.recent.len(), 0);
    }

    #[test]
    fn a_timeout_is_excused_only_when_the_operator_stalled_for_a_fifth_of_the_budget() {
        let now = Instant::now();
        let budget = 500 * MS;
        assert!(excused(100 * MS, budget, None, now));
        assert!(!excused(99 * MS, budget, None, now), "shorter than a stall");
        assert!(
            !excused(150 * MS, 1000 * MS, None, now),
            "short for a long budget"
        );
        assert!(excused(200 * MS, 1000 * MS, None, now));
        assert!(
            !excused(Duration::ZERO, budget, None, now),
            "the operator ran: the initializer's fault"
        );
    }

    #[test]
    fn a_starved_operator_excuses_an_initializer_for_a_bounded_time_only() {
        let since = Instant::now();
        let budget = 500 * MS;
        assert!(excused(
            400 * MS,
            budget,
            Some(since),
            since + MAX_EXCUSED - MS
        ));
        assert!(
            !excused(400 * MS, budget, Some(since), since + MAX_EXCUSED),
            "a hung initializer is failed open all the same, at most MAX_EXCUSED later"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_meter_sees_its_runtime_blocked() {
        let meter = LagMeter::new();
        meter.start();
        tokio::time::sleep(2 * TICK).await;
        let from = Instant::now();
        // Blocks the only thread of this runtime: the meter's tick cannot run meanwhile.
        std::thread::sleep(300 * MS);
        tokio::time::sleep(2 * TICK).await;
        let stalled = meter.longest_within(from, Instant::now());
        assert!(stalled >= 250 * MS, "saw {stalled:?}");
    }
}
