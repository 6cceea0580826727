//! Preset Initializer → [`Program`] → MutatingAdmissionPolicy and binding.
//!
//! The policy's scope is the webhook's: the same rules (their mutating operations), the same
//! [`InterceptScope`] (the namespaces, with the mandatory exclusions, and the objects, by
//! equivalent resource), the same failure and reinvocation policies. What the webhook decides inside the preset initializer (the annotation gate, the
//! preset's kinds, labels, annotation and namespaces) becomes `matchConditions`, followed by
//! "needs injection", which is false once everything is there: the policy then does not act,
//! so a reinvocation, or a create of an object that already has it all, changes nothing.

use initializer_crds::constants::{INITIALIZED_BY_ANNOTATION, NAMESPACE_NAME_LABEL};
use initializer_crds::{AnnotationGate, Backend, InterceptRule, Operation, PresetConfig};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use serde::Serialize;
use serde_json::Value;

use super::api::{
    JSONPatch, MatchCondition, MatchResources, MutatingAdmissionPolicy,
    MutatingAdmissionPolicyBinding, MutatingAdmissionPolicyBindingSpec,
    MutatingAdmissionPolicySpec, Mutation, NamedRuleWithOperations,
};
use super::ir::{
    Condition, FieldPath, Keyed, KindProgram, LabelRequirement, NamePattern, POD_KINDS, PodKind,
    Program, Step, first_by_key,
};
use super::render::{self, MAX_EXPRESSION_CODE_POINTS};
use crate::build;
use crate::selector::InterceptScope;
use crate::validate::Validated;

/// Name of the "needs injection" matchCondition.
pub const NEEDS_INJECTION: &str = "needs-injection";
/// Name of the matchCondition of the Initializer's `spec.annotation`.
pub const ANNOTATION_GATE: &str = "initializer-annotation-gate";
/// Name of the matchCondition of the preset's `selector.annotation`.
pub const PRESET_ANNOTATION: &str = "preset-annotation";

/// Why a preset Initializer cannot run as a policy: each names the field, and the Initializer
/// keeps the webhook.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// No `spec.preset`: the initializer is code, which a policy cannot stand in for.
    #[error("spec.preset: not set, so the initializer is code a policy cannot stand in for")]
    NotAPreset,
    /// `spec.image` with `spec.preset`: the preset is read by a custom image.
    #[error(
        "spec.image: the preset is read by a custom image, whose code a policy cannot stand in for"
    )]
    CustomImage,
    /// `backend: InitializerConfiguration`: the initializer runs as a controller on a
    /// Kubernetes 1.7–1.13 API server, which serves no policies.
    #[error("spec.backend: InitializerConfiguration runs on API servers that serve no policies")]
    LegacyBackend,
    /// No rule has an operation a policy can mutate (CREATE, UPDATE, `*`).
    #[error(
        "spec.rules: no rule names CREATE, UPDATE or \"*\", the operations a policy can mutate"
    )]
    NoMutatingOperation,
    /// `selector.kinds` names none of the kinds the preset handles.
    #[error(
        "spec.preset.selector.kinds: names none of Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob"
    )]
    NoPodKind,
    /// Nothing to inject: the webhook changes nothing either.
    #[error("spec.preset.inject: nothing to inject")]
    NothingToInject,
    /// The preset writes the annotation the SDK signs its mark into; a policy cannot sign.
    #[error(
        "spec.preset.inject.annotations: {INITIALIZED_BY_ANNOTATION} is the initializer's signed mark, which a policy cannot write"
    )]
    ReservedAnnotation,
    /// An item without the field that identifies it (a container's name, a mount's path).
    #[error("{field}: must not be empty: it tells whether the item is already there")]
    MissingKey {
        /// The item's identifying field.
        field: String,
    },
    /// A label selector the API server would refuse.
    #[error("{field}: {reason}")]
    InvalidLabelSelector {
        /// The offending part.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// An expression longer than the API server's CEL parser accepts.
    #[error(
        "{field}: compiles to {code_points} code points of CEL, more than the {limit} the API server parses"
    )]
    ExpressionTooLarge {
        /// What makes it large.
        field: String,
        /// Its length.
        code_points: usize,
        /// The parser's limit.
        limit: usize,
    },
    /// An injected item with a field or map key of a name CEL cannot select (a keyword):
    /// the policy could not tell whether an item of the same name already has it.
    #[error(
        "{field}: {name:?} is a keyword of CEL: the policy cannot compare it with an item of the same name"
    )]
    KeywordName {
        /// Where it is.
        field: String,
        /// The name.
        name: String,
    },
    /// An item that cannot be written as JSON.
    #[error("{field}: failed to write as JSON: {message}")]
    Encode {
        /// The item.
        field: String,
        /// serde's message.
        message: String,
    },
}

