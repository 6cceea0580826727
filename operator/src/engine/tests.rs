use std::time::{Duration, Instant};

use initializer_crds::{Engine, EngineInForce, InitializerSpec, Suspension};
use serde_json::json;

use super::compare::{self, PROOF_LABEL};
use super::{Canary, InForceCheck, Plan, Remembered, Settled, Why, decide, view};
use crate::policy::corpus;
use crate::validate::{Validated, validate};

fn preset_initializer(extra: serde_json::Value) -> Validated {
    let mut spec = json!({
        "preset": corpus::representative_preset(),
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
            {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}
        ]
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let spec: InitializerSpec = serde_json::from_value(spec).expect("a valid spec");
    validate(&spec, "initializer-system", "proof").expect("valid")
}

const IN_SCOPE: fn() -> Canary = || Canary::InScope("team-canary".into());

/// What [`decide`] is given: by [`auto`], an Auto preset that compiles, with the policy API
/// served, the canary in scope and nothing settled; a case changes what it is about.
struct Inputs {
    engine: Engine,
    suspension: Option<Suspension>,
    compiled: Result<(), Why>,
    served: Result<(), Why>,
    canary: Canary,
    settled: Settled,
}

impl Inputs {
    fn plan(self) -> Plan {
        let Inputs {
            engine,
            suspension,
            compiled,
            served,
            canary,
            settled,
        } = self;
        decide(engine, suspension, compiled, served, &canary, &settled)
    }
}

fn auto() -> Inputs {
    Inputs {
        engine: Engine::Auto,
        suspension: None,
        compiled: Ok(()),
        served: Ok(()),
        canary: IN_SCOPE(),
        settled: Settled::Nothing,
    }
}

/// The plan to prove the policy in the canary namespace of [`IN_SCOPE`].
fn prove() -> Plan {
    Plan::Prove {
        canary: "team-canary".into(),
    }
}

#[test]
fn auto_proves_where_everything_allows_it_and_keeps_the_webhook_otherwise() {
    assert_eq!(auto().plan(), prove());
    let pinned = Inputs {
        engine: Engine::Webhook,
        settled: Settled::InForce,
        ..auto()
    };
    assert_eq!(
        pinned.plan(),
        Plan::Webhook(Why::Pinned),
        "pinned to the webhook, even with a policy in force: the way back"
    );
    let suspended = Inputs {
        suspension: Some(Suspension::Spec),
        settled: Settled::InForce,
        ..auto()
    };
    assert_eq!(
        suspended.plan(),
        Plan::Webhook(Why::Suspended(Suspension::Spec)),
        "break-glass takes the policy out of the path too"
    );
    let not_served = Why::NotServed("no v1beta1".into());
    let unserved = Inputs {
        engine: Engine::Policy,
        served: Err(not_served.clone()),
        ..auto()
    };
    assert_eq!(unserved.plan(), Plan::Webhook(not_served));
    let nowhere = Inputs {
        canary: Canary::NotConfigured,
        ..auto()
    };
    assert_eq!(nowhere.plan(), Plan::Webhook(Why::NoCanaryNamespace));
    let elsewhere = Inputs {
        canary: Canary::OutOfScope("x".into()),
        ..auto()
    };
    assert_eq!(
        elsewhere.plan(),
        Plan::Webhook(Why::CanaryOutOfScope("x".into()))
    );
}

#[test]
fn what_is_settled_for_a_generation_holds_until_the_spec_changes() {
    let disproved = Why::Disproved("pod-bare: /spec differs".into());
    let settled = Inputs {
        settled: Settled::Webhook(disproved.clone()),
        ..auto()
    };
    assert_eq!(settled.plan(), Plan::Webhook(disproved.clone()));
    assert!(disproved.settles());
    assert!(!Why::ProofFailed("timeout".into()).settles());
    // An API server that does not run the policy may be mended without a new spec: the proof
    // is tried again, and fails as long as it is not.
    let not_enforced = Why::NotEnforced("stored uninjected".into());
    assert!(!not_enforced.settles());
    assert_eq!(not_enforced.reason(), "NotEnforced");
    assert_eq!(auto().plan(), prove());
    let in_force = || Inputs {
        settled: Settled::InForce,
        ..auto()
    };
    assert_eq!(in_force().plan(), Plan::KeepPolicy);
    // What the compiler refuses wins over what was settled before the spec changed.
    let field = Why::NotCompilable {
        field: "spec.image".into(),
        message: "an image".into(),
    };
    let uncompilable = Inputs {
        compiled: Err(field.clone()),
        ..in_force()
    };
    assert_eq!(uncompilable.plan(), Plan::Webhook(field));
}

#[test]
fn the_view_warns_only_when_the_policy_was_asked_for() {
    let webhook = view(Engine::Policy, true, &Err(Why::NoCanaryNamespace));
    assert_eq!(webhook.in_force, EngineInForce::Webhook);
    assert_eq!(webhook.reason, "NoCanaryNamespace");
    assert!(webhook.message.contains("--policy-canary-namespace"));
    assert!(webhook.warning);
    assert!(
        webhook
            .message
            .starts_with("spec.engine is Policy, but the webhook runs:"),
        "{}",
        webhook.message
    );
    assert!(
        !view(Engine::Policy, true, &Err(Why::AwaitingWebhook)).warning,
        "waiting for the proof is no warning"
    );
    assert!(!view(Engine::Auto, true, &Err(Why::NoCanaryNamespace)).warning);
    assert!(
        !view(Engine::Auto, false, &Err(Why::NoCanaryNamespace)).shown,
        "no condition for an initializer that is code"
    );
    let policy = view(Engine::Auto, true, &Ok("proven".into()));
    assert_eq!(
        (policy.in_force, policy.reason, policy.warning),
        (EngineInForce::Policy, "Proven", false)
    );
}

#[test]
fn the_proof_corpus_keeps_the_intercepted_kinds_and_knows_what_the_preset_changes() {
    let v = preset_initializer(json!({}));
    let compiled = crate::policy::compile(&v).expect("compiles");
    let proof = compare::proof_corpus(&v, &compiled.program, "preset-canary");
    assert!(!proof.is_empty());
    assert!(
        proof
            .iter()
            .all(|p| matches!(p.kind.kind, "Pod" | "Deployment")),
        "only the kinds the rules intercept"
    );
    assert!(proof.iter().all(|p| {
        p.object["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with(compare::NAME_PREFIX))
    }));
    assert!(proof.iter().any(|p| p.injected));
    assert!(
        proof.iter().any(|p| !p.injected),
        "the opted-out objects stay unchanged"
    );
    // A namespace the preset's patterns do not select: nothing to prove there.
    let elsewhere = compare::proof_corpus(&v, &compiled.program, "elsewhere");
    assert!(elsewhere.iter().all(|p| !p.injected));
}

#[test]
fn dressing_adds_what_the_selectors_require_and_never_what_they_refuse() {
    let v = preset_initializer(json!({
        "objectSelector": {"matchLabels": {"team": "a"},
                           "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "db"]},
                                                {"key": "legacy", "operator": "DoesNotExist"}]},
        "annotation": {"name": "inject.example.com/on", "required": true}
    }));
    let mut object = json!({"metadata": {"name": "x", "labels": {"tier": "mine"}}});
    compare::dress(&mut object, &v);
    assert_eq!(object["metadata"]["labels"]["team"], "a");
    assert_eq!(
        object["metadata"]["labels"]["tier"], "mine",
        "an object's own label is kept"
    );
    assert!(object["metadata"]["labels"].get("legacy").is_none());
    assert_eq!(
        object["metadata"]["annotations"]["inject.example.com/on"],
        "true"
    );
}

#[test]
fn comparing_ignores_identity_the_mark_and_the_proof_label_and_names_what_differs() {
    let stored = |namespace: &str, uid: &str, extra: serde_json::Value| {
        let mut object = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": namespace, "uid": uid, "resourceVersion": "7",
                         "labels": {"app": "x", "controller-uid": uid}},
            "spec": {"selector": {"matchLabels": {"controller-uid": uid}},
                     "template": {"metadata": {"labels": {"app": "x"}},
                                  "spec": {"volumes": [{"name": "kube-api-access-abcde"}]}}}
        });
        if let (Some(o), Some(e)) = (object["metadata"].as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                if let (Some(map), Some(add)) =
                    (o.get_mut(k).and_then(|m| m.as_object_mut()), v.as_object())
                {
                    map.extend(add.clone());
                } else {
                    o.insert(k.clone(), v.clone());
                }
            }
        }
        object
    };
    let by_policy = stored("canary", "u1", json!({"labels": {PROOF_LABEL: "true"}}));
    let mut by_webhook = stored(
        "canary",
        "u2",
        json!({"annotations": {"initializer.dev/initialized-by": "proof/1"}}),
    );
    by_webhook["spec"]["template"]["spec"]["volumes"][0]["name"] = json!("kube-api-access-zyxwv");
    assert!(compare::marked(&by_webhook) && !compare::marked(&by_policy));
    assert_eq!(
        compare::differences(
            &compare::comparable(&by_policy),
            &compare::comparable(&by_webhook)
        ),
        Vec::<String>::new()
    );
    by_webhook["spec"]["template"]["metadata"]["labels"]["injected"] = json!("true");
    assert_eq!(
        compare::differences(
            &compare::comparable(&by_policy),
            &compare::comparable(&by_webhook)
        ),
        vec![
            "/spec/template/metadata/labels/injected: policy (absent) / webhook \"true\""
                .to_owned()
        ]
    );
    // The drift check names its sides its own way, values and all left as they are.
    assert_eq!(
        compare::labelled_differences(
            &json!({"failurePolicy": "policy Fail"}),
            &json!({"failurePolicy": "Ignore"}),
            ("live", "as applied")
        ),
        vec!["/failurePolicy: live \"policy Fail\" / as applied \"Ignore\"".to_owned()]
    );
}

