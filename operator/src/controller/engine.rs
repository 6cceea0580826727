//! The engine step of a reconcile ([`crate::engine`]): before the workload is deployed, the
//! plan (and, with the policy in force, the drift and in-force checks and the way back); after the
//! supervisor's sync, the proof and the cutover once the webhook is registered, and the
//! removal of a policy the webhook has taken over from.
//!
//! Ordering is what keeps creates injected throughout: the policy is in force everywhere
//! before the webhook is deregistered, the webhook is deregistered (by the supervisor, on
//! purpose, as under `spec.suspend`) before its Deployment is scaled to zero, and on the way
//! back the policy stays in force until the webhook is registered again.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use initializer_crds::{Engine, EngineInForce, Initializer, Phase};
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::{Context, publish};
use crate::engine::proof::{self, PolicyObjects, Unproven};
use crate::engine::{
    self, Canary, EngineView, InForceCheck, Plan, Remembered, Settled, Why, compare,
};
use crate::error::Result;
use crate::events::Reason;
use crate::missed::selector_matches;
use crate::policy::served::NotServed;
use crate::policy::{BindingScope, CompileError, Compiled};
use crate::selector;
use crate::supervisor::Report;
use crate::validate::Validated;

/// How often a policy in force is checked for drift (four requests: each object read, and
/// dry-run created as desired).
pub(super) const DRIFT_CHECK: Duration = Duration::from_secs(10);
/// How long the API server's answer on serving MutatingAdmissionPolicy is reused.
const POLICY_API_TTL: Duration = Duration::from_secs(60);

/// The API server's answer on serving MutatingAdmissionPolicy, reused for a minute
/// (each Initializer's engine is remembered with the rest of what the reconcile keeps of it:
/// [`Memory::engine`](super::Memory::engine)).
#[derive(Debug, Default)]
pub struct PolicyApi {
    served: Mutex<Option<(Instant, Result<&'static str, NotServed>)>>,
}

impl PolicyApi {
    /// The version MutatingAdmissionPolicy is written at, or why it cannot be.
    pub(super) async fn served_version(
        &self,
        client: &Client,
    ) -> Result<Result<&'static str, NotServed>> {
        {
            let cached = self
                .served
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((at, served)) = cached.as_ref()
                && at.elapsed() < POLICY_API_TTL
            {
                return Ok(served.clone());
            }
        }
        let served = proof::served_version(client).await?;
        *self
            .served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((Instant::now(), served.clone()));
        Ok(served)
    }
}

/// What the reconcile remembers of `obj`'s engine, or what its stored status says after a
/// restart.
fn remembered(ctx: &Context, obj: &Initializer) -> Remembered {
    ctx.memory
        .engine(&obj.name_any())
        .unwrap_or_else(|| Remembered::recovered(obj.status.as_ref()))
}

/// What the engine step decided for one reconcile.
pub(super) struct EngineStep {
    plan: Plan,
    /// What the status says.
    pub(super) view: EngineView,
    compiled: Option<Compiled>,
    objects: Option<PolicyObjects>,
    /// The replicas the webhook's Deployment is given.
    pub(super) replicas: Replicas,
}

/// The replicas of the webhook's Deployment in one reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Replicas {
    /// The spec's: the webhook is the engine, or the way back to it has begun.
    Spec,
    /// Zero: the policy is in force and the supervisor holds no configuration of the webhook.
    Zero,
    /// As they are: the policy is in force, but the webhook's configuration is still held, or
    /// not known yet (nothing supervised since this replica started leading). This reconcile's
    /// sync takes it out of the path, and the next one scales.
    AsTheyAre,
}

impl Replicas {
    /// The replicas while the status shows `view`, with the supervisor holding the webhook's
    /// configuration (`held`; `None`: not known yet).
    pub(super) fn of(view: &EngineView, held: Option<bool>) -> Self {
        match (view.in_api_server(), held) {
            (false, _) => Replicas::Spec,
            (true, Some(false)) => Replicas::Zero,
            (true, Some(true) | None) => Replicas::AsTheyAre,
        }
    }
}

