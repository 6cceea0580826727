//! The finer points of the era's API server, each as 1.13 answered it: the default timeout,
//! a waiting create whose object is deleted or fails without a code, conflicts, the ways an
//! update initializes, what validation refuses on objects and rules, what watchers see of a
//! failed initialization, and `deletecollection`. Sources as in `api.rs`; the messages were
//! first read from kube-apiserver v1.13.0 by this tier.

use initializer_e2e::conformance::Scoped;
use std::time::Duration;

use anyhow::{Context, ensure};
use initializer_e2e::legacy::{is_initialized, pending_names};
use serde_json::json;

use crate::api::{Events, collect_both, open_plain_and_aware_watches};
use crate::support::{
    answer_of, blocked_create, cm, configmap_path, configmaps, configure_configmaps,
    create_uninitialized, delete, expect_code, expect_message, get, initializer_name, item_names,
    patch, post, post_configuration, put, uninit, without_first_pending,
};
use crate::target::Target;

/// `parseTimeout` in `handlers/rest.go` (1.13): 30 s when the request names none.
pub async fn without_a_timeout_parameter_a_create_waits_30_seconds(
    t: &Target,
) -> anyhow::Result<()> {
    configure_configmaps(t, "default-timeout", "absent").await?;
    let started = std::time::Instant::now();
    let (code, body) = post(&t.client(), &configmaps(t), cm("slow")).await?;
    let waited = started.elapsed();
    expect_code("the create nobody initializes", code, &body, 504)?;
    expect_message(
        &body,
        "Timeout: request did not complete within requested timeout 30s",
    )?;
    ensure!(
        waited >= Duration::from_secs(29) && waited < Duration::from_secs(40),
        "answered after {waited:?}"
    );
    Ok(())
}

/// `WaitForInitialized` (`registry/store.go`, 1.13) when the object goes away.
pub async fn deleting_the_object_a_create_waits_on_fails_the_create(
    t: &Target,
) -> anyhow::Result<()> {
    configure_configmaps(t, "deleted-waiting", "sidecar").await?;
    let (create, path, _) = blocked_create(t, "gone").await?;
    let (code, body) = delete(&t.client(), &path).await?;
    expect_code("DELETE of the waited-on object", code, &body, 200)?;
    let (code, body) = answer_of(create, Duration::from_secs(20)).await?;
    expect_code("the waiting create", code, &body, 500)?;
    expect_message(
        &body,
        "Internal error occurred: object deleted while waiting for creation",
    )?;
    Ok(())
}

/// A failure result without a code: the create answers 500 with its message.
pub async fn a_failure_result_without_a_code_fails_the_create_with_500(
    t: &Target,
) -> anyhow::Result<()> {
    configure_configmaps(t, "no-code", "guard").await?;
    let (create, path, mut stored) = blocked_create(t, "uncoded").await?;
    stored["metadata"]["initializers"]["result"] =
        json!({"status": "Failure", "message": "refused without a code"});
    let (code, body) = put(&t.client(), &path, stored).await?;
    expect_code("the PUT setting the result", code, &body, 200)?;
    let (code, body) = answer_of(create, Duration::from_secs(20)).await?;
    expect_code("the waiting create", code, &body, 500)?;
    expect_message(&body, "refused without a code")?;
    Ok(())
}

/// A creator that sets a failure result itself.
pub async fn a_result_set_at_creation_fails_the_create_and_the_object_stays(
    t: &Target,
) -> anyhow::Result<()> {
    let mut failed = cm("prefailed");
    failed["metadata"]["initializers"] = json!({
        "pending": [{"name": "a.example.com"}],
        "result": {"status": "Failure", "code": 403, "reason": "Forbidden", "message": "failed from the start"}
    });
    let (code, body) = post(&t.client(), &configmaps(t), failed).await?;
    expect_code("the create with a result", code, &body, 403)?;
    expect_message(&body, "failed from the start")?;
    let (code, body) = get(&t.client(), &uninit(&configmap_path(t, "prefailed"))).await?;
    expect_code("GET of the object", code, &body, 200)?;
    Ok(())
}

pub async fn a_stale_resource_version_is_a_conflict_on_an_uninitialized_object(
    t: &Target,
) -> anyhow::Result<()> {
    let name = configure_configmaps(t, "conflict", "sidecar").await?;
    let (code, stale) = create_uninitialized(t, cm("raced")).await?;
    expect_code("the uninitialized create", code, &stale, 202)?;
    let path = configmap_path(t, "raced");
    let mut first = stale.clone();
    first["data"]["first"] = json!("yes");
    let (code, body) = put(&t.client(), &path, first).await?;
    expect_code("the first writer", code, &body, 200)?;
    let (code, body) = put(&t.client(), &path, without_first_pending(stale)).await?;
    expect_code("the stale writer", code, &body, 409)?;
    ensure!(body["reason"] == "Conflict", "{body}");
    let (_, current) = get(&t.client(), &path).await?;
    ensure!(pending_names(&current) == [name], "{current}");
    Ok(())
}

