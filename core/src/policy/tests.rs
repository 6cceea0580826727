//! Unit tests of [`crate::policy`]: the webhook's preset code (the preset initializer through
//! the SDK's router, as the API server calls it) and the compiled program are fed the same
//! objects and must leave them the same; the rendered CEL is checked for syntax, escaping and
//! nesting; the policy's scope is the webhook's.

use std::collections::BTreeMap;

use initializer_crds::{AnnotationGate, InitializerSpec, PresetConfig};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube_initializer::advanced::Tuning;
use kube_initializer::testing::{ReviewBuilder, Tester, review};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::corpus::{self, OPT_OUT_LABEL};
use super::ir::{Evaluation, POD_KINDS, RequestFacts};
use super::*;
use crate::validate::{Validated, validate};

/// The object as the webhook receives it (its typed form, serialized), in a review.
fn review_of(object: &Value, namespace: &str) -> ReviewBuilder {
    fn typed<K>(object: &Value) -> ReviewBuilder
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        review(&serde_json::from_value::<K>(object.clone()).unwrap())
    }
    let builder = match object["kind"].as_str().unwrap() {
        "Pod" => typed::<Pod>(object),
        "Deployment" => typed::<Deployment>(object),
        "StatefulSet" => typed::<StatefulSet>(object),
        "DaemonSet" => typed::<DaemonSet>(object),
        "ReplicaSet" => typed::<ReplicaSet>(object),
        "Job" => typed::<Job>(object),
        "CronJob" => typed::<CronJob>(object),
        other => panic!("no typed form for {other}"),
    };
    builder.namespace(Some(namespace))
}

/// What the webhook makes of `object` in `namespace`: the patched object and whether it
/// patched. Without the initialized-by mark, which a policy cannot write.
async fn webhook(
    preset: &PresetConfig,
    gate: Option<&AnnotationGate>,
    review: &ReviewBuilder,
) -> (Value, bool) {
    let initializer = preset_initializer::initializer()
        .mark_initialized(false)
        .annotation_gate(
            gate.map(|g| kube_initializer::gate::AnnotationGate::new(g.name.trim(), g.required)),
        )
        .fixed_config(preset.clone());
    let answer = Tester::new(initializer).call(review).await.unwrap();
    assert!(answer.allowed(), "{:?}", answer.response());
    (answer.patched_json().unwrap(), answer.patch().is_some())
}

fn facts<'a>(object: &'a Value, namespace: &'a str) -> RequestFacts<'a> {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    RequestFacts {
        group,
        version,
        kind: object["kind"].as_str().unwrap(),
        namespace,
    }
}

/// Feeds both engines `object`, then both their own outputs; they must agree each time, and
/// the second pass must change nothing. Returns whether the first pass changed the object.
async fn agree(
    preset: &PresetConfig,
    gate: Option<&AnnotationGate>,
    object: &Value,
    namespace: &str,
) -> bool {
    let program = program(preset, gate).unwrap();
    let review = review_of(object, namespace);
    let input = review.object().clone();
    let (expected, webhook_patched) = webhook(preset, gate, &review).await;
    let request = facts(&input, namespace);
    let evaluation = program.evaluate(&request, &input);
    let actual = program.apply(&request, &input).unwrap();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    assert_eq!(
        actual, expected,
        "{name} in {namespace:?}: the program (left) and the webhook (right) disagree\nprogram: {evaluation:?}"
    );
    assert_eq!(
        matches!(evaluation, Evaluation::Patched(_)),
        webhook_patched,
        "{name}: one engine patched, the other did not: {evaluation:?}"
    );
    // The preset's webhook carries these conditions as its matchConditions: what they leave
    // out, the API server does not send, so the preset initializer must leave it alone.
    let selected = program.conditions.iter().all(|c| c.holds(&request, &input));
    assert!(
        selected || !webhook_patched,
        "{name} in {namespace:?}: the webhook patched an object its matchConditions leave out"
    );
    // Reinvocation, or a create of an object that already has everything.
    let again = review_of(&expected, namespace);
    let (unchanged, patched_again) = webhook(preset, gate, &again).await;
    assert!(!patched_again, "{name}: the webhook is not idempotent");
    assert_eq!(&unchanged, again.object());
    let second = program.evaluate(&facts(again.object(), namespace), again.object());
    assert!(
        matches!(second, Evaluation::AlreadyInjected | Evaluation::Skipped),
        "{name}: the program acts on its own output: {second:?}"
    );
    webhook_patched
}

