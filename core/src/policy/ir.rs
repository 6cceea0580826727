//! The intermediate form of a compiled preset, and its interpreter.
//!
//! A [`Program`] is what a preset does, said once in terms both engines understand: the
//! conditions that select a request (they become the policy's `matchConditions`) and, per kind
//! with pods, a list of guarded patch [`Step`]s (they become its JSONPatch `mutations`). The
//! same program is rendered to CEL (`render`) and run here, in Rust, on JSON objects, so unit
//! tests can feed one corpus to the webhook's preset code and to the program and compare.
//!
//! The interpreter follows what the API server does with the rendered text, step for step:
//! every guard looks at the object as it came in (one CEL evaluation sees one `object`), every
//! step yields `add` (and `replace`) operations, and the operations are applied in order with
//! JSON Patch semantics (RFC 6902, as `evanphx/json-patch` v4 does in the API server: `add` to
//! `/-` fails when the array is missing). So each step adds a whole array or map when it is missing and
//! appends to it (or replaces an element of it) when it is present, and no two steps write to
//! the same place.
//!
//! Objects are taken as the API server hands them to admission: decoded from typed Go values,
//! so an absent list or map is absent, never `null`.

use std::collections::BTreeSet;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use kube_initializer::mutate::covers;
use serde_json::Value;

/// A place in an object, by field names from its root (`["spec", "template", "spec"]`).
pub type FieldPath = Vec<&'static str>;

/// A kind with pods that the preset initializer handles, and where its pod template is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodKind {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Its resource (plural, lowercase), as admission rules name it.
    pub resource: &'static str,
    /// The pod template's place (its `metadata` and `spec`); empty for a Pod, which is its own.
    pub template: &'static [&'static str],
}

impl PodKind {
    /// The `v1` kind `kind` of `group`, served as `resource` (every pod kind the initializers
    /// handle is at `v1`).
    const fn v1(
        group: &'static str,
        kind: &'static str,
        resource: &'static str,
        template: &'static [&'static str],
    ) -> Self {
        PodKind {
            group,
            version: "v1",
            kind,
            resource,
            template,
        }
    }

    /// Where the pod spec is.
    pub fn pod_spec(&self) -> FieldPath {
        let mut path = self.template.to_vec();
        path.push("spec");
        path
    }

    /// Whether this is a Pod (its own metadata is the pods' metadata).
    pub fn is_pod(&self) -> bool {
        self.template.is_empty()
    }
}

/// Every kind the preset initializer registers a handler for (`handle_pod_kinds`), with the
/// version it decodes: the webhook ignores any other kind, and so does the policy.
pub const POD_KINDS: [PodKind; 7] = [
    PodKind::v1("", "Pod", "pods", &[]),
    PodKind::v1("apps", "Deployment", "deployments", TEMPLATE),
    PodKind::v1("apps", "StatefulSet", "statefulsets", TEMPLATE),
    PodKind::v1("apps", "DaemonSet", "daemonsets", TEMPLATE),
    PodKind::v1("apps", "ReplicaSet", "replicasets", TEMPLATE),
    PodKind::v1("batch", "Job", "jobs", TEMPLATE),
    PodKind::v1(
        "batch",
        "CronJob",
        "cronjobs",
        &["spec", "jobTemplate", "spec", "template"],
    ),
];

/// Where the workload kinds keep their pod template.
const TEMPLATE: &[&str] = &["spec", "template"];

/// What a policy sees of the request besides the object: `request.kind` and
/// `request.namespace`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestFacts<'a> {
    /// `request.kind.group`.
    pub group: &'a str,
    /// `request.kind.version`.
    pub version: &'a str,
    /// `request.kind.kind`.
    pub kind: &'a str,
    /// `request.namespace` (empty for cluster-scoped objects).
    pub namespace: &'a str,
}

impl RequestFacts<'_> {
    /// Whether the request is for `kind`.
    pub fn is(&self, kind: &PodKind) -> bool {
        self.group == kind.group && self.version == kind.version && self.kind == kind.kind
    }
}

/// One requirement of a label selector, on the object's own labels (`matchLabels` entries are
/// `In` with one value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelRequirement {
    /// The label is set to one of the values.
    In(String, Vec<String>),
    /// The label is absent, or set to none of the values.
    NotIn(String, Vec<String>),
    /// The label is set.
    Exists(String),
    /// The label is absent.
    DoesNotExist(String),
}

