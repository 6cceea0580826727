//! Watch streams: the starting point (a list, or the history after a resourceVersion, or 410),
//! then changes filtered by namespace and selectors, bookmarks, the timeout and dropped watches.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::SinkExt;
use http::{HeaderValue, Response, header};
use serde_json::{Value, json};

use super::resource::{ResourcePath, list_options, partial_metadata};
use super::{AppState, error_response, truthy};
use crate::apiserver::{ApiServer, ListOptions, initialization};
use crate::error::ApiError;
use crate::event;
use crate::resource::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, EventType, ResKey, WatchStart};

struct WatchFilter {
    rt: ResourceType,
    key: ResKey,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    /// Legacy mode without `includeUninitialized`: objects still initializing are not seen,
    /// so one appears (`ADDED`) when its initialization completes.
    hide_uninitialized: bool,
}

impl WatchFilter {
    fn matches(&self, obj: &Value) -> bool {
        if self.hide_uninitialized && !initialization::is_initialized(obj) {
            return false;
        }
        if !self.labels.matches(obj.pointer("/metadata/labels")) {
            return false;
        }
        // Field selectors name the fields of the version watched.
        if event::is_converted(&self.rt) {
            self.fields.matches(&ApiServer::served(&self.rt, obj))
        } else {
            self.fields.matches(obj)
        }
    }

    fn event(&self, c: &Change) -> Option<(&'static str, Arc<Value>)> {
        if c.key != self.key
            || self
                .namespace
                .as_deref()
                .is_some_and(|ns| ns != c.namespace)
        {
            return None;
        }
        let now = self.matches(&c.object);
        match c.kind {
            EventType::Added => now.then(|| ("ADDED", c.object.clone())),
            EventType::Deleted => now.then(|| ("DELETED", c.object.clone())),
            EventType::Modified => {
                let before = c.prev.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some(("MODIFIED", c.object.clone())),
                    (false, true) => Some(("ADDED", c.object.clone())),
                    (true, false) => Some(("DELETED", c.object.clone())),
                    (false, false) => None,
                }
            }
        }
    }
}

fn shape_out(rt: &ResourceType, obj: &Value, metadata_only: bool) -> Value {
    if metadata_only {
        partial_metadata(obj)
    } else {
        ApiServer::served(rt, obj)
    }
}

fn event_line(kind: &str, obj: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": obj}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn bookmark(rt: &ResourceType, rv: u64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": md}),
    )
}

pub(super) fn watch_response(
    state: &AppState,
    t: &ResourcePath,
    q: &HashMap<String, String>,
    metadata_only: bool,
) -> Response<Body> {
    let api = state.api.clone();
    let ListOptions {
        labels,
        fields,
        include_uninitialized,
        ..
    } = match list_options(q) {
        Ok(o) => o,
        Err(e) => return error_response(&e),
    };
    let rt = t.rt.clone();
    let filter = WatchFilter {
        rt: rt.clone(),
        key: ApiServer::key(&rt),
        namespace: if rt.namespaced {
            t.namespace.clone()
        } else {
            None
        },
        labels,
        fields,
        hide_uninitialized: api.legacy_initializers() && !include_uninitialized,
    };
    let bookmarks = truthy(q, "allowWatchBookmarks");
    let send_initial = truthy(q, "sendInitialEvents");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1800);
    let rv_param = q.get("resourceVersion").cloned().unwrap_or_default();
    let interval = state.bookmark_interval;
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(256);
    let mut dropper = api.faults.watch_dropper();
    dropper.mark_unchanged();

    // Decide the starting point now, so the stream is consistent with the request's moment.
    let mut initial: Vec<Bytes> = Vec::new();
    let mut last_rv;
    let mut live;
    if rv_param.is_empty() || rv_param == "0" || send_initial {
        let (items, rv, rx) = api
            .store
            .list_and_subscribe(&filter.key, filter.namespace.as_deref());
        for obj in items.iter().filter(|o| filter.matches(o)) {
            initial.push(event_line("ADDED", &shape_out(&rt, obj, metadata_only)));
        }
        if send_initial && bookmarks {
            initial.push(bookmark(&rt, rv, true));
        }
        last_rv = rv;
        live = rx;
    } else {
        let Ok(from) = rv_param.parse::<u64>() else {
            return error_response(&ApiError::bad_request(format!(
                "invalid resource version: {rv_param}"
            )));
        };
        match api.store.watch_from(from) {
            WatchStart::Expired(oldest) => {
                let status =
                    ApiError::expired(format!("too old resource version: {from} ({oldest})"))
                        .to_status();
                let mut resp = Response::new(Body::from(event_line("ERROR", &status)));
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                return resp;
            }
            WatchStart::Resumed(events, rx) => {
                last_rv = from;
                for c in events {
                    if let Some((kind, obj)) = filter.event(&c) {
                        initial.push(event_line(kind, &shape_out(&rt, &obj, metadata_only)));
                    }
                    last_rv = c.rv;
                }
                live = rx;
            }
        }
    }
    tokio::spawn(async move {
        for line in initial {
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(interval);
        tick.tick().await;
        loop {
            tokio::select! {
                msg = live.recv() => match msg {
                    Ok(c) => {
                        if c.rv <= last_rv {
                            continue;
                        }
                        last_rv = c.rv;
                        if let Some((kind, obj)) = filter.event(&c)
                            && tx.send(Ok(event_line(kind, &shape_out(&rt, &obj, metadata_only)))).await.is_err()
                        {
                            return;
                        }
                    }
                    // A watcher that fell behind is closed; it resumes from its last version.
                    Err(_) => return,
                },
                _ = &mut deadline => {
                    if bookmarks {
                        let _ = tx.send(Ok(bookmark(&rt, last_rv, false))).await;
                    }
                    return;
                }
                _ = tick.tick() => {
                    if tx.is_closed() {
                        return;
                    }
                    if bookmarks && tx.send(Ok(bookmark(&rt, last_rv, false))).await.is_err() {
                        return;
                    }
                }
                _ = dropper.changed() => return,
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(rx));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    resp
}
