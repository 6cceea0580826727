//! Whether someone edited what the operator set in a webhook configuration: pure comparisons of
//! the desired and the live object (whether it is ours at all is [`crate::backend::is_ours`]).

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;

use crate::backend::is_ours;

/// Whether a copy of the live configuration (`watched`, as a watch last saw it) is this
/// Initializer's and holds everything `desired` sets: then a fresh read would show nothing to
/// put right. No copy, or nothing desired, is never unchanged.
pub fn unchanged(
    desired: Option<&MutatingWebhookConfiguration>,
    watched: Option<&MutatingWebhookConfiguration>,
    initializer_label: &str,
) -> bool {
    match (desired, watched) {
        (Some(desired), Some(watched)) => {
            is_ours(&watched.metadata, initializer_label) && !drifted(desired, watched)
        }
        _ => false,
    }
}

/// Whether the live configuration differs from what the operator wants in anything the
/// operator sets (someone edited its selectors, failure policy or caBundle). Fields the API
/// server defaults, and fields the operator does not set, are not compared.
pub fn drifted(
    desired: &MutatingWebhookConfiguration,
    live: &MutatingWebhookConfiguration,
) -> bool {
    match (serde_json::to_value(desired), serde_json::to_value(live)) {
        (Ok(desired), Ok(live)) => !contains(&live, &desired),
        // Not comparable: re-applying is harmless.
        _ => true,
    }
}

/// Whether `live` holds every field of `wanted` with the same value (lists element by element).
/// Selectors are compared whole: a label requirement someone added narrows what is intercepted
/// as surely as one they changed.
fn contains(live: &serde_json::Value, wanted: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (live, wanted) {
        (Value::Object(live), Value::Object(wanted)) => wanted.iter().all(|(key, value)| {
            let found = live.get(key).unwrap_or(&Value::Null);
            if key == "namespaceSelector" || key == "objectSelector" {
                without_empty(found) == without_empty(value)
            } else {
                live.contains_key(key) && contains(found, value)
            }
        }),
        (Value::Array(live), Value::Array(wanted)) => {
            live.len() == wanted.len() && live.iter().zip(wanted).all(|(l, w)| contains(l, w))
        }
        (live, wanted) => live == wanted,
    }
}

/// The value with empty lists, empty objects and nulls left out (`{}`, `{"matchLabels": {}}`
/// and no selector at all all select everything).
fn without_empty(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), without_empty(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_empty).collect()),
        other => other.clone(),
    }
}

fn is_empty(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Null => true,
        serde_json::Value::Object(map) => map.is_empty(),
        serde_json::Value::Array(items) => items.is_empty(),
        _ => false,
    }
}
