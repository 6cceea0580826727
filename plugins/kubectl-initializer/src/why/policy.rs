//! The compiled policy's match, explained as the webhook's is.
//!
//! A preset Initializer compiles into a `MutatingAdmissionPolicy` (the operator's own compiler,
//! [`initializer_core::policy`]). This module judges one request against that policy the
//! way the API server does: first its `matchConstraints` (the webhook's rules with the
//! operations a policy can mutate, and the same namespace and object selectors, evaluated by
//! the same code as the webhook's, so the reasons read the same), then every `matchCondition`,
//! each run by the compiler's interpreter ([`initializer_core::policy::Program`]) and, when
//! false, explained from the preset's fields. A preset that does not compile says which field
//! keeps it on the webhook.

use std::collections::BTreeMap;

use initializer_core::policy::api::MatchResources;
use initializer_core::policy::compile::{ANNOTATION_GATE, NEEDS_INJECTION};
use initializer_core::policy::ir::{Condition, POD_KINDS, PodKind};
use initializer_core::policy::{Compiled, RequestFacts};
use initializer_core::validate::Validated;
use initializer_crds::{Initializer, InitializerSpec};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, RuleWithOperations, ServiceReference, WebhookClientConfig,
};
use kube::ResourceExt;
use serde::Serialize;
use serde_json::Value;

use super::selector::{failed_requirements, show_labels, show_requirement};
use super::{OperatorFacts, Reason, Request, evaluate_hook, string_map};

/// A preset Initializer's spec as the operator validates it, and the policy compiled from it.
#[derive(Clone, Debug)]
pub struct CompiledPreset {
    /// The validated spec (the workload namespace and names the scope is built with).
    pub validated: Validated,
    /// The program and the policy.
    pub compiled: Compiled,
}

/// One `matchCondition` of the policy, judged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionResult {
    /// The condition's name (`preset-labels`).
    pub name: String,
    /// Whether it is true for the request.
    pub holds: bool,
    /// What it checks and what the object has, for a person.
    pub detail: String,
}

/// How the compiled policy judges one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyVerdict {
    /// The policy's name.
    pub policy: String,
    /// Whether the policy changes the object: its constraints match and every condition holds.
    pub mutates: bool,
    /// Why its `matchConstraints` leave the request out (empty when they match).
    pub constraints: Vec<Reason>,
    /// Every `matchCondition`, in order, when the constraints match (the API server evaluates
    /// none otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionResult>,
    /// What else a reader should know (a selector the API server would refuse).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl PolicyVerdict {
    /// Whether the policy matches the request but finds nothing to add: only `needs-injection`
    /// is false.
    pub fn already_injected(&self) -> bool {
        self.constraints.is_empty()
            && self.notes.is_empty()
            && !self.conditions.is_empty()
            && self
                .conditions
                .iter()
                .all(|c| c.holds || c.name == NEEDS_INJECTION)
            && !self.mutates
    }

    /// The reasons it does not change the object: the constraints that fail, then every false
    /// condition, as `(check, detail)`.
    pub fn reasons(&self) -> Vec<(String, String)> {
        let constraints = self
            .constraints
            .iter()
            .map(|r| (r.kind.as_str().to_string(), r.detail.clone()));
        let conditions = self
            .conditions
            .iter()
            .filter(|c| !c.holds)
            .map(|c| (c.name.clone(), c.detail.clone()));
        let notes = self
            .notes
            .iter()
            .map(|n| ("Unknown".to_string(), n.clone()));
        constraints.chain(conditions).chain(notes).collect()
    }
}

/// The compiled policy's side of a `why` verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PolicyExplanation {
    /// The preset compiles: how the policy judges the request.
    Compiled(PolicyVerdict),
    /// The preset does not compile: the field that keeps the Initializer on the webhook.
    NotCompiled {
        /// The field (`spec.image`).
        field: String,
        /// The compiler's message.
        reason: String,
    },
    /// The policy could not be judged (why).
    Unknown(String),
}

