//! The reconcile of one Initializer, in the order it happens: [`check`] (the spec, then what
//! must hold read first and judged pure in [`super::check`]: the guard, the workload's
//! namespace, the fallback as the API server compiles it, the legacy backend's discovery),
//! [`deploy`] (certificates, the desired objects built purely, the workload applied),
//! then [`hand_over`] to the supervisor, which registers the configuration once the initializer
//! answers. Every way a reconcile stops short is a [`Stop`], handled in one place ([`stopped`]).

use std::borrow::Cow;
use std::time::Duration;

use initializer_crds::Initializer;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::check::Verdict;
use super::engine;
use super::finalizer::{remove_configuration, suspend_first};
use super::{
    Context, RESYNC, conflict_is_news, publish, refusal_is_news, requeue_after, supervision,
};
use crate::apply;
use crate::apply::legacy::Canary;
use crate::build;
use crate::error::{Error, Result};
use crate::events::Reason;
use crate::naming::{self, Names};
use crate::pending;
use crate::status;
use crate::supervisor::{LegacySupervision, Registration};
use crate::tls;
use crate::validate::{self, describe, validate};

/// Why a reconcile stopped before the supervisor took over.
#[derive(Debug)]
pub(super) enum Stop {
    /// Nothing to do yet: come back as the action says (the guard's witness was just written,
    /// or the guard's state is not known yet).
    Wait(Action),
    /// The spec is refused: nothing registered or supervised, `Valid=False` and a `Refused`
    /// Event. `again`: when to look again, if something other than the spec can lift it.
    Refused {
        refusals: Vec<validate::Refusal>,
        again: Option<Duration>,
    },
    /// An object of the Initializer's names belongs to someone else: it is left alone.
    Conflict(Error),
    /// Deploying failed: the status says so, and the reconcile is retried.
    Failed(Error),
    /// A read or write failed on the way: retried, nothing reported beyond the error.
    Error(Error),
}

impl Stop {
    pub(super) fn refused(refusal: validate::Refusal) -> Self {
        Stop::Refused {
            refusals: vec![refusal],
            again: None,
        }
    }

    /// Deploying failed with `err`: someone else's object in the way, or a failure to report.
    fn deploying(err: Error) -> Self {
        if err.is_conflict() {
            Stop::Conflict(err)
        } else {
            Stop::Failed(err)
        }
    }

    /// A step that claims or writes objects failed with `err`: someone else's object in the
    /// way, or an error that is retried.
    fn claiming(err: Error) -> Self {
        if err.is_conflict() {
            Stop::Conflict(err)
        } else {
            Stop::Error(err)
        }
    }
}

impl From<Error> for Stop {
    fn from(err: Error) -> Self {
        Stop::Error(err)
    }
}

/// Reconciles a live Initializer (the finalizer's `Apply`).
pub(super) async fn apply(obj: &Initializer, ctx: &Context) -> Result<Action> {
    let names = naming::names(&obj.name_any());
    // The probers write onto the version read here, whether or not this reconcile gets as far
    // as the supervisor's sync.
    ctx.supervisor.observed(obj).await;
    if let Some(suspension) = obj.suspension() {
        suspend_first(obj, ctx, suspension).await?;
    }
    let reconciled = async {
        let checked = check(obj, ctx).await?;
        let engine = engine::plan(obj, ctx, &checked.validated)
            .await
            .map_err(Stop::claiming)?;
        let deployed = deploy(obj, ctx, &names, &checked, engine.replicas).await?;
        hand_over(obj, ctx, checked, deployed, engine).await
    };
    match reconciled.await {
        Ok(action) => Ok(action),
        Err(stop) => stopped(obj, ctx, &names.configuration, stop).await,
    }
}

/// What the checks found: the validated spec, and what the legacy backend's rules reach.
struct Checked {
    validated: validate::Validated,
    reached: Vec<pending::Served>,
}

