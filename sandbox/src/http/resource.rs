//! Resource requests: the URL parsed into a [`ResourcePath`], faults, then get, list, create,
//! update, patch, delete and deletecollection with their options and content negotiation
//! (Tables, `PartialObjectMetadata`), and the `scale`, `log` and service `proxy` subresources.

use std::collections::HashMap;

use axum::body::Body;
use http::{HeaderMap, HeaderValue, Method, Request, Response, header};
use serde_json::{Value, json};

use super::{AppState, error_response, json_response, truthy};
use crate::apiserver::initialization;
use crate::apiserver::{ApiServer, DeleteOptions, ListOptions, WriteOptions, Written};
use crate::error::ApiError;
use crate::faults::{self, FaultAction, RequestInfo};
use crate::patch::PatchKind;
use crate::resource::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::table;

/// A resource URL, parsed: the type, and the namespace, name and subresource it names.
#[derive(Debug)]
pub(super) struct ResourcePath {
    pub(super) rt: ResourceType,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) sub: String,
    /// Segments after `proxy` for the service proxy.
    proxy_rest: Option<String>,
}

fn parse_path(
    api: &ApiServer,
    group: &str,
    version: &str,
    segs: &[String],
) -> Result<ResourcePath, ApiError> {
    let not_found = ApiError::no_such_resource;
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
        return Ok(ResourcePath {
            rt,
            namespace: Some(ns.to_string()),
            name,
            sub,
            proxy_rest,
        });
    }
    match s.as_slice() {
        [res] => Ok(ResourcePath {
            rt: api.resolve(group, version, res)?,
            namespace: None,
            name: None,
            sub: String::new(),
            proxy_rest: None,
        }),
        [res, name, sub @ ..] if sub.len() <= 1 => {
            let rt = api.resolve(group, version, res)?;
            if rt.namespaced {
                return Err(not_found());
            }
            Ok(ResourcePath {
                rt,
                namespace: None,
                name: Some(name.to_string()),
                sub: sub.first().map(|s| s.to_string()).unwrap_or_default(),
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
pub(super) fn partial_metadata(obj: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

pub(super) fn list_options(q: &HashMap<String, String>) -> Result<ListOptions, ApiError> {
    Ok(ListOptions {
        labels: LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?,
        fields: FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))?,
        limit: q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0),
        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
        include_uninitialized: initialization::include_uninitialized_on_list(
            q.get("includeUninitialized").map(String::as_str),
        ),
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
        include_uninitialized: initialization::include_uninitialized_on_create(
            q.get("includeUninitialized").map(String::as_str),
        ),
        timeout: Some(initialization::create_timeout(
            q.get("timeout").map(String::as_str),
        )),
    }
}

fn parse_body(bytes: &[u8], content_type: &str) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    if content_type.contains("yaml") {
        // Without the source snippet: the Status message is one line, as kube-apiserver's.
        let plain = serde_saphyr::options! { with_snippet: false };
        return serde_saphyr::from_slice_with_options::<Value>(bytes, plain)
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

fn verb_of(method: &Method, t: &ResourcePath, q: &HashMap<String, String>) -> &'static str {
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

pub(super) async fn resource_request(
    state: &AppState,
    group: &str,
    version: &str,
    segs: &[String],
    q: HashMap<String, String>,
    req: Request<Body>,
) -> Response<Body> {
    let api = &state.api;
    let t = match parse_path(api, group, version, segs) {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    if let Some(rest) = &t.proxy_rest {
        if !(t.rt.group.is_empty() && t.rt.plural == "services") {
            return error_response(&ApiError::no_such_resource());
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
        return error_response(&ApiError::no_such_resource());
    }
    let headers = req.headers().clone();
    if verb == "watch" {
        return super::watch::watch_response(state, &t, &q, wants_metadata(&headers));
    }
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
            _ => Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            )),
        }
    }
    .await;
    match result {
        Ok((code, body, warnings)) => json_response(code, &body, &warnings),
        Err(e) => error_response(&e),
    }
}

async fn scale_request(
    state: &AppState,
    t: &ResourcePath,
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

/// The status code of a write: 201 for a create, 202 for one whose object is not yet
/// initialized (the era's create handler: "If the object is partially initialized, always
/// indicate it via StatusAccepted"), 200 otherwise.
fn written(w: Written) -> (u16, Value, Vec<String>) {
    let code = match (w.created, initialization::is_initialized(&w.object)) {
        (true, true) => 201,
        (true, false) => 202,
        (false, _) => 200,
    };
    (code, w.object, w.warnings)
}

/// `GET pods/NAME/log`: the container's log file, whole or its last `tailLines` lines.
/// `follow` is not supported: the current content is returned.
fn pod_log(state: &AppState, t: &ResourcePath, q: &HashMap<String, String>) -> Response<Body> {
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