fn preset(value: Value) -> PresetConfig {
    serde_json::from_value(value).unwrap()
}

/// The representative preset without its selector: it selects everything.
fn unselective() -> PresetConfig {
    PresetConfig {
        selector: Default::default(),
        ..corpus::representative_preset()
    }
}

/// Objects the corpus does not hold because the API server never stores them so (no spec,
/// template without metadata, empty lists), and more label and annotation shapes.
fn unit_objects() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-spec"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty-lists"},
               "spec": {"containers": [{"name": "app", "image": "x", "env": [], "volumeMounts": []}],
                        "volumes": [], "initContainers": []}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "template-without-metadata"},
               "spec": {"template": {"spec": {"containers": [{"name": "t", "image": "x"}]}}}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "template-annotations-only", "labels": {"app": "web"}},
               "spec": {"selector": {}, "template": {"metadata": {"annotations": {"a": "b"}},
                        "spec": {"containers": [{"name": "app", "image": "x"}]}}}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "labelled", "labels": {"app": "web", "tier": "front"},
                            "annotations": {"gate": "true"}},
               "spec": {"containers": [{"name": "app", "image": "x"}]}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "opted-out", "labels": {"app": "db"},
                            "annotations": {"gate": " false ", "preset": "yes"}},
               "spec": {"containers": [{"name": "app", "image": "x"}]}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "upper-false", "annotations": {"gate": "FALSE", "preset": "false"}},
               "spec": {"containers": [{"name": "app", "image": "x"}]}}),
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cron-labelled",
               "labels": {"app": "web", OPT_OUT_LABEL: "1"}},
               "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                   "containers": [{"name": "c", "image": "x"}]}}}}}}),
    ]
}

fn all_objects() -> Vec<Value> {
    corpus::corpus()
        .into_iter()
        .map(|c| c.object)
        .chain(unit_objects())
        .collect()
}

#[test]
fn the_representative_preset_is_what_it_says() {
    let preset = corpus::representative_preset();
    assert_eq!(preset.inject.containers.len(), 1);
    assert_eq!(preset.inject.init_containers.len(), 2);
    assert_eq!(preset.inject.env.len(), 3);
    assert!(preset.selector.labels.is_some());
}

#[tokio::test]
async fn the_program_and_the_webhook_agree_on_the_corpus() {
    let representative = corpus::representative_preset();
    let unselective = unselective();
    let mut patched = 0;
    let mut left_alone = 0;
    for object in all_objects() {
        for namespace in ["preset-a", "team-canary", "default"] {
            for preset in [&representative, &unselective] {
                if agree(preset, None, &object, namespace).await {
                    patched += 1;
                } else {
                    left_alone += 1;
                }
            }
        }
    }
    // Both outcomes are exercised: the label and namespace selectors leave some alone.
    assert!(
        patched > 40 && left_alone > 10,
        "{patched} patched, {left_alone} left alone"
    );
}

#[tokio::test]
async fn partial_presets_agree() {
    let presets = [
        preset(
            json!({"inject": {"labels": {"a": "1", "example.com/b": "2"},
                                 "annotations": {"n~/te": "x"}}}),
        ),
        preset(
            json!({"inject": {"env": [{"name": "A", "value": "1"}, {"name": "OWN", "value": "x"}]}}),
        ),
        preset(
            json!({"inject": {"volumeMounts": [{"name": "v", "mountPath": "/data"}],
                                 "volumes": [{"name": "v", "emptyDir": {}}]}}),
        ),
        preset(
            json!({"inject": {"initContainers": [{"name": "native", "image": "x", "restartPolicy": "Always"}]}}),
        ),
        // Repeated names: the webhook keeps the first of each, and so must the program.
        preset(json!({"inject": {
            "containers": [{"name": "s", "image": "first"}, {"name": "s", "image": "second"}],
            "env": [{"name": "E", "value": "first"}, {"name": "E", "value": "second"}],
            "volumeMounts": [{"name": "v", "mountPath": "/m"}, {"name": "w", "mountPath": "/m"}],
            "volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "hostPath": {"path": "/"}}]
        }})),
    ];
    for preset in &presets {
        for object in all_objects() {
            agree(preset, None, &object, "default").await;
        }
    }
}

