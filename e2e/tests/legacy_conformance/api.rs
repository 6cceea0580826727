//! The API server's side of Initializers: what kube-apiserver 1.13 answered
//! (`tools/legacy-apiserver/README.md`), asked of both backends. The era's sources are cited
//! where they decide: the admission plugin
//! `k8s.io/apiserver/pkg/admission/plugin/initialization/initialization.go`, the store's wait
//! `k8s.io/apiserver/pkg/registry/generic/registry/store.go` (`WaitForInitialized`), the
//! validation `pkg/apis/admissionregistration/validation/validation.go` and
//! `k8s.io/apimachinery/pkg/api/validation/objectmeta.go` (`ValidateInitializers`), all 1.13.

use initializer_e2e::conformance::Scoped;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures::StreamExt;
use initializer_e2e::legacy::{is_initialized, pending_names};
use kube::core::WatchEvent;
use serde_json::{Value, json};

use crate::support::{
    answer_of, blocked_create, cm, configmap_path, configmaps, configmaps_rule, configure,
    configure_configmaps, create_uninitialized, delete, expect_code, expect_message, get,
    initializer_name, item_names, patch, post, post_configuration, put, rule, uninit, wait_pending,
    without_first_pending,
};
use crate::target::Target;

pub async fn discovery_lists_initializer_configurations_in_v1alpha1(
    t: &Target,
) -> anyhow::Result<()> {
    let (code, group) = get(&t.client(), "/apis/admissionregistration.k8s.io/v1alpha1").await?;
    expect_code("GET the v1alpha1 group version", code, &group, 200)?;
    let resource = group["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == "initializerconfigurations")
        .with_context(|| format!("initializerconfigurations not in {group}"))?;
    ensure!(resource["kind"] == "InitializerConfiguration", "{resource}");
    ensure!(resource["namespaced"] == false, "{resource}");
    let (_, groups) = get(&t.client(), "/apis").await?;
    let versions: Vec<&str> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["name"] == "admissionregistration.k8s.io")
        .flat_map(|g| g["versions"].as_array().into_iter().flatten())
        .filter_map(|v| v["version"].as_str())
        .collect();
    ensure!(versions.contains(&"v1alpha1"), "{versions:?}");
    Ok(())
}

/// `findInitializers` walks configurations as the lister returns them (sorted by name) and
/// their initializers in order; `matchRule` needs every rule of an initializer to match.
pub async fn configurations_append_names_in_name_order_and_and_their_rules(
    t: &Target,
) -> anyhow::Result<()> {
    let first = initializer_name(t, "first");
    let second = initializer_name(t, "second");
    let anded = initializer_name(t, "anded");
    let third = initializer_name(t, "third");
    let wide = initializer_name(t, "wide");
    // Created in the opposite order of their names.
    configure(
        t,
        &t.unique("b-later"),
        json!([{"name": third, "rules": [configmaps_rule()]}]),
    )
    .await?;
    configure(
        t,
        &t.unique("a-earlier"),
        json!([
            {"name": first, "rules": [configmaps_rule()]},
            {"name": anded, "rules": [
                configmaps_rule(),
                {"apiGroups": ["apps"], "apiVersions": ["*"], "resources": ["deployments"]}
            ]},
            {"name": second, "rules": [rule(&["secrets", "configmaps"])]},
            {"name": wide, "rules": [rule(&["deployments"])]}
        ]),
    )
    .await?;
    let (code, body) = create_uninitialized(t, cm("ordered")).await?;
    expect_code("the create with includeUninitialized", code, &body, 202)?;
    ensure!(
        pending_names(&body) == [first.clone(), second.clone(), third.clone()],
        "pending {:?}, expected [{first}, {second}, {third}] ({anded} has a rule that does not \
         match, {wide} matches only deployments)",
        pending_names(&body)
    );
    Ok(())
}

/// The walkthrough's `pending: []`, and any explicit list, stay as the creator gave them.
pub async fn an_explicit_initializers_field_is_kept_as_given(t: &Target) -> anyhow::Result<()> {
    configure_configmaps(t, "explicit", "sidecar").await?;
    let mut empty = cm("empty");
    empty["metadata"]["initializers"] = json!({"pending": []});
    let (code, body) = post(&t.client(), &configmaps(t), empty).await?;
    expect_code("a create with pending: []", code, &body, 201)?;
    ensure!(
        body["metadata"]["initializers"].is_null(),
        "an empty pending list is stored as no initializers: {body}"
    );
    let mut other = cm("other");
    other["metadata"]["initializers"] = json!({"pending": [{"name": "other.example.com"}]});
    let (code, body) = create_uninitialized(t, other).await?;
    expect_code("a create with its own pending list", code, &body, 202)?;
    ensure!(
        pending_names(&body) == ["other.example.com"],
        "{:?}",
        pending_names(&body)
    );
    Ok(())
}

