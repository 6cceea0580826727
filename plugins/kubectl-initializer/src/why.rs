//! Whether an object is intercepted by an Initializer, and if not, exactly why: the pure
//! decision behind `kubectl initializer why`.
//!
//! The truth is the live MutatingWebhookConfiguration: its rules, `namespaceSelector` and
//! `objectSelector` are evaluated the way the API server evaluates them. The Initializer's spec
//! explains a failed requirement (which part the user wrote, which part is the operator's
//! mandatory exclusion) and supplies the annotation gate, which the initializer itself applies
//! (the SDK's [`kube_initializer::gate::AnnotationGate`]) after the API server called it. When
//! nothing is registered, the configuration the operator would register (built by the operator's
//! own [`initializer_operator::build::webhook`]) says what would happen once it is.

use std::collections::BTreeMap;

use initializer_crds::constants::{NAMESPACE_NAME_LABEL, SYSTEM_NAMESPACES};
use initializer_crds::{Initializer, InitializerSpec};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use kube_initializer::gate::AnnotationGate;
use serde::Serialize;
use serde_json::Value;

/// What the API server knows about one request: the attributes webhook matching reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource, empty for the object itself.
    pub subresource: String,
    /// Kind.
    pub kind: String,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
    /// The object's namespace (namespaced resources only).
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    /// The object as it would be sent (labels and annotations are read from it).
    pub object: Value,
    /// The labels of the object's namespace (for a Namespace, its own).
    pub namespace_labels: BTreeMap<String, String>,
}

impl Request {
    /// `group/version resource` as shown in messages (`v1 pods`, `apps/v1 deployments`).
    pub fn resource_shown(&self) -> String {
        let gv = if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        format!("{gv} {resource}")
    }

    /// `namespace/name` or `name`.
    pub fn object_shown(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{}/{}", self.kind, ns, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }

    fn labels(&self) -> BTreeMap<String, String> {
        string_map(self.object.pointer("/metadata/labels"))
    }

    /// Whether this is a request for a Namespace object (cluster-scoped, matched against its own
    /// labels by `namespaceSelector`).
    fn is_namespace_object(&self) -> bool {
        self.group.is_empty() && self.resource == "namespaces" && self.subresource.is_empty()
    }
}

/// The labels (or annotations) of a JSON map; non-string values are skipped.
pub fn string_map(map: Option<&Value>) -> BTreeMap<String, String> {
    map.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// One reason an object is not intercepted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reason {
    /// Which check failed.
    pub kind: ReasonKind,
    /// Exactly what failed, for a person.
    pub detail: String,
}

/// Which check keeps an object from being intercepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum ReasonKind {
    /// No configuration is registered now (suspended, unresponsive, not ready, invalid).
    NotRegistered,
    /// The namespace is one no initializer may ever intercept: a system namespace, the
    /// operator's, or the initializer's own workload namespace.
    MandatoryExclusion,
    /// No rule matches the request's group, version, resource, operation or scope.
    Rule,
    /// The namespace does not match `spec.namespaces` (selector, include, exclude).
    NamespaceSelector,
    /// The object's labels do not match `spec.objectSelector`.
    ObjectSelector,
    /// The API server calls the initializer, which leaves the object alone: `spec.annotation`.
    AnnotationGate,
}

impl ReasonKind {
    /// The name shown in the table and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonKind::NotRegistered => "NotRegistered",
            ReasonKind::MandatoryExclusion => "MandatoryExclusion",
            ReasonKind::Rule => "Rule",
            ReasonKind::NamespaceSelector => "NamespaceSelector",
            ReasonKind::ObjectSelector => "ObjectSelector",
            ReasonKind::AnnotationGate => "AnnotationGate",
        }
    }
}

/// Which configuration a verdict was evaluated against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Basis {
    /// The live MutatingWebhookConfiguration of this name.
    Live(String),
    /// Not registered: the configuration the operator would register, of this name.
    WouldRegister(String),
    /// Not registered, and what it would register is unknown (why, in the string).
    Unknown(String),
}