impl CompileError {
    /// The field the error is about, as a path below the Initializer (`spec.preset.inject`).
    pub fn field(&self) -> &str {
        match self {
            Self::NotAPreset => "spec.preset",
            Self::CustomImage => "spec.image",
            Self::LegacyBackend => "spec.backend",
            Self::NoMutatingOperation => "spec.rules",
            Self::NoPodKind => "spec.preset.selector.kinds",
            Self::NothingToInject => "spec.preset.inject",
            Self::ReservedAnnotation => "spec.preset.inject.annotations",
            Self::MissingKey { field }
            | Self::KeywordName { field, .. }
            | Self::InvalidLabelSelector { field, .. }
            | Self::ExpressionTooLarge { field, .. }
            | Self::Encode { field, .. } => field,
        }
    }
}

/// A compiled preset Initializer.
#[derive(Clone, Debug, PartialEq)]
pub struct Compiled {
    /// The intermediate form the policy was rendered from.
    pub program: Program,
    /// The policy (it acts only through a binding, see [`binding`]).
    pub policy: MutatingAdmissionPolicy,
}

/// Where a binding puts the policy in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindingScope {
    /// Everything the policy matches: the webhook's whole scope.
    Everywhere,
    /// Only in these namespaces (a canary), within what the policy matches.
    Namespaces(Vec<String>),
}

/// The policy's (and its binding's) name.
pub fn policy_name(v: &Validated) -> String {
    policy_name_of(&v.names.base)
}

/// The policy's name for an Initializer whose workload is named `base`.
pub fn policy_name_of(base: &str) -> String {
    format!("initializer-{base}-preset")
}

/// Compiles a validated preset Initializer, or says which field keeps it on the webhook.
pub fn compile(v: &Validated) -> Result<Compiled, CompileError> {
    let spec = &v.spec;
    if spec.backend == Backend::InitializerConfiguration {
        return Err(CompileError::LegacyBackend);
    }
    let Some(preset) = &spec.preset else {
        return Err(CompileError::NotAPreset);
    };
    if spec.image.is_some() {
        return Err(CompileError::CustomImage);
    }
    let program = program(preset, spec.annotation.as_ref())?;
    let resource_rules = resource_rules(&spec.rules)?;
    let scope = InterceptScope::of(v);
    let mut match_conditions = selection_conditions(&program)?;
    let needs_injection = render::needs_injection(&program);
    check_size(&needs_injection, "spec.preset.selector")?;
    match_conditions.push(MatchCondition {
        name: NEEDS_INJECTION.to_owned(),
        expression: needs_injection,
    });
    // One mutation per kind the rules can send: the API server encodes, patches and decodes
    // the object once per mutation, even for a patch the kind test leaves empty. Rules that
    // reach no pod kind keep them all, each doing nothing, as the webhook would.
    let reached: Vec<&KindProgram> = program
        .kinds
        .iter()
        .filter(|k| resource_rules.iter().any(|r| reaches(r, &k.kind)))
        .collect();
    let kinds = if reached.is_empty() {
        program.kinds.iter().collect()
    } else {
        reached
    };
    let mutations = kinds
        .into_iter()
        .map(|k| {
            let expression = render::mutation(k);
            check_size(&expression, "spec.preset.inject")?;
            Ok(Mutation {
                patch_type: "JSONPatch".to_owned(),
                json_patch: Some(JSONPatch {
                    expression: Some(expression),
                }),
                apply_configuration: None,
            })
        })
        .collect::<Result<Vec<_>, CompileError>>()?;
    let policy = MutatingAdmissionPolicy {
        metadata: metadata(v),
        spec: Some(MutatingAdmissionPolicySpec {
            failure_policy: Some(spec.failure_policy.as_str().to_owned()),
            match_conditions: Some(match_conditions),
            match_constraints: Some(MatchResources {
                match_policy: Some(InterceptScope::MATCH_POLICY.to_owned()),
                namespace_selector: Some(scope.namespace_selector),
                object_selector: Some(scope.object_selector),
                resource_rules: Some(resource_rules),
                exclude_resource_rules: None,
            }),
            mutations: Some(mutations),
            reinvocation_policy: Some(spec.reinvocation_policy.as_str().to_owned()),
            ..MutatingAdmissionPolicySpec::default()
        }),
    };
    Ok(Compiled { program, policy })
}

