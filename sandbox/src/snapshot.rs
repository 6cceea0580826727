//! State snapshots: every stored object as one JSON document, and loading one back into an
//! empty store.

use serde_json::{Value, json};

use crate::error::Error;
use crate::store::{ResKey, Store};

/// Every stored object with its resource, as JSON.
pub fn take(store: &Store) -> Value {
    let mut objects: Vec<Value> = store
        .all()
        .into_iter()
        .map(|(key, obj)| json!({"group": key.group, "resource": key.plural, "object": *obj}))
        .collect();
    objects.sort_by_key(|o| {
        o["object"]["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    });
    json!({"kind": "SandboxSnapshot", "resourceVersion": store.current_rv().to_string(), "objects": objects})
}

/// Loads a snapshot's objects (in the order they were written) into `store`; objects that
/// already exist are kept as they are.
pub fn restore(store: &Store, snapshot: &Value) -> Result<usize, Error> {
    let objects = snapshot["objects"]
        .as_array()
        .ok_or_else(|| Error::Snapshot("no objects list".into()))?;
    let mut n = 0;
    for o in objects {
        let (Some(group), Some(resource)) = (o["group"].as_str(), o["resource"].as_str()) else {
            return Err(Error::Snapshot("entry without group or resource".into()));
        };
        if store
            .create(&ResKey::new(group, resource), o["object"].clone())
            .is_ok()
        {
            n += 1;
        }
    }
    Ok(n)
}
