//! Whether an object is intercepted by an Initializer, and if not, exactly why: the pure
//! decision behind `kubectl initializer why`.
//!
//! The truth is the live MutatingWebhookConfiguration: its rules, `namespaceSelector` and
//! `objectSelector` are evaluated the way the API server evaluates them. The Initializer's spec
//! explains a failed requirement (which part the user wrote, which part is the operator's
//! mandatory exclusion) and the `matchConditions` the operator compiles from it: the annotation
//! gate (judged by the SDK's own [`kube_initializer::gate::AnnotationGate`]) and, for the preset
//! initializer, the preset's selection (judged by the policy compiler's interpreter). When
//! nothing is registered, the configuration the operator would register (built by the operator's
//! own [`initializer_core::build::webhook`]) says what would happen once it is.
//!
//! For a preset Initializer, the `MutatingAdmissionPolicy` the operator compiles from
//! `spec.preset` is judged on the same request ([`policy`]): its constraints, and which of its
//! `matchConditions` fails and why.
//!
//! The pieces: `request` is what is observed (the attributes the API server matches on),
//! `rules` and `selector` evaluate one rule or selector the API server's way, this module
//! decides the [`Verdict`], [`policy`] explains the compiled policy's match, and `render`
//! writes it for a person.

pub mod policy;
mod render;
mod request;
mod rules;
mod selector;

use std::collections::BTreeMap;

use initializer_crds::constants::{NAMESPACE_NAME_LABEL, SYSTEM_NAMESPACES};
use initializer_crds::{Initializer, InitializerSpec};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, MutatingWebhookConfiguration};
use kube::ResourceExt;
use kube_initializer::gate::AnnotationGate;
use serde::Serialize;
use serde_json::Value;

pub use render::text;
pub use request::{Request, string_map};
pub use rules::rule_matches;
pub use selector::{Requirement, failed_requirements};

use rules::show_rule;
use selector::{show_labels, show_requirement};

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
    /// The webhook's matchCondition for `spec.annotation` is false: the API server does not
    /// call the initializer.
    AnnotationGate,
    /// A matchCondition from the preset's selection (`spec.preset.selector`: kinds, labels,
    /// annotation, namespaces) is false: the API server does not call the preset initializer.
    PresetSelection,
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
            ReasonKind::PresetSelection => "PresetSelection",
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
    /// matchConditions (the annotation gate, the preset's selection) are among them only when
    /// the rules and selectors let the request through, as the API server evaluates them.
    pub reasons: Vec<Reason>,
    /// What else a reader should know (degraded configuration, conditions not evaluated).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// For a preset Initializer: how the policy compiled from its preset judges the object
    /// (set by [`policy::explain`]; `None` without a preset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<policy::PolicyExplanation>,
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
    initializer_core::validate::validate(&initializer.spec, operator_namespace, &name)
        .map(|validated| initializer_core::build::webhook(&validated, ""))
        .map_err(|refusals| {
            format!(
                "the operator refuses the spec: {}",
                initializer_core::validate::describe(&refusals)
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
            .find(|c| c.type_ == initializer_crds::conditions::REGISTERED)
    });
    let mut detail = format!("no MutatingWebhookConfiguration is registered; phase {phase}");
    if let Some(suspension) = initializer.suspension() {
        detail.push_str(&format!(
            "; {} (resume with `kubectl initializer resume`)",
            suspension.describe()
        ));
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
        let unexplained: Vec<&str> = hook
            .match_conditions
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .filter(|name| !operator_condition(name))
            .collect();
        if !unexplained.is_empty() {
            notes.push(format!(
                "webhook {} has matchConditions the operator does not write ({}), which are \
                 not evaluated here",
                hook.name,
                unexplained.join(", ")
            ));
        }
        if live.is_some() && hook.failure_policy.as_deref() == Some("Ignore") {
            let degraded = configuration.is_some_and(initializer_core::build::is_degraded);
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
    // The matchConditions are evaluated only for a request the rules and selectors let through.
    let called = known && reasons.iter().all(|r| r.kind == ReasonKind::NotRegistered);
    if called {
        reasons.extend(annotation_gate(spec, request));
        reasons.extend(preset_selection(spec, request));
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
        policy: None,
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

/// Whether a matchCondition is one the operator writes ([`initializer_core::build::webhook_conditions`]),
/// which [`annotation_gate`] and [`preset_selection`] explain.
fn operator_condition(name: &str) -> bool {
    name == initializer_core::build::HAS_OBJECT
        || name == initializer_core::policy::compile::ANNOTATION_GATE
        || name.starts_with("preset-")
}

/// The webhook's matchConditions from the preset's selection (the preset initializer without an
/// image), other than the annotation gate: each that is false, explained from the preset.
fn preset_selection(spec: &InitializerSpec, request: &Request) -> Vec<Reason> {
    let Some(preset) = spec.preset.as_ref().filter(|_| spec.image.is_none()) else {
        return Vec::new();
    };
    let Ok(program) = initializer_core::policy::program(preset, spec.annotation.as_ref()) else {
        return Vec::new();
    };
    let facts = policy::facts(request);
    program
        .conditions
        .iter()
        .filter(|c| c.name() != initializer_core::policy::compile::ANNOTATION_GATE)
        .filter(|c| !c.holds(&facts, &request.object))
        .map(|c| Reason {
            kind: ReasonKind::PresetSelection,
            detail: format!(
                "the API server does not call the initializer: matchCondition {}: {}",
                c.name(),
                policy::condition_detail(c, false, spec, &facts, &request.object)
            ),
        })
        .collect()
}

/// The webhook's matchCondition for the annotation gate (the SDK's gate too, so the initializer
/// would leave the object alone if it were called).
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
            "the API server does not call the initializer: matchCondition {} (spec.annotation): \
             its annotation {} is {value:?}",
            initializer_core::policy::compile::ANNOTATION_GATE,
            gate.name
        ),
        None => format!(
            "the API server does not call the initializer: matchCondition {} (spec.annotation) \
             requires the annotation {} (any value but \"false\"), which the object lacks",
            initializer_core::policy::compile::ANNOTATION_GATE,
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

#[cfg(test)]
pub(crate) mod tests;
