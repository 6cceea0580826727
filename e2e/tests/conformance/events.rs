//! Events: one store behind core `v1` and `events.k8s.io/v1`, with kube-apiserver's field
//! mapping, and what kubectl shows of them.

use initializer_e2e::conformance::Scoped;
use std::fmt::Debug;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::events::v1::Event as NewEvent;
use kube::Resource;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::support::{create, create_configmap};
use crate::target::Target;

/// An `events.k8s.io/v1` Event about `regarding`.
fn new_event(name: &str, regarding: Value) -> NewEvent {
    serde_json::from_value(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-02T03:04:05.123456Z",
        "reportingController": "example.dev/ctrl", "reportingInstance": "ctrl-1",
        "action": "Reconcile", "reason": "Synced", "note": "hello from events.k8s.io",
        "type": "Normal", "regarding": regarding,
        "series": {"count": 3, "lastObservedTime": "2026-01-02T03:05:05.000000Z"}
    }))
    .unwrap()
}

/// A core `v1` Event about `involved`.
fn core_event(name: &str, involved: Value) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "involvedObject": involved,
        "reason": "Created", "message": "hello from core v1", "type": "Warning",
        "source": {"component": "old-ctrl", "host": "node-1"},
        "firstTimestamp": "2026-01-02T03:00:00Z", "lastTimestamp": "2026-01-02T03:10:00Z",
        "count": 4
    }))
    .unwrap()
}

/// Creates ConfigMap `target`, then an `events.k8s.io/v1` Event `new_name` and a core `v1`
/// Event `old_name` about it; returns both APIs' Events of the namespace.
async fn events_of_both_apis(
    t: &Target,
    new_name: &str,
    old_name: &str,
) -> anyhow::Result<(Api<Event>, Api<NewEvent>)> {
    let (_, c) = create_configmap(t, "target", json!({})).await?;
    let reference = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": "target",
        "namespace": t.namespace(), "uid": c.metadata.uid.clone().unwrap_or_default()
    });
    let old: Api<Event> = Api::namespaced(t.client(), t.namespace());
    let new: Api<NewEvent> = Api::namespaced(t.client(), t.namespace());
    create(&new, &new_event(new_name, reference.clone())).await?;
    create(&old, &core_event(old_name, reference)).await?;
    Ok((old, new))
}

/// The sorted `(uid, resourceVersion)` of every object `api` lists.
async fn uids_and_versions<K>(api: &Api<K>) -> anyhow::Result<Vec<(String, String)>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut keys: Vec<(String, String)> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|e| {
            let meta = e.meta();
            (
                meta.uid.clone().unwrap(),
                meta.resource_version.clone().unwrap(),
            )
        })
        .collect();
    keys.sort();
    Ok(keys)
}

/// The sorted names of what `api` lists with the field selector `fields`.
async fn names_by_fields<K>(api: &Api<K>, fields: &str) -> Vec<String>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut names: Vec<String> = api
        .list(&ListParams::default().fields(fields))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.meta().name.clone())
        .collect();
    names.sort();
    names
}

