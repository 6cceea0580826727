//! Patches, server-side apply, generation and the status subresource.

use initializer_e2e::conformance::Scoped;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support::{
    CONTROLLER_TIMEOUT, api_code, api_message, create, create_configmap, deployment, eventually,
    install_widgets, install_widgets_with, merge, merge_status, patch, refused,
};
use crate::target::{Target, namespace_resource};

pub async fn merge_json_and_strategic_patches_apply(t: &Target) -> anyhow::Result<()> {
    let deps: Api<Deployment> = Api::namespaced(t.client(), t.namespace());
    create(&deps, &deployment("web")).await?;
    let strategic = json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}}}});
    deps.patch("web", &PatchParams::default(), &Patch::Strategic(strategic))
        .await?;
    merge(&deps, "web", json!({"metadata": {"labels": {"x": "y"}}})).await?;
    let ops =
        serde_json::from_value(json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]))?;
    deps.patch("web", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await?;
    let d = deps.get("web").await?;
    let spec = d.spec;
    assert_eq!(spec.replicas, Some(3));
    let c = &spec.template.spec.unwrap().containers[0];
    let env: Vec<String> = c.env.clone().unwrap().into_iter().map(|e| e.name).collect();
    // Strategic merge puts the elements the patch names first (`normalizeElementOrder`).
    assert_eq!(env, vec!["B", "A"]);
    assert_eq!(c.image.as_deref(), Some("example/app:1"));
    assert_eq!(d.metadata.labels.unwrap()["x"], "y");
    Ok(())
}

pub async fn a_failing_json_patch_test_is_rejected_and_changes_nothing(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, _) = create_configmap(t, "a", json!({})).await?;
    let ops = serde_json::from_value(json!([
        {"op": "replace", "path": "/data/k", "value": "changed"},
        {"op": "test", "path": "/data/k", "value": "never"}
    ]))?;
    let err = refused(
        cms.patch("a", &PatchParams::default(), &Patch::<()>::Json(ops))
            .await,
    )?;
    assert_eq!(api_code(&err).0, 422, "{err}");
    assert_eq!(cms.get("a").await?.data.unwrap()["k"], "v");
    Ok(())
}

pub async fn server_side_apply_creates_and_removes_fields_the_manager_drops(
    t: &Target,
) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    let pp = PatchParams::apply("tester");
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"l": "1"}}, "data": {"x": "1", "y": "2"}});
    let created = cms.patch("a", &pp, &Patch::Apply(first)).await?;
    assert_eq!(created.data.as_ref().unwrap().len(), 2);
    let mf = created.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("tester"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    let second = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "1"}});
    let updated = cms.patch("a", &pp, &Patch::Apply(second)).await?;
    assert_eq!(
        updated.data.unwrap().keys().cloned().collect::<Vec<_>>(),
        vec!["x"]
    );
    assert!(updated.metadata.labels.unwrap_or_default().is_empty());
    Ok(())
}

pub async fn server_side_apply_conflicts_unless_forced(t: &Target) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    let obj = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": v}});
    cms.patch("a", &PatchParams::apply("one"), &Patch::Apply(obj("1")))
        .await?;
    let err = refused(
        cms.patch("a", &PatchParams::apply("two"), &Patch::Apply(obj("2")))
            .await,
    )?;
    assert_eq!(api_code(&err), (409, "Conflict".into()));
    assert_eq!(
        api_message(&err),
        "Apply failed with 1 conflict: conflict with \"one\": .data.x"
    );
    if let kube::Error::Api(s) = &err {
        let causes = s
            .details
            .as_ref()
            .map(|d| d.causes.clone())
            .unwrap_or_default();
        assert_eq!(causes.len(), 1, "{s:?}");
        assert_eq!(causes[0].reason, "FieldManagerConflict");
        assert_eq!(causes[0].field, ".data.x");
        assert_eq!(causes[0].message, "conflict with \"one\"");
    }
    // The same value is no conflict: both managers share the field.
    cms.patch("a", &PatchParams::apply("three"), &Patch::Apply(obj("1")))
        .await?;
    let forced = cms
        .patch(
            "a",
            &PatchParams::apply("two").force(),
            &Patch::Apply(obj("2")),
        )
        .await?;
    assert_eq!(forced.data.unwrap()["x"], "2");
    let managers: Vec<String> = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["two"]);
    // A manager that wrote with an update is named with the version it wrote.
    cms.patch(
        "a",
        &PatchParams {
            field_manager: Some("editor".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"data": {"y": "1"}})),
    )
    .await?;
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "2", "y": "2"}});
    let err = refused(
        cms.patch("a", &PatchParams::apply("two"), &Patch::Apply(applied))
            .await,
    )?;
    assert_eq!(
        api_message(&err),
        "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.y"
    );
    Ok(())
}

