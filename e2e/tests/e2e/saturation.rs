//! Saturation is not churn (issue 29): when the operator itself is starved of CPU, the probes it
//! could not finish are its own fault, not the initializer's, and a healthy initializer stays
//! registered.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use initializer_controlplane::signal::process_groups;
use initializer_crds::{Initializer, Phase};
use initializer_e2e::fixtures::Health;
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::starve::{Starved, Throttling};
use initializer_e2e::watch::{Change, Recorder};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::common::{self, s};

/// The CPU the operator's processes may use while starved: 5 ms every 500 ms (1 % of a core).
/// A probe needs more than that (a TLS handshake and a review), so it runs across several
/// periods and outlasts its one-second budget, and the operator stalls for most of each period:
/// what a machine too busy to run the operator does to it.
const QUOTA: Duration = Duration::from_millis(1);
const PERIOD: Duration = Duration::from_millis(500);
/// How long it is starved: within the operator's bound on excusing its own lag
/// (`lag::MAX_EXCUSED`, 10 s), after which a hung initializer is failed open all the same.
const STARVED: Duration = Duration::from_secs(8);
/// How long the operator runs freely afterwards before the verdict: several probe rounds.
const AFTERWARDS: Duration = Duration::from_secs(5);

/// Starve every operator replica of CPU (1 % of a core for 8 s) while a healthy initializer
/// serves creates: its configuration is neither degraded nor removed, its Initializer never
/// leaves Registered, every create is injected, and no pod restarts.
pub async fn starved_operator_fails_no_healthy_initializer_open(ctx: Ctx) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "starved", Health::default()).await?;
    let name = sidecar.name.clone();
    let statuses = Recorder::start(
        Api::<Initializer>::all(ctx.client()),
        watcher::Config::default(),
        move |i: &Initializer| i.name_any() == name,
    );
    let restarts_before = operator_restarts(&ctx).await?;
    let client = ctx.client();
    let workload_pods = || ops::workload_pods(&client, &sidecar.workload_ns, &sidecar.name);
    let initializer_restarts_before = restarts(&workload_pods().await?);
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "starved")?;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let starved_at = Instant::now();
    let starving = starve_operator(&ctx).await;
    let fed_at = Instant::now();
    tokio::time::sleep(AFTERWARDS).await;
    let attempts = load.stop().await;
    let (processes, throttling) = starving?;
    eprintln!(
        "{}: {processes} operator processes starved for {} ({} ms every {} ms; throttled in {} of {} periods), {} creates meanwhile",
        sidecar.name,
        s(fed_at - starved_at),
        QUOTA.as_millis(),
        PERIOD.as_millis(),
        throttling.throttled,
        throttling.periods,
        initializer_e2e::load::started_in(&attempts, starved_at, Some(fed_at)).count(),
    );

    let failed_open = sidecar.configurations.first_after(starved_at, |seen| {
        seen.change == Change::Deleted || ops::is_degraded(&seen.object)
    });
    let statuses_seen: Vec<String> = statuses
        .seen()
        .iter()
        .filter(|seen| seen.at >= starved_at)
        .map(|seen| {
            format!(
                "+{}: {}",
                s(seen.at - starved_at),
                ops::describe(&seen.object)
            )
        })
        .collect();
    ensure!(
        failed_open.is_none(),
        "a starved operator failed a healthy initializer open: its configuration was {:?}; {}; the Initializer's statuses since the starvation began:\n{}",
        failed_open.map(|seen| seen.change),
        sidecar.configurations.summary(),
        statuses_seen.join("\n")
    );
    let left = statuses.first_after(starved_at, |seen| {
        seen.object.status.as_ref().and_then(|s| s.phase.as_ref()) != Some(&Phase::Registered)
    });
    ensure!(
        left.is_none(),
        "the Initializer left Registered while only the operator was starved: {}",
        left.map(|seen| ops::describe(&seen.object))
            .unwrap_or_default()
    );
    let missed: Vec<_> = attempts
        .iter()
        .filter(|a| a.outcome != Ok(true))
        .map(|a| &a.outcome)
        .collect();
    ensure!(
        !attempts.is_empty() && missed.is_empty(),
        "every create should have been injected: {} of {} were not: {missed:?}",
        missed.len(),
        attempts.len()
    );
    let restarts_after = operator_restarts(&ctx).await?;
    ensure!(
        restarts_after == restarts_before,
        "the operator's liveness probe restarted it while starved: restarts {restarts_before} → {restarts_after}"
    );
    let initializer_restarts = restarts(&workload_pods().await?);
    ensure!(
        initializer_restarts == initializer_restarts_before,
        "the initializer's pods restarted: {initializer_restarts_before} → {initializer_restarts}"
    );
    Ok(())
}

/// Holds every operator replica under the CPU quota for [`STARVED`]; returns how many
/// processes it held and how often the quota held them back. They run freely again when it returns, whatever happened.
async fn starve_operator(ctx: &Ctx) -> anyhow::Result<(usize, Throttling)> {
    let groups: Vec<i32> = ctx
        .env
        .operator_pods()
        .await?
        .iter()
        .flat_map(process_groups)
        .collect();
    ensure!(
        !groups.is_empty(),
        "no running operator container to starve"
    );
    let starved = Starved::start(
        &format!("initializer-e2e-{}", ctx.scope.id()),
        &groups,
        QUOTA,
        PERIOD,
    )
    .context("failed to starve the operator")?;
    tokio::time::sleep(STARVED).await;
    let throttling = starved.throttling()?;
    // The scenario's premise: the operator wanted more CPU than the quota gave it, most of the
    // time. Were it idle enough to fit, nothing would have been shown.
    ensure!(
        throttling.throttled * 2 >= throttling.periods && throttling.throttled > 0,
        "the quota hardly held the operator back ({throttling:?}): it was not starved"
    );
    Ok((starved.pids().len(), throttling))
}

/// Container restarts of the operator's pods.
async fn operator_restarts(ctx: &Ctx) -> anyhow::Result<i32> {
    Ok(restarts(&ctx.env.operator_pods().await?))
}

/// Container restarts of `pods`.
fn restarts(pods: &[Pod]) -> i32 {
    pods.iter()
        .flat_map(|pod| pod.status.iter())
        .flat_map(|status| status.container_statuses.iter().flatten())
        .map(|container| container.restart_count)
        .sum()
}
