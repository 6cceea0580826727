//! Deletion: finalizers, garbage collection (background, foreground, orphan) and namespaces.

use initializer_e2e::conformance::Scoped;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, PropagationPolicy};
use serde_json::json;

use crate::support::{
    CONTROLLER_TIMEOUT, api_code, cm, create, create_configmap, eventually, gone, merge, refused,
};
use crate::target::Target;

pub async fn finalizers_hold_deletion_until_removed(t: &Target) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    let mut obj = cm("a", json!({}));
    obj.metadata.finalizers = Some(vec!["example.dev/hold".into()]);
    create(&cms, &obj).await?;
    cms.delete("a", &DeleteParams::default()).await?;
    let held = cms.get("a").await?;
    assert!(held.metadata.deletion_timestamp.is_some());
    // A held object can still be written, but gains no finalizers.
    let err = refused(
        merge(
            &cms,
            "a",
            json!({"metadata": {"finalizers": ["example.dev/hold", "example.dev/more"]}}),
        )
        .await,
    )?;
    assert_eq!(api_code(&err), (422, "Invalid".into()), "{err}");
    merge(&cms, "a", json!({"metadata": {"finalizers": null}})).await?;
    assert!(gone(&cms, "a").await);
    Ok(())
}

fn owned_cm(name: &str, owner: &ConfigMap) -> ConfigMap {
    let mut c = cm(name, json!({}));
    c.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.metadata.name.clone().unwrap(),
        uid: owner.metadata.uid.clone().unwrap(),
        block_owner_deletion: Some(true),
        controller: Some(true),
    }]);
    c
}

pub async fn garbage_collection_deletes_dependents_of_a_deleted_owner(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, owner) = create_configmap(t, "owner", json!({})).await?;
    create(&cms, &owned_cm("dep", &owner)).await?;
    cms.delete("owner", &DeleteParams::background()).await?;
    assert!(matches!(cms.get_opt("owner").await, Ok(None)));
    assert!(gone(&cms, "dep").await, "the dependent outlived its owner");
    Ok(())
}

pub async fn foreground_deletion_removes_dependents_before_the_owner(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, owner) = create_configmap(t, "owner", json!({})).await?;
    let mut dep = owned_cm("dep", &owner);
    dep.metadata.finalizers = Some(vec!["example.dev/hold".into()]);
    create(&cms, &dep).await?;
    cms.delete("owner", &DeleteParams::foreground()).await?;
    // The owner waits, marked, with the foregroundDeletion finalizer ...
    let o = cms.get("owner").await?;
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(
        o.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"foregroundDeletion".to_string())
    );
    // ... while its dependent is deleted, held by its own finalizer.
    assert!(
        eventually(CONTROLLER_TIMEOUT, || async {
            cms.get("dep")
                .await
                .is_ok_and(|d| d.metadata.deletion_timestamp.is_some())
        })
        .await
    );
    assert!(cms.get_opt("owner").await?.is_some());
    merge(&cms, "dep", json!({"metadata": {"finalizers": null}})).await?;
    assert!(gone(&cms, "owner").await);
    assert!(cms.get_opt("dep").await?.is_none());
    Ok(())
}

pub async fn orphan_deletion_keeps_dependents_and_strips_their_owner_reference(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, owner) = create_configmap(t, "owner", json!({})).await?;
    create(&cms, &owned_cm("dep", &owner)).await?;
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    cms.delete("owner", &dp).await?;
    assert!(gone(&cms, "owner").await);
    let dep = cms.get("dep").await?;
    assert!(dep.metadata.owner_references.unwrap_or_default().is_empty());
    Ok(())
}

pub async fn deleting_a_namespace_deletes_its_contents_then_itself(
    t: &Target,
) -> anyhow::Result<()> {
    let name = t.unique("temp");
    let nss: Api<Namespace> = Api::all(t.client());
    t.create_namespace(&name).await?;
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), &name);
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.dev/hold".into()]);
    create(&cms, &held).await?;
    create(&cms, &cm("a", json!({}))).await?;
    nss.delete(&name, &DeleteParams::default()).await?;
    // The finalizer keeps the namespace Terminating, which refuses new content.
    let terminating = nss.get(&name).await?;
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    let err = refused(create(&cms, &cm("b", json!({}))).await)?;
    assert_eq!(api_code(&err), (403, "Forbidden".into()));
    assert!(
        eventually(CONTROLLER_TIMEOUT, || async {
            cms.get("held")
                .await
                .is_ok_and(|c| c.metadata.deletion_timestamp.is_some())
                && matches!(cms.get_opt("a").await, Ok(None))
        })
        .await
    );
    assert!(nss.get_opt(&name).await?.is_some());
    merge(&cms, "held", json!({"metadata": {"finalizers": null}})).await?;
    assert!(gone(&nss, &name).await);
    let left = Api::<ConfigMap>::all(t.client())
        .list(&ListParams::default().fields(&format!("metadata.namespace={name}")))
        .await?;
    assert!(left.items.is_empty());
    Ok(())
}