/// Everything that must hold before anything is deployed: the spec valid, then what
/// [`super::check::gather`] reads judged by [`super::check::judge`] (pure).
async fn check(obj: &Initializer, ctx: &Context) -> Result<Checked, Stop> {
    let validated =
        validate(&obj.spec, &ctx.operator_namespace, &obj.name_any()).map_err(|refusals| {
            Stop::Refused {
                refusals,
                again: None,
            }
        })?;
    let facts = super::check::gather(obj, ctx, &validated).await?;
    match super::check::judge(&validated, facts)? {
        Verdict::Record(witness) => {
            ctx.supervisor.record_guard_witness(obj, &witness).await?;
            // The write wakes this Initializer again; the reconcile of that version goes on.
            Err(Stop::Wait(Action::await_change()))
        }
        Verdict::Deploy(reached) => Ok(Checked { validated, reached }),
    }
}

/// What was deployed: the certificates in force, the desired objects, and the Deployment as
/// the API server returned it.
struct Deployed {
    material: tls::TlsMaterial,
    desired: build::Desired,
    deployment: Deployment,
    /// A change of the NetworkPolicy waits for the API server to fail open
    /// ([`RouteChange::Held`]): the next reconcile comes soon.
    route_held: bool,
}

/// Certificates, the desired objects and the workload: what is there read first (the
/// certificates, the Deployment), then built purely ([`built`]), then applied (at zero replicas
/// while the preset runs in the API server: kept, so the webhook can come back).
async fn deploy(
    obj: &Initializer,
    ctx: &Context,
    names: &Names,
    checked: &Checked,
    replicas: engine::Replicas,
) -> Result<Deployed, Stop> {
    let name = obj.name_any();
    let v = &checked.validated;
    let deployed = async {
        let found = apply::read_tls(
            &ctx.client,
            validate::ca_namespace(v),
            &v.namespace,
            &names.ca_secret,
            &names.tls_secret,
        )
        .await?;
        let existing = apply::read_deployment(&ctx.client, &v.namespace, &names.base).await?;
        // The probe saw every ready pod serve the current CA's certificate, with this very
        // bundle: a CA replaced earlier may leave it.
        let current_ca_served = found.ca.as_ref().is_some_and(|ca| {
            ctx.supervisor
                .serves_current_ca(&name, ca.cert_pem.as_bytes())
        });
        let stale_ca = found.stale_ca.clone();
        let (settings, ranges_known) = settings_now(ctx).await;
        let (material, mut desired) = built(
            obj,
            v,
            &settings,
            found,
            current_ca_served,
            existing.as_ref(),
            Timestamp::now(),
        )?;
        match replicas {
            engine::Replicas::Spec => {}
            engine::Replicas::Zero => desired.deployment.spec.replicas = Some(0),
            engine::Replicas::AsTheyAre => {
                if let Some(existing) = &existing {
                    desired.deployment.spec.replicas = existing.spec.replicas;
                }
            }
        }
        if let Some(legacy) = &desired.legacy {
            apply::legacy::apply_rbac(&ctx.client, legacy).await?;
        }
        let route = settle_network_policy(obj, ctx, &mut desired, ranges_known).await?;
        let deployment =
            apply::apply_workload(&ctx.client, &desired, desired.legacy.is_some()).await?;
        match route {
            RouteChange::Written => ctx.supervisor.route_written(&name).await,
            RouteChange::Widened => ctx.supervisor.route_widened(&name).await,
            RouteChange::None | RouteChange::Held => {}
        }
        let route_held = route == RouteChange::Held;
        // The CA is now in the operator's namespace: the copy an earlier version kept beside
        // the workload goes (only ours).
        if let (Some(stale), Some(uid)) = (&stale_ca, obj.metadata.uid.as_deref())
            && apply::remove_stale_ca(&ctx.client, stale, uid).await?
        {
            info!(initializer = %name, namespace = %v.namespace, "moved the CA to the operator's namespace");
        }
        Ok::<_, Error>(Deployed {
            material,
            desired,
            deployment,
            route_held,
        })
    };
    deployed.await.map_err(Stop::deploying)
}

