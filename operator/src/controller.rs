//! The reconciler: validate → build (pure) → apply → supervise (the supervisor computes the
//! status, purely, and writes it as one patch),
//! wrapped in the finalizer that removes the webhook configuration before the workload may go,
//! plus the sweep that removes configurations whose Initializer no longer exists.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use initializer_crds::constants::{
    FINALIZER, INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};
use initializer_crds::{Backend, Initializer, InitializerStatus, Phase};
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::apply::legacy::{Canary, InitializerConfigurationRegistrar};
use crate::apply::{self, Registrar, WebhookRegistrar};
use crate::build::{self, Settings};
use crate::error::{Error, Result, api_code};
use crate::guard;
use crate::health::{HealthConfig, latency_budget};
use crate::metrics::Metrics;
use crate::naming;
use crate::pending;
use crate::probe;
use crate::status::{self, WorkloadObservation};
use crate::supervisor::{LegacySupervision, Supervision, Supervisor, is_ours};
use crate::tls;
use crate::validate::{self, describe, validate};

/// How often every Initializer is reconciled even when nothing changed (certificate rotation,
/// status refresh).
pub const RESYNC: Duration = Duration::from_secs(30);
/// How soon an Initializer whose workload runs outside the operator's namespace is reconciled
/// again while it is not registered: workload objects are watched in the operator's namespace
/// only, so there its Deployment becoming available is seen by looking again.
pub const UNWATCHED_POLL: Duration = Duration::from_secs(1);

/// When to reconcile again after a pass that succeeded: at the resync, or soon while an
/// Initializer whose workload the operator does not watch (`watched` false) waits to be
/// registered (and is not suspended).
pub fn requeue_after(watched: bool, registered: bool, suspended: bool) -> Duration {
    if watched || registered || suspended {
        RESYNC
    } else {
        UNWATCHED_POLL
    }
}

/// A reconcile still running after this long is wedged (`/healthz` fails, the kubelet restarts
/// the operator): every call it makes is bounded far below it.
pub const RECONCILE_BOUND: Duration = Duration::from_secs(120);

/// What every reconcile shares.
pub struct Context {
    /// Every read and write of the reconcile goes through it (status writes excepted: the
    /// supervisor makes those).
    pub client: Client,
    /// Publishes Events as the operator's controller.
    pub recorder: Recorder,
    /// Reconcile counts and durations, scraped at `/metrics`.
    pub metrics: Arc<Metrics>,
    /// What the builder needs beyond the spec.
    pub settings: Settings,
    /// The operator's own namespace.
    pub operator_namespace: String,
    /// Probes, registers and deregisters each Initializer, and is the only writer of its
    /// status (but for the guard's witness, which the reconcile writes).
    pub supervisor: Supervisor,
    /// The guard on Initializers as [`crate::guard::keep_applied`] last saw it.
    pub guard: tokio::sync::watch::Receiver<crate::guard::GuardState>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("operator_namespace", &self.operator_namespace)
            .finish_non_exhaustive()
    }
}

async fn publish(ctx: &Context, obj: &Initializer, type_: EventType, reason: &str, note: String) {
    ctx.supervisor
        .publish(&obj.object_ref(&()), type_, reason, note)
        .await;
}

/// Whether a refusal needs its `Refused` Event: not when the stored status already shows this
/// generation refused (the Event is published once per generation).
pub fn refusal_is_news(obj: &Initializer) -> bool {
    !obj.status.as_ref().is_some_and(|s| {
        s.observed_generation == obj.metadata.generation
            && s.conditions
                .iter()
                .any(|c| c.type_ == status::VALID && c.status == "False")
    })
}

/// Whether a suspend needs its `Suspended` Event: the stored phase is not Suspended yet.
pub fn suspend_is_news(obj: &Initializer) -> bool {
    obj.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_none_or(|p| p != Phase::Suspended)
}

/// Whether a conflict needs its `Conflict` Event: the stored status does not show one yet.
pub fn conflict_is_news(previous: Option<&InitializerStatus>) -> bool {
    !previous.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == status::CONFLICT && c.status == "True")
    })
}

/// What the supervisor is handed for a deployed Initializer: every duration converted once
/// from the spec (period and thresholds as [`HealthConfig::from_policy`] has them).
pub fn supervision(
    obj: &Initializer,
    validated: &validate::Validated,
    desired: &build::Desired,
    workload: WorkloadObservation,
    certificate_not_after: Option<Timestamp>,
) -> Supervision {
    let health = HealthConfig::from_policy(&validated.health);
    Supervision {
        initializer: obj.name_any(),
        reference: obj.object_ref(&()),
        namespace: validated.namespace.clone(),
        service: validated.names.base.clone(),
        probe: probe::target_for(&validated.spec.rules),
        period: health.period,
        budget: latency_budget(&validated.health),
        health,
        webhook: desired.webhook.clone(),
        fallback: desired.fallback.clone(),
        rules: validated.spec.rules.clone(),
        gate: validated.spec.annotation.clone(),
        timeout: Duration::from_secs(u64::try_from(validated.spec.timeout_seconds).unwrap_or(5)),
        available: workload.available,
        suspended: obj.spec.suspend,
        generation: obj.metadata.generation,
        workload,
        certificate_not_after,
        stored_status: obj.status.clone(),
        stored_version: obj.metadata.resource_version.clone(),
        legacy: None,
        mark_keys: initializer_mark::Keys::default(),
    }
}

