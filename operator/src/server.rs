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
use crate::watchdog::Watchdog;

/// What the endpoints report.
#[derive(Clone, Debug)]
pub struct Health {
    /// Metrics to expose.
    pub metrics: Arc<Metrics>,
    /// Set once the operator reached the API server; `/readyz` answers 503 before.
    pub ready: Arc<AtomicBool>,
    /// Steps in progress; `/healthz` answers 503 while one is overdue (a wedged loop).
    pub watchdog: Watchdog,
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
        .route(
            "/healthz",
            get(|State(h): State<Health>| async move {
                let overdue = h.watchdog.overdue(std::time::Instant::now());
                if overdue.is_empty() {
                    (StatusCode::OK, "ok".to_string())
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("wedged: {}", overdue.join(", ")),
                    )
                }
            }),
        )
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
            watchdog: Watchdog::new(),
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

    #[tokio::test]
    async fn liveness_fails_while_a_step_is_overdue_and_names_it() {
        let h = Health {
            metrics: Metrics::shared(),
            ready: Arc::new(AtomicBool::new(true)),
            watchdog: Watchdog::new(),
        };
        let step = h
            .watchdog
            .start("reconcile of guard", std::time::Duration::ZERO);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let (status, body) = call(&h, "/healthz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("reconcile of guard"), "{body}");
        drop(step);
        assert_eq!(call(&h, "/healthz").await.0, StatusCode::OK);
    }
}
