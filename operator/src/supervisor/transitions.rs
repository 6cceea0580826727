//! Transitions: every input of an Initializer's health machine goes through `Supervisor::observe`;
//! what the machine decides is recorded, the cluster is converged on it, and what each change of
//! the configuration means ([`effects`](super::effects)) is carried out: Events, metrics, the
//! release of pending objects, the missed count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use initializer_crds::Outage;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use tracing::warn;

use crate::events::Reason;
use crate::health::{Action, Input};

use super::{CALL_TIMEOUT, Presence, Supervised, SupervisedState, Supervisor, effects, micro_now};

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
                st.pending.degrade_since = Some(since);
                // An outage whose restore failed (the configuration still degraded) keeps its
                // record; any other degrade starts one.
                let unrestored = st.presence == Presence::Degraded
                    && st
                        .outage
                        .last
                        .as_ref()
                        .is_some_and(|o| o.restored_at.is_none());
                if !unrestored {
                    st.outage.last = Some(Outage {
                        started_at: Some(micro_now()),
                        ..Outage::default()
                    });
                }
            }
            Action::Deregister { cause, since } => {
                st.pending.deregister(cause, since);
                if !cause.is_on_purpose()
                    && st
                        .outage
                        .last
                        .as_ref()
                        .is_none_or(|o| o.restored_at.is_some())
                {
                    st.outage.last = Some(Outage {
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
            st.status.due();
        }
        st.machine.next_probe_in(Instant::now())
    }

    /// Events, metrics, the outage's steps and the missed-initializations window, for one
    /// change of the configuration written from `write_started` on: decided by
    /// [`effects::of_change`], carried out here.
    pub(super) async fn transitioned(
        &self,
        st: &mut SupervisedState,
        before: Presence,
        now_is: Presence,
        write_started: Timestamp,
    ) {
        let effects = effects::of_change(st, before, now_is, write_started);
        let name = st.target.initializer.clone();
        let reference = st.target.reference.clone();
        for (type_, reason, note) in effects.events {
            self.publish(&reference, type_, reason, note).await;
        }
        if effects.registered {
            self.inner.metrics.registered(&name);
        }
        if let Some((cause, took)) = effects.deregistered {
            self.inner.metrics.deregistered(&name, cause.reason(), took);
        }
        if let Some(legacy) = effects.release {
            self.release_pending(&name, legacy);
        }
        if let Some(from) = effects.count_missed_from {
            self.count_missed(st, from);
        }
    }
}