/// The build settings of this reconcile: under `--network-policy=auto` without
/// `--api-server-cidrs`, with the API server's ranges read now (and those listed a while before,
/// [`build::network_policy::SeenRanges`]); and whether they are known (when they could not be
/// read, the policy stays as it is).
async fn settings_now(ctx: &Context) -> (Cow<'_, build::Settings>, bool) {
    let Some(policy) = ctx
        .settings
        .network_policy
        .as_ref()
        .filter(|policy| policy.reads_ranges())
    else {
        return (Cow::Borrowed(&ctx.settings), true);
    };
    let listed = apply::network_policy::read_api_server_ranges(&ctx.client).await;
    let known = !listed.is_empty();
    let ranges = if known {
        ctx.seen_ranges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admitted(&listed, std::time::Instant::now())
    } else {
        listed
    };
    let settings = build::Settings {
        network_policy: Some(policy.with_ranges(ranges)),
        ..ctx.settings.clone()
    };
    (Cow::Owned(settings), known)
}

/// What a reconcile does about a change of who may reach the initializer's pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RouteChange {
    /// None to make (or only a removal, which widens the path).
    None,
    /// One waits for the API server to fail open: the next reconcile comes soon.
    Held,
    /// One is written by this reconcile, the API server failing open meanwhile.
    Written,
    /// Ranges are added to the live policy by this reconcile: no route change (the path only
    /// widens), but a route still being proven starts over.
    Widened,
}

/// What this reconcile writes of the NetworkPolicy. Under `auto`: nothing once the route checks
/// went unanswered for the route deadline with this Initializer's policy in force (which is
/// withdrawn: recorded in the status, with a Warning), and nothing for ranges withdrawn before.
/// Then what is live while the API server's ranges are unknown; else the desired policy, once
/// the API server fails open for it when it changes who may reach the pods
/// ([`hold_route_change`]).
async fn settle_network_policy(
    obj: &Initializer,
    ctx: &Context,
    desired: &mut build::Desired,
    ranges_known: bool,
) -> Result<RouteChange> {
    let (Some(settings), Some(policy)) = (&ctx.settings.network_policy, &desired.network_policy)
    else {
        return Ok(RouteChange::None);
    };
    let name = obj.name_any();
    let live = apply::network_policy::read(&ctx.client, policy).await?;
    if settings.withdraws() {
        let withdrawn = obj
            .status
            .as_ref()
            .and_then(|status| status.withdrawn_network_policy.as_ref());
        if let Some(live) = live.as_ref().filter(|live| {
            build::network_policy::is_ours(policy, live)
                && !build::network_policy::is_withdrawn(live, withdrawn)
        }) && let Some((unproven_for, last)) = ctx.supervisor.route_unproven(&name).await
            && unproven_for >= ctx.supervisor.route_deadline()
        {
            withdraw(obj, ctx, live, &last).await?;
            desired.network_policy = None;
            return Ok(RouteChange::None);
        }
        if ranges_known && build::network_policy::is_withdrawn(policy, withdrawn) {
            desired.network_policy = None;
            return Ok(RouteChange::None);
        }
    }
    if !ranges_known {
        desired.network_policy = build::network_policy::held(policy, live.as_ref());
        return Ok(RouteChange::None);
    }
    hold_route_change(ctx, &name, desired, live).await
}

/// Records that `live`, this Initializer's policy, is withdrawn (the caller then removes it), and
/// says so in an Event: the route checks went unanswered for the route deadline, the last seeing
/// `last`.
async fn withdraw(
    obj: &Initializer,
    ctx: &Context,
    live: &NetworkPolicy,
    last: &str,
) -> Result<()> {
    let name = obj.name_any();
    let record = build::network_policy::withdrawal(live, Time(Timestamp::now()), last);
    ctx.supervisor
        .record_withdrawn_network_policy(obj, &record)
        .await?;
    let ranges = record.api_server_cidrs.join(", ");
    warn!(initializer = %name, %ranges, last_route_check = %last, "withdrew the NetworkPolicy: the API server's calls were not seen passing it");
    publish(
        ctx,
        obj,
        EventType::Warning,
        Reason::NetworkPolicyWithdrawn,
        format!(
            "the API server's calls were not seen passing the NetworkPolicy in front of the initializer (admitting {ranges}) for {} s: it is withdrawn, and not written again while the API server's ranges are these (the last route check: {last})",
            ctx.supervisor.route_deadline().as_secs()
        ),
    )
    .await;
    Ok(())
}