/// A namespace name pattern of the preset's selector: exact, `prefix*` or `*suffix`
/// (`kube_initializer::gate::name_matches`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamePattern {
    /// The whole name.
    Exact(String),
    /// Names starting with it.
    Prefix(String),
    /// Names ending with it.
    Suffix(String),
}

impl NamePattern {
    /// The pattern as the preset writes it.
    pub fn parse(pattern: &str) -> Self {
        if let Some(prefix) = pattern.strip_suffix('*') {
            Self::Prefix(prefix.to_owned())
        } else if let Some(suffix) = pattern.strip_prefix('*') {
            Self::Suffix(suffix.to_owned())
        } else {
            Self::Exact(pattern.to_owned())
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Self::Exact(exact) => name == exact,
            Self::Prefix(prefix) => name.starts_with(prefix.as_str()),
            Self::Suffix(suffix) => name.ends_with(suffix.as_str()),
        }
    }
}

/// A test of the request that must hold for the policy to act: one `matchCondition` each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// An annotation gate: with `required`, objects carrying the annotation with a value other
    /// than `"false"` (trimmed); without, every object except those whose value is `"false"`.
    Annotation {
        /// The matchCondition's name.
        condition: &'static str,
        /// The annotation.
        name: String,
        /// Whether the annotation must be present.
        required: bool,
    },
    /// `request.kind` is one of these.
    Kinds(Vec<PodKind>),
    /// The object's labels satisfy every requirement.
    Labels(Vec<LabelRequirement>),
    /// `request.namespace` matches one of the patterns.
    Namespaces(Vec<NamePattern>),
}

impl Condition {
    /// The matchCondition's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Annotation { condition, .. } => condition,
            Self::Kinds(_) => "preset-kinds",
            Self::Labels(_) => "preset-labels",
            Self::Namespaces(_) => "preset-namespaces",
        }
    }

    /// Whether the condition holds.
    pub fn holds(&self, request: &RequestFacts<'_>, object: &Value) -> bool {
        match self {
            Self::Annotation { name, required, .. } => {
                match string_map(object, &["metadata", "annotations"]).and_then(|a| a.get(name)) {
                    Some(value) => value.as_str().is_some_and(|v| v.trim() != "false"),
                    None => !required,
                }
            }
            Self::Kinds(kinds) => kinds.iter().any(|k| request.is(k)),
            Self::Labels(requirements) => {
                let labels = string_map(object, &["metadata", "labels"]);
                let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
                requirements.iter().all(|r| match r {
                    LabelRequirement::In(key, values) => {
                        label(key).is_some_and(|v| values.iter().any(|x| x == v))
                    }
                    LabelRequirement::NotIn(key, values) => {
                        label(key).is_none_or(|v| !values.iter().any(|x| x == v))
                    }
                    LabelRequirement::Exists(key) => labels.is_some_and(|l| l.contains_key(key)),
                    LabelRequirement::DoesNotExist(key) => {
                        !labels.is_some_and(|l| l.contains_key(key))
                    }
                })
            }
            Self::Namespaces(patterns) => patterns.iter().any(|p| p.matches(request.namespace)),
        }
    }
}

/// An item to add to a list, with the value of the field that identifies it there (a
/// container's or volume's `name`, a mount's `mountPath`).
#[derive(Clone, Debug, PartialEq)]
pub struct Keyed {
    /// The identifying field's value.
    pub key: String,
    /// The item, as JSON.
    pub value: Value,
}

/// One guarded change. Each step writes where no other step of its kind program writes.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Labels and annotations added to `<owner>.metadata`, each unless its key is set (with
    /// any value). A missing `metadata`, `labels` or `annotations` is added whole.
    Meta {
        /// Whose metadata: the object's (`[]`) or the pod template's.
        owner: FieldPath,
        /// Labels to add, in order.
        labels: Vec<(String, String)>,
        /// Annotations to add, in order.
        annotations: Vec<(String, String)>,
    },
    /// Items made the elements of their key in the list at `list` (containers, init containers
    /// and volumes, by `name`): each appended when no element has its key, and put in the place
    /// of each element with its key that does not cover it (`kube_initializer::mutate::covers`:
    /// every field the item sets, with its value). A missing list is added whole; a missing
    /// parent is left alone.
    Put {
        /// The list.
        list: FieldPath,
        /// The identifying field of its elements.
        key: &'static str,
        /// What to add, in order, no two with the same key.
        items: Vec<Keyed>,
    },
    /// In every element of `list` whose `name` is not in `skip`, items appended to its list
    /// field `field`, each unless an element's `key` field equals the item's key, a missing
    /// list added whole (env vars and mounts of the object's own containers: defaults, which
    /// the object's own values win over).
    AppendInEach {
        /// The list of containers.
        list: FieldPath,
        /// Names of the containers left alone (the injected ones).
        skip: Vec<String>,
        /// The list field of each container (`env`, `volumeMounts`).
        field: &'static str,
        /// The identifying field of that list's elements.
        key: &'static str,
        /// What to add, in order, no two with the same key.
        items: Vec<Keyed>,
    },
}