/// The binding that puts the policy of `v` in force within `scope`.
pub fn binding(v: &Validated, scope: &BindingScope) -> MutatingAdmissionPolicyBinding {
    let match_resources = match scope {
        BindingScope::Everywhere => None,
        BindingScope::Namespaces(names) => Some(MatchResources {
            namespace_selector: Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: NAMESPACE_NAME_LABEL.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(names.clone()),
                }]),
            }),
            ..MatchResources::default()
        }),
    };
    MutatingAdmissionPolicyBinding {
        metadata: metadata(v),
        spec: Some(MutatingAdmissionPolicyBindingSpec {
            match_resources,
            param_ref: None,
            policy_name: Some(policy_name(v)),
        }),
    }
}

fn metadata(v: &Validated) -> ObjectMeta {
    ObjectMeta {
        name: Some(policy_name(v)),
        labels: Some(build::labels(v)),
        ..ObjectMeta::default()
    }
}

/// The program's conditions (the annotation gate, the preset's kinds, labels, annotation and
/// namespaces) as `matchConditions`: what the preset initializer checks before it changes
/// anything. The policy has them, and so has the preset's webhook ([`crate::build::webhook`]).
pub fn selection_conditions(program: &Program) -> Result<Vec<MatchCondition>, CompileError> {
    program
        .conditions
        .iter()
        .map(|c| {
            let expression = render::condition(c);
            check_size(&expression, "spec.preset.selector")?;
            Ok(MatchCondition {
                name: c.name().to_owned(),
                expression,
            })
        })
        .collect()
}

fn check_size(expression: &str, field: &str) -> Result<(), CompileError> {
    let code_points = expression.chars().count();
    if code_points > MAX_EXPRESSION_CODE_POINTS {
        return Err(CompileError::ExpressionTooLarge {
            field: field.to_owned(),
            code_points,
            limit: MAX_EXPRESSION_CODE_POINTS,
        });
    }
    Ok(())
}

/// The webhook's rules with the operations a policy can mutate: CREATE, UPDATE and `*`
/// (the API server refuses DELETE and CONNECT in a MutatingAdmissionPolicy; the preset changes
/// nothing on them anyway: a DELETE carries no object to change).
fn resource_rules(rules: &[InterceptRule]) -> Result<Vec<NamedRuleWithOperations>, CompileError> {
    let compiled: Vec<NamedRuleWithOperations> = rules
        .iter()
        .filter_map(|r| {
            let operations: Vec<String> = r
                .operations
                .iter()
                .filter(|o| matches!(o, Operation::Create | Operation::Update | Operation::All))
                .map(|o| o.as_str().to_owned())
                .collect();
            (!operations.is_empty()).then(|| NamedRuleWithOperations {
                api_groups: Some(r.api_groups.clone()),
                api_versions: Some(r.api_versions.clone()),
                resources: Some(r.resources.clone()),
                operations: Some(operations),
                scope: Some(r.effective_scope().as_str().to_owned()),
                resource_names: None,
            })
        })
        .collect();
    if compiled.is_empty() {
        return Err(CompileError::NoMutatingOperation);
    }
    Ok(compiled)
}