pub async fn an_include_uninitialized_create_is_accepted_at_once(t: &Target) -> anyhow::Result<()> {
    let name = configure_configmaps(t, "accepted", "sidecar").await?;
    let started = std::time::Instant::now();
    let (code, body) = create_uninitialized(t, cm("early")).await?;
    expect_code("the create with includeUninitialized", code, &body, 202)?;
    ensure!(pending_names(&body) == [name.clone()], "{body}");
    ensure!(
        started.elapsed() < Duration::from_secs(5),
        "the create waited {:?}",
        started.elapsed()
    );
    // Without pending names there is nothing to accept: plain 201.
    let mut none = cm("none");
    none["metadata"]["initializers"] = json!({"pending": []});
    let (code, body) = create_uninitialized(t, none).await?;
    expect_code(
        "an includeUninitialized create with nothing pending",
        code,
        &body,
        201,
    )?;
    Ok(())
}

pub async fn a_blocking_create_answers_created_once_another_client_removes_the_name_and_mutates(
    t: &Target,
) -> anyhow::Result<()> {
    let name = configure_configmaps(t, "blocking", "sidecar").await?;
    let (create, path, stored) = blocked_create(t, "held").await?;
    ensure!(pending_names(&stored) == [name.clone()], "{stored}");
    ensure!(
        !create.is_finished(),
        "the create answered before initialization"
    );
    let mut initialized = without_first_pending(stored);
    initialized["data"]["injected"] = json!("by-the-initializer");
    let (code, body) = put(&t.client(), &path, initialized).await?;
    expect_code("the initializer's PUT", code, &body, 200)?;
    let (code, body) = answer_of(create, Duration::from_secs(20)).await?;
    expect_code("the waiting create", code, &body, 201)?;
    ensure!(body["data"]["injected"] == "by-the-initializer", "{body}");
    ensure!(body["metadata"]["initializers"].is_null(), "{body}");
    let (_, list) = get(&t.client(), &configmaps(t)).await?;
    ensure!(item_names(&list).contains(&"held".to_owned()), "{list}");
    Ok(())
}

/// The wait ends with the request's timeout (`?timeout=`, default 30 s) as a 504 Timeout.
pub async fn a_create_that_times_out_is_a_timeout_and_the_object_stays(
    t: &Target,
) -> anyhow::Result<()> {
    let name = configure_configmaps(t, "timeout", "absent").await?;
    let started = std::time::Instant::now();
    let (code, body) = post(
        &t.client(),
        &format!("{}?timeout=2s", configmaps(t)),
        cm("late"),
    )
    .await?;
    let waited = started.elapsed();
    expect_code("the create nobody initializes", code, &body, 504)?;
    ensure!(body["reason"] == "Timeout", "{body}");
    expect_message(
        &body,
        "Timeout: request did not complete within requested timeout 2s",
    )?;
    ensure!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(10),
        "answered after {waited:?}"
    );
    let stored = wait_pending(t, &configmap_path(t, "late")).await?;
    ensure!(pending_names(&stored) == [name], "{stored}");
    Ok(())
}

/// A get by name is not filtered; lists and watches are (`includeUninitialized` in
/// `ListOptions`, 1.13).
pub async fn lists_and_watches_hide_uninitialized_objects_and_get_shows_them(
    t: &Target,
) -> anyhow::Result<()> {
    let mut visible = cm("visible");
    visible["metadata"]["initializers"] = json!({"pending": []});
    let (code, body) = post(&t.client(), &configmaps(t), visible).await?;
    expect_code("the initialized create", code, &body, 201)?;
    let name = configure_configmaps(t, "hidden", "sidecar").await?;
    let (code, body) = create_uninitialized(t, cm("hidden")).await?;
    expect_code("the uninitialized create", code, &body, 202)?;
    let (_, plain) = get(&t.client(), &configmaps(t)).await?;
    let plain_names: Vec<String> = item_names(&plain)
        .into_iter()
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    ensure!(plain_names == ["visible"], "plain list: {plain_names:?}");
    let (_, all) = get(&t.client(), &uninit(&configmaps(t))).await?;
    ensure!(item_names(&all).contains(&"hidden".to_owned()), "{all}");
    for uri in [
        configmap_path(t, "hidden"),
        uninit(&configmap_path(t, "hidden")),
    ] {
        let (code, body) = get(&t.client(), &uri).await?;
        expect_code(&format!("GET {uri}"), code, &body, 200)?;
        ensure!(pending_names(&body) == [name.clone()], "{uri}: {body}");
    }
    // A plain watch from the list's version sees nothing of it.
    let version = plain["metadata"]["resourceVersion"]
        .as_str()
        .context("the list has no resourceVersion")?;
    let events = watch_events(t, false, version, Duration::from_secs(2)).await?;
    ensure!(events.is_empty(), "a plain watch saw {events:?}");
    Ok(())
}

