//! Unit tests of `diff`: both engines on single objects, on the operator's corpus, and the
//! report as text.

use super::*;
use crate::why::tests::initializer;
use initializer_core::policy::corpus;
use serde_json::json;

/// Every kind with pods, as a preset's rules name them.
fn pod_rules() -> Value {
    json!([{
        "apiGroups": ["", "apps", "batch"],
        "apiVersions": ["v1"],
        "resources": ["pods", "deployments", "statefulsets", "daemonsets", "replicasets", "jobs", "cronjobs"]
    }])
}

const GATE: &str = "initializer.kubernetes.io/sidecar";

/// A preset injecting a sidecar, a volume and its mount, opted into by annotation.
fn sidecar() -> Initializer {
    initializer(json!({
        "rules": pod_rules(),
        "annotation": {"name": GATE, "required": true},
        "preset": {"inject": {
            "containers": [{"name": "proxy", "image": "registry.example/proxy:1.0"}],
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]
        }}
    }))
}

fn deployment(annotated: bool, containers: Value) -> Value {
    let annotations = if annotated {
        json!({GATE: "true"})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "apps", "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": containers}
            }
        }
    })
}

async fn one(init: &Initializer, object: &Value, assumptions: &Assumptions) -> ObjectDiff {
    let prepared = prepare(init, assumptions).unwrap();
    diff_object(&prepared, object, assumptions).await.unwrap()
}

fn checks(diff: &ObjectDiff) -> Vec<&str> {
    diff.reasons.iter().map(|r| r.check.as_str()).collect()
}

/// The lines of a unified diff that `sign` (`+` or `-`) marks as added or removed, without the
/// file headers (`+++`, `---`).
fn changed_lines(diff: &str, sign: char) -> Vec<&str> {
    let header = sign.to_string().repeat(3);
    diff.lines()
        .filter(|l| l.starts_with(sign) && !l.starts_with(&header))
        .collect()
}

#[tokio::test]
async fn a_deployment_without_containers_gets_the_sidecar() {
    let diff = one(
        &sidecar(),
        &deployment(true, json!([])),
        &Assumptions::default(),
    )
    .await;
    assert_eq!(diff.outcome, Outcome::Changed, "{diff:#?}");
    assert!(diff.policy.is_some(), "the preset compiles into a policy");
    assert!(
        diff.diff.starts_with(
            "--- Deployment/apps/web\n+++ Deployment/apps/web (after Initializer sidecar)\n@@ "
        ),
        "{}",
        diff.diff
    );
    let added = changed_lines(&diff.diff, '+');
    assert!(
        added
            .iter()
            .any(|l| l.contains("image: registry.example/proxy:1.0")),
        "{}",
        diff.diff
    );
    assert!(
        added.iter().any(|l| l.contains("name: shared")),
        "{}",
        diff.diff
    );
    // The empty list is written `[]` in YAML: its line is the only one replaced.
    let removed = changed_lines(&diff.diff, '-');
    assert_eq!(removed, ["-      containers: []"], "{}", diff.diff);
    let paths: Vec<String> = diff
        .patch
        .0
        .iter()
        .map(|op| match op {
            json_patch::PatchOperation::Add(add) => add.path.to_string(),
            other => panic!("only adds: {other:?}"),
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/spec/template/spec/containers/0",
            "/spec/template/spec/volumes"
        ]
    );
}

#[tokio::test]
async fn an_object_already_injected_shows_no_change() {
    let assumptions = Assumptions::default();
    let first = one(
        &sidecar(),
        &deployment(true, json!([{"name": "app", "image": "app:1"}])),
        &assumptions,
    )
    .await;
    assert_eq!(first.outcome, Outcome::Changed);
    assert!(
        first.diff.contains("mountPath: /shared"),
        "the app's container gets the mount: {}",
        first.diff
    );
    let injected = first.webhook.after.clone().unwrap();
    let again = one(&sidecar(), &injected, &assumptions).await;
    assert_eq!(again.outcome, Outcome::Unchanged, "{again:#?}");
    assert!(again.diff.is_empty() && again.patch.0.is_empty());
    assert_eq!(checks(&again), ["needs-injection"]);
    assert!(again.reasons[0].detail.contains("already there"));
    assert_eq!(again.webhook.reasons[0].check, "AlreadyInjected");
}

#[tokio::test]
async fn an_object_the_annotation_gate_excludes_is_not_matched() {
    let diff = one(
        &sidecar(),
        &deployment(false, json!([{"name": "app", "image": "app:1"}])),
        &Assumptions::default(),
    )
    .await;
    assert_eq!(diff.outcome, Outcome::NotMatched, "{diff:#?}");
    assert_eq!(checks(&diff), ["initializer-annotation-gate"]);
    assert!(diff.reasons[0].detail.contains(GATE), "{:?}", diff.reasons);
    assert_eq!(diff.webhook.reasons[0].check, "AnnotationGate");
    assert!(!diff.webhook.matched && !diff.policy.as_ref().unwrap().matched);
}