/// Reconciles one Initializer.
pub async fn reconcile(obj: Arc<Initializer>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    if obj.metadata.name.is_none() {
        return Err(Error::MissingName);
    }
    let _step = ctx
        .supervisor
        .watchdog()
        .start(format!("reconcile of {}", obj.name_any()), RECONCILE_BOUND);
    // A replica that lost its lease (frozen, cut off) must not act on what it saw before.
    ctx.supervisor
        .leadership()
        .check(|| format!("reconcile initializer {}", obj.name_any()))?;
    let api: Api<Initializer> = Api::all(ctx.client.clone());
    let result = finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            FinalizerEvent::Apply(obj) => apply(&obj, &ctx).await,
            FinalizerEvent::Cleanup(obj) => cleanup(&obj, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

/// What to do after a failed reconcile: wait for a change when retrying cannot help, otherwise
/// retry with the error's backoff.
pub fn error_policy(obj: Arc<Initializer>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(err);
    if err.is_stale_write() {
        // Someone wrote the Initializer after this reconcile read it: the reconcile of that
        // write brings the newer version.
        info!(initializer = %obj.name_any(), error = %err, "reconcile read an older Initializer than the one stored; retrying");
    } else {
        warn!(initializer = %obj.name_any(), error = %err, permanent = err.is_permanent(), "reconcile failed");
    }
    if err.is_permanent() {
        Action::await_change()
    } else {
        Action::requeue(err.retry_after())
    }
}

/// Refuses a spec: nothing registered or supervised, `Valid=False` and a `Refused` Event (once
/// per generation).
async fn refuse(
    obj: &Initializer,
    ctx: &Context,
    configuration: &str,
    refusals: &[validate::Refusal],
) -> Result<Action> {
    let name = obj.name_any();
    ctx.supervisor.stop(&name).await;
    remove_configuration(ctx, &name, configuration, obj.spec.backend).await?;
    if refusal_is_news(obj) {
        publish(ctx, obj, EventType::Warning, "Refused", describe(refusals)).await;
    }
    ctx.supervisor
        .report_unsupervised(obj, refusals, configuration, None)
        .await?;
    Ok(Action::await_change())
}

/// Deploys nothing for an Initializer that nothing shows passed the guard on Initializers
/// ([`guard::judge`]): created before the guard was in force and its spec unchanged since, it
/// could be anyone's. Records the witness in the status, and refuses (`Valid=False`, an Event)
/// what is held; `None` means go on.
async fn hold_unless_guarded(
    obj: &Initializer,
    ctx: &Context,
    configuration: &str,
) -> Result<Option<Action>> {
    let state = ctx.guard.borrow().clone();
    let stored = obj.status.as_ref().and_then(|s| s.guard.as_ref());
    let (witness, held) = match guard::judge(&obj.metadata, stored, &state, Timestamp::now()) {
        guard::Judgement::Unguarded => return Ok(None),
        guard::Judgement::Wait(after) => return Ok(Some(Action::requeue(after))),
        guard::Judgement::Proven(witness) => (witness, false),
        guard::Judgement::Held(witness) => (witness, true),
    };
    let name = obj.name_any();
    if stored != Some(&witness) {
        ctx.supervisor
            .leadership()
            .check(|| format!("record the guard's witness on {name}"))?;
        apply::apply_guard_witness(
            &ctx.client,
            &name,
            &witness,
            obj.metadata.resource_version.as_deref(),
        )
        .await?;
        // The write wakes this Initializer again; the reconcile of that version goes on.
        return Ok(Some(Action::await_change()));
    }
    if !held {
        return Ok(None);
    }
    let refusal = validate::Refusal {
        field: "metadata".to_string(),
        message: format!(
            "held back: created before the guard on Initializers ({}) was in force and its spec \
             unchanged since, so nothing shows its author may create \
             mutatingwebhookconfigurations; have someone who may change its spec (any change) \
             and it is deployed",
            guard::GUARD_NAME
        ),
    };
    refuse(obj, ctx, configuration, &[refusal]).await.map(Some)
}

/// The Deployments in the operator's namespace someone else made ([`status::foreign_deployments`]),
/// for the `SharedNamespace` warning.
async fn shared_with(ctx: &Context) -> Result<Vec<String>> {
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    let listed = deployments
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::Get {
            kind: "Deployment",
            name: format!("(every one in {})", ctx.operator_namespace),
            source: Box::new(source),
        })?;
    Ok(status::foreign_deployments(&listed.items))
}

/// Removes this Initializer's configuration if it is there and ours (another object of the same
/// name is never deleted); true when one was removed. Refused when this replica does not lead.
async fn remove_configuration(
    ctx: &Context,
    initializer: &str,
    configuration: &str,
    backend: Backend,
) -> Result<bool> {
    ctx.supervisor
        .leadership()
        .check(|| format!("deregister {configuration}"))?;
    if backend == Backend::InitializerConfiguration {
        let registrar = InitializerConfigurationRegistrar::new(ctx.client.clone());
        let label = naming::names(initializer).label;
        return match registrar.get(configuration).await? {
            Some(found) if apply::fallback_is_ours(&found.metadata, Some(&label)) => {
                registrar.deregister(configuration).await
            }
            Some(_) => Err(Error::NotOurs {
                kind: "InitializerConfiguration",
                name: configuration.to_string(),
            }),
            None => Ok(false),
        };
    }
    let registrar = WebhookRegistrar::new(ctx.client.clone());
    match registrar.get(configuration).await? {
        Some(found) if is_ours(&found, &naming::names(initializer).label) => {
            registrar.deregister(configuration).await
        }
        Some(_) => Err(Error::NotOurs {
            kind: "MutatingWebhookConfiguration",
            name: configuration.to_string(),
        }),
        None => Ok(false),
    }
}

/// The break-glass switch comes first: with `spec.suspend` the configuration (and any
/// fallback) is removed before anything that could fail (validation, the namespace, the
/// Deployment), so a suspend always takes the initializer out of the path.
async fn suspend_first(obj: &Initializer, ctx: &Context) -> Result<()> {
    let name = obj.name_any();
    let names = naming::names(&name);
    let registered = match obj.spec.backend {
        Backend::Webhook => {
            WebhookRegistrar::new(ctx.client.clone())
                .is_registered(&names.configuration)
                .await?
        }
        Backend::InitializerConfiguration => {
            InitializerConfigurationRegistrar::new(ctx.client.clone())
                .is_registered(&names.configuration)
                .await?
        }
    };
    if registered {
        ctx.supervisor.stop(&name).await;
        if remove_configuration(ctx, &name, &names.configuration, obj.spec.backend).await? {
            ctx.metrics.deregistered(&name, "Suspended", None);
            info!(initializer = %name, configuration = %names.configuration, "deregistered: suspended");
        }
    }
    if had_fallback(obj) && apply::remove_fallback(&ctx.client, &names.fallback).await? {
        info!(initializer = %name, "removed the fallback: suspended");
    }
    if suspend_is_news(obj) {
        publish(
            ctx,
            obj,
            EventType::Normal,
            "Suspended",
            "spec.suspend is true: the configuration is removed and stays removed; the workload keeps running".into(),
        )
        .await;
    }
    Ok(())
}

async fn apply(obj: &Initializer, ctx: &Context) -> Result<Action> {
    let name = obj.name_any();
    let names = naming::names(&name);
    let now = Timestamp::now();
    // The probers write onto the version read here, whether or not this reconcile gets as far
    // as the supervisor's sync.
    ctx.supervisor.observed(obj).await;
    if obj.spec.suspend {
        suspend_first(obj, ctx).await?;
    }
    let validated = match validate(&obj.spec, &ctx.operator_namespace, &name) {
        Ok(v) => v,
        Err(refusals) => return refuse(obj, ctx, &names.configuration, &refusals).await,
    };
    if let Some(action) = hold_unless_guarded(obj, ctx, &names.configuration).await? {
        return Ok(action);
    }
    if let Some(refusal) = check_workload_namespace(ctx, &validated.namespace).await? {
        refuse(obj, ctx, &names.configuration, &[refusal]).await?;
        // Labelling the namespace changes no Initializer: look again at the next resync.
        return Ok(Action::requeue(RESYNC));
    }
    // The API server compiles the fallback exactly as it will when an outage puts it in force:
    // ask it now (a dry run), so that an expression it refuses is refused before anything runs.
    if let Some(fallback) = build::fallback(&validated)
        && let Some(why) = ctx
            .supervisor
            .check_fallback(&name, obj.metadata.generation, &fallback)
            .await?
    {
        let refusal = validate::Refusal {
            field: "spec.fallback.validations".into(),
            message: format!("the API server refused the fallback policy: {why}"),
        };
        return refuse(obj, ctx, &names.configuration, &[refusal]).await;
    }
    // The legacy backend: only where the API server serves it, and only for rules that reach
    // a served resource its probe can make a canary of (decided before anything is deployed).
    let reached = match validated.pending_name {
        Some(_) => {
            let served = apply::legacy::api_served(&ctx.client).await?;
            if let Some(refusal) = validate::legacy::api_refusal(served) {
                return refuse(obj, ctx, &names.configuration, &[refusal]).await;
            }
            let generation = obj.metadata.generation;
            let reached = match ctx.supervisor.discovered(&name, generation) {
                Some(reached) => reached,
                None => {
                    let reached = legacy_reached(&ctx.client, &validated.spec.rules).await?;
                    ctx.supervisor
                        .remember_discovered(&name, generation, reached.clone());
                    reached
                }
            };
            let canary = pending::canary_resource(&reached);
            if let Some(refusal) = validate::legacy::canary_refusal(canary.is_some()) {
                return refuse(obj, ctx, &names.configuration, &[refusal]).await;
            }
            reached
        }
        None => Vec::new(),
    };
    let deployed = async {
        let found = apply::read_tls(
            &ctx.client,
            validate::ca_namespace(&validated),
            &validated.namespace,
            &names.ca_secret,
            &names.tls_secret,
        )
        .await?;
        let (ca, serving) = (found.ca, found.serving);
        // A CA replaced earlier leaves the bundle once every ready pod serves the new one's
        // certificate (the probe saw it, with this very bundle).
        let ca = ca.map(|ca| {
            if ca.has_previous()
                && ctx
                    .supervisor
                    .serves_current_ca(&name, ca.cert_pem.as_bytes())
            {
                ca.retire_previous()
            } else {
                ca
            }
        });
        let before = serving.as_ref().map(|(_, key)| key.clone());
        let mut material = tls::ensure(
            ca,
            serving,
            &tls::dns_names(&names.base, &validated.namespace),
            now,
        )?;
        // A new serving key: the pods sign marks with the old one until they load it.
        material.retired_mark_key =
            tls::retire(before.as_deref(), &material, found.retired_mark_key, now);
        let owner = obj.controller_owner_ref(&());
        let mut desired = build::build(&validated, &material, &ctx.settings, owner.as_ref());
        // The pods are told the generation that last changed what they run (they mark every
        // object they change with it); other spec changes roll nothing.
        let existing =
            apply::read_deployment(&ctx.client, &validated.namespace, &names.base).await?;
        let hash = build::template_hash(&desired.deployment);
        let generation = build::workload_generation(
            existing.as_ref(),
            &hash,
            obj.metadata.generation.unwrap_or(1),
        );
        build::stamp_generation(&mut desired.deployment, &hash, generation);
        if let Some(legacy) = &desired.legacy {
            apply::legacy::apply_rbac(&ctx.client, legacy).await?;
        }
        let deployment =
            apply::apply_workload(&ctx.client, &desired, desired.legacy.is_some()).await?;
        // The CA is now in the operator's namespace: the copy an earlier version kept beside
        // the workload goes (only ours).
        if let (Some(stale), Some(uid)) = (&found.stale_ca, obj.metadata.uid.as_deref())
            && apply::remove_stale_ca(&ctx.client, stale, uid).await?
        {
            info!(initializer = %name, namespace = %validated.namespace, "moved the CA to the operator's namespace");
        }
        Ok::<_, Error>((material, desired, deployment))
    };
    let (material, desired, deployment) = match deployed.await {
        Ok(done) => done,
        Err(err) if err.is_conflict() => {
            return report_conflict(ctx, obj, &names.configuration, &err).await;
        }
        Err(err) => {
            ctx.supervisor
                .report_failure(obj, &names.configuration, err.to_string())
                .await;
            return Err(err);
        }
    };
    let expiry = tls::inspect(&material.cert_pem).ok().map(|i| i.not_after);
    let mut workload = status::observe_workload(&deployment);
    workload.shared_with = shared_with(ctx).await?;
    let mut target = supervision(obj, &validated, &desired, workload, expiry);
    target.mark_keys = tls::mark_keys(&material);
    if let Some(legacy) = &desired.legacy {
        match legacy_supervision(ctx, &validated, legacy, reached).await {
            Ok(supervised) => target.legacy = Some(supervised),
            Err(err) => {
                ctx.supervisor
                    .report_failure(obj, &names.configuration, err.to_string())
                    .await;
                return Err(err);
            }
        }
    }
    let synced = ctx.supervisor.sync(target).await;
    let report = match synced {
        Ok(report) => report,
        Err(err) if err.is_conflict() => {
            return report_conflict(ctx, obj, &names.configuration, &err).await;
        }
        Err(err) => return Err(err),
    };
    tracing::debug!(initializer = %name, registered = report.registered, phase = ?report.status.phase, "reconciled");
    // The legacy backend looks again soon while unregistered: its own pods may be waiting on
    // its name (cleared at each reconcile) until the initializer is up.
    Ok(Action::requeue(requeue_after(
        validated.namespace == ctx.operator_namespace && desired.legacy.is_none(),
        report.registered,
        obj.spec.suspend,
    )))
}

/// What the supervisor needs for a legacy-backend Initializer: its own ReplicaSets and pods
/// freed of its name first (they must never wait on the initializer they run), then what its
/// rules `reached` (discovery) and the canary made of one of them (canaries an earlier probe
/// left behind are deleted).
async fn legacy_supervision(
    ctx: &Context,
    validated: &validate::Validated,
    legacy: &build::legacy::LegacyDesired,
    reached: Vec<pending::Served>,
) -> Result<LegacySupervision> {
    let selector = build::selector_labels(validated)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    apply::legacy::clear_own(
        &ctx.client,
        &validated.namespace,
        &selector,
        &legacy.pending_name,
    )
    .await?;
    let canary = Canary {
        resource: pending::canary_resource(&reached),
        // In the operator's own namespace, not a shared one like `default`: the canary right
        // (create/delete of any kind) is then granted there alone. The initializer's controller
        // leaves that namespace out of its scope, so it removes the canary's name unhandled:
        // the probe still shows its watch is alive and its writes land.
        namespace: ctx.operator_namespace.clone(),
        prefix: validated.names.base.clone(),
        label: validated.names.label.clone(),
        pending_name: legacy.pending_name.clone(),
    };
    apply::legacy::remove_stale_canaries(&ctx.client, &canary).await?;
    Ok(LegacySupervision {
        configuration: legacy.configuration.clone(),
        canary,
        reached,
    })
}

/// The served resources `rules` reach.
async fn legacy_reached(
    client: &Client,
    rules: &[initializer_crds::InterceptRule],
) -> Result<Vec<pending::Served>> {
    let groups: Vec<String> = rules.iter().flat_map(|r| r.api_groups.clone()).collect();
    let served = apply::legacy::discover(client, &groups).await?;
    Ok(pending::reached(rules, &served))
}

/// Releases what still waits on a deleted legacy-backend Initializer's name (its
/// configuration is gone by now), with an Event; failures are logged, never block deletion.
async fn release_on_delete(ctx: &Context, obj: &Initializer) {
    let name = obj.name_any();
    let Some(namespace) = obj
        .spec
        .namespace
        .clone()
        .or_else(|| Some(ctx.operator_namespace.clone()))
    else {
        return;
    };
    let pending_name = validate::legacy::pending_name(&name, &namespace);
    let reached = match legacy_reached(&ctx.client, &obj.spec.rules).await {
        Ok(reached) => reached,
        Err(e) => {
            warn!(initializer = %name, error = %e, "could not release pending objects");
            return;
        }
    };
    let released = apply::legacy::release(&ctx.client, &reached, &pending_name).await;
    for failure in &released.failed {
        warn!(initializer = %name, %failure, "could not release a pending object");
    }
    if released.count > 0 {
        publish(
            ctx,
            obj,
            EventType::Normal,
            "ReleasedPendingObjects",
            format!(
                "released {} object(s) still pending on {pending_name}: the Initializer is deleted",
                released.count
            ),
        )
        .await;
    }
}

/// Reads the workload namespace (unless it is the operator's) and decides whether workloads
/// may run there ([`validate::workload_namespace_refusal`]).
async fn check_workload_namespace(
    ctx: &Context,
    namespace: &str,
) -> Result<Option<validate::Refusal>> {
    if namespace == ctx.operator_namespace {
        return Ok(None);
    }
    let found = Api::<Namespace>::all(ctx.client.clone())
        .get_opt(namespace)
        .await
        .map_err(|source| Error::Get {
            kind: "Namespace",
            name: namespace.to_string(),
            source: Box::new(source),
        })?;
    let labels = found.map(|ns| ns.metadata.labels.unwrap_or_default());
    let found = match &labels {
        Some(labels) => validate::NamespaceFound::Labelled(labels),
        None => validate::NamespaceFound::Missing,
    };
    Ok(validate::workload_namespace_refusal(
        namespace,
        &ctx.operator_namespace,
        found,
    ))
}

/// Leaves someone else's object alone: supervision stops, this Initializer's own configuration
/// (if any) is removed, since what it points at may no longer be ours, and the status carries a
/// `Conflict` condition and `details.lastError`; a Warning Event names the object once. It is
/// tried again at the next resync, so removing the other object resolves it.
async fn report_conflict(
    ctx: &Context,
    obj: &Initializer,
    configuration: &str,
    err: &Error,
) -> Result<Action> {
    let name = obj.name_any();
    warn!(initializer = %name, error = %err, "conflict: left the object alone");
    ctx.supervisor.stop(&name).await;
    match remove_configuration(ctx, &name, configuration, obj.spec.backend).await {
        Ok(_) | Err(Error::NotOurs { .. }) => {}
        Err(e) => return Err(e),
    }
    if conflict_is_news(obj.status.as_ref()) {
        publish(ctx, obj, EventType::Warning, "Conflict", err.to_string()).await;
    }
    ctx.supervisor
        .report_unsupervised(obj, &[], configuration, Some(err.to_string()))
        .await?;
    Ok(Action::requeue(RESYNC))
}

async fn cleanup(obj: &Initializer, ctx: &Context) -> Result<Action> {
    let name = obj.name_any();
    let names = naming::names(&name);
    ctx.supervisor.stop(&name).await;
    match remove_configuration(ctx, &name, &names.configuration, obj.spec.backend).await {
        Ok(true) => {
            ctx.metrics.deregistered(&name, "Deleted", None);
            publish(
                ctx,
                obj,
                EventType::Normal,
                "Deregistered",
                format!(
                    "removed {} before the workload is deleted",
                    names.configuration
                ),
            )
            .await;
        }
        Ok(false) => {}
        // Someone else's object of the same name: ours was never registered, nothing to wait for.
        Err(Error::NotOurs { kind, name: other }) => {
            warn!(initializer = %name, %kind, configuration = %other, "left alone: not created by the operator");
        }
        Err(e) => return Err(e),
    }
    if had_fallback(obj) && apply::remove_fallback(&ctx.client, &names.fallback).await? {
        info!(initializer = %name, "removed the fallback");
    }
    // The finalizer stays until the API server confirms the configuration is gone, so no
    // create ever meets a configuration whose initializer has already been deleted.
    let label = names.label.clone();
    let left = match obj.spec.backend {
        Backend::Webhook => WebhookRegistrar::new(ctx.client.clone())
            .get(&names.configuration)
            .await?
            .is_some_and(|found| is_ours(&found, &label)),
        Backend::InitializerConfiguration => {
            InitializerConfigurationRegistrar::new(ctx.client.clone())
                .get(&names.configuration)
                .await?
                .is_some_and(|found| apply::fallback_is_ours(&found.metadata, Some(&label)))
        }
    };
    if left {
        return Err(Error::CleanupPending(names.configuration));
    }
    // What waited on the initializer would wait on nothing once it is gone.
    if obj.spec.backend == Backend::InitializerConfiguration {
        release_on_delete(ctx, obj).await;
    }
    info!(initializer = %name, "cleaned up");
    Ok(Action::await_change())
}

/// Whether the Initializer has (or had, as its status shows) a fallback that may be installed.
pub fn had_fallback(obj: &Initializer) -> bool {
    obj.spec.fallback.is_some()
        || obj.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == status::FALLBACK_IN_FORCE)
        })
}

