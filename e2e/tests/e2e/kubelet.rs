//! What only a real kubelet and container runtime show (kind): `kubectl port-forward`, `logs`
//! and `exec` into the images users deploy, the initializer pods' security context under the
//! `restricted` Pod Security level, and creates that keep working through a rolling update of an
//! initializer and a drain of the node it runs on.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use initializer_crds::images;
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::load::{self, Attempt};
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::timings::CreateCount;
use initializer_e2e::wait::Check;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT, Sidecar, kubectl, kubectl_both, s};

/// One pod of the sidecar initializer.
async fn first_pod(ctx: &Ctx, sidecar: &Sidecar) -> anyhow::Result<String> {
    sidecar
        .pods(ctx)
        .await?
        .into_iter()
        .next()
        .context("the initializer has no pod")
}

/// The caBundle the operator registered for the Initializer `name` (PEM).
async fn ca_bundle(ctx: &Ctx, name: &str) -> anyhow::Result<Vec<u8>> {
    let configurations = ops::configurations_of(&ctx.client(), name).await?;
    let configuration: &MutatingWebhookConfiguration = configurations
        .first()
        .with_context(|| format!("Initializer {name} has no configuration"))?;
    configuration
        .webhooks
        .iter()
        .flatten()
        .find_map(|w| w.client_config.ca_bundle.clone())
        .map(|b| b.0)
        .with_context(|| format!("the configuration of {name} has no caBundle"))
}

/// `kubectl port-forward` to an initializer pod reaches `/healthz` over TLS, verified with the
/// registered CA for the Service's name: the SDK serves the pod's loopback, where a real
/// kubelet's port-forward connects.
pub async fn port_forward_reaches_an_initializer_pod(ctx: Ctx) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "portfwd", Health::default()).await?;
    let pod = first_pod(&ctx, &sidecar).await?;
    let mut forward = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(ctx.env.kubeconfig_path())
        .args(["-n", &sidecar.workload_ns, "port-forward"])
        .arg(format!("pod/{pod}"))
        .arg(format!(
            ":{}",
            initializer_crds::constants::INITIALIZER_PORT
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("failed to start kubectl port-forward")?;
    let started = Instant::now();
    let mut lines = BufReader::new(forward.stdout.take().context("no stdout")?).lines();
    // "Forwarding from 127.0.0.1:40123 -> 8443"
    let port = tokio::time::timeout(STEP_TIMEOUT, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                let port = rest.split_whitespace().next().unwrap_or_default();
                return Ok::<_, anyhow::Error>(port.parse::<u16>()?);
            }
        }
        bail!("kubectl port-forward ended before forwarding")
    })
    .await
    .context("kubectl port-forward did not start within the step timeout")??;
    let ca = tempfile::NamedTempFile::new().context("failed to create a file for the CA")?;
    std::fs::write(ca.path(), ca_bundle(&ctx, &sidecar.name).await?)?;
    let host = format!("{}.{}.svc", sidecar.name, sidecar.workload_ns);
    let asked = Instant::now();
    let output = Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--fail",
            "--max-time",
            "10",
            "--cacert",
        ])
        .arg(ca.path())
        .arg("--resolve")
        .arg(format!("{host}:{port}:127.0.0.1"))
        .arg(format!("https://{host}:{port}/healthz"))
        .output()
        .await
        .context("failed to run curl")?;
    let answered = asked.elapsed();
    let _ = forward.kill().await;
    ensure!(
        output.status.success(),
        "GET /healthz through kubectl port-forward to {pod} failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    eprintln!(
        "{}: /healthz of {pod} through kubectl port-forward answered {:?} in {} ({} after the forward started)",
        sidecar.name,
        String::from_utf8_lossy(&output.stdout).trim(),
        s(answered),
        s(started.elapsed())
    );
    Ok(())
}

