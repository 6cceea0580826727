//! The in-memory object store: every object of every resource, one monotonically increasing
//! resourceVersion, a bounded history of changes for watch resumption, and a broadcast of live
//! changes.
//!
//! The store knows nothing of HTTP, defaulting or admission: it checks existence and
//! resourceVersion preconditions and records what it is given.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::error::ApiError;
use crate::resource::Registry;

/// A resource as the store keys it: group and plural (all versions share storage).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResKey {
    /// API group, empty for core.
    pub group: String,
    /// Plural resource name.
    pub plural: String,
}

impl ResKey {
    pub fn new(group: &str, plural: &str) -> Self {
        ResKey {
            group: group.to_string(),
            plural: plural.to_string(),
        }
    }
}

/// The kind of change a watch event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The name watch events carry (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, kept in history and broadcast to watchers.
#[derive(Clone, Debug)]
pub struct Change {
    /// The resourceVersion the change produced.
    pub rv: u64,
    pub key: ResKey,
    /// Namespace, empty for cluster-scoped.
    pub namespace: String,
    pub kind: EventType,
    /// The object after the change (before it, with the new resourceVersion, for deletes).
    pub object: Arc<Value>,
    /// The object before an update.
    pub prev: Option<Arc<Value>>,
}

type Objects = BTreeMap<(String, String), Arc<Value>>;

struct Inner {
    rv: u64,
    objects: HashMap<ResKey, Objects>,
    history: VecDeque<Arc<Change>>,
}

/// The store. Cheap to share behind an `Arc`.
pub struct Store {
    inner: RwLock<Inner>,
    registry: RwLock<Registry>,
    tx: broadcast::Sender<Arc<Change>>,
    history_limit: usize,
    /// Woken after every change (garbage collector, namespace finalizer).
    pub changed: Notify,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("rv", &self.inner.read().rv)
            .finish_non_exhaustive()
    }
}

