//! Objects: discovery, create/get/replace, names, selectors, paging, errors, dry run, tables,
//! metadata-only reads and the scale subresource.

use initializer_e2e::conformance::Scoped;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{GroupVersionKind, PartialObjectMeta};
use kube::runtime::watcher::{self, watcher};
use serde_json::{Value, json};

use crate::support::{
    api_code, cm, create, create_configmap, deployment, get, get_table, merge, names, patch, post,
    put, raw, refused,
};
use crate::target::Target;

pub async fn default_namespaces_exist_with_their_name_label(t: &Target) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(t.client());
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let ns = nss.get(name).await?;
        assert_eq!(
            ns.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
            name
        );
        assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    }
    Ok(())
}

pub async fn kube_rs_discovery_finds_builtin_groups(t: &Target) -> anyhow::Result<()> {
    let discovery = kube::Discovery::new(t.client()).run().await?;
    let groups: Vec<String> = discovery.groups().map(|g| g.name().to_string()).collect();
    for g in [
        "",
        "apps",
        "admissionregistration.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert!(
            groups.contains(&g.to_string()),
            "missing group {g:?} in {groups:?}"
        );
    }
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .unwrap();
    assert_eq!(ar.plural, "deployments");
    let subs: Vec<String> = caps
        .subresources
        .iter()
        .map(|(s, _)| s.plural.clone())
        .collect();
    assert!(subs.iter().any(|s| s.ends_with("status")), "{subs:?}");
    assert!(subs.iter().any(|s| s.ends_with("scale")), "{subs:?}");
    Ok(())
}

pub async fn created_objects_get_uid_timestamp_and_resource_version(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, created) = create_configmap(t, "a", json!({})).await?;
    let md = &created.metadata;
    assert_eq!(md.uid.as_ref().unwrap().len(), 36);
    assert!(md.creation_timestamp.is_some());
    assert_eq!(md.namespace.as_deref(), Some(t.namespace()));
    assert!(!md.resource_version.as_deref().unwrap_or("").is_empty());
    let got = cms.get("a").await?;
    assert_eq!(got.metadata.resource_version, md.resource_version);
    Ok(())
}

/// Only kinds whose strategy sets it carry `metadata.generation` (Deployments, Pods, custom
/// resources, ...); ConfigMaps, Services, Secrets do not.
pub async fn generation_is_kept_only_by_kinds_that_define_it(t: &Target) -> anyhow::Result<()> {
    let (cms, c) = create_configmap(t, "a", json!({})).await?;
    assert_eq!(c.metadata.generation, None);
    let c = merge(&cms, "a", json!({"data": {"k": "2"}})).await?;
    assert_eq!(c.metadata.generation, None);
    let deps: Api<Deployment> = Api::namespaced(t.client(), t.namespace());
    let d = create(&deps, &deployment("web")).await?;
    assert_eq!(d.metadata.generation, Some(1));
    Ok(())
}

pub async fn generate_name_makes_unique_names(t: &Target) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    let mut obj = cm("", json!({}));
    obj.metadata.name = None;
    obj.metadata.generate_name = Some("gen-".into());
    let a = create(&cms, &obj).await?;
    let b = create(&cms, &obj).await?;
    assert!(a.metadata.name.as_ref().unwrap().starts_with("gen-"));
    assert_ne!(a.metadata.name, b.metadata.name);
    Ok(())
}

pub async fn creating_an_existing_name_is_already_exists(t: &Target) -> anyhow::Result<()> {
    let (cms, _) = create_configmap(t, "a", json!({})).await?;
    let err = refused(create(&cms, &cm("a", json!({}))).await)?;
    assert_eq!(api_code(&err), (409, "AlreadyExists".into()));
    Ok(())
}

