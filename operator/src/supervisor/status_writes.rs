//! The status writes: the supervisor is the only writer of an Initializer's `.status`.
//!
//! A supervised Initializer has one writer, its entry's [`status_writer`] task. Whatever learns
//! something that shows in the status (a sync, a probe's transition, a converge, a released or
//! missed count, a reconcile's failure) only marks the entry's status due
//! ([`SupervisedState::status_due`]); the writer then takes the entry's lock, computes the status
//! from everything the entry holds ([`status::compute`], pure) and writes it, leader-gated and
//! fenced by resourceVersion. Marks made while it writes coalesce into one more write, so the
//! last write always carries the latest state: the order of writes is the writer's structure,
//! not a lock rule each call site must keep.
//!
//! An Initializer without an entry (refused, someone else's object in the way, or a reconcile
//! that failed before its first sync) is written by the reconcile through
//! [`Supervisor::report_unsupervised`] and [`Supervisor::report_failure`], onto the version it
//! read. The reconcile's last failure is an input of the computed status either way, so no
//! write drops another's `details.lastError`. The guard's witness, which a reconcile records
//! before anything is deployed, is written here too ([`Supervisor::record_guard_witness`]), as a
//! field of its own that no other write touches; so is a NetworkPolicy withdrawn under
//! `--network-policy=auto` ([`Supervisor::record_withdrawn_network_policy`]).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use initializer_crds::{GuardWitness, Initializer, InitializerStatus, WithdrawnNetworkPolicy};
use jiff::Timestamp;
use kube::ResourceExt;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::apply;
use crate::error::{Error, Result};
use crate::metrics::{InitializerGauges, StatusGauges};
use crate::status::{self, Observation};
use crate::validate::Refusal;

use super::{Presence, Supervised, SupervisedState, Supervisor, bounded, status_write_retry};

impl Supervisor {
    /// The last failure the reconciler reported for `initializer`.
    pub(super) fn failure(&self, initializer: &str) -> Option<String> {
        self.known(initializer, |known| known.failure.clone())
    }

    /// Records why a reconcile of `obj` could not deploy its workload and shows it in the
    /// status (`details.lastError`) until a reconcile succeeds: a supervised Initializer's
    /// status is computed with it from now on; any other keeps its stored status beside it.
    /// The registration is left as it is. A supervised status is marked due for its writer,
    /// which writes onto the version the reconcile handed over first ([`Supervisor::observed`]).
    pub async fn report_failure(&self, obj: &Initializer, configuration: &str, error: String) {
        let name = obj.name_any();
        self.known(&name, |known| known.failure = Some(error.clone()));
        let entry = self.entries().get(&name).cloned();
        if let Some(entry) = entry {
            entry.state.lock().await.status.due();
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
            entry.state.lock().await.status.adopt(
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

    /// Records `witness`, the guard's judgement of `obj`, in its status: onto the version the
    /// reconcile read only (a write since refuses it, so the witness names the generation stored
    /// when it landed), bounded, and only while this replica leads. An entry's writer goes on
    /// onto the version this write made, unless the witness holds the Initializer back.
    pub async fn record_guard_witness(
        &self,
        obj: &Initializer,
        witness: &GuardWitness,
    ) -> Result<()> {
        let name = obj.name_any();
        let what = || format!("record the guard's witness on {name}");
        self.inner.leadership.check(what)?;
        let written = bounded(
            what,
            apply::apply_guard_witness(
                &self.inner.client,
                &name,
                witness,
                obj.metadata.resource_version.as_deref(),
            ),
        )
        .await?;
        // A held Initializer is refused next: its entry, if any, writes nothing more.
        if !witness.held {
            self.observed(&written).await;
        }
        Ok(())
    }

    /// Records in `obj`'s status that its NetworkPolicy is withdrawn (bounded, only while this
    /// replica leads, and only onto the version of `obj`), and hands the written version to its
    /// entry.
    pub async fn record_withdrawn_network_policy(
        &self,
        obj: &Initializer,
        withdrawn: &WithdrawnNetworkPolicy,
    ) -> Result<()> {
        let name = obj.name_any();
        let what = || format!("record the withdrawn NetworkPolicy of {name}");
        self.inner.leadership.check(what)?;
        let written = bounded(
            what,
            apply::apply_withdrawn_network_policy(
                &self.inner.client,
                &name,
                withdrawn,
                obj.metadata.resource_version.as_deref(),
            ),
        )
        .await?;
        self.observed(&written).await;
        Ok(())
    }

    /// Writes `status` for an Initializer without an entry, unless only the probe figures
    /// changed (bounded, only while this replica leads, and only onto the version of `obj`),
    /// and shows it in the metrics.
    pub(super) async fn write_unsupervised(
        &self,
        obj: &Initializer,
        status: &InitializerStatus,
    ) -> Result<()> {
        let name = obj.name_any();
        // Only the leader exports an Initializer's gauges, written or not.
        if self.inner.leadership.is_leading() {
            self.inner
                .metrics
                .observe_status(&name, &StatusGauges::of(status));
        }
        if status::only_probe_figures_changed(obj.status.as_ref(), status, Timestamp::now()) {
            return Ok(());
        }
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

    /// The status of a supervised Initializer, computed from everything its entry and the
    /// supervisor know (and shown in the metrics as it is computed).
    pub(super) fn current_status(&self, st: &SupervisedState) -> InitializerStatus {
        let target = &st.target;
        let previous = st.status.written.as_ref().or(target.stored_status.as_ref());
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
            registered: st.presence.is_registered(),
            configuration_name: &configuration,
            configuration_kind: target.configuration_kind(),
            certificate_not_after: target.certificate_not_after,
            now: Timestamp::now(),
            previous,
            degraded: st.presence == Presence::Degraded,
            outage: st.outage.last.clone(),
            fallback: target.fallback.as_ref().map(|_| st.fallback.view(now)),
            missed: st.outage.missed.clone(),
            fail_closed: target.fail_closed_bounds(),
            last_error: failure.as_deref(),
            engine: target.engine.as_ref(),
            route_check: (st.presence == Presence::Proving).then(|| status::RouteCheck {
                last: st.route.last.as_deref().unwrap_or("not answered yet"),
                unanswered_for: st.route.since.map(|s| s.elapsed()).unwrap_or_default(),
                deadline: self.inner.route_deadline,
            }),
        });
        target
            .registration
            .add_details(&mut status, st.outage.released);
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
                registered: st.presence.is_registered(),
                degraded: st.presence == Presence::Degraded
                    || st.machine.state() == crate::health::State::Degraded,
                suspended: target.suspended.is_some(),
                certificate_expiry: target.certificate_not_after.map(|t| t.as_second()),
                probe_budget: target.budget,
            },
        );
        self.inner
            .metrics
            .observe_status(&target.initializer, &StatusGauges::of(&status));
        status
    }

