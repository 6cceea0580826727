//! What only the sandbox has, through kube-rs: its bounded watch history and bookmark interval,
//! dropped watch streams, injected faults, the direct view, snapshots, pod logs read from the
//! state directory, and its startup time. The API behaviour it shares with kube-apiserver is
//! tested against both in the conformance suite (`e2e/tests/conformance`, `make conformance`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api_support;

use std::time::Duration;

use api_support::{api_code, raw, start, start_with};
use futures::{StreamExt, TryStreamExt};
use initializer_sandbox::{FaultAction, FaultRule};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"}
    }))
    .unwrap()
}

/// Creates ConfigMap `name`, without labels.
async fn create(cms: &Api<ConfigMap>, name: &str) -> ConfigMap {
    cms.create(&PostParams::default(), &cm(name, json!({})))
        .await
        .unwrap()
}

/// Asserts that a watch from `rv` starts with 410 Gone (`Expired`): `rv` is older than the
/// history kept.
async fn assert_watch_expired(cms: &Api<ConfigMap>, rv: &str) {
    let mut stream = cms
        .watch(&WatchParams::default().timeout(5), rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_from_a_version_older_than_history_is_gone() {
    let sb = start_with(|c| c.history = 16).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sb.client());
    let first = create(&cms, "first").await;
    for i in 0..40 {
        create(&cms, &format!("c{i}")).await;
    }
    let rv = first.metadata.resource_version.unwrap();
    assert_watch_expired(&cms, &rv).await;
}

#[tokio::test]
async fn watches_send_bookmarks_when_allowed() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sb.client());
    let list = cms.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut stream = cms
        .watch(
            &WatchParams {
                bookmarks: true,
                ..WatchParams::default()
            }
            .timeout(5),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let ev = tokio::time::timeout(Duration::from_secs(3), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(ev, WatchEvent::Bookmark(_)), "{ev:?}");
}

#[tokio::test]
async fn watcher_recovers_when_the_server_drops_watch_streams() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sb.client());
    let mut events = watcher(cms.clone(), watcher::Config::default()).boxed();
    create(&cms, "before").await;
    let seen = |name: &'static str, ev: &watcher::Event<ConfigMap>| match ev {
        watcher::Event::Apply(c) | watcher::Event::InitApply(c) => {
            c.metadata.name.as_deref() == Some(name)
        }
        _ => false,
    };
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if seen("before", &ev) {
            break;
        }
    }
    sb.handle.drop_watches();
    tokio::time::sleep(Duration::from_millis(100)).await;
    create(&cms, "after").await;
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap();
        if let Ok(ev) = ev
            && seen("after", &ev)
        {
            break;
        }
    }
}

#[tokio::test]
async fn injected_errors_hit_matching_requests_the_given_number_of_times() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sb.client());
    create(&cms, "a").await;
    sb.handle.add_fault(FaultRule {
        verb: Some("get".into()),
        resource: Some("configmaps".into()),
        name: Some("a".into()),
        action: Some(FaultAction::Error {
            code: 503,
            message: Some("injected".into()),
        }),
        times: Some(2),
        ..Default::default()
    });
    assert_eq!(api_code(&cms.get("a").await.unwrap_err()).0, 503);
    assert!(cms.list(&ListParams::default()).await.is_ok());
    assert_eq!(api_code(&cms.get("a").await.unwrap_err()).0, 503);
    assert!(cms.get("a").await.is_ok());
}

#[tokio::test]
async fn injected_delays_slow_matching_requests() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sb.client());
    let id = sb.handle.add_fault(FaultRule {
        verb: Some("create".into()),
        action: Some(FaultAction::Delay { millis: 300 }),
        ..Default::default()
    });
    let t = std::time::Instant::now();
    create(&cms, "a").await;
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(sb.handle.remove_fault(id));
}

#[tokio::test]
async fn faults_are_programmable_over_https() {
    let sb = start().await;
    let client = sb.client();
    let (code, body) = raw(
        &client,
        "POST",
        "/sandbox/v1/faults",
        None,
        Some("application/json"),
        Some(json!({"verb": "list", "resource": "configmaps", "action": {"type": "error", "code": 500}})),
    )
    .await.unwrap();
    assert_eq!(code, 201, "{body}");
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    assert_eq!(
        api_code(&cms.list(&ListParams::default()).await.unwrap_err()).0,
        500
    );
    let (_, rules) = raw(&client, "GET", "/sandbox/v1/faults", None, None, None)
        .await
        .unwrap();
    assert_eq!(rules["rules"].as_array().unwrap().len(), 1);
    let (code, _) = raw(&client, "DELETE", "/sandbox/v1/faults", None, None, None)
        .await
        .unwrap();
    assert_eq!(code, 200);
    assert!(cms.list(&ListParams::default()).await.is_ok());
}

#[tokio::test]
async fn the_view_sees_what_the_api_stores() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sb.client());
    create(&cms, "a").await;
    let view = sb.handle.view();
    let r = initializer_sandbox::view::ResourceRef::new("", "v1", "configmaps");
    assert_eq!(view.list(r, Some("default")).len(), 1);
    let got = view.get(r, Some("default"), "a").unwrap();
    assert_eq!(got["kind"], "ConfigMap");
    assert_eq!(got["apiVersion"], "v1");
}

#[tokio::test]
async fn snapshots_restore_objects_into_a_new_sandbox() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sb.client());
    create(&cms, "kept").await;
    let path = sb.dir.path().join("snap.json");
    sb.handle.snapshot_to(&path).unwrap();
    let restored = start_with(|c| c.restore = Some(path.clone())).await;
    let cms2: Api<ConfigMap> = Api::default_namespaced(restored.client());
    assert!(cms2.get_opt("kept").await.unwrap().is_some());
}

#[tokio::test]
async fn pod_logs_are_read_from_the_state_directory() {
    let sb = start().await;
    let pods: Api<Pod> = Api::default_namespaced(sb.client());
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let dir = sb.handle.pod_log_dir().join("default_p");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("c.log"), "one\ntwo\nthree\n").unwrap();
    assert_eq!(
        pods.logs("p", &Default::default()).await.unwrap(),
        "one\ntwo\nthree\n"
    );
    let tail = kube::api::LogParams {
        tail_lines: Some(1),
        ..Default::default()
    };
    assert_eq!(pods.logs("p", &tail).await.unwrap(), "three\n");
}

#[tokio::test]
async fn the_library_starts_a_sandbox_in_under_a_second() {
    // The bound, with a generous margin over the measured ~15 ms (see the bench).
    let t = std::time::Instant::now();
    let sb = start().await;
    sb.client().apiserver_version().await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[tokio::test]
async fn compacting_the_history_makes_older_versions_gone() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sb.client());
    let first = create(&cms, "first").await;
    create(&cms, "second").await;
    sb.handle.compact_history();
    let later = create(&cms, "later").await;
    let rv = first.metadata.resource_version.unwrap();
    assert_watch_expired(&cms, &rv).await;
    // Versions from the compaction on still resume.
    let rv = later.metadata.resource_version.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    let next = stream.try_next().await.unwrap();
    assert!(!matches!(next, Some(WatchEvent::Error(_))), "{next:?}");
}
