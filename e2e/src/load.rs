//! A steady stream of creates, each on its own, as users and controllers keep creating objects
//! while an initializer hangs or recovers. Every attempt is recorded with its start, end and
//! outcome, so a scenario can count the creates that failed in a window and find the first one
//! that succeeded after a failure.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::PostParams;
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::task::JoinHandle;

use crate::timings::CreateCount;

/// One create.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// When the request was sent.
    pub started: Instant,
    /// When the answer (or the client's timeout) came.
    pub finished: Instant,
    /// `Ok(true)` created and mutated by the initializer, `Ok(false)` created untouched,
    /// `Err(message)` refused or timed out.
    pub outcome: Result<bool, String>,
}

impl Attempt {
    /// Whether the object was created.
    pub fn succeeded(&self) -> bool {
        self.outcome.is_ok()
    }
}

/// A background generator of creates.
pub struct CreateLoad {
    attempts: Arc<Mutex<Vec<Attempt>>>,
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

/// Longest a single create may take before the harness gives up on it (the API server's own
/// webhook timeout is at most 30 s).
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(40);

impl CreateLoad {
    /// Starts creating `make(n)` in `api` every `interval`; `mutated` tells whether the
    /// initializer changed the created object.
    pub fn start<K>(
        api: Api<K>,
        interval: Duration,
        make: impl Fn(usize) -> K + Send + Sync + 'static,
        mutated: impl Fn(&K) -> bool + Send + Sync + 'static,
    ) -> Self
    where
        K: Resource + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        Self::start_with(api, interval, PostParams::default(), make, mutated)
    }

    /// As [`CreateLoad::start`], each create made with `params`: `dry_run: true` for a load
    /// that tests the admission path and nothing else (every webhook and policy runs and the
    /// answer is the object as it would be stored, but no controller gets work from it).
    pub fn start_with<K>(
        api: Api<K>,
        interval: Duration,
        params: PostParams,
        make: impl Fn(usize) -> K + Send + Sync + 'static,
        mutated: impl Fn(&K) -> bool + Send + Sync + 'static,
    ) -> Self
    where
        K: Resource + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let make = Arc::new(make);
        let mutated = Arc::new(mutated);
        let ticker = tokio::spawn({
            let attempts = attempts.clone();
            let stop = stop.clone();
            async move {
                let mut tasks = Vec::new();
                let mut ticks = tokio::time::interval(interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    ticks.tick().await;
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    n += 1;
                    let object = make(n);
                    let api = api.clone();
                    let attempts = attempts.clone();
                    let mutated = mutated.clone();
                    let params = params.clone();
                    tasks.push(tokio::spawn(async move {
                        let started = Instant::now();
                        let result =
                            tokio::time::timeout(CREATE_TIMEOUT, api.create(&params, &object))
                                .await;
                        let outcome = match result {
                            Ok(Ok(created)) => Ok(mutated(&created)),
                            Ok(Err(kube::Error::Api(status))) => Err(format!(
                                "{} {}: {}",
                                status.code, status.reason, status.message
                            )),
                            Ok(Err(err)) => Err(err.to_string()),
                            Err(_) => {
                                Err(format!("no answer within {}s", CREATE_TIMEOUT.as_secs()))
                            }
                        };
                        if let Ok(mut attempts) = attempts.lock() {
                            attempts.push(Attempt {
                                started,
                                finished: Instant::now(),
                                outcome,
                            });
                        }
                    }));
                }
                tasks
            }
        });
        Self {
            attempts,
            stop,
            ticker: Some(ticker),
        }
    }

    /// Attempts finished so far.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Stops creating, waits for the creates in flight, and returns every attempt ordered by
    /// start.
    pub async fn stop(mut self) -> Vec<Attempt> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(ticker) = self.ticker.take()
            && let Ok(tasks) = ticker.await
        {
            for task in tasks {
                let _ = task.await;
            }
        }
        let mut attempts = self.attempts.lock().map(|a| a.clone()).unwrap_or_default();
        attempts.sort_by_key(|a| a.started);
        attempts
    }
}

impl Drop for CreateLoad {
    fn drop(&mut self) {
        // A scenario that fails half-way must not leave creates running into the next one.
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The creates started in `[from, to)` (`to = None`: until the end).
pub fn started_in(
    attempts: &[Attempt],
    from: Instant,
    to: Option<Instant>,
) -> impl Iterator<Item = &Attempt> {
    attempts
        .iter()
        .filter(move |a| a.started >= from && to.is_none_or(|to| a.started < to))
}

/// Failed creates among those started in `[from, to)` (`to = None`: until the end).
pub fn count_in(attempts: &[Attempt], from: Instant, to: Option<Instant>) -> CreateCount {
    let window: Vec<&Attempt> = started_in(attempts, from, to).collect();
    CreateCount {
        failed: window.iter().filter(|a| !a.succeeded()).count(),
        total: window.len(),
    }
}

/// The first create started at or after `from` that succeeded, by the time it finished.
pub fn first_success_after(attempts: &[Attempt], from: Instant) -> Option<&Attempt> {
    attempts
        .iter()
        .filter(|a| a.started >= from && a.succeeded())
        .min_by_key(|a| a.finished)
}

/// The distinct error messages among failed attempts, for failure messages.
pub fn errors(attempts: &[Attempt]) -> Vec<String> {
    let mut messages: Vec<String> = attempts
        .iter()
        .filter_map(|a| a.outcome.clone().err())
        .collect();
    messages.sort();
    messages.dedup();
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(base: Instant, start_ms: u64, end_ms: u64, ok: bool) -> Attempt {
        Attempt {
            started: base + Duration::from_millis(start_ms),
            finished: base + Duration::from_millis(end_ms),
            outcome: if ok { Ok(false) } else { Err("refused".into()) },
        }
    }

    #[test]
    fn failed_creates_are_counted_by_when_they_started() {
        let base = Instant::now();
        let attempts = vec![
            attempt(base, 0, 10, true),
            attempt(base, 100, 5_100, false),
            attempt(base, 200, 5_200, false),
            attempt(base, 300, 310, true),
        ];
        let in_window = count_in(
            &attempts,
            base + Duration::from_millis(50),
            Some(base + Duration::from_millis(250)),
        );
        assert_eq!(
            in_window,
            CreateCount {
                failed: 2,
                total: 2
            }
        );
        assert_eq!(
            count_in(&attempts, base, None),
            CreateCount {
                failed: 2,
                total: 4
            }
        );
    }

    #[test]
    fn first_success_is_the_earliest_to_finish_among_those_started_after_the_failure() {
        let base = Instant::now();
        let attempts = vec![
            attempt(base, 0, 10, true),
            attempt(base, 100, 5_100, true),
            attempt(base, 200, 250, true),
        ];
        let first = first_success_after(&attempts, base + Duration::from_millis(50)).unwrap();
        assert_eq!(first.started, base + Duration::from_millis(200));
    }
}