#[tokio::test]
async fn selection_by_kind_label_annotation_namespace_and_gate_agrees() {
    let inject = json!({"labels": {"injected": "yes"}, "env": [{"name": "E", "value": "1"}]});
    let presets = [
        preset(
            json!({"selector": {"kinds": ["deployment", "CronJob", "Service"]}, "inject": inject}),
        ),
        preset(json!({"selector": {"labels": {"matchLabels": {"app": "web"}}}, "inject": inject})),
        preset(json!({"selector": {"labels": {"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["web", "db"]},
            {"key": "tier", "operator": "NotIn", "values": ["back"]},
            {"key": OPT_OUT_LABEL, "operator": "DoesNotExist"}
        ]}}, "inject": inject})),
        preset(json!({"selector": {"labels": {"matchExpressions": [
            {"key": "tier", "operator": "Exists"}]}}, "inject": inject})),
        preset(json!({"selector": {"annotation": "preset"}, "inject": inject})),
        preset(
            json!({"selector": {"namespaces": ["team-*", "*-prod", "default"]}, "inject": inject}),
        ),
    ];
    let gates = [
        None,
        Some(AnnotationGate {
            name: "gate".into(),
            required: true,
        }),
        Some(AnnotationGate {
            name: " gate ".into(),
            required: false,
        }),
    ];
    let mut outcomes = BTreeMap::new();
    for preset in &presets {
        for gate in &gates {
            for object in all_objects() {
                for namespace in ["team-a", "x-prod", "default", "other"] {
                    let patched = agree(preset, gate.as_ref(), &object, namespace).await;
                    *outcomes.entry(patched).or_insert(0) += 1;
                }
            }
        }
    }
    assert!(
        outcomes[&true] > 100 && outcomes[&false] > 100,
        "{outcomes:?}"
    );
}

/// What the preset injects is the preset's: a container of its name that lacks what it sets is
/// replaced whole, one that has it all is left alone, in both engines (the corpus test above
/// holds them equal; this says which outcome they agree on).
#[test]
fn a_namesake_is_replaced_unless_it_has_everything_the_preset_sets() {
    let program = program(&corpus::representative_preset(), None).unwrap();
    let pointers = |name: &str| {
        let object = all_objects()
            .into_iter()
            .find(|o| o["metadata"]["name"] == name)
            .unwrap();
        let Evaluation::Patched(operations) =
            program.evaluate(&facts(&object, "preset-a"), &object)
        else {
            panic!("{name}: not patched");
        };
        operations
            .iter()
            .map(|o| match o {
                json_patch::PatchOperation::Replace(r) => format!("replace {}", r.path),
                json_patch::PatchOperation::Add(a) => format!("add {}", a.path),
                other => format!("{other:?}"),
            })
            .collect::<Vec<_>>()
    };
    let namesake = pointers("pod-with-init-containers-and-a-namesake");
    for replaced in [
        "replace /spec/containers/1",
        "replace /spec/initContainers/2",
    ] {
        assert!(namesake.contains(&replaced.to_owned()), "{namesake:?}");
    }
    let kept = pointers("pod-with-the-injected-container-and-more");
    assert!(
        !kept
            .iter()
            .any(|o| o.starts_with("replace") || o == "add /spec/containers/-"),
        "{kept:?}"
    );
}

/// An init container of the object's named like an injected container skips nothing: the
/// container is added all the same (and the API server then refuses the Pod for the duplicate
/// name), by both engines.
#[tokio::test]
async fn a_namesake_in_the_other_list_skips_nothing() {
    let preset = corpus::representative_preset();
    let object = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cross"},
        "spec": {
            "initContainers": [{"name": "preset-proxy", "image": "registry.example/own:1"}],
            "containers": [{"name": "app", "image": "registry.example/app:1.0"}]
        }
    });
    assert!(agree(&preset, None, &object, "preset-a").await);
    let program = program(&preset, None).unwrap();
    let after = program.apply(&facts(&object, "preset-a"), &object).unwrap();
    let names: Vec<&str> = after["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["app", "preset-proxy"]);
}

