//! The status writes: the supervisor is the only writer of an Initializer's `.status`. A supervised
//! one's status is computed ([`status::compute`], pure) from its entry and written under its lock,
//! fenced by resourceVersion; the reconciler's refusals and failures go through here too, so no
//! write drops another's `details.lastError`.

use std::time::Instant;

use initializer_crds::constants::RELEASED_OBJECTS_DETAIL;
use initializer_crds::{Initializer, InitializerStatus};
use jiff::Timestamp;
use kube::ResourceExt;
use tracing::{info, warn};

use crate::apply;
use crate::error::Result;
use crate::metrics::InitializerGauges;
use crate::status::{self, Observation};
use crate::validate::Refusal;

use super::{PENDING_NAME_DETAIL, Presence, SupervisedState, Supervisor, bounded};

impl Supervisor {
    /// The last failure the reconciler reported for `initializer`.
    pub(super) fn failure(&self, initializer: &str) -> Option<String> {
        self.known(initializer, |known| known.failure.clone())
    }

    /// Records why a reconcile of `obj` could not deploy its workload and shows it in the
    /// status (`details.lastError`) until a reconcile succeeds: a supervised Initializer's
    /// status is computed with it from now on; any other keeps its stored status beside it.
    /// The registration is left as it is. A supervised status is written onto the version the
    /// reconcile handed over first ([`Supervisor::observed`]).
    pub async fn report_failure(&self, obj: &Initializer, configuration: &str, error: String) {
        let name = obj.name_any();
        self.known(&name, |known| known.failure = Some(error.clone()));
        let entry = self.entries().get(&name).cloned();
        if let Some(entry) = entry {
            let mut st = entry.state.lock().await;
            self.refresh_status(&mut st).await;
            return;
        }
        let status = status::after_failure(obj, configuration, &error, Timestamp::now());
        if let Err(e) = self.write_unsupervised(obj, &status).await {
            warn!(initializer = %name, error = %e, "failed to report the failure in the status");
        }
    }

    /// Takes the status and version of `obj` as a reconcile just read them into its entry, if
    /// it has one, so that the prober's next status is written onto that version even when the
    /// reconcile fails before [`Supervisor::sync`] (otherwise every write after someone's edit
    /// would be refused until a reconcile succeeds).
    pub async fn observed(&self, obj: &Initializer) {
        let entry = self.entries().get(&obj.name_any()).cloned();
        if let Some(entry) = entry {
            entry.state.lock().await.adopt(
                obj.status.as_ref(),
                obj.metadata.resource_version.as_deref(),
            );
        }
    }

    /// Writes the status of an Initializer nothing is registered or supervised for (call
    /// [`Supervisor::stop`] first): refused for `refusals`, or, with `conflict`, leaving
    /// someone else's object alone (then `details.lastError` says which).
    pub async fn report_unsupervised(
        &self,
        obj: &Initializer,
        refusals: &[Refusal],
        configuration: &str,
        conflict: Option<String>,
    ) -> Result<InitializerStatus> {
        let name = obj.name_any();
        self.known(&name, |known| known.failure = conflict.clone());
        let now = Timestamp::now();
        let status = status::unsupervised(obj, refusals, configuration, conflict.as_deref(), now);
        let status = match conflict {
            Some(why) => status::with_conflict(status, why, obj.status.as_ref(), now),
            None => status,
        };
        self.write_unsupervised(obj, &status).await?;
        Ok(status)
    }

    /// Writes `status` for an Initializer without an entry, unless only the probe figures
    /// changed (bounded, only while this replica leads, and only onto the version of `obj`).
    pub(super) async fn write_unsupervised(
        &self,
        obj: &Initializer,
        status: &InitializerStatus,
    ) -> Result<()> {
        if status::only_probe_figures_changed(obj.status.as_ref(), status, Timestamp::now()) {
            return Ok(());
        }
        let name = obj.name_any();
        self.inner
            .leadership
            .check(|| format!("write the status of initializer {name}"))?;
        bounded(
            || format!("write the status of initializer {name}"),
            apply::apply_status(
                &self.inner.client,
                &name,
                status,
                obj.metadata.resource_version.as_deref(),
            ),
        )
        .await
        .map(|_| ())
    }

    /// Computes the status from everything known and writes it unless only the probe figures
    /// changed and were written recently; only onto the version last read or written.
    pub(super) async fn write_status(&self, st: &mut SupervisedState) -> Result<InitializerStatus> {
        let target = &st.target;
        let previous = st.written.as_ref().or(target.stored_status.as_ref());
        let configuration = target.configuration();
        let now = Instant::now();
        let failure = self.failure(&target.initializer);
        let mut status = status::compute(&Observation {
            generation: target.generation,
            refusals: &[],
            suspended: target.suspended,
            workload: Some(target.workload.clone()),
            health: Some(st.machine.snapshot()),
            probe: st.last_probe.clone(),
            registered: st.presence != Presence::Absent,
            configuration_name: &configuration,
            configuration_kind: target.configuration_kind(),
            certificate_not_after: target.certificate_not_after,
            now: Timestamp::now(),
            previous,
            degraded: st.presence == Presence::Degraded,
            outage: st.outage.clone(),
            fallback: target.fallback.as_ref().map(|_| st.fallback.view(now)),
            missed: st.missed.clone(),
            fail_closed: target.fail_closed_bounds(),
            last_error: failure.as_deref(),
            engine: target.engine.as_ref(),
        });
        if let Some(legacy) = &target.legacy {
            status.details.insert(
                PENDING_NAME_DETAIL.to_string(),
                legacy.canary.pending_name.clone(),
            );
            if let Some(released) = st.released {
                status
                    .details
                    .insert(RELEASED_OBJECTS_DETAIL.to_string(), released.to_string());
            }
        }
        self.inner.metrics.set_fail_closed(
            &target.initializer,
            status
                .conditions
                .iter()
                .any(|c| c.type_ == status::FAIL_CLOSED && c.status == "True"),
        );
        self.inner.metrics.observe_initializer(
            &target.initializer,
            &InitializerGauges {
                registered: st.presence != Presence::Absent,
                degraded: st.presence == Presence::Degraded,
                suspended: target.suspended,
                certificate_expiry: target.certificate_not_after.map(|t| t.as_second()),
                probe_budget: target.budget,
            },
        );
        if !status::only_probe_figures_changed(previous, &status, Timestamp::now()) {
            self.may_write(st, || {
                format!("write the status of initializer {}", target.initializer)
            })?;
            let version = bounded(
                || format!("write the status of initializer {}", target.initializer),
                apply::apply_status(
                    &self.inner.client,
                    &target.initializer,
                    &status,
                    st.version.as_deref(),
                ),
            )
            .await?;
            st.written = Some(status.clone());
            st.replaced
                .record(std::mem::replace(&mut st.version, version));
        }
        Ok(status)
    }

    pub(super) async fn refresh_status(&self, st: &mut SupervisedState) {
        match self.write_status(st).await {
            Ok(_) => {}
            // Someone wrote the Initializer since this replica read it: the reconcile of that
            // change brings the new version, and the status is written onto it then.
            Err(e) if e.is_stale_write() => {
                info!(initializer = %st.target.initializer, error = %e, "status not written: the Initializer changed since it was read");
            }
            Err(e) => {
                warn!(initializer = %st.target.initializer, error = %e, "failed to write status");
            }
        }
    }
}
