//! Which webhooks a request reaches: rules (groups, versions, resources with subresources,
//! operations, scope), `matchPolicy`, and the exempt admission-configuration resources.
//!
//! Selectors are evaluated by the dispatcher because the namespace's labels come from the view.

use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;

use super::{Attributes, Operation};

/// Resources the real API server never sends to webhooks, so that a broken webhook can always be
/// removed.
const EXEMPT: &[(&str, &str)] = &[
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
    ),
    ("admissionregistration.k8s.io", "mutatingadmissionpolicies"),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicybindings",
    ),
];

/// Whether the request is for a resource no webhook may intercept.
pub fn is_exempt(attrs: &Attributes) -> bool {
    EXEMPT
        .iter()
        .any(|(g, r)| attrs.group == *g && attrs.resource == *r)
}

/// `matchPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchPolicy {
    /// Only the exact group/version/resource.
    Exact,
    /// Also equivalent resources: other versions of the same group and resource, and the
    /// `extensions` ↔ `apps` aliases of workload kinds.
    Equivalent,
}

impl MatchPolicy {
    /// Parses the field; absent means `Equivalent`, as in admissionregistration/v1.
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some("Exact") => Self::Exact,
            _ => Self::Equivalent,
        }
    }
}

fn operation_name(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn contains_or_star(list: Option<&Vec<String>>, value: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|x| x == "*" || x == value))
}

fn resource_matches(
    rule_resources: Option<&Vec<String>>,
    resource: &str,
    subresource: &str,
) -> bool {
    let full = if subresource.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}/{subresource}")
    };
    rule_resources.is_some_and(|list| {
        list.iter().any(|r| {
            if r == "*/*" || r == &full || (r == "*" && subresource.is_empty()) {
                return true;
            }
            match r.split_once('/') {
                Some(("*", sub)) => !subresource.is_empty() && sub == subresource,
                Some((res, "*")) => !subresource.is_empty() && res == resource,
                _ => false,
            }
        })
    })
}

fn scope_matches(scope: Option<&str>, attrs: &Attributes) -> bool {
    let is_namespace_object = attrs.group.is_empty() && attrs.resource == "namespaces";
    let namespaced = attrs.namespace.as_deref().is_some_and(|n| !n.is_empty());
    match scope {
        None | Some("*") => true,
        // Namespace objects are cluster-scoped even though their requests name a namespace.
        Some("Namespaced") => !is_namespace_object && namespaced,
        Some("Cluster") => is_namespace_object || !namespaced,
        Some(_) => false,
    }
}

/// Whether one rule matches the request's group, version, resource, operation and scope exactly.
pub fn rule_matches(
    rule: &RuleWithOperations,
    attrs: &Attributes,
    group: &str,
    version: &str,
) -> bool {
    contains_or_star(rule.operations.as_ref(), operation_name(attrs.operation))
        && contains_or_star(rule.api_groups.as_ref(), group)
        && contains_or_star(rule.api_versions.as_ref(), version)
        && resource_matches(rule.resources.as_ref(), &attrs.resource, &attrs.subresource)
        && scope_matches(rule.scope.as_deref(), attrs)
}

/// Groups that serve the same resource under another name.
fn equivalent_groups(group: &str, resource: &str) -> &'static [&'static str] {
    match (group, resource) {
        ("apps", "deployments" | "replicasets" | "daemonsets") => &["extensions"],
        ("extensions", "deployments" | "replicasets" | "daemonsets") => &["apps"],
        ("networking.k8s.io", "ingresses" | "networkpolicies") => &["extensions"],
        _ => &[],
    }
}

