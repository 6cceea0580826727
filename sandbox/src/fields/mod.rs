//! Field sets: what server-side apply tracks.
//!
//! A field set is a set of paths into an object. Path elements follow the `fieldsV1` encoding:
//! `f:name` for a map field, `k:{"name":"x"}` for an element of an associative list (identified
//! by its key fields), `v:"x"` for an element of a set-like list. Atomic lists are leaves.
//! Which lists are associative comes from the CRD schema (`x-kubernetes-list-type`) or, for
//! built-in kinds, from a table of the merge keys Kubernetes declares for them.
//!
//! Managed fields (who owns which fields) and apply itself are in `managed`.

mod managed;

pub use managed::{
    ApplyRequest, Conflict, ManagedEntry, apply, read_managed, record_update, write_managed,
};

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElem {
    /// A field of a map.
    Field(String),
    /// An associative-list element identified by its key fields (a JSON object).
    Key(String),
    /// A set-list element (its JSON value).
    Value(String),
}

/// A path into an object.
pub type Path = Vec<PathElem>;

/// A set of paths.
pub type FieldSet = BTreeSet<Path>;

/// How a list merges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole.
    Atomic,
    /// Elements are scalars merged as a set.
    Set,
    /// Elements are maps identified by these key fields.
    Map(Vec<String>),
}

/// Appends each of `items` that `list` lacks, in order: how a `set` list merges.
pub(crate) fn add_missing(list: &mut Vec<Value>, items: &[Value]) {
    for v in items {
        if !list.contains(v) {
            list.push(v.clone());
        }
    }
}

/// Where list types come from: a structural schema (custom resources) or the built-in table.
#[derive(Clone, Copy, Debug)]
pub enum Shape<'a> {
    /// Built-in kind: merge keys by field name.
    Builtin,
    /// Custom resource with this OpenAPI v3 schema (`None`: everything atomic).
    Schema(Option<&'a Value>),
}

fn field_names(path: &[PathElem]) -> impl Iterator<Item = &str> {
    path.iter().filter_map(|p| match p {
        PathElem::Field(f) => Some(f.as_str()),
        _ => None,
    })
}

fn builtin_list_type(path: &[PathElem]) -> ListType {
    let Some(PathElem::Field(last)) = path.last() else {
        return ListType::Atomic;
    };
    let in_container = field_names(path)
        .any(|f| matches!(f, "containers" | "initContainers" | "ephemeralContainers"));
    let keys = |k: &[&str]| ListType::Map(k.iter().map(|s| s.to_string()).collect());
    match last.as_str() {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "webhooks" => keys(&["name"]),
        "volumeMounts" => keys(&["mountPath"]),
        "volumeDevices" => keys(&["devicePath"]),
        "ports" if in_container => keys(&["containerPort", "protocol"]),
        "ports" if field_names(path).any(|f| f == "spec") && path.len() == 2 => {
            keys(&["port", "protocol"])
        }
        "conditions" => keys(&["type"]),
        // `metav1.Initializers.Pending` (1.7–1.13): patchStrategy merge, patchMergeKey name.
        "pending" if field_names(path).any(|f| f == "initializers") => keys(&["name"]),
        "ownerReferences" => keys(&["uid"]),
        "finalizers" => ListType::Set,
        "hostAliases" => keys(&["ip"]),
        "topologySpreadConstraints" => keys(&["topologyKey", "whenUnsatisfiable"]),
        _ => ListType::Atomic,
    }
}

fn schema_at<'a>(schema: &'a Value, path: &[PathElem]) -> Option<&'a Value> {
    let mut cur = schema;
    for p in path {
        cur = match p {
            PathElem::Field(f) => cur
                .get("properties")
                .and_then(|props| props.get(f))
                .or_else(|| cur.get("additionalProperties").filter(|a| a.is_object()))?,
            PathElem::Key(_) | PathElem::Value(_) => cur.get("items")?,
        };
    }
    Some(cur)
}

