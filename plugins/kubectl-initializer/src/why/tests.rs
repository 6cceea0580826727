use super::*;
use initializer_crds::InitializerStatus;
use serde_json::json;

const OPERATOR_NS: &str = "initializer-system";

/// An Initializer named `sidecar` with `spec` (the `diff` tests use it too).
pub(crate) fn initializer(spec: Value) -> Initializer {
    serde_json::from_value(json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {"name": "sidecar"},
        "spec": spec,
    }))
    .unwrap()
}

pub(super) fn sidecar() -> Initializer {
    initializer(json!({
        "image": "sidecar:1",
        "namespace": "sidecars",
        "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}],
        "namespaces": {"selector": {"matchLabels": {"team": "web"}}, "exclude": ["legacy"]},
        "objectSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]},
        "annotation": {"name": "initializer.kubernetes.io/sidecar", "required": true},
    }))
}

fn facts() -> OperatorFacts {
    OperatorFacts {
        namespace: Some(OPERATOR_NS.to_string()),
    }
}

fn live(init: &Initializer) -> MutatingWebhookConfiguration {
    would_register(init, &facts()).unwrap()
}

pub(super) fn deployment(namespace: &str, labels: Value, annotations: Value) -> Request {
    Request {
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        subresource: String::new(),
        kind: "Deployment".into(),
        namespaced: true,
        namespace: Some(namespace.into()),
        name: "nginx".into(),
        operation: "CREATE".into(),
        object: json!({"metadata": {"name": "nginx", "labels": labels, "annotations": annotations}}),
        namespace_labels: BTreeMap::from([
            (NAMESPACE_NAME_LABEL.to_string(), namespace.to_string()),
            ("team".to_string(), "web".to_string()),
        ]),
    }
}

fn annotated() -> Value {
    json!({"initializer.kubernetes.io/sidecar": "true"})
}

fn kinds(v: &Verdict) -> Vec<ReasonKind> {
    v.reasons.iter().map(|r| r.kind).collect()
}

/// Checks that `v` gives the one reason `kind`, whose detail says `detail`.
fn assert_one_reason(v: &Verdict, kind: ReasonKind, detail: &str) {
    assert_eq!(kinds(v), [kind], "{v:?}");
    assert!(v.reasons[0].detail.contains(detail), "{v:?}");
}

pub(super) fn judge(init: &Initializer, request: &Request) -> Verdict {
    judge_against(init, &live(init), request)
}

/// The verdict on `request` when `config` is the webhook configuration in the cluster.
fn judge_against(
    init: &Initializer,
    config: &MutatingWebhookConfiguration,
    request: &Request,
) -> Verdict {
    decide(
        init,
        Some(config),
        Err("unused"),
        &OperatorFacts::default(),
        request,
    )
}

#[test]
fn an_object_every_check_admits_is_intercepted() {
    let init = sidecar();
    let v = judge(
        &init,
        &deployment("shop", json!({"tier": "front"}), annotated()),
    );
    assert!(v.intercepted, "{v:?}");
    assert!(v.reasons.is_empty());
    assert_eq!(v.basis, Basis::Live("initializer-sidecar".into()));
}

#[test]
fn a_missing_required_annotation_is_the_annotation_gate() {
    let init = sidecar();
    let v = judge(
        &init,
        &deployment("shop", json!({"tier": "front"}), json!({})),
    );
    assert!(!v.intercepted);
    assert_one_reason(
        &v,
        ReasonKind::AnnotationGate,
        "initializer.kubernetes.io/sidecar",
    );
    let off = judge(
        &init,
        &deployment(
            "shop",
            json!({"tier": "front"}),
            json!({"initializer.kubernetes.io/sidecar": "false"}),
        ),
    );
    assert_one_reason(&off, ReasonKind::AnnotationGate, "\"false\"");
}

