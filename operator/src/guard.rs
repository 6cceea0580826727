//! The guard on Initializers themselves. An Initializer is cluster-admin power: it can inject
//! privileged containers into every pod, rewrite what it intercepts and run any image with the
//! Secrets of its workload namespace. Under OLM, everyone bound to `edit` or `admin` may create
//! one, because OLM aggregates rights on owned CRDs into those roles. So the operator keeps a
//! ValidatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1, Kubernetes 1.30
//! and later) that refuse creating an Initializer, changing its spec, writing its status,
//! setting or removing its break-glass annotation, or deleting it, unless the requester may
//! create MutatingWebhookConfigurations, which is the power an Initializer hands out. Deleting
//! or suspending a security initializer switches it off, and a status the operator adopts after
//! a restart (an outage's record, a degraded phase) steers it.
//!
//! The installer and the Helm chart apply both before the CRD; a registry+v1 bundle cannot carry
//! a policy, so under OLM the operator alone applies them, at startup (server-side apply, our
//! field manager and managed-by label). Either way it then watches them and applies them again
//! as soon as either is deleted or edited. [`policy`] and [`binding`] build them (pure, in
//! `initializer_packaging::guard`); [`keep_applied`] keeps them applied, and only logs a warning
//! where the API server does not serve the API: the operator still starts.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use initializer_crds::GuardWitness;
use initializer_crds::constants::FIELD_MANAGER;
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use initializer_packaging::guard::{
    EARLIER_BINDINGS_ANNOTATION, EARLIER_BINDINGS_KEPT, GUARD_EXPRESSION, GUARD_MESSAGE,
    GUARD_NAME, NOT_SERVED_WARNING, binding, match_expression, policy,
};

/// [`initializer_packaging::guard::IN_FORCE_AFTER`], as a span of server time.
pub const IN_FORCE_AFTER: jiff::SignedDuration =
    jiff::SignedDuration::from_secs(initializer_packaging::guard::IN_FORCE_AFTER.as_secs() as i64);

/// What the operator knows about the guard, published by [`keep_applied`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum GuardState {
    /// Not applied yet (the operator just started, or the API server refused for now).
    #[default]
    Unknown,
    /// The API server does not serve ValidatingAdmissionPolicy: RBAC alone guards Initializers.
    NotServed,
    /// The binding `binding_uid` is in place, in force from `since` (server time).
    InForce {
        /// The binding's UID: a new one means the guard was deleted and put back.
        binding_uid: String,
        /// Its creation plus [`IN_FORCE_AFTER`].
        since: Timestamp,
        /// The bindings it replaced while the operator watched ([`EARLIER_BINDINGS_ANNOTATION`]).
        earlier: Vec<String>,
    },
}

impl GuardState {
    /// The state once `binding` is in place.
    pub fn in_force(binding: &ValidatingAdmissionPolicyBinding) -> Option<Self> {
        let created = binding.metadata.creation_timestamp.as_ref()?.0;
        let since = Timestamp::from_second(created.as_second())
            .ok()?
            .checked_add(IN_FORCE_AFTER)
            .ok()?;
        Some(Self::InForce {
            binding_uid: binding.metadata.uid.clone()?,
            since,
            earlier: earlier_bindings(binding),
        })
    }

    /// Whether the operator knows enough to judge Initializers (and so may report ready).
    pub fn is_settled(&self, now: Timestamp) -> bool {
        match self {
            Self::Unknown => false,
            Self::NotServed => true,
            Self::InForce { since, .. } => now >= *since,
        }
    }
}

