//! Records what a watch sees, with the instant each change arrived, so scenarios can assert on
//! order ("the configuration appeared only after the Deployment was available") and count
//! transitions ("registered once, not a storm").

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::wait::{self, Check};

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// It appeared (or was there when the watch started).
    Added,
    Modified,
    /// It went away.
    Deleted,
}

/// One recorded change.
#[derive(Clone, Debug)]
pub struct Seen<K> {
    /// When the harness received it.
    pub at: Instant,
    pub change: Change,
    pub name: String,
    /// The object as received.
    pub object: K,
}

type Filter<K> = Arc<dyn Fn(&K) -> bool + Send + Sync>;

/// What a [`Recorder`] can watch: any Kubernetes object a watch can hand to another task.
pub trait Recordable: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static {}

impl<K> Recordable for K where K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{}

/// A background watch that records every change of the objects that pass its filter.
pub struct Recorder<K> {
    seen: Arc<Mutex<Vec<Seen<K>>>>,
    errors: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl<K: Recordable> Recorder<K> {
    /// Starts watching `api` (with `config`) and recording objects for which `filter` is true.
    pub fn start(
        api: Api<K>,
        config: watcher::Config,
        filter: impl Fn(&K) -> bool + Send + Sync + 'static,
    ) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let filter: Filter<K> = Arc::new(filter);
        let task = tokio::spawn(record(api, config, filter, seen.clone(), errors.clone()));
        Self { seen, errors, task }
    }

    /// Everything recorded so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen<K>> {
        self.seen
            .lock()
            .map(|seen| seen.clone())
            .unwrap_or_default()
    }

    /// Watch errors so far (the watcher retries; these explain gaps).
    pub fn errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .map(|errors| errors.clone())
            .unwrap_or_default()
    }

    /// The first recorded change at or after `after` that satisfies `pred`.
    pub fn first_after(&self, after: Instant, pred: impl Fn(&Seen<K>) -> bool) -> Option<Seen<K>> {
        self.seen()
            .into_iter()
            .find(|seen| seen.at >= after && pred(seen))
    }

    /// Waits until a change at or after `after` satisfies `pred`, and returns it.
    pub async fn wait_for(
        &self,
        what: &str,
        after: Instant,
        timeout: Duration,
        pred: impl Fn(&Seen<K>) -> bool,
    ) -> anyhow::Result<Seen<K>> {
        wait::until(what, timeout, || {
            let found = self.first_after(after, &pred);
            let summary = self.summary();
            async move {
                Ok(match found {
                    Some(seen) => Check::Done(seen),
                    None => Check::Pending(summary),
                })
            }
        })
        .await
    }

    /// Waits until an object makes the `change` (appears, goes) at or after `after`, and returns
    /// that change.
    pub async fn wait_change(
        &self,
        what: &str,
        after: Instant,
        timeout: Duration,
        change: Change,
    ) -> anyhow::Result<Seen<K>> {
        self.wait_for(what, after, timeout, |seen| seen.change == change)
            .await
    }

    /// How many times an object appeared at or after `after` (registrations, for a webhook
    /// configuration).
    pub fn additions_since(&self, after: Instant) -> usize {
        self.seen()
            .iter()
            .filter(|seen| seen.at >= after && seen.change == Change::Added)
            .count()
    }

    /// How many times an object went away at or after `after`.
    pub fn deletions_since(&self, after: Instant) -> usize {
        self.seen()
            .iter()
            .filter(|seen| seen.at >= after && seen.change == Change::Deleted)
            .count()
    }

    /// A short account of what was recorded, for failure messages.
    pub fn summary(&self) -> String {
        let seen = self.seen();
        let Some(first) = seen.first() else {
            let errors = self.errors();
            return if errors.is_empty() {
                "no changes recorded".to_string()
            } else {
                format!("no changes recorded; watch errors: {}", errors.join("; "))
            };
        };
        let origin = first.at;
        let events: Vec<String> = seen
            .iter()
            .map(|s| {
                format!(
                    "+{:.2}s {:?} {}",
                    s.at.duration_since(origin).as_secs_f64(),
                    s.change,
                    s.name
                )
            })
            .collect();
        format!("changes: [{}]", events.join(", "))
    }

    /// Who wrote each recorded version, for failure messages that must say which writer
    /// brought an object back: its resourceVersion, UID, creation time and every field
    /// manager with its operation and time.
    pub fn provenance(&self) -> String {
        let lines: Vec<String> = self
            .seen()
            .iter()
            .map(|s| {
                let meta = s.object.meta();
                let managers: Vec<String> = meta
                    .managed_fields
                    .iter()
                    .flatten()
                    .map(|m| {
                        format!(
                            "{} {} at {}",
                            m.manager.as_deref().unwrap_or("?"),
                            m.operation.as_deref().unwrap_or("?"),
                            m.time.as_ref().map_or("?".into(), |t| t.0.to_string())
                        )
                    })
                    .collect();
                format!(
                    "{:?} {} rv {} uid {} created {} by [{}]",
                    s.change,
                    s.name,
                    meta.resource_version.as_deref().unwrap_or("?"),
                    meta.uid.as_deref().unwrap_or("?"),
                    meta.creation_timestamp
                        .as_ref()
                        .map_or("?".into(), |t| t.0.to_string()),
                    managers.join(", ")
                )
            })
            .collect();
        lines.join("; ")
    }
}

impl<K: Resource> Seen<K> {
    /// The object's resourceVersion as a number, when it is one.
    pub fn resource_version(&self) -> Option<u64> {
        self.object.meta().resource_version.as_deref()?.parse().ok()
    }

    /// Whether this change happened before `other` on the server: by resourceVersion when
    /// both are numbers (one counter on the sandbox, etcd's revision on a cluster), else by
    /// when the harness received them (two watch streams may deliver slightly out of order).
    pub fn before<O: Resource>(&self, other: &Seen<O>) -> bool {
        match (self.resource_version(), other.resource_version()) {
            (Some(mine), Some(theirs)) => mine < theirs,
            _ => self.at <= other.at,
        }
    }
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record<K>(
    api: Api<K>,
    config: watcher::Config,
    filter: Filter<K>,
    seen: Arc<Mutex<Vec<Seen<K>>>>,
    errors: Arc<Mutex<Vec<String>>>,
) where
    K: Recordable,
{
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut relisted: BTreeSet<String> = BTreeSet::new();
    let mut stream = watcher(api, config).boxed();
    while let Some(event) = stream.next().await {
        let at = Instant::now();
        let push = |change: Change, object: K| {
            if let Ok(mut seen) = seen.lock() {
                seen.push(Seen {
                    at,
                    change,
                    name: object.name_any(),
                    object,
                });
            }
        };
        match event {
            Ok(watcher::Event::Apply(object)) | Ok(watcher::Event::InitApply(object)) => {
                if !filter(&object) {
                    continue;
                }
                let name = object.name_any();
                relisted.insert(name.clone());
                let change = if known.insert(name) {
                    Change::Added
                } else {
                    Change::Modified
                };
                push(change, object);
            }
            Ok(watcher::Event::Delete(object)) => {
                if known.remove(&object.name_any()) {
                    push(Change::Deleted, object);
                }
            }
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitDone) => {
                // After a relist, whatever we knew and did not see again is gone; we no longer
                // have the object, so nothing is recorded but the bookkeeping.
                known.retain(|name| relisted.contains(name));
            }
            Err(err) => {
                if let Ok(mut errors) = errors.lock() {
                    errors.push(err.to_string());
                }
            }
        }
    }
}