impl Shape<'_> {
    /// Whether the map at `path` is atomic: owned and replaced whole, never merged key by key.
    /// In built-in kinds every selector is (`metav1.LabelSelector` is `structType=atomic`;
    /// Service `selector` and PodSpec `nodeSelector` are `mapType=atomic`); in custom resources,
    /// what the schema's `x-kubernetes-map-type: atomic` says.
    pub fn is_atomic_map(&self, path: &[PathElem]) -> bool {
        match self {
            Shape::Builtin => matches!(
                path.last(),
                Some(PathElem::Field(f)) if f == "selector" || f.ends_with("Selector")
            ),
            Shape::Schema(schema) => schema.and_then(|s| schema_at(s, path)).is_some_and(|s| {
                s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
            }),
        }
    }

    /// The list type at `path`.
    pub fn list_type(&self, path: &[PathElem]) -> ListType {
        match self {
            Shape::Builtin => {
                if matches!(path.first(), Some(PathElem::Field(f)) if f == "metadata") {
                    return builtin_list_type(path);
                }
                builtin_list_type(path)
            }
            Shape::Schema(schema) => {
                if matches!(path.first(), Some(PathElem::Field(f)) if f == "metadata") {
                    return builtin_list_type(path);
                }
                let Some(s) = schema.and_then(|s| schema_at(s, path)) else {
                    return ListType::Atomic;
                };
                match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => {
                        ListType::Map(crate::json::strings(s.get("x-kubernetes-list-map-keys")))
                    }
                    _ => ListType::Atomic,
                }
            }
        }
    }
}

/// The key identifying an associative-list element: its key fields as canonical JSON.
pub fn element_key(elem: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = elem.get(k) {
            m.insert(k.clone(), v.clone());
        } else if k == "protocol" {
            // The API server defaults ports' protocol, so an applied port without one is the
            // same element as the stored TCP port.
            m.insert(k.clone(), Value::String("TCP".into()));
        }
    }
    Value::Object(m).to_string()
}