/// What the engine step reads before it plans.
struct Facts {
    /// What is remembered of the engine, for this generation of the spec.
    remembered: Remembered,
    /// The spec compiled to a policy, or why it cannot be.
    compiled: std::result::Result<Compiled, CompileError>,
    /// Whether the API server serves MutatingAdmissionPolicy (`Err`: why not).
    served: std::result::Result<(), Why>,
    /// This Initializer's policy objects, where the API server serves them and they are needed.
    objects: Option<PolicyObjects>,
    /// What the canary namespace is to this Initializer, where a proof may be next.
    canary: Canary,
}

/// Plans the engine of `obj` for this reconcile: reads, decides, and, with the policy in force,
/// checks it (a drifted policy is put back as proven, and the webhook comes back when it
/// drifted or is no longer enforced: the policy stays in force until the webhook is registered
/// again); then shows the plan and remembers it.
pub(super) async fn plan(obj: &Initializer, ctx: &Context, v: &Validated) -> Result<EngineStep> {
    let name = obj.name_any();
    let Facts {
        mut remembered,
        compiled,
        served,
        objects,
        canary,
    } = gather(obj, ctx, v).await?;
    if obj.is_suspended() {
        remembered.settled = Settled::Nothing;
    }
    let mut plan = engine::decide(
        obj.spec.engine,
        obj.suspension(),
        compiled.as_ref().map(|_| ()).map_err(Why::not_compilable),
        served,
        &canary,
        &remembered.settled,
    );
    if matches!(plan, Plan::Prove { .. })
        && !remembered.proof_due(Instant::now(), super::RESYNC)
        && let Some(failure) = &remembered.failure
    {
        plan = Plan::Webhook(failure.clone());
    }
    if plan == Plan::KeepPolicy
        && let (Ok(compiled), Some(objects)) = (&compiled, &objects)
    {
        let found = check_in_force(ctx, v, compiled, objects).await?;
        if let InForceCheck::Drifted(_) = found {
            restore(ctx, &name, v, compiled, objects).await?;
        }
        if let Some(why) = found.why_back() {
            remembered.going_back(&why);
            plan = Plan::Webhook(why);
        }
    }
    let view = shown(ctx, obj, &mut remembered, &plan).await?;
    ctx.memory.remember_engine(&name, remembered);
    // Only asked while the policy is in force: the answer waits for the entry's lock.
    let held = match view.in_api_server() {
        true => ctx.supervisor.holds_configuration(&name).await,
        false => Some(true),
    };
    let replicas = Replicas::of(&view, held);
    Ok(EngineStep {
        plan,
        view,
        compiled: compiled.ok(),
        objects,
        replicas,
    })
}

/// Reads what the engine step plans from ([`Facts`]). Someone else's policy or binding of this
/// Initializer's names is found here, before anything is deployed, as for every other object
/// of ours: a conflict, and it is left alone.
async fn gather(obj: &Initializer, ctx: &Context, v: &Validated) -> Result<Facts> {
    let mut remembered = remembered(ctx, obj);
    remembered.at_generation(obj.metadata.generation);
    let compiled = crate::policy::compile(v);
    let wanted = obj.spec.engine != Engine::Webhook && compiled.is_ok();
    // A policy that may exist is removed once the webhook is registered, whatever the spec
    // says now (a spec changed to one that does not compile included).
    let needs_api =
        wanted || remembered.in_force == EngineInForce::Policy || remembered.policy_may_exist;
    let (served, objects) = served_objects(ctx, obj, v, needs_api).await?;
    // While ours are in force the in-force check reads them anyway and the restore claims
    // them, so the claim is not read twice every reconcile.
    let in_force = remembered.in_force == EngineInForce::Policy;
    if let (true, false, Some(objects)) = (wanted, in_force, &objects) {
        objects.claim(&ctx.client).await?;
    }
    let canary = match (&compiled, &remembered.settled) {
        (Ok(compiled), Settled::Nothing) if wanted && served.is_ok() => {
            canary(&ctx.client, ctx.policy_canary.as_deref(), v, compiled).await?
        }
        _ => Canary::NotConfigured,
    };
    Ok(Facts {
        remembered,
        compiled,
        served,
        objects,
        canary,
    })
}

