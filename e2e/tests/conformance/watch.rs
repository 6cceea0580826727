//! Watches: resuming from a resourceVersion, 410 Gone, bookmarks, selectors, streaming lists.

use initializer_e2e::conformance::Scoped;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::support::{ROOT_CA, cm, create, create_configmap, merge};
use crate::target::Target;

pub async fn watch_resumes_after_a_resource_version(t: &Target) -> anyhow::Result<()> {
    let (cms, a) = create_configmap(t, "a", json!({})).await?;
    create(&cms, &cm("b", json!({}))).await?;
    cms.delete("a", &DeleteParams::default()).await?;
    let rv = a.metadata.resource_version.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(10), &rv)
        .await?
        .boxed();
    let mut got = Vec::new();
    while got.len() < 2 {
        let (change, name) = match stream.try_next().await?.unwrap() {
            WatchEvent::Added(c) => ("ADDED", c.metadata.name.unwrap()),
            WatchEvent::Deleted(c) => ("DELETED", c.metadata.name.unwrap()),
            WatchEvent::Modified(c) => ("MODIFIED", c.metadata.name.unwrap()),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        };
        // kube-controller-manager publishes its CA ConfigMap into a new namespace whenever it
        // gets to it, possibly after `a`: not part of this sequence.
        if name != ROOT_CA {
            got.push(format!("{change} {name}"));
        }
    }
    assert_eq!(got, vec!["ADDED b", "DELETED a"]);
    Ok(())
}

fn event(name: &str, namespace: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": namespace},
        "reason": "Tested", "message": "m", "type": "Normal",
        "source": {"component": "conformance"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1
    }))
    .unwrap()
}

/// A watch from a resourceVersion the server no longer has is answered with an ERROR event
/// carrying a 410 `Expired` Status. What makes a version forgotten differs (the sandbox's
/// bounded history, etcd's compaction: [`Target::forget_history`]); the answer must not.
/// kube-apiserver still serves versions its watch cache holds (everything since it started, up
/// to its capacity) after a compaction, so the version watched from is `1`, older than any cache:
/// such a watch goes to etcd, which has compacted it away.
pub async fn watch_from_a_forgotten_version_is_gone(t: &Target) -> anyhow::Result<()> {
    let events: Api<Event> = Api::namespaced(t.client(), t.namespace());
    let first = create(&events, &event("first", t.namespace())).await?;
    create(&events, &event("second", t.namespace())).await?;
    t.forget_history().await?;
    create(&events, &event("third", t.namespace())).await?;
    assert!(first.metadata.resource_version.is_some());
    let mut stream = events
        .watch(&WatchParams::default().timeout(10), "1")
        .await?
        .boxed();
    match stream.try_next().await?.unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410, "{e:?}");
            assert_eq!(e.reason, "Expired", "{e:?}");
        }
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    Ok(())
}

/// With `sendInitialEvents=true` and bookmarks allowed, the initial ADDED events end with a
/// BOOKMARK annotated `k8s.io/initial-events-end`. (Periodic bookmarks come every minute or so
/// from kube-apiserver, which cannot be configured; the sandbox's interval is configurable and
/// tested in the sandbox's own suite.)
pub async fn streaming_lists_end_their_initial_events_with_a_bookmark(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, _) = create_configmap(t, "a", json!({})).await?;
    let wp = WatchParams {
        bookmarks: true,
        send_initial_events: true,
        ..WatchParams::default()
    }
    .timeout(10);
    let mut stream = cms.watch(&wp, "").await?.boxed();
    let mut added = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await??
            .unwrap();
        match ev {
            WatchEvent::Added(c) => added.push(c.metadata.name.unwrap()),
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata.annotations.get("k8s.io/initial-events-end"),
                    Some(&"true".to_string())
                );
                assert!(!b.metadata.resource_version.is_empty());
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    added.retain(|n| n != ROOT_CA);
    assert_eq!(added, vec!["a"]);
    Ok(())
}

pub async fn watch_reports_objects_leaving_a_label_selector_as_deleted(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, created) = create_configmap(t, "a", json!({"keep": "yes"})).await?;
    let rv = created.metadata.resource_version.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().labels("keep=yes").timeout(10), &rv)
        .await?
        .boxed();
    merge(&cms, "a", json!({"metadata": {"labels": {"keep": "no"}}})).await?;
    let ev = stream.try_next().await?.unwrap();
    assert!(matches!(ev, WatchEvent::Deleted(_)), "{ev:?}");
    Ok(())
}

pub async fn streaming_list_watchers_get_initial_events_then_changes(
    t: &Target,
) -> anyhow::Result<()> {
    let (cms, _) = create_configmap(t, "old", json!({})).await?;
    let mut events = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut init = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await??
            .unwrap()
        {
            watcher::Event::InitApply(c) => init.push(c.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    // kube-runtime starts a streaming list at resourceVersion "0" (NotOlderThan), which the API
    // server answers from its watch cache as it stands: under load that state may predate the
    // create just answered, and then "old" comes as the first change after the initial events
    // instead of among them. Either way each object comes once, "old" before "new".
    let mut seen = init;
    create(&cms, &cm("new", json!({}))).await?;
    while seen.last().is_none_or(|n| n != "new") {
        match tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await??
            .unwrap()
        {
            watcher::Event::Apply(c) if c.metadata.name.as_deref() == Some(ROOT_CA) => {}
            watcher::Event::Apply(c) => seen.push(c.metadata.name.unwrap()),
            other => panic!("expected the new object, got {other:?}"),
        }
    }
    seen.retain(|n| n != ROOT_CA);
    assert_eq!(seen, vec!["old", "new"]);
    Ok(())
}
