//! Label and field selectors as the REST API parses them from `labelSelector` and
//! `fieldSelector` query parameters, and `metav1.LabelSelector` objects as webhooks and PDBs
//! carry them.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::ApiError;

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq)]
pub enum Requirement {
    /// `key=value`, `key==value`, `key in (a,b)`.
    In(String, BTreeSet<String>),
    /// `key!=value`, `key notin (a,b)`.
    NotIn(String, BTreeSet<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

/// A parsed label selector: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(pub Vec<Requirement>);

fn split_top_level(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_set(s: &str) -> Result<BTreeSet<String>, ApiError> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: expected a set in parentheses, got {s:?}"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses the string form (`a=b,c!=d,e in (f,g),!h`).
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            if let Some(key) = part.strip_prefix('!') {
                reqs.push(Requirement::DoesNotExist(key.trim().to_string()));
            } else if let Some((k, v)) = part.split_once("!=") {
                reqs.push(Requirement::NotIn(
                    k.trim().to_string(),
                    BTreeSet::from([v.trim().to_string()]),
                ));
            } else if let Some((k, v)) = part.split_once("==") {
                reqs.push(Requirement::In(
                    k.trim().to_string(),
                    BTreeSet::from([v.trim().to_string()]),
                ));
            } else if let Some((k, v)) = part.split_once('=') {
                reqs.push(Requirement::In(
                    k.trim().to_string(),
                    BTreeSet::from([v.trim().to_string()]),
                ));
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                reqs.push(Requirement::NotIn(k.trim().to_string(), parse_set(rest)?));
            } else if let Some((k, rest)) = part.split_once(" in ") {
                reqs.push(Requirement::In(k.trim().to_string(), parse_set(rest)?));
            } else if part.contains(' ') || part.contains('(') {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {part:?}"
                )));
            } else {
                reqs.push(Requirement::Exists(part));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Builds a selector from a `metav1.LabelSelector` object; `None` for a malformed one.
    pub fn from_object(sel: &Value) -> Option<Self> {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Requirement::In(
                    k.clone(),
                    BTreeSet::from([v.as_str()?.to_string()]),
                ));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e.get("key")?.as_str()?.to_string();
                let values: BTreeSet<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|vs| {
                        vs.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                reqs.push(match e.get("operator")?.as_str()? {
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::DoesNotExist(key),
                    _ => return None,
                });
            }
        }
        Some(LabelSelector(reqs))
    }

    /// Whether the labels (a JSON map, or null) satisfy every requirement.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value`, comma-separated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses the string form.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            terms.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether `obj` satisfies every term. Any dotted path into the object is accepted (the real
    /// API server accepts only a per-kind list).
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in path.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let have = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            (have == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_supports_every_operator() {
        let sel = LabelSelector::parse(
            "app=web,tier!=db,env in (prod, staging),zone notin (a),team,!legacy",
        )
        .unwrap();
        let good = json!({"app": "web", "tier": "fe", "env": "prod", "zone": "b", "team": "x"});
        assert!(sel.matches(Some(&good)));
        let mut bad = good.clone();
        bad["legacy"] = json!("1");
        assert!(!sel.matches(Some(&bad)));
        let mut bad = good.clone();
        bad["env"] = json!("dev");
        assert!(!sel.matches(Some(&bad)));
        assert!(!sel.matches(None));
    }

    #[test]
    fn label_selector_object_form_matches_like_string_form() {
        let sel = LabelSelector::from_object(&json!({
            "matchLabels": {"a": "b"},
            "matchExpressions": [{"key": "initializer.dev/excluded", "operator": "DoesNotExist"}]
        }))
        .unwrap();
        assert!(sel.matches(Some(&json!({"a": "b"}))));
        assert!(!sel.matches(Some(&json!({"a": "b", "initializer.dev/excluded": "true"}))));
    }

    #[test]
    fn malformed_label_selector_is_a_bad_request() {
        assert_eq!(LabelSelector::parse("a in b").unwrap_err().code, 400);
    }

    #[test]
    fn field_selector_matches_nested_paths() {
        let sel = FieldSelector::parse("metadata.name=x,status.phase!=Failed").unwrap();
        assert!(sel.matches(&json!({"metadata": {"name": "x"}, "status": {"phase": "Running"}})));
        assert!(!sel.matches(&json!({"metadata": {"name": "y"}})));
    }
}
