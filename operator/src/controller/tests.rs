//! Unit tests of [`crate::controller`].

use super::*;
use crate::tls;
use crate::validate::validate;
use initializer_crds::constants::{INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

fn config(name: &str, owner: Option<&str>, managed: bool) -> MutatingWebhookConfiguration {
    let mut labels = BTreeMap::new();
    if managed {
        labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string());
    }
    if let Some(owner) = owner {
        labels.insert(INITIALIZER_LABEL.to_string(), owner.to_string());
    }
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        },
        webhooks: None,
    }
}

fn guard(status: serde_json::Value) -> Initializer {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {"name": "guard", "uid": "uid-1", "generation": 4},
        "spec": {
            "image": "example/guard:1",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
            "timeoutSeconds": 7,
            "health": {"periodSeconds": 3, "latencyBudgetMillis": 250},
        },
        "status": status,
    }))
    .unwrap()
}

fn condition(type_: &str, status: &str) -> serde_json::Value {
    serde_json::json!({"type": type_, "status": status, "reason": "R", "message": "",
            "lastTransitionTime": "2026-11-23T10:00:00Z"})
}

#[test]
fn a_refusal_is_announced_once_per_generation() {
    assert!(refusal_is_news(&guard(serde_json::Value::Null)));
    let refused_now = serde_json::json!({"observedGeneration": 4,
            "conditions": [condition(status::VALID, "False")]});
    assert!(!refusal_is_news(&guard(refused_now)));
    let refused_before = serde_json::json!({"observedGeneration": 3,
            "conditions": [condition(status::VALID, "False")]});
    assert!(refusal_is_news(&guard(refused_before)));
    let valid_now = serde_json::json!({"observedGeneration": 4,
            "conditions": [condition(status::VALID, "True")]});
    assert!(refusal_is_news(&guard(valid_now)));
}

#[test]
fn a_suspend_and_a_conflict_are_announced_only_on_the_way_in() {
    assert!(suspend_is_news(&guard(serde_json::Value::Null)));
    assert!(suspend_is_news(&guard(
        serde_json::json!({"phase": "Registered"})
    )));
    assert!(!suspend_is_news(&guard(
        serde_json::json!({"phase": "Suspended"})
    )));
    let stored = |c| guard(serde_json::json!({"conditions": [c]})).status;
    assert!(conflict_is_news(None));
    assert!(conflict_is_news(
        stored(condition(status::CONFLICT, "False")).as_ref()
    ));
    assert!(!conflict_is_news(
        stored(condition(status::CONFLICT, "True")).as_ref()
    ));
}

#[test]
fn the_supervision_converts_the_specs_units_once() {
    let obj = guard(serde_json::Value::Null);
    let validated = validate(&obj.spec, "initializer-system", "guard").unwrap();
    let workload = WorkloadObservation {
        available: true,
        ..WorkloadObservation::default()
    };
    let desired = build::build(
        &validated,
        &tls::ensure(
            None,
            None,
            &["guard.initializer-system.svc".into()],
            Timestamp::now(),
        )
        .unwrap(),
        &Settings {
            preset_image: "example/preset:1".into(),
            network_policy: None,
        },
        None,
    );
    let s = supervision(&obj, &validated, &desired, workload, None);
    assert_eq!(s.period, Duration::from_secs(3));
    assert_eq!(s.health.period, s.period);
    assert_eq!(s.budget, Duration::from_millis(250));
    assert_eq!(s.timeout, Duration::from_secs(7));
    assert!(s.available);
    assert_eq!(s.generation, Some(4));
    assert_eq!(s.service, "guard");
    assert_eq!(s.webhook, desired.webhook);
}

#[test]
fn an_unwatched_workload_is_looked_at_again_soon_until_registered() {
    assert_eq!(requeue_after(false, false, false), UNWATCHED_POLL);
    assert_eq!(requeue_after(false, true, false), RESYNC);
    assert_eq!(requeue_after(false, false, true), RESYNC);
    assert_eq!(requeue_after(true, false, false), RESYNC);
}

#[test]
fn children_map_to_their_cluster_scoped_initializer() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let mut d = Deployment::default();
    d.metadata.namespace = Some("ops".into());
    assert!(owner_of(d.clone()).is_none());
    d.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "initializer.dev/v1alpha1".into(),
        kind: "Initializer".into(),
        name: "sidecar".into(),
        uid: "u".into(),
        ..Default::default()
    }]);
    let r = owner_of(d).unwrap();
    assert_eq!(r.name, "sidecar");
    assert_eq!(r.namespace, None);
}

