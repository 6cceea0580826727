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
use initializer_load::client::{ClientError, Connection, Trust, connector};
use k8s_openapi::api::core::v1::{Container, Pod};
use kube_initializer::advanced::Server;
use kube_initializer::mutate::{self, PodSpecHolder};
use kube_initializer::testing::review;
use kube_initializer::{Denial, Initializer, Review, ServeArgs};
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

async fn connect(server: &Server, ca_pem: &str) -> Result<Connection, ClientError> {
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

/// The initialized-by mark a review's answer writes (the annotations op of its patch).
async fn mark_written(conn: &mut Connection, review: Vec<u8>) -> String {
    let reply = conn.post(Bytes::from(review)).await.unwrap();
    assert_eq!(reply.status, 200);
    mark_in(&reply.body)
}

/// The mark an answer's patch writes.
fn mark_in(answer: &[u8]) -> String {
    let doc: Value = serde_json::from_slice(answer).unwrap();
    let patch = doc["response"]["patch"].as_str().expect("a patch");
    let patch = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, patch).unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    let ops = patch.as_array().unwrap();
    let op = ops
        .iter()
        .find(|op| {
            op["path"]
                .as_str()
                .unwrap()
                .starts_with("/metadata/annotations")
        })
        .expect("an annotations op");
    let value = if op["path"] == "/metadata/annotations" {
        &op["value"][mutate::INITIALIZED_BY_ANNOTATION]
    } else {
        &op["value"]
    };
    value.as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_mark_is_signed_for_the_object_with_the_serving_keys_key_and_a_forged_one_is_replaced()
{
    let tls = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    std::fs::write(cfg.path().join("config.yaml"), "image: envoy:1\n").unwrap();
    let pki = TestPki::new("marks");
    pki.write(tls.path());
    let server = start(tls.path(), cfg.path()).await;
    let mut conn = connect(&server, &pki.ca_pem).await.unwrap();
    let keys = initializer_mark::Keys::current(
        initializer_mark::MarkKey::from_serving_key_pem(pki.key_pem.as_bytes()).unwrap(),
    );
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let stored = |name, generate_name, created| initializer_mark::Stored {
        namespace: "default",
        group: "",
        resource: "pods",
        name,
        generate_name,
        created,
    };

    // A create by generateName, carrying a forged mark: the answer replaces it with one made
    // for the generateName, stamped now; the stored object (named by the API server after
    // admission) verifies, and the forged one did not.
    let mut pod = nginx_pod("");
    pod.metadata.name = None;
    pod.metadata.generate_name = Some("web-".into());
    let forged = format!("test/t={now}/{}", "A".repeat(43));
    pod.metadata.annotations = Some(
        [(mutate::INITIALIZED_BY_ANNOTATION.to_owned(), forged.clone())]
            .into_iter()
            .collect(),
    );
    assert_eq!(
        initializer_mark::verify(&keys, "test", Some(&forged), &stored("web-x1", "web-", now)),
        Err(initializer_mark::Refusal::BadMac)
    );
    let mark = mark_written(&mut conn, review(&pod).to_bytes()).await;
    assert_ne!(mark, forged);
    assert_eq!(
        initializer_mark::verify(
            &keys,
            "test",
            Some(&mark),
            &stored("web-x1", "web-", now + 1)
        ),
        Ok(()),
        "{mark}"
    );
    // Not for another object: the mark is bound to what it was made for.
    assert_eq!(
        initializer_mark::verify(&keys, "test", Some(&mark), &stored("api-x1", "api-", now)),
        Err(initializer_mark::Refusal::BadMac)
    );

    // An update whose object claims another creation time: stamped with the stored object's
    // (oldObject's), never the request's.
    let created = k8s_openapi::jiff::Timestamp::from_second(now - 3600).unwrap();
    let claimed = k8s_openapi::jiff::Timestamp::from_second(now + 86_400).unwrap();
    let mut old = nginx_pod("web");
    old.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        created,
    ));
    let mut new = old.clone();
    new.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        claimed,
    ));
    let mark = mark_written(&mut conn, review(&new).update(&old).to_bytes()).await;
    assert!(
        mark.starts_with(&format!("test/t={}/", now - 3600)),
        "{mark}"
    );
    assert_eq!(
        initializer_mark::verify(&keys, "test", Some(&mark), &stored("web", "", now - 3600)),
        Ok(())
    );

    // Anyone may post a review: one whose oldObject claims a creation an hour ahead must not
    // buy a mark for an object to be created then (created uninjected during an outage, it
    // would pass as initialized). Stamped no later than this process's clock.
    let ahead = k8s_openapi::jiff::Timestamp::from_second(now + 3600).unwrap();
    let mut old = nginx_pod("hidden");
    old.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ahead));
    let new = old.clone();
    let mark = mark_written(&mut conn, review(&new).update(&old).to_bytes()).await;
    let stamped: i64 = mark
        .strip_prefix("test/t=")
        .and_then(|rest| rest.split('/').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no time stamp in {mark}"));
    assert!(
        stamped <= k8s_openapi::jiff::Timestamp::now().as_second(),
        "stamped {}s ahead: {mark}",
        stamped - now
    );
    assert_eq!(
        initializer_mark::verify(
            &keys,
            "test",
            Some(&mark),
            &stored("hidden", "", now + 3600)
        ),
        Err(initializer_mark::Refusal::OutsideWindow),
        "the mark is no good for the object created an hour from now"
    );
    server.shutdown().await;
}