#[tokio::test]
async fn the_engines_agree_on_the_operators_corpus() {
    let init = initializer(json!({
        "rules": pod_rules(),
        "preset": serde_json::to_value(corpus::representative_preset()).unwrap(),
    }));
    let assumptions = Assumptions::default();
    let prepared = prepare(&init, &assumptions).unwrap();
    assert_eq!(prepared.engines().len(), 2, "{:?}", prepared.notes());
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for item in corpus::corpus() {
        for namespace in ["preset-a", "team-canary", "default"] {
            let mut object = item.object.clone();
            object["metadata"]["namespace"] = json!(namespace);
            let diff = diff_object(&prepared, &object, &assumptions).await.unwrap();
            assert_ne!(
                diff.outcome,
                Outcome::Disagree,
                "{} in {namespace}: {}",
                item.name,
                text(&Report {
                    assumed: Assumed {
                        operator_namespace: assumptions.operator_namespace.clone(),
                        operator_namespace_given: false,
                        namespace_labels: BTreeMap::new(),
                    },
                    initializers: vec![InitializerReport {
                        initializer: "sidecar".into(),
                        engines: prepared.engines(),
                        notes: Vec::new(),
                        objects: vec![diff.clone()],
                    }],
                })
            );
            *outcomes.entry(format!("{:?}", diff.outcome)).or_default() += 1;
            if diff.outcome == Outcome::Changed {
                // Once injected, both engines leave it alone.
                let after = diff.webhook.after.clone().unwrap();
                let again = diff_object(&prepared, &after, &assumptions).await.unwrap();
                assert_eq!(
                    again.outcome,
                    Outcome::Unchanged,
                    "{} in {namespace}",
                    item.name
                );
            }
        }
    }
    // 15 objects; the opted-out one and the namespace `default` are left alone.
    assert_eq!(outcomes.get("Changed"), Some(&28), "{outcomes:?}");
    assert_eq!(outcomes.get("NotMatched"), Some(&17), "{outcomes:?}");
}

#[tokio::test]
async fn custom_code_is_known_to_be_called_but_not_what_it_changes() {
    let mut init = sidecar();
    init.spec.preset = None;
    init.spec.image = Some("registry.example/custom:1".into());
    let assumptions = Assumptions::default();
    let prepared = prepare(&init, &assumptions).unwrap();
    assert!(prepared.is_opaque());
    let called = diff_object(&prepared, &deployment(true, json!([])), &assumptions)
        .await
        .unwrap();
    assert_eq!(called.outcome, Outcome::Unknown);
    assert_eq!(checks(&called), ["Code"]);
    assert!(called.reasons[0].detail.contains("spec.image"));
    let skipped = diff_object(&prepared, &deployment(false, json!([])), &assumptions)
        .await
        .unwrap();
    assert_eq!(
        skipped.outcome,
        Outcome::NotMatched,
        "known offline: not called"
    );
    assert_eq!(checks(&skipped), ["AnnotationGate"]);
}

#[tokio::test]
async fn other_kinds_are_not_matched_and_say_why() {
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "annotations": {GATE: "true"}},
        "spec": {"ports": [{"port": 80}]}
    });
    let outside_the_rules = one(&sidecar(), &service, &Assumptions::default()).await;
    assert_eq!(outside_the_rules.outcome, Outcome::NotMatched);
    assert_eq!(checks(&outside_the_rules), ["Rule"]);
    assert!(
        outside_the_rules.reasons[0]
            .detail
            .contains("CREATE v1 services")
    );

    let mut wide = sidecar();
    wide.spec.rules[0].resources.push("services".into());
    let within_the_rules = one(&wide, &service, &Assumptions::default()).await;
    assert_eq!(within_the_rules.outcome, Outcome::NotMatched);
    // The preset's kinds are a matchCondition of its webhook: the API server does not call it.
    assert_eq!(within_the_rules.webhook.reasons[0].check, "PresetSelection");
    assert!(
        within_the_rules.webhook.reasons[0]
            .detail
            .contains("matchCondition preset-kinds"),
        "{within_the_rules:#?}"
    );
    assert!(
        checks(&within_the_rules).contains(&"preset-kinds"),
        "{within_the_rules:#?}"
    );
}

#[tokio::test]
async fn namespaces_are_judged_by_the_assumed_labels() {
    let mut init = sidecar();
    init.spec.namespaces = Some(
        serde_json::from_value(json!({"selector": {"matchLabels": {"team": "web"}}})).unwrap(),
    );
    let object = deployment(true, json!([{"name": "app", "image": "app:1"}]));
    let unlabelled = one(&init, &object, &Assumptions::default()).await;
    assert_eq!(unlabelled.outcome, Outcome::NotMatched);
    assert_eq!(checks(&unlabelled), ["NamespaceSelector"]);
    let labelled = Assumptions {
        namespace_labels: BTreeMap::from([("team".to_string(), "web".to_string())]),
        ..Assumptions::default()
    };
    assert_eq!(
        one(&init, &object, &labelled).await.outcome,
        Outcome::Changed
    );

    let mut system = object.clone();
    system["metadata"]["namespace"] = json!(DEFAULT_OPERATOR_NAMESPACE);
    let excluded = one(&init, &system, &labelled).await;
    assert_eq!(checks(&excluded), ["MandatoryExclusion"]);
}