/// The UIDs the binding's [`EARLIER_BINDINGS_ANNOTATION`] lists.
pub fn earlier_bindings(binding: &ValidatingAdmissionPolicyBinding) -> Vec<String> {
    binding
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EARLIER_BINDINGS_ANNOTATION))
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|uid| !uid.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The binding to apply, given the one in place (`found`) and the last one this operator saw
/// (`last_seen`): it keeps the earlier list of the one in place; when the one in place is gone
/// (deleted), the one last seen joins the list, so that what was proven under it carries over.
/// A binding this operator never saw adds nothing.
pub fn binding_to_apply(
    found: Option<&ValidatingAdmissionPolicyBinding>,
    last_seen: Option<&ValidatingAdmissionPolicyBinding>,
) -> ValidatingAdmissionPolicyBinding {
    let mut earlier = match (found, last_seen) {
        (Some(found), _) => earlier_bindings(found),
        (None, Some(last)) => {
            let mut list = earlier_bindings(last);
            list.extend(last.metadata.uid.clone());
            list
        }
        (None, None) => Vec::new(),
    };
    let excess = earlier.len().saturating_sub(EARLIER_BINDINGS_KEPT);
    earlier.drain(..excess);
    let mut applied = binding();
    if !earlier.is_empty() {
        applied.metadata.annotations = Some(std::collections::BTreeMap::from([(
            EARLIER_BINDINGS_ANNOTATION.to_string(),
            earlier.join(","),
        )]));
    }
    applied
}

/// What the guard says about one Initializer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// No guard to judge by (not served): deploy as before.
    Unguarded,
    /// Not known yet: look again after this long.
    Wait(Duration),
    /// Shown to have passed the guard: deploy, with `witness` recorded in the status.
    Proven(GuardWitness),
    /// Nothing shows it passed the guard: do not deploy, record `witness`.
    Held(GuardWitness),
}

/// Judges an Initializer by its metadata, the witness in its status and the guard's state at
/// `now` (pure). Proven when the witness is from the binding in force and the spec was proven
/// then or changed since it was held (every write after the witness passed that binding), when
/// it was proven under a binding this one replaced while the operator watched and its generation
/// has not moved since (no spec change: putting a deleted guard back does not switch every
/// initializer off), or when it was created after the binding was in force. Anything else is
/// held: a witness naming a binding nobody can show existed proves nothing, since whoever
/// created the Initializer before the guard could also write its status.
pub fn judge(
    meta: &ObjectMeta,
    witness: Option<&GuardWitness>,
    state: &GuardState,
    now: Timestamp,
) -> Judgement {
    let (binding_uid, since, earlier) = match state {
        GuardState::NotServed => return Judgement::Unguarded,
        GuardState::Unknown => return Judgement::Wait(Duration::from_secs(1)),
        GuardState::InForce {
            binding_uid,
            since,
            earlier,
        } => (binding_uid, *since, earlier),
    };
    if now < since {
        let left = since.duration_since(now).unsigned_abs();
        return Judgement::Wait(left.max(Duration::from_millis(100)));
    }
    let generation = meta.generation.unwrap_or_default();
    let created_after = meta
        .creation_timestamp
        .as_ref()
        .is_some_and(|created| created.0 >= since);
    let proven = match witness {
        Some(w) if &w.binding_uid == binding_uid => !w.held || generation > w.generation,
        Some(w) if earlier.contains(&w.binding_uid) => !w.held && w.generation == generation,
        _ => created_after,
    };
    let witness = GuardWitness {
        binding_uid: binding_uid.clone(),
        generation,
        held: !proven,
    };
    if proven {
        Judgement::Proven(witness)
    } else {
        Judgement::Held(witness)
    }
}

/// What applying the guard came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The policy and binding are in place; the binding as the API server stored it.
    Applied(Box<ValidatingAdmissionPolicyBinding>),
    /// The API server does not serve ValidatingAdmissionPolicy (before Kubernetes 1.30).
    NotServed,
}