/// Whether `rule` can send objects of `kind` to the policy: its group and its resource (or a
/// subresource of it) named, or `*`. Versions are left out: the policy matches equivalent
/// versions ([`InterceptScope::MATCH_POLICY`]).
fn reaches(rule: &NamedRuleWithOperations, kind: &PodKind) -> bool {
    let names = |list: &Option<Vec<String>>, wanted: &str| {
        list.iter().flatten().any(|name| {
            let resource = name.split('/').next().unwrap_or(name);
            resource == "*" || resource == wanted
        })
    };
    names(&rule.api_groups, kind.group) && names(&rule.resources, kind.resource)
}

/// The program of a preset, gated by the Initializer's annotation gate when it has one.
pub fn program(
    preset: &PresetConfig,
    gate: Option<&AnnotationGate>,
) -> Result<Program, CompileError> {
    let selector = &preset.selector;
    let inject = &preset.inject;
    let kinds: Vec<_> = POD_KINDS
        .iter()
        .filter(|k| {
            selector.kinds.is_empty()
                || selector
                    .kinds
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(k.kind))
        })
        .copied()
        .collect();
    if kinds.is_empty() {
        return Err(CompileError::NoPodKind);
    }
    if inject.annotations.contains_key(INITIALIZED_BY_ANNOTATION) {
        return Err(CompileError::ReservedAnnotation);
    }
    let field = |list: &str| format!("spec.preset.inject.{list}");
    let containers = keyed(&inject.containers, &field("containers"), "name", |c| {
        c.name.as_str()
    })?;
    let init_containers = keyed(
        &inject.init_containers,
        &field("initContainers"),
        "name",
        |c| c.name.as_str(),
    )?;
    let volumes = keyed(&inject.volumes, &field("volumes"), "name", |v| {
        v.name.as_str()
    })?;
    // The lists whose items are the preset's ([`Step::Put`]), compared field by field.
    let put = [
        ("containers", containers),
        ("initContainers", init_containers),
        ("volumes", volumes),
    ];
    for (list, items) in &put {
        for (i, item) in items.iter().enumerate() {
            if let Some((at, name)) = keyword_name(&item.value, &format!("{}[{i}]", field(list))) {
                return Err(CompileError::KeywordName { field: at, name });
            }
        }
    }
    let mounts = keyed(
        &inject.volume_mounts,
        &field("volumeMounts"),
        "mountPath",
        |m| m.mount_path.as_str(),
    )?;
    let env = keyed(&inject.env, &field("env"), "name", |e| e.name.as_str())?;
    let labels: Vec<(String, String)> = inject
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let annotations: Vec<(String, String)> = inject
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if put.iter().all(|(_, items)| items.is_empty())
        && mounts.is_empty()
        && env.is_empty()
        && labels.is_empty()
        && annotations.is_empty()
    {
        return Err(CompileError::NothingToInject);
    }
    // The webhook leaves the containers it injects alone, and every container of the object
    // that has the name of one of them.
    let injected: Vec<String> = inject
        .containers
        .iter()
        .chain(&inject.init_containers)
        .map(|c| c.name.clone())
        .collect();

    let mut conditions = Vec::new();
    if let Some(gate) = gate {
        conditions.push(Condition::Annotation {
            condition: ANNOTATION_GATE,
            // The SDK trims the name it reads from INITIALIZER_ANNOTATION.
            name: gate.name.trim().to_owned(),
            required: gate.required,
        });
    }
    conditions.push(Condition::Kinds(kinds.clone()));
    if let Some(labels) = &selector.labels {
        conditions.push(Condition::Labels(label_requirements(labels)?));
    }
    if let Some(annotation) = selector.annotation.as_deref().filter(|a| !a.is_empty()) {
        conditions.push(Condition::Annotation {
            condition: PRESET_ANNOTATION,
            name: annotation.to_owned(),
            required: true,
        });
    }
    if !selector.namespaces.is_empty() {
        conditions.push(Condition::Namespaces(
            selector
                .namespaces
                .iter()
                .map(|p| NamePattern::parse(p))
                .collect(),
        ));
    }

    let kinds = kinds
        .into_iter()
        .map(|kind| {
            let mut steps = Vec::new();
            if !labels.is_empty() || !annotations.is_empty() {
                let mut owners = vec![FieldPath::new()];
                if !kind.is_pod() {
                    owners.push(kind.template.to_vec());
                }
                steps.extend(owners.into_iter().map(|owner| Step::Meta {
                    owner,
                    labels: labels.clone(),
                    annotations: annotations.clone(),
                }));
            }
            let spec = kind.pod_spec();
            let at = |field: &'static str| -> FieldPath {
                spec.iter().copied().chain([field]).collect()
            };
            for list in ["containers", "initContainers"] {
                for (field, key, items) in [
                    ("volumeMounts", "mountPath", &mounts),
                    ("env", "name", &env),
                ] {
                    if !items.is_empty() {
                        steps.push(Step::AppendInEach {
                            list: at(list),
                            skip: injected.clone(),
                            field,
                            key,
                            items: items.clone(),
                        });
                    }
                }
            }
            for (list, items) in &put {
                if !items.is_empty() {
                    steps.push(Step::Put {
                        list: at(list),
                        key: "name",
                        items: items.clone(),
                    });
                }
            }
            KindProgram { kind, steps }
        })
        .collect();
    Ok(Program { conditions, kinds })
}