/// `into_router` gives the routes to a server of one's own (here none at all: requests go
/// straight to the router): the review is answered with the configuration in force and a mark
/// signed with the serving key's key, and `/readyz` waits for that key.
#[tokio::test]
async fn into_router_serves_the_routes_in_a_server_of_ones_own() {
    use axum::body::Body;
    use http::Request;
    use tower::ServiceExt;

    let tls = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    std::fs::write(cfg.path().join("config.yaml"), "image: envoy:1\n").unwrap();
    let pki = TestPki::new("embedded");
    pki.write(tls.path());
    let router = Initializer::<Config>::with_config("test")
        .handle(sidecar)
        .into_router(&args(tls.path(), cfg.path()));
    let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();

    let ready = router.clone().oneshot(get("/readyz")).await.unwrap();
    assert_eq!(ready.status(), 200);
    let reply = router
        .clone()
        .oneshot(
            Request::post(kube_initializer::advanced::INITIALIZE_PATH)
                .header("content-type", "application/json")
                .body(Body::from(review(&nginx_pod("web")).to_bytes()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let answer = axum::body::to_bytes(reply.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let doc: Value = serde_json::from_slice(&answer).unwrap();
    let patch = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        doc["response"]["patch"].as_str().expect("a patch"),
    )
    .unwrap();
    assert!(
        String::from_utf8_lossy(&patch).contains("envoy:1"),
        "the configuration's image is injected: {text}"
    );
    let mark = mark_in(&answer);
    let keys = initializer_mark::Keys::current(
        initializer_mark::MarkKey::from_serving_key_pem(pki.key_pem.as_bytes()).unwrap(),
    );
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let stored = initializer_mark::Stored {
        namespace: "default",
        group: "",
        resource: "pods",
        name: "web",
        generate_name: "",
        created: now,
    };
    assert_eq!(
        initializer_mark::verify(&keys, "test", Some(&mark), &stored),
        Ok(()),
        "signed with the serving key's key: {mark}"
    );
    let health = router.oneshot(get("/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);

    // Without a serving key there is nothing to sign with: not ready, and saying why.
    let no_tls = tempfile::tempdir().unwrap();
    let router = Initializer::<Config>::with_config("test")
        .handle(sidecar)
        .into_router(&args(no_tls.path(), cfg.path()));
    let unready = router.oneshot(get("/readyz")).await.unwrap();
    assert_eq!(unready.status(), 503);
    let why = axum::body::to_bytes(unready.into_body(), usize::MAX)
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&why).contains("serving certificate"),
        "{why:?}"
    );
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
    assert!(
        connect(&server, &pki.ca_pem).await.is_ok(),
        "the old certificate is still served"
    );
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

#[tokio::test]
async fn a_terminating_server_fails_readiness_but_still_answers_reviews() {
    let tls = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |_| {}).await;
    let mut conn = connect(&server, &pki.ca_pem).await.unwrap();
    let ready = conn.request("GET", Some("/readyz"), Bytes::new()).await;
    assert_eq!(ready.unwrap().status, 200);
    // SIGTERM: the pod leaves its Service's ready endpoints, but a call already routed to it
    // (the API server's, the operator's probe) must still be answered.
    server.begin_termination();
    assert_eq!(
        injected_image(&mut conn, "web").await.as_deref(),
        Some("envoy:1")
    );
    let mut fresh = connect(&server, &pki.ca_pem).await.unwrap();
    let ready = fresh.request("GET", Some("/readyz"), Bytes::new()).await;
    let ready = ready.unwrap();
    assert_eq!(ready.status, 503);
    assert!(String::from_utf8_lossy(&ready.body).contains("shutting down"));
    let mut fresh = connect(&server, &pki.ca_pem).await.unwrap();
    assert_eq!(
        injected_image(&mut fresh, "web-2").await.as_deref(),
        Some("envoy:1"),
        "new connections are still accepted while terminating"
    );
    let addr = server.local_addr();
    server.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_terminating_server_closes_each_connection_after_its_next_answer() {
    // The API server keeps its connections to a pod alive. Closing one that sits idle when the
    // pod stops races the API server's next request on it, which then fails with `EOF` and
    // fails a create; told to close with an answer, the API server opens its next connection
    // through the Service, which no longer lists this pod.
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |_| {}).await;
    let mut kept = tls_from(&server, &pki.ca_pem, [127, 0, 0, 1])
        .await
        .unwrap();
    let (head, _) = exchange(&mut kept, "/healthz").await.unwrap();
    assert_eq!(header(&head, "connection"), None, "{head}");

    server.begin_termination();
    let (head, body) = exchange(&mut kept, "/healthz")
        .await
        .expect("a connection opened before termination is still answered");
    assert_eq!(body, "ok");
    assert_eq!(
        header(&head, "connection").as_deref(),
        Some("close"),
        "{head}"
    );
    assert!(
        closed_by_server(&mut kept).await,
        "the server kept the connection open after telling the client to close it"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_route_check_says_which_connection_carried_it_and_closes_it() {
    // A firewall lets a connection it admitted keep flowing after its rules change, so only a
    // check on a connection dialled for it proves the route as it is now; the answer says
    // which it was, and closing the connection keeps the next check off it.
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |_| {}).await;
    let check = |uid: &str| {
        let object = k8s_openapi::api::core::v1::ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("route-check-00000000000000ab".into()),
                namespace: Some("sidecar-init".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        review(&object).dry_run(true).uid(uid).to_bytes()
    };
    let message = |body: &str| -> String {
        let answer: Value = serde_json::from_str(body).unwrap();
        answer["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    for (used_before, carried) in [(false, "a new"), (true, "a reused")] {
        let mut conn = tls_from(&server, &pki.ca_pem, [127, 0, 0, 1])
            .await
            .unwrap();
        if used_before {
            assert!(healthz(&mut conn).await);
        }
        let (head, body) = post(&mut conn, "/route-check", &check("u1"))
            .await
            .expect("the route check is answered");
        assert_eq!(
            message(&body),
            format!("route check reached route-check-00000000000000ab on {carried} connection"),
            "{head}"
        );
        assert_eq!(
            header(&head, "connection").as_deref(),
            Some("close"),
            "{head}"
        );
        assert!(
            closed_by_server(&mut conn).await,
            "the connection that carried a route check stayed open"
        );
    }
    server.shutdown().await;
}

/// A running server with a certificate and a configuration, the limits set by `tune`.
async fn serving(
    tls: &Path,
    cfg: &Path,
    pki: &TestPki,
    tune: impl FnOnce(&mut ServeArgs),
) -> Server {
    pki.write(tls);
    std::fs::write(cfg.join("config.yaml"), "image: envoy:1\n").unwrap();
    let mut args = args(tls, cfg);
    tune(&mut args);
    Initializer::<Config>::with_config("test")
        .handle(sidecar)
        .bind(&args)
        .await
        .unwrap()
}

/// A TLS stream to the server with nothing sent on it yet.
async fn raw_tls(
    server: &Server,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let connector = connector(&Trust::CaPem(ca_pem.as_bytes().to_vec())).unwrap();
    let tcp = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    connector.connect(name, tcp).await.unwrap()
}

#[tokio::test]
async fn a_client_sending_its_headers_byte_by_byte_is_cut_off_while_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |a| a.header_timeout_ms = 500).await;

    let (mut reader, mut writer) = tokio::io::split(raw_tls(&server, &pki.ca_pem).await);
    let started = std::time::Instant::now();
    // Forever, one byte every 50 ms: a head that never completes.
    let dribble = tokio::spawn(async move {
        let head = b"POST /initialize HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
        for byte in head.iter().copied().chain(std::iter::repeat(b'a')) {
            if writer.write_all(&[byte]).await.is_err() || writer.flush().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let closed = tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = reader.read_to_end(&mut buf).await;
        (started.elapsed(), buf)
    });

    // Meanwhile another client is answered, on several requests.
    let mut conn = connect(&server, &pki.ca_pem).await.unwrap();
    for _ in 0..3 {
        assert_eq!(
            injected_image(&mut conn, "nginx").await.as_deref(),
            Some("envoy:1")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (after, answer) = tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the slow client was never cut off")
        .unwrap();
    assert!(
        after >= Duration::from_millis(400) && after < Duration::from_secs(3),
        "cut off after {after:?}"
    );
    // Either closed outright or answered with an error, never served.
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains(" 200 "), "{answer}");
    dribble.abort();
    assert_eq!(
        injected_image(&mut conn, "after").await.as_deref(),
        Some("envoy:1")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_sends_nothing_after_the_handshake_is_cut_off() {
    use tokio::io::AsyncReadExt;
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |a| a.header_timeout_ms = 500).await;
    let mut silent = raw_tls(&server, &pki.ca_pem).await;
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "a silent client was never cut off");
    server.shutdown().await;
}

#[tokio::test]
async fn a_body_slower_than_the_body_timeout_gets_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |a| a.body_timeout_ms = 500).await;
    let mut slow = raw_tls(&server, &pki.ca_pem).await;
    slow.write_all(
        b"POST /initialize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\"",
    )
    .await
    .unwrap();
    slow.flush().await.unwrap();
    let mut buf = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buf))
        .await
        .expect("a stalled body was never answered")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    server.shutdown().await;
}

/// A TLS stream to the server from the loopback address `source` (any 127.x.y.z is this host,
/// so each stands for another client pod), with nothing sent on it yet; `Err` when the server
/// closed it before the handshake ended.
async fn tls_from(
    server: &Server,
    ca_pem: &str,
    source: [u8; 4],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let connector = connector(&Trust::CaPem(ca_pem.as_bytes().to_vec())).unwrap();
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((source, 0)))?;
    let tcp = socket.connect(server.local_addr()).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    connector.connect(name, tcp).await
}

/// `GET path` on a kept-alive connection: the body of a 200 answer, `None` for anything else
/// (another status, the connection closed, no answer within 5 s).
async fn get(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    path: &str,
) -> Option<String> {
    let (head, body) = exchange(tls, path).await?;
    head.starts_with("HTTP/1.1 200").then_some(body)
}

/// `GET path` on a kept-alive connection: the answer's head (status line and headers) and
/// body, `None` if the connection closed or nothing came within 5 s.
async fn exchange(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    path: &str,
) -> Option<(String, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    ask(tls, request.into_bytes()).await
}

/// `POST path` of the JSON `body` on a kept-alive connection, as [`exchange`].
async fn post(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    path: &str,
    body: &[u8],
) -> Option<(String, String)> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    ask(tls, request).await
}

