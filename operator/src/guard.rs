//! The guard on Initializers themselves. An Initializer is cluster-admin power: it can inject
//! privileged containers into every pod, rewrite what it intercepts and run any image with the
//! Secrets of its workload namespace. Under OLM, everyone bound to `edit` or `admin` may create
//! one, because OLM aggregates rights on owned CRDs into those roles. So the operator keeps a
//! ValidatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1, Kubernetes 1.30
//! and later) that refuse creating an Initializer, changing its spec, writing its status or
//! deleting it, unless the requester may create MutatingWebhookConfigurations, which is the
//! power an Initializer hands out. Deleting a security initializer switches it off, and a
//! status the operator adopts after a restart (an outage's record, a degraded phase) steers it.
//!
//! The installer and the Helm chart apply both before the CRD; a registry+v1 bundle cannot carry
//! a policy, so under OLM the operator alone applies them, at startup (server-side apply, our
//! field manager and managed-by label). Either way it then watches them and applies them again
//! as soon as either is deleted or edited. [`policy`] and [`binding`] build them (pure, in
//! `initializer_packaging::guard`); [`keep_applied`] keeps them applied, and only logs a warning
//! where the API server does not serve the API: the operator still starts.

use std::time::Duration;

use futures::StreamExt;
use initializer_crds::constants::FIELD_MANAGER;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use initializer_packaging::guard::{
    GUARD_EXPRESSION, GUARD_MESSAGE, GUARD_NAME, MATCH_EXPRESSION, binding, policy,
};

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
/// place or the API server turns out not to serve it; then keeps it in place ([`keep_restoring`])
/// until `shutdown`. Never fails the operator.
pub async fn keep_applied(client: Client, shutdown: CancellationToken) {
    let mut delay = Duration::from_millis(500);
    loop {
        match apply(&client).await {
            Ok(Outcome::Applied) => {
                info!(name = GUARD_NAME, "guard on Initializers applied");
                keep_restoring(&client, &shutdown).await;
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

/// Watches the policy and the binding and applies both again at every change seen: a deletion,
/// or an edit (a check removed, the binding set to audit only). Applying what is already in place
/// changes nothing and so wakes no watch.
async fn keep_restoring(client: &Client, shutdown: &CancellationToken) {
    let by_name = watcher::Config::default().fields(&format!("metadata.name={GUARD_NAME}"));
    let policies = watcher(
        Api::<ValidatingAdmissionPolicy>::all(client.clone()),
        by_name.clone(),
    )
    .default_backoff()
    .map(|event| event.map(|e| is_change(&e)));
    let bindings = watcher(
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()),
        by_name,
    )
    .default_backoff()
    .map(|event| event.map(|e| is_change(&e)));
    let mut events = std::pin::pin!(futures::stream::select(policies, bindings));
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Ok(false)) => {}
            Some(Ok(true)) => match apply(client).await {
                Ok(_) => info!(
                    name = GUARD_NAME,
                    "guard on Initializers applied again after a change"
                ),
                Err(e) => warn!(error = %e, "failed to restore the guard on Initializers"),
            },
            Some(Err(e)) => warn!(error = %e, "watching the guard on Initializers failed"),
        }
    }
}

/// Whether a watch event may mean the object changed: an edit, a deletion, or the end of a
/// (re)listing, which is all a deletion missed while the watch was down leaves behind.
fn is_change<K>(event: &watcher::Event<K>) -> bool {
    matches!(
        event,
        watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use initializer_crds::constants::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

    #[test]
    fn the_policy_refuses_creates_deletes_spec_and_status_changes_without_webhook_rights() {
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
            Some(
                &[
                    "initializers".to_string(),
                    "initializers/status".to_string()
                ][..]
            )
        );
        assert_eq!(
            rules[0].operations.as_deref(),
            Some(
                &[
                    "CREATE".to_string(),
                    "UPDATE".to_string(),
                    "DELETE".to_string()
                ][..]
            )
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
