//! Waiting with a deadline and a message that says what was awaited and what was seen last.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::bail;

/// How often conditions are polled.
pub const POLL: Duration = Duration::from_millis(100);

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
pub async fn until<T, F, Fut>(
    what: impl Display,
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
        tokio::time::sleep(POLL).await;
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
}
