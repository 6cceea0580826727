//! The controller mode: the same handlers run as a Kubernetes 1.7–1.13 initializer controller
//! (`InitializerConfiguration`, `admissionregistration.k8s.io/v1alpha1`) instead of a webhook.
//!
//! For every registered kind the rules match, the controller lists and watches cluster-wide with
//! `includeUninitialized=true` (the objects whose `metadata.initializers.pending` is not empty
//! are hidden otherwise), and for each object whose `pending[0].name` is its `--pending-name`
//! runs the handler under the same budget, panic safety, gate, mark and metrics as the webhook,
//! then writes ONE update with the `resourceVersion` it read: the handler's mutation and the
//! name's removal together, or a failure `result` for a refusal. A 409 is redone from a fresh
//! read. Namespaces are watched too when a namespace selector is set. What to do is decided by
//! the pure functions of [`decide`]; this module only reads and writes.
//!
//! The mechanism is the one of Kubernetes 1.7–1.13: the `Initializers` admission plugin
//! (`staging/src/k8s.io/apiserver/pkg/admission/plugin/initialization/initialization.go`)
//! appends the names on create and lets only holders of the `initialize` verb update an
//! uninitialized object; `Store.WaitForInitialized`
//! (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`) holds the create
//! until `pending` is empty, or deletes the object and answers the `result`.

pub(crate) mod decide;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::WatchEvent;
use kube::core::{GroupVersionKind, GroupVersionResource};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use self::decide::{AfterWrite, InitializerRule, Plan, Scope, Written};
use crate::error::Error;
use crate::initializer::Initializer;
use crate::mark::Stamp;
use crate::metrics::MODE_CONTROLLER;
use crate::review::{Operation, RequestInfo};

pub use self::decide::InitializerRule as Rule;

/// How an initializer process runs its handlers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// A mutating admission webhook: the API server calls `/initialize` (the default).
    #[default]
    Webhook,
    /// A 1.7-style initializer controller: list and watch with `includeUninitialized=true`,
    /// act when `--pending-name` is first in `metadata.initializers.pending`.
    Controller,
}

/// The `--rules` of the controller mode: the `InitializerConfiguration`'s rules as JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules(pub Vec<InitializerRule>);

/// Parse `--rules`: a JSON array of `{"apiGroups":[..],"apiVersions":[..],"resources":[..]}`.
pub(crate) fn parse_rules(text: &str) -> Result<Rules, String> {
    serde_json::from_str(text).map(Rules).map_err(|e| {
        format!("expected a JSON array of rules (apiGroups, apiVersions, resources): {e}")
    })
}

/// Parse a `--namespace-selector` or `--object-selector`: a meta/v1 `LabelSelector` as JSON.
pub(crate) fn parse_selector(text: &str) -> Result<LabelSelector, String> {
    let selector: LabelSelector = serde_json::from_str(text).map_err(|e| {
        format!("expected a JSON LabelSelector (matchLabels, matchExpressions): {e}")
    })?;
    kube::core::Selector::try_from(selector.clone())
        .map_err(|e| format!("invalid label selector: {e}"))?;
    Ok(selector)
}

/// What the controller mode needs besides the initializer: from [`ServeArgs`](crate::ServeArgs).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) pending_name: String,
    pub(crate) rules: Option<Vec<InitializerRule>>,
    pub(crate) scope: Scope,
}

/// Counts the watches that have not listed yet: the controller is ready once every one has.
#[derive(Debug, Default)]
pub(crate) struct Synced {
    remaining: AtomicUsize,
}

impl Synced {
    fn expect(&self, watches: usize) {
        self.remaining.store(watches, Ordering::Release);
    }

    fn listed_once(&self) {
        // Each watch calls this once; saturate rather than wrap should a caller miscount.
        let _ = self
            .remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// True once every watch has listed once.
    pub(crate) fn is_synced(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }
}

/// A kind the controller watches.
#[derive(Clone, Debug)]
struct Watched {
    gvk: GroupVersionKind,
    plural: String,
}

impl Watched {
    fn api_prefix(&self) -> String {
        match self.gvk.group.as_str() {
            "" => format!("/api/{}", self.gvk.version),
            group => format!("/apis/{group}/{}", self.gvk.version),
        }
    }

