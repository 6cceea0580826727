//! Alerts that fire when and only when they should: a real Prometheus (Debian's package)
//! scrapes the operator's pods and evaluates the shipped rules with a short `for`. The
//! deregistration alert fires while an initializer hangs and resolves once it is back; the
//! stalled alert fires for a refused Initializer; and a preset moved into the API server, whose
//! webhook is deregistered on purpose, pages nobody.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use initializer_crds::images;
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::ops;
use initializer_e2e::paths;
use initializer_e2e::prometheus::{Prometheus, Sample};
use initializer_e2e::runner::Ctx;

use serde_json::json;

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT};
use crate::engine;

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
    let watching = Watching::start(&ctx).await?;
    let result = watch_the_alert(&ctx, &watching.prometheus).await;
    watching.stop().await;
    result
}

/// A refused Initializer pages as `InitializerStalled` once its `for` has passed; a preset the
/// operator moved into the API server never pages as `InitializerDeregistered`, although its
/// webhook configuration is gone and it is not suspended (what the rule once looked at alone).
pub async fn alerts_tell_a_refused_initializer_from_one_in_the_api_server(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let watching = Watching::start(&ctx).await?;
    let result = watch_stalled_and_in_api_server(&ctx, &watching.prometheus).await;
    watching.stop().await;
    result
}

/// Prometheus scraping every operator replica with the shipped rules at a short `for`.
struct Watching {
    prometheus: Prometheus,
    targets: usize,
    /// Holds the rules file while Prometheus reads it.
    _rules_dir: tempfile::TempDir,
}

impl Watching {
    async fn start(ctx: &Ctx) -> anyhow::Result<Self> {
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
        let prometheus =
            Prometheus::start(ctx.env.target.clone(), &targets, &rules, INTERVAL).await?;
        let watching = Self {
            prometheus,
            targets: targets.len(),
            _rules_dir: rules_dir,
        };
        // Every operator replica is scraped, and exactly one leads.
        let scraped = async {
            watching
                .prometheus
                .wait_for(
                    &format!(
                        "count(up{{job=\"{}\"}} == 1) == {}",
                        initializer_e2e::prometheus::JOB,
                        watching.targets
                    ),
                    POLL,
                    STEP_TIMEOUT,
                )
                .await?;
            watching
                .prometheus
                .wait_for("sum(initializer_operator_leader) == 1", POLL, STEP_TIMEOUT)
                .await
        }
        .await;
        if let Err(err) = scraped {
            watching.stop().await;
            return Err(err);
        }
        eprintln!(
            "prometheus: scraping {} operator replica(s), one leads",
            watching.targets
        );
        Ok(watching)
    }

    async fn stop(self) {
        self.prometheus.stop().await;
    }
}

async fn watch_the_alert(ctx: &Ctx, prometheus: &Prometheus) -> anyhow::Result<()> {
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

async fn watch_stalled_and_in_api_server(ctx: &Ctx, prometheus: &Prometheus) -> anyhow::Result<()> {
    let client = ctx.client();
    let preset = engine::preset_in_the_api_server(ctx).await?;
    let name = &preset.name;
    // Refused by the operator (its schema cannot know the operator's namespace), applied now so
    // that the whole of its `for` is watched.
    let refused = ctx.scope.name("refused");
    let initializer = fixtures::initializer(
        &refused,
        json!({
            "image": images::image("sidecar-initializer"),
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaces": {"include": [ctx.env.operator_namespace]},
        }),
    )?;
    ctx.scope.create_initializer(&initializer).await?;
    let refused_at = Instant::now();
    prometheus
        .wait_for(
            &format!(
                "initializer_operator_engine{{initializer=\"{name}\", engine=\"Policy\"}} == 1"
            ),
            POLL,
            STEP_TIMEOUT,
        )
        .await
        .context("the engine gauge should show the preset in the API server")?;
    let scraped_at = Instant::now();
    // Without the engine, the rule would page: no webhook registered, not suspended.
    let without_the_engine = format!(
        "(max by (initializer) (initializer_operator_registered{{initializer=\"{name}\"}}) == 0) \
         unless on (initializer) (max by (initializer) (initializer_operator_suspended) == 1)"
    );
    ensure!(
        !prometheus.query(&without_the_engine).await?.is_empty(),
        "{name} in the API server should show registered 0 and suspended 0: {without_the_engine}"
    );
    // Pending for a scrape or two at the move is harmless; firing is a false page.
    let deregistered = format!("ALERTS{{alertname=\"{ALERT}\", initializer=\"{name}\"}}");
    let firing =
        format!("ALERTS{{alertname=\"{ALERT}\", initializer=\"{name}\", alertstate=\"firing\"}}");
    // Meanwhile the refused Initializer's alert goes pending, then fires `for` later.
    let stalled = format!(
        "ALERTS{{alertname=\"InitializerStalled\", initializer=\"{refused}\", \
         alertstate=\"firing\"}}"
    );
    let mut stalled_seen: Option<(Duration, Vec<Sample>)> = None;
    while scraped_at.elapsed() < FOR + LATE {
        let samples = prometheus.query(&firing).await?;
        ensure!(
            samples.is_empty(),
            "{ALERT} fired for {name}, whose injection runs in the API server, {:?} after the \
             move was scraped: {samples:?}",
            scraped_at.elapsed()
        );
        if stalled_seen.is_none() {
            let samples = prometheus.query(&stalled).await?;
            if !samples.is_empty() {
                stalled_seen = Some((refused_at.elapsed(), samples));
            }
        }
        tokio::time::sleep(POLL).await;
    }
    ensure!(
        prometheus.query(&deregistered).await?.is_empty(),
        "{ALERT} is still pending for {name} {:?} after its move into the API server",
        scraped_at.elapsed()
    );

    let (stalled_at, stalled) = match stalled_seen {
        Some(seen) => seen,
        None => {
            let samples = prometheus
                .wait_for(&stalled, POLL, STEP_TIMEOUT)
                .await
                .context("InitializerStalled should fire for a refused Initializer")?;
            (refused_at.elapsed(), samples)
        }
    };
    ensure!(
        stalled_at >= FOR,
        "InitializerStalled fired {stalled_at:?} after the refused Initializer was applied, \
         before its `for` ({FOR:?})"
    );
    ensure!(
        prometheus
            .query(&format!(
                "ALERTS{{alertname=\"InitializerStalled\", initializer=\"{name}\"}}"
            ))
            .await?
            .is_empty(),
        "InitializerStalled should stay silent for {name}, which is in force"
    );
    let labels = &stalled[0].labels;
    ensure!(
        labels.get("reason").map(String::as_str) == Some("Refused")
            && labels.get("severity").map(String::as_str) == Some("warning"),
        "InitializerStalled should say Refused, as a warning: {labels:?}"
    );
    let described = ops::describe(&ops::initializer(&client, &refused).await?);
    eprintln!(
        "{refused}: InitializerStalled (for {FOR:?}) first seen firing {:.2}s after the apply ({described}); \
         {name}: {ALERT} silent for {:?} after its move into the API server was scraped",
        stalled_at.as_secs_f64(),
        FOR + LATE
    );
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