/// Every path of `obj` under `path`.
pub fn collect(shape: Shape<'_>, value: &Value, path: &mut Path, out: &mut FieldSet) {
    match value {
        Value::Object(m) => {
            if m.is_empty() || (!path.is_empty() && shape.is_atomic_map(path)) {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
                return;
            }
            for (k, v) in m {
                path.push(PathElem::Field(k.clone()));
                collect(shape, v, path, out);
                path.pop();
            }
        }
        Value::Array(items) => match shape.list_type(path) {
            ListType::Atomic => {
                out.insert(path.clone());
            }
            ListType::Set => {
                for v in items {
                    path.push(PathElem::Value(v.to_string()));
                    out.insert(path.clone());
                    path.pop();
                }
                if items.is_empty() {
                    out.insert(path.clone());
                }
            }
            ListType::Map(keys) => {
                for v in items {
                    path.push(PathElem::Key(element_key(v, &keys)));
                    out.insert(path.clone());
                    if v.is_object() {
                        collect(shape, v, path, out);
                    }
                    path.pop();
                }
                if items.is_empty() {
                    out.insert(path.clone());
                }
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

/// Metadata fields no manager owns.
const UNTRACKED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// Which part of an object a field set covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything except status (main resource of a kind with a status subresource).
    MainWithoutStatus,
    /// Everything (kinds without a status subresource).
    Whole,
    /// Only status (the status subresource).
    Status,
}

/// The tracked field set of an object.
pub fn field_set(shape: Shape<'_>, obj: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(m) = obj.as_object() else { return out };
    for (k, v) in m {
        match (k.as_str(), scope) {
            ("apiVersion" | "kind", _) => continue,
            ("status", Scope::MainWithoutStatus) => continue,
            ("status", _) => {}
            (_, Scope::Status) => continue,
            _ => {}
        }
        let mut path = vec![PathElem::Field(k.clone())];
        if k == "metadata" {
            if let Some(md) = v.as_object() {
                for (mk, mv) in md {
                    if UNTRACKED_METADATA.contains(&mk.as_str()) {
                        continue;
                    }
                    path.push(PathElem::Field(mk.clone()));
                    collect(shape, mv, &mut path, &mut out);
                    path.pop();
                }
            }
            continue;
        }
        collect(shape, v, &mut path, &mut out);
    }
    out
}

fn find_elem<'a>(
    items: &'a [Value],
    elem: &PathElem,
    shape: Shape<'_>,
    list_path: &[PathElem],
) -> Option<(usize, &'a Value)> {
    match elem {
        PathElem::Key(k) => {
            let ListType::Map(keys) = shape.list_type(list_path) else {
                return None;
            };
            items
                .iter()
                .enumerate()
                .find(|(_, v)| element_key(v, &keys) == *k)
        }
        PathElem::Value(s) => items.iter().enumerate().find(|(_, v)| v.to_string() == *s),
        PathElem::Field(_) => None,
    }
}

/// The value at `path`, if present.
pub fn value_at<'a>(shape: Shape<'_>, obj: &'a Value, path: &[PathElem]) -> Option<&'a Value> {
    let mut cur = obj;
    for (i, p) in path.iter().enumerate() {
        cur = match p {
            PathElem::Field(f) => cur.get(f)?,
            _ => find_elem(cur.as_array()?, p, shape, &path[..i])?.1,
        };
    }
    Some(cur)
}

/// Removes the value at `path`, if present.
pub fn remove_at(shape: Shape<'_>, obj: &mut Value, path: &[PathElem]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for (i, p) in parent_path.iter().enumerate() {
        let next = match p {
            PathElem::Field(f) => cur.get_mut(f),
            _ => {
                let idx = cur
                    .as_array()
                    .and_then(|items| find_elem(items, p, shape, &path[..i]).map(|(i, _)| i));
                match idx {
                    Some(idx) => cur.get_mut(idx),
                    None => None,
                }
            }
        };
        let Some(next) = next else { return };
        cur = next;
    }
    match last {
        PathElem::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        _ => {
            let idx = cur
                .as_array()
                .and_then(|items| find_elem(items, last, shape, parent_path).map(|(i, _)| i));
            if let (Some(idx), Some(items)) = (idx, cur.as_array_mut()) {
                items.remove(idx);
            }
        }
    }
}

/// Merges an applied configuration into `live`: maps recursively, associative lists by key,
/// set lists by value, everything else replaced.
pub fn merge_applied(shape: Shape<'_>, live: &mut Value, applied: &Value, path: &mut Path) {
    match (live, applied) {
        (l @ Value::Object(_), a @ Value::Object(_)) if shape.is_atomic_map(path) => {
            *l = a.clone();
        }
        (Value::Object(l), Value::Object(a)) => {
            for (k, av) in a {
                path.push(PathElem::Field(k.clone()));
                match l.get_mut(k) {
                    Some(lv) if !av.is_null() => merge_applied(shape, lv, av, path),
                    _ => {
                        l.insert(k.clone(), av.clone());
                    }
                }
                path.pop();
            }
        }
        (Value::Array(l), Value::Array(a)) => match shape.list_type(path) {
            ListType::Atomic => *l = a.clone(),
            ListType::Set => add_missing(l, a),
            ListType::Map(keys) => {
                for av in a {
                    let k = element_key(av, &keys);
                    match l.iter_mut().find(|lv| element_key(lv, &keys) == k) {
                        Some(lv) => {
                            path.push(PathElem::Key(k));
                            merge_applied(shape, lv, av, path);
                            path.pop();
                        }
                        None => l.push(av.clone()),
                    }
                }
            }
        },
        (l, a) => *l = a.clone(),
    }
}

/// Decodes one `fieldsV1` key (`f:`, `k:`, `v:`); `None` for anything else.
fn parse_elem(k: &str) -> Option<PathElem> {
    if let Some(r) = k.strip_prefix("f:") {
        Some(PathElem::Field(r.to_string()))
    } else if let Some(r) = k.strip_prefix("k:") {
        Some(PathElem::Key(r.to_string()))
    } else {
        k.strip_prefix("v:").map(|r| PathElem::Value(r.to_string()))
    }
}

/// Encodes a field set as `fieldsV1`.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = json!({});
    for path in set {
        let mut cur = &mut root;
        for p in path {
            let key = match p {
                PathElem::Field(f) => format!("f:{f}"),
                PathElem::Key(k) => format!("k:{k}"),
                PathElem::Value(v) => format!("v:{v}"),
            };
            if !cur.is_object() {
                *cur = json!({});
            }
            cur = &mut cur[key.as_str()];
            if cur.is_null() {
                *cur = json!({});
            }
        }
        if matches!(path.last(), Some(PathElem::Key(_))) {
            cur["."] = json!({});
        }
    }
    // Intermediate nodes that are members themselves need a "." marker too.
    fn mark(node: &mut Value, path: &mut Path, set: &FieldSet) {
        let Some(m) = node.as_object_mut() else {
            return;
        };
        let keys: Vec<String> = m.keys().filter(|k| k.as_str() != ".").cloned().collect();
        for k in keys {
            let Some(elem) = parse_elem(&k) else { continue };
            path.push(elem);
            if let Some(child) = m.get_mut(&k) {
                let has_children = child
                    .as_object()
                    .is_some_and(|c| c.keys().any(|x| x != "."));
                if has_children
                    && set.contains(path)
                    && let Some(c) = child.as_object_mut()
                {
                    c.insert(".".into(), json!({}));
                }
                mark(child, path, set);
            }
            path.pop();
        }
    }
    mark(&mut root, &mut Vec::new(), set);
    root
}