/// Watches ConfigMaps of the body's namespace from `version` for `window`; returns
/// `(type, name, pending names)` of each event.
async fn watch_events(
    t: &Target,
    include_uninitialized: bool,
    version: &str,
    window: Duration,
) -> anyhow::Result<Seen> {
    let stream = open_watch(t, include_uninitialized, version).await?;
    collect_events(stream, window).await
}

/// What a watch saw: `(type, name, pending names)` of each event.
pub type Seen = Vec<(String, String, Vec<String>)>;

pub type Events =
    std::pin::Pin<Box<dyn futures::Stream<Item = kube::Result<WatchEvent<Value>>> + Send>>;

pub async fn open_watch(
    t: &Target,
    include_uninitialized: bool,
    version: &str,
) -> anyhow::Result<Events> {
    let mut uri = format!(
        "{}?watch=true&resourceVersion={version}&timeoutSeconds=60",
        configmaps(t)
    );
    if include_uninitialized {
        uri.push_str("&includeUninitialized=true");
    }
    let request = http::Request::get(uri).body(Vec::new())?;
    let stream = t.client().request_events::<Value>(request).await?;
    Ok(stream.boxed())
}

/// A watch without and one with `includeUninitialized`, both from the current version of the
/// namespace's ConfigMaps (listed with uninitialized objects), so both see what follows.
pub async fn open_plain_and_aware_watches(t: &Target) -> anyhow::Result<(Events, Events)> {
    let (_, list) = get(&t.client(), &uninit(&configmaps(t))).await?;
    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .context("the list has no resourceVersion")?;
    let plain = open_watch(t, false, version).await?;
    let aware = open_watch(t, true, version).await?;
    Ok((plain, aware))
}

/// What the plain and the aware watch see over the next 3 s, watched side by side.
pub async fn collect_both(plain: Events, aware: Events) -> anyhow::Result<(Seen, Seen)> {
    let window = Duration::from_secs(3);
    let (plain, aware) = tokio::join!(collect_events(plain, window), collect_events(aware, window));
    Ok((plain?, aware?))
}

pub async fn collect_events(mut stream: Events, window: Duration) -> anyhow::Result<Seen> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + window;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        let event = match next {
            Err(_) | Ok(None) => return Ok(events),
            Ok(Some(event)) => event?,
        };
        let (kind, object) = match event {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => bail!("the watch failed: {e:?}"),
        };
        let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
        events.push((kind.to_owned(), name, pending_names(&object)));
    }
}

pub async fn an_unaware_watcher_sees_added_when_initialization_completes(
    t: &Target,
) -> anyhow::Result<()> {
    let name = configure_configmaps(t, "watched", "sidecar").await?;
    let (plain, aware) = open_plain_and_aware_watches(t).await?;
    let (code, stored) = create_uninitialized(t, cm("watched")).await?;
    expect_code("the uninitialized create", code, &stored, 202)?;
    let (code, body) = put(
        &t.client(),
        &configmap_path(t, "watched"),
        without_first_pending(stored),
    )
    .await?;
    expect_code("the initializer's PUT", code, &body, 200)?;
    let (plain, aware) = collect_both(plain, aware).await?;
    let added = |pending: Vec<String>| ("ADDED".to_owned(), "watched".to_owned(), pending);
    ensure!(
        plain == [added(vec![])],
        "the plain watcher saw {plain:?}, expected one ADDED once initialized"
    );
    ensure!(
        aware
            == [
                added(vec![name]),
                ("MODIFIED".to_owned(), "watched".to_owned(), vec![])
            ],
        "the includeUninitialized watcher saw {aware:?}"
    );
    Ok(())
}

