//! Label selectors evaluated the API server's way (kube's own matching), one requirement at a
//! time, so a verdict can name exactly which requirement failed.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::core::{Selector, SelectorExt};

/// One requirement of a label selector, `matchLabels` entries as `In [value]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values (`In`, `NotIn`).
    pub values: Vec<String>,
    /// Whether it came from `matchLabels`.
    pub from_match_labels: bool,
}

/// The requirements of `selector` that `labels` do not meet (empty: the selector matches), each
/// evaluated by kube's own selector matching; an error for a selector the API server refuses.
pub fn failed_requirements(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<Requirement>, String> {
    let whole = Selector::try_from(selector.clone())
        .map_err(|e| format!("failed to parse a label selector: {e}"))?;
    if whole.matches(labels) {
        return Ok(Vec::new());
    }
    let mut requirements: Vec<Requirement> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| Requirement {
            key: key.clone(),
            operator: "In".to_string(),
            values: vec![value.clone()],
            from_match_labels: true,
        })
        .collect();
    requirements.extend(
        selector
            .match_expressions
            .iter()
            .flatten()
            .map(|e| Requirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
                from_match_labels: false,
            }),
    );
    let mut failed = Vec::new();
    for requirement in requirements {
        let single = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: requirement.key.clone(),
                operator: requirement.operator.clone(),
                values: (!requirement.values.is_empty()).then(|| requirement.values.clone()),
            }]),
        };
        let one = Selector::try_from(single)
            .map_err(|e| format!("failed to parse a label selector: {e}"))?;
        if !one.matches(labels) {
            failed.push(requirement);
        }
    }
    Ok(failed)
}

pub(super) fn show_requirement(r: &Requirement) -> String {
    match r.operator.as_str() {
        "In" if r.from_match_labels => format!("{}={}", r.key, r.values.join(",")),
        "In" => format!("{} in ({})", r.key, r.values.join(",")),
        "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
        "Exists" => r.key.clone(),
        "DoesNotExist" => format!("!{}", r.key),
        other => format!("{} {other} ({})", r.key, r.values.join(",")),
    }
}

pub(super) fn show_labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "none".to_string();
    }
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_the_api_server_would_refuse_is_an_error() {
        let selector = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Like".into(),
                values: Some(vec!["x".into()]),
            }]),
        };
        assert!(failed_requirements(&selector, &BTreeMap::new()).is_err());
    }
}