/// Names of managed objects that belong to no existing Initializer: both labels the operator
/// sets, the Initializer label naming none of `initializers`. An object with the managed-by
/// label alone is not one the operator registered (anyone who can write it can set that label),
/// so it is left alone.
pub fn orphans<K: Resource>(objects: &[K], initializers: &[String]) -> Vec<String> {
    let labels: Vec<String> = initializers
        .iter()
        .map(|n| naming::names(n).label)
        .collect();
    objects
        .iter()
        .filter(|c| {
            c.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
                && c.labels()
                    .get(INITIALIZER_LABEL)
                    .is_some_and(|owner| !labels.contains(owner))
        })
        .map(ResourceExt::name_any)
        .collect()
}

/// Names of the Initializers that may have a configuration and a fallback: every one not
/// suspended (`spec.suspend` removes both and keeps them removed).
pub fn wanting_configurations(initializers: &[Initializer]) -> Vec<String> {
    initializers
        .iter()
        .filter(|i| !i.spec.suspend)
        .map(ResourceExt::name_any)
        .collect()
}

fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

/// Deletes every managed configuration (webhook or `InitializerConfiguration`, whose waiting
/// objects are then released), and every fallback policy and binding, whose
/// Initializer no longer exists (removed without its finalizer, or while an outage had its
/// fallback in force); and every webhook configuration and fallback of a suspended one (a
/// registration still in flight when the suspend was handled, from a replica frozen past its
/// lease, lands after it). Returns their names.
pub async fn remove_orphans(client: &Client) -> Result<Vec<String>> {
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let found = configs
        .list(&ListParams::default().labels(&managed_selector()))
        .await
        .map_err(|e| Error::Orphans(Box::new(e)))?;
    // Only fallbacks carry the Initializer label; other managed policies (the guard on
    // Initializers) belong to the operator itself.
    let fallbacks =
        ListParams::default().labels(&format!("{},{INITIALIZER_LABEL}", managed_selector()));
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let (policies, bindings) = match (
        policies.list(&fallbacks).await,
        bindings.list(&fallbacks).await,
    ) {
        (Ok(p), Ok(b)) => (p.items, b.items),
        // An API server without ValidatingAdmissionPolicy has no fallbacks to sweep.
        (Err(e), _) | (_, Err(e)) if matches!(api_code(&e), Some(404)) => (Vec::new(), Vec::new()),
        (Err(e), _) | (_, Err(e)) => return Err(Error::Orphans(Box::new(e))),
    };
    let legacy = InitializerConfigurationRegistrar::new(client.clone())
        .list(&managed_selector())
        .await?;
    if found.items.is_empty() && policies.is_empty() && bindings.is_empty() && legacy.is_empty() {
        return Ok(Vec::new());
    }
    let initializers: Api<Initializer> = Api::all(client.clone());
    let existing = initializers
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::Orphans(Box::new(e)))?
        .items;
    let wanting = wanting_configurations(&existing);
    let unwanted = orphans(&found.items, &wanting);
    let mut orphaned = Vec::new();
    for listed in found
        .items
        .iter()
        .filter(|c| unwanted.contains(&c.name_any()))
    {
        let name = listed.name_any();
        // Only the object listed: one registered again since (an un-suspend) is left alone.
        let preconditions = Preconditions {
            uid: listed.metadata.uid.clone(),
            resource_version: listed.metadata.resource_version.clone(),
        };
        let removed = apply::delete_unless_changed(&configs, &name, preconditions)
            .await
            .map_err(|source| Error::Deregister {
                name: name.clone(),
                source: Box::new(source),
            })?;
        if removed {
            info!(configuration = %name, "removed orphaned configuration");
            orphaned.push(name);
        }
    }
    // A suspended legacy Initializer keeps what waits on its name (its workload still
    // initializes it): only the configurations of Initializers that are gone are released.
    let names: Vec<String> = existing.iter().map(ResourceExt::name_any).collect();
    orphaned.extend(remove_legacy_orphans(client, legacy, &names).await?);
    let mut fallbacks = orphans(&policies, &wanting);
    fallbacks.extend(orphans(&bindings, &wanting));
    fallbacks.sort();
    fallbacks.dedup();
    for name in &fallbacks {
        apply::remove_fallback(client, name).await?;
        info!(fallback = %name, "removed orphaned fallback");
    }
    Ok(orphaned.into_iter().chain(fallbacks).collect())
}

