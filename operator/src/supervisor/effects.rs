//! What one change of the configuration means, decided without IO: a transition function per
//! change (degraded, a stray configuration removed, the proving one withdrawn, deregistered,
//! registered) records the outage's steps in the state and returns the [`Effects`] the
//! supervisor then carries out in one place ([`Supervisor::transitioned`]): the Events, the
//! metrics, the release of objects left pending, and the missed-initializations count.
//!
//! [`Supervisor::transitioned`]: super::Supervisor::transitioned

use std::time::Instant;

use initializer_crds::Suspension;
use jiff::Timestamp;
use kube::runtime::events::EventType;
use tracing::info;

use crate::events::Reason;
use crate::health::{Aside, Cause};

use super::registration::LegacySupervision;
use super::{Presence, Removal, RouteChecks, SupervisedState, micro_now};

/// What a change of the configuration asks of the world outside the state.
#[derive(Debug, Default)]
pub(super) struct Effects {
    /// Events about the Initializer, in order.
    pub events: Vec<(EventType, Reason, String)>,
    /// A registration to count (`registrations_total`).
    pub registered: bool,
    /// A deregistration to count: its cause and, but for a suspension, how long it took.
    pub deregistered: Option<(Cause, Option<std::time::Duration>)>,
    /// Objects pending on the initializer's name to release (the legacy backend).
    pub release: Option<LegacySupervision>,
    /// Count the objects created without the initializer from this time on.
    pub count_missed_from: Option<Timestamp>,
}

/// The effects of the configuration going from `before` to `now_is`, written from
/// `write_started` on; records the outage's steps in `st`.
pub(super) fn of_change(
    st: &mut SupervisedState,
    before: Presence,
    now_is: Presence,
    write_started: Timestamp,
) -> Effects {
    let outage_step = st.machine.in_outage()
        || st
            .pending
            .deregister_cause()
            .is_some_and(|c| !c.is_on_purpose());
    if before == Presence::Normal && now_is != Presence::Normal && outage_step {
        st.outage.window_from.get_or_insert(write_started);
    }
    match (before, now_is) {
        (Presence::Normal | Presence::Degraded, Presence::Proving) => route_changed(st, before),
        (_, Presence::Proving) => {
            info!(initializer = %st.target.initializer, configuration = %st.target.configuration(), "registered failing open until the API server is seen reaching the initializer");
            Effects::default()
        }
        (Presence::Normal, Presence::Degraded) => degraded(st),
        // Whatever removed the configuration, what was to remove it is accounted for now.
        (_, Presence::Absent) => match st.pending.removal.take() {
            Some(Removal::Stray) => stray_removed(st),
            None if before == Presence::Proving => {
                st.route = RouteChecks::default();
                info!(initializer = %st.target.initializer, configuration = %st.target.configuration(), "removed the proving configuration: the initializer is no longer ready");
                Effects::default()
            }
            Some(Removal::Deregister(cause, since)) => deregistered(st, cause, since),
            None => deregistered(st, Cause::ProbesFailed, Instant::now()),
        },
        (from, Presence::Normal) => registered(st, from),
        _ => Effects::default(),
    }
}

/// A probe failed: the configuration fails open with a short timeout.
fn degraded(st: &mut SupervisedState) -> Effects {
    let configuration = st.target.configuration();
    let took = st
        .pending
        .degrade_since
        .take()
        .map(|s| s.elapsed())
        .unwrap_or_default();
    if let Some(outage) = st.outage.last.as_mut() {
        outage.degraded_at = Some(micro_now());
    }
    info!(initializer = %st.target.initializer, %configuration, took_ms = took.as_millis() as u64, "degraded");
    let now = st.target.registration.degraded_note(took);
    let why = st
        .last_probe
        .as_ref()
        .filter(|probe| !probe.ok)
        .map(|probe| format!(" ({})", probe.message))
        .unwrap_or_default();
    let note = format!(
        "a probe failed{why}: {configuration} {now}; it is removed after {} failed probes in a row and restored after {} good ones",
        st.machine.config().failure_threshold,
        st.machine.config().success_threshold,
    );
    Effects {
        events: vec![(EventType::Warning, Reason::Degraded, note)],
        ..Effects::default()
    }
}

/// What admits the API server to the initializer's pods changed under a registration: the
/// proving configuration replaces it until the API server is seen reaching them again.
fn route_changed(st: &mut SupervisedState, before: Presence) -> Effects {
    let configuration = st.target.configuration();
    if before == Presence::Normal
        && let Some(outage) = st.outage.last.as_mut()
    {
        outage.degraded_at = Some(micro_now());
    }
    info!(initializer = %st.target.initializer, %configuration, "the route changed: failing open until it is proven again");
    Effects {
        events: vec![(
            EventType::Warning,
            Reason::RouteChanged,
            format!(
                "the NetworkPolicy in front of the initializer changed: {configuration} fails open (failurePolicy Ignore) until a call of the API server is seen reaching the initializer through it"
            ),
        )],
        ..Effects::default()
    }
}

