//! The two tasks of one supervised Initializer: the prober (a dry-run review to every ready
//! endpoint, or with the `InitializerConfiguration` backend a canary object through the API
//! server, as often as the health machine asks) and the endpoint watcher (the ready endpoints of
//! its Service, from the namespace's shared EndpointSlice watch in `slices`, handed to the
//! prober; none at all deregisters at once).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tokio::sync::{Notify, watch};
use tracing::{debug, info};

use super::{
    PROBE_SPACING, PROBER_STEP_SLACK, ReadyEndpoints, Supervised, Supervision, Supervisor,
};
use crate::health::Input;
use crate::lag;
use crate::probe::{self, Round};
use crate::status::ProbeRecord;

/// When to probe again after an excused timeout: soon, but not at the fast interval, which
/// would add to the load that starved the operator.
const EXCUSED_RETRY: Duration = Duration::from_secs(1);

pub(super) async fn prober(
    sup: Supervisor,
    entry: std::sync::Weak<Supervised>,
    wake: Arc<Notify>,
    mut ready: watch::Receiver<ReadyEndpoints>,
    target: Supervision,
) {
    // Probing before the endpoints are known would fail for want of them, and degrade a
    // registration adopted after a restart.
    if ready.wait_for(Option::is_some).await.is_err() {
        return;
    }
    let mut prober = Prober::new(sup, target);
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = wake.notified() => {}
        }
        let started = prober.pace().await;
        // The step from here to the next wait is bounded (the probe by its budget, the
        // converge by its calls' bounds); one that outlives that is wedged.
        let _step = prober.sup.inner.watchdog.start(
            format!("probing {} (#{})", prober.target.initializer, prober.id),
            prober.target.budget + PROBER_STEP_SLACK,
        );
        wait = match prober.probe(&mut ready, started).await {
            Probed::Again(after) => after,
            Probed::Judged(outcome) => {
                let Some(entry) = entry.upgrade() else {
                    return;
                };
                prober.report(&entry, outcome).await
            }
        };
    }
}

/// What one probe round came to.
enum Probed {
    /// Nothing to judge: probe again after this long (every endpoint probed left, or a timeout
    /// the operator's own stall excuses).
    Again(Duration),
    /// A verdict for the health machine.
    Judged(probe::Outcome),
}

/// One prober's memory from round to round.
struct Prober {
    sup: Supervisor,
    target: Supervision,
    ca_bundle: Vec<u8>,
    /// Tells this prober from the ones before it in the watchdog's reports.
    id: u64,
    /// What the last verdict said: a change of verdict or of reason is written to the status at
    /// once (a pod that stops refusing and starts panicking must not show the old reason).
    last_said: Option<(bool, Option<probe::Failure>)>,
    last_start: Option<Instant>,
    /// When the current run of excused timeouts began (crate::lag); cleared by a good probe.
    excusing_since: Option<Instant>,
}

