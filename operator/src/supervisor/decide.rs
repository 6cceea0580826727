//! The pure decisions of converge: which configuration to hold next, what to write for it, and
//! when to retry a removal or a status write, or resume a fail-open window found in progress.

use std::time::{Duration, Instant};

use initializer_crds::Outage;
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;

use crate::health::{Machine, State};

use super::{
    FIRST_REMOVAL_RETRY, FIRST_ROUTE_CHECK_RETRY, FIRST_STATUS_RETRY, MAX_REMOVAL_RETRY,
    MAX_ROUTE_CHECK_RETRY, MAX_STATUS_RETRY,
};

/// What the cluster holds for one Initializer's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// No configuration.
    Absent,
    /// Registered with the spec's values.
    Normal,
    /// Registered degraded: `failurePolicy: Ignore`, short timeout.
    Degraded,
    /// Registered to prove the route: degraded, with the route check's webhook
    /// (`initializer_core::route::proving`).
    Proving,
}

impl Presence {
    /// Whether the Initializer is in the path: registered with the spec's values or degraded
    /// (a proving configuration is not yet).
    pub fn is_registered(self) -> bool {
        matches!(self, Presence::Normal | Presence::Degraded)
    }

    /// What a configuration found in the cluster holds.
    pub(super) fn found(found: &crate::backend::Found) -> Self {
        if found.proving() {
            Presence::Proving
        } else if found.degraded() {
            Presence::Degraded
        } else {
            Presence::Normal
        }
    }

    /// What the machine wants the cluster to hold at `now`.
    pub(super) fn of(machine: &Machine, now: Instant) -> Self {
        match machine.state() {
            State::Registered => Presence::Normal,
            State::Waiting | State::Unresponsive | State::Degraded if machine.is_proving(now) => {
                Presence::Proving
            }
            State::Degraded => Presence::Degraded,
            State::Waiting | State::Unresponsive | State::Aside => Presence::Absent,
        }
    }
}

/// The configuration to hold now: what the machine wants, except that a step out of the path
/// (from the spec's values to degraded or absent) waits while the fallback is not ready yet.
pub fn next_presence(applied: Presence, wanted: Presence, fallback_ready: bool) -> Presence {
    if applied == Presence::Normal && wanted != Presence::Normal && !fallback_ready {
        applied
    } else {
        wanted
    }
}

/// What to write to make the cluster hold one configuration state.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigurationWrite {
    /// The cluster already holds it.
    Nothing,
    /// Register (create or update) this configuration.
    Apply(Box<MutatingWebhookConfiguration>),
    /// Delete the configuration.
    Remove,
}

/// The write that takes the cluster from `presence` (with `applied` the configuration last
/// written and still live) to `next`, whose configuration is `desired` (`None` for
/// [`Presence::Absent`]).
pub fn configuration_write(
    presence: Presence,
    applied: Option<&MutatingWebhookConfiguration>,
    next: Presence,
    desired: Option<MutatingWebhookConfiguration>,
) -> ConfigurationWrite {
    match desired {
        Some(desired) if presence == next && applied == Some(&desired) => {
            ConfigurationWrite::Nothing
        }
        Some(desired) => ConfigurationWrite::Apply(Box::new(desired)),
        None if presence == Presence::Absent => ConfigurationWrite::Nothing,
        None => ConfigurationWrite::Remove,
    }
}

/// The delay before the next attempt to remove a configuration, after one that failed.
pub fn removal_retry(previous: Option<Duration>) -> Duration {
    previous.map_or(FIRST_REMOVAL_RETRY, |d| (d * 2).min(MAX_REMOVAL_RETRY))
}

/// The delay before the next route check, after one that saw no answer.
pub fn route_check_retry(previous: Option<Duration>) -> Duration {
    previous.map_or(FIRST_ROUTE_CHECK_RETRY, |d| {
        (d * 2).min(MAX_ROUTE_CHECK_RETRY)
    })
}

/// The delay before the status writer tries again, after a write the API server did not take
/// (it answered with an error, or not in time): from 200 ms, doubling up to 10 s.
pub fn status_write_retry(previous: Option<Duration>) -> Duration {
    previous.map_or(FIRST_STATUS_RETRY, |d| (d * 2).min(MAX_STATUS_RETRY))
}

/// Where the fail-open window of an outage found in progress (no `restoredAt`) started: at its
/// first step out of the path, less a second for the write that made it (the step's time is
/// taken when the write had finished; nothing admitted before that write began lacked the
/// initializer).
pub fn resumed_window(outage: &Outage) -> Option<Timestamp> {
    if outage.restored_at.is_some() {
        return None;
    }
    let first = [outage.degraded_at.as_ref(), outage.deregistered_at.as_ref()]
        .into_iter()
        .flatten()
        .map(|t| t.0)
        .min()?;
    first.checked_sub(jiff::SignedDuration::from_secs(1)).ok()
}