pub async fn events_written_through_either_api_are_read_through_both(
    t: &Target,
) -> anyhow::Result<()> {
    let (old, new) = events_of_both_apis(t, "e-new", "e-old").await?;

    // Written as events.k8s.io/v1, read as v1.
    let e = old.get("e-new").await?;
    assert_eq!(e.involved_object.name.as_deref(), Some("target"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(e.message.as_deref(), Some("hello from events.k8s.io"));
    assert_eq!(e.reason.as_deref(), Some("Synced"));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.reporting_component.as_deref(), Some("example.dev/ctrl"));
    assert_eq!(e.reporting_instance.as_deref(), Some("ctrl-1"));
    assert_eq!(e.action.as_deref(), Some("Reconcile"));
    assert!(e.event_time.is_some());
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(3));
    // The series is not folded into the deprecated fields.
    assert_eq!(e.count, None);
    assert_eq!(e.first_timestamp, None);
    assert_eq!(e.source.and_then(|s| s.component), None);

    // Written as v1, read as events.k8s.io/v1.
    let e = new.get("e-old").await?;
    assert_eq!(
        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("target")
    );
    assert_eq!(e.note.as_deref(), Some("hello from core v1"));
    assert_eq!(e.reason.as_deref(), Some("Created"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.deprecated_count, Some(4));
    assert!(e.deprecated_first_timestamp.is_some());
    assert!(e.deprecated_last_timestamp.is_some());
    let source = e.deprecated_source.unwrap_or_default();
    assert_eq!(source.component.as_deref(), Some("old-ctrl"));
    assert_eq!(source.host.as_deref(), Some("node-1"));
    assert_eq!(e.reporting_controller, None);

    // One store: both lists hold both, with the same uids and resourceVersions.
    let a = uids_and_versions(&old).await?;
    let b = uids_and_versions(&new).await?;
    assert_eq!(a.len(), 2);
    assert_eq!(a, b);
    Ok(())
}

/// Field selectors name the fields of the version asked for: `regarding.name` on
/// `events.k8s.io/v1`, `involvedObject.name` on `v1`.
pub async fn event_field_selectors_name_the_fields_of_the_version_asked_for(
    t: &Target,
) -> anyhow::Result<()> {
    let (old, new) = events_of_both_apis(t, "a", "b").await?;
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "namespace": t.namespace()});
    create(&old, &core_event("c", other)).await?;
    assert_eq!(
        names_by_fields(&old, "involvedObject.name=target").await,
        vec!["a", "b"]
    );
    assert_eq!(
        names_by_fields(&new, "regarding.name=target").await,
        vec!["a", "b"]
    );
    assert_eq!(
        names_by_fields(&new, "regarding.name=other").await,
        vec!["c"]
    );
    assert_eq!(names_by_fields(&old, "reason=Synced").await, vec!["a"]);
    assert_eq!(names_by_fields(&new, "type=Warning").await, vec!["b", "c"]);
    Ok(())
}

/// `kubectl get events` and `kubectl describe` show Events of both APIs.
pub async fn kubectl_shows_events_of_both_apis_in_get_and_describe(
    t: &Target,
) -> anyhow::Result<()> {
    events_of_both_apis(t, "e-new", "e-old").await?;
    for resource in ["events", "events.v1.events.k8s.io"] {
        let table = t.kubectl_ns(&["get", resource], None).await?;
        let header: Vec<&str> = table
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            vec!["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
            "{table}"
        );
        for (kind, reason, message) in [
            ("Normal", "Synced", "hello from events.k8s.io"),
            ("Warning", "Created", "hello from core v1"),
        ] {
            assert!(
                table.lines().any(|l| l.contains(kind)
                    && l.contains(reason)
                    && l.contains("configmap/target")
                    && l.contains(message)),
                "{resource}: no {reason} row in\n{table}"
            );
        }
    }
    let wide = t.kubectl_ns(&["get", "events", "-o", "wide"], None).await?;
    assert!(
        wide.lines()
            .any(|l| l.contains("example.dev/ctrl, ctrl-1") && l.contains("e-new")),
        "{wide}"
    );
    assert!(
        wide.lines()
            .any(|l| l.contains("old-ctrl, node-1") && l.contains("e-old")),
        "{wide}"
    );
    let described = t
        .kubectl_ns(&["describe", "configmap", "target"], None)
        .await?;
    let events = described
        .split("Events:")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    for (kind, reason, count, source, message) in [
        (
            "Normal",
            "Synced",
            "(x3 over",
            "example.dev/ctrl",
            "hello from events.k8s.io",
        ),
        (
            "Warning",
            "Created",
            "(x4 over",
            "old-ctrl",
            "hello from core v1",
        ),
    ] {
        let row = [kind, reason, count, source, message];
        assert!(
            events
                .lines()
                .any(|l| row.iter().all(|part| l.contains(part))),
            "{described}"
        );
    }
    Ok(())
}