#[test]
fn needs_injection_alone_is_whether_the_program_would_patch() {
    // The unselective preset's only other condition is its kinds, which every object passes.
    let program = program(&unselective(), None).unwrap();
    for object in all_objects() {
        let request = facts(&object, "default");
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let patched = matches!(program.evaluate(&request, &object), Evaluation::Patched(_));
        assert_eq!(
            program.needs_injection(&request, &object),
            patched,
            "{name}"
        );
        let after = program.apply(&request, &object).unwrap();
        assert!(
            !program.needs_injection(&facts(&after, "default"), &after),
            "{name}: still needs injection once injected"
        );
    }
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}});
    assert!(!program.needs_injection(&facts(&service, "default"), &service));
}

/// Reads back a CEL string literal as [`render::string`] writes them.
fn unescape(literal: &str) -> String {
    let inner = &literal[1..literal.len() - 1];
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = chars.next().unwrap();
        let hex = |n: usize, chars: &mut std::str::Chars<'_>| {
            let digits: String = chars.take(n).collect();
            char::from_u32(u32::from_str_radix(&digits, 16).unwrap()).unwrap()
        };
        out.push(match escaped {
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => hex(4, &mut chars),
            'U' => hex(8, &mut chars),
            other => other,
        });
    }
    out
}

#[test]
fn every_string_is_escaped_for_cel() {
    let tricky = [
        "",
        "plain",
        "it's",
        "\"double\"",
        "back\\slash",
        "\\'",
        "two\nlines\r\n",
        "tab\there",
        "nul\u{0}bell\u{7}del\u{7f}c1\u{85}",
        "h\u{e9}llo \u{2713} \u{1F600} \u{2028}",
        "'); object.x || ('",
    ];
    for s in tricky {
        let literal = render::string(s);
        assert!(
            literal.starts_with('\'') && literal.ends_with('\''),
            "{literal}"
        );
        assert!(
            literal.chars().all(|c| (' '..='~').contains(&c)),
            "{literal}: only printable ASCII"
        );
        let inner = &literal[1..literal.len() - 1];
        // No quote ends the literal early: every quote is escaped.
        let mut escaped = false;
        for c in inner.chars() {
            assert!(escaped || c != '\'', "{literal}: an unescaped quote");
            escaped = !escaped && c == '\\';
        }
        assert_eq!(unescape(&literal), s);
        assert_eq!(crate::cel::check(&literal, &[]), Ok(()), "{literal}");
    }
}

#[test]
fn json_values_become_cel_literals() {
    assert_eq!(render::literal(&json!(null)), "null");
    assert_eq!(render::literal(&json!(80)), "80");
    assert_eq!(render::literal(&json!(-1)), "-1");
    assert_eq!(render::literal(&json!(1.5)), "1.5");
    assert_eq!(
        render::literal(&json!(18_446_744_073_709_551_615_u64)),
        "18446744073709551615u"
    );
    assert_eq!(
        render::literal(&json!({"name": "a", "ports": [{"containerPort": 80}], "tty": true})),
        "{'name': dyn('a'), 'ports': dyn([dyn({'containerPort': dyn(80)})]), 'tty': dyn(true)}"
    );
}

/// The variables a MutatingAdmissionPolicy's expressions may use, plus the names of the
/// `JSONPatch` type and its fields (the syntax check reads an object's fields as names). Written
/// out here, not taken from `cel::VARIABLES`, so a wrong entry there does not pass unseen.
const POLICY_NAMES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "authorizer",
    "variables",
    "JSONPatch",
    "op",
    "path",
    "value",
];

fn initializer(spec: Value) -> Validated {
    let spec: InitializerSpec = serde_json::from_value(spec).unwrap();
    validate(&spec, "initializer-system", "preset-demo").unwrap()
}

fn representative_initializer() -> Validated {
    initializer(json!({
        "preset": corpus::representative_preset(),
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
             "operations": ["CREATE", "DELETE"]},
            {"apiGroups": ["apps", "batch"], "apiVersions": ["v1"], "resources": ["*"]},
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/exec"], "operations": ["CONNECT"]}
        ],
        "namespaces": {"exclude": ["legacy"]},
        "objectSelector": {"matchLabels": {"team": "a"}},
        "annotation": {"name": "preset.example.com/skip-me", "required": false},
        "failurePolicy": "Ignore",
        "reinvocationPolicy": "IfNeeded"
    }))
}

