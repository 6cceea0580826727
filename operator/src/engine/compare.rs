//! The proof's pure half: the corpus dressed so the Initializer selects it, and two stored
//! objects compared the way the engines must agree (what a policy and a webhook stored for the
//! same create, but for what differs between any two creates and the webhook's signed mark).

use std::collections::BTreeMap;

use initializer_crds::Operation;
use initializer_crds::constants::INITIALIZED_BY_ANNOTATION;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use crate::policy::corpus::{self, CorpusObject};
use crate::policy::ir::{POD_KINDS, PodKind};
use crate::policy::{Evaluation, Program, RequestFacts};
use crate::validate::Validated;

/// The label that puts a corpus object in the canary binding's scope: with it, the policy acts
/// (and the webhook, called after it, finds nothing left to do); without it, only the webhook.
pub const PROOF_LABEL: &str = "initializer.dev/engine-proof";
/// The prefix of every corpus object's name in the canary namespace, so a dry-run create never
/// collides with a real object's name there.
pub const NAME_PREFIX: &str = "initializer-proof-";

/// Most differences an Event lists.
const MAX_DIFFERENCES: usize = 5;
/// Longest value an Event shows of one difference.
const MAX_VALUE_CHARS: usize = 120;

/// One object to create through both engines.
#[derive(Clone, Debug, PartialEq)]
pub struct ProofObject {
    /// What it exercises (the corpus's name).
    pub name: &'static str,
    /// The pod kind it is.
    pub kind: &'static PodKind,
    /// The object as created (its name prefixed, dressed for the Initializer's selectors).
    pub object: Value,
    /// Whether the preset changes it in the canary namespace (the compiler's interpreter says).
    pub injected: bool,
}

/// The corpus as the proof creates it in `namespace`: only the kinds the Initializer's rules
/// intercept, each dressed with what its selectors ask for ([`dress`]), and told whether the
/// preset changes it there.
pub fn proof_corpus(v: &Validated, program: &Program, namespace: &str) -> Vec<ProofObject> {
    corpus::corpus()
        .into_iter()
        .filter_map(|CorpusObject { name, object }| {
            let kind = POD_KINDS.iter().find(|k| k.kind == object["kind"])?;
            if !intercepted(v, kind) {
                return None;
            }
            let mut object = object;
            object["metadata"]["name"] = Value::String(format!("{NAME_PREFIX}{name}"));
            dress(&mut object, v);
            let facts = RequestFacts {
                group: kind.group,
                version: kind.version,
                kind: kind.kind,
                namespace,
            };
            let injected = matches!(
                program.evaluate(&facts, &object),
                Evaluation::Patched(operations) if !operations.is_empty()
            );
            Some(ProofObject {
                name,
                kind,
                object,
                injected,
            })
        })
        .collect()
}

/// Whether the Initializer's rules intercept creates of `kind`.
fn intercepted(v: &Validated, kind: &PodKind) -> bool {
    let any_or = |values: &[String], wanted: &str| values.iter().any(|x| x == "*" || x == wanted);
    let plural = plural(kind);
    v.spec.rules.iter().any(|rule| {
        any_or(&rule.api_groups, kind.group)
            && any_or(&rule.api_versions, kind.version)
            && any_or(&rule.resources, &plural)
            && rule
                .operations
                .iter()
                .any(|o| matches!(o, Operation::Create | Operation::All))
    })
}

/// The resource name of a pod kind (every one of them is its kind, lower case, plus `s`).
pub fn plural(kind: &PodKind) -> String {
    format!("{}s", kind.kind.to_lowercase())
}

/// Adds to `object` the labels and annotations the Initializer's selectors ask for (the
/// webhook's object selector, the preset's label selector and annotation, a required
/// annotation gate), so the proof exercises the preset and not only its refusals. A corpus
/// object that opts out (by a label or an annotation the selectors refuse) keeps doing so: only
/// what a selector requires is added, never a value it refuses.
pub fn dress(object: &mut Value, v: &Validated) {
    let mut labels = BTreeMap::new();
    let preset = v.spec.preset.as_ref();
    for selector in [
        v.spec.object_selector.as_ref(),
        preset.and_then(|p| p.selector.labels.as_ref()),
    ]
    .into_iter()
    .flatten()
    {
        labels.extend(required_labels(selector));
    }
    let mut annotations = BTreeMap::new();
    if let Some(name) = preset.and_then(|p| p.selector.annotation.as_ref()) {
        annotations.insert(name.clone(), "true".to_owned());
    }
    if let Some(gate) = v.spec.annotation.as_ref().filter(|g| g.required) {
        annotations.insert(gate.name.clone(), "true".to_owned());
    }
    for (field, wanted) in [("labels", labels), ("annotations", annotations)] {
        if wanted.is_empty() {
            continue;
        }
        let map = object["metadata"][field]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut map = map;
        for (key, value) in wanted {
            map.entry(key).or_insert(Value::String(value));
        }
        object["metadata"][field] = Value::Object(map);
    }
}