/// Sends `request` on a kept-alive connection: the answer's head and body, as [`exchange`].
async fn ask(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    request: Vec<u8>,
) -> Option<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let asked = async {
        tls.write_all(&request).await.ok()?;
        tls.flush().await.ok()?;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&seen).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = header(head, "content-length")?.parse().ok()?;
                if body.len() >= length {
                    return Some((head.to_string(), body.to_string()));
                }
            }
            let n = tls.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            seen.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(5), asked)
        .await
        .ok()
        .flatten()
}

/// The value of header `name` (lower case) in an answer's head.
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name)
            .then(|| value.trim().to_string())
    })
}

/// `GET /healthz` on a kept-alive connection: whether it was answered `ok`.
async fn healthz(tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> bool {
    get(tls, "/healthz").await.as_deref() == Some("ok")
}

/// Whether the server closed the connection (read returns the end, or an error).
async fn closed_by_server(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn at_the_cap_a_newcomer_takes_the_slot_of_the_oldest_idle_connection_of_the_greediest_peer()
{
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |a| {
        a.max_connections = 3;
        a.header_timeout_ms = 20_000;
    })
    .await;
    // A greedy client holds two idle keep-alive connections, another client one.
    let mut greedy_old = tls_from(&server, &pki.ca_pem, [127, 0, 0, 9])
        .await
        .unwrap();
    assert!(healthz(&mut greedy_old).await);
    let mut greedy_new = tls_from(&server, &pki.ca_pem, [127, 0, 0, 9])
        .await
        .unwrap();
    assert!(healthz(&mut greedy_new).await);
    let mut other = tls_from(&server, &pki.ca_pem, [127, 0, 0, 2])
        .await
        .unwrap();
    assert!(healthz(&mut other).await);

    // The server is full; a newcomer (the API server, say) is still served at once...
    let mut newcomer = tls_from(&server, &pki.ca_pem, [127, 0, 0, 1])
        .await
        .unwrap();
    assert!(healthz(&mut newcomer).await, "the newcomer was not served");
    // ... in the place of the greedy client's oldest idle connection, and of nobody else's.
    assert!(closed_by_server(&mut greedy_old).await);
    assert!(healthz(&mut greedy_new).await);
    assert!(healthz(&mut other).await);
    let metrics = get(&mut newcomer, "/metrics").await.unwrap();
    assert!(
        metrics.contains(r#"initializer_connections_closed_when_full_total{reason="evicted"} 1"#),
        "{metrics}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn at_the_cap_a_body_sent_slowly_is_closed_to_make_room() {
    use tokio::io::AsyncWriteExt;
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |a| {
        a.max_connections = 3;
        a.header_timeout_ms = 20_000;
        a.body_timeout_ms = 20_000;
    })
    .await;
    // A greedy client trickles two request bodies; another client holds an idle connection.
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut conn = tls_from(&server, &pki.ca_pem, [127, 0, 0, 9])
            .await
            .unwrap();
        conn.write_all(
            b"POST /initialize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\"",
        )
        .await
        .unwrap();
        conn.flush().await.unwrap();
        slow.push(conn);
    }
    let mut other = tls_from(&server, &pki.ca_pem, [127, 0, 0, 2])
        .await
        .unwrap();
    assert!(healthz(&mut other).await);

    // Full: the newcomer is served in the place of the greedy client's first body, which is
    // closed at once (not answered 408 after the body timeout).
    let mut newcomer = tls_from(&server, &pki.ca_pem, [127, 0, 0, 1])
        .await
        .unwrap();
    assert!(healthz(&mut newcomer).await, "the newcomer was not served");
    assert!(closed_by_server(&mut slow[0]).await);
    assert!(healthz(&mut other).await);
    drop(slow);
    server.shutdown().await;
}

#[tokio::test]
async fn a_peer_holding_its_share_of_a_full_server_is_refused_while_others_get_in() {
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |a| {
        a.max_connections = 2;
        a.max_connections_per_peer = 1;
        a.header_timeout_ms = 20_000;
    })
    .await;
    // Below the cap, one peer may hold more than its share.
    let mut first = tls_from(&server, &pki.ca_pem, [127, 0, 0, 9])
        .await
        .unwrap();
    assert!(healthz(&mut first).await);
    let mut second = tls_from(&server, &pki.ca_pem, [127, 0, 0, 9])
        .await
        .unwrap();
    assert!(healthz(&mut second).await);
    // Full, and that peer holds its share: its next connection is closed before the handshake
    // ends, and it pushes none of its own out.
    assert!(
        tls_from(&server, &pki.ca_pem, [127, 0, 0, 9])
            .await
            .is_err()
    );
    assert!(healthz(&mut first).await);
    // Another peer gets in.
    let mut other = tls_from(&server, &pki.ca_pem, [127, 0, 0, 1])
        .await
        .unwrap();
    assert!(healthz(&mut other).await);
    let metrics = get(&mut other, "/metrics").await.unwrap();
    assert!(
        metrics.contains(
            r#"initializer_connections_closed_when_full_total{reason="peer_holds_its_share"} 1"#
        ),
        "{metrics}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn an_update_review_of_two_3_mib_objects_is_answered_and_a_larger_one_gets_413() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = serving(tls.path(), cfg.path(), &pki, |_| {}).await;
    let config_map = |bytes: usize, value: &str| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "big", "namespace": "default"},
            "data": {"blob": value.repeat(bytes)}
        }))
        .unwrap()
    };
    // The API server stores objects up to 1.5 MiB (etcd) and accepts requests up to 3 MiB
    // per object; an UPDATE's review carries both the object and the old object.
    let three_mib = 3 * 1024 * 1024 - 1024;
    let update = review(&config_map(three_mib, "a")).update(&config_map(three_mib, "b"));
    let body = update.to_bytes();
    assert!(body.len() > 2 * three_mib, "{}", body.len());
    let mut conn = connect(&server, &pki.ca_pem).await.unwrap();
    let reply = conn.post(Bytes::from(body)).await.unwrap();
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let doc: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(doc["response"]["allowed"], true);

    let one_and_a_half_mib = 3 * 1024 * 1024 / 2;
    let update =
        review(&config_map(one_and_a_half_mib, "c")).update(&config_map(one_and_a_half_mib, "d"));
    let reply = conn.post(Bytes::from(update.to_bytes())).await.unwrap();
    assert_eq!(reply.status, 200);

    let huge = review(&config_map(8 * 1024 * 1024, "e")).to_bytes();
    let reply = conn.post(Bytes::from(huge)).await.unwrap();
    assert_eq!(reply.status, 413);
    server.shutdown().await;
}

