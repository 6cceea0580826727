//! Unit tests of [`crate::validate`].

use super::*;
use initializer_crds::constants::GROUP;
use initializer_crds::{
    AnnotationGate, ConfigMapKey, Initializer, InterceptRule, NamespaceScope, Operation,
    PresetConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

/// The sidecar example from the reference walkthrough, as an Initializer.
pub(crate) const SIDECAR_YAML: &str = r#"
apiVersion: initializer.dev/v1alpha1
kind: Initializer
metadata:
  name: sidecar
spec:
  image: ghcr.io/initializer-dev/sidecar-initializer:0.1.0
  args: ["--annotation", "initializer.kubernetes.io/sidecar"]
  rules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      resources: ["deployments"]
  annotation:
    name: initializer.kubernetes.io/sidecar
    required: true
  config:
    inline: |
      containers:
        - name: sidecar-nginx
          image: nginx:1.25
          ports:
            - containerPort: 80
          volumeMounts:
            - name: shared-data
              mountPath: /usr/share/nginx/html
      volumes:
        - name: shared-data
          emptyDir: {}
"#;

pub(crate) fn sidecar() -> Initializer {
    serde_saphyr::from_str(SIDECAR_YAML).unwrap()
}

fn refused(spec: &InitializerSpec) -> Vec<Refusal> {
    validate(spec, "initializer-system", "sidecar").unwrap_err()
}

fn refused_field(spec: &InitializerSpec, field: &str) -> bool {
    refused(spec).iter().any(|r| r.field.starts_with(field))
}

#[test]
fn workloads_run_in_the_operator_namespace_or_a_labelled_one_only() {
    let labelled = BTreeMap::from([(WORKLOADS_LABEL.to_string(), "true".to_string())]);
    let other = BTreeMap::from([(WORKLOADS_LABEL.to_string(), "yes".to_string())]);
    let none = BTreeMap::new();
    let ops = "initializer-system";
    assert_eq!(
        workload_namespace_refusal(ops, ops, NamespaceFound::Missing),
        None
    );
    assert_eq!(
        workload_namespace_refusal(ops, ops, NamespaceFound::Labelled(&none)),
        None
    );
    assert_eq!(
        workload_namespace_refusal("team", ops, NamespaceFound::Labelled(&labelled)),
        None
    );
    for (found, why) in [
        (NamespaceFound::Labelled(&none), "is not labelled"),
        (NamespaceFound::Labelled(&other), "is not labelled"),
        (NamespaceFound::Missing, "does not exist"),
    ] {
        let refusal = workload_namespace_refusal("team", ops, found).unwrap();
        assert_eq!(refusal.field, "spec.namespace");
        for part in [
            why,
            "kubectl label namespace team initializer.dev/workloads=true",
            "--clusterrole=initializer-operator-workloads",
            "--serviceaccount=initializer-system:initializer-operator",
        ] {
            assert!(
                refusal.message.contains(part),
                "{part}: {}",
                refusal.message
            );
        }
    }
}

#[test]
fn the_token_is_mounted_only_when_the_spec_asks_for_api_access() {
    let mut spec = with_rule(&[""], &["pods"]);
    assert!(!automount_token(&spec));
    spec.api_access = true;
    assert!(automount_token(&spec));
}

#[test]
fn the_ca_lives_in_the_operator_namespace_whatever_the_workloads() {
    let mut spec = with_rule(&[""], &["pods"]);
    spec.image = Some("example/i:1".into());
    spec.namespace = Some("team".into());
    let v = validate(&spec, "initializer-system", "x").unwrap();
    assert_eq!(v.namespace, "team");
    assert_eq!(ca_namespace(&v), "initializer-system");
}

#[test]
fn references_to_what_the_operator_writes_are_refused_and_others_kept() {
    let env: Vec<k8s_openapi::api::core::v1::EnvVar> = serde_json::from_value(serde_json::json!([
        {"name": "CA_KEY", "valueFrom": {"secretKeyRef": {"name": "secret-guard-ca", "key": "ca.key"}}},
        {"name": "SERVING_KEY", "valueFrom": {"secretKeyRef": {"name": "other-tls", "key": "tls.key"}}},
        {"name": "CONFIG", "valueFrom": {"configMapKeyRef": {"name": "other-config", "key": "config.yaml"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "vendor-token", "key": "token"}}},
        {"name": "REGION", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "region"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]))
    .unwrap();
    let mut spec = with_rule(&[""], &["pods"]);
    spec.image = Some("example/i:1".into());
    spec.env = env;
    spec.config = Some(ConfigSource {
        inline: None,
        config_map_ref: Some(ConfigMapKey {
            name: "secret-guard-config".into(),
            key: "config.yaml".into(),
        }),
    });
    let fields: Vec<String> = refused(&spec).into_iter().map(|r| r.field).collect();
    assert_eq!(
        fields,
        [
            "spec.env[0].valueFrom.secretKeyRef.name",
            "spec.env[1].valueFrom.secretKeyRef.name",
            "spec.env[2].valueFrom.configMapKeyRef.name",
            "spec.config.configMapRef.name",
        ]
    );
    spec.env.drain(..3);
    spec.config = Some(ConfigSource {
        inline: None,
        config_map_ref: Some(ConfigMapKey {
            name: "settings".into(),
            key: "config.yaml".into(),
        }),
    });
    assert!(validate(&spec, "initializer-system", "x").is_ok());
}

#[test]
fn the_sidecar_example_is_accepted() {
    let v = validate(&sidecar().spec, "initializer-system", "sidecar").unwrap();
    assert_eq!(v.namespace, "initializer-system");
    assert_eq!(v.names.base, "sidecar");
    assert_eq!(v.names.configuration, "initializer-sidecar");
    assert_eq!(
        v.image.as_deref(),
        Some("ghcr.io/initializer-dev/sidecar-initializer:0.1.0")
    );
    assert!(matches!(&v.config, ConfigPlan::Text(t) if t.contains("sidecar-nginx")));
    assert_eq!(v.spec.replicas, 2);
}

#[test]
fn the_secret_guard_example_and_its_fallback_are_accepted() {
    let example: Initializer = serde_saphyr::from_str(include_str!(
        "../../../examples/secret-guard-initializer.yaml"
    ))
    .unwrap();
    let v = validate(&example.spec, "initializer-system", "secret-guard").unwrap();
    let fallback = v.spec.fallback.as_ref().unwrap();
    assert_eq!(fallback.validations.len(), 1);
    assert_eq!(v.names.fallback, "initializer-secret-guard-fallback");
}

#[test]
fn a_fallback_that_does_not_compile_or_names_protected_resources_is_refused() {
    let mut spec = sidecar().spec;
    spec.fallback = Some(initializer_crds::Fallback {
        validations: vec![
            initializer_crds::FallbackValidation {
                expression: "object.spec.replicas <".into(),
                ..Default::default()
            },
            initializer_crds::FallbackValidation {
                expression: "objekt.spec.replicas < 3".into(),
                message: Some("two\nlines".into()),
                message_expression: Some("'a' +".into()),
                reason: None,
            },
        ],
        rules: vec![InterceptRule {
            api_groups: vec!["admissionregistration.k8s.io".into()],
            api_versions: vec!["v1".into()],
            resources: vec!["validatingadmissionpolicies".into()],
            operations: vec![initializer_crds::Operation::Create],
            scope: None,
        }],
    });
    let refusals = refused(&spec);
    let fields: Vec<&str> = refusals.iter().map(|r| r.field.as_str()).collect();
    assert!(
        fields.contains(&"spec.fallback.validations[0].expression"),
        "{refusals:?}"
    );
    assert!(
        fields.contains(&"spec.fallback.validations[1].expression"),
        "{refusals:?}"
    );
    assert!(fields.contains(&"spec.fallback.validations[1].messageExpression"));
    assert!(fields.contains(&"spec.fallback.validations[1].message"));
    assert!(
        fields.contains(&"spec.fallback.rules[0].resources"),
        "{refusals:?}"
    );
    assert!(describe(&refusals).contains("undeclared reference to \"objekt\""));
}

#[test]
fn the_committed_sidecar_example_is_accepted() {
    let example: Initializer =
        serde_saphyr::from_str(include_str!("../../../examples/sidecar-initializer.yaml")).unwrap();
    let v = validate(&example.spec, "initializer-system", "sidecar").unwrap();
    assert!(matches!(v.config, ConfigPlan::Text(ref t) if t.contains("sidecar-nginx")));
    assert_eq!(v.spec.annotation.unwrap().name, "initializer.dev/sidecar");
}

fn rule(groups: &[&str], resources: &[&str]) -> InterceptRule {
    InterceptRule {
        api_groups: groups.iter().map(|g| g.to_string()).collect(),
        api_versions: vec!["*".into()],
        resources: resources.iter().map(|r| r.to_string()).collect(),
        operations: vec![Operation::Create],
        scope: None,
    }
}

fn with_rule(groups: &[&str], resources: &[&str]) -> InitializerSpec {
    let mut spec = sidecar().spec;
    spec.rules = vec![rule(groups, resources)];
    spec
}

fn accepted(groups: &[&str], resources: &[&str]) -> bool {
    validate(
        &with_rule(groups, resources),
        "initializer-system",
        "sidecar",
    )
    .is_ok()
}

#[test]
fn every_protected_resource_is_refused_in_its_group_and_in_every_group() {
    for protected in initializer_crds::PROTECTED {
        for resource in protected.resources {
            for group in [protected.group, "*"] {
                assert!(
                    !accepted(&[group], &[resource]),
                    "{group:?} {resource} accepted"
                );
            }
        }
    }
}

#[test]
fn a_protected_group_is_refused_whatever_resource_it_names() {
    for protected in initializer_crds::PROTECTED.iter().filter(|p| p.whole) {
        assert!(
            !accepted(&[protected.group], &["anything-new"]),
            "{}",
            protected.group
        );
    }
    assert!(!accepted(&[GROUP], &["initializers/status"]));
}

#[test]
fn wildcard_subresources_of_protected_parents_are_refused() {
    for (groups, resource) in [
        ([""], "serviceaccounts/*"),
        ([""], "*/token"),
        ([""], "*/*"),
        (["*"], "*/*"),
        (["*"], "serviceaccounts/*"),
        (["*"], "*/token"),
        ([""], "nodes/*"),
        ([""], "*/status"),
        (["coordination.k8s.io"], "leases/*"),
        (["*"], "leases/status"),
        // A rule for every subresource of pods reaches the scheduler's bindings.
        ([""], "pods/*"),
        ([""], "namespaces/*"),
        (["*"], "pods/binding"),
    ] {
        let refusals = refused(&with_rule(&groups, &[resource]));
        assert!(
            refusals.iter().any(|r| r.field == "spec.rules[0].resources"
                && r.message.contains("must not intercept")),
            "{groups:?} {resource}: {refusals:?}"
        );
    }
    let refusals = refused(&with_rule(&[""], &["serviceaccounts/*"]));
    assert!(
        describe(&refusals).contains("core/serviceaccounts/token"),
        "{refusals:?}"
    );
}

#[test]
fn protected_cluster_scoped_resources_are_refused() {
    for (group, resource) in [
        ("", "nodes"),
        ("", "nodes/status"),
        ("certificates.k8s.io", "certificatesigningrequests"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("apiregistration.k8s.io", "apiservices"),
        ("flowcontrol.apiserver.k8s.io", "flowschemas"),
        (
            "flowcontrol.apiserver.k8s.io",
            "prioritylevelconfigurations",
        ),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
        ),
        ("admissionregistration.k8s.io", "mutatingadmissionpolicies"),
    ] {
        assert!(!accepted(&[group], &[resource]), "{group}/{resource}");
        assert!(!accepted(&["*"], &[resource]), "*/{resource}");
    }
}

#[test]
fn ordinary_rules_including_wildcards_outside_protected_groups_are_accepted() {
    for (groups, resources) in [
        (vec![""], vec!["serviceaccounts"]),
        (vec![""], vec!["secrets", "configmaps"]),
        (vec![""], vec!["pods/ephemeralcontainers", "pods/exec"]),
        (vec![""], vec!["pods", "pods/status"]),
        (
            vec!["networking.k8s.io", "storage.k8s.io"],
            vec!["ingresses", "storageclasses"],
        ),
        (vec!["apps"], vec!["*"]),
        (vec!["apps"], vec!["*/*"]),
        (vec!["apps", "batch"], vec!["*", "deployments/scale"]),
        (vec!["*"], vec!["pods"]),
        (vec!["*"], vec!["deployments/scale"]),
        (vec!["apps"], vec!["leases", "events", "nodes"]),
    ] {
        assert!(accepted(&groups, &resources), "{groups:?} {resources:?}");
    }
}

#[test]
fn the_fallback_rules_are_checked_against_the_same_table() {
    let mut spec = sidecar().spec;
    spec.fallback = Some(initializer_crds::Fallback {
        validations: vec![initializer_crds::FallbackValidation {
            expression: "true".into(),
            ..Default::default()
        }],
        rules: vec![
            rule(&[""], &["serviceaccounts/*"]),
            rule(&["*", "apps"], &["pods"]),
        ],
    });
    let fields: Vec<String> = refused(&spec).into_iter().map(|r| r.field).collect();
    assert!(fields.contains(&"spec.fallback.rules[0].resources".to_string()));
    assert!(fields.contains(&"spec.fallback.rules[1].apiGroups".to_string()));
}

#[test]
fn rules_the_api_server_would_refuse_are_refused() {
    let cases: Vec<(&str, InterceptRule)> = vec![
        (
            "apiVersions",
            InterceptRule {
                api_versions: vec!["*".into(), "v1".into()],
                ..rule(&["apps"], &["deployments"])
            },
        ),
        (
            "apiVersions",
            InterceptRule {
                api_versions: vec![String::new()],
                ..rule(&["apps"], &["deployments"])
            },
        ),
        ("apiGroups", rule(&["*", "apps"], &["deployments"])),
        (
            "operations",
            InterceptRule {
                operations: vec![Operation::All, Operation::Create],
                ..rule(&["apps"], &["deployments"])
            },
        ),
        ("resources", rule(&["apps"], &["*/*", "deployments/status"])),
        ("resources", rule(&["apps"], &["*", "deployments"])),
        ("resources", rule(&["apps"], &["deployments", "*"])),
        (
            "resources",
            rule(&["apps"], &["deployments/*", "deployments/status"]),
        ),
        (
            "resources",
            rule(&["apps"], &["deployments/status", "*/status"]),
        ),
        (
            "resources",
            rule(&["apps"], &["deployments/scale", "deployments/scale"]),
        ),
        ("resources", rule(&["apps"], &[""])),
    ];
    for (what, bad) in cases {
        let mut spec = sidecar().spec;
        spec.rules = vec![bad.clone()];
        let refusals = refused(&spec);
        assert!(
            refusals
                .iter()
                .any(|r| r.field == format!("spec.rules[0].{what}")),
            "{bad:?}: {refusals:?}"
        );
    }
    for good in [
        rule(&["apps"], &["*", "deployments/status"]),
        rule(&["apps"], &["*/status", "deployments/scale"]),
        rule(&["apps", "batch"], &["deployments", "jobs"]),
        InterceptRule {
            operations: vec![Operation::All],
            ..rule(&["apps"], &["deployments"])
        },
    ] {
        let mut spec = sidecar().spec;
        spec.rules = vec![good.clone()];
        assert!(
            validate(&spec, "initializer-system", "sidecar").is_ok(),
            "{good:?}"
        );
    }
}

/// The CRD's CEL rule and the validator come from one table: on every case, the CEL rule
/// (evaluated by the sandbox's CEL evaluator over the generated CRD schema) refuses exactly
/// when the validator finds a protected resource.
#[test]
fn the_crd_rule_and_the_validator_agree_on_protected_resources() {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(Initializer::crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut groups: Vec<&str> = vec!["*", "apps", "batch", "metrics.k8s.io"];
    let mut resources: Vec<String> = [
        "*",
        "*/*",
        "*/status",
        "*/token",
        "*/scale",
        "pods",
        "pods/*",
        "pods/status",
        "serviceaccounts",
        "serviceaccounts/*",
        "serviceaccounts/token",
        "serviceaccounts/status",
        "deployments",
        "deployments/scale",
        "secrets",
        "anything",
    ]
    .iter()
    .map(|r| r.to_string())
    .collect();
    for protected in initializer_crds::PROTECTED {
        groups.push(protected.group);
        for entry in protected.resources {
            let res = entry.split('/').next().unwrap();
            resources.extend([
                entry.to_string(),
                res.to_string(),
                format!("{res}/*"),
                format!("{res}/status"),
                format!("{res}x"),
            ]);
        }
    }
    resources.sort();
    resources.dedup();
    let mut refused_count = 0;
    let mut cases = 0;
    for group in &groups {
        for resource in &resources {
            let spec = with_rule(&[group], &[resource.as_str()]);
            let by_validator = validate(&spec, "initializer-system", "sidecar")
                .err()
                .is_some_and(|refusals| {
                    refusals
                        .iter()
                        .any(|r| r.message.contains("must not intercept"))
                });
            let mut object = serde_json::to_value(Initializer::new("case", spec)).unwrap();
            let causes = initializer_sandbox::crd::process(Some(schema), &mut object, None);
            let by_cel = causes
                .iter()
                .any(|(_, message)| message.contains("must not intercept"));
            assert!(
                causes.iter().all(|(_, m)| m.contains("must not intercept")),
                "{group:?} {resource}: {causes:?}"
            );
            assert_eq!(
                by_validator, by_cel,
                "{group:?} {resource}: validator {by_validator}, CEL {by_cel}"
            );
            refused_count += usize::from(by_cel);
            cases += 1;
        }
    }
    assert!(
        refused_count > 100 && refused_count < cases,
        "{refused_count}/{cases}"
    );
}

#[test]
fn empty_rules_are_refused() {
    let mut spec = sidecar().spec;
    spec.rules.clear();
    assert!(refused_field(&spec, "spec.rules"));
    let mut spec = sidecar().spec;
    spec.rules = vec![InterceptRule::default()];
    let fields: Vec<String> = refused(&spec).into_iter().map(|r| r.field).collect();
    for what in ["apiGroups", "apiVersions", "resources", "operations"] {
        assert!(
            fields.contains(&format!("spec.rules[0].{what}")),
            "{what}: {fields:?}"
        );
    }
}

#[test]
fn system_and_operator_namespaces_in_include_are_refused() {
    for ns in ["kube-system", "kube-node-lease", "initializer-system"] {
        let mut spec = sidecar().spec;
        spec.namespaces = Some(NamespaceScope {
            include: vec!["team-a".into(), ns.into()],
            ..Default::default()
        });
        let refusals = refused(&spec);
        assert_eq!(refusals.len(), 1, "{ns}: {refusals:?}");
        assert_eq!(refusals[0].field, "spec.namespaces.include[1]");
    }
}

#[test]
fn the_workload_namespace_in_include_is_refused() {
    let mut spec = sidecar().spec;
    spec.namespace = Some("sidecars".into());
    spec.namespaces = Some(NamespaceScope {
        include: vec!["sidecars".into()],
        ..Default::default()
    });
    assert!(refused_field(&spec, "spec.namespaces.include[0]"));
}

#[test]
fn workloads_in_system_namespaces_are_refused_but_the_operator_namespace_is_fine() {
    for ns in SYSTEM_NAMESPACES {
        let mut spec = sidecar().spec;
        spec.namespace = Some(ns.into());
        assert!(refused_field(&spec, "spec.namespace"), "{ns}");
    }
    let mut spec = sidecar().spec;
    spec.namespace = Some("initializer-system".into());
    assert!(validate(&spec, "initializer-system", "sidecar").is_ok());
    spec.namespace = Some("Not_A_Namespace".into());
    assert!(refused_field(&spec, "spec.namespace"));
}

#[test]
fn zero_replicas_are_refused() {
    let mut spec = sidecar().spec;
    spec.replicas = 0;
    assert!(refused_field(&spec, "spec.replicas"));
}

#[test]
fn replicas_beyond_what_the_schema_allows_are_refused() {
    let mut spec = sidecar().spec;
    spec.replicas = initializer_crds::REPLICAS_LIMITS.max;
    assert!(validate(&spec, "initializer-system", "sidecar").is_ok());
    spec.replicas += 1;
    assert!(refused_field(&spec, "spec.replicas"));
}

#[test]
fn out_of_range_timeouts_are_refused() {
    for t in [0, 31, -1] {
        let mut spec = sidecar().spec;
        spec.timeout_seconds = t;
        assert!(refused_field(&spec, "spec.timeoutSeconds"), "{t}");
    }
}

#[test]
fn a_fail_closed_spec_that_would_take_long_to_fail_open_is_refused() {
    let capped = |spec: &InitializerSpec| {
        validate(spec, "initializer-system", "sidecar")
            .err()
            .is_some_and(|refusals| refusals.iter().any(|r| r.field == "spec.health"))
    };
    let mut spec = sidecar().spec;
    spec.failure_policy = FailurePolicy::Fail;
    spec.health = Some(HealthPolicy {
        period_seconds: 10,
        failure_threshold: 3,
        success_threshold: 1,
        latency_budget_millis: 500,
    });
    assert!(capped(&spec), "30.5 s under Fail");
    spec.health = Some(HealthPolicy {
        period_seconds: 10,
        failure_threshold: 2,
        success_threshold: 1,
        latency_budget_millis: 1000,
    });
    assert!(!capped(&spec), "21 s is within the cap");
    // Under Ignore a hung initializer only slows creates by timeoutSeconds: no cap.
    spec.failure_policy = FailurePolicy::Ignore;
    spec.health = Some(HealthPolicy {
        period_seconds: 60,
        failure_threshold: 5,
        success_threshold: 1,
        latency_budget_millis: 500,
    });
    assert!(!capped(&spec));
}

#[test]
fn out_of_range_health_values_are_refused() {
    type Change = fn(&mut HealthPolicy);
    let cases: [(&str, Change); 4] = [
        ("periodSeconds", |h| h.period_seconds = 0),
        ("failureThreshold", |h| h.failure_threshold = 0),
        ("successThreshold", |h| h.success_threshold = 101),
        ("latencyBudgetMillis", |h| h.latency_budget_millis = 5),
    ];
    for (field, change) in cases {
        let mut spec = sidecar().spec;
        let mut health = HealthPolicy::default();
        change(&mut health);
        spec.health = Some(health);
        assert!(
            refused_field(&spec, &format!("spec.health.{field}")),
            "{field}"
        );
    }
}

#[test]
fn a_latency_budget_longer_than_the_timeout_is_refused() {
    let mut spec = sidecar().spec;
    spec.timeout_seconds = 1;
    spec.health = Some(HealthPolicy {
        latency_budget_millis: 1500,
        ..Default::default()
    });
    let refusals = refused(&spec);
    assert_eq!(refusals.len(), 1);
    assert!(refusals[0].message.contains("exceeds the webhook timeout"));
}

#[test]
fn a_spec_without_image_or_preset_is_refused() {
    let mut spec = sidecar().spec;
    spec.image = None;
    spec.config = None;
    assert!(refused_field(&spec, "spec.image"));
    spec.image = Some("   ".into());
    assert!(refused_field(&spec, "spec.image"));
}

#[test]
fn a_preset_alone_runs_the_built_in_initializer_with_the_preset_as_config() {
    let mut spec = sidecar().spec;
    spec.image = None;
    spec.config = None;
    spec.preset = Some(PresetConfig::default());
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    assert_eq!(v.image, None);
    let ConfigPlan::Text(text) = v.config else {
        panic!("preset should be written as text");
    };
    let back: PresetConfig = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(back, PresetConfig::default());
}

#[test]
fn invalid_config_sources_are_refused() {
    let mut spec = sidecar().spec;
    spec.config = Some(ConfigSource::default());
    assert!(refused_field(&spec, "spec.config"));
    spec.config = Some(ConfigSource {
        inline: Some("a: 1".into()),
        config_map_ref: Some(ConfigMapKey {
            name: "x".into(),
            key: "config.yaml".into(),
        }),
    });
    assert!(refused_field(&spec, "spec.config"));
    spec.config = Some(ConfigSource {
        inline: None,
        config_map_ref: Some(ConfigMapKey {
            name: String::new(),
            key: "a/b".into(),
        }),
    });
    assert_eq!(refused(&spec).len(), 2);
    spec.config = Some(ConfigSource::default());
    spec.preset = Some(PresetConfig::default());
    assert!(refused_field(&spec, "spec.config"));
}

#[test]
fn a_config_map_reference_is_planned_as_a_projection() {
    let mut spec = sidecar().spec;
    spec.config = Some(ConfigSource {
        inline: None,
        config_map_ref: Some(ConfigMapKey {
            name: "sidecar-cfg".into(),
            key: "sidecar.yaml".into(),
        }),
    });
    let v = validate(&spec, "initializer-system", "sidecar").unwrap();
    assert_eq!(
        v.config,
        ConfigPlan::ConfigMapRef {
            name: "sidecar-cfg".into(),
            key: "sidecar.yaml".into()
        }
    );
}

#[test]
fn malformed_selectors_and_empty_annotations_are_refused() {
    let mut spec = sidecar().spec;
    spec.object_selector = Some(LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "team".into(),
            operator: "Like".into(),
            values: None,
        }]),
        match_labels: None,
    });
    spec.annotation = Some(AnnotationGate {
        name: " ".into(),
        required: false,
    });
    let fields: Vec<String> = refused(&spec).into_iter().map(|r| r.field).collect();
    assert!(fields.contains(&"spec.objectSelector.matchExpressions[0]".to_string()));
    assert!(fields.contains(&"spec.annotation.name".to_string()));
}