pub async fn server_side_apply_without_field_manager_is_invalid(t: &Target) -> anyhow::Result<()> {
    let (code, body) = patch(
        &t.client(),
        &format!("/api/v1/namespaces/{}/configmaps/a", t.namespace()),
        "application/apply-patch+yaml",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
    )
    .await?;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid", "{body}");
    assert_eq!(
        body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    assert_eq!(body["details"]["causes"][0]["reason"], "FieldValueRequired");
    Ok(())
}

pub async fn server_side_apply_to_the_status_subresource_touches_only_status(
    t: &Target,
) -> anyhow::Result<()> {
    let (widgets, _) = install_widgets_with(t, "w", json!({"color": "red"})).await?;
    let status = json!({"apiVersion": format!("{}/v1", t.group()), "kind": "Widget", "metadata": {"name": "w"}, "spec": {"color": "blue"}, "status": {"phase": "Ready"}});
    let out = widgets
        .patch_status("w", &PatchParams::apply("ctrl"), &Patch::Apply(status))
        .await?;
    assert_eq!(out.data["status"]["phase"], "Ready");
    assert_eq!(out.data["spec"]["color"], "red");
    assert_eq!(out.metadata.generation, Some(1));
    Ok(())
}

/// A resourceVersion in an applied configuration is a precondition on the object's version,
/// forced or not, on the main resource and on the status subresource; it is none when the apply
/// creates the object. The operator fences its status writes on it.
pub async fn server_side_apply_with_a_stale_resource_version_is_a_conflict_even_forced(
    t: &Target,
) -> anyhow::Result<()> {
    let (widgets, created) = install_widgets_with(t, "w", json!({"color": "red"})).await?;
    let read = created.metadata.resource_version.clone().unwrap();
    let applied = |phase: &str, version: &str| {
        json!({"apiVersion": format!("{}/v1", t.group()), "kind": "Widget",
            "metadata": {"name": "w", "resourceVersion": version}, "status": {"phase": phase}})
    };
    let forced = PatchParams::apply("ctrl").force();
    let first = widgets
        .patch_status("w", &forced, &Patch::Apply(applied("Ready", &read)))
        .await?;
    assert_eq!(first.data["status"]["phase"], "Ready");
    // Onto the version read before that write: refused, and the status stays.
    let err = refused(
        widgets
            .patch_status("w", &forced, &Patch::Apply(applied("Stale", &read)))
            .await,
    )?;
    assert_eq!(api_code(&err).0, 409, "{err}");
    let main = json!({"apiVersion": format!("{}/v1", t.group()), "kind": "Widget",
        "metadata": {"name": "w", "resourceVersion": read}, "spec": {"color": "blue"}});
    let err = refused(widgets.patch("w", &forced, &Patch::Apply(main)).await)?;
    assert_eq!(api_code(&err).0, 409, "{err}");
    let now = widgets.get("w").await?;
    assert_eq!(now.data["status"]["phase"], "Ready");
    assert_eq!(now.data["spec"]["color"], "red");
    assert_eq!(
        now.metadata.resource_version,
        first.metadata.resource_version
    );
    // Onto the current version: written.
    let current = now.metadata.resource_version.clone().unwrap();
    let second = widgets
        .patch_status("w", &forced, &Patch::Apply(applied("Done", &current)))
        .await?;
    assert_eq!(second.data["status"]["phase"], "Done");
    // A missing object is created whatever version the configuration names.
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    let missing = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "never-read", "resourceVersion": "12345"}, "data": {"k": "v"}});
    let made = cms
        .patch("never-read", &forced, &Patch::Apply(missing))
        .await?;
    assert_eq!(made.data.unwrap()["k"], "v");
    assert_ne!(made.metadata.resource_version.as_deref(), Some("12345"));
    Ok(())
}

