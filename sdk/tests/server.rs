//! Socket-level tests: real HTTPS on 127.0.0.1:0, certificate and configuration reload,
//! readiness, panics and graceful shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::{TestPki, eventually};
use k8s_openapi::api::core::v1::{Container, Pod};
use kube_initializer::client::{Connection, Trust, connector};
use kube_initializer::mutate::{self, PodSpecHolder};
use kube_initializer::testing::review;
use kube_initializer::{Denial, Initializer, Review, ServeArgs, Server};
use serde::Deserialize;
use serde_json::{Value, json};

/// Set when the handler starts on the object named "slow" (the shutdown test waits for it).
static SLOW_STARTED: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Deserialize)]
struct Config {
    image: String,
}

fn nginx_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.8.1", "ports": [{"containerPort": 80}]}]}
    }))
    .unwrap()
}

fn sidecar(pod: &mut Pod, review: &Review<Config>) -> Result<(), Denial> {
    if pod.metadata.name.as_deref() == Some("boom") {
        panic!("handler bug");
    }
    if pod.metadata.name.as_deref() == Some("slow") {
        SLOW_STARTED.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(600));
    }
    if let Some(spec) = pod.pod_spec_mut() {
        let container = Container {
            name: "sidecar".into(),
            image: Some(review.config().image.clone()),
            ..Container::default()
        };
        mutate::add_container(spec, &container);
    }
    Ok(())
}

fn args(tls: &Path, config: &Path) -> ServeArgs {
    let mut args = ServeArgs::new(SocketAddr::from(([127, 0, 0, 1], 0)), tls, config);
    args.reload_interval_ms = 100;
    args.shutdown_grace_seconds = 5;
    args
}

async fn start(tls: &Path, config: &Path) -> Server {
    Initializer::<Config>::with_config("test")
        .handle(sidecar)
        .bind(&args(tls, config))
        .await
        .unwrap()
}

async fn connect(server: &Server, ca_pem: &str) -> kube_initializer::Result<Connection> {
    let url = format!(
        "https://127.0.0.1:{}/initialize",
        server.local_addr().port()
    );
    Connection::open(&url, &connector(&Trust::CaPem(ca_pem.as_bytes().to_vec()))?).await
}

async fn injected_image(conn: &mut Connection, name: &str) -> Option<String> {
    let reply = conn
        .post(Bytes::from(review(&nginx_pod(name)).to_bytes()))
        .await
        .unwrap();
    assert_eq!(reply.status, 200);
    let doc: Value = serde_json::from_slice(&reply.body).unwrap();
    let patch = doc["response"]["patch"].as_str()?;
    let patch = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, patch).unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    // The container's op (the SDK also marks the object in /metadata/annotations).
    patch
        .as_array()?
        .iter()
        .find(|op| op["path"] == "/spec/containers/1")?["value"]["image"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test]
async fn readyz_turns_ready_only_once_certificate_and_configuration_are_loaded() {
    let tls = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    let server = start(tls.path(), cfg.path()).await;
    let pki = TestPki::new("one");
    assert!(
        connect(&server, &pki.ca_pem).await.is_err(),
        "no certificate yet, no handshake"
    );

    pki.write(tls.path());
    assert!(
        eventually(Duration::from_secs(5), || async {
            connect(&server, &pki.ca_pem).await.is_ok()
        })
        .await
    );
    let mut conn = connect(&server, &pki.ca_pem).await.unwrap();
    let ready = conn
        .request("GET", Some("/readyz"), Bytes::new())
        .await
        .unwrap();
    assert_eq!(ready.status, 503);
    assert!(String::from_utf8_lossy(&ready.body).contains("configuration"));
    let health = conn
        .request("GET", Some("/healthz"), Bytes::new())
        .await
        .unwrap();
    assert_eq!(health.status, 200);

    std::fs::write(cfg.path().join("config.yaml"), "image: envoy:1\n").unwrap();
    let became_ready = eventually(Duration::from_secs(5), || {
        let ca = pki.ca_pem.clone();
        let server = &server;
        async move {
            let mut c = connect(server, &ca).await.unwrap();
            c.request("GET", Some("/readyz"), Bytes::new())
                .await
                .unwrap()
                .status
                == 200
        }
    })
    .await;
    assert!(became_ready);
    server.shutdown().await;
}

