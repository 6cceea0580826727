//! A refused Initializer, as the reconcile and legacy tests check one: marked Invalid with the
//! reason in its `Valid` condition, and nothing deployed for it.

use std::time::Duration;

use initializer_crds::{Initializer, Phase};
use initializer_test_support::wait_until;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};

/// Creates `initializer`, waits until its phase is Invalid, and returns its `Valid` condition
/// as (status, message).
pub async fn create_and_wait_invalid(
    client: &Client,
    initializer: &Initializer,
) -> (String, String) {
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), initializer)
        .await
        .unwrap();
    let name = initializer.name_any();
    wait_until("phase Invalid", Duration::from_secs(30), || {
        let (api, name) = (api.clone(), name.clone());
        async move {
            let current = api.get_opt(&name).await.unwrap();
            current.and_then(|i| i.status).and_then(|s| s.phase) == Some(Phase::Invalid)
        }
    })
    .await;
    let status = api.get(&name).await.unwrap().status.unwrap();
    let valid = status
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Valid")
        .unwrap();
    (valid.status, valid.message)
}

/// Whether `namespace` holds no Deployment `name`: a refused Initializer deploys nothing.
pub async fn nothing_deployed(client: &Client, namespace: &str, name: &str) -> bool {
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()
        .is_none()
}