/// A configuration that appeared while the initializer was out of the path (a registration a
/// replica frozen past its lease sent late, or someone's create) was removed: no probe,
/// endpoint or suspend removed the initializer now. An outage in progress, its figures and the
/// deregistration count stay the first removal's.
fn stray_removed(st: &SupervisedState) -> Effects {
    let configuration = st.target.configuration();
    info!(initializer = %st.target.initializer, %configuration, "removed a configuration that appeared while the initializer was out of the path");
    Effects {
        // Its own reason: the recorder folds a second `Deregistered` Event into the first
        // one's series, note and all.
        events: vec![(
            EventType::Warning,
            Reason::StrayConfigurationRemoved,
            format!(
                "removed {configuration}: it appeared while the initializer is out of the path (a registration that landed late, or someone else's write)"
            ),
        )],
        release: st.target.registration.left_pending().cloned(),
        ..Effects::default()
    }
}

/// The health machine (or a suspension, or the engine's hand-over) took the configuration out,
/// for `cause`, decided at `since`.
fn deregistered(st: &mut SupervisedState, cause: Cause, since: Instant) -> Effects {
    let configuration = st.target.configuration();
    let took = since.elapsed();
    if !cause.is_on_purpose()
        && let Some(outage) = st.outage.last.as_mut()
    {
        outage.deregistered_at = Some(micro_now());
    }
    info!(initializer = %st.target.initializer, %configuration, cause = cause.reason(), took_ms = took.as_millis() as u64, "deregistered");
    let (type_, note) = match cause {
        Cause::Aside(Aside::InApiServer) => (
            EventType::Normal,
            format!(
                "removed {configuration}: the preset runs in the API server (its MutatingAdmissionPolicy is proven and in force)"
            ),
        ),
        Cause::Aside(Aside::Suspended) => (
            EventType::Normal,
            format!(
                "removed {configuration}: {}",
                st.target
                    .suspended
                    .map_or("suspended", Suspension::describe)
            ),
        ),
        Cause::ProbesFailed => (
            EventType::Warning,
            format!(
                "removed {configuration} (fail open) {} ms after the first failed probe: the initializer stopped answering",
                took.as_millis()
            ),
        ),
        Cause::NoReadyEndpoints => (
            EventType::Warning,
            format!(
                "removed {configuration} (fail open) {} ms after the Service lost its last ready endpoint",
                took.as_millis()
            ),
        ),
    };
    let on_purpose = cause.is_on_purpose();
    Effects {
        events: vec![(type_, Reason::Deregistered, note)],
        deregistered: Some((cause, (!on_purpose).then_some(took))),
        release: if on_purpose {
            None
        } else {
            st.target.registration.left_pending().cloned()
        },
        ..Effects::default()
    }
}

/// Registered with the spec's settings, `from` absent, proving or degraded. Back from a
/// configuration that failed open without ever being removed (degraded, or proving a route that
/// changed) is a restore; anything else a registration.
fn registered(st: &mut SupervisedState, from: Presence) -> Effects {
    let configuration = st.target.configuration();
    let failed_open_in_place = st.outage.last.as_ref().is_some_and(|o| {
        o.restored_at.is_none() && o.degraded_at.is_some() && o.deregistered_at.is_none()
    });
    let restored =
        from == Presence::Degraded || (from == Presence::Proving && failed_open_in_place);
    if let Some(outage) = st.outage.last.as_mut().filter(|o| o.restored_at.is_none()) {
        outage.restored_at = Some(micro_now());
    }
    info!(initializer = %st.target.initializer, %configuration, restored, "registered");
    let why = if from == Presence::Proving {
        "a call of the API server reached the initializer through its changed route"
    } else {
        "the initializer answers again"
    };
    let event = if restored {
        (
            EventType::Normal,
            Reason::Restored,
            format!(
                "restored {configuration} to the spec's failurePolicy and timeoutSeconds: {why}"
            ),
        )
    } else {
        (
            EventType::Normal,
            Reason::Registered,
            format!("registered {configuration}: the initializer is available and answering"),
        )
    };
    Effects {
        events: vec![event],
        registered: !from.is_registered() && !restored,
        count_missed_from: st.outage.window_from.take(),
        ..Effects::default()
    }
}
