//! The operator's bounds, as objects: a ValidatingAdmissionPolicy and binding that let the
//! operator's own account create, change and delete only the webhook configurations it made.
//! RBAC cannot say that: it grants `patch` and `delete` on every webhook configuration, or on
//! those named in advance, and the operator names its configurations after Initializers nobody
//! has written yet. So a bug that reaches for someone else's configuration (deleting it, taking
//! it over by adding the operator's label) is refused by the API server itself.
//!
//! What they cannot do: Kubernetes applies no admission policy to requests on admission
//! policies and their bindings, so neither those kinds nor the bounds themselves can be covered,
//! and whoever holds the operator's token can delete the bounds before anything else. They stop
//! a bug, not a thief. Pure builders: the operator creates them when it starts, for the account
//! it runs as (under OLM a bundle cannot carry a policy, and only the running operator knows its
//! account for sure), and `uninstall` removes them.

use initializer_crds::constants::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicySpec, Validation,
};

use crate::guard::{denying_binding, operator_metadata, writes_to};

/// The API group of everything the bounds cover.
const GROUP: &str = "admissionregistration.k8s.io";

/// The kinds the bounds cover: webhook configurations, the only admission configuration that
/// admission policies are applied to.
pub const RESOURCES: [&str; 2] = [
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
];

/// What a refused request of the operator's account reads.
pub const BOUNDS_MESSAGE: &str = "the initializer-operator's account may create, change and delete only the webhook configurations it made (labelled app.kubernetes.io/managed-by=initializer-operator)";

/// The prefix of the bounds' name; the rest names the account (see [`name`]).
pub const BOUNDS_PREFIX: &str = "initializer-operator-bounds";

/// The prefix of every service account's user name.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// The longest name the API server accepts for a policy (a DNS subdomain).
const NAME_MAX: usize = 253;

/// The bounds' name (policy and binding) for `username`: one per account, so a reinstall under
/// another account gets bounds of its own. `None` for anything but a service account (an
/// operator run by hand under a person's credentials is not bounded), and for an account whose
/// name would make it longer than the API server accepts.
pub fn name(username: &str) -> Option<String> {
    let (namespace, account) = username
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)?
        .split_once(':')?;
    let valid = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    };
    let name = format!("{BOUNDS_PREFIX}.{namespace}.{account}");
    (valid(namespace) && valid(account) && name.len() <= NAME_MAX).then_some(name)
}

/// The service account user name of `account` in `namespace`.
pub fn service_account_user(namespace: &str, account: &str) -> String {
    format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{account}")
}

/// Whether `object` (a CEL variable) carries the operator's label.
fn made_by_the_operator(object: &str) -> String {
    format!(
        "(has({object}.metadata.labels) && '{MANAGED_BY_LABEL}' in {object}.metadata.labels \
         && {object}.metadata.labels['{MANAGED_BY_LABEL}'] == '{MANAGED_BY_VALUE}')"
    )
}

/// The rule every request of the operator's account passes: what it changes or deletes was the
/// operator's before the request (`oldObject`, null on a create), and what it creates or leaves
/// is the operator's after it (`object`, null on a delete). Adding the label to someone else's
/// object is a change of an object that was not the operator's.
pub fn ownership_expression() -> String {
    format!(
        "(request.operation == 'CREATE' || {}) && (request.operation == 'DELETE' || {})",
        made_by_the_operator("oldObject"),
        made_by_the_operator("object"),
    )
}

/// The policy for the account `username`, named [`name`] (`None` when it is no service account).
pub fn policy(username: &str) -> Option<ValidatingAdmissionPolicy> {
    let name = name(username)?;
    Some(ValidatingAdmissionPolicy {
        metadata: operator_metadata(&name),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_string()),
            match_constraints: Some(writes_to(GROUP, RESOURCES.map(String::from).to_vec())),
            match_conditions: Some(vec![MatchCondition {
                name: "the-operators-account".to_string(),
                expression: format!("request.userInfo.username == '{username}'"),
            }]),
            validations: Some(vec![Validation {
                expression: ownership_expression(),
                message: Some(BOUNDS_MESSAGE.to_string()),
                reason: Some("Forbidden".to_string()),
                message_expression: None,
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The binding of [`policy`], everywhere, denying.
pub fn binding(username: &str) -> Option<ValidatingAdmissionPolicyBinding> {
    name(username).map(|name| denying_binding(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPERATOR: &str = "system:serviceaccount:initializer-system:initializer-operator";

    #[test]
    fn only_a_service_account_is_bounded_under_a_name_of_its_own() {
        assert_eq!(
            name(OPERATOR).as_deref(),
            Some("initializer-operator-bounds.initializer-system.initializer-operator")
        );
        assert_eq!(
            service_account_user("initializer-system", "initializer-operator"),
            OPERATOR
        );
        let too_long = format!("system:serviceaccount:ns:{}", "a".repeat(230));
        for unbounded in [
            "kubernetes-admin",
            "system:admin",
            "system:serviceaccount:only-a-namespace",
            "system:serviceaccount::empty",
            "system:serviceaccount:ns:it's",
            too_long.as_str(),
        ] {
            assert_eq!(name(unbounded), None, "{unbounded}");
            assert!(policy(unbounded).is_none());
            assert!(binding(unbounded).is_none());
        }
    }

    #[test]
    fn the_policy_binds_only_the_operators_account_and_covers_both_webhook_kinds() {
        let policy = policy(OPERATOR).unwrap();
        let spec = policy.spec.unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        let conditions = spec.match_conditions.unwrap();
        assert_eq!(
            conditions[0].expression,
            format!("request.userInfo.username == '{OPERATOR}'")
        );
        let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
        assert_eq!(rules[0].resources.as_deref().unwrap(), RESOURCES);
        assert_eq!(
            rules[0].operations.as_deref().unwrap(),
            ["CREATE", "UPDATE", "DELETE"]
        );
        let expressions: Vec<String> = spec
            .validations
            .unwrap()
            .into_iter()
            .map(|v| v.expression)
            .collect();
        assert_eq!(expressions, [ownership_expression()]);
        let name = name(OPERATOR).unwrap();
        let binding = binding(OPERATOR).unwrap();
        assert_eq!(binding.spec.policy_name, name);
        assert_eq!(binding.spec.validation_actions, ["Deny"]);
    }
}