pub async fn a_failure_result_fails_the_create_with_its_status_and_deletes_the_object(
    t: &Target,
) -> anyhow::Result<()> {
    configure_configmaps(t, "failure", "guard").await?;
    let (create, path, mut stored) = blocked_create(t, "denied").await?;
    stored["metadata"]["initializers"]["result"] = json!({
        "kind": "Status", "apiVersion": "v1",
        "status": "Failure", "code": 403, "reason": "Forbidden",
        "message": "guard initializer: denied by policy"
    });
    let (code, body) = put(&t.client(), &path, stored).await?;
    expect_code("the PUT setting a failure result", code, &body, 200)?;
    // The result is stored as 1.13 kept it (a protobuf metav1.Status): no kind or apiVersion,
    // `metadata` always there.
    ensure!(
        body["metadata"]["initializers"]["result"]
            == json!({"metadata": {},
                      "status": "Failure", "code": 403, "reason": "Forbidden",
                      "message": "guard initializer: denied by policy"}),
        "{body}"
    );
    let (code, body) = answer_of(create, Duration::from_secs(20)).await?;
    expect_code("the waiting create", code, &body, 403)?;
    expect_message(&body, "guard initializer: denied by policy")?;
    ensure!(body["reason"] == "Forbidden", "{body}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = get(&t.client(), &uninit(&path)).await?;
        if code == 404 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the failed object is still there: {code} {body}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn an_uninitialized_object_can_be_deleted(t: &Target) -> anyhow::Result<()> {
    configure_configmaps(t, "deleted", "sidecar").await?;
    let (code, body) = create_uninitialized(t, cm("doomed")).await?;
    expect_code("the uninitialized create", code, &body, 202)?;
    let path = configmap_path(t, "doomed");
    let (code, body) = delete(&t.client(), &path).await?;
    expect_code("DELETE of the uninitialized object", code, &body, 200)?;
    let (code, body) = get(&t.client(), &uninit(&path)).await?;
    expect_code("GET after the delete", code, &body, 404)?;
    Ok(())
}

/// The answer to creating configuration `name` with `initializers`, as (code, message).
async fn refusal_of(t: &Target, name: &str, initializers: Value) -> anyhow::Result<(u16, String)> {
    let (code, answer) = post_configuration(t, name, initializers).await?;
    Ok((
        code,
        answer["message"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// `ValidateInitializerConfiguration` (`pkg/apis/admissionregistration/validation`, 1.13): each
/// initializer name must pass `IsFullyQualifiedName`, which reports its first failing check.
pub async fn configuration_validation_refuses_with_the_eras_messages(
    t: &Target,
) -> anyhow::Result<()> {
    let rules = json!([configmaps_rule()]);
    let name = t.unique("refused");
    let prefix =
        format!("InitializerConfiguration.admissionregistration.k8s.io \"{name}\" is invalid: ");
    let cases = [
        (
            json!([{"name": "sidecar", "rules": rules}]),
            "initializers[0].name: Invalid value: \"sidecar\": should be a domain with at least three segments separated by dots".to_owned(),
        ),
        (
            json!([{"name": "Sidecar.Example.com", "rules": rules}]),
            "initializers[0].name: Invalid value: \"Sidecar.Example.com\": a DNS-1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned(),
        ),
    ];
    let mut wrong = Vec::new();
    for (initializers, expected) in cases {
        let (code, message) = refusal_of(t, &name, initializers).await?;
        let expected = format!("{prefix}{expected}");
        if code != 422 || message != expected {
            wrong.push(format!(
                "got {code} {message:?}\n  expected 422 {expected:?}"
            ));
        }
    }
    ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    // 1.13's ValidateInitializerConfiguration checks each name on its own: a name twice in one
    // configuration is accepted (and appended twice).
    let twice = t.unique("twice");
    let (code, message) = refusal_of(
        t,
        &twice,
        json!([{"name": "a.example.com", "rules": rules}, {"name": "a.example.com", "rules": rules}]),
    )
    .await?;
    ensure!(
        code == 201,
        "a duplicate initializer name: {code} {message}"
    );
    Ok(())
}

pub async fn an_invalid_pending_name_is_refused_with_the_eras_message(
    t: &Target,
) -> anyhow::Result<()> {
    let mut bad = cm("bad");
    bad["metadata"]["initializers"] = json!({"pending": [{"name": "bad"}]});
    let (code, body) = create_uninitialized(t, bad).await?;
    expect_code("a create with pending name 'bad'", code, &body, 422)?;
    expect_message(
        &body,
        "ConfigMap \"bad\" is invalid: metadata.initializers.pending[0].name: Invalid value: \"bad\": should be a domain with at least three segments separated by dots",
    )?;
    Ok(())
}

pub async fn strategic_merge_and_json_patches_remove_a_pending_name(
    t: &Target,
) -> anyhow::Result<()> {
    let first = initializer_name(t, "first");
    let second = initializer_name(t, "second");
    configure(
        t,
        &t.unique("patched"),
        json!([
            {"name": first, "rules": [configmaps_rule()]},
            {"name": second, "rules": [configmaps_rule()]}
        ]),
    )
    .await?;
    let (code, body) = create_uninitialized(t, cm("patched")).await?;
    expect_code("the uninitialized create", code, &body, 202)?;
    let path = configmap_path(t, "patched");
    let strategic = json!({"metadata": {"initializers": {"pending": [{"$patch": "delete", "name": first}]}},
                           "data": {"merged": "yes"}});
    let (code, body) = patch(
        &t.client(),
        &path,
        "application/strategic-merge-patch+json",
        strategic,
    )
    .await?;
    expect_code("the strategic merge patch", code, &body, 200)?;
    ensure!(pending_names(&body) == [second.clone()], "{body}");
    ensure!(body["data"]["merged"] == "yes", "{body}");
    let json_patch = json!([
        {"op": "remove", "path": "/metadata/initializers/pending/0"},
        {"op": "add", "path": "/data/patched", "value": "yes"}
    ]);
    let (code, body) = patch(
        &t.client(),
        &path,
        "application/json-patch+json",
        json_patch,
    )
    .await?;
    expect_code("the JSON patch", code, &body, 200)?;
    ensure!(is_initialized(&body), "{body}");
    ensure!(body["data"]["patched"] == "yes", "{body}");
    let (_, list) = get(&t.client(), &configmaps(t)).await?;
    ensure!(item_names(&list).contains(&"patched".to_owned()), "{list}");
    Ok(())
}

/// `canInitialize`: creating with an explicit `initializers` field, or updating an
/// uninitialized object, needs the `initialize` verb on the resource (1.13's messages keep an
/// empty reason after the colon).
pub async fn setting_or_changing_pending_needs_the_initialize_verb(
    t: &Target,
) -> anyhow::Result<()> {
    let user = t.unprivileged()?;
    let ns = t.namespace();
    let role = |verbs: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "editor", "namespace": ns},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]})
    };
    let roles = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles");
    let editor = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    let (code, body) = post(&t.client(), &roles, role(editor.clone())).await?;
    expect_code("the Role", code, &body, 201)?;
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "editor", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": initializer_controlplane::legacy::UNPRIVILEGED_USER}]});
    let (code, body) = post(
        &t.client(),
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
        binding,
    )
    .await?;
    expect_code("the RoleBinding", code, &body, 201)?;
    configure_configmaps(t, "verb", "sidecar").await?;

    let mut explicit = cm("explicit");
    explicit["metadata"]["initializers"] = json!({"pending": []});
    let (code, body) = post(&user, &configmaps(t), explicit.clone()).await?;
    expect_code("the user's create with pending: []", code, &body, 403)?;
    expect_message(
        &body,
        "configmaps is forbidden: create with initializers denied: ",
    )?;
    let (code, stored) = post(&user, &uninit(&configmaps(t)), cm("mine")).await?;
    expect_code("the user's plain create", code, &stored, 202)?;
    let path = configmap_path(t, "mine");
    let (code, body) = put(&user, &path, without_first_pending(stored)).await?;
    expect_code("the user's PUT removing the name", code, &body, 403)?;
    expect_message(
        &body,
        "configmaps \"mine\" is forbidden: update to uninitialized resource denied: ",
    )?;
    let mut verbs = editor;
    verbs
        .as_array_mut()
        .context("verbs")?
        .push(json!("initialize"));
    let (code, body) = put(&t.client(), &format!("{roles}/editor"), role(verbs)).await?;
    expect_code("the Role with initialize", code, &body, 200)?;
    // RBAC reads roles through an informer: give it a moment.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, current) = get(&user, &uninit(&path)).await?;
        let (code, body) = put(&user, &path, without_first_pending(current)).await?;
        if code == 200 {
            ensure!(is_initialized(&body), "{body}");
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the user's PUT with the initialize verb: {code} {body}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, body) = post(&user, &configmaps(t), explicit).await?;
    expect_code(
        "the user's create with pending: [] and the verb",
        code,
        &body,
        201,
    )?;
    Ok(())
}