/// Whether the API server serves MutatingAdmissionPolicy (`Err`: why not), and this
/// Initializer's policy objects at the version it serves; asked only when `needed`.
async fn served_objects(
    ctx: &Context,
    obj: &Initializer,
    v: &Validated,
    needed: bool,
) -> Result<(Result<(), Why>, Option<PolicyObjects>)> {
    if !needed {
        return Ok((Ok(()), None));
    }
    Ok(match ctx.policy_api.served_version(&ctx.client).await? {
        Ok(version) => (
            Ok(()),
            Some(PolicyObjects::new(v, version).owned_by(obj.controller_owner_ref(&()))),
        ),
        Err(not_served) => (Err(Why::not_served(&not_served)), None),
    })
}

/// What the status says of the engine after `plan`, with the Events that go with it: the way
/// back when the policy was in force and the plan no longer keeps it, and a `PolicyUnavailable`
/// Warning once per reason while `spec.engine: Policy` runs on the webhook. Each is remembered
/// only while this replica leads (a replica that does not would drop its Event and never
/// publish it again): otherwise an error, and the reconcile is tried again.
async fn shown(
    ctx: &Context,
    obj: &Initializer,
    remembered: &mut Remembered,
    plan: &Plan,
) -> Result<EngineView> {
    let name = obj.name_any();
    if remembered.in_force == EngineInForce::Policy && *plan != Plan::KeepPolicy {
        ctx.supervisor
            .leadership()
            .check(|| format!("take {name} back to the webhook"))?;
        let why = match plan {
            Plan::Webhook(why) => why.message(),
            _ => "the spec changed: the new policy is proven against the webhook first".to_owned(),
        };
        info!(initializer = %name, %why, "going back to the webhook");
        publish(
            ctx,
            obj,
            EventType::Warning,
            Reason::EngineSwitched,
            format!("back to the webhook: {why}; the policy stays in force until the webhook is registered"),
        )
        .await;
        remembered.in_force = EngineInForce::Webhook;
        remembered.policy_may_exist = true;
    }
    let in_force = match (plan, remembered.in_force) {
        (_, EngineInForce::Policy) => Ok(remembered.proven.clone()),
        (Plan::Webhook(why), _) => Err(why.clone()),
        _ => Err(remembered.failure.clone().unwrap_or(Why::AwaitingWebhook)),
    };
    let view = engine::view(obj.spec.engine, obj.spec.image.is_none(), &in_force);
    let warned = view.warning.then_some(view.reason);
    if warned.is_some() && warned != remembered.warned {
        ctx.supervisor
            .leadership()
            .check(|| format!("warn that {name} runs on the webhook"))?;
        publish(
            ctx,
            obj,
            EventType::Warning,
            Reason::PolicyUnavailable,
            view.message.clone(),
        )
        .await;
    }
    remembered.warned = warned;
    Ok(view)
}

/// Checks the policy in force, writing nothing that stays: drift first (the objects read and
/// dry-run created as desired), then whether the API server still runs it (dry-run creates in
/// the canary namespace). One it does not run is left as it is (it may still run on the
/// replicas that do) and removed once the webhook is registered again.
async fn check_in_force(
    ctx: &Context,
    v: &Validated,
    compiled: &Compiled,
    objects: &PolicyObjects,
) -> Result<InForceCheck> {
    let everywhere = crate::policy::binding(v, &BindingScope::Everywhere);
    if let Some(drift) = objects
        .drift(&ctx.client, &compiled.policy, &everywhere)
        .await?
    {
        return Ok(InForceCheck::Drifted(drift));
    }
    Ok(match enforcement(ctx, v, compiled).await? {
        Some(not_enforced) => InForceCheck::NotEnforced(not_enforced),
        None => InForceCheck::Holds,
    })
}

/// Puts a drifted policy back as proven, so nothing is left uninjected while the webhook comes
/// back.
async fn restore(
    ctx: &Context,
    name: &str,
    v: &Validated,
    compiled: &Compiled,
    objects: &PolicyObjects,
) -> Result<()> {
    ctx.supervisor
        .leadership()
        .check(|| format!("restore the policy of {name}"))?;
    let everywhere = crate::policy::binding(v, &BindingScope::Everywhere);
    objects
        .apply(&ctx.client, &compiled.policy, &everywhere)
        .await
}