/// Whether any rule matches, honouring `matchPolicy`.
///
/// The sandbox serves one version per resource, so under `Equivalent` a rule naming another
/// version of the same group and resource (or an `extensions` alias) matches too; the object is
/// sent as stored, not converted.
pub fn any_rule_matches(
    rules: &[RuleWithOperations],
    policy: MatchPolicy,
    attrs: &Attributes,
) -> bool {
    if rules
        .iter()
        .any(|r| rule_matches(r, attrs, &attrs.group, &attrs.version))
    {
        return true;
    }
    if policy == MatchPolicy::Exact {
        return false;
    }
    let groups = std::iter::once(attrs.group.as_str()).chain(
        equivalent_groups(&attrs.group, &attrs.resource)
            .iter()
            .copied(),
    );
    for group in groups {
        for rule in rules {
            let versions = rule.api_versions.iter().flatten();
            for version in versions {
                if rule_matches(rule, attrs, group, version) {
                    return true;
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::super::UserInfo;
    use super::*;

    fn attrs(
        group: &str,
        version: &str,
        resource: &str,
        sub: &str,
        ns: Option<&str>,
        op: Operation,
    ) -> Attributes {
        Attributes {
            group: group.into(),
            version: version.into(),
            kind: String::new(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.map(Into::into),
            name: "x".into(),
            operation: op,
            object: None,
            old_object: None,
            dry_run: false,
            user: UserInfo::default(),
        }
    }

    fn rule(
        groups: &[&str],
        versions: &[&str],
        resources: &[&str],
        ops: &[&str],
        scope: Option<&str>,
    ) -> RuleWithOperations {
        let v = |x: &[&str]| Some(x.iter().map(|s| (*s).to_owned()).collect());
        RuleWithOperations {
            api_groups: v(groups),
            api_versions: v(versions),
            resources: v(resources),
            operations: v(ops),
            scope: scope.map(Into::into),
        }
    }

    /// A request for `resource` in `group`/v1, in namespace `a`.
    fn in_namespace(group: &str, resource: &str, op: Operation) -> Attributes {
        attrs(group, "v1", resource, "", Some("a"), op)
    }

    #[test]
    fn pods_create_matches_a_pods_create_rule_only() {
        let r = rule(&[""], &["v1"], &["pods"], &["CREATE"], None);
        for (group, resource, op, want) in [
            ("", "pods", Operation::Create, true),
            ("", "pods", Operation::Update, false),
            ("", "secrets", Operation::Create, false),
            ("apps", "pods", Operation::Create, false),
        ] {
            let a = in_namespace(group, resource, op);
            assert_eq!(
                rule_matches(&r, &a, group, "v1"),
                want,
                "{group}/{resource}"
            );
        }
    }

    #[test]
    fn wildcards_cover_operations_groups_versions_and_resources() {
        let r = rule(&["*"], &["*"], &["*"], &["*"], None);
        let a = in_namespace("apps", "deployments", Operation::Delete);
        assert!(rule_matches(&r, &a, "apps", "v1"));
    }

    #[test]
    fn star_does_not_match_subresources_but_star_slash_star_does() {
        let status = attrs("", "v1", "pods", "status", Some("a"), Operation::Update);
        for (resource, want) in [
            ("*", false),
            ("pods", false),
            ("*/*", true),
            ("pods/status", true),
            ("pods/*", true),
            ("*/status", true),
        ] {
            let r = rule(&[""], &["v1"], &[resource], &["*"], None);
            assert_eq!(rule_matches(&r, &status, "", "v1"), want, "{resource}");
        }
        let main = in_namespace("", "pods", Operation::Update);
        let r = rule(&[""], &["v1"], &["pods/status"], &["*"], None);
        assert!(!rule_matches(&r, &main, "", "v1"));
    }

    #[test]
    fn scope_separates_namespaced_and_cluster_objects() {
        let namespaced = rule(&["*"], &["*"], &["*"], &["*"], Some("Namespaced"));
        let cluster = rule(&["*"], &["*"], &["*"], &["*"], Some("Cluster"));
        let pod = in_namespace("", "pods", Operation::Create);
        let node = attrs("", "v1", "nodes", "", None, Operation::Create);
        let ns = in_namespace("", "namespaces", Operation::Create);
        assert!(rule_matches(&namespaced, &pod, "", "v1"));
        assert!(!rule_matches(&namespaced, &node, "", "v1"));
        assert!(!rule_matches(&namespaced, &ns, "", "v1"));
        assert!(rule_matches(&cluster, &node, "", "v1"));
        assert!(rule_matches(&cluster, &ns, "", "v1"));
        assert!(!rule_matches(&cluster, &pod, "", "v1"));
    }

    #[test]
    fn equivalent_policy_matches_other_versions_and_aliases_but_exact_does_not() {
        let old = rule(
            &["extensions"],
            &["v1beta1"],
            &["deployments"],
            &["CREATE"],
            None,
        );
        let a = in_namespace("apps", "deployments", Operation::Create);
        assert!(any_rule_matches(
            std::slice::from_ref(&old),
            MatchPolicy::Equivalent,
            &a
        ));
        assert!(!any_rule_matches(
            std::slice::from_ref(&old),
            MatchPolicy::Exact,
            &a
        ));
        let other_version = rule(&["apps"], &["v1beta2"], &["deployments"], &["CREATE"], None);
        assert!(any_rule_matches(
            &[other_version],
            MatchPolicy::Equivalent,
            &a
        ));
        let unrelated = rule(&["batch"], &["v1"], &["deployments"], &["CREATE"], None);
        assert!(!any_rule_matches(&[unrelated], MatchPolicy::Equivalent, &a));
    }

    #[test]
    fn webhook_configurations_are_exempt() {
        assert!(is_exempt(&attrs(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "",
            None,
            Operation::Create
        )));
        assert!(!is_exempt(&in_namespace("", "pods", Operation::Create)));
    }
}