    /// The cluster-wide collection.
    fn collection(&self) -> String {
        format!("{}/{}", self.api_prefix(), self.plural)
    }

    /// One object's path.
    fn object(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) => format!(
                "{}/namespaces/{ns}/{}/{name}",
                self.api_prefix(),
                self.plural
            ),
            None => format!("{}/{}/{name}", self.api_prefix(), self.plural),
        }
    }

    fn api_version(&self) -> String {
        match self.gvk.group.as_str() {
            "" => self.gvk.version.clone(),
            group => format!("{group}/{}", self.gvk.version),
        }
    }
}

/// How often a watch is replaced by a fresh list, so that an object whose processing was given
/// up is picked up again.
const RESYNC: Duration = Duration::from_secs(300);
/// Most objects processed at once (each runs one handler under the budget).
const MAX_CONCURRENT: usize = 64;
/// Time for one API request other than a watch.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Objects remembered as processed (uid → resourceVersion acted on); forgotten beyond it.
const MAX_SEEN: usize = 100_000;

/// The controller: the initializer's handlers, a client, and what it remembers.
pub(crate) struct Controller<C> {
    initializer: Arc<Initializer<C>>,
    client: kube::Client,
    settings: Settings,
    kinds: Vec<Watched>,
    synced: Arc<Synced>,
    namespaces: Mutex<HashMap<String, BTreeMap<String, String>>>,
    seen: Mutex<HashMap<String, String>>,
    in_flight: Mutex<HashSet<String>>,
    permits: Semaphore,
}

