//! The SDK's controller mode against both backends: the real `sidecar-initializer` and
//! `secret-guard-initializer` binaries (`cargo build -p sidecar-initializer -p
//! secret-guard-initializer`), started with `--mode controller` and a kubeconfig, initialize
//! objects whose `pending[0]` is their name, as the reference walkthrough's initializer did on
//! 1.7: the same handler code the webhook runs, a denial becoming a failure result.

use initializer_e2e::conformance::Scoped;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use initializer_controlplane::component::last_lines;
use initializer_e2e::legacy::{deployments_path, pending_names, template_containers};
use initializer_e2e::paths;
use initializer_test_support::pki::{TestPki, tls_connector};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{configure, deployments_rule, expect_message, get, post};
use crate::target::Target;

/// The walkthrough's initializer name.
const PENDING_NAME: &str = "sidecar.initializer.kubernetes.io";
/// The sidecar initializer's binary.
const SIDECAR: &str = "sidecar-initializer";
/// The secret guard's binary.
const SECRET_GUARD: &str = "secret-guard-initializer";
/// The SDK's mark on objects a handler ran on (`kube_initializer::mutate::INITIALIZED_BY_ANNOTATION`).
const MARK: &str = "initializer.dev/initialized-by";
/// The walkthrough's gate annotation.
const ANNOTATION: &str = "initializer.kubernetes.io/sidecar";

/// How long a controller may take to be ready: started, its configuration loaded and each of
/// its watches listed once.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `sidecar-initializer --mode controller`, killed on drop.
struct Controller {
    _child: tokio::process::Child,
    log: PathBuf,
}

impl Controller {
    /// The last lines of its log, for failure messages.
    fn tail(&self) -> String {
        last_lines(&self.log, 20)
    }
}

/// Registers a configuration with the one initializer `pending_name` on `rules`, then starts
/// `binary` in controller mode for it with a test TLS pair, a `config.yaml` of `config` and
/// `extra` arguments.
async fn start_controller(
    t: &Target,
    binary: &str,
    pending_name: &str,
    rules: &Value,
    config: &str,
    extra: &[&str],
) -> anyhow::Result<Controller> {
    configure(
        t,
        &t.unique(binary),
        json!([{"name": pending_name, "rules": rules}]),
    )
    .await?;
    let tls = t.scratch().join("tls");
    let config_dir = t.scratch().join("config");
    std::fs::create_dir_all(&tls)?;
    std::fs::create_dir_all(&config_dir)?;
    let pki = TestPki::new(binary);
    pki.write(&tls);
    std::fs::write(config_dir.join("config.yaml"), config)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let log = t.scratch().join(format!("{binary}-{}.log", t.label()));
    let out = std::fs::File::create(&log)?;
    let mut child = tokio::process::Command::new(paths::binary(binary)?)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--tls-dir")
        .arg(&tls)
        .arg("--config-dir")
        .arg(&config_dir)
        .args(["--mode", "controller", "--pending-name", pending_name])
        .args(["--rules", &rules.to_string()])
        .args(extra)
        .env("KUBECONFIG", t.kubeconfig())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("failed to start {binary}"))?;
    // A create made before the controller's watch has listed would spend the API server's
    // 30 s on the controller's start; the tests measure what it does once running.
    let connector = tls_connector(&pki.ca_pem);
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "{binary} exited ({status}) before it was ready:\n{}",
                last_lines(&log, 20)
            );
        }
        let answer = readyz(&connector, port).await;
        if matches!(answer, Ok(200)) {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{binary} not ready after {READY_TIMEOUT:?} (/readyz: {answer:?}):\n{}",
            last_lines(&log, 20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Controller { _child: child, log })
}