#[test]
fn a_request_is_guessed_offline_as_kubectl_guesses_it() {
    let assumptions = Assumptions {
        default_namespace: "shop".into(),
        ..Assumptions::default()
    };
    let service = request_for(
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}),
        &assumptions,
    );
    assert_eq!(service.resource, "services");
    assert_eq!(service.namespace.as_deref(), Some("shop"));
    assert_eq!(service.object["metadata"]["namespace"], "shop");
    assert_eq!(service.namespace_labels[NAMESPACE_NAME_LABEL], "shop");
    let policy = request_for(
        &json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": "x"}}),
        &assumptions,
    );
    assert_eq!(policy.resource, "networkpolicies");
    assert_eq!(policy.namespace.as_deref(), Some("x"));
    let namespace = request_for(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
        &assumptions,
    );
    assert!(!namespace.namespaced && namespace.namespace.is_none());
}

#[test]
fn a_spec_the_operator_refuses_is_an_error() {
    let mut refused = sidecar();
    refused.spec.rules.clear();
    let err = prepare(&refused, &Assumptions::default()).unwrap_err();
    assert!(err.contains("the operator refuses the spec"), "{err}");
    let mut legacy = sidecar();
    legacy.spec.backend = Backend::InitializerConfiguration;
    let err = prepare(&legacy, &Assumptions::default()).unwrap_err();
    assert!(err.contains("InitializerConfiguration"), "{err}");
}

#[test]
fn engines_that_disagree_are_reported_with_both_changes() {
    let request = request_for(&deployment(true, json!([])), &Assumptions::default());
    let mut one_way = request.object.clone();
    one_way["metadata"]["labels"] = json!({"a": "1"});
    let mut other_way = request.object.clone();
    other_way["metadata"]["labels"] = json!({"b": "2"});
    let diff = compose(
        "sidecar",
        &request,
        EngineResult::changed(&request.object, one_way),
        Some(EngineResult::changed(&request.object, other_way)),
    );
    assert_eq!(diff.outcome, Outcome::Disagree);
    let report = Report {
        assumed: Assumed {
            operator_namespace: DEFAULT_OPERATOR_NAMESPACE.into(),
            operator_namespace_given: true,
            namespace_labels: BTreeMap::new(),
        },
        initializers: vec![InitializerReport {
            initializer: "sidecar".into(),
            engines: Vec::new(),
            notes: Vec::new(),
            objects: vec![diff],
        }],
    };
    assert_eq!(report.count(Outcome::Disagree), 1);
    let out = text(&report);
    assert!(
        out.contains("Deployment/apps/web: THE ENGINES DISAGREE"),
        "{out}"
    );
    assert!(
        out.contains("+++ Deployment/apps/web (after Initializer sidecar, webhook)"),
        "{out}"
    );
    assert!(
        out.contains("+++ Deployment/apps/web (after Initializer sidecar, policy)"),
        "{out}"
    );
    assert!(out.contains("+    a: \"1\""), "{out}");
    assert!(out.contains("+    b: \"2\""), "{out}");
}

#[tokio::test]
async fn the_report_states_its_assumptions_and_each_outcome() {
    let assumptions = Assumptions::default();
    let prepared = prepare(&sidecar(), &assumptions).unwrap();
    let objects = [
        deployment(true, json!([{"name": "app", "image": "app:1"}])),
        deployment(false, json!([{"name": "app", "image": "app:1"}])),
    ];
    let report = diff_all(&[prepared], &objects, &assumptions).await.unwrap();
    assert_eq!(report.count(Outcome::Changed), 1);
    assert_eq!(report.count(Outcome::NotMatched), 1);
    let out = text(&report);
    for expected in [
        "assumed: the operator runs in namespace initializer-system (--operator-namespace to change)\n",
        "assumed: namespace apps has the labels {kubernetes.io/metadata.name=apps} (--namespace-labels to add)\n",
        "\nInitializer sidecar, computed by: webhook",
        "note: the webhook also writes its signed mark",
        "\nDeployment/apps/web: changed\n--- Deployment/apps/web\n+++ Deployment/apps/web (after Initializer sidecar)\n@@ ",
        "\nDeployment/apps/web: not matched\n  initializer-annotation-gate: spec.annotation requires the annotation",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    let json = serde_json::to_value(&report).unwrap();
    let changed = &json["initializers"][0]["objects"][0];
    assert_eq!(changed["outcome"], "Changed");
    assert_eq!(changed["patch"][0]["op"], "add");
    assert_eq!(changed["webhook"]["patch"], changed["policy"]["patch"]);
}