/// Deletes the managed `InitializerConfiguration`s among `found` whose Initializer no longer
/// exists, then releases what still waits on their names (nothing would remove them); returns
/// their names.
async fn remove_legacy_orphans(
    client: &Client,
    found: Vec<kube::api::DynamicObject>,
    initializers: &[String],
) -> Result<Vec<String>> {
    let registrar = InitializerConfigurationRegistrar::new(client.clone());
    let orphaned = orphans(&found, initializers);
    for configuration in found.iter().filter(|c| orphaned.contains(&c.name_any())) {
        let name = configuration.name_any();
        registrar.deregister(&name).await?;
        info!(configuration = %name, "removed orphaned InitializerConfiguration");
        for (pending_name, rules) in own_pending_names(configuration) {
            let reached = legacy_reached(client, &rules).await?;
            let released = apply::legacy::release(client, &reached, &pending_name).await;
            info!(configuration = %name, %pending_name, released = released.count, "released what waited on an orphaned configuration");
        }
    }
    Ok(orphaned)
}

/// What an orphaned `InitializerConfiguration` registers under the one name the operator gives
/// the Initializer it was made for (`<base>.initializers.initializer.dev` for the configuration
/// `initializer-<base>`): a name someone added to it is another initializer's, and stripping it
/// from pending objects would let them skip that initializer.
pub fn own_pending_names(
    configuration: &kube::api::DynamicObject,
) -> Vec<(String, Vec<initializer_crds::InterceptRule>)> {
    let own = configuration
        .metadata
        .name
        .as_deref()
        .and_then(naming::webhook_of_configuration);
    build::legacy::registered(configuration)
        .into_iter()
        .filter(|(name, _)| Some(name) == own.as_ref())
        .collect()
}