/// `kubectl logs` and `kubectl exec` work on the operator and on an initializer, both
/// distroless (no shell): exec runs the binary's own `--version`.
pub async fn logs_and_exec_reach_the_operator_and_an_initializer(ctx: Ctx) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "logsexec", Health::default()).await?;
    let version = images::TAG;
    let initializer_pod = first_pod(&ctx, &sidecar).await?;
    let operator_pod = ctx
        .env
        .operator_pods()
        .await?
        .into_iter()
        .next()
        .context("the operator has no pod")?
        .name_any();
    let operator_ns = ctx.env.operator_namespace.clone();
    for (namespace, pod, says) in [
        (&sidecar.workload_ns, &initializer_pod, "serving"),
        (&operator_ns, &operator_pod, "initializer"),
    ] {
        let logs = kubectl(&ctx, &["-n", namespace, "logs", pod, "--tail=200"]).await?;
        ensure!(
            logs.contains(says),
            "kubectl logs {namespace}/{pod} does not mention {says:?}:\n{logs}"
        );
        let asked = Instant::now();
        let printed = kubectl(
            &ctx,
            &[
                "-n",
                namespace,
                "exec",
                pod,
                "--",
                "/usr/local/bin/app",
                "--version",
            ],
        )
        .await?;
        ensure!(
            printed.trim().ends_with(version),
            "kubectl exec {namespace}/{pod} -- app --version printed {printed:?}, not version {version}"
        );
        eprintln!(
            "{namespace}/{pod}: {} log lines, exec --version {:?} in {}",
            logs.lines().count(),
            printed.trim(),
            s(asked.elapsed())
        );
        // No shell in the image: exec of one is refused by the runtime.
        let shell = kubectl_both(
            &ctx,
            &["-n", namespace, "exec", pod, "--", "/bin/sh", "-c", "true"],
        )
        .await;
        ensure!(
            shell.is_err(),
            "{namespace}/{pod} has a shell: the image is not the distroless runtime"
        );
    }
    Ok(())
}

/// An Initializer deployed into a namespace that enforces Pod Security `restricted` runs: the
/// runtime accepts its pods' security context (non-root, read-only root filesystem, no
/// capabilities, RuntimeDefault seccomp), and the API server has no warning for its pod template
/// or for the operator's.
pub async fn restricted_pod_security_runs_initializers_without_warnings(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let workload_ns = common::workload_namespace(&ctx, "restricted-init").await?;
    let level = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    }}});
    Api::<Namespace>::all(ctx.client())
        .patch(&workload_ns, &PatchParams::default(), &Patch::Merge(&level))
        .await
        .with_context(|| format!("failed to label {workload_ns} restricted"))?;
    let target_ns = ctx.scope.target_namespace("restricted-apps").await?;
    let name = ctx.scope.name("restricted");
    let initializer = common::default_sidecar(&ctx, &name, &workload_ns)?;
    let applied = Instant::now();
    ctx.scope.create_initializer(&initializer).await?;
    ops::wait_registered(&ctx.client(), &name, REGISTER_TIMEOUT).await?;
    let registered = applied.elapsed();
    ctx.row.update(|row| row.to_registered = Some(registered));
    ops::wait_pods_ready(&ctx.client(), &workload_ns, &name, 2, STEP_TIMEOUT).await?;

    // The same templates, dry-run as pods in a restricted namespace: no warning at all.
    let initializer_template = template_as_pod(
        &ops::workload_deployment(&ctx.client(), &workload_ns, &name)
            .await?
            .context("the initializer's Deployment is gone")?,
        &workload_ns,
    )?;
    let operator = initializer_e2e::install::operator_deployment(&ctx.client())
        .await?
        .context("the operator's Deployment is gone")?;
    let operator_template = template_as_pod(&operator, &workload_ns)?;
    for (what, pod) in [
        ("the initializer's pod template", initializer_template),
        ("the operator's pod template", operator_template),
    ] {
        let file = tempfile::NamedTempFile::new()?;
        std::fs::write(file.path(), serde_json::to_vec(&pod)?)?;
        let path = file.path().to_string_lossy().into_owned();
        let (_, warnings) = kubectl_both(
            &ctx,
            &["create", "--dry-run=server", "-o", "name", "-f", &path],
        )
        .await?;
        ensure!(
            warnings.trim().is_empty(),
            "{what} draws warnings under Pod Security restricted: {}",
            warnings.trim()
        );
    }
    // And a create the initializer intercepts still works in its target namespace.
    let created = common::create_nginx(&ctx, &target_ns, "web", true).await?;
    ensure!(
        fixtures::has_sidecar(&created),
        "the sidecar was not injected: {:?}",
        fixtures::template_containers(&created)
    );
    eprintln!(
        "{name}: registered {} after apply in a namespace enforcing restricted, 2 pods ready, no warnings",
        s(registered)
    );
    Ok(())
}

/// A Pod with `deployment`'s template, in `namespace`, named after it. Its service account is
/// the namespace's default one: Pod Security does not look at it, and the operator's own does
/// not exist outside the operator's namespace.
fn template_as_pod(deployment: &Deployment, namespace: &str) -> anyhow::Result<serde_json::Value> {
    let mut template = deployment.spec.template.clone();
    if let Some(spec) = template.spec.as_mut() {
        spec.service_account_name = None;
        spec.service_account = None;
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{}-template", deployment.name_any()),
            "namespace": namespace,
            "labels": template.metadata.as_ref().and_then(|m| m.labels.clone()),
        },
        "spec": template.spec,
    }))
}

