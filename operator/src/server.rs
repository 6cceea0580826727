//! The operator's own HTTP endpoints: `/metrics`, `/healthz` and `/readyz`. They keep serving
//! whether or not this replica leads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// What the endpoints report.
#[derive(Clone, Debug)]
pub struct Health {
    /// Metrics to expose.
    pub metrics: Arc<Metrics>,
    /// Set once the operator reached the API server; `/readyz` answers 503 before.
    pub ready: Arc<AtomicBool>,
}

/// The router (exposed for tests).
pub fn router(health: Health) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(h): State<Health>| async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    h.metrics.encode(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(h): State<Health>| async move {
                if h.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .with_state(health)
}

/// Serves until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    health: Health,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router(health))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http::Request;
    use tower::ServiceExt;

    async fn call(h: &Health, path: &str) -> (StatusCode, String) {
        let res = router(h.clone())
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readiness_follows_the_flag_and_metrics_are_exposed() {
        let h = Health {
            metrics: Metrics::shared(),
            ready: Arc::new(AtomicBool::new(false)),
        };
        assert_eq!(call(&h, "/healthz").await.0, StatusCode::OK);
        assert_eq!(call(&h, "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
        h.ready.store(true, Ordering::Relaxed);
        assert_eq!(call(&h, "/readyz").await.0, StatusCode::OK);
        h.metrics.reconciles.inc();
        let (status, body) = call(&h, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("initializer_operator_reconciles_total 1"));
    }
}
