//! The reconciler: check → deploy (built purely) → hand over to the supervisor (which computes
//! the status, purely, and writes it as one patch), in `steps`; wrapped in the finalizer that
//! removes the webhook configuration before the workload may go (`finalizer`: suspend first,
//! cleanup), plus the sweep that removes configurations whose Initializer no longer exists
//! (`orphans`). Here: the controller's wiring, its context, and the small pure decisions the
//! steps share.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use initializer_crds::constants::FINALIZER;
use initializer_crds::{Initializer, InitializerStatus, Phase};
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::build::{self, Settings};
use crate::error::{Error, Result};
use crate::events::Reason;
use crate::guard;
use crate::health::{HealthConfig, latency_budget};
use crate::metrics::Metrics;
use crate::naming;
use crate::probe;
use crate::status::{self, WorkloadObservation};
use crate::supervisor::{Supervision, Supervisor};
use crate::validate;

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
    /// What the reconcile remembers of each Initializer from one run to the next.
    pub memory: Memory,
    /// The guard on Initializers as [`crate::guard::keep_applied`] last saw it.
    pub guard: tokio::sync::watch::Receiver<crate::guard::GuardState>,
    /// Where a preset's policy is proven against its webhook (`--policy-canary-namespace`);
    /// `None`: nowhere, so presets stay on the webhook.
    pub policy_canary: Option<String>,
    /// Whether the API server serves MutatingAdmissionPolicy ([`crate::engine`]).
    pub policy_api: PolicyApi,
    /// The API server's addresses read so far under `--network-policy=auto`, each with when it
    /// was last listed: one that leaves the list stays admitted a while.
    pub seen_ranges: std::sync::Mutex<build::network_policy::SeenRanges>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("operator_namespace", &self.operator_namespace)
            .finish_non_exhaustive()
    }
}

async fn publish(ctx: &Context, obj: &Initializer, type_: EventType, reason: Reason, note: String) {
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
        failure_policy: validated.spec.failure_policy,
        available: workload.available,
        suspended: obj.suspension(),
        generation: obj.metadata.generation,
        workload,
        certificate_not_after,
        stored_status: obj.status.clone(),
        stored_version: obj.metadata.resource_version.clone(),
        registration: crate::supervisor::Registration::Webhook,
        mark_keys: initializer_mark::Keys::default(),
        engine: None,
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

/// The Initializers whose preset policy (and binding) is named `policy`.
pub fn policy_of(initializers: &[Arc<Initializer>], policy: &str) -> Vec<ObjectRef<Initializer>> {
    initializers
        .iter()
        .filter(|i| {
            crate::policy::compile::policy_name_of(&naming::names(&i.name_any()).base) == policy
        })
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
    // Under `auto` without ranges every policy follows the API server's addresses.
    let controller = if ctx
        .settings
        .network_policy
        .as_ref()
        .is_some_and(build::network_policy::NetworkPolicySettings::reads_ranges)
    {
        controller.reconcile_all_on(crate::apply::network_policy::api_server_range_changes(
            client.clone(),
        ))
    } else {
        controller
    };
    // A preset's policy and binding, where the API server serves them (decided once, at
    // start): an edit or deletion by someone else is put right at once, not at the next drift
    // check.
    let controller = match ctx.policy_api.served_version(&client).await {
        Ok(Ok(version)) => watch_preset_policies(controller, &client, version),
        _ => controller,
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

/// `controller`, also watching the preset policies and bindings at `version`, each mapped to
/// its Initializer by name.
fn watch_preset_policies(
    mut controller: Controller<Initializer>,
    client: &Client,
    version: &str,
) -> Controller<Initializer> {
    for (kind, plural) in [
        ("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
        (
            "MutatingAdmissionPolicyBinding",
            "mutatingadmissionpolicybindings",
        ),
    ] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(crate::policy::served::GROUP, version, kind),
            plural,
        );
        let known = controller.store();
        controller = controller.watches_with(
            Api::<DynamicObject>::all_with(client.clone(), &resource),
            resource,
            watcher::Config::default().labels(&managed_selector()),
            move |policy| policy_of(&known.state(), &policy.name_any()),
        );
    }
    controller
}

/// One item each time the guard's state changes, until its sender is gone.
fn guard_changes(
    guard: tokio::sync::watch::Receiver<guard::GuardState>,
) -> impl futures::Stream<Item = ()> + Send {
    futures::stream::unfold(guard, |mut guard| async move {
        guard.changed().await.ok().map(|()| ((), guard))
    })
}

mod check;
mod engine;
mod finalizer;
mod memory;
mod orphans;
mod steps;

pub use engine::PolicyApi;
use finalizer::cleanup;
pub use finalizer::had_fallback;
pub use memory::{DISCOVERY_TTL, Memory};
use orphans::managed_selector;
pub use orphans::{
    orphans, own_pending_names, remove_orphans, wanting_configurations, watch_orphans,
};
use steps::{apply, legacy_reached};

#[cfg(test)]
mod tests;
