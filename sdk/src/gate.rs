//! Gates decide whether an initializer touches an object at all: by annotation (the tutorial's
//! `--annotation NAME --require-annotation`), and helpers for handlers that choose by namespace
//! name pattern or by label selector.
//!
//! The server applies the [`AnnotationGate`] before any handler runs, so every initializer
//! honours the operator's `spec.annotation` without code.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use serde_json::Value;

/// Env var naming the gate annotation; matches the operator's process contract.
pub const ANNOTATION_ENV: &str = "INITIALIZER_ANNOTATION";
/// Env var, `"true"` when objects without the gate annotation must be left alone.
pub const REQUIRE_ANNOTATION_ENV: &str = "INITIALIZER_REQUIRE_ANNOTATION";

/// Opt-in or opt-out by annotation.
///
/// With `required`, only objects carrying the annotation with a value other than `"false"` are
/// touched. Without it, every object is touched except those whose annotation is `"false"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationGate {
    /// The annotation's name.
    pub name: String,
    /// Whether the annotation must be present.
    pub required: bool,
}

impl AnnotationGate {
    /// A gate on `name`.
    pub fn new(name: impl Into<String>, required: bool) -> Self {
        Self {
            name: name.into(),
            required,
        }
    }

    /// The gate from [`ANNOTATION_ENV`] and [`REQUIRE_ANNOTATION_ENV`], if the first is set.
    pub fn from_env() -> Option<Self> {
        let name = std::env::var(ANNOTATION_ENV)
            .ok()
            .filter(|n| !n.trim().is_empty())?;
        let required = std::env::var(REQUIRE_ANNOTATION_ENV).is_ok_and(|v| v.trim() == "true");
        Some(Self::new(name.trim(), required))
    }

    /// Whether an object with these annotations passes.
    pub fn admits(&self, annotations: Option<&BTreeMap<String, String>>) -> bool {
        self.admits_value(
            annotations
                .and_then(|a| a.get(&self.name))
                .map(String::as_str),
        )
    }

    /// Whether an object whose gate annotation has this value (or is absent) passes.
    pub(crate) fn admits_value(&self, value: Option<&str>) -> bool {
        match value {
            Some(v) => v.trim() != "false",
            None => !self.required,
        }
    }

    /// Whether an untyped object (as in the review) passes, without deserializing it.
    pub fn admits_json(&self, object: &Value) -> bool {
        let value = object
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(&self.name))
            .and_then(Value::as_str);
        self.admits_value(value)
    }
}

/// Whether `name` matches `pattern`: exact, `prefix*`, or `*suffix`.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    if let Some(prefix) = pattern.strip_suffix('*') {
        name.starts_with(prefix)
    } else if let Some(suffix) = pattern.strip_prefix('*') {
        name.ends_with(suffix)
    } else {
        pattern == name
    }
}

/// Whether `labels` satisfy a Kubernetes label selector; an invalid selector matches nothing.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let empty = BTreeMap::new();
    match Selector::try_from(selector.clone()) {
        Ok(s) => s.matches(labels.unwrap_or(&empty)),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn required_annotation_gate_admits_only_annotated_objects() {
        let gate = AnnotationGate::new("initializer.kubernetes.io/sidecar", true);
        assert!(!gate.admits(None));
        assert!(!gate.admits(Some(&annotations(&[("other", "true")]))));
        assert!(gate.admits(Some(&annotations(&[(
            "initializer.kubernetes.io/sidecar",
            "true"
        )]))));
        assert!(!gate.admits(Some(&annotations(&[(
            "initializer.kubernetes.io/sidecar",
            "false"
        )]))));
    }

    #[test]
    fn optional_annotation_gate_skips_only_objects_that_opt_out() {
        let gate = AnnotationGate::new("a", false);
        assert!(gate.admits(None));
        assert!(gate.admits(Some(&annotations(&[("a", "yes")]))));
        assert!(!gate.admits(Some(&annotations(&[("a", "false")]))));
    }

    #[test]
    fn annotation_gate_reads_untyped_objects() {
        let gate = AnnotationGate::new("a", true);
        assert!(gate.admits_json(&json!({"metadata": {"annotations": {"a": "true"}}})));
        assert!(!gate.admits_json(&json!({"metadata": {"name": "x"}})));
        assert!(!gate.admits_json(&json!("not an object")));
    }

    #[test]
    fn names_match_exactly_by_prefix_or_by_suffix() {
        assert!(name_matches("test", "test"));
        assert!(!name_matches("test", "test-a"));
        assert!(name_matches("test-*", "test-a"));
        assert!(!name_matches("test-*", "test"));
        assert!(name_matches("*-test", "web-test"));
        assert!(!name_matches("*-test", "test-web"));
    }

    #[test]
    fn label_selectors_match_labels_and_expressions() {
        let selector = LabelSelector {
            match_labels: Some(annotations(&[("app", "nginx")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        assert!(selector_matches(
            &selector,
            Some(&annotations(&[("app", "nginx")]))
        ));
        assert!(!selector_matches(
            &selector,
            Some(&annotations(&[("app", "nginx"), ("tier", "db")]))
        ));
        assert!(!selector_matches(&selector, None));
        assert!(selector_matches(&LabelSelector::default(), None));
    }
}
