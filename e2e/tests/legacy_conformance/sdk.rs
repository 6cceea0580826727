//! The SDK's controller mode against both backends: the real `sidecar-initializer` binary
//! (`cargo build -p sidecar-initializer`), started with `--mode controller` and a kubeconfig,
//! initializes Deployments whose `pending[0]` is its name, as the reference walkthrough's
//! initializer did on 1.7.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, ensure};
use initializer_e2e::legacy::{deployments_path, pending_names, template_containers};
use initializer_e2e::paths;
use initializer_test_support::pki::TestPki;
use serde_json::{Value, json};

use crate::support::{JSON, configure, raw};
use crate::target::Target;

/// The walkthrough's initializer name.
const PENDING_NAME: &str = "sidecar.initializer.kubernetes.io";
/// The walkthrough's gate annotation.
const ANNOTATION: &str = "initializer.kubernetes.io/sidecar";

/// A running `sidecar-initializer --mode controller`, killed on drop.
struct Controller {
    _child: tokio::process::Child,
    log: PathBuf,
}

impl Controller {
    /// The last lines of its log, for failure messages.
    fn tail(&self) -> String {
        initializer_controlplane::component::last_lines(&self.log, 20)
    }
}

/// Registers the walkthrough's configuration (Deployments) and starts the controller with the
/// tutorial's config (`sidecar-nginx`), gate annotation required.
async fn start_sidecar_controller(t: &Target) -> anyhow::Result<Controller> {
    let deployments =
        json!([{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]);
    configure(
        t,
        &t.unique("sidecar"),
        json!([{"name": PENDING_NAME, "rules": deployments}]),
    )
    .await?;
    let tls = t.scratch().join("tls");
    let config = t.scratch().join("config");
    std::fs::create_dir_all(&tls)?;
    std::fs::create_dir_all(&config)?;
    TestPki::new("sidecar-initializer").write(&tls);
    std::fs::write(
        config.join("config.yaml"),
        "containers:\n- name: sidecar-nginx\n  image: nginx:1.8.1\n  imagePullPolicy: IfNotPresent\n",
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let log = t
        .scratch()
        .join(format!("sidecar-{}.log", t.backend().label()));
    let out = std::fs::File::create(&log)?;
    let binary = paths::binary("sidecar-initializer")?;
    let child = tokio::process::Command::new(binary)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--tls-dir")
        .arg(&tls)
        .arg("--config-dir")
        .arg(&config)
        .args(["--mode", "controller", "--pending-name", PENDING_NAME])
        .args(["--rules", &deployments.to_string()])
        .args(["--annotation", ANNOTATION, "--require-annotation"])
        .env("KUBECONFIG", t.kubeconfig())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .context("failed to start sidecar-initializer")?;
    Ok(Controller { _child: child, log })
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

/// Creates the Deployment with a plain (blocking) create; returns the answer and how long the
/// create took.
async fn blocking_create(t: &Target, object: Value) -> anyhow::Result<(u16, Value, Duration)> {
    let started = std::time::Instant::now();
    let (code, body) = raw(
        &t.client(),
        "POST",
        &deployments_path(t.namespace()),
        None,
        JSON,
        Some(object),
    )
    .await?;
    Ok((code, body, started.elapsed()))
}

pub async fn the_sidecar_controller_injects_into_a_blocked_deployment_create(
    t: &Target,
) -> anyhow::Result<()> {
    let controller = start_sidecar_controller(t).await?;
    let (code, body, took) = blocking_create(t, nginx("nginx", true)).await?;
    ensure!(
        code == 201,
        "the create answered {code} after {took:?}: {body}\nsidecar-initializer's log:\n{}",
        controller.tail()
    );
    ensure!(
        template_containers(&body) == ["nginx", "sidecar-nginx"],
        "containers {:?}: {body}",
        template_containers(&body)
    );
    ensure!(pending_names(&body).is_empty(), "{body}");
    eprintln!(
        "legacy conformance ({}): the annotated create came back injected after {took:?}",
        t.backend().label()
    );
    Ok(())
}

pub async fn the_sidecar_controller_leaves_a_deployment_without_the_annotation_untouched(
    t: &Target,
) -> anyhow::Result<()> {
    let controller = start_sidecar_controller(t).await?;
    let (code, body, took) = blocking_create(t, nginx("plain", false)).await?;
    ensure!(
        code == 201,
        "the create answered {code} after {took:?}: {body}\nsidecar-initializer's log:\n{}",
        controller.tail()
    );
    ensure!(
        template_containers(&body) == ["nginx"],
        "containers {:?}: {body}",
        template_containers(&body)
    );
    ensure!(pending_names(&body).is_empty(), "{body}");
    Ok(())
}