/// Sends a review's head declaring `length` bytes and the first `sent` of them, then stops.
async fn start_body(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    length: usize,
    sent: usize,
) {
    use tokio::io::AsyncWriteExt;
    let head = format!(
        "POST /initialize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&vec![b' '; sent]).await.unwrap();
    tls.flush().await.unwrap();
}

/// Sends a review's head with a chunked body and `chunks` chunks of `size` bytes, then stops
/// (the server may close the connection meanwhile).
async fn start_chunked_body(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    chunks: usize,
    size: usize,
) {
    use tokio::io::AsyncWriteExt;
    let head = "POST /initialize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let chunk = [
        format!("{size:x}\r\n").into_bytes(),
        vec![b' '; size],
        b"\r\n".to_vec(),
    ]
    .concat();
    let _ = tls.write_all(head.as_bytes()).await;
    for _ in 0..chunks {
        if tls.write_all(&chunk).await.is_err() || tls.flush().await.is_err() {
            return;
        }
    }
}

/// The status of the answer that comes within `within`, `None` if none does.
async fn status_within(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    within: Duration,
) -> Option<u16> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0; 4096];
    let n = tokio::time::timeout(within, tls.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    String::from_utf8_lossy(&buf[..n])
        .strip_prefix("HTTP/1.1 ")?
        .get(..3)?
        .parse()
        .ok()
}

