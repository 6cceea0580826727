//! The guard on Initializers themselves. An Initializer is cluster-admin power: it can inject
//! privileged containers into every pod, rewrite what it intercepts and run any image with the
//! Secrets of its workload namespace. Under OLM, everyone bound to `edit` or `admin` may create
//! one, because OLM aggregates rights on owned CRDs into those roles. So the operator keeps a
//! ValidatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1, Kubernetes 1.30
//! and later) that refuse creating an Initializer, or changing its spec, unless the requester may
//! create MutatingWebhookConfigurations, which is the power an Initializer hands out.
//!
//! A registry+v1 bundle cannot carry a policy, so the operator applies both at startup (server-
//! side apply, our field manager and managed-by label). [`policy`] and [`binding`] build them
//! (pure); [`keep_applied`] applies them, and only logs a warning where the API server does not
//! serve the API: the operator still starts.

use std::collections::BTreeMap;
use std::time::Duration;

use initializer_crds::constants::{
    FIELD_MANAGER, GROUP, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PLURAL,
};
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use initializer_packaging::manifest::GUARD_NAME;

/// The check every create, and every update that changes the spec, of an Initializer must pass.
pub const GUARD_EXPRESSION: &str = "authorizer.group('admissionregistration.k8s.io').resource('mutatingwebhookconfigurations').check('create').allowed()";

/// What a refused requester reads.
pub const GUARD_MESSAGE: &str = "an Initializer is cluster-admin power (it intercepts and may change every object it matches): creating one or changing its spec needs the right to create mutatingwebhookconfigurations";

/// Only creates and spec changes need the check: metadata-only updates (finalizers removed by the
/// garbage collector, labels) and status writes hand out no power.
const MATCH_EXPRESSION: &str = "request.operation == 'CREATE' || object.spec != oldObject.spec";

fn metadata() -> ObjectMeta {
    ObjectMeta {
        name: Some(GUARD_NAME.to_string()),
        labels: Some(BTreeMap::from([(
            MANAGED_BY_LABEL.to_string(),
            MANAGED_BY_VALUE.to_string(),
        )])),
        ..Default::default()
    }
}

/// The policy: CREATE and UPDATE of `initializers.initializer.dev` are refused (fail closed)
/// unless the requester may create MutatingWebhookConfigurations.
pub fn policy() -> ValidatingAdmissionPolicy {
    ValidatingAdmissionPolicy {
        metadata: metadata(),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_string()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec![GROUP.to_string()]),
                    api_versions: Some(vec!["*".to_string()]),
                    resources: Some(vec![PLURAL.to_string()]),
                    operations: Some(vec!["CREATE".to_string(), "UPDATE".to_string()]),
                    scope: Some("*".to_string()),
                    resource_names: None,
                }]),
                ..Default::default()
            }),
            match_conditions: Some(vec![MatchCondition {
                name: "creates-or-changes-the-spec".to_string(),
                expression: MATCH_EXPRESSION.to_string(),
            }]),
            validations: Some(vec![Validation {
                expression: GUARD_EXPRESSION.to_string(),
                message: Some(GUARD_MESSAGE.to_string()),
                reason: Some("Forbidden".to_string()),
                message_expression: None,
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The binding: the policy, everywhere, denying.
pub fn binding() -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata: metadata(),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(GUARD_NAME.to_string()),
            validation_actions: Some(vec!["Deny".to_string()]),
            ..Default::default()
        }),
    }
}

/// What applying the guard came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The policy and binding are in place.
    Applied,
    /// The API server does not serve ValidatingAdmissionPolicy (before Kubernetes 1.30).
    NotServed,
}

/// Applies the policy, then the binding (so the binding never names a missing policy).
pub async fn apply(client: &Client) -> Result<Outcome, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let applied = async {
        policies
            .patch(GUARD_NAME, &params, &Patch::Apply(policy()))
            .await?;
        bindings
            .patch(GUARD_NAME, &params, &Patch::Apply(binding()))
            .await
    };
    match applied.await {
        Ok(_) => Ok(Outcome::Applied),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Outcome::NotServed),
        Err(e) => Err(e),
    }
}

/// Applies the guard at startup, retrying with backoff (up to a minute apart) until it is in
/// place, the API server turns out not to serve it, or `shutdown`. Never fails the operator.
pub async fn keep_applied(client: Client, shutdown: CancellationToken) {
    let mut delay = Duration::from_millis(500);
    loop {
        match apply(&client).await {
            Ok(Outcome::Applied) => {
                info!(name = GUARD_NAME, "guard on Initializers applied");
                return;
            }
            Ok(Outcome::NotServed) => {
                warn!(
                    "the API server does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes 1.30 or later): Initializers are guarded by RBAC alone"
                );
                return;
            }
            Err(e) => {
                warn!(error = %e, retry_in = ?delay, "failed to apply the guard on Initializers")
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(60));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_refuses_creates_and_spec_changes_of_initializers_without_webhook_rights() {
        let p = policy();
        let spec = p.spec.unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].api_groups.as_deref(),
            Some(&["initializer.dev".to_string()][..])
        );
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["initializers".to_string()][..])
        );
        assert_eq!(
            rules[0].operations.as_deref(),
            Some(&["CREATE".to_string(), "UPDATE".to_string()][..])
        );
        let validations = spec.validations.unwrap();
        assert_eq!(validations.len(), 1);
        assert_eq!(
            validations[0].expression,
            "authorizer.group('admissionregistration.k8s.io').resource('mutatingwebhookconfigurations').check('create').allowed()"
        );
        assert_eq!(validations[0].reason.as_deref(), Some("Forbidden"));
        let conditions = spec.match_conditions.unwrap();
        assert_eq!(conditions[0].expression, MATCH_EXPRESSION);
        for expression in [&validations[0].expression, &conditions[0].expression] {
            crate::cel::check(expression, crate::cel::VARIABLES).unwrap();
        }
    }

    #[test]
    fn the_binding_denies_with_the_policy_everywhere() {
        let b = binding();
        let spec = b.spec.unwrap();
        assert_eq!(spec.policy_name.as_deref(), Some(GUARD_NAME));
        assert_eq!(
            spec.validation_actions.as_deref(),
            Some(&["Deny".to_string()][..])
        );
        assert!(spec.match_resources.is_none(), "every namespace and object");
        assert!(spec.param_ref.is_none());
    }

    #[test]
    fn both_objects_are_labelled_as_managed() {
        for meta in [policy().metadata, binding().metadata] {
            assert_eq!(meta.name.as_deref(), Some(GUARD_NAME));
            assert_eq!(meta.labels.unwrap()[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
        }
    }
}
