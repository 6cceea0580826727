//! What the operator needs before it starts: the guard on Initializers, the Initializer CRD and
//! the operator's namespace, in that order (as `install --bundle` applies them).
//! A file of its own so that the reconcile benchmark can include it (`#[path]`) without the
//! rest of the test support (the clusters, the control plane).

use std::time::Duration;

use initializer_crds::Initializer;
use initializer_test_support::wait_until;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, CustomResourceExt};
use serde_json::json;

/// Applies the guard on Initializers (where the API server serves it), creates the Initializer
/// CRD and `namespace`, and returns once the Initializer API answers (a CRD is served a moment
/// after it is stored) and the guard is in force, so that the tests' Initializers are guarded.
pub async fn install_crd_and_namespace(client: &Client, namespace: &str) {
    let guard = initializer_operator::guard::apply(client, None)
        .await
        .unwrap();
    install_crd_and_namespace_unguarded(client, namespace).await;
    if let initializer_operator::guard::Outcome::Applied(binding) = guard {
        until_in_force(&binding).await;
    }
}

/// Returns once the guard of `binding` is in force (its creation plus the operator's margin), as
/// the operator judges it.
pub async fn until_in_force(
    binding: &k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
) {
    let state = initializer_operator::guard::GuardState::in_force(binding).unwrap();
    wait_until("the guard in force", Duration::from_secs(10), || {
        let settled = state.is_settled(jiff::Timestamp::now());
        async move { settled }
    })
    .await;
}

/// Creates the Initializer CRD and `namespace` as [`install_crd_and_namespace`] does, without
/// the guard: what an install by OLM leaves until the operator first starts.
pub async fn install_crd_and_namespace_unguarded(client: &Client, namespace: &str) {
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &Initializer::crd())
        .await
        .unwrap();
    create_namespace(client, namespace).await;
    let initializers: Api<Initializer> = Api::all(client.clone());
    wait_until("the Initializer API", Duration::from_secs(10), || {
        let api = initializers.clone();
        async move { api.list(&ListParams::default()).await.is_ok() }
    })
    .await;
}

/// Creates the namespace `name`, with nothing but its name.
pub async fn create_namespace(client: &Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
}