#[test]
fn every_refusal_is_reported_at_once() {
    let mut spec = sidecar().spec;
    spec.replicas = 0;
    spec.timeout_seconds = 31;
    spec.rules[0].api_groups = vec!["coordination.k8s.io".into()];
    spec.rules[0].resources = vec!["leases".into()];
    spec.rules[0].operations = vec![Operation::Create];
    assert_eq!(refused(&spec).len(), 3);
    assert!(describe(&refused(&spec)).contains("spec.replicas"));
}

fn legacy_sidecar() -> InitializerSpec {
    let mut spec = sidecar().spec;
    spec.backend = initializer_crds::Backend::InitializerConfiguration;
    spec
}

#[test]
fn the_legacy_sidecar_is_accepted_with_its_pending_name() {
    let validated = validate(&legacy_sidecar(), "initializer-system", "sidecar").unwrap();
    assert_eq!(
        validated.pending_name.as_deref(),
        Some("sidecar.initializer-system.initializer-operator.io")
    );
    let webhook = validate(&sidecar().spec, "initializer-system", "sidecar").unwrap();
    assert_eq!(webhook.pending_name, None);
}

#[test]
fn the_legacy_backend_refuses_what_it_cannot_honour_all_at_once() {
    let mut spec = legacy_sidecar();
    spec.rules[0].operations = vec![Operation::Create, Operation::Update];
    spec.rules.push(rule(&[""], &["pods/status", "*"]));
    spec.rules.push(InterceptRule {
        operations: vec![Operation::All],
        ..rule(&[""], &["configmaps"])
    });
    spec.reinvocation_policy = initializer_crds::ReinvocationPolicy::IfNeeded;
    spec.fallback = Some(
        serde_json::from_value(serde_json::json!({
            "validations": [{"expression": "true"}]
        }))
        .unwrap(),
    );
    let refusals = refused(&spec);
    let fields: Vec<&str> = refusals.iter().map(|r| r.field.as_str()).collect();
    for field in [
        "spec.rules[0].operations",
        "spec.rules[1].resources",
        "spec.rules[2].operations",
        "spec.fallback",
        "spec.reinvocationPolicy",
    ] {
        assert!(fields.contains(&field), "{field} not in {fields:?}");
    }
    assert_eq!(
        refusals
            .iter()
            .filter(|r| r.field == "spec.rules[1].resources"
                && r.message.starts_with("backend InitializerConfiguration"))
            .count(),
        2,
        "both the subresource and the wildcard: {refusals:?}"
    );
    let ops = refusals
        .iter()
        .find(|r| r.field == "spec.rules[0].operations")
        .unwrap();
    assert!(ops.message.contains("creates only"), "{}", ops.message);
    // The same spec with the webhook backend has no such refusal.
    spec.backend = initializer_crds::Backend::Webhook;
    let webhook = validate(&spec, "initializer-system", "sidecar")
        .err()
        .unwrap_or_default();
    assert!(
        webhook
            .iter()
            .all(|r| r.field != "spec.reinvocationPolicy" && r.field != "spec.rules[0].operations"),
        "{webhook:?}"
    );
}

