//! Converge: make the cluster hold what the health machine wants for one Initializer. It reads
//! what is live (the watched copy first, `drift`), decides the next presence and the write
//! (`decide`, pure), installs the fallback before a step out of the path, writes or removes the
//! configuration, retries a removal that failed, and carries out what each change of the
//! configuration means (decided by [`effects`](super::effects), pure): Events, metrics, the
//! release of pending objects, the missed count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info, warn};

use crate::apply::{self, FallbackCheck};
use crate::backend::Live;
use crate::error::{Error, Result};
use crate::events::Reason;

use super::{
    ConfigurationWrite, FALLBACK_SETTLE, FallbackRun, Presence, RemovalRetry, Supervised,
    SupervisedState, Supervision, Supervisor, bounded, configuration_write, drift, effects,
    micro_now, next_presence, removal_retry, validate_fallback_name,
};

impl Supervisor {
    /// Makes the cluster hold what the machine wants: the fallback first (when the machine is
    /// out of the path), then the configuration (a step out of the path waits for the
    /// fallback to be in force), then the fallback lifted once the configuration is back.
    pub(super) async fn converge(
        &self,
        entry: &Arc<Supervised>,
        st: &mut SupervisedState,
    ) -> Result<()> {
        let now = Instant::now();
        let name = st.target.initializer.clone();
        let want_fallback = st.target.fallback.is_some() && st.machine.in_outage();
        if want_fallback {
            self.install_fallback(entry, st).await;
        }
        let wanted = Presence::of(&st.machine, now);
        let ready = !want_fallback || st.fallback.ready(now);
        let next = next_presence(st.presence, wanted, ready);
        if next != wanted {
            debug!(initializer = %name, "waiting for the fallback to be in force before failing open");
        }
        match self.apply_presence(st, next).await {
            Ok(()) => st.removal_retry = RemovalRetry::None,
            Err(e) => {
                if next == Presence::Absent {
                    self.retry_removal(entry, st, &e);
                }
                return Err(e);
            }
        }
        let lift = !want_fallback
            && (st.fallback.applied.is_some() || st.fallback.installed_at.is_some())
            && (st.presence == Presence::Normal || !st.machine.in_outage());
        if lift {
            let fallback_name = validate_fallback_name(&st.target);
            let removed =
                match self.may_write(st, || format!("remove the fallback {fallback_name}")) {
                    Ok(()) => {
                        bounded(
                            || format!("remove the fallback {fallback_name}"),
                            apply::remove_fallback(&self.inner.client, &fallback_name),
                        )
                        .await
                    }
                    Err(e) => Err(e),
                };
            match removed {
                Ok(_) => {
                    st.fallback = FallbackRun::default();
                    info!(initializer = %name, "fallback lifted");
                    self.publish(
                        &st.target.reference,
                        EventType::Normal,
                        Reason::FallbackRemoved,
                        format!(
                            "removed the fallback {}: the initializer is back in the path",
                            validate_fallback_name(&st.target)
                        ),
                    )
                    .await;
                }
                Err(e) => warn!(initializer = %name, error = %e, "failed to lift the fallback"),
            }
        }
        Ok(())
    }