/// A PUT whose body has no `metadata.initializers`, and a merge patch `pending: []`, both
/// initialize (what a typed client without the field does by accident).
pub async fn a_put_without_the_field_and_a_merge_patch_emptying_pending_initialize(
    t: &Target,
) -> anyhow::Result<()> {
    configure_configmaps(t, "fieldless", "sidecar").await?;
    for object in ["put", "merged"] {
        let (code, body) = create_uninitialized(t, cm(object)).await?;
        expect_code("the uninitialized create", code, &body, 202)?;
    }
    let (_, mut stored) = get(&t.client(), &configmap_path(t, "put")).await?;
    stored["metadata"]
        .as_object_mut()
        .context("metadata")?
        .remove("initializers");
    let (code, body) = put(&t.client(), &configmap_path(t, "put"), stored).await?;
    expect_code("the PUT without the field", code, &body, 200)?;
    ensure!(is_initialized(&body), "{body}");
    let (code, body) = patch(
        &t.client(),
        &configmap_path(t, "merged"),
        "application/merge-patch+json",
        json!({"metadata": {"initializers": {"pending": []}}}),
    )
    .await?;
    expect_code("the merge patch pending: []", code, &body, 200)?;
    ensure!(is_initialized(&body), "{body}");
    let (_, list) = get(&t.client(), &configmaps(t)).await?;
    let names = item_names(&list);
    ensure!(
        names.contains(&"put".to_owned()) && names.contains(&"merged".to_owned()),
        "{names:?}"
    );
    Ok(())
}

/// Any holder of the `initialize` verb may append a name or remove any, in any order.
pub async fn names_may_be_appended_and_removed_out_of_order(t: &Target) -> anyhow::Result<()> {
    let name = configure_configmaps(t, "order", "first").await?;
    let (code, mut stored) = create_uninitialized(t, cm("reordered")).await?;
    expect_code("the uninitialized create", code, &stored, 202)?;
    let path = configmap_path(t, "reordered");
    stored["metadata"]["initializers"]["pending"]
        .as_array_mut()
        .context("pending")?
        .push(json!({"name": "late.example.com"}));
    let (code, mut body) = put(&t.client(), &path, stored).await?;
    expect_code("the PUT appending a name", code, &body, 200)?;
    ensure!(
        pending_names(&body) == [name.clone(), "late.example.com".to_owned()],
        "{body}"
    );
    body["metadata"]["initializers"]["pending"]
        .as_array_mut()
        .context("pending")?
        .remove(1);
    let (code, body) = put(&t.client(), &path, body).await?;
    expect_code("the PUT removing the second name", code, &body, 200)?;
    ensure!(pending_names(&body) == [name], "{body}");
    Ok(())
}

/// `ValidateInitializersUpdate` (apimachinery `api/validation/objectmeta.go`, 1.13).
pub async fn an_initialized_object_cannot_get_initializers_back(t: &Target) -> anyhow::Result<()> {
    let mut done = cm("done");
    done["metadata"]["initializers"] = json!({"pending": []});
    let (code, mut body) = post(&t.client(), &configmaps(t), done).await?;
    expect_code("the initialized create", code, &body, 201)?;
    body["metadata"]["initializers"] = json!({"pending": [{"name": "again.example.com"}]});
    let (code, body) = put(&t.client(), &configmap_path(t, "done"), body).await?;
    expect_code("the PUT adding initializers back", code, &body, 422)?;
    expect_message(
        &body,
        "ConfigMap \"done\" is invalid: metadata.initializers: Invalid value: \"null\": field is immutable once initialization has completed",
    )?;
    Ok(())
}

/// `validateRule` (`pkg/apis/admissionregistration/validation/validation.go`, 1.13).
pub async fn rule_validation_refuses_with_the_eras_messages(t: &Target) -> anyhow::Result<()> {
    let name = t.unique("bad-rules");
    let (code, body) = post_configuration(
        t,
        &name,
        json!([{"name": "rules.example.com", "rules": [
            {"apiGroups": [], "apiVersions": ["*", "v1"], "resources": ["pods/status"]},
            {"apiGroups": [""], "apiVersions": [""], "resources": []}
        ]}]),
    )
    .await?;
    expect_code("the configuration with bad rules", code, &body, 422)?;
    let expected = format!(
        "InitializerConfiguration.admissionregistration.k8s.io \"{name}\" is invalid: [\
initializers[0].rules[0].apiGroups: Required value, \
initializers[0].rules[0].apiVersions: Invalid value: []string{{\"*\", \"v1\"}}: if '*' is present, must not specify other API versions, \
initializers[0].rules[0].resources[0]: Invalid value: \"pods/status\": must not specify subresources, \
initializers[0].rules[1].apiVersions[0]: Required value, \
initializers[0].rules[1].resources: Required value]"
    );
    ensure!(
        body["message"] == expected.as_str(),
        "got      {}\nexpected {expected:?}",
        body["message"]
    );
    Ok(())
}

