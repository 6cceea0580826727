//! Events: one store behind core `v1` and `events.k8s.io/v1`, with kube-apiserver's field
//! mapping, and what kubectl shows of them.

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::api::events::v1::Event as NewEvent;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use crate::support::cm;
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

async fn target_configmap(t: &Target) -> anyhow::Result<(ConfigMap, Value)> {
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    let c = cms
        .create(&PostParams::default(), &cm("target", json!({})))
        .await?;
    let reference = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": "target",
        "namespace": t.namespace(), "uid": c.metadata.uid.clone().unwrap_or_default()
    });
    Ok((c, reference))
}

pub async fn events_written_through_either_api_are_read_through_both(
    t: &Target,
) -> anyhow::Result<()> {
    let (_, reference) = target_configmap(t).await?;
    let old: Api<Event> = Api::namespaced(t.client(), t.namespace());
    let new: Api<NewEvent> = Api::namespaced(t.client(), t.namespace());
    new.create(
        &PostParams::default(),
        &new_event("e-new", reference.clone()),
    )
    .await?;
    old.create(&PostParams::default(), &core_event("e-old", reference))
        .await?;

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
    let mut a: Vec<(String, String)> = old
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|e| {
            (
                e.metadata.uid.unwrap(),
                e.metadata.resource_version.unwrap(),
            )
        })
        .collect();
    let mut b: Vec<(String, String)> = new
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|e| {
            (
                e.metadata.uid.unwrap(),
                e.metadata.resource_version.unwrap(),
            )
        })
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a.len(), 2);
    assert_eq!(a, b);
    Ok(())
}

/// Field selectors name the fields of the version asked for: `regarding.name` on
/// `events.k8s.io/v1`, `involvedObject.name` on `v1`.
pub async fn event_field_selectors_name_the_fields_of_the_version_asked_for(
    t: &Target,
) -> anyhow::Result<()> {
    let (_, reference) = target_configmap(t).await?;
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "namespace": t.namespace()});
    let old: Api<Event> = Api::namespaced(t.client(), t.namespace());
    let new: Api<NewEvent> = Api::namespaced(t.client(), t.namespace());
    new.create(&PostParams::default(), &new_event("a", reference.clone()))
        .await?;
    old.create(&PostParams::default(), &core_event("b", reference))
        .await?;
    old.create(&PostParams::default(), &core_event("c", other))
        .await?;
    let names_old = |sel: String| {
        let old = old.clone();
        async move {
            let mut n: Vec<String> = old
                .list(&ListParams::default().fields(&sel))
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|e| e.metadata.name)
                .collect();
            n.sort();
            n
        }
    };
    let names_new = |sel: String| {
        let new = new.clone();
        async move {
            let mut n: Vec<String> = new
                .list(&ListParams::default().fields(&sel))
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|e| e.metadata.name)
                .collect();
            n.sort();
            n
        }
    };
    assert_eq!(
        names_old("involvedObject.name=target".into()).await,
        vec!["a", "b"]
    );
    assert_eq!(
        names_new("regarding.name=target".into()).await,
        vec!["a", "b"]
    );
    assert_eq!(names_new("regarding.name=other".into()).await, vec!["c"]);
    assert_eq!(names_old("reason=Synced".into()).await, vec!["a"]);
    assert_eq!(names_new("type=Warning".into()).await, vec!["b", "c"]);
    Ok(())
}

/// `kubectl get events` and `kubectl describe` show Events of both APIs.
pub async fn kubectl_shows_events_of_both_apis_in_get_and_describe(
    t: &Target,
) -> anyhow::Result<()> {
    let (_, reference) = target_configmap(t).await?;
    let old: Api<Event> = Api::namespaced(t.client(), t.namespace());
    let new: Api<NewEvent> = Api::namespaced(t.client(), t.namespace());
    new.create(
        &PostParams::default(),
        &new_event("e-new", reference.clone()),
    )
    .await?;
    old.create(&PostParams::default(), &core_event("e-old", reference))
        .await?;
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
    assert!(
        events.lines().any(|l| l.contains("Normal")
            && l.contains("Synced")
            && l.contains("(x3 over")
            && l.contains("example.dev/ctrl")
            && l.contains("hello from events.k8s.io")),
        "{described}"
    );
    assert!(
        events.lines().any(|l| l.contains("Warning")
            && l.contains("Created")
            && l.contains("(x4 over")
            && l.contains("old-ctrl")
            && l.contains("hello from core v1")),
        "{described}"
    );
    Ok(())
}
