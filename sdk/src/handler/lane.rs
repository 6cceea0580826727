//! Where a synchronous handler runs. Handing each run to tokio's blocking pool costs two thread
//! wake-ups per review, more CPU than the handler's own work, so a handler runs as a task on
//! the async workers when that is safe: on a multi-threaded runtime, at most `workers - 1` at
//! once. At least one worker then never runs a handler and keeps serving connections and firing
//! timers, so the budget still answers for a handler that hangs.
//!
//! A run that finds every worker slot taken waits for one, for a short while: a handler normally
//! takes microseconds, so the slot frees long before [`PATIENCE`], and waiting is far cheaper
//! than the thread hand-off (under saturating load on two cores, one run in eight found the slot
//! taken and went to the blocking pool, which cost about 6 % of the server's CPU). A slot still
//! taken after that means a handler hangs or is slow; the run then goes to the blocking pool,
//! so one stuck handler delays others by at most [`PATIENCE`] and never blocks them. A
//! current-thread runtime or a single worker always uses the blocking pool.
//!
//! Justified by: sdk/README.md, "The biggest costs found", row "thread wake-ups per review"
//! (runs on the blocking pool 13 % → 0 under saturation; futex calls 10.2 % → 1.5–1.7 % of the CPU).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a run waits for a worker slot before it goes to the blocking pool: a thousand times
/// a typical handler's run, and small beside a webhook's budget (seconds).
pub(crate) const PATIENCE: Duration = Duration::from_millis(10);

/// Where one handler run goes.
#[derive(Debug)]
pub(crate) enum Lane {
    /// A task on the async workers, holding one of the worker slots until it ends.
    Worker(Slot),
    /// tokio's blocking pool.
    Blocking,
}

/// The worker slots of one initializer, sized by the runtime it first runs on.
#[derive(Debug)]
pub(crate) struct Lanes {
    slots: OnceLock<Slots>,
    patience: Duration,
}

impl Default for Lanes {
    fn default() -> Self {
        Self::with_patience(PATIENCE)
    }
}

#[derive(Debug)]
struct Slots {
    /// All the slots: workers minus one (zero on a current-thread runtime).
    capacity: usize,
    free: Arc<Semaphore>,
}

/// A worker slot, given back when dropped (when the run ends, also by a panic).
#[derive(Debug)]
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

/// How many handlers may run on the workers of a runtime: all workers but one.
pub(crate) fn worker_slots(flavor: RuntimeFlavor, workers: usize) -> usize {
    match flavor {
        RuntimeFlavor::MultiThread => workers.saturating_sub(1),
        _ => 0,
    }
}

impl Lanes {
    /// Lanes whose runs wait up to `patience` for a worker slot.
    pub(crate) fn with_patience(patience: Duration) -> Self {
        Self {
            slots: OnceLock::new(),
            patience,
        }
    }

    /// The lane for the next run on the current runtime: a free worker slot, else one that
    /// frees within [`PATIENCE`], else the blocking pool.
    pub(crate) async fn choose(&self) -> Lane {
        let Some(slots) = self.slots() else {
            return Lane::Blocking;
        };
        if slots.capacity == 0 {
            return Lane::Blocking;
        }
        let free = &slots.free;
        if let Ok(permit) = Arc::clone(free).try_acquire_owned() {
            return Lane::Worker(Slot { _permit: permit });
        }
        match tokio::time::timeout(self.patience, Arc::clone(free).acquire_owned()).await {
            Ok(Ok(permit)) => Lane::Worker(Slot { _permit: permit }),
            // Still taken: a slow or stuck handler holds it. (The semaphore is never closed.)
            Ok(Err(_)) | Err(_) => Lane::Blocking,
        }
    }

    /// The slots, sized on the first call from inside a runtime.
    fn slots(&self) -> Option<&Slots> {
        if let Some(slots) = self.slots.get() {
            return Some(slots);
        }
        let handle = Handle::try_current().ok()?;
        let capacity = worker_slots(handle.runtime_flavor(), handle.metrics().num_workers());
        Some(self.slots.get_or_init(|| Slots {
            capacity,
            free: Arc::new(Semaphore::new(capacity)),
        }))
    }

    /// Runs holding a worker slot now.
    #[cfg(test)]
    pub(crate) fn busy(&self) -> usize {
        self.slots
            .get()
            .map_or(0, |s| s.capacity - s.free.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_always_stays_free_of_handlers() {
        assert_eq!(worker_slots(RuntimeFlavor::MultiThread, 2), 1);
        assert_eq!(worker_slots(RuntimeFlavor::MultiThread, 8), 7);
        assert_eq!(worker_slots(RuntimeFlavor::MultiThread, 1), 0);
        assert_eq!(worker_slots(RuntimeFlavor::CurrentThread, 1), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 3)]
    async fn slots_are_taken_up_to_the_limit_and_given_back_on_drop() {
        let lanes = Lanes::default();
        let a = lanes.choose().await;
        let b = lanes.choose().await;
        assert!(matches!(a, Lane::Worker(_)));
        assert!(matches!(b, Lane::Worker(_)));
        assert_eq!(lanes.busy(), 2);
        drop(a);
        assert_eq!(lanes.busy(), 1);
        assert!(matches!(lanes.choose().await, Lane::Worker(_)));
        drop(b);
        assert_eq!(lanes.busy(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_waits_for_a_slot_that_frees_soon() {
        // A patience no loaded machine outlasts: the second run must get the slot, not the pool.
        let lanes = Arc::new(Lanes::with_patience(Duration::from_secs(60)));
        let held = lanes.choose().await;
        assert!(matches!(held, Lane::Worker(_)));
        let waiting = {
            let lanes = Arc::clone(&lanes);
            tokio::spawn(async move { lanes.choose().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(held);
        assert!(matches!(waiting.await.unwrap(), Lane::Worker(_)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slot_held_past_the_patience_sends_the_run_to_the_blocking_pool() {
        let lanes = Lanes::default();
        let held = lanes.choose().await;
        let start = std::time::Instant::now();
        assert!(matches!(lanes.choose().await, Lane::Blocking));
        assert!(start.elapsed() >= PATIENCE, "{:?}", start.elapsed());
        drop(held);
        assert!(matches!(lanes.choose().await, Lane::Worker(_)));
    }

    #[tokio::test]
    async fn a_current_thread_runtime_always_uses_the_blocking_pool() {
        let lanes = Lanes::default();
        let start = std::time::Instant::now();
        assert!(matches!(lanes.choose().await, Lane::Blocking));
        assert!(start.elapsed() < PATIENCE, "waited {:?}", start.elapsed());
        assert_eq!(lanes.busy(), 0);
    }

    #[test]
    fn outside_a_runtime_the_blocking_pool_is_chosen() {
        let lanes = Lanes::default();
        let lane = futures::FutureExt::now_or_never(lanes.choose());
        assert!(matches!(lane, Some(Lane::Blocking)));
    }
}
