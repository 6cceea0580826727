//! `kubectl initializer diff`: the exact change an Initializer would make to the objects of a
//! manifest, offline: no cluster is read.
//!
//! Every object goes through both engines a preset can run on, each with the code it runs:
//!
//! - **the webhook**: the scope the operator would register (its own validation and
//!   [`initializer_core::build::webhook`], judged by [`crate::why::decide`] as `why` judges
//!   a live configuration, the annotation gate included), then the preset initializer's own
//!   code ([`preset_initializer::initializer`]) called through the SDK's router as the API
//!   server calls it;
//! - **the policy**: the `MutatingAdmissionPolicy` the operator compiles from the preset, its
//!   constraints and `matchConditions` judged by [`crate::why::policy`], its JSON patch applied
//!   by the compiler's own interpreter.
//!
//! Both must leave every object the same; where they do not, both changes are reported
//! ([`Outcome::Disagree`]). An Initializer with its own image runs code only it can run:
//! whether it is called is known offline, what it changes is not ([`Outcome::Unknown`]).
//!
//! What the cluster would say is assumed and reported ([`Assumptions`]): the operator's
//! namespace, the namespace of objects that name none, and the labels of each namespace.
//!
//! Everything here is pure (the webhook's code runs in-process, without a socket); reading the
//! files and printing is in `commands`.

mod render;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use initializer_core::policy::ir::{POD_KINDS, PodKind};
use initializer_crds::constants::NAMESPACE_NAME_LABEL;
use initializer_crds::{Backend, Initializer, PresetConfig};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use kube_initializer::advanced::Tuning;
use kube_initializer::testing::{ReviewBuilder, Tester};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use render::{text, unified, yaml};

use crate::object::group_version;
use crate::why::policy::{self, CompiledPreset};
use crate::why::{self, OperatorFacts, Request};

/// The namespace the operator is installed in unless told otherwise (`install`'s default).
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "initializer-system";

/// Kinds of the built-in API that are cluster-scoped. Offline there is no discovery to ask;
/// every other kind is taken as namespaced.
const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "APIService",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "CSIDriver",
    "CSINode",
    "CustomResourceDefinition",
    "IngressClass",
    "Initializer",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "RuntimeClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
];

/// What `diff` assumes about the cluster it does not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assumptions {
    /// The operator's namespace (never intercepted; the default workload namespace).
    pub operator_namespace: String,
    /// Whether the operator's namespace was given (`--operator-namespace`) or assumed.
    pub operator_namespace_given: bool,
    /// The namespace of objects whose manifest names none (`-n`, else `default`).
    pub default_namespace: String,
    /// Labels every namespace is taken to carry (`--namespace-labels`), besides
    /// `kubernetes.io/metadata.name`, which the API server sets on each.
    pub namespace_labels: BTreeMap<String, String>,
}

impl Default for Assumptions {
    fn default() -> Self {
        Self {
            operator_namespace: DEFAULT_OPERATOR_NAMESPACE.to_string(),
            operator_namespace_given: false,
            default_namespace: "default".to_string(),
            namespace_labels: BTreeMap::new(),
        }
    }
}

impl Assumptions {
    /// The labels namespace `name` is taken to have.
    pub fn labels_of(&self, name: &str) -> BTreeMap<String, String> {
        let mut labels = self.namespace_labels.clone();
        labels.insert(NAMESPACE_NAME_LABEL.to_string(), name.to_string());
        labels
    }
}

/// One check that keeps an engine from changing an object, or that it passed without a change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Which check: a `why` reason (`Rule`, `AnnotationGate`, ...), a `matchCondition` of the
    /// policy (`preset-labels`, `needs-injection`), or `Kind`, `PresetSelector`,
    /// `AlreadyInjected`, `Code`, `Patch`.
    pub check: String,
    /// Exactly what, for a person.
    pub detail: String,
}

impl Check {
    fn new(check: &str, detail: impl Into<String>) -> Self {
        Self {
            check: check.to_string(),
            detail: detail.into(),
        }
    }
}

/// What one engine makes of an object.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineResult {
    /// Whether the engine acts on the object: the webhook is called and the preset selects it;
    /// or the policy's constraints and every `matchCondition` but `needs-injection` hold.
    pub matched: bool,
    /// Why it leaves the object as it is (empty when it changes it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Check>,
    /// The JSON patch (RFC 6902) from the object to what the engine makes of it.
    #[serde(skip_serializing_if = "patch_is_empty")]
    pub patch: json_patch::Patch,
    /// The object as the engine leaves it; `None` when that cannot be known offline.
    #[serde(skip)]
    pub after: Option<Value>,
}

