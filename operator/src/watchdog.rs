//! Notices a wedged loop. Each reconcile and each prober loop says, before it starts a step,
//! how long that step may take; a step still unfinished after that is overdue, and `/healthz`
//! turns unhealthy so the kubelet restarts the operator. An idle loop is never overdue: only a
//! step in progress is judged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The steps in progress and when each becomes overdue.
#[derive(Clone, Debug, Default)]
pub struct Watchdog {
    deadlines: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Watchdog {
    /// A watchdog with nothing in progress.
    pub fn new() -> Self {
        Self::default()
    }

    fn deadlines(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        // A poisoned map only means a panic elsewhere; the map itself is still consistent.
        self.deadlines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Step `key` starts now and must finish within `within`; the returned guard marks it
    /// finished when dropped (also on early return or panic).
    pub fn start(&self, key: impl Into<String>, within: Duration) -> Step {
        let key = key.into();
        self.expect(&key, Instant::now() + within);
        Step {
            watchdog: self.clone(),
            key,
        }
    }

    /// Step `key` must be finished by `deadline` (a later call moves it).
    pub fn expect(&self, key: &str, deadline: Instant) {
        self.deadlines().insert(key.to_string(), deadline);
    }

    /// Step `key` finished (or its loop stopped).
    pub fn finish(&self, key: &str) {
        self.deadlines().remove(key);
    }

    /// The steps overdue at `now`, sorted.
    pub fn overdue(&self, now: Instant) -> Vec<String> {
        let mut late: Vec<String> = self
            .deadlines()
            .iter()
            .filter(|(_, deadline)| now > **deadline)
            .map(|(key, _)| key.clone())
            .collect();
        late.sort();
        late
    }
}

/// A step in progress; finished when dropped.
#[derive(Debug)]
pub struct Step {
    watchdog: Watchdog,
    key: String,
}

impl Drop for Step {
    fn drop(&mut self) {
        self.watchdog.finish(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_step_still_running_past_its_bound_is_overdue() {
        let watchdog = Watchdog::new();
        let now = Instant::now();
        assert!(watchdog.overdue(now).is_empty(), "idle is not wedged");
        let step = watchdog.start("reconcile:guard", Duration::from_secs(60));
        assert!(watchdog.overdue(now + Duration::from_secs(59)).is_empty());
        assert_eq!(
            watchdog.overdue(now + Duration::from_secs(61)),
            vec!["reconcile:guard".to_string()]
        );
        drop(step);
        assert!(watchdog.overdue(now + Duration::from_secs(61)).is_empty());
    }

    #[test]
    fn a_loop_that_moves_its_deadline_stays_healthy_and_a_stopped_one_is_forgotten() {
        let watchdog = Watchdog::new();
        let now = Instant::now();
        watchdog.expect("probe:guard", now + Duration::from_secs(3));
        watchdog.expect("probe:guard", now + Duration::from_secs(6));
        assert!(watchdog.overdue(now + Duration::from_secs(4)).is_empty());
        assert_eq!(watchdog.overdue(now + Duration::from_secs(7)).len(), 1);
        watchdog.finish("probe:guard");
        assert!(watchdog.overdue(now + Duration::from_secs(7)).is_empty());
    }
}
