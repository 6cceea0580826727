//! What must hold before anything of an Initializer is deployed, read first and judged pure:
//! [`gather`] reads what the checks need into [`Facts`] (nothing more on behalf of an
//! Initializer the guard or its namespace stops), then [`judge`] decides, in the order a user
//! reads the refusals: the guard, the workload's namespace, the fallback as the API server
//! compiles it, the legacy backend's API and the resources its rules reach.

use std::collections::BTreeMap;
use std::time::Duration;

use initializer_crds::{GuardWitness, Initializer};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::steps::Stop;
use super::{Context, RESYNC, legacy_reached};
use crate::apply;
use crate::build;
use crate::error::Result;
use crate::guard;
use crate::pending;
use crate::validate::{self, Validated};

/// Where the guard on Initializers stops a reconcile before anything else is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum GuardStop {
    /// Its state is not known yet: look again after this long.
    Wait(Duration),
    /// Its judgement is not the witness the status holds: record it first (the write brings
    /// the next reconcile).
    Record(GuardWitness),
    /// Nothing shows the Initializer passed the guard, as its status already records.
    Held,
}

/// Where the guard's `judgement` stops the reconcile of an Initializer whose status holds
/// `stored`, if it does (pure).
pub(super) fn guard_stop(
    judgement: guard::Judgement,
    stored: Option<&GuardWitness>,
) -> Option<GuardStop> {
    let (witness, held) = match judgement {
        guard::Judgement::Unguarded => return None,
        guard::Judgement::Wait(after) => return Some(GuardStop::Wait(after)),
        guard::Judgement::Proven(witness) => (witness, false),
        guard::Judgement::Held(witness) => (witness, true),
    };
    if stored != Some(&witness) {
        Some(GuardStop::Record(witness))
    } else {
        held.then_some(GuardStop::Held)
    }
}

/// The workload namespace as the checks found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum WorkloadNamespace {
    /// The operator's own: not read, always allowed.
    Operators,
    /// It exists with these labels.
    Labelled(BTreeMap<String, String>),
    /// No such namespace.
    Missing,
}

/// The legacy backend's API as the checks found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum LegacyApi {
    /// The API server does not serve `InitializerConfiguration`.
    NotServed,
    /// It does, and the Initializer's rules reach these served resources.
    Served(Vec<pending::Served>),
}

/// What the checks read, before any of them is judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Facts {
    /// The guard stops the reconcile: nothing else was read.
    Guard(GuardStop),
    /// Everything the checks after the guard need.
    Read {
        namespace: WorkloadNamespace,
        /// Why the API server refuses the fallback policy, when it does.
        fallback_refused: Option<String>,
        /// With the legacy backend only.
        legacy: Option<LegacyApi>,
    },
}

/// What the checks let the reconcile do.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Record the guard's witness, and stop until the write brings the next reconcile.
    Record(GuardWitness),
    /// Deploy; with the legacy backend, its rules reach these resources.
    Deploy(Vec<pending::Served>),
}

/// Reads what the checks of `obj` (validated as `v`) need, in the order they are judged, and
/// no further than the first that stops the reconcile: the guard's judgement, the workload
/// namespace, the API server's compile of the fallback (a dry run) and, with the legacy backend,
/// whether its API is served and what the rules reach (discovery, kept per generation).
pub(super) async fn gather(obj: &Initializer, ctx: &Context, v: &Validated) -> Result<Facts> {
    let state = ctx.guard.borrow().clone();
    let stored = obj.status.as_ref().and_then(|s| s.guard.as_ref());
    let judgement = guard::judge(&obj.metadata, stored, &state, Timestamp::now());
    if let Some(stop) = guard_stop(judgement, stored) {
        return Ok(Facts::Guard(stop));
    }
    let namespace = workload_namespace(ctx, &v.namespace).await?;
    if namespace_refusal(v, &namespace).is_some() {
        // Refused first: nothing more is asked of the API server on its behalf.
        return Ok(Facts::Read {
            namespace,
            fallback_refused: None,
            legacy: None,
        });
    }
    let name = obj.name_any();
    let fallback_refused = match build::fallback(v) {
        Some(fallback) => {
            ctx.memory
                .check_fallback(&ctx.client, &name, obj.metadata.generation, &fallback)
                .await?
        }
        None => None,
    };
    let legacy = match v.pending_name {
        Some(_) => Some(legacy_api(obj, ctx, v).await?),
        None => None,
    };
    Ok(Facts::Read {
        namespace,
        fallback_refused,
        legacy,
    })
}