/// Why the policy in force can no longer be shown to be enforced ([`proof::still_in_force`]),
/// or `None` while it is. Without a canary namespace there is nowhere to check.
async fn enforcement(ctx: &Context, v: &Validated, compiled: &Compiled) -> Result<Option<String>> {
    match ctx.policy_canary.as_deref() {
        Some(canary) => proof::still_in_force(&ctx.client, v, compiled, canary).await,
        None => Ok(Some(Why::NoCanaryNamespace.message())),
    }
}

/// What the configured canary namespace is to `v`.
async fn canary(
    client: &Client,
    configured: Option<&str>,
    v: &Validated,
    compiled: &Compiled,
) -> Result<Canary> {
    let Some(namespace) = configured else {
        return Ok(Canary::NotConfigured);
    };
    let Some(found) = crate::apply::read_namespace(client, namespace).await? else {
        return Ok(Canary::OutOfScope(format!(
            "the canary namespace {namespace} does not exist"
        )));
    };
    let scope = selector::namespace_selector(
        v.spec.namespaces.as_ref(),
        &v.operator_namespace,
        &v.namespace,
    );
    if !selector_matches(&scope, &found.metadata.labels.unwrap_or_default()) {
        return Ok(Canary::OutOfScope(format!(
            "the canary namespace {namespace} is outside this Initializer's namespaces \
             (spec.namespaces): the proof compares the two engines there"
        )));
    }
    if !compare::proof_corpus(v, &compiled.program, namespace)
        .iter()
        .any(|p| p.injected)
    {
        return Ok(Canary::NothingToProve(format!(
            "the preset changes no object of the proof's corpus in the canary namespace \
             {namespace} (spec.preset.selector)"
        )));
    }
    Ok(Canary::InScope(namespace.to_owned()))
}

/// After the supervisor's sync: proves the policy and cuts over once the webhook is registered
/// and healthy, or removes a policy the registered webhook took over from. Returns whether the
/// proof settled the engine for this generation (in force, or disproved): the next reconcile,
/// due soon, plans from what is remembered here, shows it and carries it out (with the policy in
/// force, its sync takes the webhook out of the path). A proof that could not finish is tried
/// again at the next resync, which shows why.
pub(super) async fn after_sync(
    obj: &Initializer,
    ctx: &Context,
    v: &Validated,
    step: &EngineStep,
    report: &Report,
) -> Result<bool> {
    let name = obj.name_any();
    let mut remembered = remembered(ctx, obj);
    let healthy = report.registered && report.status.phase == Some(Phase::Registered);
    let (Some(objects), true) = (&step.objects, remembered.in_force == EngineInForce::Webhook)
    else {
        return Ok(false);
    };
    let settled = match (&step.plan, &step.compiled) {
        (Plan::Prove { canary }, Some(compiled)) if healthy => {
            ctx.supervisor
                .leadership()
                .check(|| format!("prove the policy of {name}"))?;
            remembered.policy_may_exist = true;
            let proven = proof::prove(&ctx.client, objects, v, compiled, canary).await;
            settle(ctx, obj, objects, canary, proven, &mut remembered).await?
        }
        _ if remembered.policy_may_exist && report.registered => {
            ctx.supervisor
                .leadership()
                .check(|| format!("remove the policy of {name}"))?;
            if objects.remove(&ctx.client).await? {
                info!(initializer = %name, "removed the policy: the webhook is registered");
            }
            remembered.policy_may_exist = false;
            false
        }
        _ => false,
    };
    ctx.memory.remember_engine(&name, remembered);
    Ok(settled)
}

