//! Unit tests of [`crate::pending`].

use super::*;
use initializer_crds::InterceptRule;

const DEAD: &str = "sidecar.initializer-system.initializer-operator.io";

fn waiting(names: &[&str]) -> Value {
    let pending: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    json!({"metadata": {"name": "nginx", "resourceVersion": "7", "initializers": {"pending": pending}}, "spec": {}})
}

#[test]
fn an_object_waiting_on_the_dead_name_is_released_wherever_the_name_stands() {
    let first = released(&waiting(&[DEAD, "other.example.com"]), DEAD).unwrap();
    assert_eq!(pending_names(&first), ["other.example.com"]);
    assert_eq!(first["metadata"]["resourceVersion"], "7");
    let second = released(&waiting(&["other.example.com", DEAD]), DEAD).unwrap();
    assert_eq!(pending_names(&second), ["other.example.com"]);
    let only = released(&waiting(&[DEAD]), DEAD).unwrap();
    assert!(pending_names(&only).is_empty());
    assert!(is_initialized(&only));
}

#[test]
fn an_object_not_waiting_on_the_name_is_left_alone() {
    assert_eq!(released(&waiting(&["other.example.com"]), DEAD), None);
    assert_eq!(released(&json!({"metadata": {"name": "x"}}), DEAD), None);
    assert_eq!(
        released(&json!({"metadata": {"initializers": null}}), DEAD),
        None
    );
}

#[test]
fn initialized_means_no_pending_name_and_no_result() {
    assert!(is_initialized(&json!({"metadata": {}})));
    assert!(is_initialized(&waiting(&[])));
    assert!(!is_initialized(&waiting(&[DEAD])));
    let refused = json!({"metadata": {"initializers": {"pending": [], "result": {"status": "Failure", "message": "no"}}}});
    assert!(!is_initialized(&refused));
    assert_eq!(failure(&refused).as_deref(), Some("no"));
    assert_eq!(failure(&waiting(&[DEAD])), None);
}

fn served(group: &str, version: &str, resource: &str, kind: &str, preferred: bool) -> Served {
    Served {
        group: group.into(),
        version: version.into(),
        preferred,
        resource: resource.into(),
        kind: kind.into(),
        namespaced: resource != "namespaces",
    }
}

fn rule(groups: &[&str], versions: &[&str], resources: &[&str]) -> InterceptRule {
    InterceptRule {
        api_groups: groups.iter().map(|s| s.to_string()).collect(),
        api_versions: versions.iter().map(|s| s.to_string()).collect(),
        resources: resources.iter().map(|s| s.to_string()).collect(),
        ..InterceptRule::default()
    }
}

#[test]
fn the_walkthroughs_wildcard_rule_reaches_deployments_in_their_preferred_version_once() {
    let discovery = [
        served("", "v1", "pods", "Pod", true),
        served("apps", "v1beta1", "deployments", "Deployment", false),
        served("apps", "v1", "deployments", "Deployment", true),
        served("extensions", "v1beta1", "deployments", "Deployment", true),
        served("", "v1", "configmaps", "ConfigMap", true),
    ];
    let reached = reached(&[rule(&["*"], &["*"], &["deployments"])], &discovery);
    assert_eq!(
        reached,
        [
            served("apps", "v1", "deployments", "Deployment", true),
            served("extensions", "v1beta1", "deployments", "Deployment", true),
        ]
    );
    let core = super::reached(&[rule(&[""], &["v1"], &["configmaps", "pods"])], &discovery);
    assert_eq!(core.len(), 2);
    assert!(super::reached(&[rule(&["apps"], &["v2"], &["deployments"])], &discovery).is_empty());
}

#[test]
fn the_canary_is_a_kind_that_does_nothing_once_initialized() {
    let reached = [
        served("", "v1", "namespaces", "Namespace", true),
        served("", "v1", "pods", "Pod", true),
        served("apps", "v1", "deployments", "Deployment", true),
    ];
    let chosen = canary_resource(&reached).unwrap();
    assert_eq!(
        chosen.kind, "Deployment",
        "a Deployment with no replicas before a pod"
    );
    assert_eq!(
        canary_resource(&reached[..1]),
        None,
        "a Namespace is no canary"
    );
    let object = canary(
        &chosen,
        "sidecar-canary-1",
        "default",
        ("initializer-operator.io/canary", "sidecar"),
        DEAD,
    );
    assert_eq!(object["apiVersion"], "apps/v1");
    assert_eq!(object["spec"]["replicas"], 0);
    assert_eq!(
        object["metadata"]["labels"]["initializer-operator.io/canary"],
        "sidecar"
    );
    assert_eq!(pending_names(&object), [DEAD], "only this initializer");
    assert!(is_canary(&object), "left out of the released count");
    assert!(!is_canary(&waiting(&[DEAD])));
    let pod = canary(&reached[1], "c", "default", ("k", "v"), DEAD);
    assert_eq!(pod["apiVersion"], "v1");
    assert_eq!(
        pod["spec"]["nodeName"],
        "initializer-operator-canary-nowhere"
    );
}

#[test]
fn only_canaries_older_than_any_probe_are_stale() {
    let now: jiff::Timestamp = "2026-11-23T19:00:00Z".parse().unwrap();
    let items = [
        json!({"metadata": {"name": "old", "creationTimestamp": "2026-11-23T18:57:59Z"}}),
        json!({"metadata": {"name": "probing", "creationTimestamp": "2026-11-23T18:59:59Z"}}),
        json!({"metadata": {"name": "undated"}}),
    ];
    assert_eq!(stale_canaries(&items, now), ["old"]);
}