#[test]
fn a_pending_name_the_api_server_would_refuse_is_refused_with_its_message() {
    let long = "a".repeat(230);
    let refusals = validate(&legacy_sidecar(), "initializer-system", &long).unwrap_err();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0].field, "metadata.name");
    assert!(
        refusals[0]
            .message
            .ends_with("must be no more than 253 characters"),
        "{}",
        refusals[0].message
    );
    // The longest name that fits is accepted.
    let fits = "a".repeat(253 - ".initializer-system.initializer-operator.io".len());
    assert!(validate(&legacy_sidecar(), "initializer-system", &fits).is_ok());
    let upper = validate(&legacy_sidecar(), "initializer-system", "Sidecar").unwrap_err();
    assert!(upper[0].message.contains("lowercase RFC 1123 subdomain"));
}

#[test]
fn fully_qualified_names_are_checked_as_the_era_checked_them() {
    use super::legacy::fully_qualified_refusal;
    assert_eq!(
        fully_qualified_refusal("sidecar.initializer.kubernetes.io"),
        None
    );
    assert_eq!(
        fully_qualified_refusal("sidecar.example").as_deref(),
        Some("should be a domain with at least three segments separated by dots")
    );
    assert!(fully_qualified_refusal("a..b.c").is_some());
    assert!(fully_qualified_refusal("-a.b.c").is_some());
    assert!(fully_qualified_refusal("a_b.c.d").is_some());
    assert_eq!(
        fully_qualified_refusal("").as_deref(),
        Some("Required value")
    );
}

#[test]
fn the_legacy_backend_needs_the_v1alpha1_api() {
    assert_eq!(super::legacy::api_refusal(true), None);
    let refusal = super::legacy::api_refusal(false).unwrap();
    assert_eq!(refusal.field, "spec.backend");
    assert!(
        refusal
            .message
            .contains("does not serve admissionregistration.k8s.io/v1alpha1")
    );
}

#[test]
fn rules_without_a_canary_resource_are_refused_for_the_legacy_backend() {
    assert_eq!(super::legacy::canary_refusal(true), None);
    let refusal = super::legacy::canary_refusal(false).unwrap();
    assert_eq!(refusal.field, "spec.rules");
    assert!(refusal.message.contains("canary"));
}
