//! Pure decisions of the `InitializerConfiguration` backend about objects and their
//! `metadata.initializers` (`{"pending": [{"name"}], "result": Status}`, Kubernetes 1.7–1.13):
//! whether an object waits on a name and what it looks like once the name is released, which
//! discovered resources an Initializer's rules reach, and the canary object its probe creates.
//!
//! The operator releases a name in three cases: every object still pending on a dead
//! initializer when its configuration is removed (deleting the configuration does not release
//! what already waits, as the reference walkthrough's troubleshooting section shows), the
//! initializer's own ReplicaSets and pods (they must never wait on the initializer they run),
//! and nothing else.

use initializer_crds::InterceptRule;
use serde_json::{Value, json};

/// The names `obj` is pending on, in order.
pub fn pending_names(obj: &Value) -> Vec<&str> {
    obj.pointer("/metadata/initializers/pending")
        .and_then(Value::as_array)
        .map(|pending| {
            pending
                .iter()
                .filter_map(|p| p.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `obj` is one of the operator's canaries (it carries the canary label). Used only to
/// leave canaries out of a count: a user who labels an object so changes nothing but that count.
pub fn is_canary(obj: &Value) -> bool {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|labels| labels.contains_key(initializer_crds::constants::CANARY_LABEL))
}

/// Whether `obj` is initialized: no pending name and no result.
pub fn is_initialized(obj: &Value) -> bool {
    match obj.pointer("/metadata/initializers") {
        None | Some(Value::Null) => true,
        Some(initializers) => {
            pending_names(obj).is_empty() && initializers.get("result").is_none_or(Value::is_null)
        }
    }
}

/// The message of a failure `result` on `obj`, if an initializer refused it.
pub fn failure(obj: &Value) -> Option<String> {
    let result = obj.pointer("/metadata/initializers/result")?;
    if result.is_null() {
        return None;
    }
    Some(
        result
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("an initializer set a failure result")
            .to_string(),
    )
}

/// `obj` with `name` removed from its pending list (wherever it stands), ready to be written
/// back with its `resourceVersion`; `None` when `obj` is not pending on `name`. The other names
/// and the result stay as they are.
pub fn released(obj: &Value, name: &str) -> Option<Value> {
    if !pending_names(obj).contains(&name) {
        return None;
    }
    let mut out = obj.clone();
    if let Some(pending) = out
        .pointer_mut("/metadata/initializers/pending")
        .and_then(Value::as_array_mut)
    {
        pending.retain(|p| p.get("name").and_then(Value::as_str) != Some(name));
    }
    Some(out)
}

/// One resource the API server serves, as discovery lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// API group (`""` for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Whether this is the group's preferred version.
    pub preferred: bool,
    /// Plural resource.
    pub resource: String,
    /// Kind.
    pub kind: String,
    /// Whether it is namespaced.
    pub namespaced: bool,
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|entry| entry == "*" || entry == value)
}

/// Whether `rule` (as an `InitializerConfiguration` matches one: group, version and resource,
/// `*` for any) reaches `served`.
pub fn rule_reaches(rule: &InterceptRule, served: &Served) -> bool {
    listed(&rule.api_groups, &served.group)
        && listed(&rule.api_versions, &served.version)
        && listed(&rule.resources, &served.resource)
}

/// The served resources `rules` reach, one version per group and resource (the same objects
/// are served under every version: the preferred one when the rules reach it, else the first
/// they reach), in discovery order.
pub fn reached(rules: &[InterceptRule], served: &[Served]) -> Vec<Served> {
    let mut out: Vec<Served> = Vec::new();
    for candidate in served
        .iter()
        .filter(|s| rules.iter().any(|r| rule_reaches(r, s)))
    {
        match out
            .iter_mut()
            .find(|o| o.group == candidate.group && o.resource == candidate.resource)
        {
            Some(existing) if candidate.preferred && !existing.preferred => {
                *existing = candidate.clone();
            }
            Some(_) => {}
            None => out.push(candidate.clone()),
        }
    }
    out
}

/// Kinds whose canary the operator knows how to build so that it does nothing once
/// initialized, best first.
const CANARY_KINDS: [&str; 10] = [
    "ConfigMap",
    "Secret",
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "Service",
    "Pod",
];

/// The resource the canary is made of: a namespaced one the rules reach, of a kind whose
/// canary does nothing, best first; `None` when there is none (then the probe cannot run).
pub fn canary_resource(reached: &[Served]) -> Option<Served> {
    CANARY_KINDS.iter().find_map(|kind| {
        reached
            .iter()
            .find(|s| s.namespaced && s.kind == *kind)
            .cloned()
    })
}

/// The canary: an object of `resource` named `name` in `namespace`, labelled `label_key:
/// label_value`, pending on `pending_name` alone (set by its creator, so no other initializer
/// is added), shaped to do nothing once initialized: no replicas, suspended jobs, a pod bound
/// to a node that does not exist, a Service without a selector.
pub fn canary(
    resource: &Served,
    name: &str,
    namespace: &str,
    (label_key, label_value): (&str, &str),
    pending_name: &str,
) -> Value {
    let api_version = if resource.group.is_empty() {
        resource.version.clone()
    } else {
        format!("{}/{}", resource.group, resource.version)
    };
    let labels = json!({ label_key: label_value });
    let pod_spec = json!({
        "containers": [{"name": "canary", "image": "initializer-operator-canary"}],
        "nodeName": "initializer-operator-canary-nowhere",
    });
    let template = json!({"metadata": {"labels": labels}, "spec": pod_spec});
    let selector = json!({"matchLabels": labels});
    let workload = json!({"replicas": 0, "selector": selector, "template": template});
    let extra = match resource.kind.as_str() {
        "ConfigMap" => json!({"data": {}}),
        "Secret" => json!({"type": "Opaque", "data": {}}),
        "Deployment" | "ReplicaSet" => json!({"spec": workload}),
        "StatefulSet" => {
            let mut spec = workload;
            spec["serviceName"] = json!(name);
            json!({"spec": spec})
        }
        "DaemonSet" => json!({"spec": {"selector": selector, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": pod_spec["containers"], "nodeSelector": {"initializer-operator.io/canary": "nowhere"}},
        }}}),
        "Job" => json!({"spec": {"suspend": true, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": pod_spec["containers"], "restartPolicy": "Never"},
        }}}),
        "CronJob" => {
            json!({"spec": {"suspend": true, "schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": {
                "metadata": {"labels": labels},
                "spec": {"containers": pod_spec["containers"], "restartPolicy": "Never"},
            }}}}})
        }
        "Service" => json!({"spec": {"ports": [{"port": 80}]}}),
        "Pod" => json!({"spec": pod_spec}),
        _ => json!({}),
    };
    let mut object = json!({
        "apiVersion": api_version,
        "kind": resource.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "initializers": {"pending": [{"name": pending_name}]},
        },
    });
    if let (Some(obj), Value::Object(more)) = (object.as_object_mut(), extra) {
        obj.extend(more);
    }
    object
}

/// How old a canary must be to count as left behind (a probe deletes its canary within its
/// budget, at most 30 s, plus the delete itself).
pub const STALE_CANARY_AGE: jiff::SignedDuration = jiff::SignedDuration::from_secs(120);

/// The names of the canaries among `items` created before `now - STALE_CANARY_AGE`: left by a
/// probe whose delete never ran (the operator stopped meanwhile). Objects without a readable
/// creation time are left alone.
pub fn stale_canaries(items: &[Value], now: jiff::Timestamp) -> Vec<String> {
    let Ok(before) = now.checked_sub(STALE_CANARY_AGE) else {
        return Vec::new();
    };
    items
        .iter()
        .filter(|item| {
            item.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|created| created < before)
        })
        .filter_map(|item| item.pointer("/metadata/name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests;
