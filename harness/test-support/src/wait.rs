//! Waiting with a deadline: [`eventually`] for a bool, [`wait_for`] and [`wait_until`] for tests
//! that fail by panicking (naming what they waited for), [`until`] and [`holds_for`] for the
//! harness, whose errors say what was awaited and what was seen last.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::bail;

/// How often [`until`] and [`holds_for`] poll (the e2e harness, against whole clusters).
pub const POLL: Duration = Duration::from_millis(100);

/// How often [`eventually`], [`wait_for`] and [`wait_until`] poll: component tests wait on one
/// in-process server, and some measure how long a change took.
pub const TEST_POLL: Duration = Duration::from_millis(50);

/// One look at the condition being awaited.
#[derive(Debug)]
pub enum Check<T> {
    /// The condition holds; here is what it produced.
    Done(T),
    /// Not yet; what was seen, for the timeout message.
    Pending(String),
}

/// Polls `check` until it is [`Check::Done`] or `timeout` passes. Errors from `check` count as
/// "not yet" (the API may be briefly unavailable on purpose) and show up in the timeout message.
pub async fn until<T, F, Fut>(what: impl Display, timeout: Duration, check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Check<T>>>,
{
    until_every(what, POLL, timeout, check).await
}

/// [`until`], polling every `every` (a costly check, such as a query that starts a process).
pub async fn until_every<T, F, Fut>(
    what: impl Display,
    every: Duration,
    timeout: Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Check<T>>>,
{
    let start = Instant::now();
    let mut last: String;
    loop {
        match check().await {
            Ok(Check::Done(value)) => return Ok(value),
            Ok(Check::Pending(seen)) => last = seen,
            Err(err) => last = format!("error: {err:#}"),
        }
        if start.elapsed() >= timeout {
            bail!(
                "timed out after {:.1}s waiting for {what}; last seen: {last}",
                timeout.as_secs_f64()
            );
        }
        tokio::time::sleep(every).await;
    }
}

/// Checks that `check` stays true for the whole of `period`; fails at the first violation with
/// what was seen.
pub async fn holds_for<F, Fut>(
    what: impl Display,
    period: Duration,
    mut check: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Result<(), String>>>,
{
    let start = Instant::now();
    while start.elapsed() < period {
        if let Err(seen) = check().await? {
            bail!(
                "expected {what} for {:.1}s, but after {:.1}s: {seen}",
                period.as_secs_f64(),
                start.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Seconds with one decimal, for messages.
pub fn secs(duration: Duration) -> String {
    format!("{:.2}s", duration.as_secs_f64())
}

/// Polls `check` every [`TEST_POLL`] until it holds (true) or `timeout` passes (false).
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(TEST_POLL).await;
    }
}

/// Polls `check` every [`TEST_POLL`] until it returns `Some`, and returns that; panics naming `what`
/// after `timeout`.
#[allow(clippy::panic)]
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if started.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(TEST_POLL).await;
    }
}

/// Polls `check` every [`TEST_POLL`] until it holds and returns how long that took; panics naming
/// `what` after `timeout`.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    wait_for(what, timeout, || {
        let holds = check();
        async move { holds.await.then(|| started.elapsed()) }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn until_returns_the_value_once_the_condition_holds() {
        let mut calls = 0;
        let value = until("three calls", Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move {
                Ok(if n >= 3 {
                    Check::Done(n)
                } else {
                    Check::Pending(format!("call {n}"))
                })
            }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);
    }

    #[tokio::test]
    async fn until_times_out_naming_what_it_waited_for_and_the_last_observation() {
        let err = until("the moon", Duration::from_millis(250), || async {
            Ok::<Check<()>, anyhow::Error>(Check::Pending("still the sun".into()))
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("the moon") && err.contains("still the sun"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn until_every_polls_at_the_given_interval() {
        let start = Instant::now();
        let mut calls = 0;
        let err = until_every(
            "never",
            Duration::from_millis(200),
            Duration::from_millis(500),
            || {
                calls += 1;
                async { Ok::<Check<()>, anyhow::Error>(Check::Pending("no".into())) }
            },
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("never"), "{err}");
        assert!((3..=4).contains(&calls), "{calls} calls");
        assert!(start.elapsed() >= Duration::from_millis(500));
    }

    #[tokio::test]
    async fn holds_for_reports_the_first_violation() {
        let mut calls = 0;
        let err = holds_for("calm", Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move {
                Ok(if n < 2 {
                    Ok(())
                } else {
                    Err("a storm".to_string())
                })
            }
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("calm") && err.contains("a storm"), "{err}");
    }

    #[tokio::test]
    async fn eventually_says_whether_the_condition_held_in_time() {
        let mut calls = 0;
        assert!(
            eventually(Duration::from_secs(5), || {
                calls += 1;
                let n = calls;
                async move { n >= 2 }
            })
            .await
        );
        assert!(!eventually(Duration::from_millis(120), || async { false }).await);
    }

    #[tokio::test]
    async fn wait_for_returns_the_first_value() {
        let mut calls = 0;
        let value = wait_for("a value", Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move { (n == 3).then_some(n) }
        })
        .await;
        assert_eq!(value, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 100ms waiting for the moon")]
    async fn wait_for_panics_naming_what_it_waited_for() {
        wait_for::<(), _, _>("the moon", Duration::from_millis(100), || async { None }).await;
    }

    #[tokio::test]
    async fn wait_until_measures_how_long_the_condition_took() {
        let start = Instant::now();
        let took = wait_until("a quarter second", Duration::from_secs(5), || async move {
            start.elapsed() >= Duration::from_millis(250)
        })
        .await;
        assert!(took >= Duration::from_millis(250), "{took:?}");
    }
}