/// The steps of one kind.
#[derive(Clone, Debug, PartialEq)]
pub struct KindProgram {
    /// The kind, and where its pod template is.
    pub kind: PodKind,
    /// The changes, in order.
    pub steps: Vec<Step>,
}

/// A compiled preset.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// Every condition must hold for the policy to act.
    pub conditions: Vec<Condition>,
    /// One program per kind the preset touches.
    pub kinds: Vec<KindProgram>,
}

/// What the program does with one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Evaluation {
    /// A condition does not hold (or the kind is not handled): the policy is not applied.
    Skipped,
    /// Everything is already there: the "needs injection" condition is false, so the policy is
    /// not applied (and a reinvocation changes nothing).
    AlreadyInjected,
    /// The operations the policy's mutations yield, in order.
    Patched(Vec<PatchOperation>),
}

/// Why applying a program failed: an operation did not apply (a bug of the compiler: the
/// API server would refuse the request under `failurePolicy: Fail`).
#[derive(Clone, Debug, thiserror::Error)]
#[error("failed to apply the compiled preset's patch: {0}")]
pub struct ApplyError(String);

impl Program {
    /// Evaluates the program on one request, as the API server evaluates the policy.
    pub fn evaluate(&self, request: &RequestFacts<'_>, object: &Value) -> Evaluation {
        if !self.conditions.iter().all(|c| c.holds(request, object)) {
            return Evaluation::Skipped;
        }
        let Some(program) = self.kinds.iter().find(|k| request.is(&k.kind)) else {
            return Evaluation::Skipped;
        };
        let operations: Vec<PatchOperation> = program
            .steps
            .iter()
            .flat_map(|s| s.operations(object))
            .collect();
        if operations.is_empty() {
            Evaluation::AlreadyInjected
        } else {
            Evaluation::Patched(operations)
        }
    }

    /// Whether the `needs-injection` matchCondition holds: the request is for a kind the
    /// program handles and some step has something to add. Judged alone, without the other
    /// conditions, so that a caller explaining the policy can say which condition fails.
    pub fn needs_injection(&self, request: &RequestFacts<'_>, object: &Value) -> bool {
        self.kinds
            .iter()
            .find(|k| request.is(&k.kind))
            .is_some_and(|k| k.steps.iter().any(|s| !s.operations(object).is_empty()))
    }

    /// The object as the policy leaves it.
    pub fn apply(&self, request: &RequestFacts<'_>, object: &Value) -> Result<Value, ApplyError> {
        let mut patched = object.clone();
        if let Evaluation::Patched(operations) = self.evaluate(request, object) {
            json_patch::patch(&mut patched, &operations).map_err(|e| ApplyError(e.to_string()))?;
        }
        Ok(patched)
    }
}

impl Step {
    /// The operations this step yields on `object` (empty: nothing to do).
    pub fn operations(&self, object: &Value) -> Vec<PatchOperation> {
        match self {
            Step::Meta {
                owner,
                labels,
                annotations,
            } => meta_operations(object, owner, labels, annotations),
            Step::Put { list, key, items } => {
                if !parent_exists(object, list) {
                    return Vec::new();
                }
                put_operations(get(object, list), pointer(list), key, items)
            }
            Step::AppendInEach {
                list,
                skip,
                field,
                key,
                items,
            } => {
                if !parent_exists(object, list) {
                    return Vec::new();
                }
                let Some(containers) = get(object, list).map(elements) else {
                    return Vec::new();
                };
                let own = |c: &Value| {
                    !c.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| skip.iter().any(|s| s == n))
                };
                let at = |i: usize| {
                    let mut p = pointer(list);
                    p.push_back(i.to_string());
                    p.push_back(*field);
                    p
                };
                // The rendered CEL first adds the whole list to every container that lacks it,
                // then appends each item to the containers that have one: the same order here.
                let mut operations: Vec<PatchOperation> = containers
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| own(c) && c.get(*field).is_none())
                    .map(|(i, _)| add(at(i), whole_list(items)))
                    .collect();
                for item in items {
                    for (i, container) in containers.iter().enumerate() {
                        if let Some(present) = container.get(*field)
                            && own(container)
                            && !contains_key(present, key, &item.key)
                        {
                            let mut path = at(i);
                            path.push_back("-");
                            operations.push(add(path, item.value.clone()));
                        }
                    }
                }
                operations
            }
        }
    }
}

