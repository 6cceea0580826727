//! The HTTP face of the API server: URL parsing, content negotiation, watch streams, discovery,
//! the service proxy route and the sandbox's own control endpoints under `/sandbox/v1`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::SinkExt;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::apiserver::{ApiServer, DeleteOptions, ListOptions, WriteOptions, Written};
use crate::discovery;
use crate::error::ApiError;
use crate::event;
use crate::faults::{self, FaultAction, FaultRule, RequestInfo};
use crate::patch::PatchKind;
use crate::resource::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, EventType, ResKey, WatchStart};
use crate::table;
use crate::workload::WorkloadHandle;

/// Shared state of the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    /// The API server.
    pub api: Arc<ApiServer>,
    /// The workload controllers, once started (pod freeze/thaw/kill).
    pub workloads: Arc<OnceLock<WorkloadHandle>>,
    /// How often watches with bookmarks get one.
    pub bookmark_interval: Duration,
    /// The state directory (pods' logs are under `logs/`).
    pub state_dir: std::path::PathBuf,
}

/// `GET pods/NAME/log`: the container's log file, whole or its last `tailLines` lines.
/// `follow` is not supported: the current content is returned.
fn pod_log(state: &AppState, t: &Target, q: &HashMap<String, String>) -> Response<Body> {
    let ns = t.namespace.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let pod = match state.api.get(&t.rt, Some(&ns), &name) {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let container = match q.get("container") {
        Some(c) => c.clone(),
        None => pod
            .pointer("/spec/containers/0/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    };
    let path = state
        .state_dir
        .join("logs")
        .join(format!("{ns}_{name}"))
        .join(format!("{container}.log"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let text = match q.get("tailLines").and_then(|n| n.parse::<usize>().ok()) {
        Some(n) => {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            let mut out = lines[start..].join("\n");
            if !out.is_empty() {
                out.push('\n');
            }
            out
        }
        None => text,
    };
    let mut resp = Response::new(Body::from(text));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

/// The axum router serving everything.
pub fn router(state: AppState) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('"', "'"));
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.to_status(), &[])
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let Some(q) = q else { return HashMap::new() };
    serde_urlencoded::from_str::<Vec<(String, String)>>(q)
        .unwrap_or_default()
        .into_iter()
        .collect()
}

fn truthy(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

async fn handle(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: Request<Body>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query());
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let api = &state.api;
    let method = req.method().clone();
    match segs.as_slice() {
        ["version"] => json_response(200, &discovery::version(), &[]),
        ["healthz"] | ["readyz"] | ["livez"] => {
            let mut r = Response::new(Body::from("ok"));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            r
        }
        ["api"] => json_response(200, &discovery::core_versions(), &[]),
        ["apis"] => json_response(200, &discovery::group_list(&api.store.registry()), &[]),
        ["api", "v1"] => resource_list_response(api, "", "v1"),
        ["apis", group] => match discovery::group(&api.store.registry(), group) {
            Some(d) => json_response(200, &d, &[]),
            None => error_response(&ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )),
        },
        ["apis", group, version] => resource_list_response(api, group, version),
        ["openapi", "v2"] => {
            // Only JSON is served; a client asking for protobuf is told there is none.
            let proto = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.contains("protobuf"));
            if proto {
                error_response(&ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ))
            } else {
                json_response(200, &discovery::openapi_v2_empty(), &[])
            }
        }
        ["openapi", "v3"] => json_response(
            200,
            &discovery::openapi_v3_index(&api.store.registry()),
            &[],
        ),
        ["openapi", "v3", "api", "v1"] => {
            let doc = discovery::openapi_v3_group_version(&api.store.registry(), "", "v1");
            json_response(200, &doc, &[])
        }
        ["openapi", "v3", "apis", group, version] => {
            let doc = discovery::openapi_v3_group_version(&api.store.registry(), group, version);
            json_response(200, &doc, &[])
        }
        ["sandbox", "v1", rest @ ..] => {
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            sandbox_control(&state, &method, &rest, req).await
        }
        ["api", "v1", rest @ ..] => {
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            resource_request(&state, "", "v1", &rest, query, req).await
        }
        ["apis", group, version, rest @ ..] => {
            let (g, v) = (group.to_string(), version.to_string());
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            resource_request(&state, &g, &v, &rest, query, req).await
        }
        _ => error_response(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    }
}

fn resource_list_response(api: &ApiServer, group: &str, version: &str) -> Response<Body> {
    match discovery::resource_list(&api.store.registry(), group, version) {
        Some(d) => json_response(200, &d, &[]),
        None => error_response(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    }
}

/// A parsed resource URL.
#[derive(Debug)]
struct Target {
    rt: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    sub: String,
    /// Segments after `proxy` for the service proxy.
    proxy_rest: Option<String>,
}

fn parse_target(
    api: &ApiServer,
    group: &str,
    version: &str,
    segs: &[String],
) -> Result<Target, ApiError> {
    let not_found = || {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    // namespaces/{ns}/{resource}... when {resource} is a namespaced resource
    if let ["namespaces", ns, res, rest @ ..] = s.as_slice()
        && let Ok(rt) = api.resolve(group, version, res)
        && rt.namespaced
    {
        let name = rest.first().map(|n| n.to_string());
        let sub = rest.get(1).map(|x| x.to_string()).unwrap_or_default();
        let proxy_rest =
            (sub == "proxy").then(|| rest.get(2..).map(|r| r.join("/")).unwrap_or_default());
        if sub != "proxy" && rest.len() > 2 {
            return Err(not_found());
        }
        return Ok(Target {
            rt,
            namespace: Some(ns.to_string()),
            name,
            sub,
            proxy_rest,
        });
    }
    match s.as_slice() {
        [res] => Ok(Target {
            rt: api.resolve(group, version, res)?,
            namespace: None,
            name: None,
            sub: String::new(),
            proxy_rest: None,
        }),
        [res, name] => {
            let rt = api.resolve(group, version, res)?;
            if rt.namespaced {
                return Err(not_found());
            }
            Ok(Target {
                rt,
                namespace: None,
                name: Some(name.to_string()),
                sub: String::new(),
                proxy_rest: None,
            })
        }
        [res, name, sub] => {
            let rt = api.resolve(group, version, res)?;
            if rt.namespaced {
                return Err(not_found());
            }
            Ok(Target {
                rt,
                namespace: None,
                name: Some(name.to_string()),
                sub: sub.to_string(),
                proxy_rest: None,
            })
        }
        _ => Err(not_found()),
    }
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

fn wants_metadata(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"))
}

/// An object reduced to `PartialObjectMetadata`, as metadata-only clients ask for it.
fn partial_metadata(obj: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

fn list_options(q: &HashMap<String, String>) -> Result<ListOptions, ApiError> {
    Ok(ListOptions {
        labels: LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?,
        fields: FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))?,
        limit: q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0),
        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
    })
}

fn write_options(q: &HashMap<String, String>, headers: &HeaderMap) -> WriteOptions {
    WriteOptions {
        field_manager: q.get("fieldManager").cloned(),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        force: truthy(q, "force"),
        field_validation: q.get("fieldValidation").cloned(),
    }
}

fn parse_body(bytes: &[u8], content_type: &str) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    if content_type.contains("yaml") {
        return serde_yaml::from_slice::<Value>(bytes)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    if content_type.contains("protobuf") {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "protobuf is not supported by the sandbox; use application/json",
        ));
    }
    serde_json::from_slice::<Value>(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON: {e}")))
}

fn verb_of(method: &Method, t: &Target, q: &HashMap<String, String>) -> &'static str {
    match *method {
        Method::GET if t.name.is_none() && truthy(q, "watch") => "watch",
        Method::GET if t.name.is_none() => "list",
        Method::GET => "get",
        Method::POST if t.name.is_none() => "create",
        Method::PUT | Method::PATCH if t.name.is_none() => "unknown",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if t.name.is_none() => "deletecollection",
        Method::DELETE if !t.sub.is_empty() => "unknown",
        Method::DELETE => "delete",
        _ => "unknown",
    }
}

