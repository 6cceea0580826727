//! Transitions: every input of an Initializer's health machine goes through `Supervisor::observe`;
//! what the machine decides is recorded, and the cluster is converged on it
//! ([`converge`](super::converge), which carries out what each change of the configuration
//! means).

use std::sync::Arc;
use std::time::{Duration, Instant};

use initializer_crds::Outage;
use tracing::warn;

use crate::health::{Action, Input};

use super::{Presence, Supervised, SupervisedState, Supervisor, micro_now};

impl Supervisor {
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
            // Failing open while the changed route is proven is an outage's window like any
            // other: the fallback stands in and what slips through is counted.
            Action::Reprove => {
                st.outage.last = Some(Outage {
                    started_at: Some(micro_now()),
                    ..Outage::default()
                });
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
}