fn patch_is_empty(patch: &json_patch::Patch) -> bool {
    patch.0.is_empty()
}

impl EngineResult {
    /// The engine leaves `object` as it is.
    fn left_alone(matched: bool, reasons: Vec<Check>, object: &Value) -> Self {
        Self {
            matched,
            reasons,
            patch: json_patch::Patch(Vec::new()),
            after: Some(object.clone()),
        }
    }

    /// The engine turns `before` into `after`.
    fn changed(before: &Value, after: Value) -> Self {
        Self {
            matched: true,
            reasons: Vec::new(),
            patch: json_patch::diff(before, &after),
            after: Some(after),
        }
    }
}

/// What happens to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// The Initializer changes it (both engines the same way).
    Changed,
    /// The Initializer acts on it but finds everything already there.
    Unchanged,
    /// The Initializer leaves it alone: outside its scope or its preset's selector.
    NotMatched,
    /// The Initializer is called for it and runs its own code: the change is unknown offline.
    Unknown,
    /// The webhook's code and the compiled policy change it differently (a bug).
    Disagree,
}

/// The change to one object.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectDiff {
    /// `Kind/namespace/name`.
    pub object: String,
    /// What happens to it.
    pub outcome: Outcome,
    /// Why it is not changed (not matched, unchanged, unknown): the policy's reasons when a
    /// policy is compiled (they name the exact `matchCondition`), else the webhook's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Check>,
    /// The change as a JSON patch (RFC 6902), when [`Outcome::Changed`].
    #[serde(skip_serializing_if = "patch_is_empty")]
    pub patch: json_patch::Patch,
    /// The change as a unified diff of the YAML, when [`Outcome::Changed`].
    #[serde(skip_serializing_if = "String::is_empty")]
    pub diff: String,
    /// The webhook's result: the preset initializer's code within the registered scope.
    pub webhook: EngineResult,
    /// The compiled policy's result, when the preset compiles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<EngineResult>,
    /// The object as both engines received it.
    #[serde(skip)]
    pub before: Value,
}

/// What an Initializer runs.
#[derive(Debug)]
enum Code {
    /// A preset: the preset initializer's code, and the policy compiled from it (or why none).
    Preset {
        webhook: Box<Tester>,
        preset: Box<PresetConfig>,
        policy: Result<Box<CompiledPreset>, String>,
    },
    /// Code only the initializer can run: its image.
    Opaque(String),
}

/// An Initializer ready to judge objects: validated as the operator validates it, with the
/// webhook configuration the operator would register and the code it runs.
#[derive(Debug)]
pub struct Prepared {
    initializer: Initializer,
    name: String,
    configuration: MutatingWebhookConfiguration,
    code: Code,
}

impl Prepared {
    /// The Initializer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The engines that compute the change, for the report's headline.
    pub fn engines(&self) -> Vec<String> {
        match &self.code {
            Code::Preset { policy, .. } => {
                let mut engines =
                    vec!["webhook (the preset initializer's own code, in-process)".to_string()];
                if let Ok(p) = policy {
                    engines.push(format!(
                        "policy {} (compiled from spec.preset, run by the compiler's interpreter)",
                        initializer_core::policy::policy_name(&p.validated)
                    ));
                }
                engines
            }
            Code::Opaque(_) => vec!["the webhook's scope only (its code is not run)".to_string()],
        }
    }

    /// What else the reader should know about this Initializer's results.
    pub fn notes(&self) -> Vec<String> {
        match &self.code {
            Code::Preset { policy, .. } => {
                let mut notes = vec![
                    "the webhook also writes its signed mark, the annotation \
                     initializer.dev/initialized-by, on every object it changes (not shown: it \
                     holds a time stamp and a key only the initializer has; the policy writes none)"
                        .to_string(),
                ];
                if let Err(why) = policy {
                    notes.push(format!("no policy: {why} (the webhook stays the engine)"));
                }
                notes
            }
            Code::Opaque(image) => vec![format!(
                "Initializer {} runs its own code (spec.image {image}): diff says which objects \
                 it is called for, not what it changes",
                self.name
            )],
        }
    }

    /// Whether what the Initializer changes can be computed offline.
    pub fn is_opaque(&self) -> bool {
        matches!(self.code, Code::Opaque(_))
    }
}