    pub(super) async fn install_fallback(&self, entry: &Arc<Supervised>, st: &mut SupervisedState) {
        let Some(fallback) = st.target.fallback.clone() else {
            return;
        };
        if st.fallback.unsupported
            || (st.fallback.installed_at.is_some()
                && st.fallback.applied.as_ref() == Some(&fallback))
        {
            return;
        }
        let name = st.target.initializer.clone();
        let policy = fallback.policy.name_any();
        if let Err(e) = self.may_write(st, || format!("install the fallback {policy}")) {
            debug!(initializer = %name, error = %e, "not installing the fallback");
            return;
        }
        let applied = bounded(
            || format!("install the fallback {policy}"),
            apply::apply_fallback(&self.inner.client, &fallback),
        )
        .await;
        match applied {
            Ok(FallbackCheck::Accepted) => {
                let first = st.fallback.installed_at.is_none();
                st.fallback.installed_at = Some(Instant::now());
                st.fallback.applied = Some(fallback.clone());
                st.fallback.failed = None;
                if let Some(outage) = st.outage.last.as_mut() {
                    outage.fallback_installed_at = Some(micro_now());
                }
                info!(initializer = %name, "fallback installed");
                if first {
                    self.publish(
                        &st.target.reference,
                        EventType::Normal,
                        Reason::FallbackInstalled,
                        format!(
                            "installed the fallback ValidatingAdmissionPolicy {} and its binding: its validations stay enforced while the initializer is out of the path",
                            fallback.policy.name_any()
                        ),
                    )
                    .await;
                }
                // Converge again once the API server enforces it.
                tokio::spawn(
                    self.clone()
                        .reconverge_after(Arc::downgrade(entry), FALLBACK_SETTLE),
                );
            }
            Ok(FallbackCheck::Unsupported) => {
                st.fallback.unsupported = true;
                warn!(initializer = %name, "the API server does not serve ValidatingAdmissionPolicy: no fallback");
                self.publish(
                    &st.target.reference,
                    EventType::Warning,
                    Reason::FallbackUnsupported,
                    "the API server does not serve ValidatingAdmissionPolicy: the fallback cannot be put in force".into(),
                )
                .await;
            }
            Ok(FallbackCheck::Refused(why)) => {
                warn!(initializer = %name, %why, "the fallback was refused");
                st.fallback.failed = Some(why);
            }
            Err(e) => {
                warn!(initializer = %name, error = %e, "failed to install the fallback");
                st.fallback.failed = Some(e.to_string());
            }
        }
    }

