//! Events, one store served through two APIs: core `v1` and `events.k8s.io/v1`.
//!
//! kube-apiserver keeps Events in the core `v1` shape and converts on the way in and out of
//! `events.k8s.io/v1`, so an Event written through either API is listed by both, by
//! `kubectl get events` and by `kubectl describe`. The field mapping is kube-apiserver's
//! (`pkg/apis/events/v1` conversion): `regarding`↔`involvedObject`, `note`↔`message`,
//! `reportingController`↔`reportingComponent`, `deprecatedSource`↔`source`,
//! `deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/`deprecatedCount`↔
//! `firstTimestamp`/`lastTimestamp`/`count`; `eventTime`, `series`, `action`, `related`,
//! `reason`, `type` and `reportingInstance` keep their names. `series.count` is not copied into
//! `count` (the real server does not either; `kubectl describe` reads `series`).

use serde_json::{Map, Value};

use crate::resource::{ResourceType, split_api_version};

/// The group of the newer Event API.
pub const EVENTS_GROUP: &str = "events.k8s.io";

/// Core `v1` field name, `events.k8s.io/v1` field name.
const RENAMES: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Whether `rt` is one of the two Event APIs.
pub fn is_event(rt: &ResourceType) -> bool {
    rt.kind == "Event" && rt.plural == "events" && (rt.group.is_empty() || rt.group == EVENTS_GROUP)
}

/// Whether objects of `rt` are stored in another shape than they are served in.
pub fn is_converted(rt: &ResourceType) -> bool {
    rt.group == EVENTS_GROUP && is_event(rt)
}

/// The group whose store holds `group`'s `plural`: Events of both APIs live under core `v1`.
pub fn storage_group<'a>(group: &'a str, plural: &str) -> &'a str {
    if group == EVENTS_GROUP && plural == "events" {
        ""
    } else {
        group
    }
}

fn rename(obj: &Value, from_core: bool, api_version: &str) -> Value {
    let Some(fields) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::with_capacity(fields.len());
    for (key, value) in fields {
        let renamed = RENAMES.iter().find_map(|(core, new)| {
            let (from, to) = if from_core { (core, new) } else { (new, core) };
            (key == from).then_some(*to)
        });
        out.insert(renamed.unwrap_or(key).to_string(), value.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String("Event".into()));
    Value::Object(out)
}

fn is_new_shape(obj: &Value) -> bool {
    obj.get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|av| split_api_version(av).0 == EVENTS_GROUP)
}

/// An Event of either API in the core `v1` shape (unchanged when it already is).
pub fn to_core(obj: &Value) -> Value {
    if is_new_shape(obj) {
        rename(obj, false, "v1")
    } else {
        obj.clone()
    }
}

/// An Event of either API in the `events.k8s.io/v1` shape (unchanged when it already is).
pub fn to_events_v1(obj: &Value) -> Value {
    if is_new_shape(obj) {
        obj.clone()
    } else {
        rename(obj, true, "events.k8s.io/v1")
    }
}

/// `obj` (stored or served, of either API) in the shape `rt` serves; `None` when `rt` is not an
/// Event API (then the object needs no conversion).
pub fn convert_for(rt: &ResourceType, obj: &Value) -> Option<Value> {
    if !is_event(rt) {
        return None;
    }
    Some(if rt.group == EVENTS_GROUP {
        to_events_v1(obj)
    } else {
        to_core(obj)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn new_event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "eventTime": "2026-01-02T03:04:05.123456Z",
            "reportingController": "example.dev/ctrl", "reportingInstance": "ctrl-1",
            "action": "Reconcile", "reason": "Synced", "note": "hello", "type": "Normal",
            "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": "ns"},
            "series": {"count": 3, "lastObservedTime": "2026-01-02T03:05:05.000000Z"},
            "deprecatedSource": {"component": "old"},
            "deprecatedCount": 2,
        })
    }

    #[test]
    fn the_new_shape_maps_to_core_fields_as_kube_apiserver_does() {
        let core = to_core(&new_event());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "c");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["reportingComponent"], "example.dev/ctrl");
        assert_eq!(core["source"]["component"], "old");
        assert_eq!(core["count"], 2);
        assert_eq!(core["series"]["count"], 3);
        assert_eq!(core["eventTime"], "2026-01-02T03:04:05.123456Z");
        for gone in [
            "regarding",
            "note",
            "reportingController",
            "deprecatedCount",
        ] {
            assert!(core.get(gone).is_none(), "{gone} left in {core}");
        }
    }

    #[test]
    fn converting_there_and_back_is_lossless() {
        let new = new_event();
        assert_eq!(to_events_v1(&to_core(&new)), new);
        assert_eq!(to_events_v1(&new), new);
        let core = to_core(&new);
        assert_eq!(to_core(&core), core);
    }
}