/// The compiled policy of a preset Initializer, with the operator in `operator_namespace`:
/// `None` without `spec.preset` (the initializer is code, and nothing is compiled), else the
/// policy or why there is none.
pub fn compile(
    initializer: &Initializer,
    operator_namespace: Option<&str>,
) -> Option<Result<CompiledPreset, PolicyExplanation>> {
    initializer.spec.preset.as_ref()?;
    let Some(operator_namespace) = operator_namespace else {
        return Some(Err(PolicyExplanation::Unknown(
            "the operator's namespace was not found (pass --operator-namespace)".to_string(),
        )));
    };
    let validated = match initializer_core::validate::validate(
        &initializer.spec,
        operator_namespace,
        &initializer.name_any(),
    ) {
        Ok(validated) => validated,
        Err(refusals) => {
            return Some(Err(PolicyExplanation::Unknown(format!(
                "the operator refuses the spec: {}",
                initializer_core::validate::describe(&refusals)
            ))));
        }
    };
    Some(match initializer_core::policy::compile(&validated) {
        Ok(compiled) => Ok(CompiledPreset {
            validated,
            compiled,
        }),
        Err(e) => Err(PolicyExplanation::NotCompiled {
            field: e.field().to_string(),
            reason: e.to_string(),
        }),
    })
}

/// The explanation `why` shows for `initializer`: `None` when it has no preset.
pub fn explain(
    initializer: &Initializer,
    operator: &OperatorFacts,
    request: &Request,
) -> Option<PolicyExplanation> {
    Some(match compile(initializer, operator.namespace.as_deref())? {
        Ok(preset) => PolicyExplanation::Compiled(judge(&preset, operator, request)),
        Err(explanation) => explanation,
    })
}

/// What `request.kind` and `request.namespace` are for the policy.
pub fn facts(request: &Request) -> RequestFacts<'_> {
    RequestFacts {
        group: &request.group,
        version: &request.version,
        kind: &request.kind,
        namespace: request.namespace.as_deref().unwrap_or_default(),
    }
}

/// Judges `request` against the compiled policy, as the API server would.
pub fn judge(
    preset: &CompiledPreset,
    operator: &OperatorFacts,
    request: &Request,
) -> PolicyVerdict {
    let v = &preset.validated;
    let program = &preset.compiled.program;
    let mut verdict = PolicyVerdict {
        policy: initializer_core::policy::policy_name(v),
        mutates: false,
        constraints: Vec::new(),
        conditions: Vec::new(),
        notes: Vec::new(),
    };
    let constraints = preset
        .compiled
        .policy
        .spec
        .as_ref()
        .and_then(|s| s.match_constraints.as_ref());
    if let Some(constraints) = constraints {
        match evaluate_hook(
            &constraints_hook(v, constraints),
            &v.spec,
            operator,
            request,
        ) {
            Ok(reasons) => verdict.constraints = reasons,
            Err(why) => verdict.notes.push(why),
        }
    }
    if !verdict.constraints.is_empty() || !verdict.notes.is_empty() {
        return verdict;
    }
    let facts = facts(request);
    let object = &request.object;
    verdict.conditions = program
        .conditions
        .iter()
        .map(|c| {
            let holds = c.holds(&facts, object);
            ConditionResult {
                name: c.name().to_string(),
                holds,
                detail: condition_detail(c, holds, &v.spec, &facts, object),
            }
        })
        .collect();
    let handled = program.kinds.iter().any(|k| facts.is(&k.kind));
    let needs = program.needs_injection(&facts, object);
    verdict.conditions.push(ConditionResult {
        name: NEEDS_INJECTION.to_string(),
        holds: needs,
        detail: if needs {
            "something spec.preset.inject adds is missing".to_string()
        } else if handled {
            "everything spec.preset.inject adds is already there".to_string()
        } else {
            format!("the preset injects nothing into a {}", shown_kind(&facts))
        },
    });
    verdict.mutates = verdict.conditions.iter().all(|c| c.holds);
    verdict
}

/// The policy's `matchConstraints` as a webhook, so that the webhook's evaluation (rules,
/// selectors, and the explanation of mandatory exclusions by the workload namespace) judges
/// them.
fn constraints_hook(v: &Validated, constraints: &MatchResources) -> MutatingWebhook {
    let rules = constraints
        .resource_rules
        .iter()
        .flatten()
        .map(|r| RuleWithOperations {
            api_groups: r.api_groups.clone(),
            api_versions: r.api_versions.clone(),
            operations: r.operations.clone(),
            resources: r.resources.clone(),
            scope: r.scope.clone(),
        })
        .collect();
    MutatingWebhook {
        name: initializer_core::policy::policy_name(v),
        client_config: WebhookClientConfig {
            service: Some(ServiceReference {
                name: v.names.base.clone(),
                namespace: v.namespace.clone(),
                ..ServiceReference::default()
            }),
            ..WebhookClientConfig::default()
        },
        rules: Some(rules),
        namespace_selector: constraints.namespace_selector.clone(),
        object_selector: constraints.object_selector.clone(),
        match_policy: constraints.match_policy.clone(),
        ..MutatingWebhook::default()
    }
}