/// A NetworkPolicy that changes who may reach the initializer's pods is written only once the
/// API server fails open for it ([`crate::supervisor::Supervisor::route_changing`], which
/// also has the route proven again once it is written): a policy that leaves the API server out
/// must never stand in front of a configuration that fails closed. Until then what is `live`
/// stays.
async fn hold_route_change(
    ctx: &Context,
    name: &str,
    desired: &mut build::Desired,
    live: Option<NetworkPolicy>,
) -> Result<RouteChange> {
    let Some(policy) = &desired.network_policy else {
        return Ok(RouteChange::None);
    };
    if build::network_policy::widens(policy, live.as_ref()) {
        return Ok(RouteChange::Widened);
    }
    if !build::network_policy::changes_route(policy, live.as_ref()) {
        return Ok(RouteChange::None);
    }
    if ctx.supervisor.route_changing(name).await? {
        return Ok(RouteChange::Written);
    }
    info!(initializer = %name, "the NetworkPolicy's change waits until the configuration fails open");
    desired.network_policy = build::network_policy::held(policy, live.as_ref());
    Ok(RouteChange::Held)
}

/// The certificates in force and the desired objects of `obj`, from what [`deploy`] found
/// (pure but for the keys a new certificate is made with).
fn built(
    obj: &Initializer,
    v: &validate::Validated,
    settings: &build::Settings,
    found: apply::FoundTls,
    current_ca_served: bool,
    existing: Option<&Deployment>,
    now: Timestamp,
) -> Result<(tls::TlsMaterial, build::Desired)> {
    let ca = found.ca.map(|ca| {
        if ca.has_previous() && current_ca_served {
            ca.retire_previous()
        } else {
            ca
        }
    });
    let before = found.serving.as_ref().map(|(_, key)| key.clone());
    let mut material = tls::ensure(
        ca,
        found.serving,
        &tls::dns_names(&v.names.base, &v.namespace),
        now,
    )?;
    // A new serving key: the pods sign marks with the old one until they load it.
    material.retired_mark_key =
        tls::retire(before.as_deref(), &material, found.retired_mark_key, now);
    let owner = obj.controller_owner_ref(&());
    let mut desired = build::build(v, &material, settings, owner.as_ref());
    // The pods are told the generation that last changed what they run (they mark every
    // object they change with it); other spec changes roll nothing.
    let hash = build::template_hash(&desired.deployment);
    let generation =
        build::workload_generation(existing, &hash, obj.metadata.generation.unwrap_or(1));
    build::stamp_generation(&mut desired.deployment, &hash, generation);
    Ok((material, desired))
}