/// Removes orphans at start, whenever a managed configuration changes, and every minute (an
/// Initializer removed without its finalizer leaves no event on the configuration); the
/// minute sweep also stops supervising Initializers that no longer exist. The same watch keeps
/// `configurations`, the copy the supervisor checks healthy registrations against.
pub async fn watch_orphans(
    client: Client,
    supervisor: Supervisor,
    configurations: Writer<MutatingWebhookConfiguration>,
    shutdown: CancellationToken,
) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut events = watcher(api, watcher::Config::default().labels(&managed_selector()))
        .default_backoff()
        .reflect(configurations)
        .applied_objects()
        .boxed();
    let mut sweep = tokio::time::interval(Duration::from_secs(60));
    let initializers: Api<Initializer> = Api::all(client.clone());
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = sweep.tick() => {
                if let Ok(list) = initializers.list(&ListParams::default()).await {
                    let names: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
                    supervisor.retain(&names);
                }
            }
            event = events.next() => {
                if event.is_none() {
                    return;
                }
            }
        }
        if let Err(e) = remove_orphans(&client).await {
            warn!(error = %e, "orphan sweep failed");
        }
    }
}

/// The Initializer owning `child`, from its owner references.
pub fn owner_of<K: Resource>(child: K) -> Option<ObjectRef<Initializer>> {
    child
        .owner_references()
        .iter()
        .find(|o| o.kind == "Initializer" && o.api_version == Initializer::api_version(&()))
        .map(|o| ObjectRef::new(&o.name))
}