/// The workload namespace, unless it is the operator's.
async fn workload_namespace(ctx: &Context, namespace: &str) -> Result<WorkloadNamespace> {
    if namespace == ctx.operator_namespace {
        return Ok(WorkloadNamespace::Operators);
    }
    Ok(match apply::read_namespace(&ctx.client, namespace).await? {
        Some(ns) => WorkloadNamespace::Labelled(ns.metadata.labels.unwrap_or_default()),
        None => WorkloadNamespace::Missing,
    })
}

/// Whether the legacy backend's API is served, and what `v`'s rules reach where it is.
async fn legacy_api(obj: &Initializer, ctx: &Context, v: &Validated) -> Result<LegacyApi> {
    if !apply::legacy::api_served(&ctx.client).await? {
        return Ok(LegacyApi::NotServed);
    }
    let (name, generation) = (obj.name_any(), obj.metadata.generation);
    let reached = match ctx.memory.discovered(&name, generation) {
        Some(reached) => reached,
        None => {
            let reached = legacy_reached(&ctx.client, &v.spec.rules).await?;
            ctx.memory
                .remember_discovered(&name, generation, reached.clone());
            reached
        }
    };
    Ok(LegacyApi::Served(reached))
}

/// Decides what the checks let the reconcile of `v` do, from what [`gather`] read (pure).
pub(super) fn judge(v: &Validated, facts: Facts) -> Result<Verdict, Stop> {
    let (namespace, fallback_refused, legacy) = match facts {
        Facts::Guard(GuardStop::Wait(after)) => return Err(Stop::Wait(Action::requeue(after))),
        Facts::Guard(GuardStop::Record(witness)) => return Ok(Verdict::Record(witness)),
        Facts::Guard(GuardStop::Held) => return Err(Stop::refused(held())),
        Facts::Read {
            namespace,
            fallback_refused,
            legacy,
        } => (namespace, fallback_refused, legacy),
    };
    if let Some(refusal) = namespace_refusal(v, &namespace) {
        // Labelling the namespace changes no Initializer: looked at again at the next resync.
        return Err(Stop::Refused {
            refusals: vec![refusal],
            again: Some(RESYNC),
        });
    }
    // The API server compiles the fallback exactly as it will when an outage puts it in force,
    // so an expression it refuses is refused before anything runs.
    if let Some(why) = fallback_refused {
        return Err(Stop::refused(validate::Refusal {
            field: "spec.fallback.validations".into(),
            message: format!("the API server refused the fallback policy: {why}"),
        }));
    }
    // The legacy backend: only where the API server serves it, and only for rules that reach a
    // served resource its probe can make a canary of.
    let Some(api) = legacy else {
        return Ok(Verdict::Deploy(Vec::new()));
    };
    let reached = match api {
        LegacyApi::NotServed => None,
        LegacyApi::Served(reached) => Some(reached),
    };
    if let Some(refusal) = validate::legacy::api_refusal(reached.is_some()) {
        return Err(Stop::refused(refusal));
    }
    let reached = reached.unwrap_or_default();
    let canary = pending::canary_resource(&reached);
    if let Some(refusal) = validate::legacy::canary_refusal(canary.is_some()) {
        return Err(Stop::refused(refusal));
    }
    Ok(Verdict::Deploy(reached))
}

/// Why the workload of `v` may not run in `namespace`, if it may not.
fn namespace_refusal(v: &Validated, namespace: &WorkloadNamespace) -> Option<validate::Refusal> {
    let found = match namespace {
        WorkloadNamespace::Operators => return None,
        WorkloadNamespace::Labelled(labels) => validate::NamespaceFound::Labelled(labels),
        WorkloadNamespace::Missing => validate::NamespaceFound::Missing,
    };
    validate::workload_namespace_refusal(&v.namespace, &v.operator_namespace, found)
}

