//! Leader election on a `coordination.k8s.io/v1` Lease, so two operator replicas can run and
//! only one reconciles and probes. The decisions are pure ([`decide`], [`observe`],
//! [`holds`]); [`LeaderElector::run`] is the IO loop: acquire when the Lease is free or expired,
//! renew every third of the lease duration, and step down when renewals keep failing for longer
//! than the renew deadline (or at once when someone else holds the Lease).
//!
//! Two rules keep a second leader from ever writing, as client-go's leader election does:
//! - Expiry is judged by this replica's own clock: another holder's Lease expires a lease
//!   duration after this replica last *saw it change*, never by comparing the renew time it
//!   carries (another machine's clock) with ours.
//! - [`Leadership`] answers "may I write now?" from the time of the last successful renewal, so
//!   a replica that was frozen or cut off past its renew deadline stops writing at once, before
//!   its election loop even runs again. Every register and deregister asks it first.
//!
//! A check and the write after it are still two steps, and a replica can freeze between them.
//! Status writes are therefore made onto the resourceVersion they were computed from
//! ([`crate::apply::apply_status`]): the new leader's writes move it, and the thawed write is
//! refused. A configuration write caught in that gap cannot be fenced (an apply that creates an
//! object takes no resourceVersion precondition), so it is undone instead: the orphan sweep
//! removes a webhook configuration landing after a suspend (once carried out) or a delete
//! ([`crate::controller::wanting_configurations`]), the prober puts back an edited one, and the
//! next reconcile (30 s) removes any other.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::{Error, Result, api_code};

/// Timings of the election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Name of the Lease.
    pub lease_name: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long a Lease holds without renewal.
    pub lease_duration: Duration,
    /// How often the leader renews.
    pub renew_every: Duration,
    /// A leader that could not renew for this long steps down (less than `lease_duration`, so
    /// it stops before anyone else may take over). Every Lease call is bounded by it too.
    pub renew_deadline: Duration,
    /// How often a follower tries to acquire.
    pub retry_every: Duration,
}

impl LeaderConfig {
    /// Timings derived from a lease duration: renew at a third, give up at two thirds.
    pub fn new(
        lease_name: &str,
        namespace: &str,
        identity: &str,
        lease_duration: Duration,
    ) -> Self {
        Self {
            lease_name: lease_name.to_string(),
            namespace: namespace.to_string(),
            identity: identity.to_string(),
            lease_duration,
            renew_every: lease_duration / 3,
            renew_deadline: lease_duration * 2 / 3,
            retry_every: (lease_duration / 5).max(Duration::from_millis(200)),
        }
    }
}

/// Whether a leader that last renewed at `renewed` may still act at `now`: only within the
/// renew deadline of that renewal, measured on this replica's monotonic clock.
pub fn holds(renewed: Option<Instant>, renew_deadline: Duration, now: Instant) -> bool {
    renewed.is_some_and(|at| now.saturating_duration_since(at) < renew_deadline)
}

/// Whether this replica may write now. Cheap to clone and to ask; shared by the election loop
/// (which records each renewal) and every writer (which asks before each write).
#[derive(Clone, Debug)]
pub struct Leadership {
    inner: Arc<LeadershipInner>,
}

#[derive(Debug)]
struct LeadershipInner {
    /// Leader election is off: this replica always leads.
    unconditional: bool,
    renew_deadline: Duration,
    /// When the last successful acquire or renewal *started* (a slow call counts from its
    /// start, because the API server may have recorded it at any point after).
    renewed: Mutex<Option<Instant>>,
}

impl Leadership {
    /// A replica that leads without election.
    pub fn unconditional() -> Self {
        Self::with(true, Duration::MAX)
    }

    /// A replica that leads only while its renewals are fresh.
    pub fn elected(renew_deadline: Duration) -> Self {
        Self::with(false, renew_deadline)
    }

    fn with(unconditional: bool, renew_deadline: Duration) -> Self {
        Self {
            inner: Arc::new(LeadershipInner {
                unconditional,
                renew_deadline,
                renewed: Mutex::new(None),
            }),
        }
    }

