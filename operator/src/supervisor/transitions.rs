//! Transitions: every input of an Initializer's health machine goes through `Supervisor::observe`;
//! what the machine decides is recorded (the outage's steps, the metrics) and published as Events,
//! and the cluster is converged on it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use initializer_crds::{Outage, Suspension};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use tracing::{info, warn};

use crate::events::Reason;
use crate::health::{Action, Cause, Input};

use super::{CALL_TIMEOUT, Presence, Supervised, SupervisedState, Supervisor, micro_now};

impl Supervisor {
    /// Publishes an Event about `reference` while this replica leads (bounded; a failure is
    /// logged, never returned).
    pub(crate) async fn publish(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: Reason,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.as_str().to_string(),
            note: Some(note),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if !self.inner.leadership.is_leading() {
            return;
        }
        match tokio::time::timeout(CALL_TIMEOUT, self.inner.recorder.publish(&event, reference))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, %reason, "failed to publish event"),
            Err(_) => warn!(%reason, "failed to publish event: no answer in time"),
        }
    }

    /// Remembers what an action needs for its Event once the cluster follows.
    pub(super) fn note(&self, st: &mut SupervisedState, action: Action) {
        match action {
            Action::Degrade { since } => {
                st.degrade_since = Some(since);
                // An outage whose restore failed (the configuration still degraded) keeps its
                // record; any other degrade starts one.
                let unrestored = st.presence == Presence::Degraded
                    && st.outage.as_ref().is_some_and(|o| o.restored_at.is_none());
                if !unrestored {
                    st.outage = Some(Outage {
                        started_at: Some(micro_now()),
                        ..Outage::default()
                    });
                }
            }
            Action::Deregister { cause, since } => {
                st.deregister_cause = Some((cause, since));
                if cause != Cause::Suspended
                    && st.outage.as_ref().is_none_or(|o| o.restored_at.is_some())
                {
                    st.outage = Some(Outage {
                        started_at: Some(micro_now()),
                        ..Outage::default()
                    });
                }
            }
            Action::Prove | Action::Register | Action::Restore | Action::None => {}
        }
    }

    /// Feeds one input, converges, and marks the status due when the machine or the
    /// configuration changed (always with `status_changed`: the probe's record is new); returns
    /// when the next probe is due.
    pub(super) async fn observe(
        &self,
        entry: &Arc<Supervised>,
        input: Input,
        status_changed: bool,
    ) -> Duration {
        let mut st = entry.state.lock().await;
        let before = (st.machine.state(), st.presence);
        let now = Instant::now();
        let action = st.machine.observe(input, now);
        self.note(&mut st, action);
        // A healthy registration is compared with the live object once per probe, so an edit
        // by someone else is put right within a probe period: with the watched copy when it is
        // exactly what is wanted, read from the API server otherwise (an edit, a removal, or a
        // write of this replica the watch has not shown yet). A failing one is being changed
        // anyway; its converge needs no extra call on the way to failing open.
        if input == Input::ProbeSucceeded
            && st.presence != Presence::Absent
            && !self.watched_as_wanted(&st)
            && let Err(e) = self.observe_live(&mut st).await
        {
            warn!(initializer = %st.target.initializer, error = %e, "failed to read the live configuration");
        }
        let needed = action != Action::None
            || st.machine.in_outage()
            || st.presence != Presence::of(&st.machine, now)
            || (st.presence != Presence::Absent && st.applied.is_none());
        if needed && let Err(e) = self.converge(entry, &mut st).await {
            warn!(initializer = %st.target.initializer, error = %e, "failed to converge");
        }
        if st.presence == Presence::Proving && self.route_reached(&mut st).await {
            let action = st.machine.observe(Input::Routed, Instant::now());
            self.note(&mut st, action);
            if let Err(e) = self.converge(entry, &mut st).await {
                warn!(initializer = %st.target.initializer, error = %e, "failed to converge");
            }
        }
        if status_changed || (st.machine.state(), st.presence) != before {
            st.status_due();
        }
        st.machine.next_probe_in(Instant::now())
    }

    /// Events, metrics, the outage's steps and the missed-initializations window, for one
    /// change of the configuration written from `write_started` on.
    pub(super) async fn transitioned(
        &self,
        st: &mut SupervisedState,
        before: Presence,
        now_is: Presence,
        write_started: Timestamp,
    ) {
        let name = st.target.initializer.clone();
        let configuration = st.target.configuration();
        let reference = st.target.reference.clone();
        let outage_step = st.machine.in_outage()
            || st
                .deregister_cause
                .is_some_and(|(c, _)| c != Cause::Suspended);
        if before == Presence::Normal && now_is != Presence::Normal && outage_step {
            st.window_from.get_or_insert(write_started);
        }
        match (before, now_is) {
            (_, Presence::Proving) => {
                info!(initializer = %name, %configuration, "registered failing open until the API server is seen reaching the initializer");
            }
            (Presence::Normal, Presence::Degraded) => {
                let took = st
                    .degrade_since
                    .take()
                    .map(|s| s.elapsed())
                    .unwrap_or_default();
                if let Some(outage) = st.outage.as_mut() {
                    outage.degraded_at = Some(micro_now());
                }
                info!(initializer = %name, %configuration, took_ms = took.as_millis() as u64, "degraded");
                let now = st.target.registration.degraded_note(took);
                let why = st
                    .last_probe
                    .as_ref()
                    .filter(|probe| !probe.ok)
                    .map(|probe| format!(" ({})", probe.message))
                    .unwrap_or_default();
                self.publish(
                    &reference,
                    EventType::Warning,
                    Reason::Degraded,
                    format!(
                        "a probe failed{why}: {configuration} {now}; it is removed after {} failed probes in a row and restored after {} good ones",
                        st.machine.config().failure_threshold,
                        st.machine.config().success_threshold,
                    ),
                )
                .await;
            }
            (_, Presence::Absent)
                if std::mem::take(&mut st.adopted_stray) && st.deregister_cause.is_none() =>
            {
                // A configuration that appeared while the initializer was out of the path (a
                // registration a replica frozen past its lease sent late, or someone's create)
                // was removed: no probe, endpoint or suspend removed the initializer now. An
                // outage in progress, its figures and the deregistration count stay the first
                // removal's.
                info!(initializer = %name, %configuration, "removed a configuration that appeared while the initializer was out of the path");
                self.publish(
                    &reference,
                    EventType::Warning,
                    // Its own reason: the recorder folds a second `Deregistered` Event into the
                    // first one's series, note and all.
                    Reason::StrayConfigurationRemoved,
                    format!(
                        "removed {configuration}: it appeared while the initializer is out of the path (a registration that landed late, or someone else's write)"
                    ),
                )
                .await;
                if let Some(legacy) = st.target.registration.left_pending() {
                    self.release_pending(&name, legacy.clone());
                }
            }
            (Presence::Proving, Presence::Absent) if st.deregister_cause.is_none() => {
                st.route = super::RouteChecks::default();
                info!(initializer = %name, %configuration, "removed the proving configuration: the initializer is no longer ready");
            }
            (_, Presence::Absent) => {
                let (cause, since) = st
                    .deregister_cause
                    .take()
                    .unwrap_or((Cause::ProbesFailed, Instant::now()));
                let took = since.elapsed();
                let measured = (cause != Cause::Suspended).then_some(took);
                self.inner
                    .metrics
                    .deregistered(&name, cause.reason(), measured);
                if cause != Cause::Suspended
                    && let Some(outage) = st.outage.as_mut()
                {
                    outage.deregistered_at = Some(micro_now());
                }
                info!(initializer = %name, %configuration, cause = cause.reason(), took_ms = took.as_millis() as u64, "deregistered");
                let (type_, note) = match cause {
                    Cause::Suspended
                        if st.target.in_api_server() && st.target.suspended.is_none() =>
                    {
                        (
                            EventType::Normal,
                            format!(
                                "removed {configuration}: the preset runs in the API server (its MutatingAdmissionPolicy is proven and in force)"
                            ),
                        )
                    }
                    Cause::Suspended => (
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
                self.publish(&reference, type_, Reason::Deregistered, note)
                    .await;
                if cause != Cause::Suspended
                    && let Some(legacy) = st.target.registration.left_pending()
                {
                    self.release_pending(&name, legacy.clone());
                }
            }
            (from, Presence::Normal) => {
                if !from.is_registered() {
                    self.inner.metrics.registered(&name);
                }
                let restored = from == Presence::Degraded;
                if let Some(outage) = st.outage.as_mut().filter(|o| o.restored_at.is_none()) {
                    outage.restored_at = Some(micro_now());
                }
                info!(initializer = %name, %configuration, restored, "registered");
                let (reason, note) = if restored {
                    (
                        Reason::Restored,
                        format!(
                            "restored {configuration} to the spec's failurePolicy and timeoutSeconds: the initializer answers again"
                        ),
                    )
                } else {
                    (
                        Reason::Registered,
                        format!(
                            "registered {configuration}: the initializer is available and answering"
                        ),
                    )
                };
                self.publish(&reference, EventType::Normal, reason, note)
                    .await;
                if let Some(from) = st.window_from.take() {
                    self.count_missed(st, from);
                }
            }
            _ => {}
        }
    }
}
