//! The sandbox's one label-selector evaluator, and its field selectors: the string forms the
//! REST API parses from `labelSelector` and `fieldSelector` query parameters, the
//! `metav1.LabelSelector` objects webhooks and Deployments carry (validated as kube-apiserver's
//! `LabelSelectorAsSelector` does), and Services' plain-map selectors.
//!
//! `kube::core::Selector` is not used: it has no parser for the string form and accepts
//! requirements the API server refuses (`In` with an empty set, `Exists` with values).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as MetaLabelSelector;
use serde_json::Value;

use crate::error::ApiError;

/// A selector the API server would have refused: an unknown operator or values that do not fit it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to parse label selector: {0}")]
pub struct InvalidSelector(pub String);

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

    /// Builds a selector from a `metav1.LabelSelector`; the empty selector selects everything.
    pub fn from_meta(selector: &MetaLabelSelector) -> Result<Self, InvalidSelector> {
        let mut reqs: Vec<Requirement> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::In(k.clone(), BTreeSet::from([v.clone()])))
            .collect();
        for requirement in selector.match_expressions.iter().flatten() {
            let key = requirement.key.clone();
            let values: BTreeSet<String> = requirement.values.iter().flatten().cloned().collect();
            reqs.push(match requirement.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(InvalidSelector(format!(
                        "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty (key {key:?})"
                    )));
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(InvalidSelector(format!(
                        "values: Invalid value: {values:?}: values set must be empty for exists and does not exist (key {key:?})"
                    )));
                }
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => {
                    return Err(InvalidSelector(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            });
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether a label set satisfies every requirement.
    pub fn matches_map(&self, labels: &BTreeMap<String, String>) -> bool {
        self.holds(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the labels (a JSON map, or null) satisfy every requirement.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        self.holds(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    fn holds<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Whether a `metav1.LabelSelector` selects an object carrying `labels`; the empty selector
/// selects everything.
pub fn selects(
    selector: &MetaLabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, InvalidSelector> {
    Ok(LabelSelector::from_meta(selector)?.matches_map(labels))
}

/// Whether a Service-style selector (a plain map; empty selects nothing) selects `labels`.
pub fn map_selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The labels of an object given as JSON (`metadata.labels`); non-string values are skipped.
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    use super::*;

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

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> MetaLabelSelector {
        MetaLabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: (!values.is_empty())
                    .then(|| values.iter().map(|v| (*v).to_owned()).collect()),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn object_form_matches_like_string_form() {
        let sel = MetaLabelSelector {
            match_labels: Some(labels(&[("a", "b")])),
            ..expr("initializer.dev/excluded", "DoesNotExist", &[])
        };
        let parsed = LabelSelector::from_meta(&sel).unwrap();
        assert_eq!(
            parsed,
            LabelSelector::parse("a=b,!initializer.dev/excluded").unwrap()
        );
        assert!(parsed.matches(Some(&json!({"a": "b"}))));
        assert!(!parsed.matches(Some(&json!({"a": "b", "initializer.dev/excluded": "true"}))));
    }

    #[test]
    fn empty_selector_selects_everything() {
        assert!(selects(&MetaLabelSelector::default(), &labels(&[])).unwrap());
        assert!(selects(&MetaLabelSelector::default(), &labels(&[("a", "b")])).unwrap());
    }

    #[test]
    fn match_labels_needs_every_pair() {
        let sel = MetaLabelSelector {
            match_labels: Some(labels(&[("app", "web"), ("tier", "front")])),
            ..Default::default()
        };
        let all = labels(&[("app", "web"), ("tier", "front"), ("x", "y")]);
        assert!(selects(&sel, &all).unwrap());
        assert!(!selects(&sel, &labels(&[("app", "web")])).unwrap());
        assert!(!selects(&sel, &labels(&[("app", "web"), ("tier", "back")])).unwrap());
    }

    #[test]
    fn operators_follow_kubernetes_semantics() {
        let l = labels(&[("env", "prod")]);
        assert!(selects(&expr("env", "In", &["prod", "dev"]), &l).unwrap());
        assert!(!selects(&expr("env", "In", &["dev"]), &l).unwrap());
        assert!(!selects(&expr("env", "NotIn", &["prod"]), &l).unwrap());
        assert!(selects(&expr("other", "NotIn", &["prod"]), &l).unwrap());
        assert!(selects(&expr("env", "Exists", &[]), &l).unwrap());
        assert!(!selects(&expr("env", "DoesNotExist", &[]), &l).unwrap());
        assert!(selects(&expr("initializer.dev/excluded", "DoesNotExist", &[]), &l).unwrap());
    }

    #[test]
    fn malformed_object_selectors_are_errors() {
        assert!(selects(&expr("env", "Like", &["x"]), &labels(&[])).is_err());
        assert!(selects(&expr("env", "In", &[]), &labels(&[])).is_err());
        assert!(selects(&expr("env", "Exists", &["x"]), &labels(&[])).is_err());
    }

    #[test]
    fn service_selector_that_is_empty_selects_nothing() {
        assert!(!map_selects(&labels(&[]), &labels(&[("a", "b")])));
        assert!(map_selects(
            &labels(&[("a", "b")]),
            &labels(&[("a", "b"), ("c", "d")])
        ));
    }

    #[test]
    fn labels_are_read_from_metadata() {
        let obj = json!({"metadata": {"labels": {"a": "b", "n": 1}}});
        assert_eq!(labels_of(&obj), labels(&[("a", "b")]));
        assert!(labels_of(&json!({})).is_empty());
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
