//! The aftermath of a fail-open window: with the legacy backend, the objects left pending on the
//! initializer's name are released; with either backend, the objects created meanwhile without
//! the initializer are counted ([`crate::missed`]) into `status.missedInitializations`.

use jiff::Timestamp;
use kube::runtime::events::EventType;
use tracing::info;

use crate::apply;
use crate::events::Reason;
use crate::missed;

use super::{LegacySupervision, SupervisedState, Supervisor, WINDOW_TAIL};

impl Supervisor {
    /// Releases, in the background, every object still pending on the name of a legacy-backend
    /// initializer whose configuration was just removed: the configuration's removal stops new
    /// objects from getting the name, but those already waiting would wait until their creates
    /// time out and stay uninitialized. A second pass after [`WINDOW_TAIL`] catches creates the
    /// API server admitted just before the removal. The count goes to the status
    /// (`details.releasedObjects`) and an Event `ReleasedPendingObjects`.
    pub(super) fn release_pending(&self, initializer: &str, legacy: LegacySupervision) {
        let sup = self.clone();
        let name = initializer.to_string();
        tokio::spawn(async move {
            let pending_name = legacy.canary.pending_name.clone();
            let mut released =
                apply::legacy::release(&sup.inner.client, &legacy.reached, &pending_name).await;
            tokio::time::sleep(WINDOW_TAIL).await;
            let again =
                apply::legacy::release(&sup.inner.client, &legacy.reached, &pending_name).await;
            released.count += again.count;
            released.failed.extend(again.failed);
            let Some(entry) = sup.entries().get(&name).cloned() else {
                return;
            };
            let mut st = entry.state.lock().await;
            st.outage.released = Some(released.count);
            st.status.due();
            let reference = st.target.reference.clone();
            drop(st);
            let failed = if released.failed.is_empty() {
                String::new()
            } else {
                format!(
                    "; could not release everything: {}",
                    released.failed.join("; ")
                )
            };
            sup.publish(
                &reference,
                if released.failed.is_empty() { EventType::Normal } else { EventType::Warning },
                Reason::ReleasedPendingObjects,
                format!(
                    "released {} object(s) still pending on {pending_name} after its configuration was removed, so that their creates do not stay stuck{failed}",
                    released.count
                ),
            )
            .await;
        });
    }

    /// Counts, once the window's tail has passed, the objects created in the window without the
    /// initializer's mark; reports them in the status and an Event.
    pub(super) fn count_missed(&self, st: &SupervisedState, from: Timestamp) {
        let tail = st.target.timeout + WINDOW_TAIL;
        let to = Timestamp::now()
            .checked_add(jiff::SignedDuration::try_from(tail).unwrap_or_default())
            .unwrap_or_else(|_| Timestamp::now());
        let webhook = st.target.webhook.webhooks.iter().flatten().next();
        let scope = missed::Scope {
            initializer: st.target.initializer.clone(),
            namespace_selector: webhook.and_then(|w| w.namespace_selector.clone()),
            object_selector: webhook.and_then(|w| w.object_selector.clone()),
            gate: st.target.gate.clone(),
            keys: st.target.mark_keys.clone(),
            from,
            to,
        };
        let rules = st.target.rules.clone();
        let sup = self.clone();
        let name = st.target.initializer.clone();
        tokio::spawn(async move {
            tokio::time::sleep(tail).await;
            let report = missed::count(&sup.inner.client, &rules, &scope).await;
            let Some(entry) = sup.entries().get(&name).cloned() else {
                return;
            };
            let mut st = entry.state.lock().await;
            info!(initializer = %name, count = report.count, "missed initializations counted");
            sup.inner.metrics.missed(&name, report.count);
            let (type_, reason, note) = if report.count > 0 {
                (
                    EventType::Warning,
                    Reason::MissedInitializations,
                    format!(
                        "{}{} object(s) in scope were created without the initializer between {} and {}{}: recreate them to initialize them",
                        if report.truncated { "at least " } else { "" },
                        report.count,
                        report.from.0,
                        report.to.0,
                        if report.examples.is_empty() {
                            String::new()
                        } else {
                            format!(", for example {}", report.examples.join(", "))
                        }
                    ),
                )
            } else {
                (
                    EventType::Normal,
                    Reason::NoMissedInitializations,
                    format!(
                        "no object in scope was created without the initializer between {} and {}",
                        report.from.0, report.to.0
                    ),
                )
            };
            st.outage.missed = Some(report);
            st.status.due();
            let reference = st.target.reference.clone();
            drop(st);
            sup.publish(&reference, type_, reason, note).await;
        });
    }
}
