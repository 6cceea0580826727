//! The HTTP face of the API server. This module routes by path: health, version, discovery and
//! OpenAPI documents are answered here; resource URLs go to `resource` (CRUD, tables, partial
//! metadata, scale, pod logs, the service proxy), watches to `watch`, and `/sandbox/v1` to
//! `control` (faults, dropped watches, pod freeze/thaw/kill, snapshots). Every request but the
//! anonymous ones a real API server allows (health and version) must carry the sandbox's bearer
//! token, or it is answered 401.

mod control;
mod resource;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use http::{HeaderValue, Request, Response, StatusCode, header};
use serde_json::Value;

use crate::apiserver::ApiServer;
use crate::discovery;
use crate::error::ApiError;
use crate::workload::WorkloadHandle;

/// Shared state of the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    pub api: Arc<ApiServer>,
    /// The workload controllers, once started (pod freeze/thaw/kill).
    pub workloads: Arc<OnceLock<WorkloadHandle>>,
    /// How often watches with bookmarks get one.
    pub bookmark_interval: Duration,
    /// The state directory (pods' logs are under `logs/`).
    pub state_dir: std::path::PathBuf,
    /// The bearer token every request but `anonymous` ones must carry (the kubeconfig's).
    pub token: Arc<str>,
}

/// What kube-apiserver lets anyone read (`system:public-info-viewer`): health and version.
fn anonymous(segs: &[&str]) -> bool {
    matches!(segs, ["healthz" | "readyz" | "livez" | "version", ..])
}

/// Whether `req` carries `Authorization: Bearer <token>`. Compared in constant time, so the
/// answer's timing says nothing about how much of a guess was right.
fn authenticated(req: &Request<Body>, token: &str) -> bool {
    let Some(given) = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (given, token) = (given.trim().as_bytes(), token.as_bytes());
    given.len() == token.len()
        && given
            .iter()
            .zip(token)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
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
    if !anonymous(&segs) && !authenticated(&req, &state.token) {
        return error_response(&ApiError::new(401, "Unauthorized", "Unauthorized"));
    }
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
            None => error_response(&ApiError::no_such_resource()),
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
                error_response(&ApiError::no_such_resource())
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
            control::sandbox_control(&state, &method, &rest, req).await
        }
        ["api", "v1", rest @ ..] => {
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            resource::resource_request(&state, "", "v1", &rest, query, req).await
        }
        ["apis", group, version, rest @ ..] => {
            let (g, v) = (group.to_string(), version.to_string());
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            resource::resource_request(&state, &g, &v, &rest, query, req).await
        }
        _ => error_response(&ApiError::no_such_resource()),
    }
}

fn resource_list_response(api: &ApiServer, group: &str, version: &str) -> Response<Body> {
    match discovery::resource_list(&api.store.registry(), group, version) {
        Some(d) => json_response(200, &d, &[]),
        None => error_response(&ApiError::no_such_resource()),
    }
}
