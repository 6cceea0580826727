//! When a pod's containers start again and how long they get to stop: `restartPolicy`, the
//! crash backoff (1 s doubling to 60 s; the real kubelet uses 10 s to 5 min), the retry of a
//! container waiting on its image, a Secret or a ConfigMap, grace periods, and when the worker
//! wakes up to act on them.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::process::Exit;

/// First restart delay; doubles per crash up to [`MAX_BACKOFF`].
pub(super) const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Longest delay before a crashed container starts again.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A container that ran this long resets its backoff.
pub(super) const BACKOFF_RESET: Duration = Duration::from_secs(60);
/// How often a pod waiting on an image, a Secret or a ConfigMap tries again.
pub(super) const RETRY: Duration = Duration::from_secs(2);
/// How soon a worker whose status write failed tries it again.
const REPORT_RETRY: Duration = Duration::from_millis(500);
/// How long a worker with nothing scheduled sleeps (changes to its pod wake it earlier).
const IDLE: Duration = Duration::from_secs(3600);
/// Grace period of a pod that sets none (the API's default).
const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// Whether a container of `pod` that ended with `exit` starts again (`restartPolicy`, `Always`
/// when unset).
pub(super) fn restarts(pod: &Pod, exit: Exit) -> bool {
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => false,
        Some("OnFailure") => exit.code != 0,
        _ => true,
    }
}

/// A container's crash backoff: each start that fails, or run that ends, waits longer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(INITIAL_BACKOFF)
    }
}

impl Backoff {
    /// The delay before the next start; the one after it doubles, up to [`MAX_BACKOFF`].
    pub(super) fn next_delay(&mut self) -> Duration {
        let delay = self.0;
        self.0 = (self.0 * 2).min(MAX_BACKOFF);
        delay
    }

    /// A container that ran for `ran` before it ended: a long run forgives earlier crashes.
    pub(super) fn ran_for(&mut self, ran: Duration) {
        if ran >= BACKOFF_RESET {
            *self = Self::default();
        }
    }
}

/// The wait before the next try of a container whose image mapped to nothing, after its
/// `failures`th failure in a row: [`RETRY`] times the failures (counting up to 15), at most
/// [`MAX_BACKOFF`].
pub(super) fn image_retry(failures: u32) -> Duration {
    RETRY.saturating_mul(failures.min(15)).min(MAX_BACKOFF)
}

/// The pod's `terminationGracePeriodSeconds` (30 s when unset or negative).
pub(super) fn grace_of(pod: &Pod) -> Duration {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .map_or(DEFAULT_GRACE, Duration::from_secs)
}

/// The grace period of a pod being deleted: the deletion's own, else the pod's.
pub(super) fn deletion_grace(pod: &Pod) -> Duration {
    pod.metadata
        .deletion_grace_period_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or_else(|| grace_of(pod), Duration::from_secs)
}

/// How long the worker sleeps unless something wakes it: until the next container start
/// (`until_start`) or token refresh (`until_refresh`) is due, and no longer than
/// [`REPORT_RETRY`] after a failed status write or [`RETRY`] while a volume cannot be written.
pub(super) fn wake_after(
    until_start: Option<Duration>,
    until_refresh: Option<Duration>,
    report_failed: bool,
    volumes_failed: bool,
) -> Duration {
    let mut sleep = until_start.unwrap_or(IDLE);
    if report_failed {
        sleep = sleep.min(REPORT_RETRY);
    }
    if volumes_failed {
        sleep = sleep.min(RETRY);
    }
    if let Some(refresh) = until_refresh {
        sleep = sleep.min(refresh);
    }
    sleep
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;

    use super::*;

    fn exit(code: i32) -> Exit {
        Exit { code, signal: None }
    }

    fn pod_with(spec: PodSpec) -> Pod {
        Pod {
            spec: Some(spec),
            ..Pod::default()
        }
    }

    fn with_policy(policy: Option<&str>) -> Pod {
        pod_with(PodSpec {
            restart_policy: policy.map(str::to_owned),
            ..PodSpec::default()
        })
    }

    #[test]
    fn restart_policy_decides_whether_an_ended_container_runs_again() {
        for (policy, code, restarts_) in [
            (None, 0, true),
            (Some("Always"), 0, true),
            (Some("Always"), 1, true),
            (Some("OnFailure"), 0, false),
            (Some("OnFailure"), 137, true),
            (Some("Never"), 1, false),
            (Some("Never"), 0, false),
        ] {
            assert_eq!(
                restarts(&with_policy(policy), exit(code)),
                restarts_,
                "{policy:?} after exit {code}"
            );
        }
        assert!(restarts(&Pod::default(), exit(1)), "no spec: Always");
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let mut b = Backoff::default();
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
    }

    #[test]
    fn a_long_run_resets_the_backoff_and_a_short_one_does_not() {
        let mut b = Backoff::default();
        b.next_delay();
        b.next_delay();
        b.ran_for(BACKOFF_RESET - Duration::from_millis(1));
        assert_eq!(b.next_delay(), Duration::from_secs(4));
        b.ran_for(BACKOFF_RESET);
        assert_eq!(b.next_delay(), INITIAL_BACKOFF);
    }

    #[test]
    fn image_retries_grow_with_failures_and_stop_growing() {
        assert_eq!(image_retry(1), Duration::from_secs(2));
        assert_eq!(image_retry(3), Duration::from_secs(6));
        assert_eq!(image_retry(15), Duration::from_secs(30));
        assert_eq!(image_retry(1000), Duration::from_secs(30));
    }

    #[test]
    fn grace_comes_from_the_deletion_then_the_pod_then_the_default() {
        assert_eq!(grace_of(&Pod::default()), DEFAULT_GRACE);
        let mut pod = pod_with(PodSpec {
            termination_grace_period_seconds: Some(5),
            ..PodSpec::default()
        });
        assert_eq!(grace_of(&pod), Duration::from_secs(5));
        assert_eq!(deletion_grace(&pod), Duration::from_secs(5));
        pod.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(deletion_grace(&pod), Duration::ZERO);
        pod.metadata.deletion_grace_period_seconds = Some(-1);
        assert_eq!(deletion_grace(&pod), Duration::from_secs(5));
        let negative = pod_with(PodSpec {
            termination_grace_period_seconds: Some(-3),
            ..PodSpec::default()
        });
        assert_eq!(grace_of(&negative), DEFAULT_GRACE);
    }

    #[test]
    fn the_worker_wakes_for_the_earliest_thing_due() {
        let secs = Duration::from_secs;
        assert_eq!(wake_after(None, None, false, false), IDLE);
        assert_eq!(wake_after(Some(secs(7)), None, false, false), secs(7));
        assert_eq!(
            wake_after(Some(secs(7)), Some(secs(3)), false, false),
            secs(3)
        );
        assert_eq!(wake_after(None, None, false, true), RETRY);
        assert_eq!(wake_after(Some(secs(1)), None, false, true), secs(1));
        assert_eq!(wake_after(None, None, true, true), REPORT_RETRY);
        assert_eq!(
            wake_after(Some(Duration::ZERO), None, true, false),
            Duration::ZERO
        );
    }
}
