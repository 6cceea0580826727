//! Label selectors (`matchLabels`, `matchExpressions`) evaluated against a label set, as the API
//! server and the controllers evaluate them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

/// A selector the API server would have refused: an unknown operator or values that do not fit it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to parse label selector: {0}")]
pub struct InvalidSelector(pub String);

/// Whether `selector` selects an object carrying `labels`. The empty selector selects everything.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, InvalidSelector> {
    for (key, value) in selector.match_labels.iter().flatten() {
        if labels.get(key) != Some(value) {
            return Ok(false);
        }
    }
    for requirement in selector.match_expressions.iter().flatten() {
        let values = requirement.values.as_deref().unwrap_or_default();
        let present = labels.get(&requirement.key);
        let ok = match requirement.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(InvalidSelector(format!(
                    "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty (key {:?})",
                    requirement.key
                )));
            }
            "In" => present.is_some_and(|v| values.contains(v)),
            "NotIn" => present.is_none_or(|v| !values.contains(v)),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(InvalidSelector(format!(
                    "values: Invalid value: {values:?}: values set must be empty for exists and does not exist (key {:?})",
                    requirement.key
                )));
            }
            "Exists" => present.is_some(),
            "DoesNotExist" => present.is_none(),
            other => {
                return Err(InvalidSelector(format!(
                    "{other:?} is not a valid label selector operator"
                )));
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
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
    fn empty_selector_selects_everything() {
        assert!(matches(&LabelSelector::default(), &labels(&[])).unwrap());
        assert!(matches(&LabelSelector::default(), &labels(&[("a", "b")])).unwrap());
    }

    #[test]
    fn match_labels_needs_every_pair() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "web"), ("tier", "front")])),
            ..Default::default()
        };
        assert!(
            matches(
                &sel,
                &labels(&[("app", "web"), ("tier", "front"), ("x", "y")])
            )
            .unwrap()
        );
        assert!(!matches(&sel, &labels(&[("app", "web")])).unwrap());
        assert!(!matches(&sel, &labels(&[("app", "web"), ("tier", "back")])).unwrap());
    }

    #[test]
    fn operators_follow_kubernetes_semantics() {
        let l = labels(&[("env", "prod")]);
        assert!(matches(&expr("env", "In", &["prod", "dev"]), &l).unwrap());
        assert!(!matches(&expr("env", "In", &["dev"]), &l).unwrap());
        assert!(!matches(&expr("env", "NotIn", &["prod"]), &l).unwrap());
        assert!(matches(&expr("other", "NotIn", &["prod"]), &l).unwrap());
        assert!(matches(&expr("env", "Exists", &[]), &l).unwrap());
        assert!(!matches(&expr("env", "DoesNotExist", &[]), &l).unwrap());
        assert!(matches(&expr("initializer.dev/excluded", "DoesNotExist", &[]), &l).unwrap());
    }

    #[test]
    fn malformed_selectors_are_errors() {
        assert!(matches(&expr("env", "Like", &["x"]), &labels(&[])).is_err());
        assert!(matches(&expr("env", "In", &[]), &labels(&[])).is_err());
        assert!(matches(&expr("env", "Exists", &["x"]), &labels(&[])).is_err());
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
        let obj = serde_json::json!({"metadata": {"labels": {"a": "b", "n": 1}}});
        assert_eq!(labels_of(&obj), labels(&[("a", "b")]));
        assert!(labels_of(&serde_json::json!({})).is_empty());
    }
}