/// The answer for one Initializer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The Initializer's name.
    pub initializer: String,
    /// Whether the initializer is called for the object and acts on it now.
    pub intercepted: bool,
    /// Whether its configuration is registered now.
    pub registered: bool,
    /// When not registered: whether it would intercept the object once registered again
    /// (`None` when that is unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub once_registered: Option<bool>,
    /// What the verdict was evaluated against.
    pub basis: Basis,
    /// Every reason it is not intercepted, most fundamental first; empty when intercepted. The
    /// annotation gate is among them only when the API server calls (or, once registered, would
    /// call) the initializer.
    pub reasons: Vec<Reason>,
    /// What else a reader should know (degraded configuration, conditions not evaluated).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What is known about the operator that the configuration does not say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorFacts {
    /// The operator's namespace, when it was found (needed only for an unregistered
    /// Initializer, whose mandatory exclusions cannot be read from a live configuration).
    pub namespace: Option<String>,
}

/// The configuration the operator would register for `initializer` (its own validation and
/// build), or why that is unknown.
pub fn would_register(
    initializer: &Initializer,
    operator: &OperatorFacts,
) -> Result<MutatingWebhookConfiguration, String> {
    let Some(operator_namespace) = operator.namespace.as_deref() else {
        return Err(
            "the operator's namespace was not found (pass --operator-namespace)".to_string(),
        );
    };
    let name = initializer.name_any();
    initializer_operator::validate::validate(&initializer.spec, operator_namespace, &name)
        .map(|validated| initializer_operator::build::webhook(&validated, ""))
        .map_err(|refusals| {
            format!(
                "the operator refuses the spec: {}",
                initializer_operator::validate::describe(&refusals)
            )
        })
}

/// Why nothing is registered, from the status the operator wrote.
pub fn unregistered_detail(initializer: &Initializer) -> String {
    let status = initializer.status.as_ref();
    let phase = status
        .and_then(|s| s.phase)
        .map(|p| format!("{p:?}"))
        .unwrap_or_else(|| "unknown (no status yet)".to_string());
    let condition = status.and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == initializer_operator::status::REGISTERED)
    });
    let mut detail = format!("no MutatingWebhookConfiguration is registered; phase {phase}");
    if initializer.spec.suspend {
        detail.push_str("; spec.suspend is true (resume with `kubectl initializer resume`)");
    }
    if let Some(c) = condition.filter(|c| !c.message.is_empty()) {
        detail.push_str(&format!("; {}: {}", c.reason, c.message));
    }
    detail
}

