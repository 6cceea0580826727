//! Leader election on a `coordination.k8s.io/v1` Lease, so two operator replicas can run and
//! only one reconciles and probes. The decision is pure ([`decide`]); [`LeaderElector::run`]
//! is the IO loop: acquire when the Lease is free or expired, renew every third of the lease
//! duration, and step down when renewals keep failing for longer than the renew deadline (or at
//! once when someone else holds the Lease).

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
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
    /// it stops before anyone else may take over).
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

/// Decides from the Lease as read at `now`.
pub fn decide(lease: Option<&Lease>, identity: &str, now: Timestamp) -> Decision {
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
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    let renewed = spec
        .renew_time
        .or(spec.acquire_time)
        .map(|t| t.0)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    if renewed + duration < now {
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
}

impl LeaderElector {
    /// An elector for `config`.
    pub fn new(client: Client, config: LeaderConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
    }

    /// One attempt: true when this replica holds the Lease afterwards.
    pub async fn try_lead(&self) -> Result<bool> {
        let found = self
            .api
            .get_opt(&self.config.lease_name)
            .await
            .map_err(|e| Error::Lease(Box::new(e)))?;
        let now = Timestamp::now();
        let decision = decide(found.as_ref(), &self.config.identity, now);
        let Some(next) = next_lease(found.as_ref(), &decision, &self.config, now) else {
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
            Ok(_) => Ok(true),
            Err(e) if matches!(api_code(&e), Some(409)) => Ok(false),
            Err(e) => Err(Error::Lease(Box::new(e))),
        }
    }

    /// Gives the Lease up (on shutdown) so another replica can take over at once.
    pub async fn release(&self) {
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
    }

    /// Campaigns until `shutdown`, sending `true` while leading; releases the Lease at the end.
    pub async fn run(self, leading: watch::Sender<bool>, shutdown: CancellationToken) {
        let mut last_renewal: Option<Instant> = None;
        loop {
            let is_leader = match self.try_lead().await {
                Ok(true) => {
                    last_renewal = Some(Instant::now());
                    true
                }
                Ok(false) => {
                    last_renewal = None;
                    false
                }
                Err(e) => {
                    warn!(error = %e, "leader election attempt failed");
                    last_renewal.is_some_and(|t| t.elapsed() < self.config.renew_deadline)
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
        if *leading.borrow() {
            leading.send_replace(false);
            self.release().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
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
        assert_eq!(decide(None, "a", now()), Decision::Create);
        let lease = held_by("a", now());
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn the_holder_renews_and_others_follow_until_it_expires() {
        let lease = held_by("a", now());
        assert_eq!(decide(Some(&lease), "a", now()), Decision::Renew);
        let soon = now() + SignedDuration::from_secs(10);
        assert_eq!(
            decide(Some(&lease), "b", soon),
            Decision::Follow("a".into())
        );
        let late = now() + SignedDuration::from_secs(16);
        assert_eq!(decide(Some(&lease), "b", late), Decision::Acquire);
        let taken = next_lease(Some(&lease), &Decision::Acquire, &config("b"), late).unwrap();
        let spec = taken.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(spec.renew_time, Some(MicroTime(late)));
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
        assert_eq!(decide(Some(&lease), "b", now()), Decision::Acquire);
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
