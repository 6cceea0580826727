//! The sandbox's own endpoints under `/sandbox/v1`: fault rules, dropping every watch, pod
//! freeze/thaw/kill and snapshots (the table in the README).

use axum::body::Body;
use http::{Method, Request, Response};
use serde_json::json;

use super::{AppState, error_response, json_response};
use crate::error::ApiError;
use crate::faults::FaultRule;

pub(super) async fn sandbox_control(
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
        _ => error_response(&ApiError::no_such_resource()),
    }
}
