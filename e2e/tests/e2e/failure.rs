//! Failure and recovery: a hung initializer, a crashed one, and one that comes back (and one
//! that flaps).

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use initializer_crds::Phase;
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::load;
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::watch::Change;

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT, s};

/// Slack on top of a computed budget for a busy two-core machine.
const MARGIN: Duration = Duration::from_secs(3);
/// How long the flapping initializer is frozen each time: past the default failure threshold
/// (two probes a second apart, plus the latency budget).
const FLAP_DOWN: Duration = Duration::from_secs(5);
/// How long it answers each time: short of the default success threshold (three probes a
/// second apart).
const FLAP_UP: Duration = Duration::from_millis(1500);

/// Freeze every initializer pod (it accepts connections and never answers): the operator
/// removes the configuration within the health budget, and creates succeed again right after.
pub async fn hung_initializer_is_deregistered_within_budget(ctx: Ctx) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "hung", Health::default()).await?;
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "load")?;
    // A healthy baseline first: creates succeed and are injected.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let frozen_at = Instant::now();
    let frozen = common::freeze_all(&ctx, &sidecar).await?;
    let result = measure_fail_open(&ctx, &sidecar, frozen_at).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let attempts = load.stop().await;
    let thawed = common::thaw_all(&ctx, &sidecar, &frozen).await;
    let deregistered_at = result?;
    thawed?;

    let baseline: Vec<&load::Attempt> =
        attempts.iter().filter(|a| a.finished < frozen_at).collect();
    ensure!(
        !baseline.is_empty() && baseline.iter().all(|a| a.outcome == Ok(true)),
        "before the freeze every create should succeed with the sidecar: {} attempts, errors {:?}",
        baseline.len(),
        load::errors(&attempts)
    );
    report_fail_open(&ctx, &sidecar, &attempts, frozen_at, deregistered_at)?;
    let (reason, note) =
        ops::wait_warning_event(&ctx.client(), &sidecar.name, STEP_TIMEOUT).await?;
    eprintln!("{}: Warning Event {reason}: {note}", sidecar.name);
    let initializer = ops::initializer(&ctx.client(), &sidecar.name).await?;
    let responding = ops::condition(&initializer, "Responding");
    ensure!(
        responding.is_some_and(|c| c.status == "False"),
        "a frozen initializer should be Responding=False: {}",
        ops::describe(&initializer)
    );
    Ok(())
}

/// Waits for the configuration to go after `failed_at`; returns when it went.
async fn measure_fail_open(
    ctx: &Ctx,
    sidecar: &common::Sidecar,
    failed_at: Instant,
) -> anyhow::Result<Instant> {
    let removed = sidecar
        .configurations
        .wait_for(
            "the configuration to be removed",
            failed_at,
            STEP_TIMEOUT,
            |s| s.change == Change::Deleted,
        )
        .await?;
    ops::wait_phase(
        &ctx.client(),
        &sidecar.name,
        Phase::Unresponsive,
        STEP_TIMEOUT,
    )
    .await?;
    Ok(removed.at)
}

/// Checks and records the fail-open figures of a failure at `failed_at`.
fn report_fail_open(
    ctx: &Ctx,
    sidecar: &common::Sidecar,
    attempts: &[load::Attempt],
    failed_at: Instant,
    deregistered_at: Instant,
) -> anyhow::Result<()> {
    let to_deregistered = deregistered_at - failed_at;
    let first_ok = load::first_success_after(attempts, failed_at).with_context(|| {
        format!(
            "no create succeeded after the failure; errors: {:?}",
            load::errors(attempts)
        )
    })?;
    let to_create_ok = first_ok.finished - failed_at;
    let failed = load::count_in(attempts, failed_at, Some(deregistered_at));
    ctx.row.update(|row| {
        row.failure_to_deregistered = Some(to_deregistered);
        row.failure_to_create_ok = Some(to_create_ok);
        row.failed_creates_failure = Some(failed);
    });
    eprintln!(
        "{}: deregistered {} after the failure, first create ok after {}, {}/{} creates failed in between",
        sidecar.name,
        s(to_deregistered),
        s(to_create_ok),
        failed.failed,
        failed.total
    );
    let budget = common::probe_budget(&sidecar.health());
    ensure!(
        to_deregistered <= budget + MARGIN,
        "deregistered {} after the failure; the health budget is {} (+{} margin)",
        s(to_deregistered),
        s(budget),
        s(MARGIN)
    );
    ensure!(
        to_create_ok <= budget + MARGIN,
        "the first create succeeded {} after the failure; the health budget is {} (+{} margin)",
        s(to_create_ok),
        s(budget),
        s(MARGIN)
    );
    // Fail open: once deregistered, creates do not wait for the initializer at all.
    let settled = deregistered_at + Duration::from_millis(500);
    let late = load::count_in(attempts, settled, None);
    ensure!(
        late.failed == 0,
        "{}/{} creates started after the deregistration failed: {:?}",
        late.failed,
        late.total,
        load::errors(attempts)
    );
    Ok(())
}