fn shown_kind(facts: &RequestFacts<'_>) -> String {
    if facts.group.is_empty() {
        format!("{} {}", facts.version, facts.kind)
    } else {
        format!("{}/{} {}", facts.group, facts.version, facts.kind)
    }
}

fn shown_pod_kind(kind: &PodKind) -> String {
    shown_kind(&RequestFacts {
        group: kind.group,
        version: kind.version,
        kind: kind.kind,
        namespace: "",
    })
}

/// What a condition checks and what the object has.
pub(super) fn condition_detail(
    condition: &Condition,
    holds: bool,
    spec: &InitializerSpec,
    facts: &RequestFacts<'_>,
    object: &Value,
) -> String {
    let selector = spec.preset.as_ref().map(|p| &p.selector);
    match condition {
        Condition::Annotation {
            condition,
            name,
            required,
        } => {
            let field = if *condition == ANNOTATION_GATE {
                "spec.annotation"
            } else {
                "spec.preset.selector.annotation"
            };
            let value = object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(name.as_str()))
                .and_then(Value::as_str);
            match (holds, value) {
                (true, Some(value)) => format!("{field}: its annotation {name} is {value:?}"),
                (true, None) => format!(
                    "{field}: the object lacks the annotation {name}, which is not required"
                ),
                (false, Some(value)) => format!("{field}: its annotation {name} is {value:?}"),
                (false, None) if *required => format!(
                    "{field} requires the annotation {name} (any value but \"false\"), which the object lacks"
                ),
                (false, None) => format!("{field}: the annotation {name} is not a string"),
            }
        }
        Condition::Kinds(kinds) => {
            let names: Vec<String> = kinds.iter().map(shown_pod_kind).collect();
            let field = if selector.is_some_and(|s| !s.kinds.is_empty()) {
                "spec.preset.selector.kinds selects"
            } else {
                "the preset handles"
            };
            if holds {
                format!("{field} {}; the object is one", names.join(", "))
            } else {
                let all: Vec<String> = POD_KINDS.iter().map(shown_pod_kind).collect();
                let names = if names.len() == all.len() {
                    format!("only {}", names.join(", "))
                } else {
                    names.join(", ")
                };
                format!("{field} {names}; the object is {}", shown_kind(facts))
            }
        }
        Condition::Labels(_) => {
            let labels: BTreeMap<String, String> = string_map(object.pointer("/metadata/labels"));
            let failed = selector
                .and_then(|s| s.labels.as_ref())
                .map(|l| failed_requirements(l, &labels));
            match failed {
                Some(Ok(failed)) if !failed.is_empty() => format!(
                    "spec.preset.selector.labels requires {}; the object's labels are {}",
                    failed
                        .iter()
                        .map(show_requirement)
                        .collect::<Vec<_>>()
                        .join(", "),
                    show_labels(&labels)
                ),
                _ if holds => format!(
                    "spec.preset.selector.labels selects the object's labels {}",
                    show_labels(&labels)
                ),
                _ => format!(
                    "spec.preset.selector.labels does not select the object's labels {}",
                    show_labels(&labels)
                ),
            }
        }
        Condition::Namespaces(_) => {
            let patterns = selector
                .map(|s| s.namespaces.join(", "))
                .unwrap_or_default();
            let verb = if holds { "match" } else { "do not match" };
            format!(
                "spec.preset.selector.namespaces [{patterns}] {verb} namespace {:?}",
                facts.namespace
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::why::tests::{deployment, sidecar};
    use serde_json::json;

    fn preset_initializer(preset: Value, annotation: Option<Value>) -> Initializer {
        let mut init = sidecar();
        init.spec.image = None;
        init.spec.preset = Some(serde_json::from_value(preset).unwrap());
        init.spec.annotation = annotation.map(|a| serde_json::from_value(a).unwrap());
        init
    }

    fn facts_here() -> OperatorFacts {
        OperatorFacts {
            namespace: Some("initializer-system".to_string()),
        }
    }

    fn compiled(init: &Initializer, request: &Request) -> PolicyVerdict {
        match explain(init, &facts_here(), request) {
            Some(PolicyExplanation::Compiled(v)) => v,
            other => panic!("not compiled: {other:?}"),
        }
    }

    fn sidecar_preset() -> Value {
        json!({
            "selector": {"labels": {"matchLabels": {"app": "web"}}, "namespaces": ["shop"]},
            "inject": {"containers": [{"name": "proxy", "image": "proxy:1"}]}
        })
    }

    /// A Deployment request whose template has one container of its own.
    fn with_app(labels: Value, annotations: Value) -> Request {
        let mut request = deployment("shop", labels, annotations);
        request.object["spec"] =
            json!({"template": {"spec": {"containers": [{"name": "app", "image": "app:1"}]}}});
        request
    }

    fn gate() -> Option<Value> {
        Some(json!({"name": "initializer.kubernetes.io/sidecar", "required": true}))
    }

    #[test]
    fn an_initializer_without_a_preset_has_no_policy() {
        let request = deployment("shop", json!({"tier": "front"}), json!({}));
        assert_eq!(explain(&sidecar(), &facts_here(), &request), None);
    }

    #[test]
    fn a_preset_read_by_a_custom_image_names_the_field_that_keeps_the_webhook() {
        let mut init = preset_initializer(sidecar_preset(), gate());
        init.spec.image = Some("custom:1".into());
        let request = deployment("shop", json!({"tier": "front"}), json!({}));
        match explain(&init, &facts_here(), &request) {
            Some(PolicyExplanation::NotCompiled { field, .. }) => assert_eq!(field, "spec.image"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            explain(&init, &OperatorFacts::default(), &request),
            Some(PolicyExplanation::Unknown(why)) if why.contains("--operator-namespace")
        ));
    }

    #[test]
    fn every_condition_holding_means_the_policy_mutates() {
        let init = preset_initializer(sidecar_preset(), gate());
        let request = with_app(
            json!({"tier": "front", "app": "web"}),
            json!({"initializer.kubernetes.io/sidecar": "true"}),
        );
        let v = compiled(&init, &request);
        assert!(v.mutates, "{v:?}");
        assert!(v.reasons().is_empty());
        let names: Vec<&str> = v.conditions.iter().map(|c| c.name.as_str()).collect();
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
    }

    #[test]
    fn the_failing_conditions_are_named_and_explained() {
        let init = preset_initializer(sidecar_preset(), gate());
        let request = with_app(json!({"tier": "front", "app": "db"}), json!({}));
        let v = compiled(&init, &request);
        assert!(!v.mutates);
        let reasons = v.reasons();
        let checks: Vec<&str> = reasons.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(checks, ["initializer-annotation-gate", "preset-labels"]);
        assert!(
            reasons[0]
                .1
                .contains("requires the annotation initializer.kubernetes.io/sidecar"),
            "{reasons:?}"
        );
        assert!(reasons[1].1.contains("requires app=web"), "{reasons:?}");
        assert!(reasons[1].1.contains("app=db"), "{reasons:?}");
    }

    #[test]
    fn the_constraints_are_the_webhooks_scope() {
        let init = preset_initializer(sidecar_preset(), None);
        let request = deployment("kube-system", json!({"tier": "front"}), json!({}));
        let v = compiled(&init, &request);
        assert!(!v.mutates);
        assert!(v.conditions.is_empty(), "no condition is evaluated: {v:?}");
        assert_eq!(
            v.constraints.iter().map(|r| r.kind).collect::<Vec<_>>(),
            [super::super::ReasonKind::MandatoryExclusion]
        );
        let mut delete = deployment("shop", json!({"tier": "front"}), json!({}));
        delete.operation = "DELETE".into();
        let v = compiled(&init, &delete);
        assert_eq!(
            v.constraints.iter().map(|r| r.kind).collect::<Vec<_>>(),
            [super::super::ReasonKind::Rule],
            "a policy cannot mutate a DELETE"
        );
    }

    #[test]
    fn an_object_with_everything_already_there_is_matched_but_left_alone() {
        let init = preset_initializer(sidecar_preset(), None);
        let mut request = deployment("shop", json!({"tier": "front", "app": "web"}), json!({}));
        // The preset's container as the API server stores it (defaults added).
        request.object["spec"] = json!({"template": {"spec": {"containers": [
            {"name": "app", "image": "app:1"},
            {"name": "proxy", "image": "proxy:1", "imagePullPolicy": "IfNotPresent"}
        ]}}});
        let v = compiled(&init, &request);
        assert!(!v.mutates);
        assert!(v.already_injected(), "{v:?}");
        assert_eq!(v.reasons()[0].0, "needs-injection");
        assert!(v.reasons()[0].1.contains("already there"));
        // A container of its name with another image is no proof: it is replaced.
        request.object["spec"]["template"]["spec"]["containers"][1]["image"] = json!("other:1");
        let v = compiled(&init, &request);
        assert!(v.mutates, "{v:?}");
    }
}