/// Labels that satisfy what `selector` requires: `matchLabels`, the first value of `In`, any
/// value for `Exists`.
fn required_labels(selector: &LabelSelector) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = selector.match_labels.clone().unwrap_or_default();
    for requirement in selector.match_expressions.iter().flatten() {
        let value = match requirement.operator.as_str() {
            "In" => requirement
                .values
                .as_ref()
                .and_then(|values| values.first().cloned()),
            "Exists" => Some("true".to_owned()),
            _ => None,
        };
        if let Some(value) = value {
            labels.entry(requirement.key.clone()).or_insert(value);
        }
    }
    labels
}

/// `object` with the proof label, for the canary binding.
pub fn with_proof_label(object: &Value) -> Value {
    let mut object = object.clone();
    let mut labels = object["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(PROOF_LABEL.to_owned(), Value::String("true".to_owned()));
    object["metadata"]["labels"] = Value::Object(labels);
    object
}

/// Whether the webhook's signed mark is on a stored object: it marks only what it changed, so
/// an object the policy injected (before the webhook was called) carries none.
pub fn marked(stored: &Value) -> bool {
    stored["metadata"]["annotations"]
        .get(INITIALIZED_BY_ANNOTATION)
        .is_some()
}

/// Leaves out what differs between two creates of the same object: identity, times, the
/// namespace, status (a Pod's QoS class is computed after admission), the random suffix of the
/// service account token volume, the object's uid wherever it is copied (a Job's selector and
/// labels), the proof label, and the webhook's initialized-by mark, which is signed for one
/// object at one time and which a policy does not write.
pub fn comparable(object: &Value) -> Value {
    let uid = object["metadata"]["uid"]
        .as_str()
        .unwrap_or("none")
        .to_owned();
    let mut object = object.clone();
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "namespace",
        ] {
            metadata.remove(field);
        }
        for (field, key) in [
            ("annotations", INITIALIZED_BY_ANNOTATION),
            ("labels", PROOF_LABEL),
        ] {
            if let Some(map) = metadata.get_mut(field).and_then(Value::as_object_mut) {
                map.remove(key);
                if map.is_empty() {
                    metadata.remove(field);
                }
            }
        }
    }
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    // A Job copies its labels (the proof label among them) into its template and selector.
    for pointer in [
        "/spec/template/metadata/labels",
        "/spec/selector/matchLabels",
        "/spec/jobTemplate/spec/template/metadata/labels",
    ] {
        if let Some(map) = object.pointer_mut(pointer).and_then(Value::as_object_mut) {
            map.remove(PROOF_LABEL);
        }
    }
    normalize_strings(&mut object, &uid);
    object
}

fn normalize_strings(value: &mut Value, uid: &str) {
    match value {
        Value::String(s) => {
            if let Some(suffix) = s.strip_prefix("kube-api-access-")
                && suffix.len() == 5
            {
                *s = "kube-api-access-*".to_owned();
            }
            if s.contains(uid) {
                *s = s.replace(uid, "<uid>");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| normalize_strings(v, uid)),
        Value::Object(map) => map.values_mut().for_each(|v| normalize_strings(v, uid)),
        _ => {}
    }
}

/// Where what the policy and the webhook stored differ: [`labelled_differences`] with the
/// sides named `policy` and `webhook`.
pub fn differences(policy: &Value, webhook: &Value) -> Vec<String> {
    labelled_differences(policy, webhook, ("policy", "webhook"))
}

/// Where two objects differ, as JSON pointers with both values under the sides' `names` (at
/// most five, each value cut to 120 characters): empty when they agree.
pub fn labelled_differences(left: &Value, right: &Value, names: (&str, &str)) -> Vec<String> {
    let mut out = Vec::new();
    walk(left, right, names, &mut String::new(), &mut out);
    out
}

fn walk(
    left: &Value,
    right: &Value,
    names: (&str, &str),
    path: &mut String,
    out: &mut Vec<String>,
) {
    if out.len() >= MAX_DIFFERENCES || left == right {
        return;
    }
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            let keys: std::collections::BTreeSet<&String> = l.keys().chain(r.keys()).collect();
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                walk(
                    l.get(key).unwrap_or(&Value::Null),
                    r.get(key).unwrap_or(&Value::Null),
                    names,
                    path,
                    out,
                );
                path.truncate(len);
            }
        }
        (Value::Array(l), Value::Array(r)) if l.len() == r.len() => {
            for (i, (a, b)) in l.iter().zip(r).enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                walk(a, b, names, path, out);
                path.truncate(len);
            }
        }
        _ => out.push(format!(
            "{}: {} {} / {} {}",
            if path.is_empty() { "/" } else { path },
            names.0,
            cut(left),
            names.1,
            cut(right)
        )),
    }
}

fn cut(value: &Value) -> String {
    let text = if value.is_null() {
        "(absent)".to_owned()
    } else {
        value.to_string()
    };
    if text.chars().count() > MAX_VALUE_CHARS {
        let kept: String = text.chars().take(MAX_VALUE_CHARS).collect();
        format!("{kept}…")
    } else {
        text
    }
}