/// Applies the policy, then the binding (so the binding never names a missing policy), keeping
/// the list of earlier bindings ([`binding_to_apply`]; `last_seen` is the binding this operator
/// last applied or saw, if any).
pub async fn apply(
    client: &Client,
    last_seen: Option<&ValidatingAdmissionPolicyBinding>,
) -> Result<Outcome, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let applied = async {
        let desired = policy();
        let live = policies
            .patch(GUARD_NAME, &params, &Patch::Apply(&desired))
            .await?;
        put_back_whole(&policies, &live, &desired).await?;
        let found = bindings.get_opt(GUARD_NAME).await?;
        let desired = binding_to_apply(found.as_ref(), last_seen);
        let live = bindings
            .patch(GUARD_NAME, &params, &Patch::Apply(&desired))
            .await?;
        put_back_whole(&bindings, &live, &desired).await
    };
    match applied.await {
        Ok(binding) => Ok(Outcome::Applied(Box::new(binding))),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Outcome::NotServed),
        Err(e) => Err(e),
    }
}

/// Makes `live` (just applied) exactly `desired`, as the API server stores it: a forced apply
/// takes back the fields the operator sets, but keeps what other field managers added beside
/// them, such as a `matchConditions` entry that is always false or an `excludeResourceRules`
/// on the binding, either of which switches the guard off while its binding's UID stays. A
/// dry-run create of `desired` under another name shows it as stored (defaults and all); when
/// the live spec differs, it is replaced whole by a JSON patch (the `patch` right the apply
/// needs anyway), on the version read, and the same object, UID and all, is kept.
async fn put_back_whole<K>(api: &Api<K>, live: &K, desired: &K) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let stored = as_stored(api, desired).await?;
    let Some(patch) = whole_spec_patch(live, &stored) else {
        return Ok(live.clone());
    };
    warn!(
        name = GUARD_NAME,
        kind = %K::kind(&()),
        "the guard carried changes of another field manager: replaced whole"
    );
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch(GUARD_NAME, &params, &Patch::Json::<()>(patch))
        .await
}

/// The suffix of the name an object of the operator's own is dry-run created under, to read it
/// as stored.
const PUT_BACK_CHECK_SUFFIX: &str = "-put-back-check";

/// `desired` as the API server would store it (defaults and all): a dry-run create under its
/// name with [`PUT_BACK_CHECK_SUFFIX`], which stores nothing.
pub(crate) async fn as_stored<K>(api: &Api<K>, desired: &K) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let mut check = desired.clone();
    let name = desired.meta().name.clone().unwrap_or_default();
    check.meta_mut().name = Some(format!("{name}{PUT_BACK_CHECK_SUFFIX}"));
    api.create(
        &PostParams {
            dry_run: true,
            field_manager: Some(FIELD_MANAGER.to_owned()),
        },
        &check,
    )
    .await
}

/// The JSON patch that makes `live`'s spec `stored`'s, on `live`'s resource version (pure);
/// `None` when the two specs are equal already.
pub(crate) fn whole_spec_patch<K: Resource + Serialize>(
    live: &K,
    stored: &K,
) -> Option<json_patch::Patch> {
    let spec = |object: &K| serde_json::to_value(object).ok().map(|v| v["spec"].clone());
    let (live_spec, stored_spec) = (spec(live)?, spec(stored)?);
    if live_spec == stored_spec {
        return None;
    }
    let version = live.meta().resource_version.clone().unwrap_or_default();
    serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "replace", "path": "/spec", "value": stored_spec},
    ]))
    .ok()
}

/// Publishes what an apply came to (a binding without its server-set fields publishes nothing).
fn publish(outcome: &Outcome, state: &watch::Sender<GuardState>) {
    let published = match outcome {
        Outcome::Applied(binding) => GuardState::in_force(binding),
        Outcome::NotServed => Some(GuardState::NotServed),
    };
    if let Some(published) = published {
        state.send_if_modified(|current| {
            let changed = *current != published;
            *current = published;
            changed
        });
    }
}