    /// Computes the status and writes it, unless only the probe figures changed and were
    /// written recently; only while this supervision may write, and only onto the version last
    /// read or written.
    async fn write_status(&self, st: &mut SupervisedState) -> Result<()> {
        let status = self.current_status(st);
        let previous = st
            .status
            .written
            .as_ref()
            .or(st.target.stored_status.as_ref());
        if status::only_probe_figures_changed(previous, &status, Timestamp::now()) {
            return Ok(());
        }
        let initializer = st.target.initializer.clone();
        self.may_write(st, || {
            format!("write the status of initializer {initializer}")
        })?;
        let version = bounded(
            || format!("write the status of initializer {initializer}"),
            apply::apply_status(
                &self.inner.client,
                &initializer,
                &status,
                st.status.version.as_deref(),
            ),
        )
        .await?;
        st.status.wrote(status, version);
        Ok(())
    }
}

/// The status writer of one supervised Initializer (see the module header): waits until its
/// status is due, then writes it under the entry's lock. A write the API server did not take is
/// tried again after a growing delay ([`status_write_retry`]), except one made onto a version
/// someone else's write replaced: the reconcile of that write brings the new version and marks
/// the status due again. Ends with the entry, or when its supervision stops.
pub(super) async fn status_writer(sup: Supervisor, entry: Weak<Supervised>, due: Arc<Notify>) {
    let mut retry: Option<Duration> = None;
    loop {
        match retry {
            None => due.notified().await,
            Some(delay) => {
                tokio::select! {
                    () = due.notified() => {}
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
        let Some(entry) = entry.upgrade() else {
            return;
        };
        let mut st = entry.state.lock().await;
        retry = match sup.write_status(&mut st).await {
            Ok(()) => None,
            Err(Error::SupervisionStopped { .. }) => return,
            // Counted as the reconciles' were when they wrote the status (`stale_status`,
            // `status`), so the reconcile-errors alert keeps seeing writes that keep failing.
            Err(e) if e.is_stale_write() => {
                sup.inner.metrics.reconcile_failed(&e);
                info!(initializer = %st.target.initializer, error = %e, "status not written: the Initializer changed since it was read");
                None
            }
            // A replica that does not lead writes nothing; the leader's entry writes it.
            Err(e @ Error::NotLeading { .. }) => {
                debug!(initializer = %st.target.initializer, error = %e, "status not written");
                None
            }
            Err(e) => {
                sup.inner.metrics.reconcile_failed(&e);
                let delay = status_write_retry(retry);
                warn!(initializer = %st.target.initializer, error = %e, retry_in_ms = delay.as_millis() as u64, "failed to write status; retrying");
                Some(delay)
            }
        };
    }
}