    /// Whether this replica may write now.
    pub fn is_leading(&self) -> bool {
        self.inner.unconditional
            || holds(*self.renewed(), self.inner.renew_deadline, Instant::now())
    }

    /// `Ok` while this replica may write; otherwise the error that refuses `action`.
    pub fn check(&self, action: impl FnOnce() -> String) -> Result<()> {
        if self.is_leading() {
            Ok(())
        } else {
            Err(Error::NotLeading { action: action() })
        }
    }

    fn renewed(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.inner
            .renewed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn record_renewal(&self, started: Instant) {
        *self.renewed() = Some(started);
    }

    fn record_loss(&self) {
        *self.renewed() = None;
    }
}

/// What to do with the Lease as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease yet: create it, holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it over.
    Acquire,
    /// Someone else holds it and it has not expired.
    Follow(String),
}

/// The parts of a Lease that change when its holder renews or someone takes it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    holder: Option<String>,
    acquired: Option<MicroTime>,
    renewed: Option<MicroTime>,
    transitions: Option<i32>,
    duration_seconds: Option<i32>,
}

impl LeaseRecord {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity,
            acquired: spec.acquire_time,
            renewed: spec.renew_time,
            transitions: spec.lease_transitions,
            duration_seconds: spec.lease_duration_seconds,
        }
    }
}

/// A Lease record and when this replica first saw it (its own clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    record: LeaseRecord,
    at: Instant,
}

/// What this replica knows after reading `lease` at `now`: the same observation while the
/// record is unchanged, a fresh one from `now` when it changed.
pub fn observe(
    previous: Option<&Observed>,
    lease: Option<&Lease>,
    now: Instant,
) -> Option<Observed> {
    let record = LeaseRecord::of(lease?);
    match previous {
        Some(seen) if seen.record == record => Some(seen.clone()),
        _ => Some(Observed { record, at: now }),
    }
}

/// Decides from the Lease as read and observed at `now`: another holder's Lease has expired
/// when a lease duration has passed since this replica saw its record change.
pub fn decide(
    lease: Option<&Lease>,
    identity: &str,
    observed: Option<&Observed>,
    now: Instant,
) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    if holder == identity {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::Acquire;
    }
    let seconds = u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(15);
    let seen = observed.map_or(now, |o| o.at);
    if now.saturating_duration_since(seen) > Duration::from_secs(seconds) {
        Decision::Acquire
    } else {
        Decision::Follow(holder)
    }
}

/// The Lease after `decision` by `identity` at `now` (`None` for [`Decision::Follow`]).
pub fn next_lease(
    lease: Option<&Lease>,
    decision: &Decision,
    config: &LeaderConfig,
    now: Timestamp,
) -> Option<Lease> {
    let duration = i32::try_from(config.lease_duration.as_secs())
        .unwrap_or(15)
        .max(1);
    let mut next = lease.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(config.lease_name.clone()),
            namespace: Some(config.namespace.clone()),
            ..Default::default()
        },
        spec: None,
    });
    let spec = next.spec.get_or_insert_with(LeaseSpec::default);
    match decision {
        Decision::Follow(_) => return None,
        Decision::Renew => {
            spec.renew_time = Some(MicroTime(now));
            spec.lease_duration_seconds = Some(duration);
        }
        Decision::Create | Decision::Acquire => {
            spec.holder_identity = Some(config.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.renew_time = Some(MicroTime(now));
            spec.lease_duration_seconds = Some(duration);
            if *decision == Decision::Acquire {
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            } else {
                spec.lease_transitions = Some(0);
            }
        }
    }
    Some(next)
}

/// Runs the election and publishes whether this replica leads.
#[derive(Clone, Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderConfig,
    leadership: Leadership,
    observed: Arc<Mutex<Option<Observed>>>,
}