/// Validates `initializer` as the operator would (in `assumptions.operator_namespace`) and
/// prepares its engines; the refusal, for a spec the operator would refuse.
pub fn prepare(initializer: &Initializer, assumptions: &Assumptions) -> Result<Prepared, String> {
    let name = initializer.name_any();
    if initializer.spec.backend == Backend::InitializerConfiguration {
        return Err(format!(
            "Initializer {name}: spec.backend InitializerConfiguration (Kubernetes 1.7-1.13) is \
             not modelled offline; diff models the webhook and the policy"
        ));
    }
    let validated = initializer_core::validate::validate(
        &initializer.spec,
        &assumptions.operator_namespace,
        &name,
    )
    .map_err(|refusals| {
        format!(
            "Initializer {name}: the operator refuses the spec: {}",
            initializer_core::validate::describe(&refusals)
        )
    })?;
    let configuration = initializer_core::build::webhook(&validated, "");
    let code = match (&initializer.spec.image, &initializer.spec.preset) {
        (Some(image), _) => Code::Opaque(image.clone()),
        (None, Some(preset)) => {
            // As the operator passes the gate (INITIALIZER_ANNOTATION) and the SDK reads it.
            let gate = initializer
                .spec
                .annotation
                .as_ref()
                .filter(|g| !g.name.trim().is_empty())
                .map(|g| kube_initializer::AnnotationGate::new(g.name.trim(), g.required));
            // The mark is left out: it is signed with the serving key, and a policy writes none.
            let webhook = preset_initializer::initializer()
                .mark_initialized(false)
                .annotation_gate(gate)
                .fixed_config(preset.clone());
            let policy = initializer_core::policy::compile(&validated)
                .map(|compiled| {
                    Box::new(CompiledPreset {
                        validated: validated.clone(),
                        compiled,
                    })
                })
                .map_err(|e| e.to_string());
            Code::Preset {
                webhook: Box::new(Tester::new(webhook)),
                preset: Box::new(preset.clone()),
                policy,
            }
        }
        (None, None) => {
            return Err(format!(
                "Initializer {name}: neither spec.image nor spec.preset is set"
            ));
        }
    };
    Ok(Prepared {
        initializer: initializer.clone(),
        name,
        configuration,
        code,
    })
}

/// The request the API server would make for creating `object`: its group, version and kind
/// from the manifest, the resource and scope guessed offline, the namespace from the manifest
/// or assumed, and that namespace's assumed labels.
pub fn request_for(object: &Value, assumptions: &Assumptions) -> Request {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = group_version(api_version);
    // Kubernetes' own offline guess (the plural rules kubectl uses without discovery).
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, kind));
    let namespaced = !CLUSTER_SCOPED_KINDS.contains(&kind);
    let namespace = namespaced.then(|| {
        object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
            .unwrap_or(assumptions.default_namespace.as_str())
            .to_string()
    });
    let mut object = object.clone();
    let name = crate::object::place_in_namespace(&mut object, namespace.as_deref());
    let namespace_labels = namespace
        .as_deref()
        .map(|ns| assumptions.labels_of(ns))
        .unwrap_or_default();
    Request {
        group,
        version,
        resource: resource.plural,
        subresource: String::new(),
        kind: kind.to_string(),
        namespaced,
        namespace,
        name,
        operation: "CREATE".to_string(),
        object,
        namespace_labels,
    }
}

/// The kind with pods the preset initializer handles that `request` is for, if any.
fn pod_kind(request: &Request) -> Option<&'static PodKind> {
    POD_KINDS.iter().find(|k| {
        k.group == request.group && k.version == request.version && k.kind == request.kind
    })
}

fn shown_pod_kinds() -> String {
    POD_KINDS
        .iter()
        .map(|k| k.kind)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The review the API server would send for `object`: decoded into its Kubernetes type and
/// written back, as the API server hands an object to admission (fields Kubernetes does not
/// know are dropped).
fn review_for(kind: &PodKind, object: &Value) -> Result<ReviewBuilder, String> {
    fn typed<K>(object: &Value) -> Result<ReviewBuilder, String>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        serde_json::from_value::<K>(object.clone())
            .map(|typed| kube_initializer::testing::review(&typed))
            .map_err(|e| format!("failed to read it as a {}: {e}", K::kind(&())))
    }
    match kind.kind {
        "Pod" => typed::<Pod>(object),
        "Deployment" => typed::<Deployment>(object),
        "StatefulSet" => typed::<StatefulSet>(object),
        "DaemonSet" => typed::<DaemonSet>(object),
        "ReplicaSet" => typed::<ReplicaSet>(object),
        "Job" => typed::<Job>(object),
        "CronJob" => typed::<CronJob>(object),
        other => Err(format!("no type for kind {other}")),
    }
}