/// The items as JSON with their keys, the first of each key only; an item without a key is
/// refused.
/// The first field or map key in `value` named like a keyword of CEL, with its path: an
/// item the policy compares field by field ([`render::covers`]) cannot have one.
fn keyword_name(value: &Value, at: &str) -> Option<(String, String)> {
    match value {
        Value::Object(fields) => fields.iter().find_map(|(name, inner)| {
            let path = format!("{at}.{name}");
            if crate::cel::is_keyword(name) {
                Some((path, name.clone()))
            } else {
                keyword_name(inner, &path)
            }
        }),
        Value::Array(elements) => elements
            .iter()
            .enumerate()
            .find_map(|(i, inner)| keyword_name(inner, &format!("{at}[{i}]"))),
        _ => None,
    }
}

fn keyed<T: Serialize>(
    items: &[T],
    field: &str,
    key_field: &str,
    key: impl Fn(&T) -> &str,
) -> Result<Vec<Keyed>, CompileError> {
    let mut pairs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let k = key(item);
        if k.is_empty() {
            return Err(CompileError::MissingKey {
                field: format!("{field}[{i}].{key_field}"),
            });
        }
        let value = serde_json::to_value(item).map_err(|e| CompileError::Encode {
            field: format!("{field}[{i}]"),
            message: e.to_string(),
        })?;
        pairs.push((k.to_owned(), value));
    }
    Ok(first_by_key(pairs)
        .into_iter()
        .map(|(key, value)| Keyed { key, value })
        .collect())
}

/// The preset's label selector as requirements; what the API server would refuse in a
/// selector is refused here.
fn label_requirements(selector: &LabelSelector) -> Result<Vec<LabelRequirement>, CompileError> {
    const FIELD: &str = "spec.preset.selector.labels";
    let mut requirements: Vec<LabelRequirement> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| LabelRequirement::In(k.clone(), vec![v.clone()]))
        .collect();
    for (i, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let here = format!("{FIELD}.matchExpressions[{i}]");
        let refuse = |what: &str, reason: String| CompileError::InvalidLabelSelector {
            field: format!("{here}{what}"),
            reason,
        };
        if expression.key.is_empty() {
            return Err(refuse(".key", "must not be empty".to_owned()));
        }
        let key = expression.key.clone();
        let values = expression.values.clone().unwrap_or_default();
        let requirement = match expression.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(refuse(
                    ".values",
                    format!("operator {} needs at least one value", expression.operator),
                ));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(refuse(
                    ".values",
                    format!("operator {} takes no values", expression.operator),
                ));
            }
            "In" => LabelRequirement::In(key, values),
            "NotIn" => LabelRequirement::NotIn(key, values),
            "Exists" => LabelRequirement::Exists(key),
            "DoesNotExist" => LabelRequirement::DoesNotExist(key),
            other => {
                return Err(refuse(
                    ".operator",
                    format!("unknown operator {other:?} (In, NotIn, Exists or DoesNotExist)"),
                ));
            }
        };
        requirements.push(requirement);
    }
    Ok(requirements)
}