async fn resource_request(
    state: &AppState,
    group: &str,
    version: &str,
    segs: &[String],
    q: HashMap<String, String>,
    req: Request<Body>,
) -> Response<Body> {
    let api = &state.api;
    let t = match parse_target(api, group, version, segs) {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    if let Some(rest) = &t.proxy_rest {
        if !(t.rt.group.is_empty() && t.rt.plural == "services") {
            return error_response(&ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
        }
        let ns = t.namespace.clone().unwrap_or_default();
        let name = t.name.clone().unwrap_or_default();
        let pq = match req.uri().query() {
            Some(query) => format!("/{rest}?{query}"),
            None => format!("/{rest}"),
        };
        return crate::proxy::forward(api.as_ref(), &ns, &name, &pq, req).await;
    }
    let verb = verb_of(req.method(), &t, &q);
    let info = RequestInfo {
        verb,
        group: &t.rt.group,
        resource: &t.rt.plural,
        subresource: &t.sub,
        namespace: t.namespace.as_deref().unwrap_or(""),
        name: t.name.as_deref().unwrap_or(""),
    };
    match api.faults.check(&info) {
        Some(FaultAction::Error { code, message }) => {
            return json_response(code, &faults::error_status(code, message.as_deref()), &[]);
        }
        Some(FaultAction::Delay { millis }) => tokio::time::sleep(faults::delay(millis)).await,
        None => {}
    }
    if t.rt.group.is_empty() && t.rt.plural == "pods" && t.sub == "log" && verb == "get" {
        return pod_log(state, &t, &q);
    }
    if t.sub == "scale"
        && t.rt.group == "apps"
        && matches!(t.rt.plural.as_str(), "deployments" | "replicasets")
        && matches!(verb, "get" | "update" | "patch")
    {
        return scale_request(state, &t, verb, &q, req).await;
    }
    if !(t.sub.is_empty() || t.sub == "status" && t.rt.status_subresource) {
        return error_response(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    }
    let headers = req.headers().clone();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let body_bytes = match axum::body::to_bytes(req.into_body(), 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            return error_response(&ApiError::bad_request(format!("failed to read body: {e}")));
        }
    };
    let ns = t.namespace.as_deref();
    let result: Result<(u16, Value, Vec<String>), ApiError> = async {
        match verb {
            "get" => {
                let name = t.name.as_deref().unwrap_or("");
                let obj = api.get(&t.rt, ns, name)?;
                if wants_table(&headers) && t.sub.is_empty() {
                    let include = q
                        .get("includeObject")
                        .map(String::as_str)
                        .unwrap_or("Metadata");
                    let rv = obj
                        .pointer("/metadata/resourceVersion")
                        .cloned()
                        .unwrap_or(Value::Null);
                    return Ok((
                        200,
                        table::to_table(&t.rt, &[obj], json!({"resourceVersion": rv}), include),
                        Vec::new(),
                    ));
                }
                if wants_metadata(&headers) {
                    return Ok((200, partial_metadata(&obj), Vec::new()));
                }
                Ok((200, obj, Vec::new()))
            }
            "list" => {
                let opts = list_options(&q)?;
                let list = api.list(&t.rt, ns, &opts)?;
                if wants_table(&headers) {
                    let include = q
                        .get("includeObject")
                        .map(String::as_str)
                        .unwrap_or("Metadata");
                    let items = list["items"].as_array().cloned().unwrap_or_default();
                    return Ok((
                        200,
                        table::to_table(&t.rt, &items, list["metadata"].clone(), include),
                        Vec::new(),
                    ));
                }
                if wants_metadata(&headers) {
                    let items: Vec<Value> = list["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(partial_metadata)
                        .collect();
                    let out = json!({
                        "apiVersion": "meta.k8s.io/v1",
                        "kind": "PartialObjectMetadataList",
                        "metadata": list["metadata"].clone(),
                        "items": items,
                    });
                    return Ok((200, out, Vec::new()));
                }
                Ok((200, list, Vec::new()))
            }
            "create" => {
                let body = parse_body(&body_bytes, &content_type)?;
                let w = api
                    .create(&t.rt, ns, body, &write_options(&q, &headers))
                    .await?;
                Ok(written(w))
            }
            "update" => {
                let body = parse_body(&body_bytes, &content_type)?;
                let name = t.name.as_deref().unwrap_or("");
                let w = api
                    .update(&t.rt, ns, name, &t.sub, body, &write_options(&q, &headers))
                    .await?;
                Ok(written(w))
            }
            "patch" => {
                let kind = PatchKind::from_content_type(&content_type)
                    .ok_or_else(|| ApiError::unsupported_media(&content_type))?;
                let body = parse_body(
                    &body_bytes,
                    if kind == PatchKind::Apply {
                        "yaml"
                    } else {
                        "json"
                    },
                )?;
                let name = t.name.as_deref().unwrap_or("");
                let w = api
                    .patch(
                        &t.rt,
                        ns,
                        name,
                        &t.sub,
                        kind,
                        body,
                        &write_options(&q, &headers),
                    )
                    .await?;
                Ok(written(w))
            }
            "delete" => {
                let body = parse_body(&body_bytes, "json").unwrap_or(Value::Null);
                let mut opts = DeleteOptions::from_body(&body);
                if q.get("dryRun").is_some_and(|d| d == "All") {
                    opts.dry_run = true;
                }
                if let Some(p) = q.get("propagationPolicy") {
                    opts.propagation = Some(p.clone());
                }
                let name = t.name.as_deref().unwrap_or("");
                let out = api.delete(&t.rt, ns, name, &opts).await?;
                Ok((200, out, Vec::new()))
            }
            "deletecollection" => {
                let body = parse_body(&body_bytes, "json").unwrap_or(Value::Null);
                let mut opts = DeleteOptions::from_body(&body);
                if q.get("dryRun").is_some_and(|d| d == "All") {
                    opts.dry_run = true;
                }
                let lo = list_options(&q)?;
                Ok((
                    200,
                    api.delete_collection(&t.rt, ns, &lo, &opts).await?,
                    Vec::new(),
                ))
            }
            "watch" => Err(ApiError::internal("watch handled separately")),
            _ => Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            )),
        }
    }
    .await
    .or_else(|e| {
        if verb == "watch" {
            Ok((0, Value::Null, Vec::new()))
        } else {
            Err(e)
        }
    });
    if verb == "watch" {
        return watch_response(state, &t, &q, wants_metadata(&headers));
    }
    match result {
        Ok((code, body, warnings)) => json_response(code, &body, &warnings),
        Err(e) => error_response(&e),
    }
}

async fn scale_request(
    state: &AppState,
    t: &Target,
    verb: &str,
    q: &HashMap<String, String>,
    req: Request<Body>,
) -> Response<Body> {
    let api = &state.api;
    let ns = t.namespace.as_deref();
    let name = t.name.as_deref().unwrap_or("");
    if verb == "get" {
        return match api.get(&t.rt, ns, name) {
            Ok(obj) => json_response(200, &crate::apiserver::scale_of(&obj), &[]),
            Err(e) => error_response(&e),
        };
    }
    let headers = req.headers().clone();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let bytes = match axum::body::to_bytes(req.into_body(), 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            return error_response(&ApiError::bad_request(format!("failed to read body: {e}")));
        }
    };
    let kind = if verb == "patch" {
        match PatchKind::from_content_type(&content_type) {
            Some(k) => Some(k),
            None => return error_response(&ApiError::unsupported_media(&content_type)),
        }
    } else {
        None
    };
    let body = match parse_body(&bytes, "json") {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    match api
        .set_scale(&t.rt, ns, name, kind, body, &write_options(q, &headers))
        .await
    {
        Ok(scale) => json_response(200, &scale, &[]),
        Err(e) => error_response(&e),
    }
}

fn written(w: Written) -> (u16, Value, Vec<String>) {
    (if w.created { 201 } else { 200 }, w.object, w.warnings)
}

struct WatchFilter {
    rt: ResourceType,
    key: ResKey,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchFilter {
    fn matches(&self, obj: &Value) -> bool {
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

fn watch_response(
    state: &AppState,
    t: &Target,
    q: &HashMap<String, String>,
    metadata_only: bool,
) -> Response<Body> {
    let api = state.api.clone();
    let (labels, fields) = match (
        LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or("")),
        FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or("")),
    ) {
        (Ok(l), Ok(f)) => (l, f),
        (Err(e), _) | (_, Err(e)) => return error_response(&e),
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

async fn sandbox_control(
    state: &AppState,
    method: &Method,
    rest: &[String],
    req: Request<Body>,
) -> Response<Body> {
    let api = &state.api;
    let s: Vec<&str> = rest.iter().map(String::as_str).collect();
    let body = axum::body::to_bytes(req.into_body(), 1024 * 1024)
        .await
        .unwrap_or_default();
    match (method.clone(), s.as_slice()) {
        (Method::GET, ["faults"]) => json_response(200, &json!({"rules": api.faults.list()}), &[]),
        (Method::POST, ["faults"]) => match serde_json::from_slice::<FaultRule>(&body) {
            Ok(rule) if rule.action.is_some() => {
                let id = api.faults.add(rule);
                json_response(201, &json!({"id": id}), &[])
            }
            Ok(_) => error_response(&ApiError::bad_request("a fault rule needs an action")),
            Err(e) => error_response(&ApiError::bad_request(format!("invalid fault rule: {e}"))),
        },
        (Method::DELETE, ["faults"]) => {
            api.faults.clear();
            json_response(200, &json!({"cleared": true}), &[])
        }
        (Method::DELETE, ["faults", id]) => match id.parse::<u64>() {
            Ok(id) if api.faults.remove(id) => json_response(200, &json!({"removed": id}), &[]),
            _ => error_response(&ApiError::new(
                404,
                "NotFound",
                format!("fault rule {id} not found"),
            )),
        },
        (Method::POST, ["watches", "drop"]) => {
            api.faults.drop_watches();
            json_response(200, &json!({"dropped": true}), &[])
        }
        (Method::POST, ["pods", ns, name, action]) => {
            let Some(w) = state.workloads.get() else {
                return error_response(&ApiError::new(
                    503,
                    "ServiceUnavailable",
                    "workloads are not running",
                ));
            };
            let result = match *action {
                "freeze" => w.freeze(ns, name).await,
                "thaw" => w.thaw(ns, name).await,
                "kill" => w.kill(ns, name).await,
                _ => {
                    return error_response(&ApiError::new(
                        404,
                        "NotFound",
                        format!("unknown pod action {action}"),
                    ));
                }
            };
            match result {
                Ok(()) => json_response(
                    200,
                    &json!({"pod": format!("{ns}/{name}"), "action": action}),
                    &[],
                ),
                Err(e) => error_response(&ApiError::new(409, "Conflict", e.to_string())),
            }
        }
        (Method::GET, ["snapshot"]) => json_response(200, &crate::snapshot::take(&api.store), &[]),
        _ => error_response(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    }
}
