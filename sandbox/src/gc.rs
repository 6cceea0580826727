//! Garbage collection and namespace finalization, run after changes like
//! kube-controller-manager's garbage collector and namespace controller:
//! dependents of deleted owners are deleted (background), foreground deletion waits for
//! dependents, orphaning strips owner references, and a deleted namespace is emptied and then
//! removed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::apiserver::{ApiServer, DeleteOptions};
use crate::store::{ResKey, object_rv};

fn finalizers(obj: &Value) -> Vec<String> {
    crate::json::strings(obj.pointer("/metadata/finalizers"))
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

/// Runs until the task is aborted, one pass after each burst of changes.
pub async fn run(api: Arc<ApiServer>) {
    loop {
        api.store.changed.notified().await;
        // Let a burst of writes settle before scanning.
        tokio::time::sleep(Duration::from_millis(20)).await;
        pass(&api).await;
    }
}

async fn delete(api: &ApiServer, key: &ResKey, obj: &Value, propagation: &str) {
    let Some(rt) = api
        .store
        .registry()
        .storage(&key.group, &key.plural)
        .cloned()
    else {
        return;
    };
    let (ns, name) = crate::store::names(obj);
    let ns = if ns.is_empty() { None } else { Some(ns) };
    let opts = DeleteOptions {
        propagation: Some(propagation.to_string()),
        ..Default::default()
    };
    if let Err(e) = api.delete(&rt, ns.as_deref(), &name, &opts).await
        && e.code != 404
    {
        tracing::debug!(error = %e, %name, "garbage collector failed to delete");
    }
}

/// One scan over every object.
pub async fn pass(api: &ApiServer) {
    let all = api.store.all();
    let uids: HashSet<String> = all
        .iter()
        .filter_map(|(_, o)| {
            o.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    let mut dependents: HashMap<String, Vec<(ResKey, Arc<Value>)>> = HashMap::new();
    for (key, obj) in &all {
        for uid in owner_uids(obj) {
            dependents
                .entry(uid)
                .or_default()
                .push((key.clone(), obj.clone()));
        }
    }
    for (key, obj) in &all {
        let owners = owner_uids(obj);
        if !owners.is_empty() && !deleting(obj) && owners.iter().all(|u| !uids.contains(u)) {
            delete(api, key, obj, "Background").await;
            continue;
        }
        if !deleting(obj) {
            continue;
        }
        let uid = obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let fins = finalizers(obj);
        let deps = dependents.get(&uid).cloned().unwrap_or_default();
        if fins.iter().any(|f| f == "orphan") {
            for (dkey, dep) in &deps {
                let mut d = (**dep).clone();
                if let Some(refs) = d
                    .pointer_mut("/metadata/ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r["uid"].as_str() != Some(uid.as_str()));
                }
                let _ = api.system_update(dkey, d, object_rv(dep));
            }
            remove_finalizer(api, key, obj, "orphan");
            continue;
        }
        if fins.iter().any(|f| f == "foregroundDeletion") {
            if deps.is_empty() {
                remove_finalizer(api, key, obj, "foregroundDeletion");
            } else {
                for (dkey, dep) in &deps {
                    if !deleting(dep) {
                        delete(api, dkey, dep, "Foreground").await;
                    }
                }
            }
            continue;
        }
        if key.group.is_empty() && key.plural == "namespaces" {
            let ns = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let contents: Vec<&(ResKey, Arc<Value>)> = all
                .iter()
                .filter(|(_, o)| {
                    o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns)
                })
                .collect();
            if contents.is_empty() {
                let mut n = (**obj).clone();
                n["spec"] = json!({"finalizers": []});
                let _ = api.system_update(key, n, object_rv(obj));
            } else {
                for (ckey, c) in contents {
                    if !deleting(c) {
                        delete(api, ckey, c, "Background").await;
                    }
                }
            }
        }
    }
}

fn remove_finalizer(api: &ApiServer, key: &ResKey, obj: &Value, name: &str) {
    let mut o = obj.clone();
    if let Some(f) = o
        .pointer_mut("/metadata/finalizers")
        .and_then(Value::as_array_mut)
    {
        f.retain(|x| x.as_str() != Some(name));
    }
    let _ = api.system_update(key, o, object_rv(obj));
}