/// What the Initializer `prepared` does to `object` (one object of a manifest), through both
/// engines; an error for an object that is not valid for its kind.
pub async fn diff_object(
    prepared: &Prepared,
    object: &Value,
    assumptions: &Assumptions,
) -> Result<ObjectDiff, String> {
    let mut request = request_for(object, assumptions);
    let kind = pod_kind(&request);
    let review = match (kind, &prepared.code) {
        (Some(kind), Code::Preset { .. }) => {
            let review = review_for(kind, &request.object)
                .map_err(|e| format!("{}: {e}", request.object_shown()))?
                .namespace(request.namespace.as_deref());
            // Both engines see the object as the API server would hand it over.
            request.object = review.object().clone();
            Some(review)
        }
        _ => None,
    };
    let operator = OperatorFacts {
        namespace: Some(assumptions.operator_namespace.clone()),
    };
    let webhook = webhook_engine(prepared, kind, review.as_ref(), &operator, &request).await?;
    let policy = match &prepared.code {
        Code::Preset { policy: Ok(p), .. } => Some(policy_engine(p, &operator, &request)),
        _ => None,
    };
    Ok(compose(&prepared.name, &request, webhook, policy))
}

/// The webhook: called within the scope the operator would register, then the preset
/// initializer's code.
async fn webhook_engine(
    prepared: &Prepared,
    kind: Option<&PodKind>,
    review: Option<&ReviewBuilder>,
    operator: &OperatorFacts,
    request: &Request,
) -> Result<EngineResult, String> {
    let before = &request.object;
    let verdict = why::decide(
        &prepared.initializer,
        Some(&prepared.configuration),
        Err(""),
        operator,
        request,
    );
    if !verdict.intercepted {
        let reasons = verdict
            .reasons
            .iter()
            .map(|r| Check::new(r.kind.as_str(), r.detail.clone()))
            .collect();
        return Ok(EngineResult::left_alone(false, reasons, before));
    }
    let (webhook, preset) = match &prepared.code {
        Code::Preset {
            webhook, preset, ..
        } => (webhook, preset),
        Code::Opaque(image) => {
            return Ok(EngineResult {
                matched: true,
                reasons: vec![Check::new(
                    "Code",
                    format!(
                        "the initializer is called; what its code (spec.image {image}) changes \
                         is known only by running it"
                    ),
                )],
                patch: json_patch::Patch(Vec::new()),
                after: None,
            });
        }
    };
    let (Some(kind), Some(review)) = (kind, review) else {
        return Ok(EngineResult::left_alone(
            false,
            vec![Check::new(
                "Kind",
                format!(
                    "the preset initializer is called but has no handler for {} {}: it handles \
                     {} (apps/v1 and batch/v1 for the workloads)",
                    request.kind,
                    request.resource_shown(),
                    shown_pod_kinds()
                ),
            )],
            before,
        ));
    };
    let answer = webhook.call(review).await.map_err(|e| {
        format!(
            "{}: the preset initializer failed: {e}",
            request.object_shown()
        )
    })?;
    if !answer.allowed() {
        return Err(format!(
            "{}: the preset initializer refused it: {}",
            request.object_shown(),
            answer.message().unwrap_or_default()
        ));
    }
    let after = answer.patched_json().map_err(|e| {
        format!(
            "{}: the preset initializer's patch does not apply: {e}",
            request.object_shown()
        )
    })?;
    if &after != before {
        return Ok(EngineResult::changed(before, after));
    }
    // Unchanged: the preset's own selector (the same function the handler starts with) says
    // whether it was left out or found everything there.
    let meta: ObjectMeta = before
        .get("metadata")
        .cloned()
        .and_then(|m| serde_json::from_value(m).ok())
        .unwrap_or_default();
    if preset_initializer::selects(
        &preset.selector,
        kind.kind,
        &meta,
        request.namespace.as_deref(),
    ) {
        Ok(EngineResult::left_alone(
            true,
            vec![Check::new(
                "AlreadyInjected",
                "everything spec.preset.inject adds is already there",
            )],
            before,
        ))
    } else {
        Ok(EngineResult::left_alone(
            false,
            vec![Check::new(
                "PresetSelector",
                "spec.preset.selector (kinds, labels, annotation, namespaces) does not select it",
            )],
            before,
        ))
    }
}

