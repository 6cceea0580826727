//! One supervised Initializer's entry: made on its first sync (its status, outage and fail-open
//! window taken over from what the API server holds, so a restart or a new leader resumes where
//! the last left off) and its two tasks (the prober and the endpoint watcher, in `tasks`),
//! started again whenever what they watch changes.

use std::sync::Arc;
use std::time::Instant;

use initializer_crds::constants::RELEASED_OBJECTS_DETAIL;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::apply;
use crate::error::Result;
use crate::health::Machine;
use crate::status;

use super::tasks::{endpoints, prober};
use crate::backend::Live;

use super::{
    FallbackRun, OutageLog, PendingChange, Presence, RemovalRetry, RouteChecks, StatusFence,
    Supervised, SupervisedState, Supervision, Supervisor, bounded, resumed_window,
    validate_fallback_name,
};

impl Supervisor {
    pub(super) async fn new_entry(&self, target: &Supervision) -> Result<Arc<Supervised>> {
        let configuration = target.configuration();
        let mut machine = Machine::new(target.health);
        // After an operator restart the configuration may already be registered (maybe
        // degraded): adopt it so failures remove it, instead of removing a healthy one.
        let found = bounded(|| format!("read {configuration}"), self.live(target)).await?;
        let presence = match found {
            Live::Absent | Live::NotOurs => Presence::Absent,
            Live::Ours(found) => Presence::found(&found),
        };
        let stored = target.stored_status.as_ref();
        // A proving configuration is not adopted: the route is proven again, or the
        // configuration removed, by the first converge.
        if presence.is_registered() {
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
        let entry = Supervised::start(
            self,
            SupervisedState {
                machine,
                target: target.clone(),
                last_probe: None,
                applied: None,
                presence,
                pending: PendingChange::default(),
                outage: OutageLog {
                    last: stored.and_then(|s| s.last_outage.clone()),
                    window_from,
                    missed: stored.and_then(|s| s.missed_initializations.clone()),
                    released: stored
                        .and_then(|s| s.details.get(RELEASED_OBJECTS_DETAIL))
                        .and_then(|n| n.parse().ok()),
                },
                fallback,
                removal_retry: RemovalRetry::None,
                route: RouteChecks::default(),
                status: StatusFence::new(target.stored_version.clone()),
                stopped: CancellationToken::new(),
            },
        );
        Ok(self
            .entries()
            .entry(target.initializer.clone())
            .or_insert(entry)
            .clone())
    }

    pub(super) fn ensure_tasks(&self, entry: &Arc<Supervised>, target: &Supervision) {
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
}