/// Decides whether `request` is intercepted by `initializer`. `live` is its registered
/// configuration, if any; `would_be` what the operator would register (used only when nothing
/// is registered).
pub fn decide(
    initializer: &Initializer,
    live: Option<&MutatingWebhookConfiguration>,
    would_be: Result<&MutatingWebhookConfiguration, &str>,
    operator: &OperatorFacts,
    request: &Request,
) -> Verdict {
    let name = initializer.name_any();
    let spec = &initializer.spec;
    let mut notes = Vec::new();
    let (basis, configuration) = match (live, would_be) {
        (Some(live), _) => (Basis::Live(live.name_any()), Some(live)),
        (None, Ok(would)) => (Basis::WouldRegister(would.name_any()), Some(would)),
        (None, Err(why)) => (Basis::Unknown(why.to_string()), None),
    };
    let mut reasons = Vec::new();
    if live.is_none() {
        reasons.push(Reason {
            kind: ReasonKind::NotRegistered,
            detail: unregistered_detail(initializer),
        });
    }
    let mut known = configuration.is_some();
    for hook in configuration
        .iter()
        .flat_map(|c| c.webhooks.iter().flatten())
    {
        if !hook
            .match_conditions
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            notes.push(format!(
                "webhook {} has matchConditions, which are not evaluated here",
                hook.name
            ));
        }
        if live.is_some() && hook.failure_policy.as_deref() == Some("Ignore") {
            let degraded = configuration.is_some_and(initializer_operator::build::is_degraded);
            notes.push(if degraded {
                format!(
                    "the configuration is degraded (failurePolicy Ignore, timeout {} s): the \
                     initializer missed probes, and a call that fails lets the object through unchanged",
                    hook.timeout_seconds.unwrap_or_default()
                )
            } else {
                "failurePolicy is Ignore: a call that fails lets the object through unchanged"
                    .to_string()
            });
        }
        match evaluate_hook(hook, spec, operator, request) {
            Ok(found) => reasons.extend(found),
            Err(why) => {
                known = false;
                notes.push(why);
            }
        }
    }
    // The gate is the initializer's own check: it matters only when the API server calls it.
    let called = known && reasons.iter().all(|r| r.kind == ReasonKind::NotRegistered);
    if let Some(reason) = annotation_gate(spec, request).filter(|_| called) {
        reasons.push(reason);
    }
    reasons.sort_by_key(|r| r.kind);
    reasons.dedup();
    let blocking = reasons
        .iter()
        .filter(|r| r.kind != ReasonKind::NotRegistered)
        .count();
    let once_registered = (live.is_none() && known).then_some(blocking == 0);
    Verdict {
        initializer: name,
        intercepted: live.is_some() && known && reasons.is_empty(),
        registered: live.is_some(),
        once_registered,
        basis,
        reasons,
        notes,
    }
}

/// Every reason one webhook does not call for `request`; an error when a selector is one the API
/// server would have refused.
fn evaluate_hook(
    hook: &MutatingWebhook,
    spec: &InitializerSpec,
    operator: &OperatorFacts,
    request: &Request,
) -> Result<Vec<Reason>, String> {
    let mut reasons = Vec::new();
    let rules = hook.rules.as_deref().unwrap_or_default();
    let equivalent = hook.match_policy.as_deref() != Some("Exact");
    if !rules.iter().any(|r| rule_matches(r, request, equivalent)) {
        reasons.push(Reason {
            kind: ReasonKind::Rule,
            detail: format!(
                "no rule matches {} {} ({}); the rules are: {}",
                request.operation,
                request.resource_shown(),
                if request.namespaced {
                    "namespaced"
                } else {
                    "cluster-scoped"
                },
                rules.iter().map(show_rule).collect::<Vec<_>>().join("; ")
            ),
        });
    }
    let workload_namespace = hook
        .client_config
        .service
        .as_ref()
        .map(|s| s.namespace.clone());
    let namespace_subject = if request.is_namespace_object() {
        Some(request.name.clone())
    } else {
        request.namespace.clone().filter(|_| request.namespaced)
    };
    if let (Some(namespace), Some(selector)) = (namespace_subject, hook.namespace_selector.as_ref())
    {
        let labels = if request.is_namespace_object() {
            request.labels()
        } else {
            request.namespace_labels.clone()
        };
        for failed in failed_requirements(selector, &labels)? {
            reasons.push(explain_namespace(
                &failed,
                &namespace,
                &labels,
                spec,
                operator,
                workload_namespace.as_deref(),
            ));
        }
    }
    if let Some(selector) = hook.object_selector.as_ref() {
        let labels = request.labels();
        for failed in failed_requirements(selector, &labels)? {
            reasons.push(Reason {
                kind: ReasonKind::ObjectSelector,
                detail: format!(
                    "spec.objectSelector requires {}; the object's labels are {}",
                    show_requirement(&failed),
                    show_labels(&labels)
                ),
            });
        }
    }
    Ok(reasons)
}