pub async fn generation_moves_on_spec_changes_only(t: &Target) -> anyhow::Result<()> {
    let (widgets, _) = install_widgets_with(t, "w", json!({"color": "red"})).await?;
    let w = merge(&widgets, "w", json!({"metadata": {"labels": {"a": "b"}}})).await?;
    assert_eq!(w.metadata.generation, Some(1));
    let w = merge_status(&widgets, "w", json!({"status": {"phase": "Ready"}})).await?;
    assert_eq!(w.metadata.generation, Some(1));
    let w = merge(&widgets, "w", json!({"spec": {"size": 5}})).await?;
    assert_eq!(w.metadata.generation, Some(2));
    Ok(())
}

pub async fn status_subresource_writes_only_status_and_main_writes_ignore_status(
    t: &Target,
) -> anyhow::Result<()> {
    let (widgets, _) = install_widgets_with(t, "w", json!({"color": "red"})).await?;
    let w = merge_status(
        &widgets,
        "w",
        json!({"spec": {"size": 9}, "status": {"phase": "Ready"}}),
    )
    .await?;
    assert_eq!(w.data["spec"]["size"], 3);
    assert_eq!(w.data["status"]["phase"], "Ready");
    let w = merge(&widgets, "w", json!({"status": {"phase": "Gone"}})).await?;
    assert_eq!(w.data["status"]["phase"], "Ready");
    Ok(())
}

pub async fn reapplying_the_same_configuration_stores_nothing_new(
    t: &Target,
) -> anyhow::Result<()> {
    let svcs: Api<Service> = Api::namespaced(t.client(), t.namespace());
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"selector": {"app": "x"}, "ports": [{"name": "https", "port": 443, "targetPort": 8443}]}});
    let pp = PatchParams::apply("operator").force();
    let first = svcs.patch("s", &pp, &Patch::Apply(svc.clone())).await?;
    let second = svcs.patch("s", &pp, &Patch::Apply(svc)).await?;
    assert_eq!(
        first.metadata.resource_version,
        second.metadata.resource_version
    );
    let ports = second.spec.unwrap().ports.unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));

    // Status another writer set survives the re-apply; spec is unchanged, so is generation.
    let widgets = install_widgets(t).await?;
    let w = json!({"apiVersion": format!("{}/v1", t.group()), "kind": "Widget", "metadata": {"name": "w"}, "spec": {"color": "red"}});
    let a = widgets.patch("w", &pp, &Patch::Apply(w.clone())).await?;
    merge_status(&widgets, "w", json!({"status": {"phase": "Ready"}})).await?;
    let b = widgets.patch("w", &pp, &Patch::Apply(w)).await?;
    assert_eq!(b.metadata.generation, Some(1));
    assert_eq!(b.data["status"]["phase"], "Ready");
    assert_ne!(a.metadata.resource_version, b.metadata.resource_version);
    Ok(())
}

pub async fn apply_creating_a_namespace_behaves_like_a_create(t: &Target) -> anyhow::Result<()> {
    let client = t.client();
    let name = t.unique("applied");
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": "a"}}});
    t.delete_afterwards(namespace_resource(), &name);
    let created = nss
        .patch(&name, &PatchParams::apply("tester"), &Patch::Apply(ns))
        .await?;
    assert_eq!(
        created.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
        name
    );
    let mf = created.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    // Every namespace gets a `default` ServiceAccount (from a controller: eventually).
    let sas: Api<ServiceAccount> = Api::namespaced(client, &name);
    assert!(
        eventually(CONTROLLER_TIMEOUT, || async {
            matches!(sas.get_opt("default").await, Ok(Some(_)))
        })
        .await
    );
    Ok(())
}
