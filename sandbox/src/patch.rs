//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch for the
//! built-in kinds (lists merged by the keys Kubernetes declares: containers by name, ports by
//! port, ...).

use serde_json::Value;

use crate::error::ApiError;
use crate::fields::{ListType, Path, PathElem, Shape, add_missing};

/// The patch formats the API accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml`
    Apply,
}

impl PatchKind {
    /// From a Content-Type header.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchKind::Apply)
            }
            _ => None,
        }
    }
}

/// Applies an RFC 7386 merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Applies an RFC 6902 JSON patch.
///
/// Like kube-apiserver (evanphx/json-patch), a `test` that a member is `null` passes when the
/// member is absent: kube-runtime's `finalizer()` sends exactly that before adding the first
/// finalizer. The patch applies as a whole or not at all.
pub fn json(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
    let mut patched = target.clone();
    for op in ops.0 {
        if let json_patch::PatchOperation::Test(test) = &op
            && test.value.is_null()
            && patched.pointer(test.path.as_str()).is_none()
        {
            continue;
        }
        json_patch::patch(&mut patched, &[op]).map_err(|e| {
            ApiError::new(
                422,
                "Invalid",
                format!("the server rejected our request due to an error in our request: {e}"),
            )
        })?;
    }
    *target = patched;
    Ok(())
}

/// Applies a strategic merge patch to a built-in kind's object.
pub fn strategic(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    strategic_at(target, patch, &mut Vec::new())
}

fn strategic_at(target: &mut Value, patch: &Value, path: &mut Path) -> Result<(), ApiError> {
    let Some(pm) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    match pm.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut p = patch.clone();
            if let Some(m) = p.as_object_mut() {
                m.remove("$patch");
            }
            *target = p;
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let retain_keys: Option<Vec<String>> =
        pm.get("$retainKeys").and_then(Value::as_array).map(|ks| {
            ks.iter()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        });
    for (k, pv) in pm {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        let Some(tm) = target.as_object_mut() else {
            break;
        };
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(del)) = (tm.get_mut(field), pv.as_array()) {
                items.retain(|v| !del.contains(v));
            }
            continue;
        }
        if pv.is_null() {
            tm.remove(k);
            continue;
        }
        path.push(PathElem::Field(k.clone()));
        match pv {
            Value::Object(_) => {
                let slot = tm.entry(k.clone()).or_insert(Value::Null);
                strategic_at(slot, pv, path)?;
                if slot.is_null() {
                    tm.remove(k);
                }
            }
            Value::Array(items) => {
                let lt = Shape::Builtin.list_type(path);
                let slot = tm.entry(k.clone()).or_insert(Value::Array(Vec::new()));
                merge_list(slot, items, &lt, path)?;
            }
            _ => {
                tm.insert(k.clone(), pv.clone());
            }
        }
        path.pop();
    }
    if let (Some(keep), Some(tm)) = (retain_keys, target.as_object_mut()) {
        tm.retain(|k, _| keep.contains(k));
    }
    Ok(())
}

fn merge_list(
    slot: &mut Value,
    items: &[Value],
    lt: &ListType,
    path: &mut Path,
) -> Result<(), ApiError> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *slot = Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        );
        return Ok(());
    }
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    let Some(target) = slot.as_array_mut() else {
        return Ok(());
    };
    match lt {
        ListType::Atomic => *target = items.to_vec(),
        ListType::Set => add_missing(target, items),
        ListType::Map(keys) => {
            // Strategic merge identifies elements by the first (declared) merge key only.
            let key = keys.first().cloned().unwrap_or_default();
            let server_order: Vec<Option<Value>> =
                target.iter().map(|t| t.get(&key).cloned()).collect();
            for item in items {
                let id = item.get(&key).cloned();
                let pos = id
                    .as_ref()
                    .and_then(|id| target.iter().position(|t| t.get(&key) == Some(id)));
                let directive = item.get("$patch").and_then(Value::as_str);
                match (pos, directive) {
                    (Some(i), Some("delete")) => {
                        target.remove(i);
                    }
                    (None, Some("delete")) => {}
                    (Some(i), _) => {
                        path.push(PathElem::Key(id.map(|v| v.to_string()).unwrap_or_default()));
                        strategic_at(&mut target[i], item, path)?;
                        path.pop();
                    }
                    (None, _) => {
                        let mut v = item.clone();
                        if let Some(m) = v.as_object_mut() {
                            m.remove("$patch");
                        }
                        target.push(v);
                    }
                }
            }
            let patch_order: Vec<Option<Value>> =
                items.iter().map(|i| i.get(&key).cloned()).collect();
            *target = element_order(std::mem::take(target), &key, &patch_order, &server_order);
        }
    }
    Ok(())
}