pub async fn getting_a_missing_object_is_not_found_with_a_status_body(
    t: &Target,
) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    let err = refused(cms.get("nope").await)?;
    assert_eq!(api_code(&err), (404, "NotFound".into()));
    let (code, body) = get(
        &t.client(),
        &format!("/api/v1/namespaces/{}/configmaps/nope", t.namespace()),
    )
    .await?;
    assert_eq!(code, 404);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["details"]["name"], "nope");
    assert_eq!(body["details"]["kind"], "configmaps");
    assert_eq!(body["message"], "configmaps \"nope\" not found");
    Ok(())
}

pub async fn creating_in_a_missing_namespace_is_not_found(t: &Target) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), &t.unique("ghost"));
    let err = refused(create(&cms, &cm("a", json!({}))).await)?;
    assert_eq!(api_code(&err), (404, "NotFound".into()));
    Ok(())
}

pub async fn replacing_with_a_stale_resource_version_is_a_conflict(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, first) = create_configmap(t, "a", json!({})).await?;
    let mut fresh = first.clone();
    fresh.data = Some([("k".to_string(), "2".to_string())].into());
    cms.replace("a", &PostParams::default(), &fresh).await?;
    let mut stale = first;
    stale.data = Some([("k".to_string(), "3".to_string())].into());
    let err = refused(cms.replace("a", &PostParams::default(), &stale).await)?;
    assert_eq!(api_code(&err), (409, "Conflict".into()));
    assert_eq!(cms.get("a").await?.data.unwrap()["k"], "2");
    Ok(())
}

pub async fn label_selectors_support_every_operator(t: &Target) -> anyhow::Result<()> {
    let (cms, _) = create_configmap(t, "a", json!({"app": "web", "tier": "fe"})).await?;
    create(&cms, &cm("b", json!({"app": "db"}))).await?;
    create(&cms, &cm("c", json!({}))).await?;
    let select = |sel: &'static str| {
        let cms = cms.clone();
        async move {
            names(
                cms.list(&ListParams::default().labels(sel))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(select("app=web").await, vec!["a"]);
    assert_eq!(select("app==web").await, vec!["a"]);
    assert_eq!(select("app!=web").await, vec!["b", "c"]);
    assert_eq!(select("app in (web,db)").await, vec!["a", "b"]);
    assert_eq!(select("app notin (web)").await, vec!["b", "c"]);
    assert_eq!(select("tier").await, vec!["a"]);
    assert_eq!(select("!app").await, vec!["c"]);
    assert_eq!(select("app,!tier").await, vec!["b"]);
    Ok(())
}

pub async fn field_selectors_filter_by_name_and_namespace(t: &Target) -> anyhow::Result<()> {
    let (cms, _) = create_configmap(t, "a", json!({})).await?;
    create(&cms, &cm("b", json!({}))).await?;
    let got = cms
        .list(&ListParams::default().fields("metadata.name=b"))
        .await?;
    assert_eq!(names(got.items), vec!["b"]);
    let all: Api<ConfigMap> = Api::all(t.client());
    let in_ns = all
        .list(&ListParams::default().fields(&format!("metadata.namespace={}", t.namespace())))
        .await?;
    assert_eq!(names(in_ns.items), vec!["a", "b"]);
    let elsewhere = all
        .list(&ListParams::default().fields(&format!("metadata.namespace!={}", t.namespace())))
        .await?;
    assert!(
        elsewhere
            .items
            .iter()
            .all(|c| c.metadata.namespace.as_deref() != Some(t.namespace()))
    );
    Ok(())
}

pub async fn lists_page_with_limit_and_continue(t: &Target) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    for i in 0..5 {
        create(&cms, &cm(&format!("c{i}"), json!({"paged": "yes"}))).await?;
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().labels("paged=yes").limit(2);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = cms.list(&lp).await?;
        pages += 1;
        assert!(page.items.len() <= 2);
        seen.extend(page.items.into_iter().map(|c| c.metadata.name.unwrap()));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, vec!["c0", "c1", "c2", "c3", "c4"]);
    Ok(())
}

pub async fn dry_run_writes_answer_like_real_ones_and_store_nothing(
    t: &Target,
) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let out = cms.create(&dry, &cm("a", json!({}))).await?;
    assert_eq!(out.metadata.name.as_deref(), Some("a"));
    assert!(out.metadata.uid.is_some());
    assert!(cms.get_opt("a").await?.is_none());
    create(&cms, &cm("a", json!({}))).await?;
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let patched = cms
        .patch("a", &pp, &Patch::Merge(json!({"data": {"k": "dry"}})))
        .await?;
    assert_eq!(patched.data.unwrap()["k"], "dry");
    assert_eq!(cms.get("a").await?.data.unwrap()["k"], "v");
    let dp = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    cms.delete("a", &dp).await?;
    assert!(cms.get_opt("a").await?.is_some());
    Ok(())
}