/// A value of the server's metrics (`name` with its labels, as the text shows it), read from
/// an address of its own.
async fn metric(server: &Server, ca_pem: &str, name: &str) -> Option<u64> {
    let mut conn = tls_from(server, ca_pem, [127, 0, 0, 200]).await.ok()?;
    let text = get(&mut conn, "/metrics").await?;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until the server holds `bytes` of request bodies (the gauge the budget keeps).
async fn holds(server: &Server, ca_pem: &str, bytes: usize) -> bool {
    eventually(Duration::from_secs(10), || async {
        metric(server, ca_pem, "initializer_request_body_bytes").await == Some(bytes as u64)
    })
    .await
}

const MIB: usize = 1024 * 1024;

/// The largest body the budgeted server takes.
const MAX_BODY: usize = 2 * MIB;

/// A server with a 64 Mi memory limit and 2 MiB bodies at most: 32 MiB of bodies at once, 8 MiB
/// per address (four of the largest).
async fn budgeted(tls: &Path, cfg: &Path, pki: &TestPki) -> Server {
    use kube_initializer::advanced::Tuning as _;
    pki.write(tls);
    std::fs::write(cfg.join("config.yaml"), "image: envoy:1\n").unwrap();
    let mut args = args(tls, cfg);
    args.memory_limit = Some(64 * MIB as u64);
    args.body_timeout_ms = 30_000;
    Initializer::<Config>::with_config("test")
        .max_request_bytes(MAX_BODY)
        .handle(sidecar)
        .bind(&args)
        .await
        .unwrap()
}

/// Opens a connection from `source` and sends a largest body but its last byte.
async fn hold_body(
    server: &Server,
    ca_pem: &str,
    source: [u8; 4],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut conn = tls_from(server, ca_pem, source).await.unwrap();
    start_body(&mut conn, MAX_BODY, MAX_BODY - 1).await;
    conn
}

#[tokio::test]
async fn a_peer_sending_large_bodies_holds_only_its_share_and_is_cut_off_for_others() {
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = budgeted(tls.path(), cfg.path(), &pki).await;
    let ca = pki.ca_pem.as_str();
    // Well below the connection cap, one address holds four largest bodies: its share.
    let mut held = Vec::new();
    for n in 1..=4 {
        held.push(hold_body(&server, ca, [127, 0, 0, 9]).await);
        assert!(holds(&server, ca, n * MAX_BODY).await, "body {n} not held");
    }
    // Its fifth is refused, and what it took is given back.
    let mut fifth = hold_body(&server, ca, [127, 0, 0, 9]).await;
    assert_eq!(
        status_within(&mut fifth, Duration::from_secs(10)).await,
        Some(503)
    );
    assert!(holds(&server, ca, 4 * MAX_BODY).await);
    // Another address (the API server) is served all along.
    let mut api_server = connect(&server, ca).await.unwrap();
    assert_eq!(
        injected_image(&mut api_server, "nginx").await.as_deref(),
        Some("envoy:1")
    );
    // Three more greedy addresses fill the budget ...
    for source in [2, 3, 4] {
        for _ in 0..4 {
            held.push(hold_body(&server, ca, [127, 0, 0, source]).await);
        }
    }
    assert!(holds(&server, ca, 16 * MAX_BODY).await);
    // ... and a newcomer's body cuts off an arriving body of an address holding the most, which
    // is answered 503, instead of being refused.
    let mut newcomer = hold_body(&server, ca, [127, 0, 0, 5]).await;
    let mut cut_off = 0;
    for conn in &mut held {
        if status_within(conn, Duration::from_millis(50)).await == Some(503) {
            cut_off += 1;
        }
    }
    assert_eq!(cut_off, 1, "one body makes room for one");
    assert!(holds(&server, ca, 16 * MAX_BODY).await);
    assert_eq!(
        status_within(&mut newcomer, Duration::from_millis(100)).await,
        None,
        "the newcomer's body is still being received"
    );
    // Everything a body took is given back when it ends.
    drop((held, fifth, newcomer));
    assert!(
        holds(&server, ca, 0).await,
        "the bodies that ended were not given back"
    );
    assert_eq!(
        metric(
            &server,
            ca,
            r#"initializer_invalid_requests_total{reason="over_budget"}"#
        )
        .await,
        Some(2)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_chunked_body_is_counted_as_it_arrives_and_refused_past_its_peers_share() {
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = budgeted(tls.path(), cfg.path(), &pki).await;
    let ca = pki.ca_pem.as_str();
    // 2 MiB without a declared length, four times (the address's share): each buffer grows by
    // doubling to 2 MiB, all counted.
    let mut first = Vec::new();
    for n in 1..=4 {
        let mut conn = tls_from(&server, ca, [127, 0, 0, 9]).await.unwrap();
        start_chunked_body(&mut conn, 2, MIB).await;
        assert!(holds(&server, ca, n * MAX_BODY).await);
        first.push(conn);
    }
    // The same address's next body is refused on its way.
    let mut over = tls_from(&server, ca, [127, 0, 0, 9]).await.unwrap();
    start_chunked_body(&mut over, 2, MIB).await;
    assert_eq!(
        status_within(&mut over, Duration::from_secs(10)).await,
        Some(503)
    );
    assert!(holds(&server, ca, 4 * MAX_BODY).await);
    // The first bodies are still being received; another address is served.
    assert_eq!(
        status_within(&mut first[0], Duration::from_millis(100)).await,
        None
    );
    let mut conn = connect(&server, ca).await.unwrap();
    assert_eq!(
        injected_image(&mut conn, "nginx").await.as_deref(),
        Some("envoy:1")
    );
    // A request still arriving would hold the shutdown for its grace period.
    drop(first);
    assert!(holds(&server, ca, 0).await);
    server.shutdown().await;
}

#[tokio::test]
async fn a_review_of_many_small_values_is_refused_before_it_is_decoded() {
    let (tls, cfg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = TestPki::new("one");
    let server = budgeted(tls.path(), cfg.path(), &pki).await;
    let ca = pki.ca_pem.as_str();
    // A Pod review of 1.9 MiB: as labels, about 170,000 small values and keys, which would cost
    // far more than the address's 8 MiB once decoded; as one annotation, a few.
    let review = |metadata: Value| -> Bytes {
        let pod: Pod = serde_json::from_value(json!({"metadata": metadata})).unwrap();
        Bytes::from(review(&pod).to_bytes())
    };
    let labels: serde_json::Map<String, Value> = (0..170_000)
        .map(|n| (format!("{n:x}"), Value::String(String::new())))
        .collect();
    let costly = review(json!({"name": "costly", "labels": labels}));
    let plain = review(json!({"name": "plain", "annotations": {"blob": "a".repeat(1_900_000)}}));
    assert!(
        costly.len() > MIB && costly.len() < MAX_BODY,
        "{}",
        costly.len()
    );
    let mut poster = connect(&server, ca).await.unwrap();
    let refused = poster.post(costly).await.unwrap();
    assert_eq!(
        refused.status,
        503,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert!(
        String::from_utf8_lossy(&refused.body).contains("decoding it would take more memory"),
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    let mut poster = connect(&server, ca).await.unwrap();
    let answered = poster.post(plain).await.unwrap();
    assert_eq!(answered.status, 200);
    assert!(holds(&server, ca, 0).await);
    server.shutdown().await;
}