/// The resourceVersion of a stored object.
pub fn object_rv(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// Where watching from a resourceVersion can start.
#[derive(Debug)]
pub enum WatchStart {
    /// Events after the version, then live ones.
    Resumed(Vec<Arc<Change>>, broadcast::Receiver<Arc<Change>>),
    /// The version is older than the kept history.
    Expired(u64),
}

impl Store {
    /// An empty store keeping `history_limit` changes for watch resumption.
    pub fn new(registry: Registry, history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(16_384);
        Store {
            inner: RwLock::new(Inner {
                rv: 1,
                objects: HashMap::new(),
                history: VecDeque::new(),
            }),
            registry: RwLock::new(registry),
            tx,
            history_limit,
            changed: Notify::new(),
        }
    }

    /// The served resource types.
    pub fn registry(&self) -> parking_lot::RwLockReadGuard<'_, Registry> {
        self.registry.read()
    }

    /// Changes the served resource types.
    pub fn registry_mut(&self) -> parking_lot::RwLockWriteGuard<'_, Registry> {
        self.registry.write()
    }

    /// The latest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.inner.read().rv
    }

    /// One object by namespace (empty for cluster-scoped) and name.
    pub fn get(&self, key: &ResKey, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let inner = self.inner.read();
        inner
            .objects
            .get(key)?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of a resource, in one namespace or all (`None`), sorted by namespace and name,
    /// with the resourceVersion the list is consistent with.
    pub fn list(&self, key: &ResKey, namespace: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.inner.read();
        let items = match inner.objects.get(key) {
            None => Vec::new(),
            Some(objs) => match namespace {
                None => objs.values().cloned().collect(),
                Some(ns) => objs
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
            },
        };
        (items, inner.rv)
    }

    /// Every stored object with its resource key.
    pub fn all(&self) -> Vec<(ResKey, Arc<Value>)> {
        let inner = self.inner.read();
        inner
            .objects
            .iter()
            .flat_map(|(k, objs)| objs.values().map(move |v| (k.clone(), v.clone())))
            .collect()
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.inner.read().objects.values().map(BTreeMap::len).sum()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gives `obj` the next resourceVersion and records the change for watchers; the caller
    /// stores or removes the object under the same write lock.
    fn commit(
        &self,
        inner: &mut Inner,
        key: &ResKey,
        namespace: String,
        kind: EventType,
        mut obj: Value,
        prev: Option<Arc<Value>>,
    ) -> Arc<Value> {
        inner.rv += 1;
        let rv = inner.rv;
        set_rv(&mut obj, rv);
        let obj = Arc::new(obj);
        self.record(
            inner,
            Change {
                rv,
                key: key.clone(),
                namespace,
                kind,
                object: obj.clone(),
                prev,
            },
        );
        obj
    }

    /// Commits a created or changed object and keeps it under `(namespace, name)`.
    fn commit_and_keep(
        &self,
        inner: &mut Inner,
        key: &ResKey,
        (namespace, name): (String, String),
        kind: EventType,
        obj: Value,
        prev: Option<Arc<Value>>,
    ) -> Arc<Value> {
        let obj = self.commit(inner, key, namespace.clone(), kind, obj, prev);
        inner
            .objects
            .entry(key.clone())
            .or_default()
            .insert((namespace, name), obj.clone());
        obj
    }

    fn record(&self, inner: &mut Inner, change: Change) {
        let change = Arc::new(change);
        inner.history.push_back(change.clone());
        while inner.history.len() > self.history_limit {
            inner.history.pop_front();
        }
        // No receivers is normal.
        let _ = self.tx.send(change);
        self.changed.notify_one();
    }

    /// Stores a new object; 409 AlreadyExists if the name is taken.
    pub fn create(&self, key: &ResKey, obj: Value) -> Result<Arc<Value>, ApiError> {
        let (ns, name) = names(&obj);
        let mut inner = self.inner.write();
        if inner
            .objects
            .get(key)
            .is_some_and(|o| o.contains_key(&(ns.clone(), name.clone())))
        {
            return Err(ApiError::already_exists(&key.group, &key.plural, &name));
        }
        Ok(self.commit_and_keep(&mut inner, key, (ns, name), EventType::Added, obj, None))
    }

    /// Replaces an object whose stored resourceVersion is `expected_rv`; 409 Conflict otherwise,
    /// 404 if it is gone.
    pub fn update(
        &self,
        key: &ResKey,
        obj: Value,
        expected_rv: u64,
    ) -> Result<Arc<Value>, ApiError> {
        let (ns, name) = names(&obj);
        let mut inner = self.inner.write();
        let current = inner
            .objects
            .get(key)
            .and_then(|o| o.get(&(ns.clone(), name.clone())))
            .ok_or_else(|| ApiError::not_found(&key.group, &key.plural, &name))?;
        if object_rv(current) != expected_rv {
            return Err(ApiError::conflict(&key.group, &key.plural, &name));
        }
        let prev = Some(current.clone());
        Ok(self.commit_and_keep(&mut inner, key, (ns, name), EventType::Modified, obj, prev))
    }

    /// Removes an object whose stored resourceVersion is `expected_rv` (any when `None`).
    pub fn remove(
        &self,
        key: &ResKey,
        namespace: &str,
        name: &str,
        expected_rv: Option<u64>,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.inner.write();
        let k = (namespace.to_string(), name.to_string());
        let current = inner
            .objects
            .get(key)
            .and_then(|o| o.get(&k))
            .ok_or_else(|| ApiError::not_found(&key.group, &key.plural, name))?;
        if expected_rv.is_some_and(|rv| rv != object_rv(current)) {
            return Err(ApiError::conflict(&key.group, &key.plural, name));
        }
        let obj = (**current).clone();
        if let Some(o) = inner.objects.get_mut(key) {
            o.remove(&k);
        }
        Ok(self.commit(
            &mut inner,
            key,
            namespace.to_string(),
            EventType::Deleted,
            obj,
            None,
        ))
    }

    /// Drops every recorded change: watches can resume only from the current version on.
    pub fn compact(&self) {
        self.inner.write().history.clear();
    }

    /// Changes after `rv` from history plus a receiver of later ones, atomically.
    pub fn watch_from(&self, rv: u64) -> WatchStart {
        let inner = self.inner.read();
        let oldest_kept = inner.history.front().map(|c| c.rv).unwrap_or(inner.rv + 1);
        // History covers (oldest_kept - 1, current]; anything older is gone.
        if rv + 1 < oldest_kept && rv < inner.rv {
            return WatchStart::Expired(oldest_kept.saturating_sub(1));
        }
        let events: Vec<Arc<Change>> = inner
            .history
            .iter()
            .filter(|c| c.rv > rv)
            .cloned()
            .collect();
        WatchStart::Resumed(events, self.tx.subscribe())
    }

    /// A receiver of live changes, with the snapshot of a resource it starts after.
    pub fn list_and_subscribe(
        &self,
        key: &ResKey,
        namespace: Option<&str>,
    ) -> (Vec<Arc<Value>>, u64, broadcast::Receiver<Arc<Change>>) {
        let inner = self.inner.read();
        let rx = self.tx.subscribe();
        let items = match inner.objects.get(key) {
            None => Vec::new(),
            Some(objs) => objs
                .iter()
                .filter(|((n, _), _)| namespace.is_none_or(|ns| ns == n))
                .map(|(_, v)| v.clone())
                .collect(),
        };
        (items, inner.rv, rx)
    }
}

/// Namespace (empty when cluster-scoped) and name of an object.
pub fn names(obj: &Value) -> (String, String) {
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    (ns, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}})
    }

    #[test]
    fn every_write_gets_a_higher_resource_version() {
        let store = Store::new(Registry::with_builtins(), 10);
        let key = ResKey::new("", "configmaps");
        let a = store.create(&key, cm("a")).unwrap();
        let b = store.update(&key, cm("a"), object_rv(&a)).unwrap();
        assert!(object_rv(&b) > object_rv(&a));
        assert_eq!(
            store.update(&key, cm("a"), object_rv(&a)).unwrap_err().code,
            409
        );
        assert_eq!(
            store.create(&key, cm("a")).unwrap_err().reason,
            "AlreadyExists"
        );
    }

    #[test]
    fn watch_from_a_version_older_than_history_is_expired() {
        let store = Store::new(Registry::with_builtins(), 3);
        let key = ResKey::new("", "configmaps");
        let first = store.create(&key, cm("a")).unwrap();
        for i in 0..5 {
            store.create(&key, cm(&format!("b{i}"))).unwrap();
        }
        assert!(matches!(
            store.watch_from(object_rv(&first)),
            WatchStart::Expired(_)
        ));
        let now = store.current_rv();
        match store.watch_from(now - 2) {
            WatchStart::Resumed(events, _) => assert_eq!(events.len(), 2),
            WatchStart::Expired(_) => panic!("recent version must resume"),
        }
    }
}
