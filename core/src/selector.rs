//! Merges the user's selectors with the exclusions every managed webhook must carry: the system
//! namespaces and the operator's and the initializer's own namespaces.
//!
//! Exclusion rests on namespaces alone, never on a label of the object: anyone who may create an
//! object may label it, so a label that exempted objects would let every user opt out of every
//! initializer. The initializer's own pods are excluded because they run in an excluded namespace.

use std::collections::BTreeSet;

use initializer_crds::NamespaceScope;
use initializer_crds::constants::{NAMESPACE_NAME_LABEL, SYSTEM_NAMESPACES};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::validate::Validated;

/// The webhook's `namespaceSelector`: the user's selector, plus `NotIn` for every namespace that
/// must never be intercepted, plus `In` for `include` when it is given.
pub fn namespace_selector(
    scope: Option<&NamespaceScope>,
    operator_namespace: &str,
    workload_namespace: &str,
) -> LabelSelector {
    let mut selector = scope.and_then(|s| s.selector.clone()).unwrap_or_default();
    let mut excluded: BTreeSet<String> = SYSTEM_NAMESPACES.iter().map(|s| s.to_string()).collect();
    excluded.insert(operator_namespace.to_string());
    excluded.insert(workload_namespace.to_string());
    if let Some(scope) = scope {
        excluded.extend(scope.exclude.iter().cloned());
    }
    let expressions = selector.match_expressions.get_or_insert_with(Vec::new);
    expressions.push(LabelSelectorRequirement {
        key: NAMESPACE_NAME_LABEL.to_string(),
        operator: "NotIn".to_string(),
        values: Some(excluded.into_iter().collect()),
    });
    if let Some(scope) = scope.filter(|s| !s.include.is_empty()) {
        let included: BTreeSet<String> = scope.include.iter().cloned().collect();
        expressions.push(LabelSelectorRequirement {
            key: NAMESPACE_NAME_LABEL.to_string(),
            operator: "In".to_string(),
            values: Some(included.into_iter().collect()),
        });
    }
    selector
}

/// The webhook's `objectSelector`: the user's selector as given (empty: every object). Nothing
/// is added: no label an object's author can set exempts it from interception.
pub fn object_selector(user: Option<&LabelSelector>) -> LabelSelector {
    user.cloned().unwrap_or_default()
}

/// Where an Initializer intercepts, the same for its webhook, its fallback policy and its
/// compiled policy: the namespaces (with the exclusions) and the objects they match, by
/// equivalent resource (`matchPolicy: Equivalent`).
#[derive(Clone, Debug, PartialEq)]
pub struct InterceptScope {
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
}

impl InterceptScope {
    /// `matchPolicy` of every configuration: a request for another version of a matched
    /// resource is intercepted too.
    pub const MATCH_POLICY: &'static str = "Equivalent";

    /// The scope of the validated Initializer `v`.
    pub fn of(v: &Validated) -> Self {
        Self {
            namespace_selector: namespace_selector(
                v.spec.namespaces.as_ref(),
                &v.operator_namespace,
                &v.namespace,
            ),
            object_selector: object_selector(v.spec.object_selector.as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn requirement<'a>(s: &'a LabelSelector, op: &str) -> &'a LabelSelectorRequirement {
        s.match_expressions
            .as_ref()
            .unwrap()
            .iter()
            .find(|r| r.operator == op && r.key == NAMESPACE_NAME_LABEL)
            .unwrap()
    }

    #[test]
    fn without_a_user_scope_only_the_mandatory_exclusions_apply() {
        let s = namespace_selector(None, "initializer-system", "initializer-system");
        assert_eq!(s.match_expressions.as_ref().unwrap().len(), 1);
        assert_eq!(
            requirement(&s, "NotIn").values.as_deref().unwrap(),
            ["initializer-system", "kube-node-lease", "kube-system"]
        );
        assert!(s.match_labels.is_none());
    }

    #[test]
    fn user_selector_exclude_and_include_are_merged_with_the_exclusions() {
        let scope = NamespaceScope {
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("env".into(), "test".into())])),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "Exists".into(),
                    values: None,
                }]),
            }),
            include: vec!["team-b".into(), "team-a".into()],
            exclude: vec!["legacy".into()],
        };
        let s = namespace_selector(Some(&scope), "ops", "sidecars");
        assert_eq!(s.match_labels.as_ref().unwrap()["env"], "test");
        let exprs = s.match_expressions.as_ref().unwrap();
        assert_eq!(exprs.len(), 3);
        assert_eq!(exprs[0].key, "tier");
        assert_eq!(
            requirement(&s, "NotIn").values.as_deref().unwrap(),
            [
                "kube-node-lease",
                "kube-system",
                "legacy",
                "ops",
                "sidecars"
            ]
        );
        assert_eq!(
            requirement(&s, "In").values.as_deref().unwrap(),
            ["team-a", "team-b"]
        );
    }

    #[test]
    fn no_label_an_author_can_set_exempts_an_object() {
        use initializer_crds::constants::EXCLUDE_LABEL;
        let none = object_selector(None);
        assert_eq!(
            none,
            LabelSelector::default(),
            "an empty selector matches every object"
        );
        let user = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "Exists".into(),
                values: None,
            }]),
        };
        assert_eq!(object_selector(Some(&user)), user);
        for selector in [none, object_selector(Some(&user))] {
            assert!(
                selector
                    .match_expressions
                    .iter()
                    .flatten()
                    .all(|r| r.key != EXCLUDE_LABEL),
                "{selector:?}"
            );
        }
    }
}
