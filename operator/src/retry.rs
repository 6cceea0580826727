//! Trying a startup step again until it succeeds: what the operator does for the things it puts
//! in place once (the guard on Initializers, its own bounds), which must never fail the operator
//! and must not hammer an API server that is refusing them.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

/// The wait after the first failure; each failure doubles it.
const FIRST_DELAY: Duration = Duration::from_millis(500);
/// The longest wait between two tries.
const MAX_DELAY: Duration = Duration::from_secs(60);

/// Runs `attempt` until it succeeds and returns its value, logging each failure as "failed to
/// `what`" and waiting from half a second, doubled each time, up to a minute; `None` once
/// `shutdown` is cancelled first.
pub async fn until_done<T, E, F, Fut>(
    shutdown: &CancellationToken,
    what: &str,
    mut attempt: F,
) -> Option<T>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut delay = FIRST_DELAY;
    loop {
        match attempt().await {
            Ok(value) => return Some(value),
            Err(e) => warn!(error = %e, retry_in = ?delay, "failed to {what}"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(MAX_DELAY);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failures_are_tried_again_with_doubling_waits_until_one_succeeds() {
        let tries = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let done = until_done(&CancellationToken::new(), "count", || async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0..=2 => Err("not yet"),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(done, Some(3));
        // 0.5 + 1 + 2 s of waiting, on the paused clock.
        assert_eq!(started.elapsed(), Duration::from_millis(3_500));
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_stops_growing_at_a_minute() {
        let tries = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let done = until_done(&CancellationToken::new(), "count", || async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0..=9 => Err("not yet"),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(done, Some(10));
        // 0.5, 1, 2, 4, 8, 16, 32, then 60, 60, 60.
        assert_eq!(started.elapsed(), Duration::from_millis(63_500 + 180_000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_ends_the_tries() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let done: Option<()> =
            until_done(&shutdown, "fail", || async { Err::<(), _>("never") }).await;
        assert_eq!(done, None);
    }
}