/// What the proof's outcome `proven` means, recorded in `remembered` and published: the
/// cutover or a disproof (settled: `true`), a failed proof (the webhook stays, and why), or a
/// conflict with someone else's policy (an error, the unproven policy removed first).
async fn settle(
    ctx: &Context,
    obj: &Initializer,
    objects: &PolicyObjects,
    canary: &str,
    proven: std::result::Result<proof::Proven, Unproven>,
    remembered: &mut Remembered,
) -> Result<bool> {
    let name = obj.name_any();
    Ok(match proven {
        Ok(proven) => {
            let message = format!(
                "MutatingAdmissionPolicy {} ({}) and its binding are in force: {} \
                 corpus objects created through both engines in {canary} agreed ({} \
                 injected); proven and in force everywhere {:.1}s after the first apply",
                objects.name,
                objects.version,
                proven.compared,
                proven.injected,
                proven.took.as_secs_f64()
            );
            info!(initializer = %name, took_ms = proven.took.as_millis() as u64, "the policy is proven and in force");
            publish(
                ctx,
                obj,
                EventType::Normal,
                Reason::EngineSwitched,
                format!(
                    "the preset runs in the API server now; the webhook is deregistered \
                     and its Deployment scaled to zero. {message}"
                ),
            )
            .await;
            remembered.in_force = EngineInForce::Policy;
            remembered.settled = Settled::InForce;
            remembered.proven = message;
            remembered.failure = None;
            remembered.proof_failed_at = None;
            true
        }
        Err(Unproven::Disproved(diff)) => {
            warn!(initializer = %name, %diff, "the policy disagrees with the webhook");
            publish(
                ctx,
                obj,
                EventType::Warning,
                Reason::EngineDisproved,
                format!("the webhook stays: {diff}"),
            )
            .await;
            let why = Why::Disproved(format!(
                "the compiled policy and the webhook disagreed in {canary}: {diff}"
            ));
            remembered.settled = Settled::Webhook(why);
            remembered.policy_may_exist = false;
            true
        }
        Err(Unproven::Conflict(err)) => {
            if let Err(e) = objects.remove(&ctx.client).await {
                warn!(initializer = %name, error = %e, "failed to remove the unproven policy");
            }
            return Err(err);
        }
        Err(Unproven::Failed(failure)) => {
            warn!(initializer = %name, %failure, "the proof could not finish");
            if let Err(e) = objects.remove(&ctx.client).await {
                warn!(initializer = %name, error = %e, "failed to remove the unproven policy");
            }
            let why = Why::ProofFailed(format!("{failure}; tried again at the next resync"));
            if remembered.failure.as_ref() != Some(&why) {
                publish(ctx, obj, EventType::Warning, Reason::ProofFailed, failure).await;
            }
            remembered.failure = Some(why);
            remembered.proof_failed_at = Some(Instant::now());
            false
        }
    })
}

/// Removes the policy and binding of a deleted or suspended Initializer (only ours), where the
/// API server serves them.
pub(super) async fn remove_policy(ctx: &Context, obj: &Initializer) -> Result<bool> {
    // Only a preset is ever compiled; one whose spec changed since shows the policy in force.
    let ran_in_api_server =
        obj.status.as_ref().and_then(|s| s.engine) == Some(EngineInForce::Policy);
    if obj.spec.preset.is_none() && !ran_in_api_server {
        return Ok(false);
    }
    let names = crate::naming::names(&obj.name_any());
    let Ok(version) = ctx.policy_api.served_version(&ctx.client).await? else {
        return Ok(false);
    };
    let objects = PolicyObjects::named(&names, version);
    let removed = objects.remove(&ctx.client).await?;
    if removed {
        let mut remembered = remembered(ctx, obj);
        remembered.in_force = EngineInForce::Webhook;
        remembered.policy_may_exist = false;
        ctx.memory.remember_engine(&obj.name_any(), remembered);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(in_api_server: bool) -> EngineView {
        let in_force = if in_api_server {
            Ok("proven".to_owned())
        } else {
            Err(Why::AwaitingWebhook)
        };
        engine::view(Engine::Auto, true, &in_force)
    }

    /// The webhook's pods go only once the supervisor has taken its configuration out of the
    /// path: a reconcile that still finds it held, or cannot know yet (after a restart or a
    /// change of leader), leaves them as they are, and the next reconcile scales.
    #[test]
    fn the_webhook_leaves_the_path_before_its_pods_go() {
        for (in_api_server, held, replicas) in [
            (true, Some(true), Replicas::AsTheyAre),
            (true, None, Replicas::AsTheyAre),
            (true, Some(false), Replicas::Zero),
            (false, Some(true), Replicas::Spec),
            (false, Some(false), Replicas::Spec),
            (false, None, Replicas::Spec),
        ] {
            assert_eq!(
                Replicas::of(&view(in_api_server), held),
                replicas,
                "in the API server: {in_api_server}, configuration held: {held:?}"
            );
        }
    }
}