/// `Update` in `registry/store.go` (1.13): the failure result is stored, then the object is
/// deleted; only `includeUninitialized` watchers ever saw it.
pub async fn a_failed_initialization_is_seen_only_by_aware_watchers(
    t: &Target,
) -> anyhow::Result<()> {
    configure_configmaps(t, "failed-watch", "guard").await?;
    let (plain, aware) = open_plain_and_aware_watches(t).await?;
    let (code, mut stored) = create_uninitialized(t, cm("failing")).await?;
    expect_code("the uninitialized create", code, &stored, 202)?;
    stored["metadata"]["initializers"]["result"] = json!({
        "status": "Failure", "code": 403, "reason": "Forbidden", "message": "no"
    });
    let (code, body) = put(&t.client(), &configmap_path(t, "failing"), stored).await?;
    expect_code("the PUT setting the result", code, &body, 200)?;
    expect_seen_only_by_aware(plain, aware, &["ADDED", "MODIFIED", "DELETED"]).await?;
    Ok(())
}

/// Fails unless, over the next 3 s, the plain watch sees nothing and the aware one sees events
/// of the `kinds` given, in order.
async fn expect_seen_only_by_aware(
    plain: Events,
    aware: Events,
    kinds: &[&str],
) -> anyhow::Result<()> {
    let (plain, aware) = collect_both(plain, aware).await?;
    ensure!(plain.is_empty(), "the plain watcher saw {plain:?}");
    let seen: Vec<&str> = aware.iter().map(|(kind, _, _)| kind.as_str()).collect();
    ensure!(
        seen == kinds,
        "the includeUninitialized watcher saw {aware:?}"
    );
    Ok(())
}

/// `DeleteCollection` lists with `IncludeUninitialized` forced on (`registry/store.go`, 1.13).
pub async fn deletecollection_removes_uninitialized_objects_too(t: &Target) -> anyhow::Result<()> {
    configure_configmaps(t, "collection", "sidecar").await?;
    for object in ["one", "two"] {
        let (code, body) = create_uninitialized(t, cm(object)).await?;
        expect_code("the uninitialized create", code, &body, 202)?;
    }
    let (code, body) = delete(&t.client(), &configmaps(t)).await?;
    expect_code("deletecollection", code, &body, 200)?;
    let (_, all) = get(&t.client(), &uninit(&configmaps(t))).await?;
    let left: Vec<String> = item_names(&all)
        .into_iter()
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    ensure!(left.is_empty(), "left after deletecollection: {left:?}");
    Ok(())
}

/// Boolean query parameters as 1.13 decoded them (`Convert_Slice_string_To_bool`): `1` is
/// true, `false` is false.
pub async fn include_uninitialized_takes_the_eras_boolean_spellings(
    t: &Target,
) -> anyhow::Result<()> {
    configure_configmaps(t, "spelling", "sidecar").await?;
    let (code, body) = post(
        &t.client(),
        &format!("{}?includeUninitialized=1", configmaps(t)),
        cm("spelled"),
    )
    .await?;
    expect_code("a create with includeUninitialized=1", code, &body, 202)?;
    let (_, hidden) = get(
        &t.client(),
        &format!("{}?includeUninitialized=false", configmaps(t)),
    )
    .await?;
    ensure!(
        !item_names(&hidden).contains(&"spelled".to_owned()),
        "{hidden}"
    );
    let (_, shown) = get(
        &t.client(),
        &format!("{}?includeUninitialized=1", configmaps(t)),
    )
    .await?;
    ensure!(
        item_names(&shown).contains(&"spelled".to_owned()),
        "{shown}"
    );
    Ok(())
}

/// The rules of an initializer name a resource of a group: a Deployment (apps) gets the name,
/// a ConfigMap does not.
pub async fn rules_select_by_group_version_and_resource(t: &Target) -> anyhow::Result<()> {
    let name = initializer_name(t, "apps");
    crate::support::configure(
        t,
        &t.unique("apps"),
        json!([{"name": name, "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]}]),
    )
    .await?;
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}
    });
    let (code, body) = post(
        &t.client(),
        &uninit(&initializer_e2e::legacy::deployments_path(t.namespace())),
        deployment,
    )
    .await?;
    expect_code("the Deployment create", code, &body, 202)?;
    ensure!(pending_names(&body) == [name], "{body}");
    let (code, body) = create_uninitialized(t, cm("unmatched")).await?;
    expect_code("the ConfigMap create", code, &body, 201)?;
    ensure!(body["metadata"]["initializers"].is_null(), "{body}");
    Ok(())
}

