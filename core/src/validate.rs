//! Pure validation of an Initializer: what the schema cannot say (or what an older API server
//! did not enforce) is refused here, before anything is deployed or registered.
//!
//! [`validate`] turns a spec into a [`Validated`] plan (workload namespace, derived object names,
//! the configuration to mount) or the complete list of [`Refusal`]s, never just the first.

use std::fmt;

use std::collections::BTreeMap;

use initializer_crds::constants::{SYSTEM_NAMESPACES, WORKLOADS_LABEL, WORKLOADS_LABEL_VALUE};
use initializer_crds::{
    Backend, ConfigSource, FailurePolicy, HealthPolicy, InitializerSpec, InterceptRule, Operation,
    PROTECTED_SUMMARY, protected_reached,
};

use crate::cel;
use crate::naming::{Names, is_reserved_config_map_name, is_reserved_secret_name, names};
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
    /// With `backend: InitializerConfiguration`, the name the initializer is pending as
    /// ([`legacy::pending_name`]); `None` with the webhook backend.
    pub pending_name: Option<String>,
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
    check_references(spec, &mut refusals);
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
    let pending_name = (spec.backend == Backend::InitializerConfiguration).then(|| {
        refusals.extend(legacy::refusals(spec, name, &namespace));
        legacy::pending_name(name, &namespace)
    });
    match (refusals.is_empty(), config) {
        (true, Some(config)) => Ok(Validated {
            spec: spec.clone(),
            names: names(name),
            namespace,
            operator_namespace: operator_namespace.to_string(),
            health: spec.health_policy(),
            config,
            image,
            pending_name,
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

/// Whether the initializer's pods get an API token mounted: with `spec.apiAccess`, and always
/// with the `InitializerConfiguration` backend, whose initializer is a controller that watches
/// and updates the objects it initializes; by default they run with none.
pub fn automount_token(spec: &InitializerSpec) -> bool {
    spec.api_access || spec.backend == Backend::InitializerConfiguration
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

/// The CRD's schema refuses the same numbers at the API server (one list,
/// [`InitializerSpec::bounded_numbers`]); checked here too for what reaches the operator without it (a sandbox that does
/// not validate, an object stored before a narrower schema).
fn check_numbers(spec: &InitializerSpec, refusals: &mut Vec<Refusal>) {
    for (field, value, limits) in spec.bounded_numbers() {
        if !limits.contains(value) {
            refusals.push(Refusal::new(
                field,
                format!(
                    "must be between {} and {}, got {value}",
                    limits.min, limits.max
                ),
            ));
        }
    }
    // Under `Fail`, a hung initializer refuses matching creates until the operator takes it out
    // of the path: cap how long that can take, so no spec can turn an outage into a long one.
    let health = spec.health_policy();
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
        (None, Some(preset)) => match initializer_crds::yaml::to_string(preset) {
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

/// The initializer's pod reads what its spec references through the kubelet, which needs no
/// right of the Initializer's author: so a reference must not name what the operator writes
/// into the workload namespace (another Initializer's CA key or serving key, its generated
/// config). Names are refused by suffix, not by what exists today, so that an Initializer
/// created later cannot have its key read by one that referenced the name first.
fn check_references(spec: &InitializerSpec, refusals: &mut Vec<Refusal>) {
    for (index, env) in spec.env.iter().enumerate() {
        let Some(source) = &env.value_from else {
            continue;
        };
        if let Some(secret) = &source.secret_key_ref
            && is_reserved_secret_name(&secret.name)
        {
            refusals.push(reserved_reference(
                format!("spec.env[{index}].valueFrom.secretKeyRef.name"),
                "Secret",
                &secret.name,
                "-tls or -ca",
            ));
        }
        if let Some(config_map) = &source.config_map_key_ref
            && is_reserved_config_map_name(&config_map.name)
        {
            refusals.push(reserved_reference(
                format!("spec.env[{index}].valueFrom.configMapKeyRef.name"),
                "ConfigMap",
                &config_map.name,
                "-config",
            ));
        }
    }
    if let Some(key) = spec.config.as_ref().and_then(|c| c.config_map_ref.as_ref())
        && is_reserved_config_map_name(&key.name)
    {
        refusals.push(reserved_reference(
            "spec.config.configMapRef.name".to_string(),
            "ConfigMap",
            &key.name,
            "-config",
        ));
    }
}

fn reserved_reference(field: String, kind: &str, name: &str, suffixes: &str) -> Refusal {
    Refusal::new(
        field,
        format!(
            "{kind} {name:?}: names ending in {suffixes} are reserved for what the operator writes \
             in the workload namespace (Initializers' keys and generated config), which no \
             initializer may read; give yours another name"
        ),
    )
}

pub mod legacy;

#[cfg(test)]
pub(crate) mod tests;