/// Applies the guard at startup, retrying with backoff (up to a minute apart) until it is in
/// place or the API server turns out not to serve it; then keeps it in place (`keep_restoring`)
/// until `shutdown`, publishing the binding in force to `state` each time. Never fails the
/// operator.
pub async fn keep_applied(
    client: Client,
    state: watch::Sender<GuardState>,
    shutdown: CancellationToken,
) {
    let applied = crate::retry::until_done(&shutdown, "apply the guard on Initializers", || {
        apply(&client, None)
    })
    .await;
    let Some(outcome) = applied else {
        return;
    };
    publish(&outcome, &state);
    let Outcome::Applied(binding) = outcome else {
        warn!("{NOT_SERVED_WARNING}");
        return;
    };
    info!(name = GUARD_NAME, "guard on Initializers applied");
    keep_restoring(&client, *binding, &state, &shutdown).await;
}

/// Watches the policy and the binding and applies both again at every change seen: a deletion,
/// or an edit (a check removed, the binding set to audit only). Applying what is already in place
/// changes nothing and so wakes no watch.
async fn keep_restoring(
    client: &Client,
    mut last_seen: ValidatingAdmissionPolicyBinding,
    state: &watch::Sender<GuardState>,
    shutdown: &CancellationToken,
) {
    let by_name = watcher::Config::default().fields(&format!("metadata.name={GUARD_NAME}"));
    let policies = watcher(
        Api::<ValidatingAdmissionPolicy>::all(client.clone()),
        by_name.clone(),
    )
    .default_backoff()
    .map(|event| event.map(|e| is_change(&e)));
    let bindings = watcher(
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()),
        by_name,
    )
    .default_backoff()
    .map(|event| event.map(|e| is_change(&e)));
    let mut events = std::pin::pin!(futures::stream::select(policies, bindings));
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Ok(false)) => {}
            Some(Ok(true)) => match apply(client, Some(&last_seen)).await {
                Ok(outcome) => {
                    publish(&outcome, state);
                    if let Outcome::Applied(binding) = outcome {
                        last_seen = *binding;
                    }
                    info!(
                        name = GUARD_NAME,
                        "guard on Initializers applied again after a change"
                    )
                }
                Err(e) => warn!(error = %e, "failed to restore the guard on Initializers"),
            },
            Some(Err(e)) => warn!(error = %e, "watching the guard on Initializers failed"),
        }
    }
}