/// The status code of `GET /readyz` on the controller at `127.0.0.1:port`.
async fn readyz(connector: &tokio_rustls::TlsConnector, port: u16) -> anyhow::Result<u16> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let server = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let mut tls = connector.connect(server, tcp).await?;
    tls.write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await?;
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    while head.len() < "HTTP/1.1 200".len() {
        let read = tls.read(&mut buf).await?;
        ensure!(read > 0, "the connection closed after {head:?}");
        head.extend_from_slice(&buf[..read]);
    }
    let head = String::from_utf8_lossy(&head);
    head.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("no status line in {head:?}"))
}

/// The walkthrough's configuration (Deployments) and the sidecar initializer with the
/// tutorial's config (`sidecar-nginx`), gate annotation required.
async fn start_sidecar_controller(t: &Target) -> anyhow::Result<Controller> {
    start_controller(
        t,
        SIDECAR,
        PENDING_NAME,
        &json!([deployments_rule()]),
        "containers:\n- name: sidecar-nginx\n  image: nginx:1.8.1\n  imagePullPolicy: IfNotPresent\n",
        &["--annotation", ANNOTATION, "--require-annotation"],
    )
    .await
}

/// The walkthrough's nginx Deployment, with the gate annotation when `annotated`.
fn nginx(name: &str, annotated: bool) -> Value {
    let annotations = if annotated {
        json!({ANNOTATION: "true"})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.13"}]}
            }
        }
    })
}

/// Creates the Deployment with a plain (blocking) create, which must answer 201 Created (else
/// the failure shows the controller's log); returns the object and how long the create took.
async fn blocking_create(
    t: &Target,
    controller: &Controller,
    object: Value,
) -> anyhow::Result<(Value, Duration)> {
    let started = std::time::Instant::now();
    let (code, body) = post(&t.client(), &deployments_path(t.namespace()), object).await?;
    let took = started.elapsed();
    ensure!(
        code == 201,
        "the create answered {code} after {took:?}: {body}\nsidecar-initializer's log:\n{}",
        controller.tail()
    );
    Ok((body, took))
}

/// Fails unless the Deployment's pod template has exactly the containers `expected`.
fn expect_containers(deployment: &Value, expected: &[&str]) -> anyhow::Result<()> {
    ensure!(
        template_containers(deployment) == expected,
        "containers {:?}: {deployment}",
        template_containers(deployment)
    );
    Ok(())
}

