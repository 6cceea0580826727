//! When a Deployment counts as available: one predicate for the operator's status, the
//! installer and the end-to-end tests.
//!
//! Kubernetes' Deployment controller sets the `Available` condition to `True` when at least
//! `replicas - maxUnavailable` replicas have been ready for `minReadySeconds` ("minimum
//! availability"). It counts the pods of every ReplicaSet of the Deployment, old and new, so the
//! condition stays a true statement about serving pods while `status.observedGeneration` lags
//! behind `metadata.generation` during a rollout: [`deployment_available`] does not wait for the
//! controller to observe the latest spec. When the question is instead "is my latest spec
//! running everywhere" (an installer or an upgrade waiting for its own change), ask
//! [`rollout_complete`], which adds [`observed_latest`] and kube-runtime's
//! `conditions::is_deployment_completed` (the `Progressing` condition with reason
//! `NewReplicaSetAvailable`).

use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::wait::{Condition, conditions};

/// True when the Deployment reports `Available=True` and at least one available replica: a
/// Deployment scaled to zero is `Available` by Kubernetes' definition yet serves nothing.
pub fn deployment_available(deployment: &Deployment) -> bool {
    let Some(status) = deployment.status.as_ref() else {
        return false;
    };
    status.available_replicas.unwrap_or(0) >= 1
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True"))
}

/// True when the Deployment controller has observed the latest spec (`status.observedGeneration`
/// at least `metadata.generation`), so the status describes that spec. An object without a
/// generation (never stored by an API server) has nothing to lag behind.
pub fn observed_latest(deployment: &Deployment) -> bool {
    match deployment.metadata.generation {
        None => true,
        Some(generation) => deployment
            .status
            .as_ref()
            .and_then(|status| status.observed_generation)
            .is_some_and(|observed| observed >= generation),
    }
}

/// The rollout of the latest spec is complete and the Deployment is available: what an
/// installer waits for after applying a Deployment.
pub fn rollout_complete() -> impl Condition<Deployment> {
    (|deployment: Option<&Deployment>| deployment.is_some_and(observed_latest))
        .and(conditions::is_deployment_completed())
        .and(|deployment: Option<&Deployment>| deployment.is_some_and(deployment_available))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(value: serde_json::Value) -> Deployment {
        serde_json::from_value(value).unwrap()
    }

    fn serving(generation: i64, observed: i64) -> Deployment {
        deployment(json!({
            "metadata": {"name": "d", "generation": generation},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {
                "observedGeneration": observed,
                "replicas": 2,
                "availableReplicas": 2,
                "conditions": [
                    {"type": "Available", "status": "True"},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
                ],
            },
        }))
    }

    #[test]
    fn no_status_is_not_available() {
        let d = deployment(json!({"metadata": {"name": "d"}}));
        assert!(!deployment_available(&d));
    }

    #[test]
    fn available_needs_the_condition_and_a_replica() {
        let mut d = serving(1, 1);
        assert!(deployment_available(&d));
        let status = d.status.as_mut().unwrap();
        status.available_replicas = Some(0);
        assert!(!deployment_available(&d), "scaled to zero serves nothing");
        let status = d.status.as_mut().unwrap();
        status.available_replicas = Some(1);
        status.conditions.as_mut().unwrap()[0].status = Some("False".into());
        assert!(!deployment_available(&d), "condition false");
    }

    #[test]
    fn available_counts_old_pods_while_a_new_spec_is_unobserved() {
        let d = serving(3, 2);
        assert!(deployment_available(&d));
        assert!(!observed_latest(&d));
    }

    #[test]
    fn observed_latest_compares_generations() {
        assert!(observed_latest(&serving(2, 2)));
        assert!(observed_latest(&serving(2, 3)));
        assert!(!observed_latest(&serving(3, 2)));
        let mut d = serving(1, 1);
        d.status.as_mut().unwrap().observed_generation = None;
        assert!(!observed_latest(&d), "never observed");
        d.metadata.generation = None;
        assert!(observed_latest(&d), "nothing stored to lag behind");
    }

    #[test]
    fn rollout_complete_needs_latest_spec_progress_and_availability() {
        let done = rollout_complete();
        assert!(done.matches_object(Some(&serving(1, 1))));
        assert!(!done.matches_object(None));
        assert!(
            !done.matches_object(Some(&serving(2, 1))),
            "unobserved spec"
        );
        let mut d = serving(1, 1);
        d.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].reason =
            Some("ReplicaSetUpdated".into());
        assert!(!done.matches_object(Some(&d)), "still progressing");
        let mut d = serving(1, 1);
        d.status.as_mut().unwrap().available_replicas = Some(0);
        assert!(!done.matches_object(Some(&d)), "nothing available");
    }
}