#[tokio::test]
async fn new_certificate_files_are_served_to_new_connections_without_a_restart() {
    let tls = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    std::fs::write(cfg.path().join("config.yaml"), "image: envoy:1\n").unwrap();
    let first = TestPki::new("first");
    first.write(tls.path());
    let server = start(tls.path(), cfg.path()).await;
    let mut old_conn = connect(&server, &first.ca_pem).await.unwrap();
    assert_eq!(
        injected_image(&mut old_conn, "a").await.as_deref(),
        Some("envoy:1")
    );

    let second = TestPki::new("second");
    second.write(tls.path());
    let rotated = eventually(Duration::from_secs(5), || async {
        connect(&server, &second.ca_pem).await.is_ok()
    })
    .await;
    assert!(rotated, "new connections never saw the new certificate");
    assert!(
        connect(&server, &first.ca_pem).await.is_err(),
        "the old certificate is still served"
    );
    // The connection opened before the rotation keeps working.
    assert_eq!(
        injected_image(&mut old_conn, "b").await.as_deref(),
        Some("envoy:1")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_broken_certificate_rotation_keeps_the_old_certificate() {
    let tls = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    let pki = TestPki::new("one");
    pki.write(tls.path());
    let server = start(tls.path(), cfg.path()).await;
    std::fs::write(tls.path().join("tls.crt"), "garbage").unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(connect(&server, &pki.ca_pem).await.is_ok());
    assert!(server.cert_store().is_loaded());
    server.shutdown().await;
}

#[tokio::test]
async fn configuration_changes_apply_and_an_invalid_change_keeps_the_old_one() {
    let tls = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    let pki = TestPki::new("one");
    pki.write(tls.path());
    let config = cfg.path().join("config.yaml");
    std::fs::write(&config, "image: envoy:1\n").unwrap();
    let server = start(tls.path(), cfg.path()).await;
    let mut conn = connect(&server, &pki.ca_pem).await.unwrap();
    assert_eq!(
        injected_image(&mut conn, "a").await.as_deref(),
        Some("envoy:1")
    );

    std::fs::write(&config, "image: envoy:2\n").unwrap();
    let mut seen = None;
    for _ in 0..100 {
        seen = injected_image(&mut conn, "a").await;
        if seen.as_deref() == Some("envoy:2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen.as_deref(), Some("envoy:2"));

    std::fs::write(&config, "image: [unterminated\n").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        injected_image(&mut conn, "a").await.as_deref(),
        Some("envoy:2")
    );
    let ready = conn
        .request("GET", Some("/readyz"), Bytes::new())
        .await
        .unwrap();
    assert_eq!(ready.status, 200);
    let metrics = conn
        .request("GET", Some("/metrics"), Bytes::new())
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains(r#"initializer_reloads_total{what="configuration",result="applied"} 2"#),
        "{text}"
    );
    // Logged and counted once, though the bad file is read again at every poll.
    assert!(
        text.contains(r#"initializer_reloads_total{what="configuration",result="rejected"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"initializer_reloads_total{what="certificate",result="applied"} 1"#),
        "{text}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_panicking_handler_neither_drops_the_connection_nor_stops_the_server() {
    let tls = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    let pki = TestPki::new("one");
    pki.write(tls.path());
    std::fs::write(cfg.path().join("config.yaml"), "image: envoy:1\n").unwrap();
    let server = start(tls.path(), cfg.path()).await;
    let mut conn = connect(&server, &pki.ca_pem).await.unwrap();
    let reply = conn
        .post(Bytes::from(review(&nginx_pod("boom")).to_bytes()))
        .await
        .unwrap();
    assert_eq!(reply.status, 200);
    let doc: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(doc["response"]["allowed"], true);
    assert!(
        doc["response"]["warnings"][0]
            .as_str()
            .unwrap()
            .contains("panicked")
    );
    assert_eq!(
        injected_image(&mut conn, "after").await.as_deref(),
        Some("envoy:1")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_drains_in_flight_requests_and_refuses_new_connections() {
    let tls = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    let pki = TestPki::new("one");
    pki.write(tls.path());
    std::fs::write(cfg.path().join("config.yaml"), "image: envoy:1\n").unwrap();
    let server = start(tls.path(), cfg.path()).await;
    let mut conn = connect(&server, &pki.ca_pem).await.unwrap();
    let in_flight = tokio::spawn(async move { injected_image(&mut conn, "slow").await });
    let started = eventually(Duration::from_secs(10), || async {
        SLOW_STARTED.load(Ordering::SeqCst)
    })
    .await;
    assert!(started, "the slow request never reached the handler");
    let addr = server.local_addr();
    server.shutdown().await;
    assert_eq!(in_flight.await.unwrap().as_deref(), Some("envoy:1"));
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