/// Why an Initializer the guard holds is not deployed.
fn held() -> validate::Refusal {
    validate::Refusal {
        field: "metadata".to_string(),
        message: format!(
            "held back: created before the guard on Initializers ({}) was in force and its spec \
             unchanged since, so nothing shows its author may create \
             mutatingwebhookconfigurations; have someone who may change its spec (any change) \
             and it is deployed",
            guard::GUARD_NAME
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::validate;

    const OPERATOR_NAMESPACE: &str = "initializer-system";

    fn validated(spec: serde_json::Value) -> Validated {
        let obj: Initializer = serde_json::from_value(serde_json::json!({
            "apiVersion": "initializer.dev/v1alpha1",
            "kind": "Initializer",
            "metadata": {"name": "sidecar"},
            "spec": spec,
        }))
        .unwrap();
        validate(&obj.spec, OPERATOR_NAMESPACE, "sidecar").unwrap()
    }

    fn webhook_in(namespace: Option<&str>) -> Validated {
        let mut spec = serde_json::json!({
            "image": "example/sidecar:1",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        });
        if let Some(namespace) = namespace {
            spec["namespace"] = namespace.into();
        }
        validated(spec)
    }

    fn legacy() -> Validated {
        validated(serde_json::json!({
            "image": "example/sidecar:1",
            "backend": "InitializerConfiguration",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        }))
    }

    fn witness(held: bool) -> GuardWitness {
        GuardWitness {
            binding_uid: "binding-1".into(),
            generation: 2,
            held,
        }
    }

    fn read(namespace: WorkloadNamespace) -> Facts {
        Facts::Read {
            namespace,
            fallback_refused: None,
            legacy: None,
        }
    }

    fn refused_field(verdict: Result<Verdict, Stop>) -> String {
        match verdict {
            Err(Stop::Refused { refusals, .. }) => refusals[0].field.clone(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn configmaps() -> pending::Served {
        pending::Served {
            group: String::new(),
            version: "v1".into(),
            preferred: true,
            resource: "configmaps".into(),
            kind: "ConfigMap".into(),
            namespaced: true,
        }
    }

    #[test]
    fn the_guard_stops_a_reconcile_until_its_witness_is_recorded_and_holds_what_it_holds() {
        let stored = witness(false);
        for (judgement, stored, stop) in [
            (guard::Judgement::Unguarded, None, None),
            (
                guard::Judgement::Wait(Duration::from_secs(2)),
                None,
                Some(GuardStop::Wait(Duration::from_secs(2))),
            ),
            (
                guard::Judgement::Proven(witness(false)),
                None,
                Some(GuardStop::Record(witness(false))),
            ),
            (
                guard::Judgement::Proven(witness(false)),
                Some(&stored),
                None,
            ),
            (
                guard::Judgement::Held(witness(true)),
                Some(&stored),
                Some(GuardStop::Record(witness(true))),
            ),
        ] {
            assert_eq!(guard_stop(judgement.clone(), stored), stop, "{judgement:?}");
        }
        let held = witness(true);
        assert_eq!(
            guard_stop(guard::Judgement::Held(witness(true)), Some(&held)),
            Some(GuardStop::Held)
        );
    }

    #[test]
    fn what_the_guard_stops_is_judged_before_anything_else() {
        let v = webhook_in(Some("team-a"));
        assert!(matches!(
            judge(&v, Facts::Guard(GuardStop::Wait(Duration::from_secs(1)))),
            Err(Stop::Wait(_))
        ));
        assert_eq!(
            judge(&v, Facts::Guard(GuardStop::Record(witness(true)))).unwrap(),
            Verdict::Record(witness(true))
        );
        let held = judge(&v, Facts::Guard(GuardStop::Held));
        assert_eq!(refused_field(held), "metadata");
    }

    #[test]
    fn a_workload_namespace_is_used_only_once_labelled_and_looked_at_again_at_the_resync() {
        let v = webhook_in(Some("team-a"));
        match judge(&v, read(WorkloadNamespace::Missing)) {
            Err(Stop::Refused { again, .. }) => assert_eq!(again, Some(RESYNC)),
            other => panic!("expected a refusal, got {other:?}"),
        }
        let unlabelled = read(WorkloadNamespace::Labelled(BTreeMap::new()));
        assert!(matches!(judge(&v, unlabelled), Err(Stop::Refused { .. })));
        let own = webhook_in(None);
        assert_eq!(
            judge(&own, read(WorkloadNamespace::Operators)).unwrap(),
            Verdict::Deploy(Vec::new())
        );
    }

    #[test]
    fn a_fallback_the_api_server_refuses_is_refused_after_the_namespace() {
        let v = webhook_in(None);
        let facts = |namespace| Facts::Read {
            namespace,
            fallback_refused: Some("undeclared reference to 'objekt'".into()),
            legacy: None,
        };
        let refused = judge(&v, facts(WorkloadNamespace::Operators));
        assert_eq!(refused_field(refused), "spec.fallback.validations");
        let elsewhere = webhook_in(Some("team-a"));
        let missing = judge(&elsewhere, facts(WorkloadNamespace::Missing));
        assert_eq!(refused_field(missing), "spec.namespace");
    }

    #[test]
    fn the_legacy_backend_needs_its_api_and_a_resource_to_make_a_canary_of() {
        let v = legacy();
        let facts = |legacy| Facts::Read {
            namespace: WorkloadNamespace::Operators,
            fallback_refused: None,
            legacy: Some(legacy),
        };
        let not_served = judge(&v, facts(LegacyApi::NotServed));
        assert_eq!(refused_field(not_served), "spec.backend");
        let nothing = judge(&v, facts(LegacyApi::Served(Vec::new())));
        assert_eq!(refused_field(nothing), "spec.rules");
        assert_eq!(
            judge(&v, facts(LegacyApi::Served(vec![configmaps()]))).unwrap(),
            Verdict::Deploy(vec![configmaps()])
        );
    }
}
