//! The reconciler: validate → build (pure) → apply → supervise (the supervisor computes the
//! status, purely, and writes it as one patch),
//! wrapped in the finalizer that removes the webhook configuration before the workload may go,
//! plus the sweep that removes configurations whose Initializer no longer exists. The finalizer's
//! paths (suspend first, cleanup) live in `finalizer`, the sweep in `orphans`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use initializer_crds::constants::FINALIZER;
use initializer_crds::{Initializer, InitializerStatus, Phase};
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::apply;
use crate::apply::legacy::Canary;
use crate::build::{self, Settings};
use crate::error::{Error, Result};
use crate::guard;
use crate::health::{HealthConfig, latency_budget};
use crate::metrics::Metrics;
use crate::naming;
use crate::pending;
use crate::probe;
use crate::status::{self, WorkloadObservation};
use crate::supervisor::{LegacySupervision, Supervision, Supervisor};
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

mod finalizer;
mod orphans;

pub use finalizer::had_fallback;
use finalizer::{cleanup, remove_configuration, suspend_first};
use orphans::managed_selector;
pub use orphans::{
    orphans, own_pending_names, remove_orphans, wanting_configurations, watch_orphans,
};

#[cfg(test)]
mod tests;
