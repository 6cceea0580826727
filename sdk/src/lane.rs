//! Where a synchronous handler runs. Handing each run to tokio's blocking pool costs two thread
//! wake-ups per review, more CPU than the handler's own work, so a handler runs as a task on
//! the async workers when that is safe: on a multi-threaded runtime, while fewer than
//! `workers - 1` handlers run there. At least one worker then never runs a handler and keeps
//! serving connections and firing timers, so the budget still answers for a handler that hangs;
//! the hung run keeps its slot, and later runs go to the blocking pool. A current-thread runtime
//! or a single worker always uses the blocking pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::{Handle, RuntimeFlavor};

/// Where one handler run goes.
#[derive(Debug)]
pub(crate) enum Lane {
    /// A task on the async workers, holding one of the worker slots until it ends.
    Worker(Slot),
    /// tokio's blocking pool.
    Blocking,
}

/// The worker slots of one initializer.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    busy: AtomicUsize,
}

/// A worker slot, given back when dropped (when the run ends, also by a panic).
#[derive(Debug)]
pub(crate) struct Slot(Arc<Lanes>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How many handlers may run on the workers of a runtime: all workers but one.
pub(crate) fn worker_slots(flavor: RuntimeFlavor, workers: usize) -> usize {
    match flavor {
        RuntimeFlavor::MultiThread => workers.saturating_sub(1),
        _ => 0,
    }
}

impl Lanes {
    /// The lane for the next run on the current runtime.
    pub(crate) fn choose(self: &Arc<Self>) -> Lane {
        let Ok(handle) = Handle::try_current() else {
            return Lane::Blocking;
        };
        let slots = worker_slots(handle.runtime_flavor(), handle.metrics().num_workers());
        match self.take(slots) {
            true => Lane::Worker(Slot(Arc::clone(self))),
            false => Lane::Blocking,
        }
    }

    fn take(&self, slots: usize) -> bool {
        self.busy
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < slots).then_some(n + 1)
            })
            .is_ok()
    }

    /// Runs holding a worker slot now.
    #[cfg(test)]
    pub(crate) fn busy(&self) -> usize {
        self.busy.load(Ordering::Acquire)
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
        let lanes = Arc::new(Lanes::default());
        let a = lanes.choose();
        let b = lanes.choose();
        let c = lanes.choose();
        assert!(matches!(a, Lane::Worker(_)));
        assert!(matches!(b, Lane::Worker(_)));
        assert!(matches!(c, Lane::Blocking));
        assert_eq!(lanes.busy(), 2);
        drop(a);
        assert_eq!(lanes.busy(), 1);
        assert!(matches!(lanes.choose(), Lane::Worker(_)));
        drop(b);
        assert_eq!(lanes.busy(), 0);
    }

    #[tokio::test]
    async fn a_current_thread_runtime_always_uses_the_blocking_pool() {
        let lanes = Arc::new(Lanes::default());
        assert!(matches!(lanes.choose(), Lane::Blocking));
        assert_eq!(lanes.busy(), 0);
    }

    #[test]
    fn outside_a_runtime_the_blocking_pool_is_chosen() {
        let lanes = Arc::new(Lanes::default());
        assert!(matches!(lanes.choose(), Lane::Blocking));
    }
}