/// Kill every initializer pod: deregistration follows the endpoints going to zero, much faster
/// than the probe path (here made slow on purpose: three failed probes five seconds apart).
pub async fn crashed_initializer_is_deregistered_by_its_endpoints(ctx: Ctx) -> anyhow::Result<()> {
    let health = Health {
        period_seconds: Some(5),
        failure_threshold: Some(3),
        ..Health::default()
    };
    let sidecar = common::registered_sidecar(&ctx, "crash", health).await?;
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "load")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed_at = Instant::now();
    common::kill_all(&ctx, &sidecar).await?;
    let removed = sidecar
        .configurations
        .wait_for(
            "the configuration to be removed",
            killed_at,
            STEP_TIMEOUT,
            |s| s.change == Change::Deleted,
        )
        .await;
    let back = match &removed {
        Ok(_) => ops::wait_registered(&ctx.client(), &sidecar.name, REGISTER_TIMEOUT)
            .await
            .map(|(_, at)| at),
        Err(_) => Ok(Instant::now()),
    };
    let attempts = load.stop().await;
    let removed = removed?.at;
    let back = back.context("the restarted initializer was never registered again")?;
    let to_deregistered = removed - killed_at;
    let failed = load::count_in(&attempts, killed_at, Some(removed));
    ctx.row.update(|row| {
        row.failure_to_deregistered = Some(to_deregistered);
        row.failure_to_create_ok =
            load::first_success_after(&attempts, killed_at).map(|a| a.finished - killed_at);
        row.failed_creates_failure = Some(failed);
        row.recovery_to_registered = Some(back - removed);
        row.failed_creates_recovery = Some(load::count_in(&attempts, removed, Some(back)));
    });
    eprintln!(
        "{}: deregistered {} after the kill ({}/{} creates failed), registered again {} later",
        sidecar.name,
        s(to_deregistered),
        failed.failed,
        failed.total,
        s(back - removed)
    );
    let probe_path = Duration::from_secs(10);
    ensure!(
        to_deregistered < probe_path,
        "deregistered {} after the kill: no faster than the probe path (failure threshold 3 × 5s, at \
         least {}), so the endpoints were not used",
        s(to_deregistered),
        s(probe_path)
    );
    Ok(())
}

/// Thaw a frozen initializer: it is registered again only after the success threshold, injection
/// resumes, and probes that flap cause no register/deregister storm.
pub async fn recovered_initializer_is_registered_again_without_a_storm(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "recover", Health::default()).await?;
    let health = sidecar.health();
    let period = Duration::from_secs(u64::try_from(health.period_seconds).unwrap_or(1));
    let successes = u32::try_from(health.success_threshold).unwrap_or(1);

    // Down, then up again.
    let frozen_at = Instant::now();
    let frozen = common::freeze_all(&ctx, &sidecar).await?;
    let removed = sidecar
        .configurations
        .wait_for(
            "the configuration to be removed",
            frozen_at,
            STEP_TIMEOUT,
            |s| s.change == Change::Deleted,
        )
        .await;
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "load")?;
    let thawed_at = Instant::now();
    let thawed = common::thaw_all(&ctx, &sidecar, &frozen).await;
    let back = sidecar
        .configurations
        .wait_for(
            "the configuration to come back",
            thawed_at,
            REGISTER_TIMEOUT,
            |s| s.change == Change::Added,
        )
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let attempts = load.stop().await;
    removed?;
    thawed?;
    let back = back?.at;
    let to_registered = back - thawed_at;
    ctx.row.update(|row| {
        row.recovery_to_registered = Some(to_registered);
        row.failed_creates_recovery = Some(load::count_in(&attempts, thawed_at, Some(back)));
    });
    // `successThreshold` good probes, `periodSeconds` apart, take at least (threshold - 1)
    // periods; a quarter of slack for timer jitter.
    let floor = (period * successes.saturating_sub(1)).mul_f64(0.75);
    ensure!(
        to_registered >= floor,
        "registered again {} after the thaw: sooner than {} good probes {} apart allow",
        s(to_registered),
        successes,
        s(period)
    );
    let injected_after = attempts
        .iter()
        .filter(|a| a.started >= back + Duration::from_millis(200));
    ensure!(
        injected_after.clone().all(|a| a.outcome == Ok(true)),
        "after re-registration every create should be injected again: {:?}",
        injected_after
            .map(|a| a.outcome.clone())
            .collect::<Vec<_>>()
    );
    let resumed = common::create_nginx(&ctx, &sidecar.target_ns, "after-recovery", true).await?;
    ensure!(
        fixtures::has_sidecar(&resumed),
        "injection did not resume after recovery"
    );

    // Flapping: frozen long enough to fail the failure threshold, thawed too briefly to meet
    // the success threshold, again and again. Exactly one deregistration (the first freeze) and
    // no registration may come of it; registering on every good probe would be a storm.
    let flap_start = Instant::now();
    let cycles = 4;
    for _ in 0..cycles {
        let pods = common::freeze_all(&ctx, &sidecar).await?;
        tokio::time::sleep(FLAP_DOWN).await;
        common::thaw_all(&ctx, &sidecar, &pods).await?;
        tokio::time::sleep(FLAP_UP).await;
    }
    let flap_end = Instant::now();
    let registrations = sidecar
        .configurations
        .seen()
        .iter()
        .filter(|s| s.at >= flap_start && s.at < flap_end && s.change == Change::Added)
        .count();
    let deregistrations = sidecar
        .configurations
        .seen()
        .iter()
        .filter(|s| s.at >= flap_start && s.at < flap_end && s.change == Change::Deleted)
        .count();
    eprintln!(
        "{}: recovered in {}; while flapping for {}: {registrations} registration(s), {deregistrations} deregistration(s)",
        sidecar.name,
        s(to_registered),
        s(flap_end - flap_start)
    );
    ensure!(
        registrations == 0 && deregistrations == 1,
        "{cycles} cycles of {} frozen and {} thawed caused {registrations} registration(s) and \
         {deregistrations} deregistration(s), expected none and one; {}",
        s(FLAP_DOWN),
        s(FLAP_UP),
        sidecar.configurations.summary()
    );
    // And it settles: registered again after the flapping stops.
    ops::wait_registered(&ctx.client(), &sidecar.name, REGISTER_TIMEOUT).await?;
    Ok(())
}