#[test]
fn every_expression_parses_and_stays_shallow() {
    let compiled = compile(&representative_initializer()).unwrap();
    let spec = compiled.policy.spec.unwrap();
    let expressions = spec
        .match_conditions
        .unwrap()
        .into_iter()
        .map(|c| c.expression)
        .chain(
            spec.mutations
                .unwrap()
                .into_iter()
                .map(|m| m.json_patch.unwrap().expression.unwrap()),
        );
    for expression in expressions {
        assert_eq!(
            crate::cel::check(&expression, POLICY_NAMES),
            Ok(()),
            "{expression}"
        );
        assert!(!expression.contains('\n'), "{expression}");
        let mut depth: i32 = 0;
        let mut deepest = 0;
        for c in expression.chars() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
            deepest = deepest.max(depth);
        }
        // Well below cel-go's parser recursion limit (250) and our checker's (100).
        assert!(deepest < 40, "nesting {deepest}: {expression}");
        assert!(expression.chars().count() < render::MAX_EXPRESSION_CODE_POINTS);
    }
}

/// The variables a webhook's `matchConditions` may use.
const WEBHOOK_NAMES: &[&str] = &["object", "oldObject", "request", "authorizer"];

#[test]
fn the_preset_webhook_is_called_only_for_what_the_preset_selects() {
    let v = representative_initializer();
    let policy = compile(&v).unwrap().policy.spec.unwrap();
    let policy_conditions = policy.match_conditions.unwrap();
    let webhook = crate::build::webhook(&v, "");
    let conditions = webhook.webhooks.unwrap()[0]
        .match_conditions
        .clone()
        .unwrap();
    assert_eq!(conditions[0].name, crate::build::HAS_OBJECT);
    assert_eq!(conditions[0].expression, "object != null");
    let (needs, selection) = policy_conditions.split_last().unwrap();
    assert_eq!(needs.name, compile::NEEDS_INJECTION);
    assert_eq!(&conditions[1..], selection);
    let names: Vec<&str> = conditions.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            crate::build::HAS_OBJECT,
            compile::ANNOTATION_GATE,
            "preset-kinds",
            "preset-labels",
            "preset-namespaces"
        ]
    );
    for condition in &conditions {
        assert_eq!(
            crate::cel::check(&condition.expression, WEBHOOK_NAMES),
            Ok(()),
            "{}",
            condition.expression
        );
    }
    // A preset whose selection does not compile (no pod kind) keeps the gate alone.
    let mut v = v;
    v.spec.preset.as_mut().unwrap().selector.kinds = vec!["Service".into()];
    let gate = crate::build::gate_condition(v.spec.annotation.as_ref().unwrap());
    assert_eq!(
        crate::build::webhook(&v, "").webhooks.unwrap()[0].match_conditions,
        Some(vec![gate])
    );
}