pub async fn the_sidecar_controller_injects_into_a_blocked_deployment_create(
    t: &Target,
) -> anyhow::Result<()> {
    let controller = start_sidecar_controller(t).await?;
    let (body, took) = blocking_create(t, &controller, nginx("nginx", true)).await?;
    expect_containers(&body, &["nginx", "sidecar-nginx"])?;
    ensure!(pending_names(&body).is_empty(), "{body}");
    // Signed (`sidecar/t=<time>/<MAC>`, the MAC with the key of the test serving key), and
    // stamped with the object's creation: the controller handles stored objects.
    let created = body["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| t.as_second());
    let mark = body["metadata"]["annotations"][MARK].as_str();
    ensure!(
        created.is_some_and(|c| mark.is_some_and(|m| m.starts_with(&format!("sidecar/t={c}/")))),
        "the handler's signed mark is missing: {body}"
    );
    eprintln!(
        "legacy conformance ({}): the annotated create came back injected after {took:?}",
        t.label()
    );
    Ok(())
}

pub async fn the_sidecar_controller_leaves_a_deployment_without_the_annotation_untouched(
    t: &Target,
) -> anyhow::Result<()> {
    let controller = start_sidecar_controller(t).await?;
    let (body, _) = blocking_create(t, &controller, nginx("plain", false)).await?;
    expect_containers(&body, &["nginx"])?;
    ensure!(pending_names(&body).is_empty(), "{body}");
    ensure!(
        body["metadata"]["annotations"][MARK].is_null(),
        "the handler ran on an object out of scope: {body}"
    );
    Ok(())
}

/// An initializer that was down: creates wait, and the controller, once started, finds them by
/// its first list (with `includeUninitialized`) and initializes them.
pub async fn the_sidecar_controller_initializes_creates_that_waited_before_it_started(
    t: &Target,
) -> anyhow::Result<()> {
    // The configuration first, so that the create waits on the name.
    configure(
        t,
        &t.unique("early"),
        json!([{"name": PENDING_NAME, "rules": [deployments_rule()]}]),
    )
    .await?;
    let create = crate::support::create_in_background(
        t,
        deployments_path(t.namespace()),
        nginx("waiting", true),
    );
    let path = format!("{}/waiting", deployments_path(t.namespace()));
    crate::support::wait_pending(t, &path).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(
        !create.is_finished(),
        "the create answered with no initializer running"
    );
    let controller = start_sidecar_controller(t).await?;
    let (code, body) = crate::support::answer_of(create, Duration::from_secs(30)).await?;
    ensure!(
        code == 201,
        "the waiting create answered {code}: {body}\nsidecar-initializer's log:\n{}",
        controller.tail()
    );
    expect_containers(&body, &["nginx", "sidecar-nginx"])?;
    Ok(())
}

/// A denial becomes a failure result: the create fails with the handler's message (403
/// Forbidden) and the object is gone.
pub async fn a_denial_in_controller_mode_fails_the_create_with_the_handlers_message(
    t: &Target,
) -> anyhow::Result<()> {
    let name = "guard.initializer.example.com";
    let controller = start_controller(
        t,
        SECRET_GUARD,
        name,
        &json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}]),
        "",
        &[],
    )
    .await?;
    let secrets = format!("/api/v1/namespaces/{}/secrets", t.namespace());
    let secret = |name: &str, value: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
               "type": "Opaque", "stringData": {"password": value}})
    };
    let (code, body) = post(&t.client(), &secrets, secret("short", "hunter2")).await?;
    ensure!(
        code == 403,
        "the create of a short secret answered {code}: {body}\nsecret-guard's log:\n{}",
        controller.tail()
    );
    ensure!(body["reason"] == "Forbidden", "{body}");
    expect_message(
        &body,
        "secret \"short\" refused: every value must be at least 20 characters long, but key \"password\" has 7",
    )?;
    // kube-apiserver 1.13 deletes the object after the update that wrote the failure result, and
    // the waiting create answers as soon as it sees that update: the deletion may come a moment
    // after the answer.
    let gone_by = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (code, answer) = get(
            &t.client(),
            &format!("{secrets}/short?includeUninitialized=true"),
        )
        .await?;
        if code == 404 {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < gone_by,
            "the refused secret is still there 5 s after the create failed: {code} {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, body) = post(
        &t.client(),
        &secrets,
        secret("long", "a-value-well-over-twenty-characters"),
    )
    .await?;
    ensure!(code == 201, "the long secret: {code} {body}");
    Ok(())
}

/// 1.13's namespaces have no `kubernetes.io/metadata.name` label (1.21 added it); the SDK
/// gives every namespace that label, as the webhook backend's API servers do, so the selector
/// the operator passes (`NotIn` the excluded namespaces) means the same on both: an object in
/// an excluded namespace gets its name removed without the handler.
pub async fn a_namespace_selector_on_the_namespace_name_works_where_namespaces_lack_the_label(
    t: &Target,
) -> anyhow::Result<()> {
    let selector = json!({"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [t.namespace()]
    }]});
    let controller = start_controller(
        t,
        SIDECAR,
        PENDING_NAME,
        &json!([deployments_rule()]),
        "containers:\n- name: sidecar-nginx\n  image: nginx:1.8.1\n",
        &["--namespace-selector", &selector.to_string()],
    )
    .await?;
    let (body, _) = blocking_create(t, &controller, nginx("excluded", true)).await?;
    ensure!(
        template_containers(&body) == ["nginx"],
        "the excluded namespace's Deployment was injected: {body}"
    );
    ensure!(body["metadata"]["annotations"][MARK].is_null(), "{body}");
    Ok(())
}