impl Prober {
    fn new(sup: Supervisor, target: Supervision) -> Self {
        let id = sup
            .inner
            .prober_count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            ca_bundle: target.ca_bundle(),
            sup,
            target,
            id,
            last_said: None,
            last_start: None,
            excusing_since: None,
        }
    }

    /// Waits until [`PROBE_SPACING`] has passed since the last round started; returns when this
    /// one starts.
    async fn pace(&mut self) -> Instant {
        if let Some(since) = self.last_start.map(|started| started.elapsed())
            && since < PROBE_SPACING
        {
            tokio::time::sleep(PROBE_SPACING - since).await;
        }
        let started = Instant::now();
        self.last_start = Some(started);
        started
    }

    /// Probes the endpoints ready now, judged against those still ready when the answers are
    /// in: one that left meanwhile (a pod shutting down in a rollout) no longer gets the API
    /// server's calls.
    async fn probe(
        &mut self,
        ready: &mut watch::Receiver<ReadyEndpoints>,
        started: Instant,
    ) -> Probed {
        let endpoints = ready.borrow_and_update().clone().unwrap_or_default();
        let round = Round {
            service: &self.target.service,
            namespace: &self.target.namespace,
            ca_bundle: &self.ca_bundle,
            endpoints: &endpoints,
            target: &self.target.probe,
            user: &self.sup.inner.probe_user,
            budget: self.target.budget,
        };
        let probed = self
            .target
            .registration
            .probe(&self.sup, &round, self.target.budget)
            .await;
        let outcome = match probed {
            Err(outcome) => outcome,
            Ok(results) => {
                let now_ready = ready.borrow().clone().unwrap_or_default();
                let results = probe::still_ready(results, &now_ready);
                if results.is_empty() && !now_ready.is_empty() {
                    // Every endpoint probed has gone: probe the ones that replaced them.
                    return Probed::Again(Duration::ZERO);
                }
                probe::combine(&results)
            }
        };
        if outcome.ok {
            self.excusing_since = None;
        } else if outcome.failure == Some(probe::Failure::TimedOut) && self.excused(started).await {
            return Probed::Again(EXCUSED_RETRY);
        }
        Probed::Judged(outcome)
    }

    /// Whether a timeout of the round that began at `started` came while the operator itself
    /// was starved: then it is not the initializer's fault, and it is probed again soon instead
    /// of failed open, for a bounded time (crate::lag).
    async fn excused(&mut self, started: Instant) -> bool {
        // A stall that ended with the probe is recorded at the meter's next tick.
        tokio::time::sleep(lag::TICK).await;
        let now = Instant::now();
        let stalled = self.sup.inner.lag.longest_within(started, now);
        if !lag::excused(stalled, self.target.budget, self.excusing_since, now) {
            return false;
        }
        self.excusing_since.get_or_insert(now);
        self.sup
            .inner
            .metrics
            .probe_excused(&self.target.initializer);
        info!(initializer = %self.target.initializer, stalled_ms = stalled.as_millis() as u64, "probe timed out while the operator stalled: not counted");
        true
    }

    /// Records the verdict (metrics, the status's probe record, whether the current CA is
    /// served) and feeds it to the health machine; returns when the next round is due.
    async fn report(&mut self, entry: &Arc<Supervised>, outcome: probe::Outcome) -> Duration {
        let name = &self.target.initializer;
        self.sup
            .inner
            .metrics
            .probe(name, outcome.latency, outcome.ok);
        let served = (self.ca_bundle.clone(), outcome.ok && outcome.current_ca);
        self.sup.known(name, |known| known.served = Some(served));
        debug!(initializer = %name, ok = outcome.ok, latency_ms = outcome.latency.as_millis() as u64, message = %outcome.message, "probe");
        entry.state.lock().await.last_probe = Some(ProbeRecord {
            at: Timestamp::now(),
            latency: outcome.latency,
            ok: outcome.ok,
            message: outcome.message.clone(),
            failure: outcome.failure,
        });
        let input = if outcome.ok {
            Input::ProbeSucceeded
        } else {
            Input::ProbeFailed
        };
        let said = (outcome.ok, outcome.failure);
        let changed = self.last_said.replace(said) != Some(said);
        self.sup.observe(entry, input, changed).await
    }
}

pub(super) async fn endpoints(
    sup: Supervisor,
    entry: std::sync::Weak<Supervised>,
    ready_tx: watch::Sender<ReadyEndpoints>,
    target: Supervision,
) {
    let mut subscription = sup
        .inner
        .endpoint_slices
        .subscribe(&target.namespace, &target.service);
    let mut last: Option<u32> = None;
    // The value present at subscription counts as a change: it may already be listed.
    subscription.slices.mark_changed();
    while subscription.slices.changed().await.is_ok() {
        let Some(slices) = subscription.slices.borrow_and_update().clone() else {
            continue;
        };
        let mut addresses: Vec<SocketAddr> = slices
            .values()
            .flat_map(|(_, a)| a.iter().copied())
            .collect();
        addresses.sort();
        addresses.dedup();
        let moved = ready_tx.send_if_modified(|current| {
            let changed = current.as_ref() != Some(&addresses);
            if changed {
                *current = Some(addresses);
            }
            changed
        });
        let ready: u32 = slices.values().map(|(n, _)| n).sum();
        if last == Some(ready) {
            if moved && ready > 0 {
                // Other pods, as many: probe the new ones now.
                if let Some(entry) = entry.upgrade() {
                    entry.wake.notify_one();
                }
            }
            continue;
        }
        last = Some(ready);
        let Some(entry) = entry.upgrade() else {
            return;
        };
        debug!(initializer = %target.initializer, ready, "ready endpoints");
        sup.observe(&entry, Input::Endpoints(ready), ready == 0)
            .await;
        if ready > 0 {
            // Probe the new endpoints now rather than at the end of a slow wait.
            entry.wake.notify_one();
        }
    }
}