#[test]
fn the_policy_has_the_webhooks_scope() {
    let v = representative_initializer();
    let compiled = compile(&v).unwrap();
    let webhook = crate::build::webhook(&v, "");
    let hook = &webhook.webhooks.as_ref().unwrap()[0];
    let policy = compiled.policy;
    assert_eq!(
        policy.metadata.name.as_deref(),
        Some("initializer-preset-demo-preset")
    );
    assert_eq!(policy.metadata.labels, Some(crate::build::labels(&v)));
    let spec = policy.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(spec.reinvocation_policy.as_deref(), Some("IfNeeded"));
    let constraints = spec.match_constraints.unwrap();
    assert_eq!(constraints.match_policy.as_deref(), Some("Equivalent"));
    assert_eq!(constraints.namespace_selector, hook.namespace_selector);
    let excluded = &constraints
        .namespace_selector
        .as_ref()
        .unwrap()
        .match_expressions
        .as_ref()
        .unwrap()[0];
    for ns in [
        "kube-system",
        "kube-node-lease",
        "initializer-system",
        "legacy",
    ] {
        assert!(
            excluded.values.as_ref().unwrap().iter().any(|v| v == ns),
            "{ns}"
        );
    }
    assert_eq!(constraints.object_selector, hook.object_selector);
    let rules = constraints.resource_rules.unwrap();
    // DELETE and CONNECT cannot be mutated by a policy: dropped, and a rule left with none goes.
    assert_eq!(rules.len(), 2);
    assert_eq!(
        rules[0].operations.as_deref(),
        Some(&["CREATE".to_owned()][..])
    );
    assert_eq!(
        rules[1].operations.as_deref(),
        Some(&["CREATE".to_owned()][..])
    );
    assert_eq!(
        rules[1].api_groups.as_deref(),
        Some(&["apps".to_owned(), "batch".to_owned()][..])
    );
    assert_eq!(rules[0].scope.as_deref(), Some("Namespaced"));
    let names: Vec<String> = spec
        .match_conditions
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(
        names,
        [
            "initializer-annotation-gate",
            "preset-kinds",
            "preset-labels",
            "preset-namespaces",
            "needs-injection"
        ]
    );
    let mutations = spec.mutations.unwrap();
    assert_eq!(mutations.len(), 7, "one per kind");
    assert!(
        mutations
            .iter()
            .all(|m| m.patch_type == "JSONPatch" && m.apply_configuration.is_none())
    );
}

#[test]
fn the_binding_puts_the_policy_in_force_everywhere_or_in_a_canary() {
    let v = representative_initializer();
    let everywhere = binding(&v, &BindingScope::Everywhere);
    let spec = everywhere.spec.unwrap();
    assert_eq!(
        spec.policy_name.as_deref(),
        Some("initializer-preset-demo-preset")
    );
    assert_eq!(spec.match_resources, None);
    let canary = binding(&v, &BindingScope::Namespaces(vec!["canary".into()]));
    let selector = canary
        .spec
        .unwrap()
        .match_resources
        .unwrap()
        .namespace_selector
        .unwrap();
    let requirement = &selector.match_expressions.unwrap()[0];
    assert_eq!(requirement.key, "kubernetes.io/metadata.name");
    assert_eq!(requirement.operator, "In");
    assert_eq!(
        requirement.values.as_deref(),
        Some(&["canary".to_owned()][..])
    );
}

#[test]
fn policy_and_binding_are_written_with_their_api_version_and_kind() {
    let v = representative_initializer();
    let policy = serde_json::to_value(compile(&v).unwrap().policy).unwrap();
    assert_eq!(policy["apiVersion"], "admissionregistration.k8s.io/v1");
    assert_eq!(policy["kind"], "MutatingAdmissionPolicy");
    assert_eq!(policy["spec"]["mutations"][0]["patchType"], "JSONPatch");
    assert!(policy["spec"]["mutations"][0]["jsonPatch"]["expression"].is_string());
    let binding = serde_json::to_value(binding(&v, &BindingScope::Everywhere)).unwrap();
    assert_eq!(binding["kind"], "MutatingAdmissionPolicyBinding");
    assert_eq!(
        binding["spec"]["policyName"],
        "initializer-preset-demo-preset"
    );
    let back: api::MutatingAdmissionPolicy = serde_json::from_value(policy.clone()).unwrap();
    assert_eq!(serde_json::to_value(back).unwrap(), policy);
}

