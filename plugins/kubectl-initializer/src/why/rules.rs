//! Admission rules matched the API server's way: wildcards, subresources, scope and
//! `matchPolicy`.

use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;

use super::Request;

pub(super) fn show_rule(rule: &RuleWithOperations) -> String {
    let list = |l: &Option<Vec<String>>| {
        l.as_deref()
            .unwrap_or_default()
            .iter()
            .map(|s| if s.is_empty() { "\"\"" } else { s.as_str() })
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "{} groups [{}] versions [{}] resources [{}] scope {}",
        list(&rule.operations),
        list(&rule.api_groups),
        list(&rule.api_versions),
        list(&rule.resources),
        rule.scope.as_deref().unwrap_or("*")
    )
}

fn contains_or_star(list: Option<&Vec<String>>, value: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|x| x == "*" || x == value))
}

/// Whether a rule's resource entry names the request's resource and subresource, with the API
/// server's wildcard forms (`*`, `*/*`, `*/sub`, `name/*`).
fn resource_matches(entries: Option<&Vec<String>>, resource: &str, subresource: &str) -> bool {
    let full = if subresource.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{subresource}")
    };
    entries.is_some_and(|list| {
        list.iter().any(|entry| {
            if entry == "*/*" || *entry == full || (entry == "*" && subresource.is_empty()) {
                return true;
            }
            match entry.split_once('/') {
                Some(("*", sub)) => !subresource.is_empty() && sub == subresource,
                Some((res, "*")) => !subresource.is_empty() && res == resource,
                _ => false,
            }
        })
    })
}

fn scope_matches(scope: Option<&str>, request: &Request) -> bool {
    match scope {
        None | Some("*") => true,
        Some("Namespaced") => request.namespaced,
        Some("Cluster") => !request.namespaced,
        Some(_) => false,
    }
}

/// Whether an admission rule matches the request. With `equivalent` (`matchPolicy:
/// Equivalent`, the default), a rule naming another version of the same group and resource
/// matches too: the API server converts the object to the version the rule names.
pub fn rule_matches(rule: &RuleWithOperations, request: &Request, equivalent: bool) -> bool {
    let version_ok = contains_or_star(rule.api_versions.as_ref(), &request.version)
        || (equivalent && !rule.api_versions.as_deref().unwrap_or_default().is_empty());
    contains_or_star(rule.operations.as_ref(), &request.operation)
        && contains_or_star(rule.api_groups.as_ref(), &request.group)
        && version_ok
        && resource_matches(
            rule.resources.as_ref(),
            &request.resource,
            &request.subresource,
        )
        && scope_matches(rule.scope.as_deref(), request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::why::tests::deployment;
    use serde_json::json;

    #[test]
    fn rules_follow_the_api_servers_wildcards_scope_and_match_policy() {
        let rule = |group: &str, version: &str, resource: &str, scope: &str| RuleWithOperations {
            api_groups: Some(vec![group.to_string()]),
            api_versions: Some(vec![version.to_string()]),
            resources: Some(vec![resource.to_string()]),
            operations: Some(vec!["CREATE".into()]),
            scope: Some(scope.into()),
        };
        let pods = deployment("shop", json!({}), json!({}));
        let mut pod = pods.clone();
        pod.group = String::new();
        pod.resource = "pods".into();
        let mut status = pod.clone();
        status.subresource = "status".into();
        for (group, version, resource, scope, request, matches) in [
            ("", "v1", "pods", "*", &pod, true),
            ("*", "*", "*", "Namespaced", &pod, true),
            ("*", "*", "*", "Cluster", &pod, false),
            ("apps", "v1", "pods", "*", &pod, false),
            ("", "v1", "*", "*", &status, false),
            ("", "v1", "*/status", "*", &status, true),
            ("", "v1", "pods/*", "*", &status, true),
            ("", "v1", "pods/*", "*", &pod, false),
        ] {
            assert_eq!(
                rule_matches(&rule(group, version, resource, scope), request, false),
                matches,
                "{group}/{version}/{resource} {scope} on subresource {:?}",
                request.subresource
            );
        }
        let beta = rule("apps", "v1beta1", "deployments", "*");
        assert!(!rule_matches(&beta, &pods, false));
        assert!(rule_matches(&beta, &pods, true));
    }
}