/// A proof that could not finish is not run again before the wait is over, however often its
/// own writes wake the reconcile; a generation's first proof runs at once.
#[test]
fn a_failed_proof_waits_before_the_next() {
    let now = Instant::now();
    let wait = Duration::from_secs(30);
    let mut remembered = Remembered::recovered(None);
    assert!(remembered.proof_due(now, wait), "nothing failed yet");
    remembered.proof_failed_at = Some(now);
    assert!(!remembered.proof_due(now + Duration::from_secs(1), wait));
    assert!(!remembered.proof_due(now + Duration::from_secs(29), wait));
    assert!(remembered.proof_due(now + wait, wait));
}

/// A policy in force that drifted brings the webhook back for the rest of the generation
/// (putting it back is the reconcile's, tested on a control plane); one the API server no longer runs brings the webhook back until the next
/// proof; one that holds stays. A new generation forgets both, and what a proof found.
#[test]
fn what_the_in_force_check_finds_decides_the_way_back() {
    let mut remembered = Remembered::recovered(None);
    assert_eq!(InForceCheck::Holds.why_back(), None);

    let drifted = InForceCheck::Drifted("/spec/matchConstraints differs".into())
        .why_back()
        .expect("a drift brings the webhook back");
    assert_eq!(drifted.reason(), "Drifted");
    assert!(drifted.message().contains("put back as proven"));
    remembered.going_back(&drifted);
    assert_eq!(remembered.settled, Settled::Webhook(drifted));

    let not_enforced = InForceCheck::NotEnforced("a pod was stored uninjected".into())
        .why_back()
        .expect("an unenforced policy brings the webhook back");
    assert_eq!(not_enforced.reason(), "NotEnforced");
    remembered.going_back(&not_enforced);
    assert_eq!(remembered.settled, Settled::Nothing);
    assert_eq!(remembered.failure, Some(not_enforced));

    let generation = remembered.generation;
    remembered.proof_failed_at = Some(Instant::now());
    remembered.at_generation(generation);
    assert!(remembered.failure.is_some(), "the same generation keeps it");
    remembered.at_generation(Some(generation.unwrap_or(0) + 1));
    assert_eq!(
        (
            &remembered.settled,
            &remembered.failure,
            remembered.proof_failed_at
        ),
        (&Settled::Nothing, &None, None)
    );
}