/// The order kube-apiserver gives a merged list (`normalizeElementOrder`): the elements the
/// patch names, in the patch's order, with the server-only elements inserted among them by
/// their order in the live list (so a new element goes before the old ones it does not follow).
fn element_order(
    merged: Vec<Value>,
    key: &str,
    patch_order: &[Option<Value>],
    server_order: &[Option<Value>],
) -> Vec<Value> {
    let id = |v: &Value| v.get(key).cloned();
    let (mut patched, server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| patch_order.contains(&id(v)));
    patched.sort_by_key(|v| patch_order.iter().position(|p| *p == id(v)));
    let index = |v: &Value| server_order.iter().position(|s| *s == id(v));
    let mut out = Vec::with_capacity(patched.len() + server_only.len());
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        patched.into_iter().peekable(),
    );
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!((index(l), index(r)), (Some(li), Some(ri)) if li < ri),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_merges_containers_by_name_and_env_by_name() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}]},
            {"name": "b", "image": "y"}
        ]}});
        let patch = json!({"spec": {"containers": [{"name": "a", "image": "z", "env": [{"name": "B", "value": "2"}]}]}});
        strategic(&mut pod, &patch).unwrap();
        let cs = pod["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["image"], "z");
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn strategic_merge_puts_new_elements_first_as_kube_apiserver_does() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "env": [
            {"name": "A", "value": "1"}, {"name": "C", "value": "3"}
        ]}]}});
        let patch = json!({"spec": {"containers": [{"name": "a", "env": [
            {"name": "B", "value": "2"}, {"name": "C", "value": "4"}
        ]}]}});
        strategic(&mut pod, &patch).unwrap();
        let names: Vec<&str> = pod["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["B", "A", "C"]);
        let mut pod = json!({"spec": {"containers": [{"name": "a", "env": [{"name": "A"}]}]}});
        let patch = json!({"spec": {"containers": [{"name": "a", "env": [{"name": "B"}]}]}});
        strategic(&mut pod, &patch).unwrap();
        assert_eq!(pod["spec"]["containers"][0]["env"][0]["name"], "B");
    }

    #[test]
    fn strategic_merge_deletes_elements_and_fields() {
        let mut pod = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let patch = json!({"metadata": {"labels": {"a": null}}, "spec": {"containers": [{"name": "b", "$patch": "delete"}]}});
        strategic(&mut pod, &patch).unwrap();
        assert_eq!(pod["metadata"]["labels"], json!({"b": "2"}));
        assert_eq!(pod["spec"]["containers"], json!([{"name": "a"}]));
    }

    #[test]
    fn unknown_lists_are_replaced() {
        let mut obj = json!({"spec": {"args": ["a", "b"]}});
        strategic(&mut obj, &json!({"spec": {"args": ["c"]}})).unwrap();
        assert_eq!(obj["spec"]["args"], json!(["c"]));
    }

    #[test]
    fn json_patch_test_for_null_passes_on_an_absent_member_as_kube_apiserver_does() {
        let mut obj = json!({"metadata": {"name": "a"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
        ]);
        json(&mut obj, &patch).unwrap();
        assert_eq!(obj["metadata"]["finalizers"], json!(["x"]));
    }

    #[test]
    fn failed_json_patch_changes_nothing() {
        let mut obj = json!({"metadata": {"name": "a"}});
        let patch = json!([
            {"op": "add", "path": "/metadata/labels", "value": {"a": "1"}},
            {"op": "test", "path": "/metadata/name", "value": "b"}
        ]);
        assert_eq!(json(&mut obj, &patch).unwrap_err().code, 422);
        assert_eq!(obj, json!({"metadata": {"name": "a"}}));
    }

    #[test]
    fn malformed_json_patch_is_a_bad_request() {
        let mut obj = json!({});
        assert_eq!(
            json(&mut obj, &json!({"op": "nope"})).unwrap_err().code,
            400
        );
    }
}
