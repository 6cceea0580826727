//! CustomResourceDefinitions: the resource types a CRD registers, the status the API server gives
//! it, and structural-schema work on custom objects (pruning, defaulting, validation).
//!
//! CEL rules (`x-kubernetes-validations`) are evaluated with the subset in [`crate::cel`].

use serde_json::{Map, Value, json};

use crate::cel;
use crate::resource::{Column, ResourceType};

/// The resource types (one per served version) a CRD defines; empty for a malformed CRD.
pub fn resource_types(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let (Some(group), Some(plural), Some(kind)) = (
        spec["group"].as_str(),
        names["plural"].as_str(),
        names["kind"].as_str(),
    ) else {
        return Vec::new();
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for v in spec["versions"].as_array().into_iter().flatten() {
        let Some(version) = v["name"].as_str() else {
            continue;
        };
        if v["served"].as_bool() == Some(false) {
            continue;
        }
        let columns = v["additionalPrinterColumns"]
            .as_array()
            .map(|cols| {
                cols.iter()
                    .filter_map(|c| {
                        Some(Column {
                            name: c["name"].as_str()?.to_string(),
                            type_: c["type"].as_str().unwrap_or("string").to_string(),
                            json_path: c["jsonPath"].as_str()?.to_string(),
                            priority: c["priority"].as_i64().unwrap_or(0),
                            description: c["description"].as_str().unwrap_or("").to_string(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(ResourceType {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            singular: names["singular"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| kind.to_lowercase()),
            namespaced: spec["scope"].as_str() != Some("Cluster"),
            status_subresource: v.pointer("/subresources/status").is_some(),
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            columns,
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
            storage: v["storage"].as_bool().unwrap_or(false),
            custom: true,
        });
    }
    out
}

/// The status a registered CRD reports: names accepted, established, stored versions.
pub fn established_status(crd: &Value, now: &str) -> Value {
    let cond = |t: &str, reason: &str, message: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    json!({
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": crd["spec"]["names"].clone(),
        "storedVersions": stored,
    })
}

fn preserves_unknown(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true)
        || schema["x-kubernetes-embedded-resource"].as_bool() == Some(true)
}

/// Removes fields the schema does not declare (unless it preserves unknown fields), as the
/// real API server prunes custom objects; returns the removed fields' paths.
pub fn prune(schema: &Value, value: &mut Value, root: bool) -> Vec<String> {
    let mut removed = Vec::new();
    prune_at(schema, value, root, "", &mut removed);
    removed
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn prune_at(schema: &Value, value: &mut Value, root: bool, path: &str, removed: &mut Vec<String>) {
    match value {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                if !preserves_unknown(schema) && schema.get("additionalProperties").is_none() {
                    m.retain(|k, _| {
                        let keep = props.contains_key(k)
                            || (root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"));
                        if !keep {
                            removed.push(join(path, k));
                        }
                        keep
                    });
                }
                for (k, v) in m.iter_mut() {
                    if let Some(s) = props.get(k) {
                        prune_at(s, v, false, &join(path, k), removed);
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, v) in m.iter_mut() {
                    prune_at(ap, v, false, &join(path, k), removed);
                }
            } else if !preserves_unknown(schema)
                && !root
                && schema.get("type").and_then(Value::as_str) == Some("object")
            {
                removed.extend(m.keys().map(|k| join(path, k)));
                m.clear();
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter_mut().enumerate() {
                    prune_at(s, v, false, &format!("{path}[{i}]"), removed);
                }
            }
        }
        _ => {}
    }
}

/// Fills `default:` values from the schema into absent fields, recursively.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    if !m.contains_key(k)
                        && let Some(d) = s.get("default")
                    {
                        m.insert(k.clone(), d.clone());
                    }
                    if let Some(v) = m.get_mut(k) {
                        apply_defaults(s, v);
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for v in m.values_mut() {
                    apply_defaults(ap, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for v in items {
                    apply_defaults(s, v);
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Structural validation: types, required, enum, bounds, lengths, patterns. Returns
/// `(field path, message)` causes as the API server words them.
pub fn validate(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    out: &mut Vec<(String, String)>,
) {
    let field = if path.is_empty() {
        "<root>".to_string()
    } else {
        path.to_string()
    };
    if value.is_null() {
        if schema["nullable"].as_bool() != Some(true) && !path.is_empty() {
            out.push((
                field,
                "Invalid value: \"null\": field must not be null".into(),
            ));
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"].as_bool() == Some(true) {
        if !matches!(type_name(value), "integer" | "string") {
            out.push((
                field,
                format!(
                    "Invalid value: \"{}\": must be an integer or string",
                    type_name(value)
                ),
            ));
        }
        return;
    }
    if let Some(want) = schema["type"].as_str() {
        let have = type_name(value);
        let ok = have == want || (want == "number" && have == "integer");
        if !ok {
            let msg = format!(
                "Invalid value: \"{have}\": {field} in body must be of type {want}: \"{have}\""
            );
            out.push((field, msg));
            return;
        }
    }
    if let Some(options) = schema["enum"].as_array()
        && !options.contains(value)
    {
        let allowed: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        out.push((
            field.clone(),
            format!(
                "Unsupported value: {value}: supported values: {}",
                allowed.join(", ")
            ),
        ));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema["minimum"].as_f64()
            && n < min
        {
            out.push((field.clone(), format!("Invalid value: {value}: {field} in body should be greater than or equal to {min}")));
        }
        if let Some(max) = schema["maximum"].as_f64()
            && n > max
        {
            out.push((
                field.clone(),
                format!(
                    "Invalid value: {value}: {field} in body should be less than or equal to {max}"
                ),
            ));
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|m| len < m) {
            out.push((
                field.clone(),
                format!(
                    "Invalid value: {value}: {field} in body should be at least {} chars long",
                    schema["minLength"]
                ),
            ));
        }
        if schema["maxLength"].as_u64().is_some_and(|m| len > m) {
            out.push((
                field.clone(),
                format!(
                    "Too long: may not be more than {} bytes",
                    schema["maxLength"]
                ),
            ));
        }
        if let Some(p) = schema["pattern"].as_str()
            && let Ok(re) = regex::Regex::new(p)
            && !re.is_match(s)
        {
            out.push((
                field.clone(),
                format!("Invalid value: {value}: {field} in body should match '{p}'"),
            ));
        }
    }
    check_rules(schema, value, old, path, &field, out);
    match value {
        Value::Object(m) => {
            for r in schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !m.contains_key(r) {
                    let f = if path.is_empty() {
                        r.to_string()
                    } else {
                        format!("{path}.{r}")
                    };
                    out.push((f, "Required value".into()));
                }
            }
            let props = schema["properties"].as_object();
            for (k, v) in m {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    validate(s, v, old.and_then(|o| o.get(k)), &child, out);
                } else if let Some(ap) =
                    schema.get("additionalProperties").filter(|a| a.is_object())
                {
                    validate(ap, v, old.and_then(|o| o.get(k)), &child, out);
                }
            }
        }
        Value::Array(items) => {
            if schema["minItems"]
                .as_u64()
                .is_some_and(|m| (items.len() as u64) < m)
            {
                out.push((
                    field.clone(),
                    format!(
                        "Invalid value: {}: {field} in body should have at least {} items",
                        items.len(),
                        schema["minItems"]
                    ),
                ));
            }
            if schema["maxItems"]
                .as_u64()
                .is_some_and(|m| (items.len() as u64) > m)
            {
                out.push((
                    field.clone(),
                    format!(
                        "Too many: {}: must have at most {} items",
                        items.len(),
                        schema["maxItems"]
                    ),
                ));
            }
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    // Old list elements are not correlated: transition rules inside lists are skipped.
                    validate(s, v, None, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Evaluates the node's `x-kubernetes-validations` (CEL subset, see [`crate::cel`]); transition
/// rules (using `oldSelf`) only when there is an old value.
fn check_rules(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    field: &str,
    out: &mut Vec<(String, String)>,
) {
    let Some(rules) = schema["x-kubernetes-validations"].as_array() else {
        return;
    };
    for r in rules {
        let Some(src) = r["rule"].as_str() else {
            continue;
        };
        if cel::Program::uses_old_self(src) && old.is_none() {
            continue;
        }
        let given = r["message"].as_str().filter(|m| !m.is_empty());
        let message = given
            .map(str::to_string)
            .unwrap_or_else(|| format!("failed rule: {src}"));
        let at = match r["fieldPath"].as_str() {
            Some(fp) if path.is_empty() => fp.trim_start_matches('.').to_string(),
            Some(fp) => format!("{path}{fp}"),
            None => field.to_string(),
        };
        match cel::compile(src).and_then(|p| p.check(value, old)) {
            Ok(true) => {}
            // As kube-apiserver words them: the rule's reason picks the error type; an invalid
            // scalar is shown, an object or list is not.
            Ok(false) => out.push((
                at,
                match r["reason"].as_str() {
                    Some("FieldValueForbidden") => format!("Forbidden: {message}"),
                    Some("FieldValueRequired") => format!("Required value: {message}"),
                    _ if value.is_object() || value.is_array() => {
                        format!("Invalid value: {message}")
                    }
                    _ => format!("Invalid value: {value}: {message}"),
                },
            )),
            Err(e) => out.push((
                at,
                format!(
                    "Invalid value: \"{}\": {e} evaluating rule: {}",
                    type_name(value),
                    given.unwrap_or(src)
                ),
            )),
        }
    }
}

/// Prunes, defaults and validates a custom object against its version's schema.
pub fn process(
    schema: Option<&Value>,
    obj: &mut Value,
    old: Option<&Value>,
) -> Vec<(String, String)> {
    let Some(schema) = schema else {
        return Vec::new();
    };
    let _ = prune(schema, obj, true);
    apply_defaults(schema, obj);
    let mut causes = Vec::new();
    validate(schema, obj, old, "", &mut causes);
    causes
}

/// An empty JSON object.
pub fn empty() -> Value {
    Value::Object(Map::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["image"],
                    "properties": {
                        "image": {"type": "string", "minLength": 1},
                        "replicas": {"type": "integer", "default": 2, "minimum": 0, "maximum": 10},
                        "policy": {"type": "string", "enum": ["Fail", "Ignore"], "default": "Fail"}
                    }
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        })
    }

    #[test]
    fn defaults_fill_absent_fields() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": {"image": "i"}});
        assert!(process(Some(&schema()), &mut obj, None).is_empty());
        assert_eq!(obj["spec"]["replicas"], 2);
        assert_eq!(obj["spec"]["policy"], "Fail");
    }

    #[test]
    fn pruning_reports_what_it_removed() {
        let mut obj = json!({"spec": {"image": "i", "bogus": 1, "x": {"y": 1}}});
        let removed = prune(&schema(), &mut obj, true);
        assert_eq!(removed, vec!["spec.bogus", "spec.x"]);
    }

    #[test]
    fn unknown_fields_are_pruned_but_preserved_where_declared() {
        let mut obj = json!({"metadata": {}, "spec": {"image": "i", "bogus": 1}, "status": {"anything": 1}, "extra": true});
        process(Some(&schema()), &mut obj, None);
        assert!(obj["spec"].get("bogus").is_none());
        assert!(obj.get("extra").is_none());
        assert_eq!(obj["status"]["anything"], 1);
    }

    #[test]
    fn violations_are_reported_with_field_paths() {
        let mut obj = json!({"spec": {"replicas": 11, "policy": "Maybe"}});
        let causes = process(Some(&schema()), &mut obj, None);
        let fields: Vec<&str> = causes.iter().map(|(f, _)| f.as_str()).collect();
        assert!(fields.contains(&"spec.image"), "{causes:?}");
        assert!(fields.contains(&"spec.replicas"), "{causes:?}");
        assert!(fields.contains(&"spec.policy"), "{causes:?}");
    }

    #[test]
    fn a_crd_registers_each_served_version() {
        let crd = json!({"spec": {"group": "x.dev", "scope": "Cluster", "names": {"plural": "things", "kind": "Thing"},
        "versions": [
            {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
             "additionalPrinterColumns": [{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]},
            {"name": "v0", "served": false, "storage": false}
        ]}});
        let types = resource_types(&crd);
        assert_eq!(types.len(), 1);
        assert!(types[0].status_subresource && !types[0].namespaced);
        assert_eq!(types[0].columns[0].json_path, ".status.phase");
    }
}