/// The annotation gate as the initializer applies it (the SDK's gate, before any handler).
fn annotation_gate(spec: &InitializerSpec, request: &Request) -> Option<Reason> {
    let gate = spec.annotation.as_ref()?;
    let sdk_gate = AnnotationGate::new(gate.name.clone(), gate.required);
    if sdk_gate.admits_json(&request.object) {
        return None;
    }
    let value = request
        .object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(&gate.name))
        .and_then(Value::as_str);
    let detail = match value {
        Some(value) => format!(
            "the initializer is called but leaves the object alone: its annotation {} is {value:?}",
            gate.name
        ),
        None => format!(
            "the initializer is called but leaves the object alone: spec.annotation requires the \
             annotation {} (any value but \"false\"), which the object lacks",
            gate.name
        ),
    };
    Some(Reason {
        kind: ReasonKind::AnnotationGate,
        detail,
    })
}

/// Explains a failed `namespaceSelector` requirement: a mandatory exclusion the operator adds,
/// or a part of `spec.namespaces`.
fn explain_namespace(
    failed: &Requirement,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    spec: &InitializerSpec,
    operator: &OperatorFacts,
    workload_namespace: Option<&str>,
) -> Reason {
    let scope = spec.namespaces.as_ref();
    let by_name = failed.key == NAMESPACE_NAME_LABEL;
    if by_name && failed.operator == "NotIn" {
        let user_excluded = scope.is_some_and(|s| s.exclude.iter().any(|n| n == namespace));
        let mandatory = if SYSTEM_NAMESPACES.contains(&namespace) {
            Some("a system namespace".to_string())
        } else if workload_namespace == Some(namespace) {
            Some("the initializer's own workload namespace".to_string())
        } else if operator.namespace.as_deref() == Some(namespace) || !user_excluded {
            // The operator adds nothing else to this list but its own namespace.
            Some("the operator's namespace".to_string())
        } else {
            None
        };
        return match mandatory {
            Some(what) => Reason {
                kind: ReasonKind::MandatoryExclusion,
                detail: format!(
                    "namespace {namespace} is {what}, which no initializer may ever intercept"
                ),
            },
            None => Reason {
                kind: ReasonKind::NamespaceSelector,
                detail: format!("namespace {namespace} is listed in spec.namespaces.exclude"),
            },
        };
    }
    if by_name && failed.operator == "In" {
        return Reason {
            kind: ReasonKind::NamespaceSelector,
            detail: format!(
                "namespace {namespace} is not in spec.namespaces.include {:?}",
                failed.values
            ),
        };
    }
    Reason {
        kind: ReasonKind::NamespaceSelector,
        detail: format!(
            "spec.namespaces.selector requires {}; namespace {namespace} has labels {}",
            show_requirement(failed),
            show_labels(labels)
        ),
    }
}

/// One requirement of a label selector, `matchLabels` entries as `In [value]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values (`In`, `NotIn`).
    pub values: Vec<String>,
    /// Whether it came from `matchLabels`.
    pub from_match_labels: bool,
}

/// The requirements of `selector` that `labels` do not meet (empty: the selector matches), each
/// evaluated by kube's own selector matching; an error for a selector the API server refuses.
pub fn failed_requirements(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<Requirement>, String> {
    let whole = Selector::try_from(selector.clone())
        .map_err(|e| format!("failed to parse a label selector: {e}"))?;
    if whole.matches(labels) {
        return Ok(Vec::new());
    }
    let mut requirements: Vec<Requirement> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| Requirement {
            key: key.clone(),
            operator: "In".to_string(),
            values: vec![value.clone()],
            from_match_labels: true,
        })
        .collect();
    requirements.extend(
        selector
            .match_expressions
            .iter()
            .flatten()
            .map(|e| Requirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
                from_match_labels: false,
            }),
    );
    let mut failed = Vec::new();
    for requirement in requirements {
        let single = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: requirement.key.clone(),
                operator: requirement.operator.clone(),
                values: (!requirement.values.is_empty()).then(|| requirement.values.clone()),
            }]),
        };
        let one = Selector::try_from(single)
            .map_err(|e| format!("failed to parse a label selector: {e}"))?;
        if !one.matches(labels) {
            failed.push(requirement);
        }
    }
    Ok(failed)
}

