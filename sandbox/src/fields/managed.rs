//! Managed fields and server-side apply: `metadata.managedFields` entries, which manager owns
//! which fields, apply with its conflicts, and the ownership an update takes.

use serde_json::{Value, json};

use super::{
    FieldSet, Path, PathElem, Scope, Shape, UNTRACKED_METADATA, field_set, from_fields_v1,
    merge_applied, remove_at, to_fields_v1, value_at,
};

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedEntry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// API version the fields were written through.
    pub api_version: String,
    /// Last time the entry changed (RFC 3339).
    pub time: String,
    /// Subresource (`status`) or empty.
    pub subresource: String,
    /// Owned fields.
    pub fields: FieldSet,
}

/// Reads `metadata.managedFields`.
pub fn read_managed(obj: &Value) -> Vec<ManagedEntry> {
    let Some(entries) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            ManagedEntry {
                manager: s("manager"),
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
            }
        })
        .collect()
}

/// Writes `metadata.managedFields`, dropping entries that own nothing.
pub fn write_managed(obj: &mut Value, entries: &[ManagedEntry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if !list.is_empty() && obj.is_object() && !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            md.remove("managedFields");
        } else {
            md.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// A field owned by another manager with a different value.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The API version its entry names.
    pub api_version: String,
    /// Its subresource (`status`), or empty.
    pub subresource: String,
    pub path: Path,
}

impl Conflict {
    /// The other manager as kube-apiserver names it in conflict messages: `"name"`, plus
    /// ` with subresource "status"`, plus ` using VERSION` for an Update entry.
    pub fn describe_manager(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == "Update" {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

/// Inputs of one server-side apply.
#[derive(Debug)]
pub struct ApplyRequest<'a> {
    /// Which lists merge by key (built-in table or CRD schema).
    pub shape: Shape<'a>,
    /// What part of the object is applied.
    pub scope: Scope,
    pub manager: &'a str,
    /// The request's API version.
    pub api_version: &'a str,
    /// `force=true`.
    pub force: bool,
    /// Now, RFC 3339.
    pub now: &'a str,
}

/// Server-side apply of `applied` onto `live` (an empty object on create). Returns the merged
/// object with updated managedFields, or the conflicts.
pub fn apply(
    req: &ApplyRequest<'_>,
    live: &Value,
    applied: &Value,
) -> Result<Value, Vec<Conflict>> {
    let shape = req.shape;
    let mut applied = applied.clone();
    // Only the applied scope's part of the configuration takes effect.
    if let Some(m) = applied.as_object_mut() {
        match req.scope {
            Scope::MainWithoutStatus => {
                m.remove("status");
            }
            Scope::Status => {
                m.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
            }
            Scope::Whole => {}
        }
        if req.scope == Scope::Status
            && let Some(md) = m.get_mut("metadata").and_then(Value::as_object_mut)
        {
            md.retain(|k, _| UNTRACKED_METADATA.contains(&k.as_str()));
        }
    }
    let applied_set = field_set(shape, &applied, req.scope);
    let mut entries = read_managed(live);
    let subresource = if req.scope == Scope::Status {
        "status"
    } else {
        ""
    };
    let is_mine = |e: &ManagedEntry| {
        e.manager == req.manager && e.operation == "Apply" && e.subresource == subresource
    };

    let mut conflicts = Vec::new();
    for e in entries.iter().filter(|e| !is_mine(e)) {
        for p in e.fields.intersection(&applied_set) {
            if matches!(p.last(), Some(PathElem::Key(_))) {
                continue;
            }
            if value_at(shape, live, p) != value_at(shape, &applied, p) {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    operation: e.operation.clone(),
                    api_version: e.api_version.clone(),
                    subresource: e.subresource.clone(),
                    path: p.clone(),
                });
            }
        }
    }
    if !conflicts.is_empty() && !req.force {
        return Err(conflicts);
    }
    // Forced: the conflicting fields change hands.
    for c in &conflicts {
        for e in entries
            .iter_mut()
            .filter(|e| e.manager == c.manager && !is_mine(e))
        {
            e.fields.remove(&c.path);
        }
    }
    let previous: FieldSet = entries
        .iter()
        .filter(|e| is_mine(e))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let others: FieldSet = entries
        .iter()
        .filter(|e| !is_mine(e))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let mut merged = live.clone();
    if !merged.is_object() {
        merged = json!({});
    }
    // A field kept alive through a child owned by someone else stays.
    let mut removed: Vec<&Path> = previous
        .difference(&applied_set)
        .filter(|p| !others.contains(*p))
        .filter(|p| !others.iter().any(|o| o.len() > p.len() && o.starts_with(p)))
        .collect();
    removed.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in &removed {
        // What lies inside something removed goes with it: removed on its own first, an
        // element's key fields would leave it an element no key finds.
        if removed
            .iter()
            .any(|q| q.len() < p.len() && p.starts_with(q))
        {
            continue;
        }
        remove_at(shape, &mut merged, p);
    }
    let mut applied_body = applied.clone();
    if let Some(md) = applied_body
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
    {
        md.retain(|k, _| {
            !UNTRACKED_METADATA.contains(&k.as_str()) || k == "name" || k == "namespace"
        });
    }
    merge_applied(shape, &mut merged, &applied_body, &mut Vec::new());
    entries.retain(|e| !is_mine(e));
    entries.push(ManagedEntry {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: req.api_version.to_string(),
        time: req.now.to_string(),
        subresource: subresource.to_string(),
        fields: applied_set,
    });
    write_managed(&mut merged, &entries);
    Ok(merged)
}

/// Records a non-apply write by `manager`: fields whose value changed become the manager's
/// (operation `Update`) and leave every other manager; removed fields leave everyone.
pub fn record_update(
    shape: Shape<'_>,
    scope: Scope,
    manager: &str,
    api_version: &str,
    now: &str,
    old: &Value,
    new: &mut Value,
) {
    let old_set = field_set(shape, old, scope);
    let new_set = field_set(shape, new, scope);
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| value_at(shape, old, p) != value_at(shape, new, p) || !old_set.contains(*p))
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    let mut entries = read_managed(old);
    if changed.is_empty() && removed.is_empty() {
        write_managed(new, &entries);
        return;
    }
    let subresource = if scope == Scope::Status { "status" } else { "" };
    for e in entries.iter_mut() {
        // Entries of the other scope are untouched.
        if (e.subresource == "status") != (scope == Scope::Status) && scope != Scope::Whole {
            continue;
        }
        e.fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == subresource)
    {
        Some(e) => {
            e.fields.extend(changed);
            e.fields.retain(|p| new_set.contains(p));
            e.time = now.to_string();
            e.api_version = api_version.to_string();
        }
        None => entries.push(ManagedEntry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            time: now.to_string(),
            subresource: subresource.to_string(),
            fields: changed,
        }),
    }
    write_managed(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::display_path;

    fn req<'a>(manager: &'a str, force: bool) -> ApplyRequest<'a> {
        ApplyRequest {
            shape: Shape::Builtin,
            scope: Scope::Whole,
            manager,
            api_version: "v1",
            force,
            now: "2026-01-01T00:00:00Z",
        }
    }

    #[test]
    fn fields_a_manager_stops_applying_are_removed() {
        let live = json!({});
        let first = apply(
            &req("m", false),
            &live,
            &json!({"data": {"a": "1", "b": "2"}}),
        )
        .unwrap();
        let second = apply(&req("m", false), &first, &json!({"data": {"a": "1"}})).unwrap();
        assert_eq!(second["data"], json!({"a": "1"}));
    }

    #[test]
    fn a_list_element_a_manager_stops_applying_is_removed_whole() {
        let live = json!({});
        let both = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let first = apply(&req("m", false), &live, &both).unwrap();
        let one = json!({"spec": {"containers": [{"name": "a", "image": "x"}]}});
        let second = apply(&req("m", false), &first, &one).unwrap();
        assert_eq!(second["spec"]["containers"], one["spec"]["containers"]);
    }

    #[test]
    fn applying_a_field_another_manager_set_differently_conflicts_unless_forced() {
        let first = apply(&req("one", false), &json!({}), &json!({"data": {"a": "1"}})).unwrap();
        let conflicts =
            apply(&req("two", false), &first, &json!({"data": {"a": "2"}})).unwrap_err();
        assert_eq!(conflicts[0].manager, "one");
        assert_eq!(display_path(&conflicts[0].path), ".data.a");
        let forced = apply(&req("two", true), &first, &json!({"data": {"a": "2"}})).unwrap();
        assert_eq!(forced["data"]["a"], "2");
        let owners = read_managed(&forced);
        assert!(owners.iter().all(|e| e.manager == "two"), "{owners:?}");
    }

    #[test]
    fn same_value_is_shared_without_conflict() {
        let first = apply(&req("one", false), &json!({}), &json!({"data": {"a": "1"}})).unwrap();
        let second = apply(&req("two", false), &first, &json!({"data": {"a": "1"}})).unwrap();
        assert_eq!(read_managed(&second).len(), 2);
    }

    #[test]
    fn containers_merge_by_name() {
        let first = apply(
            &req("one", false),
            &json!({}),
            &json!({"spec": {"containers": [{"name": "a", "image": "x"}]}}),
        )
        .unwrap();
        let second = apply(
            &req("two", false),
            &first,
            &json!({"spec": {"containers": [{"name": "b", "image": "y"}]}}),
        )
        .unwrap();
        assert_eq!(second["spec"]["containers"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn ports_without_protocol_are_the_defaulted_tcp_ports() {
        let applied = json!({"spec": {"ports": [{"port": 443, "targetPort": 8443}]}});
        let first = apply(&req("op", false), &json!({}), &applied).unwrap();
        let mut live = first.clone();
        live["spec"]["ports"][0]["protocol"] = json!("TCP");
        let second = apply(&req("op", false), &live, &applied).unwrap();
        assert_eq!(second["spec"]["ports"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn an_update_takes_ownership_of_changed_fields() {
        let first = apply(&req("one", false), &json!({}), &json!({"data": {"a": "1"}})).unwrap();
        let mut changed = first.clone();
        changed["data"]["a"] = json!("2");
        record_update(
            Shape::Builtin,
            Scope::Whole,
            "editor",
            "v1",
            "t",
            &first,
            &mut changed,
        );
        let entries = read_managed(&changed);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].manager, "editor");
    }
}