pub async fn the_kubeconfig_file_gives_a_working_client(t: &Target) -> anyhow::Result<()> {
    let kc = kube::config::Kubeconfig::read_from(t.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let version = client.apiserver_version().await?;
    assert_eq!(version.major, "1");
    Ok(())
}

pub async fn unknown_resources_and_methods_get_status_errors(t: &Target) -> anyhow::Result<()> {
    let client = t.client();
    let ns = t.namespace();
    // A group the server does not serve: 404 (kube-apiserver's fallback answers plain text, the
    // sandbox a Status; see `sandbox/README.md`'s differences).
    let (code, body) = get(&client, "/apis/nope.dev/v1/things").await?;
    assert_eq!(code, 404, "{body}");
    // A resource a served version does not have: a Status.
    let (code, body) = get(&client, &format!("/api/v1/namespaces/{ns}/things")).await?;
    assert_eq!(
        (code, body["kind"].as_str()),
        (404, Some("Status")),
        "{body}"
    );
    let (code, _) = post(
        &client,
        &format!("/api/v1/namespaces/{ns}/configmaps/a/status"),
        json!({}),
    )
    .await?;
    assert_eq!(code, 404);
    let (code, body) = post(
        &client,
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}),
    )
    .await?;
    assert_eq!(
        (code, body["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );
    assert_eq!(
        body["details"]["causes"][0]["field"], "metadata.name",
        "{body}"
    );
    let (code, body) = patch(
        &client,
        &format!("/api/v1/namespaces/{ns}/configmaps/a"),
        "text/plain",
        json!({}),
    )
    .await?;
    assert_eq!(code, 415, "{body}");
    Ok(())
}

pub async fn methods_a_url_does_not_support_are_method_not_allowed(
    t: &Target,
) -> anyhow::Result<()> {
    let client = t.client();
    let ns = t.namespace();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
    let (code, status) = post(
        &client,
        &format!("/api/v1/namespaces/{ns}/configmaps/a"),
        body.clone(),
    )
    .await?;
    assert_eq!(
        (code, status["reason"].as_str()),
        (405, Some("MethodNotAllowed")),
        "{status}"
    );
    let (code, _) = put(
        &client,
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        body,
    )
    .await?;
    assert_eq!(code, 405);
    Ok(())
}

pub async fn delete_collection_removes_only_selected_objects(t: &Target) -> anyhow::Result<()> {
    let (cms, _) = create_configmap(t, "a", json!({"drop": "yes"})).await?;
    create(&cms, &cm("b", json!({"drop": "yes"}))).await?;
    create(&cms, &cm("c", json!({}))).await?;
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("drop=yes"),
    )
    .await?;
    let left = names(cms.list(&ListParams::default()).await?.items);
    assert_eq!(left, vec!["c"]);
    Ok(())
}

pub async fn malformed_bodies_are_bad_requests_and_change_nothing(
    t: &Target,
) -> anyhow::Result<()> {
    let client = t.client();
    let ns = t.namespace();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    create(&cms, &cm("a", json!({}))).await?;
    let url = format!("/api/v1/namespaces/{ns}/configmaps/a");
    for (ct, body) in [
        (
            "application/apply-patch+yaml",
            json!(["not", "an", "object"]),
        ),
        ("application/merge-patch+json", json!("replace-everything")),
        ("application/strategic-merge-patch+json", json!(42)),
        (
            "application/json-patch+json",
            json!([{"op": "replace", "path": "", "value": [1]}]),
        ),
    ] {
        let (code, status) = patch(&client, &format!("{url}?fieldManager=t"), ct, body).await?;
        assert!(code == 400 || code == 422, "{ct}: {code} {status}");
    }
    // Managed fields a client sends that cannot be decoded are dropped, not refused.
    let (code, status) = put(&client, &url, json!({"metadata": {"name": "a", "managedFields": [{"fieldsV1": {"é": {}}}]}, "data": {"k": "v"}}))
    .await?;
    assert_eq!(code, 200, "{status}");
    let (code, status) = post(&client, &format!("/api/v1/namespaces/{ns}/services"),  json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": "nonsense"}), )
    .await?;
    assert_eq!(code, 400, "{status}");
    let (code, _) = raw(
        &client,
        "POST",
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        None,
        Some("application/json"),
        None,
    )
    .await?;
    assert_eq!(code, 400);
    assert_eq!(cms.get("a").await?.data.unwrap()["k"], "v");
    Ok(())
}

pub async fn metadata_only_lists_and_watches_serve_partial_object_metadata(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, _) = create_configmap(t, "a", json!({"x": "1"})).await?;
    let list = cms
        .list_metadata(&ListParams::default().labels("x=1"))
        .await?;
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.labels.as_ref().unwrap()["x"], "1");
    let metadata: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(t.client(), t.namespace());
    let mut events = watcher(metadata, watcher::Config::default()).boxed();
    create(&cms, &cm("b", json!({}))).await?;
    let mut names = Vec::new();
    while !names.contains(&"b".to_string()) {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await??
            .unwrap();
        if let watcher::Event::Apply(m) | watcher::Event::InitApply(m) = ev {
            names.push(m.metadata.name.unwrap());
        }
    }
    Ok(())
}