/// While creates flow every [`common::LOAD_INTERVAL`], the initializer is rolled (a new pod
/// template), then the node holding one of its pods is drained with `kubectl drain` (evictions
/// the PodDisruptionBudget paces): no create fails and every one is initialized.
pub async fn rolling_update_and_drain_lose_no_create(ctx: Ctx) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "rollout", Health::default()).await?;
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "flow")?;
    // Creates flowing before anything moves.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. A rolling update: an env var the operator passes to the pods changes their template.
    let rolled_at = Instant::now();
    let patch = json!({"spec": {"env": [{"name": "E2E_ROLLOUT", "value": "1"}]}});
    Api::<initializer_crds::Initializer>::all(ctx.client())
        .patch(
            &sidecar.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .context("failed to change the Initializer's env")?;
    wait_rolled_out(&ctx, &sidecar, "E2E_ROLLOUT").await?;
    let rolled = rolled_at.elapsed();
    // The old pods' shutdown delay, and the load's last creates, settle.
    tokio::time::sleep(Duration::from_secs(6)).await;

    // 2. Drain the node of one of its pods, then let it take pods again.
    let pods = ops::workload_pods(&ctx.client(), &sidecar.workload_ns, &sidecar.name).await?;
    let node = pods
        .iter()
        .find_map(|p| p.spec.as_ref()?.node_name.clone())
        .context("no initializer pod is on a node")?;
    let drained_at = Instant::now();
    let drained = kubectl(
        &ctx,
        &[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
        ],
    )
    .await;
    let drain_took = drained_at.elapsed();
    let uncordoned = kubectl(&ctx, &["uncordon", &node]).await;
    drained?;
    uncordoned?;
    ops::wait_pods_ready(
        &ctx.client(),
        &sidecar.workload_ns,
        &sidecar.name,
        2,
        REGISTER_TIMEOUT,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let attempts = load.stop().await;

    let during_rollout = load::count_in(&attempts, rolled_at, Some(drained_at));
    let during_drain = load::count_in(&attempts, drained_at, None);
    let missed = |from, to| {
        load::started_in(&attempts, from, to)
            .filter(|a| a.outcome == Ok(false))
            .count()
    };
    let (missed_rollout, missed_drain) = (
        missed(rolled_at, Some(drained_at)),
        missed(drained_at, None),
    );
    ctx.row.update(|row| {
        row.failed_creates_failure = Some(CreateCount {
            failed: during_rollout.failed + during_drain.failed,
            total: during_rollout.total + during_drain.total,
        });
    });
    eprintln!(
        "{}: rolled out in {} ({}/{} creates failed, {missed_rollout} not initialized); node {node} drained in {} ({}/{} failed, {missed_drain} not initialized)",
        sidecar.name,
        s(rolled),
        during_rollout.failed,
        during_rollout.total,
        s(drain_took),
        during_drain.failed,
        during_drain.total
    );
    let failures: Vec<&Attempt> = attempts.iter().filter(|a| !a.succeeded()).collect();
    ensure!(
        failures.is_empty(),
        "{} creates failed during the rollout and the drain; the first: {:?}",
        failures.len(),
        failures.first().map(|a| &a.outcome)
    );
    ensure!(
        missed_rollout + missed_drain == 0,
        "{} creates were not initialized",
        missed_rollout + missed_drain
    );
    Ok(())
}

/// Waits until every ready pod of the initializer carries the env var `marker` and the old
/// ones are gone.
async fn wait_rolled_out(ctx: &Ctx, sidecar: &Sidecar, marker: &str) -> anyhow::Result<()> {
    initializer_e2e::wait::until(
        format!("the rollout of {}", sidecar.name),
        REGISTER_TIMEOUT,
        || async {
            let pods =
                ops::workload_pods(&ctx.client(), &sidecar.workload_ns, &sidecar.name).await?;
            let rolled = pods.len() == 2
                && pods.iter().all(|p| {
                    ops::pod_ready(p)
                        && p.spec
                            .iter()
                            .flat_map(|s| &s.containers)
                            .any(|c| c.env.iter().flatten().any(|e| e.name == marker))
                });
            Ok(if rolled {
                Check::Done(())
            } else {
                Check::Pending(ops::pod_states(&pods))
            })
        },
    )
    .await
}