/// Hands the deployed Initializer to the supervisor, which registers its configuration once the
/// initializer answers (or removes it while the preset runs in the API server); then the
/// engine's step after the sync (the proof and cutover, or the policy removed once the webhook
/// is back), and says when to look again: soon while a cutover is under way, since each of its
/// steps (the webhook out of the path, then its pods) is the next reconcile's.
async fn hand_over(
    obj: &Initializer,
    ctx: &Context,
    checked: Checked,
    deployed: Deployed,
    engine: engine::EngineStep,
) -> Result<Action, Stop> {
    let name = obj.name_any();
    let Checked { validated, reached } = checked;
    let Deployed {
        material,
        desired,
        deployment,
        route_held,
    } = deployed;
    let expiry = tls::inspect(&material.cert_pem).ok().map(|i| i.not_after);
    let mut workload = status::observe_workload(&deployment);
    workload.shared_with = shared_with(ctx).await?;
    let mut target = supervision(obj, &validated, &desired, workload, expiry);
    target.mark_keys = tls::mark_keys(&material);
    target.engine = Some(engine.view.clone());
    if let Some(legacy) = &desired.legacy {
        match legacy_supervision(ctx, &validated, legacy, reached).await {
            Ok(supervised) => {
                target.registration = Registration::InitializerConfiguration(Box::new(supervised));
                // Its canary probe already takes the API server's path.
                target.health.prove_route = false;
            }
            Err(err) => return Err(Stop::Failed(err)),
        }
    }
    let report = ctx.supervisor.sync(target).await.map_err(Stop::claiming)?;
    let settled = engine::after_sync(obj, ctx, &validated, &engine, &report)
        .await
        .map_err(Stop::claiming)?;
    if settled || route_held || engine.replicas == engine::Replicas::AsTheyAre {
        // The proof settled the engine (the next sync shows it and, with the policy in force,
        // takes the webhook out of the path), or this sync took it out and its pods may go, or a
        // NetworkPolicy's change waits for the configuration to fail open.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    tracing::debug!(initializer = %name, registered = report.registered, phase = ?report.status.phase, "reconciled");
    if engine.view.in_api_server() {
        // The policy and its binding are watched only where the API server served them when
        // the operator started: they are checked for drift this often besides.
        return Ok(Action::requeue(engine::DRIFT_CHECK));
    }
    // The legacy backend looks again soon while unregistered: its own pods may be waiting on
    // its name (cleared at each reconcile) until the initializer is up.
    Ok(Action::requeue(requeue_after(
        validated.namespace == ctx.operator_namespace && desired.legacy.is_none(),
        report.registered,
        obj.is_suspended(),
    )))
}

/// Where every stop is handled: each says what happened in the status and Events, once.
async fn stopped(
    obj: &Initializer,
    ctx: &Context,
    configuration: &str,
    stop: Stop,
) -> Result<Action> {
    match stop {
        Stop::Wait(action) => Ok(action),
        Stop::Refused { refusals, again } => {
            refuse(obj, ctx, configuration, &refusals).await?;
            Ok(again.map_or_else(Action::await_change, Action::requeue))
        }
        Stop::Conflict(err) => report_conflict(ctx, obj, configuration, &err).await,
        Stop::Failed(err) => {
            ctx.supervisor
                .report_failure(obj, configuration, err.to_string())
                .await;
            Err(err)
        }
        Stop::Error(err) => Err(err),
    }
}

/// Refuses a spec: nothing registered or supervised, `Valid=False` and a `Refused` Event (once
/// per generation).
async fn refuse(
    obj: &Initializer,
    ctx: &Context,
    configuration: &str,
    refusals: &[validate::Refusal],
) -> Result<()> {
    let name = obj.name_any();
    ctx.supervisor.stop(&name).await;
    remove_configuration(ctx, &name, configuration, obj.spec.backend).await?;
    if refusal_is_news(obj) {
        publish(
            ctx,
            obj,
            EventType::Warning,
            Reason::Refused,
            describe(refusals),
        )
        .await;
    }
    ctx.supervisor
        .report_unsupervised(obj, refusals, configuration, None)
        .await?;
    Ok(())
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
        publish(
            ctx,
            obj,
            EventType::Warning,
            Reason::Conflict,
            err.to_string(),
        )
        .await;
    }
    ctx.supervisor
        .report_unsupervised(obj, &[], configuration, Some(err.to_string()))
        .await?;
    Ok(Action::requeue(RESYNC))
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
pub(super) async fn legacy_reached(
    client: &Client,
    rules: &[initializer_crds::InterceptRule],
) -> Result<Vec<pending::Served>> {
    let groups: Vec<String> = rules.iter().flat_map(|r| r.api_groups.clone()).collect();
    let served = apply::legacy::discover(client, &groups).await?;
    Ok(pending::reached(rules, &served))
}