/// The Initializers among `initializers` whose webhook configuration is named `configuration`:
/// one, or more when a name was chosen to equal another's shortened one (each then reconciles,
/// and all but the configuration's owner report the conflict).
pub fn configured_by(
    initializers: &[Arc<Initializer>],
    configuration: &str,
) -> Vec<ObjectRef<Initializer>> {
    initializers
        .iter()
        .filter(|i| naming::names(&i.name_any()).configuration == configuration)
        .map(|i| ObjectRef::from_obj(i.as_ref()))
        .collect()
}

/// Runs the controller until `shutdown`. The owned objects are watched in the operator's
/// namespace only (its Role covers that namespace, and nothing wider is granted); workloads in
/// labelled namespaces are reconciled at every [`RESYNC`], and their endpoints are watched by
/// the supervisor. The managed webhook configurations are watched too: one written while its
/// initializer is down (a registration sent by a replica frozen past its lease, landing late)
/// is not seen by the probes, which read the live configuration only while registered, and a
/// `failurePolicy: Fail` configuration pointing at a dead initializer fails every matching
/// create until the reconcile it triggers removes it.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let client = ctx.client.clone();
    let ns = ctx.operator_namespace.clone();
    let owned = watcher::Config::default().labels(&managed_selector());
    let initializers: Api<Initializer> = Api::all(client.clone());
    let stop = shutdown.clone();
    // `owns` would map a namespaced child to a namespaced reference, which never matches the
    // cluster-scoped Initializer; map through the owner reference's name instead.
    let controller = Controller::new(initializers, watcher::Config::default());
    // Webhook configurations are cluster-scoped and carry no owner reference (the finalizer
    // removes them): map one to its Initializer by name, through the controller's own cache.
    let known = controller.store();
    // A NetworkPolicy deleted or edited is put back at once, like the other workload objects;
    // watched only when written (a cluster may serve none, and the watch would then only fail).
    let controller = if ctx.settings.network_policy.is_some() {
        controller.watches(
            Api::<NetworkPolicy>::namespaced(client.clone(), &ns),
            owned.clone(),
            owner_of,
        )
    } else {
        controller
    };
    controller
        .watches(
            Api::<MutatingWebhookConfiguration>::all(client.clone()),
            watcher::Config::default().labels(&managed_selector()),
            move |configuration| configured_by(&known.state(), &configuration.name_any()),
        )
        .watches(
            Api::<Deployment>::namespaced(client.clone(), &ns),
            owned.clone(),
            owner_of,
        )
        .watches(
            Api::<Service>::namespaced(client.clone(), &ns),
            owned.clone(),
            owner_of,
        )
        .watches(
            Api::<Secret>::namespaced(client.clone(), &ns),
            owned.clone(),
            owner_of,
        )
        .watches(
            Api::<ConfigMap>::namespaced(client.clone(), &ns),
            owned.clone(),
            owner_of,
        )
        .watches(
            Api::<ServiceAccount>::namespaced(client.clone(), &ns),
            owned.clone(),
            owner_of,
        )
        .watches(
            Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns),
            owned.clone(),
            owner_of,
        )
        // A new guard binding (deleted and put back, or first applied) changes what each
        // Initializer's witness must name: judge them all again at once.
        .reconcile_all_on(guard_changes(ctx.guard.clone()))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile result");
            }
        })
        .await;
}

/// One item each time the guard's state changes, until its sender is gone.
fn guard_changes(
    guard: tokio::sync::watch::Receiver<guard::GuardState>,
) -> impl futures::Stream<Item = ()> + Send {
    futures::stream::unfold(guard, |mut guard| async move {
        guard.changed().await.ok().map(|()| ((), guard))
    })
}

#[cfg(test)]
mod tests;