#[test]
fn an_object_label_outside_the_object_selector_is_the_object_selector() {
    let v = judge(
        &sidecar(),
        &deployment("shop", json!({"tier": "back"}), annotated()),
    );
    assert_one_reason(&v, ReasonKind::ObjectSelector, "tier in (front)");
    assert!(v.reasons[0].detail.contains("tier=back"));
}

#[test]
fn another_resource_or_operation_is_the_rule() {
    let init = sidecar();
    let mut secret = deployment("shop", json!({"tier": "front"}), annotated());
    secret.group = String::new();
    secret.resource = "secrets".into();
    let v = judge(&init, &secret);
    assert_one_reason(&v, ReasonKind::Rule, "CREATE v1 secrets");
    assert!(v.reasons[0].detail.contains("resources [deployments]"));
    let mut update = deployment("shop", json!({"tier": "front"}), annotated());
    update.operation = "UPDATE".into();
    assert_eq!(kinds(&judge(&init, &update)), [ReasonKind::Rule]);
}

#[test]
fn namespace_labels_include_and_exclude_are_the_namespace_selector() {
    let init = sidecar();
    let mut unlabelled = deployment("shop", json!({"tier": "front"}), annotated());
    unlabelled.namespace_labels.remove("team");
    let v = judge(&init, &unlabelled);
    assert_one_reason(&v, ReasonKind::NamespaceSelector, "team=web");
    let excluded = judge(
        &init,
        &deployment("legacy", json!({"tier": "front"}), annotated()),
    );
    assert_one_reason(
        &excluded,
        ReasonKind::NamespaceSelector,
        "spec.namespaces.exclude",
    );
    let mut include = sidecar();
    include.spec.namespaces.as_mut().unwrap().include = vec!["shop".into()];
    let v = judge(
        &include,
        &deployment("blog", json!({"tier": "front"}), annotated()),
    );
    assert_one_reason(&v, ReasonKind::NamespaceSelector, "spec.namespaces.include");
}

#[test]
fn system_operator_and_workload_namespaces_are_mandatory_exclusions() {
    let init = sidecar();
    for (namespace, what) in [
        ("kube-system", "a system namespace"),
        ("sidecars", "workload namespace"),
        (OPERATOR_NS, "the operator's namespace"),
    ] {
        let v = judge(
            &init,
            &deployment(namespace, json!({"tier": "front"}), annotated()),
        );
        assert_eq!(kinds(&v), [ReasonKind::MandatoryExclusion], "{namespace}");
        assert!(v.reasons[0].detail.contains(what), "{v:?}");
    }
}

#[test]
fn every_failing_check_of_the_api_server_is_reported_in_order() {
    let mut request = deployment("legacy", json!({"tier": "back"}), json!({}));
    request.operation = "DELETE".into();
    let v = judge(&sidecar(), &request);
    assert_eq!(
        kinds(&v),
        [
            ReasonKind::Rule,
            ReasonKind::NamespaceSelector,
            ReasonKind::ObjectSelector,
        ],
        "the annotation gate is not reported for an initializer the API server does not call"
    );
}