/// Decodes `fieldsV1`.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn walk(node: &Value, path: &mut Path, out: &mut FieldSet) {
        let Some(m) = node.as_object() else { return };
        if !path.is_empty() && (m.is_empty() || m.contains_key(".")) {
            out.insert(path.clone());
        }
        for (k, child) in m {
            let Some(elem) = parse_elem(k) else { continue };
            path.push(elem);
            walk(child, path, out);
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// A path as conflict messages print it: `.spec.replicas`, `.spec.containers[name="x"].image`.
pub fn display_path(path: &[PathElem]) -> String {
    let mut s = String::new();
    for p in path {
        match p {
            PathElem::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            PathElem::Key(k) => {
                let inner: Vec<String> = serde_json::from_str::<Map<String, Value>>(k)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_default();
                s.push_str(&format!("[{}]", inner.join(",")));
            }
            PathElem::Value(v) => s.push_str(&format!("[={v}]")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_fields_v1_keys_are_ignored() {
        let set = from_fields_v1(&json!({"é": {}, "f": {}, "f:ok": {}}));
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn fields_v1_round_trips_with_list_elements() {
        let obj = json!({"spec": {"containers": [{"name": "a", "image": "x"}], "replicas": 1}, "metadata": {"labels": {"a": "b"}}});
        let set = field_set(Shape::Builtin, &obj, Scope::Whole);
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1["f:spec"]["f:containers"]["k:{\"name\":\"a\"}"]["."],
            json!({})
        );
        assert_eq!(from_fields_v1(&v1), set);
    }

    #[test]
    fn an_applied_selector_replaces_the_whole_selector_as_it_is_atomic() {
        let mut live =
            json!({"spec": {"selector": {"matchLabels": {"app": "a", "added": "by-someone"}}}});
        let applied = json!({"spec": {"selector": {"matchLabels": {"app": "a"}}}});
        merge_applied(Shape::Builtin, &mut live, &applied, &mut Path::new());
        assert_eq!(live, applied);
        let mut set = FieldSet::new();
        collect(Shape::Builtin, &applied, &mut Path::new(), &mut set);
        assert_eq!(set.len(), 1, "one field: the selector itself, {set:?}");
    }
}