#[test]
fn a_mutation_for_each_pod_kind_the_rules_reach() {
    let kinds_with = |rules: Value| -> Vec<String> {
        let v = initializer(json!({"preset": {"inject": {"labels": {"a": "b"}}}, "rules": rules}));
        let mutations = compile(&v).unwrap().policy.spec.unwrap().mutations.unwrap();
        POD_KINDS
            .iter()
            .filter(|k| {
                let test = format!("request.kind.kind == '{}'", k.kind);
                mutations.iter().any(|m| {
                    m.json_patch
                        .as_ref()
                        .unwrap()
                        .expression
                        .as_ref()
                        .unwrap()
                        .contains(&test)
                })
            })
            .map(|k| k.kind.to_owned())
            .collect()
    };
    let rule = |groups: &[&str], resources: &[&str]| json!([{"apiGroups": groups, "apiVersions": ["v1"], "resources": resources}]);
    let all: Vec<String> = POD_KINDS.iter().map(|k| k.kind.to_owned()).collect();
    assert_eq!(kinds_with(rule(&[""], &["pods"])), ["Pod"]);
    assert_eq!(
        kinds_with(rule(&[""], &["pods/ephemeralcontainers"])),
        ["Pod"]
    );
    assert_eq!(
        kinds_with(rule(&["apps"], &["deployments"])),
        ["Deployment"]
    );
    assert_eq!(kinds_with(rule(&["batch"], &["*"])), ["Job", "CronJob"]);
    let every = json!([
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
        {"apiGroups": ["apps", "batch"], "apiVersions": ["*"], "resources": ["*"]}
    ]);
    assert_eq!(kinds_with(every), all);
    // A group that serves none of them: the resource alone does not reach a kind.
    assert_eq!(
        kinds_with(rule(&["example.com", ""], &["deployments", "pods"])),
        ["Pod"]
    );
    // Rules that reach no pod kind keep every mutation, each doing nothing, as the webhook would.
    assert_eq!(kinds_with(rule(&[""], &["configmaps"])), all);
}

#[test]
fn what_cannot_be_compiled_names_its_field() {
    let base = json!({
        "preset": {"inject": {"labels": {"a": "b"}}},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]
    });
    let with = |patch: Value| {
        let mut spec = base.clone();
        json_patch::merge(&mut spec, &patch);
        spec
    };
    let cases = [
        (json!({"preset": null, "image": "x"}), "spec.preset"),
        (json!({"image": "registry.example/custom:1"}), "spec.image"),
        (
            json!({"rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                           "operations": ["DELETE"]}]}),
            "spec.rules",
        ),
        (
            json!({"preset": {"selector": {"kinds": ["Service"]}}}),
            "spec.preset.selector.kinds",
        ),
        (
            json!({"preset": {"inject": {"labels": null}}}),
            "spec.preset.inject",
        ),
        (
            json!({"preset": {"inject": {"annotations": {"initializer.dev/initialized-by": "x"}}}}),
            "spec.preset.inject.annotations",
        ),
        (
            json!({"preset": {"inject": {"containers": [{"name": "a"}, {"name": ""}]}}}),
            "spec.preset.inject.containers[1].name",
        ),
        (
            json!({"preset": {"inject": {"volumeMounts": [{"name": "a", "mountPath": ""}]}}}),
            "spec.preset.inject.volumeMounts[0].mountPath",
        ),
        (
            json!({"preset": {"inject": {"containers": [{"name": "a",
                "resources": {"limits": {"namespace": "1"}}}]}}}),
            "spec.preset.inject.containers[0].resources.limits.namespace",
        ),
        (
            json!({"preset": {"selector": {"labels": {"matchExpressions": [
            {"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Gt", "values": ["1"]}]}}}}),
            "spec.preset.selector.labels.matchExpressions[1].operator",
        ),
        (
            json!({"preset": {"selector": {"labels": {"matchExpressions": [
            {"key": "a", "operator": "In", "values": []}]}}}}),
            "spec.preset.selector.labels.matchExpressions[0].values",
        ),
        (
            json!({"preset": {"inject": {"env": [{"name": "BIG", "value": "x".repeat(60_000)}]}}}),
            "spec.preset.inject",
        ),
    ];
    for (patch, field) in cases {
        let v = initializer(with(patch.clone()));
        let err = compile(&v).unwrap_err();
        assert_eq!(err.field(), field, "{patch}: {err}");
        assert!(err.to_string().starts_with(field), "{err}");
    }
    let legacy = initializer(with(json!({"backend": "InitializerConfiguration"})));
    assert_eq!(compile(&legacy).unwrap_err(), CompileError::LegacyBackend);
}

#[test]
fn every_add_of_the_corpus_applies_as_json_patch() {
    // `Program::apply` fails on an add whose parent is missing, as the API server does: the
    // whole corpus, in every namespace the preset selects, applies cleanly.
    let program = program(&unselective(), None).unwrap();
    for object in all_objects() {
        let request = facts(&object, "default");
        if let Evaluation::Patched(operations) = program.evaluate(&request, &object) {
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &operations).unwrap();
        }
    }
}