/// A change a watch reports.
enum Change {
    Listed(Vec<Value>),
    Applied(Value),
    Deleted(Value),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

fn api_code(e: &Error) -> Option<u16> {
    match e {
        Error::Kube(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

impl<C: DeserializeOwned + Send + Sync + 'static> Controller<C> {
    /// A controller for the kinds of `initializer` that `settings.rules` match.
    pub(crate) fn new(
        initializer: Arc<Initializer<C>>,
        client: kube::Client,
        settings: Settings,
    ) -> Self {
        let kinds: Vec<Watched> = initializer
            .resources()
            .filter(|(gvk, plural)| {
                decide::watched(settings.rules.as_deref(), &gvk.group, &gvk.version, plural)
            })
            .map(|(gvk, plural)| Watched {
                gvk: gvk.clone(),
                plural: plural.to_owned(),
            })
            .collect();
        let synced = Arc::new(Synced::default());
        let namespace_watch = usize::from(settings.scope.namespace_selector.is_some());
        synced.expect(kinds.len() + namespace_watch);
        Self {
            initializer,
            client,
            settings,
            kinds,
            synced,
            namespaces: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashSet::new()),
            permits: Semaphore::new(MAX_CONCURRENT),
        }
    }

    /// The readiness of the watches, for `/readyz`.
    pub(crate) fn synced(&self) -> Arc<Synced> {
        Arc::clone(&self.synced)
    }

    /// Watch and act until `stop`; in-flight handler runs are abandoned at `stop` (the object
    /// stays pending for another replica, or for this one after a restart).
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        // Until the configuration is loaded every handler run would fail; wait for it rather
        // than let the failure policy answer for objects.
        while !self.initializer.config_loaded() {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        let kinds: Vec<String> = self.kinds.iter().map(Watched::collection).collect();
        tracing::info!(
            pending_name = %self.settings.pending_name,
            ?kinds,
            namespace_selector = ?self.settings.scope.namespace_selector,
            object_selector = ?self.settings.scope.object_selector,
            "controller mode: watching uninitialized objects"
        );
        if self.kinds.is_empty() {
            tracing::warn!("controller mode: the rules match none of the registered kinds");
        }
        let mut tasks = tokio::task::JoinSet::new();
        if self.settings.scope.namespace_selector.is_some() {
            let me = Arc::clone(&self);
            let stop = stop.clone();
            tasks.spawn(async move { me.watch_namespaces(stop).await });
        }
        for kind in self.kinds.clone() {
            let me = Arc::clone(&self);
            let stop = stop.clone();
            tasks.spawn(async move { me.watch_kind(kind, stop).await });
        }
        stop.cancelled().await;
        tasks.shutdown().await;
    }

    async fn watch_namespaces(self: Arc<Self>, stop: CancellationToken) {
        let me = Arc::clone(&self);
        let sink = move |change: Change| {
            let mut cache = lock(&me.namespaces);
            match change {
                Change::Listed(items) => {
                    cache.clear();
                    for ns in items {
                        if let Some(name) = text(&ns, "/metadata/name") {
                            cache.insert(name.to_owned(), decide::namespace_labels(&ns));
                        }
                    }
                }
                Change::Applied(ns) => {
                    if let Some(name) = text(&ns, "/metadata/name") {
                        cache.insert(name.to_owned(), decide::namespace_labels(&ns));
                    }
                }
                Change::Deleted(ns) => {
                    if let Some(name) = text(&ns, "/metadata/name") {
                        cache.remove(name);
                    }
                }
            }
        };
        let namespaces = Watched {
            gvk: GroupVersionKind::gvk("", "v1", "Namespace"),
            plural: "namespaces".into(),
        };
        self.reflect(&namespaces, false, stop, sink).await;
    }

    async fn watch_kind(self: Arc<Self>, kind: Watched, stop: CancellationToken) {
        let me = Arc::clone(&self);
        let watched = kind.clone();
        let child = stop.clone();
        let sink = move |change: Change| match change {
            Change::Listed(items) => {
                for object in items {
                    Arc::clone(&me).consider(&watched, object, &child);
                }
            }
            Change::Applied(object) => Arc::clone(&me).consider(&watched, object, &child),
            Change::Deleted(object) => {
                if let Some(uid) = text(&object, "/metadata/uid") {
                    lock(&me.seen).remove(uid);
                }
            }
        };
        self.reflect(&kind, true, stop, sink).await;
    }

    /// Start processing `object` if it is this initializer's turn and nobody processes it yet.
    fn consider(self: Arc<Self>, kind: &Watched, object: Value, stop: &CancellationToken) {
        if decide::turn(&object, &self.settings.pending_name) != decide::Turn::Mine {
            return;
        }
        let Some(uid) = text(&object, "/metadata/uid").map(str::to_owned) else {
            return;
        };
        if !lock(&self.in_flight).insert(uid.clone()) {
            // Being processed: a conflict makes that run read this newer version.
            return;
        }
        let kind = kind.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = self.process(&kind, object) => {}
            }
            lock(&self.in_flight).remove(&uid);
        });
    }

    fn seen(&self, object: &Value) -> bool {
        match (
            text(object, "/metadata/uid"),
            text(object, "/metadata/resourceVersion"),
        ) {
            (Some(uid), Some(rv)) => lock(&self.seen).get(uid).is_some_and(|seen| seen == rv),
            _ => false,
        }
    }

    fn remember(&self, object: &Value) {
        if let (Some(uid), Some(rv)) = (
            text(object, "/metadata/uid"),
            text(object, "/metadata/resourceVersion"),
        ) {
            let mut seen = lock(&self.seen);
            if seen.len() >= MAX_SEEN {
                seen.clear();
            }
            seen.insert(uid.to_owned(), rv.to_owned());
        }
    }

    /// The labels of `namespace` for the namespace selector: from the watch's cache, else read.
    async fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, Error> {
        if self.settings.scope.namespace_selector.is_none() {
            return Ok(decide::labels_of_unknown_namespace(namespace));
        }
        if let Some(labels) = lock(&self.namespaces).get(namespace) {
            return Ok(labels.clone());
        }
        // Created a moment ago and not yet seen by the watch.
        match self.get(&format!("/api/v1/namespaces/{namespace}")).await {
            Ok(ns) => Ok(decide::namespace_labels(&ns)),
            Err(e) if api_code(&e) == Some(404) => {
                Ok(decide::labels_of_unknown_namespace(namespace))
            }
            Err(e) => Err(e),
        }
    }

    /// Decide, run the handler if needed, write once; redo from a fresh read after a conflict.
    async fn process(&self, kind: &Watched, mut object: Value) {
        let Ok(_permit) = self.permits.acquire().await else {
            return;
        };
        let name = text(&object, "/metadata/name")
            .unwrap_or_default()
            .to_owned();
        let namespace = text(&object, "/metadata/namespace").map(str::to_owned);
        let path = kind.object(namespace.as_deref(), &name);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let failure = match self
                .attempt(kind, &object, namespace.as_deref(), &path)
                .await
            {
                Ok(()) => return,
                Err(e) => e,
            };
            let code = api_code(&failure);
            if code == Some(409) {
                self.initializer.metrics.observe_conflict();
            }
            match decide::after_failed_write(code, attempt) {
                AfterWrite::Gone => return,
                AfterWrite::GiveUp => {
                    tracing::warn!(%path, error = %failure, attempt, "controller mode: gave up on the object until the next relist");
                    self.initializer
                        .metrics
                        .observe_update(&kind.gvk.kind, "gave_up");
                    return;
                }
                AfterWrite::Redo { backoff_ms } => {
                    tracing::debug!(%path, error = %failure, attempt, "controller mode: redoing from a fresh read");
                    tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                    match self.get(&format!("{path}?includeUninitialized=true")).await {
                        Ok(fresh) => object = with_type(fresh, kind),
                        Err(e) if api_code(&e) == Some(404) => return,
                        Err(e) => {
                            tracing::debug!(%path, error = %e, "controller mode: failed to read the object again");
                        }
                    }
                }
            }
        }
    }

    /// One decision and at most one write.
    async fn attempt(
        &self,
        kind: &Watched,
        object: &Value,
        namespace: Option<&str>,
        path: &str,
    ) -> Result<(), Error> {
        let namespace_labels = match namespace {
            Some(ns) => Some(self.namespace_labels(ns).await?),
            None => None,
        };
        let plan = decide::plan(
            object,
            &self.settings.pending_name,
            self.seen(object),
            &self.settings.scope,
            namespace_labels.as_ref(),
        );
        let (body, written) = match plan {
            Plan::Leave => return Ok(()),
            Plan::Release => {
                tracing::debug!(%path, "controller mode: out of scope, removing the name without running the handler");
                (
                    decide::without_name(object.clone(), &self.settings.pending_name),
                    Written::Released,
                )
            }
            Plan::Run => {
                let response = self.run_handler(kind, object).await;
                decide::write_for(
                    object,
                    &self.settings.pending_name,
                    &response,
                    self.initializer.fails_closed(),
                )
            }
        };
        self.put(path, &body).await?;
        self.remember(object);
        self.initializer
            .metrics
            .observe_update(&kind.gvk.kind, written.as_str());
        tracing::info!(%path, result = written.as_str(), "controller mode: object written");
        Ok(())
    }

    /// The handler's answer for `object`, as the webhook would answer its CREATE review.
    async fn run_handler(&self, kind: &Watched, object: &Value) -> crate::review::Response {
        let info = RequestInfo {
            uid: format!(
                "controller/{}/{}",
                text(object, "/metadata/uid").unwrap_or_default(),
                text(object, "/metadata/resourceVersion").unwrap_or_default()
            ),
            kind: kind.gvk.clone(),
            resource: GroupVersionResource::gvr(&kind.gvk.group, &kind.gvk.version, &kind.plural),
            sub_resource: None,
            name: text(object, "/metadata/name")
                .unwrap_or_default()
                .to_owned(),
            namespace: text(object, "/metadata/namespace").map(str::to_owned),
            operation: Operation::Create,
            user_info: Default::default(),
            dry_run: false,
        };
        let start = Instant::now();
        let response = match serde_json::value::to_raw_value(object) {
            // The object is stored: its creation time is the API server's, so the mark is
            // stamped with it, however long it waited for its turn.
            Ok(raw) => {
                let stamp = Stamp::Created {
                    fallback: crate::mark::now(),
                };
                self.initializer.answer(info, Some(raw), None, stamp).await
            }
            // A `Value` always serializes; answer as for an undecodable object should it not.
            Err(e) => self.initializer.failed(
                info.uid,
                format!("failed to encode the {}: {e}", kind.gvk.kind),
            ),
        };
        let patch_len = response.patch_json().map_or(0, |p| p.len());
        self.initializer.metrics.observe(
            &kind.gvk.kind,
            response.verdict,
            start.elapsed(),
            patch_len,
            MODE_CONTROLLER,
        );
        response
    }

    async fn get(&self, path: &str) -> Result<Value, Error> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| Error::Kube(kube::Error::HttpError(e)))?;
        self.send(request).await
    }

    async fn put(&self, path: &str, body: &Value) -> Result<Value, Error> {
        let request = http::Request::put(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string().into_bytes())
            .map_err(|e| Error::Kube(kube::Error::HttpError(e)))?;
        self.send(request).await
    }

    async fn send(&self, request: http::Request<Vec<u8>>) -> Result<Value, Error> {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.client.request::<Value>(request)).await {
            Ok(answer) => answer.map_err(Error::Kube),
            Err(_) => Err(Error::ApiTimeout(REQUEST_TIMEOUT)),
        }
    }

    /// List (every page), then watch from the list's resourceVersion; relist on 410 Gone, on a
    /// failed watch and every [`RESYNC`]. Reports each change to `sink` and marks the kind
    /// listed after its first list.
    async fn reflect(
        &self,
        kind: &Watched,
        include_uninitialized: bool,
        stop: CancellationToken,
        sink: impl Fn(Change),
    ) {
        let uninitialized = if include_uninitialized {
            "&includeUninitialized=true"
        } else {
            ""
        };
        let collection = kind.collection();
        let mut listed_once = false;
        let mut failures: u32 = 0;
        'relist: loop {
            if failures > 0 {
                let pause = Duration::from_millis((250u64 << failures.min(5)).min(5_000));
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(pause) => {}
                }
            }
            let listed = tokio::select! {
                () = stop.cancelled() => return,
                listed = self.list(kind, &collection, uninitialized) => listed,
            };
            let (items, mut version) = match listed {
                Ok(listed) => listed,
                Err(e) => {
                    failures += 1;
                    tracing::warn!(%collection, error = %e, "controller mode: list failed");
                    continue 'relist;
                }
            };
            sink(Change::Listed(items));
            if !listed_once {
                listed_once = true;
                self.synced.listed_once();
            }
            let since_list = Instant::now();
            loop {
                if since_list.elapsed() >= RESYNC {
                    failures = 0;
                    continue 'relist;
                }
                let uri = format!(
                    "{collection}?watch=true&allowWatchBookmarks=true&timeoutSeconds=240&resourceVersion={version}{uninitialized}"
                );
                let request = match http::Request::get(&uri).body(Vec::new()) {
                    Ok(request) => request,
                    Err(e) => {
                        tracing::error!(%uri, error = %e, "controller mode: failed to build the watch request");
                        return;
                    }
                };
                let stream = match self.client.request_events::<Value>(request).await {
                    Ok(stream) => stream,
                    Err(e) => {
                        failures += 1;
                        tracing::warn!(%collection, error = %e, "controller mode: watch failed");
                        continue 'relist;
                    }
                };
                let mut stream = std::pin::pin!(stream);
                loop {
                    let next = tokio::select! {
                        () = stop.cancelled() => return,
                        next = stream.next() => next,
                    };
                    match next {
                        // The server closed the watch (its timeout): watch again from here.
                        None => break,
                        Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                            failures = 0;
                            let o = with_type(o, kind);
                            if let Some(rv) = text(&o, "/metadata/resourceVersion") {
                                version = rv.to_owned();
                            }
                            sink(Change::Applied(o));
                        }
                        Some(Ok(WatchEvent::Deleted(o))) => {
                            if let Some(rv) = text(&o, "/metadata/resourceVersion") {
                                version = rv.to_owned();
                            }
                            sink(Change::Deleted(o));
                        }
                        Some(Ok(WatchEvent::Bookmark(b))) => {
                            version = b.metadata.resource_version;
                        }
                        Some(Ok(WatchEvent::Error(status))) => {
                            if status.code != 410 {
                                failures += 1;
                                tracing::warn!(%collection, code = status.code, message = %status.message, "controller mode: watch error");
                            }
                            continue 'relist;
                        }
                        Some(Err(kube::Error::Api(status))) if status.code == 410 => {
                            continue 'relist;
                        }
                        Some(Err(e)) => {
                            tracing::debug!(%collection, error = %e, "controller mode: watch stream ended");
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Every page of `collection`, each item with its apiVersion and kind (lists omit them),
    /// and the list's resourceVersion.
    async fn list(
        &self,
        kind: &Watched,
        collection: &str,
        uninitialized: &str,
    ) -> Result<(Vec<Value>, String), Error> {
        let mut items = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut uri = format!("{collection}?limit=500{uninitialized}");
            if let Some(token) = &next {
                uri.push_str("&continue=");
                uri.push_str(&percent_encode(token));
            }
            let mut page = self.get(&uri).await?;
            let version = text(&page, "/metadata/resourceVersion")
                .unwrap_or_default()
                .to_owned();
            next = text(&page, "/metadata/continue")
                .filter(|c| !c.is_empty())
                .map(str::to_owned);
            if let Some(Value::Array(page_items)) = page.get_mut("items").map(Value::take) {
                items.extend(page_items.into_iter().map(|o| with_type(o, kind)));
            }
            if next.is_none() {
                return Ok((items, version));
            }
        }
    }
}

/// The object with `apiVersion` and `kind` set (list items and some watch events lack them, and
/// the update must carry them).
fn with_type(mut object: Value, kind: &Watched) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(kind.api_version()));
        map.entry("kind")
            .or_insert_with(|| Value::String(kind.gvk.kind.clone()));
    }
    object
}