/// `ValidateInitializers` (apimachinery `api/validation/objectmeta.go`, 1.13) on the result:
/// a result's status must be `Failure` (1.13: "must be 'Failure'").
pub async fn a_result_must_be_a_failure(t: &Target) -> anyhow::Result<()> {
    let mut success = cm("succeeded");
    success["metadata"]["initializers"] = json!({
        "pending": [{"name": "a.example.com"}],
        "result": {"status": "Success", "message": "fine"}
    });
    let (code, body) = create_uninitialized(t, success).await?;
    expect_code("a create with a Success result", code, &body, 422)?;
    expect_message(
        &body,
        "ConfigMap \"succeeded\" is invalid: metadata.initializers.result.status: Invalid value: \"Success\": must be 'Failure'",
    )?;
    let mut statusless = cm("statusless");
    statusless["metadata"]["initializers"] = json!({
        "pending": [{"name": "a.example.com"}],
        "result": {"message": "no status"}
    });
    let (code, body) = create_uninitialized(t, statusless).await?;
    expect_code("a create with a result without a status", code, &body, 422)?;
    expect_message(
        &body,
        "ConfigMap \"statusless\" is invalid: metadata.initializers.result.status: Invalid value: \"\": must be 'Failure'",
    )?;
    Ok(())
}

/// A watcher with `includeUninitialized` sees an uninitialized object deleted; one without
/// never saw it and sees nothing.
pub async fn deleting_an_uninitialized_object_is_seen_only_by_aware_watchers(
    t: &Target,
) -> anyhow::Result<()> {
    configure_configmaps(t, "deleted-watch", "sidecar").await?;
    let (plain, aware) = open_plain_and_aware_watches(t).await?;
    let (code, body) = create_uninitialized(t, cm("short-lived")).await?;
    expect_code("the uninitialized create", code, &body, 202)?;
    let (code, body) = delete(&t.client(), &configmap_path(t, "short-lived")).await?;
    expect_code("the DELETE", code, &body, 200)?;
    expect_seen_only_by_aware(plain, aware, &["ADDED", "DELETED"]).await?;
    Ok(())
}

/// A `status` write carries `metadata.initializers` from its body like any update (the plugin
/// skips subresources, the store does not): without the field the object is initialized.
pub async fn a_status_write_without_the_field_initializes_a_deployment(
    t: &Target,
) -> anyhow::Result<()> {
    let name = initializer_name(t, "apps");
    crate::support::configure(
        t,
        &t.unique("status"),
        json!([{"name": name, "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]}]),
    )
    .await?;
    let deployments = initializer_e2e::legacy::deployments_path(t.namespace());
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}
    });
    let (code, mut stored) = post(&t.client(), &uninit(&deployments), deployment).await?;
    expect_code("the Deployment create", code, &stored, 202)?;
    stored["metadata"]
        .as_object_mut()
        .context("metadata")?
        .remove("initializers");
    stored["status"] = json!({"observedGeneration": 1});
    let (code, body) = put(&t.client(), &format!("{deployments}/web/status"), stored).await?;
    expect_code("the status PUT without the field", code, &body, 200)?;
    ensure!(is_initialized(&body), "{body}");
    let (_, list) = get(&t.client(), &deployments).await?;
    ensure!(item_names(&list) == ["web"], "{list}");
    Ok(())
}

/// `Store.Create` (`registry/generic/registry/store.go`, 1.13) waits for initialization after
/// a dry-run create too, for an object that was never stored: the create answers 504 at its
/// timeout (the sandbox does the same).
pub async fn a_dry_run_create_waits_for_an_initialization_that_cannot_come(
    t: &Target,
) -> anyhow::Result<()> {
    configure_configmaps(t, "dry-run", "sidecar").await?;
    let (code, body) = post(
        &t.client(),
        &format!("{}?dryRun=All&timeout=2s", configmaps(t)),
        cm("dry"),
    )
    .await?;
    expect_code("the dry-run create", code, &body, 504)?;
    expect_message(
        &body,
        "Timeout: request did not complete within requested timeout 2s",
    )?;
    let (code, body) = get(&t.client(), &uninit(&configmap_path(t, "dry"))).await?;
    expect_code("GET after the dry run", code, &body, 404)?;
    Ok(())
}
