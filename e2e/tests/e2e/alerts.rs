//! Alerts that fire: a real Prometheus (Debian's package) scrapes the operator's pods while an
//! initializer hangs, evaluating the shipped rules with a short `for`, and the deregistration
//! alert must fire, then resolve once the initializer is back.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use initializer_crds::images;
use initializer_e2e::fixtures::Health;
use initializer_e2e::ops;
use initializer_e2e::paths;
use initializer_e2e::prometheus::{Prometheus, Sample};
use initializer_e2e::runner::Ctx;

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT};

/// The `for` of every alert here, through the same parameters as the shipped minutes
/// (`initializer-operator monitoring --for-seconds`).
const FOR: Duration = Duration::from_secs(15);
/// Scrape and rule evaluation interval.
const INTERVAL: Duration = Duration::from_millis(500);
/// How often the scenario asks Prometheus.
const POLL: Duration = Duration::from_millis(100);
/// The operator's metrics port (`manifest::HTTP_PORT`).
const METRICS_PORT: u16 = 8080;
/// Slack for a scrape, an evaluation and a busy two-core machine.
const LATE: Duration = Duration::from_secs(10);
/// The alert under test.
const ALERT: &str = "InitializerDeregistered";

/// Freeze every pod of a registered initializer while Prometheus watches the operator: the
/// operator deregisters it within seconds, `InitializerDeregistered` goes pending as soon as
/// Prometheus scrapes that, fires `for` later, and resolves once the thawed initializer is
/// registered again. Prints freeze → pending, freeze → firing and thaw → resolved.
pub async fn deregistration_alert_fires_while_the_initializer_hangs(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let rules_dir = tempfile::tempdir().context("failed to create the rules directory")?;
    let operator = paths::binary(images::OPERATOR)?;
    let output = tokio::process::Command::new(&operator)
        .args(["monitoring", "--for-seconds", &FOR.as_secs().to_string()])
        .arg("--out")
        .arg(rules_dir.path())
        .output()
        .await
        .context("failed to run initializer-operator monitoring")?;
    ensure!(
        output.status.success(),
        "initializer-operator monitoring failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rules = rules_dir.path().join("initializer-operator.rules.yaml");

    let targets: Vec<String> = ctx
        .env
        .operator_pods()
        .await?
        .iter()
        .filter_map(|pod| pod.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("{ip}:{METRICS_PORT}"))
        .collect();
    ensure!(!targets.is_empty(), "the operator has no pod with an IP");
    let prometheus = Prometheus::start(ctx.env.backend.clone(), &targets, &rules, INTERVAL).await?;
    let result = watch_the_alert(&ctx, &prometheus, targets.len()).await;
    prometheus.stop().await;
    result
}

async fn watch_the_alert(ctx: &Ctx, prometheus: &Prometheus, targets: usize) -> anyhow::Result<()> {
    // Every operator replica is scraped, and exactly one leads.
    prometheus
        .wait_for(
            &format!(
                "count(up{{job=\"{}\"}} == 1) == {targets}",
                initializer_e2e::prometheus::JOB
            ),
            POLL,
            STEP_TIMEOUT,
        )
        .await?;
    prometheus
        .wait_for("sum(initializer_operator_leader) == 1", POLL, STEP_TIMEOUT)
        .await?;
    eprintln!("prometheus: scraping {targets} operator replica(s), one leads");

    let sidecar = common::registered_sidecar(ctx, "alerted", Health::default()).await?;
    let name = sidecar.name.clone();
    prometheus
        .wait_for(
            &format!("initializer_operator_registered{{initializer=\"{name}\"}} == 1"),
            POLL,
            STEP_TIMEOUT,
        )
        .await?;
    // While it was deploying it was not registered, so the alert may have gone pending; the
    // next evaluation after the scrape that saw it registered clears it.
    let alerts = format!("ALERTS{{alertname=\"{ALERT}\", initializer=\"{name}\"}}");
    wait_gone(prometheus, &alerts, STEP_TIMEOUT)
        .await
        .with_context(|| format!("{ALERT} should clear once {name} is registered"))?;

    common::random_phase(&sidecar.health()).await;
    let frozen_at = Instant::now();
    let frozen = common::freeze_all(ctx, &sidecar).await?;
    let watched = async {
        let deregistered = ops::wait_deregistered(&ctx.client(), &name, STEP_TIMEOUT).await?;
        let pending = wait_state(prometheus, &name, "pending", STEP_TIMEOUT).await?;
        let pending_at = frozen_at.elapsed();
        let firing = wait_state(prometheus, &name, "firing", FOR + STEP_TIMEOUT).await?;
        let firing_at = frozen_at.elapsed();
        anyhow::Ok((deregistered, pending, pending_at, firing, firing_at))
    }
    .await;
    let thawed_at = Instant::now();
    let thawed = common::thaw_all(ctx, &sidecar, &frozen).await;
    let (deregistered, _, pending_at, firing, firing_at) = watched?;
    thawed?;
    let deregistered_after = deregistered.duration_since(frozen_at);

    // It was clear at the freeze, so it cannot fire sooner than `for` after it; it should fire
    // about `for` after the deregistration (plus a scrape and an evaluation, on a busy machine).
    ensure!(
        firing_at >= FOR,
        "{ALERT} fired {firing_at:?} after the freeze, before its `for` ({FOR:?})"
    );
    ensure!(
        firing_at <= deregistered_after + FOR + LATE,
        "{ALERT} fired {firing_at:?} after the freeze, more than {LATE:?} after the deregistration ({deregistered_after:?}) plus its `for` ({FOR:?})"
    );
    let labels = &firing[0].labels;
    ensure!(
        labels.get("severity").map(String::as_str) == Some("critical"),
        "{ALERT} should be critical: {labels:?}"
    );

    // Thawed: registered again, and the alert resolves.
    ops::wait_registered(&ctx.client(), &name, REGISTER_TIMEOUT).await?;
    wait_gone(prometheus, &alerts, STEP_TIMEOUT).await?;
    let resolved_at = thawed_at.elapsed();
    eprintln!(
        "{name}: {ALERT} (for {FOR:?}, scrape and evaluation every {INTERVAL:?}): deregistered {:.2}s after the freeze, pending at {:.2}s, firing at {:.2}s; resolved {:.2}s after the thaw",
        deregistered_after.as_secs_f64(),
        pending_at.as_secs_f64(),
        firing_at.as_secs_f64(),
        resolved_at.as_secs_f64()
    );
    ctx.row.update(|row| {
        row.failure_to_deregistered = Some(deregistered_after);
    });
    Ok(())
}

/// Waits until Prometheus reports the alert for `initializer` in `state`.
async fn wait_state(
    prometheus: &Prometheus,
    initializer: &str,
    state: &str,
    timeout: Duration,
) -> anyhow::Result<Vec<Sample>> {
    prometheus
        .wait_for(
            &format!(
                "ALERTS{{alertname=\"{ALERT}\", initializer=\"{initializer}\", alertstate=\"{state}\"}}"
            ),
            POLL,
            timeout,
        )
        .await
}

/// Waits until `expr` returns no sample.
async fn wait_gone(prometheus: &Prometheus, expr: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let samples = prometheus.query(expr).await?;
        if samples.is_empty() {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{expr} still answered {samples:?} after {timeout:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}