/// A continue token as a query value (tokens are base64: `+`, `/` and `=` need escaping).
fn percent_encode(token: &str) -> String {
    token
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployments() -> Watched {
        Watched {
            gvk: GroupVersionKind::gvk("apps", "v1", "Deployment"),
            plural: "deployments".into(),
        }
    }

    #[test]
    fn paths_follow_group_version_and_namespace() {
        let d = deployments();
        assert_eq!(d.collection(), "/apis/apps/v1/deployments");
        assert_eq!(
            d.object(Some("default"), "nginx"),
            "/apis/apps/v1/namespaces/default/deployments/nginx"
        );
        let pods = Watched {
            gvk: GroupVersionKind::gvk("", "v1", "Pod"),
            plural: "pods".into(),
        };
        assert_eq!(pods.collection(), "/api/v1/pods");
        assert_eq!(pods.api_version(), "v1");
        let ns = Watched {
            gvk: GroupVersionKind::gvk("", "v1", "Namespace"),
            plural: "namespaces".into(),
        };
        assert_eq!(ns.object(None, "team-a"), "/api/v1/namespaces/team-a");
    }

    #[test]
    fn list_items_get_their_type() {
        let typed = with_type(
            serde_json::json!({"metadata": {"name": "x"}}),
            &deployments(),
        );
        assert_eq!(typed["apiVersion"], "apps/v1");
        assert_eq!(typed["kind"], "Deployment");
    }

    #[test]
    fn continue_tokens_are_escaped() {
        assert_eq!(percent_encode("eyJ2Ijo+/=="), "eyJ2Ijo%2B%2F%3D%3D");
    }

    #[test]
    fn flags_parse_rules_and_selectors() {
        let rules = parse_rules(
            r#"[{"apiGroups":["apps"],"apiVersions":["v1"],"resources":["deployments"]}]"#,
        )
        .unwrap();
        assert_eq!(rules.0.len(), 1);
        assert!(
            parse_rules("{")
                .unwrap_err()
                .contains("JSON array of rules")
        );
        let selector = parse_selector(r#"{"matchLabels":{"team":"a"}}"#).unwrap();
        assert_eq!(selector.match_labels.unwrap()["team"], "a");
        assert!(
            parse_selector(r#"{"matchExpressions":[{"key":"a","operator":"Sometimes"}]}"#)
                .unwrap_err()
                .contains("invalid label selector")
        );
    }

    #[test]
    fn readiness_waits_for_every_watch() {
        let synced = Synced::default();
        synced.expect(2);
        assert!(!synced.is_synced());
        synced.listed_once();
        assert!(!synced.is_synced());
        synced.listed_once();
        assert!(synced.is_synced());
        synced.listed_once();
        assert!(synced.is_synced());
    }
}