fn column_names(table: &Value, all: bool) -> Vec<&str> {
    table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| all || c["priority"] == 0)
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// Tables (what `kubectl get` prints): the default (priority 0) columns of built-in kinds.
pub async fn table_output_has_the_kinds_columns(t: &Target) -> anyhow::Result<()> {
    let client = t.client();
    let ns = t.namespace();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "example/none:1"}]}}),
    )?;
    create(&pods, &pod).await?;
    let (code, table) = get_table(&client, &format!("/api/v1/namespaces/{ns}/pods")).await?;
    assert_eq!(code, 200);
    assert_eq!(table["kind"], "Table");
    assert_eq!(
        column_names(&table, false),
        vec!["Name", "Ready", "Status", "Restarts", "Age"]
    );
    assert_eq!(table["rows"][0]["cells"][0], "p");
    assert_eq!(table["rows"][0]["cells"][1], "0/1");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    create(&cms, &cm("c", json!({}))).await?;
    let (_, table) = get_table(&client, &format!("/api/v1/namespaces/{ns}/configmaps/c")).await?;
    assert_eq!(column_names(&table, false), vec!["Name", "Data", "Age"]);
    assert_eq!(table["rows"][0]["cells"][1], 1);
    Ok(())
}

pub async fn the_scale_subresource_reads_and_sets_replicas(t: &Target) -> anyhow::Result<()> {
    let deps: Api<Deployment> = Api::namespaced(t.client(), t.namespace());
    create(&deps, &deployment("web")).await?;
    let scale = deps.get_scale("web").await?;
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
    deps.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await?;
    let d = deps.get("web").await?;
    assert_eq!(d.spec.replicas, Some(4));
    assert_eq!(d.metadata.generation, Some(2));
    Ok(())
}