fn show_requirement(r: &Requirement) -> String {
    match r.operator.as_str() {
        "In" if r.from_match_labels => format!("{}={}", r.key, r.values.join(",")),
        "In" => format!("{} in ({})", r.key, r.values.join(",")),
        "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
        "Exists" => r.key.clone(),
        "DoesNotExist" => format!("!{}", r.key),
        other => format!("{} {other} ({})", r.key, r.values.join(",")),
    }
}

fn show_labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "none".to_string();
    }
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

fn show_rule(rule: &RuleWithOperations) -> String {
    let list = |l: &Option<Vec<String>>| {
        l.as_deref()
            .unwrap_or_default()
            .iter()
            .map(|s| if s.is_empty() { "\"\"" } else { s.as_str() })
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "{} groups [{}] versions [{}] resources [{}] scope {}",
        list(&rule.operations),
        list(&rule.api_groups),
        list(&rule.api_versions),
        list(&rule.resources),
        rule.scope.as_deref().unwrap_or("*")
    )
}

fn contains_or_star(list: Option<&Vec<String>>, value: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|x| x == "*" || x == value))
}

/// Whether a rule's resource entry names the request's resource and subresource, with the API
/// server's wildcard forms (`*`, `*/*`, `*/sub`, `name/*`).
fn resource_matches(entries: Option<&Vec<String>>, resource: &str, subresource: &str) -> bool {
    let full = if subresource.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{subresource}")
    };
    entries.is_some_and(|list| {
        list.iter().any(|entry| {
            if entry == "*/*" || *entry == full || (entry == "*" && subresource.is_empty()) {
                return true;
            }
            match entry.split_once('/') {
                Some(("*", sub)) => !subresource.is_empty() && sub == subresource,
                Some((res, "*")) => !subresource.is_empty() && res == resource,
                _ => false,
            }
        })
    })
}

fn scope_matches(scope: Option<&str>, request: &Request) -> bool {
    match scope {
        None | Some("*") => true,
        Some("Namespaced") => request.namespaced,
        Some("Cluster") => !request.namespaced,
        Some(_) => false,
    }
}

/// Whether an admission rule matches the request. With `equivalent` (`matchPolicy:
/// Equivalent`, the default), a rule naming another version of the same group and resource
/// matches too: the API server converts the object to the version the rule names.
pub fn rule_matches(rule: &RuleWithOperations, request: &Request, equivalent: bool) -> bool {
    let version_ok = contains_or_star(rule.api_versions.as_ref(), &request.version)
        || (equivalent && !rule.api_versions.as_deref().unwrap_or_default().is_empty());
    contains_or_star(rule.operations.as_ref(), &request.operation)
        && contains_or_star(rule.api_groups.as_ref(), &request.group)
        && version_ok
        && resource_matches(
            rule.resources.as_ref(),
            &request.resource,
            &request.subresource,
        )
        && scope_matches(rule.scope.as_deref(), request)
}

