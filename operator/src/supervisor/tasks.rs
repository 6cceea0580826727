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
    let ca_bundle = target.ca_bundle();
    let id = sup
        .inner
        .prober_count
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // What the last probe said: a change of verdict or of reason is written to the status at
    // once (a pod that stops refusing and starts panicking must not show the old reason).
    let mut last: Option<(bool, Option<probe::Failure>)> = None;
    let mut wait = Duration::ZERO;
    let mut last_start: Option<Instant> = None;
    // When the current run of excused timeouts began (crate::lag); cleared by a good probe.
    let mut excusing_since: Option<Instant> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = wake.notified() => {}
        }
        if let Some(started) = last_start {
            let since = started.elapsed();
            if since < PROBE_SPACING {
                tokio::time::sleep(PROBE_SPACING - since).await;
            }
        }
        let started = Instant::now();
        last_start = Some(started);
        // The step from here to the next wait is bounded (the probe by its budget, the
        // converge by its calls' bounds); one that outlives that is wedged.
        let _step = sup.inner.watchdog.start(
            format!("probing {} (#{id})", target.initializer),
            target.budget + PROBER_STEP_SLACK,
        );
        let endpoints = ready.borrow_and_update().clone().unwrap_or_default();
        let round = Round {
            service: &target.service,
            namespace: &target.namespace,
            ca_bundle: &ca_bundle,
            endpoints: &endpoints,
            target: &target.probe,
            user: &sup.inner.probe_user,
            budget: target.budget,
        };
        let probed = target.registration.probe(&sup, &round, target.budget).await;
        let outcome = match probed {
            Err(outcome) => outcome,
            Ok(results) => {
                // Judged against the endpoints ready now: one that left meanwhile (a pod
                // shutting down in a rollout) no longer gets the API server's calls.
                let now_ready = ready.borrow().clone().unwrap_or_default();
                let results = probe::still_ready(results, &now_ready);
                if results.is_empty() && !now_ready.is_empty() {
                    // Every endpoint probed has gone: probe the ones that replaced them.
                    wait = Duration::ZERO;
                    continue;
                }
                probe::combine(&results)
            }
        };
        if outcome.ok {
            excusing_since = None;
        } else if outcome.failure == Some(probe::Failure::TimedOut) {
            // A timeout while the operator itself was starved is not the initializer's fault:
            // probe again soon instead of failing it open, for a bounded time (crate::lag).
            // A stall that ended with the probe is recorded at the meter's next tick.
            tokio::time::sleep(lag::TICK).await;
            let now = Instant::now();
            let stalled = sup.inner.lag.longest_within(started, now);
            if lag::excused(stalled, target.budget, excusing_since, now) {
                excusing_since.get_or_insert(now);
                sup.inner.metrics.probe_excused(&target.initializer);
                info!(initializer = %target.initializer, stalled_ms = stalled.as_millis() as u64, "probe timed out while the operator stalled: not counted");
                wait = EXCUSED_RETRY;
                continue;
            }
        }
        let Some(entry) = entry.upgrade() else {
            return;
        };
        sup.inner
            .metrics
            .probe(&target.initializer, outcome.latency, outcome.ok);
        sup.known(&target.initializer, |known| {
            known.served = Some((ca_bundle.clone(), outcome.ok && outcome.current_ca));
        });
        debug!(initializer = %target.initializer, ok = outcome.ok, latency_ms = outcome.latency.as_millis() as u64, message = %outcome.message, "probe");
        {
            let mut st = entry.state.lock().await;
            st.last_probe = Some(ProbeRecord {
                at: Timestamp::now(),
                latency: outcome.latency,
                ok: outcome.ok,
                message: outcome.message.clone(),
                failure: outcome.failure,
            });
        }
        let input = if outcome.ok {
            Input::ProbeSucceeded
        } else {
            Input::ProbeFailed
        };
        let said = (outcome.ok, outcome.failure);
        let changed = last != Some(said);
        last = Some(said);
        wait = sup.observe(&entry, input, changed).await;
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