    /// After a failed removal, converges again with backoff until the API server confirms the
    /// configuration is gone (one retry pending at a time; none once supervision stopped or
    /// when retrying cannot help).
    pub(super) fn retry_removal(
        &self,
        entry: &Arc<Supervised>,
        st: &mut SupervisedState,
        failure: &Error,
    ) {
        let hopeless = matches!(
            failure,
            Error::NotLeading { .. } | Error::SupervisionStopped { .. } | Error::NotOurs { .. }
        );
        let scheduled = matches!(st.removal_retry, RemovalRetry::Scheduled(_));
        if hopeless || st.stopped.is_cancelled() || scheduled {
            return;
        }
        let delay = removal_retry(st.removal_retry.last_delay());
        st.removal_retry = RemovalRetry::Scheduled(delay);
        warn!(initializer = %st.target.initializer, error = %failure, retry_in_ms = delay.as_millis() as u64, "failed to remove the configuration; retrying");
        let sup = self.clone();
        let weak = Arc::downgrade(entry);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(entry) = weak.upgrade() else {
                return;
            };
            let mut st = entry.state.lock().await;
            st.removal_retry = RemovalRetry::Ran(delay);
            if let Err(e) = sup.converge(&entry, &mut st).await {
                debug!(initializer = %st.target.initializer, error = %e, "removal retry failed");
            }
            st.status.due();
        });
    }

    /// Converges one entry again after `delay` (boxed: converging may schedule this again).
    pub(super) fn reconverge_after(
        self,
        entry: std::sync::Weak<Supervised>,
        delay: Duration,
    ) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let Some(entry) = entry.upgrade() else {
                return;
            };
            let mut st = entry.state.lock().await;
            if let Err(e) = self.converge(&entry, &mut st).await {
                warn!(initializer = %st.target.initializer, error = %e, "failed to converge");
            }
            st.status.due();
        })
    }

    /// What the cluster holds under the configuration's name, of the backend's kind.
    pub(super) async fn live(&self, target: &Supervision) -> Result<Live> {
        target
            .registration
            .configurations(self)
            .live(&target.configuration(), &target.label())
            .await
    }

    /// Whether the watched copy of the configuration is this Initializer's and holds what is
    /// wanted for its presence (then reading the live one would change nothing).
    pub(super) fn watched_as_wanted(&self, st: &SupervisedState) -> bool {
        if !st.target.registration.watched() || st.applied.is_none() {
            return false;
        }
        let Some(configurations) = &self.inner.configurations else {
            return false;
        };
        let watched = configurations.get(&ObjectRef::new(&st.target.configuration()));
        drift::unchanged(
            st.target.desired(st.presence).as_ref(),
            watched.as_deref(),
            &st.target.label(),
        )
    }

    /// Reads the live configuration and records what the cluster holds: nothing, someone
    /// else's object (an error: it is never taken over), or ours, edited or not (an edited one
    /// is re-applied by the next converge).
    pub(super) async fn observe_live(&self, st: &mut SupervisedState) -> Result<()> {
        let configuration = st.target.configuration();
        let live = bounded(|| format!("read {configuration}"), self.live(&st.target)).await?;
        match live {
            Live::Absent => {
                st.presence = Presence::Absent;
                st.applied = None;
            }
            Live::NotOurs => {
                st.presence = Presence::Absent;
                st.applied = None;
                return Err(Error::NotOurs {
                    kind: st.target.configuration_kind(),
                    name: configuration,
                });
            }
            Live::Ours(found) => {
                if st.presence == Presence::Absent {
                    // Left by an earlier run or another replica: the converge removes it if
                    // it must not be there.
                    st.presence = Presence::found(&found);
                }
                let desired = st.target.desired(st.presence);
                let registration = &st.target.registration;
                let changed = desired
                    .as_ref()
                    .is_some_and(|d| found.differs_from(registration.desired(d)));
                if changed {
                    // Someone else edited it (rather than the spec changing what is wanted):
                    // what was last applied is not what is live.
                    let edited = st
                        .applied
                        .as_ref()
                        .is_some_and(|a| found.differs_from(registration.desired(a)));
                    if edited {
                        info!(initializer = %st.target.initializer, %configuration, "the live configuration was changed by someone else: applying it again");
                    }
                    st.applied = None;
                } else {
                    st.applied = desired;
                }
            }
        }
        Ok(())
    }

    /// Applies one configuration state, with its Event and metrics.
    pub(super) async fn apply_presence(
        &self,
        st: &mut SupervisedState,
        next: Presence,
    ) -> Result<()> {
        // Taken before the write: the API server cannot call the changed configuration before
        // it is written, so an outage's window that starts here misses no create.
        let write_started = Timestamp::now();
        let name = st.target.initializer.clone();
        let configuration = st.target.configuration();
        let before = st.presence;
        match configuration_write(
            st.presence,
            st.applied.as_ref(),
            next,
            st.target.desired(next),
        ) {
            ConfigurationWrite::Nothing => return Ok(()),
            ConfigurationWrite::Apply(desired) => {
                let desired = *desired;
                self.may_write(st, || format!("register {configuration}"))?;
                if st.applied.is_none() {
                    // Never take over a configuration of the same name that is not ours.
                    self.observe_live(st).await?;
                }
                let registration = &st.target.registration;
                let registered = bounded(
                    || format!("register {configuration}"),
                    registration
                        .configurations(self)
                        .register(registration.desired(&desired)),
                )
                .await;
                if let Err(e) = registered {
                    warn!(initializer = %name, error = %e, "failed to apply the configuration");
                    // A registration that failed is tried again after the probes it needs; a
                    // restore that failed leaves the degraded configuration in place and is
                    // tried again at the next converge (resetting the machine would remove it).
                    if next == Presence::Normal && !before.is_registered() {
                        st.machine.registration_failed();
                    }
                    return Err(e);
                }
                st.applied = Some(desired);
                st.presence = next;
            }
            ConfigurationWrite::Remove => {
                self.may_write(st, || format!("deregister {configuration}"))?;
                // Never delete a configuration of the same name that is not ours.
                self.observe_live(st).await?;
                if st.presence != Presence::Absent {
                    bounded(
                        || format!("deregister {configuration}"),
                        st.target
                            .registration
                            .configurations(self)
                            .deregister(&configuration),
                    )
                    .await?;
                }
                st.applied = None;
                st.presence = Presence::Absent;
            }
        }
        self.transitioned(st, before, next, write_started).await;
        Ok(())
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