/// The verdicts for one object as text: one paragraph per Initializer.
pub fn text(object: &str, operation: &str, resource: &str, verdicts: &[Verdict]) -> String {
    let mut out = format!("{object} ({operation} {resource}):\n");
    if verdicts.is_empty() {
        out.push_str("  no Initializers in the cluster: nothing intercepts it\n");
        return out;
    }
    for v in verdicts {
        let basis = match &v.basis {
            Basis::Live(name) => format!("live MutatingWebhookConfiguration {name}"),
            Basis::WouldRegister(name) => {
                format!("not registered; evaluated against the {name} the operator would register")
            }
            Basis::Unknown(why) => format!("not registered; {why}"),
        };
        let headline = if v.intercepted {
            "INTERCEPTED".to_string()
        } else {
            match v.once_registered {
                Some(true) => "NOT INTERCEPTED now; would be once registered again".to_string(),
                Some(false) | None => "NOT INTERCEPTED".to_string(),
            }
        };
        out.push_str(&format!("  {}: {headline} [{basis}]\n", v.initializer));
        for reason in &v.reasons {
            out.push_str(&format!(
                "    {}: {}\n",
                reason.kind.as_str(),
                reason.detail
            ));
        }
        for note in &v.notes {
            out.push_str(&format!("    note: {note}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use initializer_crds::InitializerStatus;
    use serde_json::json;

    const OPERATOR_NS: &str = "initializer-system";

    fn initializer(spec: Value) -> Initializer {
        serde_json::from_value(json!({
            "apiVersion": "initializer.dev/v1alpha1",
            "kind": "Initializer",
            "metadata": {"name": "sidecar"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn sidecar() -> Initializer {
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

    fn deployment(namespace: &str, labels: Value, annotations: Value) -> Request {
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

    fn judge(init: &Initializer, request: &Request) -> Verdict {
        let config = live(init);
        decide(
            init,
            Some(&config),
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
        assert_eq!(kinds(&v), [ReasonKind::AnnotationGate]);
        assert!(
            v.reasons[0]
                .detail
                .contains("initializer.kubernetes.io/sidecar"),
            "{v:?}"
        );
        let off = judge(
            &init,
            &deployment(
                "shop",
                json!({"tier": "front"}),
                json!({"initializer.kubernetes.io/sidecar": "false"}),
            ),
        );
        assert_eq!(kinds(&off), [ReasonKind::AnnotationGate]);
        assert!(off.reasons[0].detail.contains("\"false\""), "{off:?}");
    }

    #[test]
    fn an_object_label_outside_the_object_selector_is_the_object_selector() {
        let v = judge(
            &sidecar(),
            &deployment("shop", json!({"tier": "back"}), annotated()),
        );
        assert_eq!(kinds(&v), [ReasonKind::ObjectSelector]);
        assert!(
            v.reasons[0].detail.contains("tier in (front)"),
            "{}",
            v.reasons[0].detail
        );
        assert!(v.reasons[0].detail.contains("tier=back"));
    }

    #[test]
    fn another_resource_or_operation_is_the_rule() {
        let init = sidecar();
        let mut secret = deployment("shop", json!({"tier": "front"}), annotated());
        secret.group = String::new();
        secret.resource = "secrets".into();
        let v = judge(&init, &secret);
        assert_eq!(kinds(&v), [ReasonKind::Rule]);
        assert!(
            v.reasons[0].detail.contains("CREATE v1 secrets"),
            "{}",
            v.reasons[0].detail
        );
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
        assert_eq!(kinds(&v), [ReasonKind::NamespaceSelector]);
        assert!(v.reasons[0].detail.contains("team=web"), "{v:?}");
        let excluded = judge(
            &init,
            &deployment("legacy", json!({"tier": "front"}), annotated()),
        );
        assert_eq!(kinds(&excluded), [ReasonKind::NamespaceSelector]);
        assert!(
            excluded.reasons[0]
                .detail
                .contains("spec.namespaces.exclude")
        );
        let mut include = sidecar();
        include.spec.namespaces.as_mut().unwrap().include = vec!["shop".into()];
        let v = judge(
            &include,
            &deployment("blog", json!({"tier": "front"}), annotated()),
        );
        assert_eq!(kinds(&v), [ReasonKind::NamespaceSelector]);
        assert!(
            v.reasons[0].detail.contains("spec.namespaces.include"),
            "{v:?}"
        );
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
        assert_eq!(kinds(&v), [ReasonKind::NotRegistered]);
        assert!(v.reasons[0].detail.contains("Suspended"), "{v:?}");
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
        let v = decide(
            &init,
            Some(&config),
            Err("unused"),
            &OperatorFacts::default(),
            &deployment("shop", json!({"tier": "front"}), annotated()),
        );
        assert_eq!(kinds(&v), [ReasonKind::Rule]);
    }

    #[test]
    fn a_degraded_configuration_is_noted() {
        let init = sidecar();
        let config = initializer_operator::build::degraded(&live(&init));
        let v = decide(
            &init,
            Some(&config),
            Err("unused"),
            &OperatorFacts::default(),
            &deployment("shop", json!({"tier": "front"}), annotated()),
        );
        assert!(v.intercepted);
        assert!(v.notes.iter().any(|n| n.contains("degraded")), "{v:?}");
    }

    #[test]
    fn rules_follow_the_api_servers_wildcards_scope_and_match_policy() {
        let rule = |groups: &[&str], versions: &[&str], resources: &[&str], scope: &str| {
            RuleWithOperations {
                api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
                api_versions: Some(versions.iter().map(|s| s.to_string()).collect()),
                resources: Some(resources.iter().map(|s| s.to_string()).collect()),
                operations: Some(vec!["CREATE".into()]),
                scope: Some(scope.into()),
            }
        };
        let pods = deployment("shop", json!({}), json!({}));
        let mut pod = pods.clone();
        pod.group = String::new();
        pod.resource = "pods".into();
        assert!(rule_matches(
            &rule(&[""], &["v1"], &["pods"], "*"),
            &pod,
            false
        ));
        assert!(rule_matches(
            &rule(&["*"], &["*"], &["*"], "Namespaced"),
            &pod,
            false
        ));
        assert!(!rule_matches(
            &rule(&["*"], &["*"], &["*"], "Cluster"),
            &pod,
            false
        ));
        assert!(!rule_matches(
            &rule(&["apps"], &["v1"], &["pods"], "*"),
            &pod,
            false
        ));
        let mut status = pod.clone();
        status.subresource = "status".into();
        assert!(!rule_matches(
            &rule(&[""], &["v1"], &["*"], "*"),
            &status,
            false
        ));
        assert!(rule_matches(
            &rule(&[""], &["v1"], &["*/status"], "*"),
            &status,
            false
        ));
        assert!(rule_matches(
            &rule(&[""], &["v1"], &["pods/*"], "*"),
            &status,
            false
        ));
        assert!(!rule_matches(
            &rule(&[""], &["v1"], &["pods/*"], "*"),
            &pod,
            false
        ));
        let beta = rule(&["apps"], &["v1beta1"], &["deployments"], "*");
        assert!(!rule_matches(&beta, &pods, false));
        assert!(rule_matches(&beta, &pods, true));
    }

    #[test]
    fn a_namespace_object_is_matched_by_its_own_labels_and_cluster_objects_skip_the_selector() {
        let init = initializer(json!({
            "image": "x:1",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces", "persistentvolumes"], "scope": "*"}],
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
        let mut volume = namespace(json!({}));
        volume.resource = "persistentvolumes".into();
        volume.kind = "PersistentVolume".into();
        assert!(judge(&init, &volume).intercepted);
    }

    #[test]
    fn a_selector_the_api_server_would_refuse_is_an_error() {
        let selector = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Like".into(),
                values: Some(vec!["x".into()]),
            }]),
        };
        assert!(failed_requirements(&selector, &BTreeMap::new()).is_err());
    }

    #[test]
    fn text_names_each_initializer_its_verdict_and_every_reason() {
        let init = sidecar();
        let request = deployment("shop", json!({"tier": "front"}), json!({}));
        let v = judge(&init, &request);
        let out = text(
            &request.object_shown(),
            "CREATE",
            &request.resource_shown(),
            &[v],
        );
        assert!(
            out.starts_with("Deployment/shop/nginx (CREATE apps/v1 deployments):"),
            "{out}"
        );
        assert!(
            out.contains(
                "sidecar: NOT INTERCEPTED [live MutatingWebhookConfiguration initializer-sidecar]"
            ),
            "{out}"
        );
        assert!(out.contains("    AnnotationGate: "), "{out}");
        let empty = text("Pod/a/b", "CREATE", "v1 pods", &[]);
        assert!(empty.contains("no Initializers"), "{empty}");
    }
}