#[test]
fn an_unregistered_initializer_says_so_and_what_would_happen() {
    let mut init = sidecar();
    init.spec.suspend = true;
    init.status = Some(InitializerStatus {
        phase: Some(initializer_crds::Phase::Suspended),
        ..Default::default()
    });
    let would = would_register(&init, &facts()).unwrap();
    let request = deployment("shop", json!({"tier": "front"}), annotated());
    let v = decide(&init, None, Ok(&would), &facts(), &request);
    assert!(!v.intercepted);
    assert!(!v.registered);
    assert_eq!(v.once_registered, Some(true));
    assert_one_reason(&v, ReasonKind::NotRegistered, "Suspended");
    assert!(v.reasons[0].detail.contains("spec.suspend is true"));
    assert_eq!(v.basis, Basis::WouldRegister("initializer-sidecar".into()));

    let elsewhere = deployment(OPERATOR_NS, json!({"tier": "front"}), annotated());
    let v = decide(&init, None, Ok(&would), &facts(), &elsewhere);
    assert_eq!(
        kinds(&v),
        [ReasonKind::NotRegistered, ReasonKind::MandatoryExclusion]
    );
    assert_eq!(v.once_registered, Some(false));

    let plain = deployment("shop", json!({"tier": "front"}), json!({}));
    let v = decide(&init, None, Ok(&would), &facts(), &plain);
    assert_eq!(
        kinds(&v),
        [ReasonKind::NotRegistered, ReasonKind::AnnotationGate]
    );
    assert_eq!(v.once_registered, Some(false));

    let v = decide(&init, None, Err("no operator"), &facts(), &request);
    assert_eq!(v.once_registered, None);
    assert_eq!(v.basis, Basis::Unknown("no operator".into()));
}

#[test]
fn what_the_operator_would_register_needs_its_namespace_and_a_valid_spec() {
    let init = sidecar();
    assert!(
        would_register(&init, &OperatorFacts::default())
            .unwrap_err()
            .contains("--operator-namespace")
    );
    let mut bad = sidecar();
    bad.spec.namespaces.as_mut().unwrap().include = vec![OPERATOR_NS.into()];
    let refused = would_register(&bad, &facts());
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("the operator refuses")),
        "{refused:?}"
    );
}

#[test]
fn the_live_configuration_is_the_truth_over_the_spec() {
    let init = sidecar();
    let mut config = live(&init);
    // Someone changed the live rules: the verdict follows them, not the spec.
    config.webhooks.as_mut().unwrap()[0].rules.as_mut().unwrap()[0].resources =
        Some(vec!["statefulsets".into()]);
    let v = judge_against(
        &init,
        &config,
        &deployment("shop", json!({"tier": "front"}), annotated()),
    );
    assert_eq!(kinds(&v), [ReasonKind::Rule]);
}

#[test]
fn a_degraded_configuration_is_noted() {
    let init = sidecar();
    let config = initializer_core::build::degraded(&live(&init));
    let v = judge_against(
        &init,
        &config,
        &deployment("shop", json!({"tier": "front"}), annotated()),
    );
    assert!(v.intercepted);
    assert!(v.notes.iter().any(|n| n.contains("degraded")), "{v:?}");
}

#[test]
fn a_namespace_object_is_matched_by_its_own_labels_and_cluster_objects_skip_the_selector() {
    let init = initializer(json!({
        "image": "x:1",
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"], "scope": "*"},
            {"apiGroups": ["storage.k8s.io"], "apiVersions": ["v1"], "resources": ["storageclasses"], "scope": "*"},
        ],
        "namespaces": {"selector": {"matchLabels": {"team": "web"}}},
    }));
    let namespace = |labels: Value| Request {
        group: String::new(),
        version: "v1".into(),
        resource: "namespaces".into(),
        subresource: String::new(),
        kind: "Namespace".into(),
        namespaced: false,
        namespace: None,
        name: "shop".into(),
        operation: "CREATE".into(),
        object: json!({"metadata": {"name": "shop", "labels": labels}}),
        namespace_labels: BTreeMap::new(),
    };
    let v = judge(
        &init,
        &namespace(json!({"team": "web", NAMESPACE_NAME_LABEL: "shop"})),
    );
    assert!(v.intercepted, "{v:?}");
    let v = judge(&init, &namespace(json!({NAMESPACE_NAME_LABEL: "shop"})));
    assert_eq!(kinds(&v), [ReasonKind::NamespaceSelector]);
    let mut storage_class = namespace(json!({}));
    storage_class.group = "storage.k8s.io".into();
    storage_class.resource = "storageclasses".into();
    storage_class.kind = "StorageClass".into();
    assert!(judge(&init, &storage_class).intercepted);
}