/// Whether a watch event may mean the object changed: an edit, a deletion, or the end of a
/// (re)listing, which is all a deletion missed while the watch was down leaves behind.
fn is_change<K>(event: &watcher::Event<K>) -> bool {
    matches!(
        event,
        watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use initializer_crds::constants::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

    #[test]
    fn the_policy_refuses_creates_deletes_spec_and_status_changes_without_webhook_rights() {
        let p = policy();
        let spec = p.spec.unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].api_groups.as_deref(),
            Some(&["initializer.dev".to_string()][..])
        );
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(
                &[
                    "initializers".to_string(),
                    "initializers/status".to_string()
                ][..]
            )
        );
        assert_eq!(
            rules[0].operations.as_deref(),
            Some(
                &[
                    "CREATE".to_string(),
                    "UPDATE".to_string(),
                    "DELETE".to_string()
                ][..]
            )
        );
        let validations = spec.validations.unwrap();
        assert_eq!(validations.len(), 1);
        assert_eq!(
            validations[0].expression,
            "authorizer.group('admissionregistration.k8s.io').resource('mutatingwebhookconfigurations').check('create').allowed()"
        );
        assert_eq!(validations[0].reason.as_deref(), Some("Forbidden"));
        let conditions = spec.match_conditions.unwrap();
        assert_eq!(conditions[0].expression, match_expression());
        for expression in [&validations[0].expression, &conditions[0].expression] {
            crate::cel::check(expression, crate::cel::VARIABLES).unwrap();
        }
    }

    #[test]
    fn the_binding_denies_with_the_policy_everywhere() {
        let b = binding();
        let spec = b.spec;
        assert_eq!(spec.policy_name, GUARD_NAME);
        assert_eq!(spec.validation_actions, ["Deny"]);
        assert!(spec.match_resources.is_none(), "every namespace and object");
        assert!(spec.param_ref.is_none());
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn meta(created: i64, generation: i64) -> ObjectMeta {
        ObjectMeta {
            creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(
                created,
            ))),
            generation: Some(generation),
            ..Default::default()
        }
    }

    fn in_force(uid: &str, since: i64) -> GuardState {
        replacing(uid, since, &[])
    }

    fn replacing(uid: &str, since: i64, earlier: &[&str]) -> GuardState {
        GuardState::InForce {
            binding_uid: uid.to_string(),
            since: at(since),
            earlier: earlier.iter().map(|e| e.to_string()).collect(),
        }
    }

    fn witness(uid: &str, generation: i64, held: bool) -> GuardWitness {
        GuardWitness {
            binding_uid: uid.to_string(),
            generation,
            held,
        }
    }

    #[test]
    fn in_force_starts_two_whole_seconds_after_the_binding() {
        let mut binding = binding();
        binding.metadata.uid = Some("u1".into());
        binding.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                at(100)
                    .checked_add(jiff::SignedDuration::from_millis(900))
                    .unwrap(),
            ));
        assert_eq!(GuardState::in_force(&binding), Some(in_force("u1", 102)));
        assert!(!in_force("u1", 102).is_settled(at(101)));
        assert!(in_force("u1", 102).is_settled(at(102)));
        assert!(GuardState::NotServed.is_settled(at(0)));
        assert!(!GuardState::Unknown.is_settled(at(0)));
    }

    #[test]
    fn without_a_settled_guard_nothing_is_judged() {
        assert_eq!(
            judge(&meta(50, 1), None, &GuardState::NotServed, at(200)),
            Judgement::Unguarded
        );
        assert!(matches!(
            judge(&meta(50, 1), None, &GuardState::Unknown, at(200)),
            Judgement::Wait(_)
        ));
        assert!(matches!(
            judge(&meta(50, 1), None, &in_force("u1", 102), at(101)),
            Judgement::Wait(_)
        ));
    }

    #[test]
    fn created_after_the_guard_is_proven_and_before_it_is_held() {
        let guard = in_force("u1", 102);
        assert_eq!(
            judge(&meta(102, 1), None, &guard, at(110)),
            Judgement::Proven(witness("u1", 1, false))
        );
        // Created in the window (or in the second the binding was stored): held, whatever
        // witness its author wrote into the status while the guard was not there.
        for forged in [
            None,
            Some(witness("made-up", 3, false)),
            Some(witness("made-up", 3, true)),
        ] {
            assert_eq!(
                judge(&meta(101, 3), forged.as_ref(), &guard, at(110)),
                Judgement::Held(witness("u1", 3, true)),
                "{forged:?}"
            );
        }
    }

    #[test]
    fn a_held_initializer_is_proven_by_a_spec_change_under_the_same_binding() {
        let guard = in_force("u1", 102);
        // The generation judged, the witness in its status, and the judgement.
        for (generation, before, wanted) in [
            (
                3,
                witness("u1", 3, true),
                Judgement::Held(witness("u1", 3, true)),
            ),
            (
                4,
                witness("u1", 3, true),
                Judgement::Proven(witness("u1", 4, false)),
            ),
            // Once proven under this binding, later changes stay proven (they passed it).
            (
                9,
                witness("u1", 4, false),
                Judgement::Proven(witness("u1", 9, false)),
            ),
        ] {
            let judged = judge(&meta(50, generation), Some(&before), &guard, at(110));
            assert_eq!(judged, wanted, "generation {generation} after {before:?}");
        }
    }

    #[test]
    fn a_new_binding_keeps_what_was_proven_and_unchanged_and_holds_the_rest() {
        let renewed = replacing("u2", 302, &["u0", "u1"]);
        let proven = witness("u1", 4, false);
        // The generation judged, the witness in its status, the guard, and the judgement.
        for (generation, before, guard, wanted) in [
            (
                4,
                proven.clone(),
                renewed.clone(),
                Judgement::Proven(witness("u2", 4, false)),
            ),
            // Changed while no binding was in force: held.
            (
                5,
                proven.clone(),
                renewed.clone(),
                Judgement::Held(witness("u2", 5, true)),
            ),
            (
                4,
                witness("u1", 4, true),
                renewed,
                Judgement::Held(witness("u2", 4, true)),
            ),
            // A binding someone else created (a reinstall) replaced nothing the operator
            // watched: Initializers from before it may have changed while no guard was there.
            (
                4,
                proven,
                in_force("u2", 302),
                Judgement::Held(witness("u2", 4, true)),
            ),
        ] {
            let judged = judge(&meta(50, generation), Some(&before), &guard, at(310));
            assert_eq!(judged, wanted, "generation {generation} after {before:?}");
        }
    }

    #[test]
    fn the_binding_applied_lists_the_bindings_it_replaced() {
        let with = |uid: &str, earlier: Option<&str>| {
            let mut b = binding();
            b.metadata.uid = Some(uid.into());
            b.metadata.annotations = earlier.map(|e| {
                std::collections::BTreeMap::from([(
                    EARLIER_BINDINGS_ANNOTATION.to_string(),
                    e.to_string(),
                )])
            });
            b
        };
        let listed = |b: &ValidatingAdmissionPolicyBinding| earlier_bindings(b);
        assert!(listed(&binding_to_apply(None, None)).is_empty());
        // In place: its list is kept, whatever this operator saw.
        let found = with("u2", Some("u0,u1"));
        assert_eq!(
            listed(&binding_to_apply(Some(&found), Some(&with("u9", None)))),
            ["u0", "u1"]
        );
        // Deleted: the one last seen joins its list.
        assert_eq!(
            listed(&binding_to_apply(None, Some(&found))),
            ["u0", "u1", "u2"]
        );
        let long = (0..20)
            .map(|i| format!("u{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let kept = listed(&binding_to_apply(None, Some(&with("u20", Some(&long)))));
        assert_eq!(kept.len(), EARLIER_BINDINGS_KEPT);
        assert_eq!(kept.last().map(String::as_str), Some("u20"));
    }

    #[test]
    fn both_objects_are_labelled_as_managed() {
        for meta in [policy().metadata, binding().metadata] {
            assert_eq!(meta.name.as_deref(), Some(GUARD_NAME));
            assert_eq!(meta.labels.unwrap()[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
        }
    }

    #[test]
    fn another_managers_additions_are_replaced_whole_on_the_version_read() {
        use k8s_openapi::api::admissionregistration::v1::MatchCondition;
        let mut stored = policy();
        stored.metadata.resource_version = Some("7".to_string());
        assert!(
            whole_spec_patch(&stored, &stored).is_none(),
            "nothing to put back"
        );

        let mut live = stored.clone();
        if let Some(conditions) = live.spec.as_mut().and_then(|s| s.match_conditions.as_mut()) {
            conditions.push(MatchCondition {
                name: "neuter".to_string(),
                expression: "false".to_string(),
            });
        }
        let patch = whole_spec_patch(&live, &stored).expect("a patch");
        let ops = serde_json::to_value(&patch).unwrap();
        assert_eq!(
            ops[0],
            serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}),
            "only on the version read"
        );
        let mut patched = serde_json::to_value(&live).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(
            patched["spec"],
            serde_json::to_value(&stored).unwrap()["spec"]
        );
        assert_eq!(
            patched["spec"]["matchConditions"].as_array().map(Vec::len),
            Some(1)
        );
    }
}