#[test]
fn a_configuration_maps_to_its_initializer_by_name_even_when_the_name_is_shortened() {
    let named = |name: &str| {
        let mut i = guard(serde_json::json!({}));
        i.metadata.name = Some(name.into());
        Arc::new(i)
    };
    let long = "Very.Long".repeat(12);
    let shortened = naming::names("a.b").base;
    let known = [
        named("sidecar"),
        named(&long),
        named("a.b"),
        named(&shortened),
    ];
    let of = |configuration: &str| -> Vec<String> {
        configured_by(&known, configuration)
            .into_iter()
            .map(|r| r.name)
            .collect()
    };
    assert_eq!(of("initializer-sidecar"), ["sidecar"]);
    assert_eq!(of(&naming::names(&long).configuration), [long.as_str()]);
    assert!(of("initializer-gone").is_empty());
    assert!(of("sidecar").is_empty());
    assert_eq!(
        of(&naming::names("a.b").configuration),
        ["a.b", shortened.as_str()],
        "a name chosen to equal another's shortened one maps to both"
    );
    let mapped = &configured_by(&known, "initializer-sidecar")[0];
    assert_eq!(mapped.namespace, None, "the Initializer is cluster-scoped");
}

#[test]
fn configurations_without_an_initializer_are_orphans() {
    let long = "x".repeat(100);
    let configs = [
        config("initializer-sidecar", Some("sidecar"), true),
        config("initializer-gone", Some("gone"), true),
        config("initializer-nolabel", None, true),
        config("someone-elses", Some("gone"), false),
        config("initializer-long", Some(&naming::names(&long).label), true),
    ];
    let found = orphans(&configs, &["sidecar".to_string(), long]);
    // Without the Initializer label a configuration is nobody the operator registered: a
    // managed-by label alone (which anyone who can write configurations can set) is not enough.
    assert_eq!(found, ["initializer-gone"]);
}

#[test]
fn an_orphaned_legacy_configuration_releases_only_the_name_the_operator_gave_it() {
    let configuration: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": {"name": "initializer-gone"},
        "initializers": [
            {"name": "gone.initializers.initializer.dev", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
            {"name": "someone-elses.example.com", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
        ],
    }))
    .unwrap();
    let released: Vec<String> = own_pending_names(&configuration)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(released, ["gone.initializers.initializer.dev"]);
    let renamed = kube::api::DynamicObject {
        metadata: kube::api::ObjectMeta {
            name: Some("not-ours".into()),
            ..Default::default()
        },
        ..configuration
    };
    assert!(own_pending_names(&renamed).is_empty());
}

#[test]
fn configurations_of_a_suspended_initializer_are_orphans_once_the_suspend_is_carried_out() {
    let named = |name: &str, suspend: bool, phase: &str| -> Initializer {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "initializer.dev/v1alpha1",
            "kind": "Initializer",
            "metadata": {"name": name},
            "spec": {"image": "example/guard:1", "suspend": suspend,
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]},
            "status": {"phase": phase},
        }))
        .unwrap()
    };
    // Suspended a moment ago: the reconcile of the suspend removes the configuration, and a
    // sweep that removed it first would race a reconcile still holding the object as it was
    // (which registers it again, a suspended initializer back in the path).
    let wanting = wanting_configurations(&[
        named("running", false, "Registered"),
        named("paused", true, "Suspended"),
        named("pausing", true, "Registered"),
    ]);
    assert_eq!(wanting, ["running", "pausing"]);
    let configs = [
        config("initializer-running", Some("running"), true),
        config("initializer-paused", Some("paused"), true),
        config("initializer-pausing", Some("pausing"), true),
    ];
    assert_eq!(orphans(&configs, &wanting), ["initializer-paused"]);
}

#[test]
fn fallback_policies_of_a_gone_initializer_are_orphans_and_others_are_not() {
    let policy = |name: &str, owner: &str| ValidatingAdmissionPolicy {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                [
                    (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
                    (INITIALIZER_LABEL.to_string(), owner.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    let found = orphans(
        &[
            policy("initializer-guard-fallback", "guard"),
            policy("initializer-gone-fallback", "gone"),
        ],
        &["guard".to_string()],
    );
    assert_eq!(found, ["initializer-gone-fallback"]);
}