/// The policy: its constraints and conditions judged, then its patch applied by the
/// interpreter.
fn policy_engine(
    preset: &CompiledPreset,
    operator: &OperatorFacts,
    request: &Request,
) -> EngineResult {
    let before = &request.object;
    let verdict = policy::judge(preset, operator, request);
    if !verdict.mutates {
        let reasons = verdict
            .reasons()
            .into_iter()
            .map(|(check, detail)| Check { check, detail })
            .collect();
        return EngineResult::left_alone(verdict.already_injected(), reasons, before);
    }
    match preset
        .compiled
        .program
        .apply(&policy::facts(request), before)
    {
        Ok(after) => EngineResult::changed(before, after),
        // The API server would refuse the request: a compiler bug, shown as a disagreement.
        Err(e) => EngineResult::left_alone(true, vec![Check::new("Patch", e.to_string())], before),
    }
}

/// The object's outcome from both engines' results.
pub fn compose(
    initializer: &str,
    request: &Request,
    webhook: EngineResult,
    policy: Option<EngineResult>,
) -> ObjectDiff {
    let before = &request.object;
    let object = request.object_shown();
    let outcome = match (&webhook.after, &policy) {
        (None, _) => Outcome::Unknown,
        (Some(w), Some(p)) if p.after.as_ref() != Some(w) => Outcome::Disagree,
        (Some(w), _) if w != before => Outcome::Changed,
        _ if policy.as_ref().unwrap_or(&webhook).matched => Outcome::Unchanged,
        _ => Outcome::NotMatched,
    };
    let reasons = match outcome {
        Outcome::Changed | Outcome::Disagree => Vec::new(),
        Outcome::Unknown => webhook.reasons.clone(),
        Outcome::Unchanged | Outcome::NotMatched => {
            policy.as_ref().unwrap_or(&webhook).reasons.clone()
        }
    };
    let (patch, diff) = match (&webhook.after, outcome) {
        (Some(after), Outcome::Changed) => (
            webhook.patch.clone(),
            unified(
                &yaml(before),
                &yaml(after),
                &object,
                &format!("{object} (after Initializer {initializer})"),
            ),
        ),
        _ => (json_patch::Patch(Vec::new()), String::new()),
    };
    ObjectDiff {
        object,
        outcome,
        reasons,
        patch,
        diff,
        webhook,
        policy,
        before: before.clone(),
    }
}

/// What was assumed, for the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Assumed {
    /// The operator's namespace.
    pub operator_namespace: String,
    /// Whether it was given rather than assumed.
    pub operator_namespace_given: bool,
    /// The labels taken for each namespace an object is in.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
}

/// One Initializer's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializerReport {
    /// The Initializer's name.
    pub initializer: String,
    /// The engines that computed the change.
    pub engines: Vec<String>,
    /// What else to know.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Each object, in the manifest's order.
    pub objects: Vec<ObjectDiff>,
}

/// Everything `diff` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// What was assumed about the cluster.
    pub assumed: Assumed,
    /// Each Initializer, applied alone to the manifest.
    pub initializers: Vec<InitializerReport>,
}

impl Report {
    /// The objects whose outcome is `outcome`, over every Initializer.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.initializers
            .iter()
            .flat_map(|i| &i.objects)
            .filter(|o| o.outcome == outcome)
            .count()
    }
}

/// Applies each Initializer alone to every object and reports.
pub async fn diff_all(
    initializers: &[Prepared],
    objects: &[Value],
    assumptions: &Assumptions,
) -> Result<Report, String> {
    let mut namespace_labels = BTreeMap::new();
    let mut reports = Vec::new();
    for prepared in initializers {
        let mut diffs = Vec::new();
        for object in objects {
            let diff = diff_object(prepared, object, assumptions).await?;
            if let Some(ns) = diff
                .before
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
            {
                namespace_labels.insert(ns.to_string(), assumptions.labels_of(ns));
            }
            diffs.push(diff);
        }
        reports.push(InitializerReport {
            initializer: prepared.name().to_string(),
            engines: prepared.engines(),
            notes: prepared.notes(),
            objects: diffs,
        });
    }
    Ok(Report {
        assumed: Assumed {
            operator_namespace: assumptions.operator_namespace.clone(),
            operator_namespace_given: assumptions.operator_namespace_given,
            namespace_labels,
        },
        initializers: reports,
    })
}
