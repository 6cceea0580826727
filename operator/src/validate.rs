//! Pure validation of an Initializer: what the schema cannot say (or what an older API server
//! did not enforce) is refused here, before anything is deployed or registered.
//!
//! [`validate`] turns a spec into a [`Validated`] plan (workload namespace, derived object names,
//! the configuration to mount) or the complete list of [`Refusal`]s, never just the first.

use std::fmt;

use std::collections::BTreeMap;

use initializer_crds::constants::{SYSTEM_NAMESPACES, WORKLOADS_LABEL, WORKLOADS_LABEL_VALUE};
use initializer_crds::{
    ConfigSource, FailurePolicy, HealthPolicy, InitializerSpec, InterceptRule, Operation,
    PROTECTED_SUMMARY, protected_reached,
};

use crate::cel;
use crate::naming::{Names, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// One reason a spec is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The offending field, as a JSON path below the object (`spec.rules[0].resources`).
    pub field: String,
    /// Why, for humans.
    pub message: String,
}

impl Refusal {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Joins refusals into one message for a condition or an Event.
pub fn describe(refusals: &[Refusal]) -> String {
    refusals
        .iter()
        .map(Refusal::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where the initializer's `config.yaml` comes from, once validated.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigPlan {
    /// No configuration: an empty `config.yaml`.
    Empty,
    /// The operator writes this text as `config.yaml`.
    Text(String),
    /// The user's ConfigMap, key projected to `config.yaml`.
    ConfigMapRef {
        /// Name of the ConfigMap (in the workload namespace).
        name: String,
        /// Key inside it.
        key: String,
    },
}

/// A spec that passed validation, with everything derived from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Validated {
    /// The spec as given.
    pub spec: InitializerSpec,
    /// Derived names.
    pub names: Names,
    /// Namespace the workload runs in.
    pub namespace: String,
    /// The operator's own namespace (always excluded from interception).
    pub operator_namespace: String,
    /// The health policy in force.
    pub health: HealthPolicy,
    /// The configuration to mount.
    pub config: ConfigPlan,
    /// The user's image, or `None` for the built-in preset initializer.
    pub image: Option<String>,
}

/// Validates a spec for the Initializer `name`, with the operator running in
/// `operator_namespace`. Returns every refusal, not just the first.
pub fn validate(
    spec: &InitializerSpec,
    operator_namespace: &str,
    name: &str,
) -> Result<Validated, Vec<Refusal>> {
    let mut refusals = Vec::new();
    if name.is_empty() {
        refusals.push(Refusal::new("metadata.name", "a name is required"));
    }
    let namespace = spec
        .namespace
        .clone()
        .unwrap_or_else(|| operator_namespace.to_string());
    check_namespace(spec, &namespace, &mut refusals);
    check_rules(spec, &mut refusals);
    check_fallback(spec, &mut refusals);
    check_scope(spec, operator_namespace, &namespace, &mut refusals);
    check_numbers(spec, &mut refusals);
    let image = check_image(spec, &mut refusals);
    let config = check_config(spec, &mut refusals);
    if let Some(selector) = &spec.object_selector {
        check_selector(selector, "spec.objectSelector", &mut refusals);
    }
    if let Some(gate) = &spec.annotation
        && gate.name.trim().is_empty()
    {
        refusals.push(Refusal::new(
            "spec.annotation.name",
            "the annotation name must not be empty",
        ));
    }
    match (refusals.is_empty(), config) {
        (true, Some(config)) => Ok(Validated {
            spec: spec.clone(),
            names: names(name),
            namespace,
            operator_namespace: operator_namespace.to_string(),
            health: spec.health_policy(),
            config,
            image,
        }),
        _ => Err(refusals),
    }
}

pub use initializer_packaging::rbac::WORKLOADS_CLUSTER_ROLE;

/// What the cluster says about a workload namespace other than the operator's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceFound<'a> {
    /// The namespace exists with these labels.
    Labelled(&'a BTreeMap<String, String>),
    /// No such namespace (it cannot carry the label).
    Missing,
}

/// Decides whether an initializer's workload may run in `namespace`: always in the operator's
/// own namespace; elsewhere only in a namespace an administrator labelled
/// [`WORKLOADS_LABEL`]`: "true"`, since whoever may create pods there could join the
/// initializer's Service and receive the cluster's admission traffic. The refusal says how to
/// allow it.
pub fn workload_namespace_refusal(
    namespace: &str,
    operator_namespace: &str,
    found: NamespaceFound<'_>,
) -> Option<Refusal> {
    if namespace == operator_namespace {
        return None;
    }
    let why = match found {
        NamespaceFound::Labelled(labels)
            if labels.get(WORKLOADS_LABEL).map(String::as_str) == Some(WORKLOADS_LABEL_VALUE) =>
        {
            return None;
        }
        NamespaceFound::Labelled(_) => format!("namespace {namespace} is not labelled"),
        NamespaceFound::Missing => format!("namespace {namespace} does not exist"),
    };
    Some(Refusal::new(
        "spec.namespace",
        format!(
            "{why} {WORKLOADS_LABEL}={WORKLOADS_LABEL_VALUE}: workloads run only in the operator's namespace \
             ({operator_namespace}) or in a namespace an administrator allowed with \
             `kubectl label namespace {namespace} {WORKLOADS_LABEL}={WORKLOADS_LABEL_VALUE}` and \
             `kubectl -n {namespace} create rolebinding initializer-operator-workloads \
             --clusterrole={WORKLOADS_CLUSTER_ROLE} \
             --serviceaccount={operator_namespace}:{account}`",
            account = initializer_packaging::manifest::OPERATOR_NAME,
        ),
    ))
}

/// Whether the initializer's pods get an API token mounted (`spec.apiAccess`); by default
/// they run with none.
pub fn automount_token(spec: &InitializerSpec) -> bool {
    spec.api_access
}

/// The namespace that holds the CA Secret (and its private key): always the operator's, so no
/// one who may only create pods in a workload namespace can mount it.
pub fn ca_namespace(v: &Validated) -> &str {
    &v.operator_namespace
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn check_namespace(spec: &InitializerSpec, namespace: &str, refusals: &mut Vec<Refusal>) {
    if spec.namespace.is_some() && !is_dns_label(namespace) {
        refusals.push(Refusal::new(
            "spec.namespace",
            format!("{namespace:?} is not a valid namespace name"),
        ));
    }
    if SYSTEM_NAMESPACES.contains(&namespace) {
        refusals.push(Refusal::new(
            "spec.namespace",
            format!("the initializer's workload must not run in the system namespace {namespace}"),
        ));
    }
}

fn check_rules(spec: &InitializerSpec, refusals: &mut Vec<Refusal>) {
    if spec.rules.is_empty() {
        refusals.push(Refusal::new(
            "spec.rules",
            "at least one rule is required: an initializer must intercept something",
        ));
    }
    check_rule_list(&spec.rules, "spec.rules", refusals);
}

/// The fallback: its rules are protected like `spec.rules`, and every expression compiles.
fn check_fallback(spec: &InitializerSpec, refusals: &mut Vec<Refusal>) {
    let Some(fallback) = &spec.fallback else {
        return;
    };
    if fallback.validations.is_empty() {
        refusals.push(Refusal::new(
            "spec.fallback.validations",
            "at least one validation is required",
        ));
    }
    check_rule_list(&fallback.rules, "spec.fallback.rules", refusals);
    for (i, validation) in fallback.validations.iter().enumerate() {
        let field = format!("spec.fallback.validations[{i}]");
        if let Err(e) = cel::check(&validation.expression, cel::VARIABLES) {
            refusals.push(Refusal::new(
                format!("{field}.expression"),
                format!("does not compile: {e}"),
            ));
        }
        if let Some(expression) = &validation.message_expression
            && let Err(e) = cel::check(expression, cel::VARIABLES)
        {
            refusals.push(Refusal::new(
                format!("{field}.messageExpression"),
                format!("does not compile: {e}"),
            ));
        }
        if validation
            .message
            .as_ref()
            .is_some_and(|m| m.contains(['\n', '\r']))
        {
            refusals.push(Refusal::new(
                format!("{field}.message"),
                "must not contain line breaks",
            ));
        }
    }
}

/// Refuses rules that reach a protected resource ([`initializer_crds::PROTECTED`], the table the
/// CRD's CEL rule is generated from too), and rules the API server would refuse in a webhook
/// configuration or a ValidatingAdmissionPolicy (admissionregistration validation: `*` alone in
/// apiGroups, apiVersions and operations; no empty entries; the resource wildcard forms), so
/// that registration never fails with a 422 the status would hide.
fn check_rule_list(rules: &[InterceptRule], prefix: &str, refusals: &mut Vec<Refusal>) {
    for (i, rule) in rules.iter().enumerate() {
        let field = format!("{prefix}[{i}]");
        check_rule_shape(rule, &field, refusals);
        for resource in &rule.resources {
            let reached = protected_reached(&rule.api_groups, resource);
            if reached.is_empty() {
                continue;
            }
            const SHOWN: usize = 4;
            let mut shown = reached
                .iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if reached.len() > SHOWN {
                shown.push_str(&format!(" and {} more", reached.len() - SHOWN));
            }
            refusals.push(Refusal::new(
                format!("{field}.resources"),
                format!(
                    "{resource:?} in API groups {:?} reaches {shown}: rules must not intercept {PROTECTED_SUMMARY}",
                    rule.api_groups
                ),
            ));
        }
    }
}

/// The API server's own checks of one admission rule (`validateRuleWithOperations`). Where it
/// depends on the order of entries (`*` before or after a plain resource), this refuses both.
fn check_rule_shape(rule: &InterceptRule, field: &str, refusals: &mut Vec<Refusal>) {
    let mut refuse = |what: &str, message: String| {
        refusals.push(Refusal::new(format!("{field}.{what}"), message));
    };
    for (what, list) in [
        ("apiGroups", &rule.api_groups),
        ("apiVersions", &rule.api_versions),
        ("resources", &rule.resources),
    ] {
        if list.is_empty() {
            refuse(
                what,
                "must name at least one entry (use \"*\" for all)".into(),
            );
        }
    }
    for (what, list) in [
        ("apiGroups", &rule.api_groups),
        ("apiVersions", &rule.api_versions),
    ] {
        if list.len() > 1 && list.iter().any(|e| e == "*") {
            refuse(
                what,
                format!("if \"*\" is present it must be the only entry, got {list:?}"),
            );
        }
    }
    for (what, list) in [
        ("apiVersions", &rule.api_versions),
        ("resources", &rule.resources),
    ] {
        if list.iter().any(String::is_empty) {
            refuse(what, "entries must not be empty".into());
        }
    }
    if rule.operations.is_empty() {
        refuse("operations", "must name at least one operation".into());
    }
    if rule.operations.len() > 1 && rule.operations.contains(&Operation::All) {
        refuse(
            "operations",
            "if \"*\" is present it must be the only operation".into(),
        );
    }
    let resources = &rule.resources;
    if resources.len() > 1 && resources.iter().any(|r| r == "*/*") {
        refuse(
            "resources",
            format!("if \"*/*\" is present it must be the only entry, got {resources:?}"),
        );
    }
    if resources.iter().any(|r| r == "*") && resources.iter().any(|r| r != "*" && !r.contains('/'))
    {
        refuse(
            "resources",
            format!("\"*\" already names every resource without a subresource, got {resources:?}"),
        );
    }
    let split: Vec<(&str, &str)> = resources.iter().filter_map(|r| r.split_once('/')).collect();
    for (i, (res, sub)) in split.iter().enumerate() {
        if split[..i].contains(&(*res, *sub)) {
            refuse("resources", format!("\"{res}/{sub}\" is named twice"));
        }
        if *sub != "*" && split.iter().any(|(r, s)| r == res && *s == "*") {
            refuse(
                "resources",
                format!("\"{res}/*\" already names \"{res}/{sub}\""),
            );
        }
        if *res != "*" && split.iter().any(|(r, s)| *r == "*" && s == sub) {
            refuse(
                "resources",
                format!("\"*/{sub}\" already names \"{res}/{sub}\""),
            );
        }
    }
}

fn check_scope(
    spec: &InitializerSpec,
    operator_namespace: &str,
    workload_namespace: &str,
    refusals: &mut Vec<Refusal>,
) {
    let Some(scope) = &spec.namespaces else {
        return;
    };
    for (i, ns) in scope.include.iter().enumerate() {
        let field = format!("spec.namespaces.include[{i}]");
        if SYSTEM_NAMESPACES.contains(&ns.as_str()) {
            refusals.push(Refusal::new(
                field,
                format!("the system namespace {ns} must never be intercepted"),
            ));
        } else if ns == operator_namespace {
            refusals.push(Refusal::new(
                field,
                format!("the operator's namespace {ns} must never be intercepted"),
            ));
        } else if ns == workload_namespace {
            refusals.push(Refusal::new(
                field,
                format!("the initializer's own namespace {ns} is never intercepted"),
            ));
        }
    }
    if let Some(selector) = &scope.selector {
        check_selector(selector, "spec.namespaces.selector", refusals);
    }
}

fn check_selector(selector: &LabelSelector, field: &str, refusals: &mut Vec<Refusal>) {
    for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
        let here = format!("{field}.matchExpressions[{i}]");
        match expr.operator.as_str() {
            "In" | "NotIn" => {
                if expr.values.as_ref().is_none_or(Vec::is_empty) {
                    refusals.push(Refusal::new(
                        here.clone(),
                        format!("operator {} needs at least one value", expr.operator),
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if expr.values.as_ref().is_some_and(|v| !v.is_empty()) {
                    refusals.push(Refusal::new(
                        here.clone(),
                        format!("operator {} takes no values", expr.operator),
                    ));
                }
            }
            other => refusals.push(Refusal::new(
                here.clone(),
                format!("unknown operator {other:?} (use In, NotIn, Exists or DoesNotExist)"),
            )),
        }
        if expr.key.is_empty() {
            refusals.push(Refusal::new(
                format!("{field}.matchExpressions[{i}].key"),
                "the key must not be empty",
            ));
        }
    }
}

fn check_numbers(spec: &InitializerSpec, refusals: &mut Vec<Refusal>) {
    if spec.replicas < 1 {
        refusals.push(Refusal::new(
            "spec.replicas",
            format!("must be at least 1, got {}", spec.replicas),
        ));
    }
    if !(1..=30).contains(&spec.timeout_seconds) {
        refusals.push(Refusal::new(
            "spec.timeoutSeconds",
            format!("must be between 1 and 30, got {}", spec.timeout_seconds),
        ));
    }
    let health = spec.health_policy();
    let ranges = [
        ("periodSeconds", health.period_seconds, 1, 300),
        ("failureThreshold", health.failure_threshold, 1, 100),
        ("successThreshold", health.success_threshold, 1, 100),
        (
            "latencyBudgetMillis",
            health.latency_budget_millis,
            10,
            30_000,
        ),
    ];
    for (field, value, min, max) in ranges {
        if !(min..=max).contains(&value) {
            refusals.push(Refusal::new(
                format!("spec.health.{field}"),
                format!("must be between {min} and {max}, got {value}"),
            ));
        }
    }
    // Under `Fail`, a hung initializer refuses matching creates until the operator takes it out
    // of the path: cap how long that can take, so no spec can turn an outage into a long one.
    let removal_millis =
        i64::from(health.failure_threshold) * i64::from(health.period_seconds) * 1000
            + i64::from(health.latency_budget_millis);
    if spec.failure_policy == FailurePolicy::Fail && removal_millis > MAX_FAIL_CLOSED_MILLIS {
        refusals.push(Refusal::new(
            "spec.health",
            format!(
                "with failurePolicy Fail, failureThreshold × periodSeconds + latencyBudgetMillis must be at most {} s, got {:.1} s: a hung initializer would refuse matching creates that long",
                MAX_FAIL_CLOSED_MILLIS / 1000,
                removal_millis as f64 / 1000.0
            ),
        ));
    }
    if i64::from(health.latency_budget_millis) > i64::from(spec.timeout_seconds) * 1000 {
        refusals.push(Refusal::new(
            "spec.health.latencyBudgetMillis",
            format!(
                "{} ms exceeds the webhook timeout of {} s: a probe that passes could still time out the API server",
                health.latency_budget_millis, spec.timeout_seconds
            ),
        ));
    }
}

/// The longest a `Fail` configuration may take to be removed after its initializer hangs
/// (`failureThreshold × periodSeconds + latencyBudgetMillis`), in milliseconds.
pub const MAX_FAIL_CLOSED_MILLIS: i64 = 30_000;

fn check_image(spec: &InitializerSpec, refusals: &mut Vec<Refusal>) -> Option<String> {
    match (&spec.image, &spec.preset) {
        (Some(image), _) if image.trim().is_empty() || image.contains(char::is_whitespace) => {
            refusals.push(Refusal::new(
                "spec.image",
                format!("{image:?} is not an image reference"),
            ));
            None
        }
        (Some(image), _) => Some(image.clone()),
        (None, Some(_)) => None,
        (None, None) => {
            refusals.push(Refusal::new(
                "spec.image",
                "spec.image or spec.preset is required",
            ));
            None
        }
    }
}

fn check_config(spec: &InitializerSpec, refusals: &mut Vec<Refusal>) -> Option<ConfigPlan> {
    match (&spec.config, &spec.preset) {
        (Some(_), Some(_)) => {
            refusals.push(Refusal::new(
                "spec.config",
                "spec.config and spec.preset both provide config.yaml: give only one",
            ));
            None
        }
        (None, Some(preset)) => match serde_yaml::to_string(preset) {
            Ok(text) => Some(ConfigPlan::Text(text)),
            Err(err) => {
                refusals.push(Refusal::new(
                    "spec.preset",
                    format!("cannot be written as YAML: {err}"),
                ));
                None
            }
        },
        (None, None) => Some(ConfigPlan::Empty),
        (Some(source), None) => config_source(source, refusals),
    }
}

fn config_source(source: &ConfigSource, refusals: &mut Vec<Refusal>) -> Option<ConfigPlan> {
    match (&source.inline, &source.config_map_ref) {
        (Some(text), None) => Some(ConfigPlan::Text(text.clone())),
        (None, Some(key)) => {
            let mut ok = true;
            if key.name.is_empty() {
                refusals.push(Refusal::new(
                    "spec.config.configMapRef.name",
                    "the ConfigMap name must not be empty",
                ));
                ok = false;
            }
            if key.key.is_empty() || key.key.contains('/') {
                refusals.push(Refusal::new(
                    "spec.config.configMapRef.key",
                    format!("{:?} is not a ConfigMap key", key.key),
                ));
                ok = false;
            }
            ok.then(|| ConfigPlan::ConfigMapRef {
                name: key.name.clone(),
                key: key.key.clone(),
            })
        }
        _ => {
            refusals.push(Refusal::new(
                "spec.config",
                "exactly one of inline and configMapRef is required",
            ));
            None
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
        serde_yaml::from_str(SIDECAR_YAML).unwrap()
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
        let example: Initializer =
            serde_yaml::from_str(include_str!("../../examples/secret-guard-initializer.yaml"))
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
            serde_yaml::from_str(include_str!("../../examples/sidecar-initializer.yaml")).unwrap();
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
            (vec![""], vec!["pods/*"]),
            (vec![""], vec!["pods", "pods/status"]),
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
        let back: PresetConfig = serde_yaml::from_str(&text).unwrap();
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
}