impl LeaderElector {
    /// An elector for `config`, recording renewals in `leadership`.
    pub fn new(client: Client, config: LeaderConfig, leadership: Leadership) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            leadership,
            observed: Arc::new(Mutex::new(None)),
        }
    }

    /// One attempt, bounded by the renew deadline: true when this replica holds the Lease
    /// afterwards.
    pub async fn try_lead(&self) -> Result<bool> {
        let bound = self.config.renew_deadline;
        match tokio::time::timeout(bound, self.attempt()).await {
            Ok(result) => result,
            Err(_) => Err(Error::TimedOut {
                what: format!("hold the leader lease {}", self.config.lease_name),
                after: bound,
            }),
        }
    }

    async fn attempt(&self) -> Result<bool> {
        let started = Instant::now();
        let found = self
            .api
            .get_opt(&self.config.lease_name)
            .await
            .map_err(|e| Error::Lease(Box::new(e)))?;
        let now = Instant::now();
        let observed = {
            let mut seen = self.observed.lock().unwrap_or_else(PoisonError::into_inner);
            *seen = observe(seen.as_ref(), found.as_ref(), now);
            seen.clone()
        };
        let decision = decide(
            found.as_ref(),
            &self.config.identity,
            observed.as_ref(),
            now,
        );
        let Some(next) = next_lease(found.as_ref(), &decision, &self.config, Timestamp::now())
        else {
            return Ok(false);
        };
        let result = if decision == Decision::Create {
            self.api.create(&PostParams::default(), &next).await
        } else {
            // Replace carries the resourceVersion we read: if anyone wrote in between, the API
            // server answers 409 and we did not take the Lease.
            self.api
                .replace(&self.config.lease_name, &PostParams::default(), &next)
                .await
        };
        match result {
            Ok(_) => {
                self.leadership.record_renewal(started);
                Ok(true)
            }
            Err(e) if matches!(api_code(&e), Some(409)) => Ok(false),
            Err(e) => Err(Error::Lease(Box::new(e))),
        }
    }

    /// Gives the Lease up (on shutdown, once nothing this replica runs can write any more) so
    /// another replica can take over at once.
    pub async fn release(&self) {
        self.leadership.record_loss();
        let release = async {
            if let Ok(Some(mut lease)) = self.api.get_opt(&self.config.lease_name).await {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if spec.holder_identity.as_deref() == Some(&self.config.identity) {
                    spec.holder_identity = None;
                    spec.renew_time = None;
                    if let Err(e) = self
                        .api
                        .replace(&self.config.lease_name, &PostParams::default(), &lease)
                        .await
                    {
                        warn!(error = %e, "failed to release the leader lease");
                    }
                }
            }
        };
        if tokio::time::timeout(self.config.renew_deadline, release)
            .await
            .is_err()
        {
            warn!("failed to release the leader lease: no answer in time; it expires by itself");
        }
    }

    /// Campaigns until `shutdown`, sending `true` while leading. It does not release the
    /// Lease: the caller does, with [`LeaderElector::release`], once the controllers stopped.
    pub async fn run(self, leading: watch::Sender<bool>, shutdown: CancellationToken) {
        loop {
            let is_leader = match self.try_lead().await {
                Ok(true) => true,
                Ok(false) => {
                    self.leadership.record_loss();
                    false
                }
                Err(e) => {
                    warn!(error = %e, "leader election attempt failed");
                    self.leadership.is_leading()
                }
            };
            leading.send_if_modified(|current| {
                if *current != is_leader {
                    info!(leader = is_leader, identity = %self.config.identity, "leadership changed");
                    *current = is_leader;
                    true
                } else {
                    false
                }
            });
            let wait = if is_leader {
                self.config.renew_every
            } else {
                self.config.retry_every
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        leading.send_replace(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn at(base: Instant, seconds: u64) -> Instant {
        base + Duration::from_secs(seconds)
    }

    fn config(identity: &str) -> LeaderConfig {
        LeaderConfig::new(
            "initializer-operator",
            "ops",
            identity,
            Duration::from_secs(15),
        )
    }

    fn held_by(holder: &str, renewed: Timestamp) -> Lease {
        next_lease(None, &Decision::Create, &config(holder), renewed).unwrap()
    }

    #[test]
    fn timings_renew_at_a_third_and_give_up_before_expiry() {
        let c = config("a");
        assert_eq!(c.renew_every, Duration::from_secs(5));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert!(c.renew_deadline < c.lease_duration);
    }

    #[test]
    fn a_missing_lease_is_created_and_held() {
        assert_eq!(decide(None, "a", None, Instant::now()), Decision::Create);
        let lease = held_by("a", now());
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn the_holder_renews_and_others_follow_until_it_expires_by_their_own_clock() {
        let lease = held_by("a", now());
        let base = Instant::now();
        let seen = observe(None, Some(&lease), base);
        assert_eq!(
            decide(Some(&lease), "a", seen.as_ref(), base),
            Decision::Renew
        );
        assert_eq!(
            decide(Some(&lease), "b", seen.as_ref(), at(base, 10)),
            Decision::Follow("a".into())
        );
        // Unchanged for longer than its duration, as this replica saw it: expired.
        let still = observe(seen.as_ref(), Some(&lease), at(base, 16));
        assert_eq!(still, seen, "an unchanged record keeps its first sighting");
        assert_eq!(
            decide(Some(&lease), "b", still.as_ref(), at(base, 16)),
            Decision::Acquire
        );
        let taken = next_lease(Some(&lease), &Decision::Acquire, &config("b"), now()).unwrap();
        let spec = taken.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(spec.renew_time, Some(MicroTime(now())));
    }

    #[test]
    fn a_renew_time_from_a_skewed_clock_never_expires_a_live_lease() {
        // The holder's clock runs an hour behind: its renew time looks long expired, but the
        // record changes at every renewal, so a follower keeps following.
        let base = Instant::now();
        let behind = now() - SignedDuration::from_hours(1);
        let first = held_by("a", behind);
        let seen = observe(None, Some(&first), base);
        let mut renewed = first.clone();
        renewed.spec.as_mut().unwrap().renew_time =
            Some(MicroTime(behind + SignedDuration::from_secs(5)));
        let seen = observe(seen.as_ref(), Some(&renewed), at(base, 14));
        assert_eq!(
            decide(Some(&renewed), "b", seen.as_ref(), at(base, 20)),
            Decision::Follow("a".into())
        );
        // A holder whose clock runs ahead cannot hold the Lease past its duration either.
        let ahead = held_by("a", now() + SignedDuration::from_hours(1));
        let seen = observe(None, Some(&ahead), base);
        assert_eq!(
            decide(Some(&ahead), "b", seen.as_ref(), at(base, 16)),
            Decision::Acquire
        );
    }

    #[test]
    fn a_leader_may_write_only_within_the_renew_deadline_of_its_last_renewal() {
        let base = Instant::now();
        let deadline = Duration::from_secs(10);
        assert!(!holds(None, deadline, base));
        assert!(holds(Some(base), deadline, at(base, 9)));
        // Frozen past the deadline: no longer, even before the election loop runs again.
        assert!(!holds(Some(base), deadline, at(base, 10)));
        let leadership = Leadership::elected(deadline);
        assert!(!leadership.is_leading());
        leadership.record_renewal(Instant::now());
        assert!(leadership.is_leading());
        assert!(leadership.check(|| "register".into()).is_ok());
        leadership.record_loss();
        let refused = leadership
            .check(|| "register initializer-x".into())
            .unwrap_err();
        assert!(matches!(refused, Error::NotLeading { .. }), "{refused}");
        assert!(Leadership::unconditional().is_leading());
    }

    #[test]
    fn renewal_moves_only_the_renew_time() {
        let lease = held_by("a", now());
        let later = now() + SignedDuration::from_secs(5);
        let renewed = next_lease(Some(&lease), &Decision::Renew, &config("a"), later).unwrap();
        let (before, after) = (lease.spec.unwrap(), renewed.spec.unwrap());
        assert_eq!(after.renew_time, Some(MicroTime(later)));
        assert_eq!(after.acquire_time, before.acquire_time);
        assert_eq!(after.lease_transitions, before.lease_transitions);
    }

    #[test]
    fn a_released_lease_is_acquired_at_once() {
        let mut lease = held_by("a", now());
        lease.spec.as_mut().unwrap().holder_identity = None;
        let base = Instant::now();
        let seen = observe(None, Some(&lease), base);
        assert_eq!(
            decide(Some(&lease), "b", seen.as_ref(), base),
            Decision::Acquire
        );
        assert_eq!(
            next_lease(
                Some(&lease),
                &Decision::Follow("a".into()),
                &config("b"),
                now()
            ),
            None
        );
    }
}