fn meta_operations(
    object: &Value,
    owner: &[&'static str],
    labels: &[(String, String)],
    annotations: &[(String, String)],
) -> Vec<PatchOperation> {
    let Some(owner_value) = get(object, owner) else {
        return Vec::new();
    };
    let mut metadata_path = pointer(owner);
    metadata_path.push_back("metadata");
    let Some(metadata) = owner_value.get("metadata") else {
        let mut whole = serde_json::Map::new();
        for (field, entries) in [("labels", labels), ("annotations", annotations)] {
            if !entries.is_empty() {
                whole.insert(field.to_owned(), string_object(entries));
            }
        }
        if whole.is_empty() {
            return Vec::new();
        }
        return vec![add(metadata_path, Value::Object(whole))];
    };
    let mut operations = Vec::new();
    for (field, entries) in [("labels", labels), ("annotations", annotations)] {
        if entries.is_empty() {
            continue;
        }
        let mut map_path = metadata_path.clone();
        map_path.push_back(field);
        match metadata.get(field) {
            None => operations.push(add(map_path, string_object(entries))),
            Some(present) => {
                for (key, value) in entries {
                    if present.get(key).is_none() {
                        let mut path = map_path.clone();
                        path.push_back(key.as_str());
                        operations.push(add(path, Value::String(value.clone())));
                    }
                }
            }
        }
    }
    operations
}

/// Per item, in order: its `add` to the end when no element has its key, else a `replace` of
/// each element with its key that does not cover it (the rendered CEL's order).
fn put_operations(
    present: Option<&Value>,
    list: PointerBuf,
    key: &str,
    items: &[Keyed],
) -> Vec<PatchOperation> {
    let Some(present) = present else {
        return vec![add(list, whole_list(items))];
    };
    let mut operations = Vec::new();
    for item in items {
        if !contains_key(present, key, &item.key) {
            let mut path = list.clone();
            path.push_back("-");
            operations.push(add(path, item.value.clone()));
            continue;
        }
        for (i, element) in elements(present).iter().enumerate() {
            if element.get(key).and_then(Value::as_str) == Some(item.key.as_str())
                && !covers(element, &item.value)
            {
                let mut path = list.clone();
                path.push_back(i.to_string());
                operations.push(PatchOperation::Replace(ReplaceOperation {
                    path,
                    value: item.value.clone(),
                }));
            }
        }
    }
    operations
}

fn whole_list(items: &[Keyed]) -> Value {
    Value::Array(items.iter().map(|i| i.value.clone()).collect())
}

fn string_object(entries: &[(String, String)]) -> Value {
    Value::Object(
        entries
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn contains_key(list: &Value, key: &str, wanted: &str) -> bool {
    elements(list)
        .iter()
        .any(|e| e.get(key).and_then(Value::as_str) == Some(wanted))
}

fn elements(list: &Value) -> &[Value] {
    list.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// The JSON pointer of a field path.
pub fn pointer(path: &[&'static str]) -> PointerBuf {
    PointerBuf::from_tokens(path.iter().copied())
}

/// The value at `path` when it and every field on the way are present (what CEL's chain of
/// `has()` tests), the object itself for the empty path.
fn get<'v>(object: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter()
        .try_fold(object, |value, field| value.get(*field))
}

fn parent_exists(object: &Value, path: &[&str]) -> bool {
    match path.split_last() {
        Some((_, parent)) => get(object, parent).is_some(),
        None => true,
    }
}

fn string_map<'v>(object: &'v Value, path: &[&str]) -> Option<&'v serde_json::Map<String, Value>> {
    get(object, path).and_then(Value::as_object)
}

/// Keeps the first of items that share a key: what the webhook's sequential, idempotent
/// merge keeps (the second finds the first already there).
pub fn first_by_key<T>(items: impl IntoIterator<Item = (String, T)>) -> Vec<(String, T)> {
    let mut seen = BTreeSet::new();
    let mut kept = Vec::new();
    for (key, item) in items {
        if seen.insert(key.clone()) {
            kept.push((key, item));
        }
    }
    kept
}
