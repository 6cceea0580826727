//! Failure and recovery: a hung initializer, a crashed one, and one that comes back (and one
//! that flaps).

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use initializer_crds::{Initializer, Phase};
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::load::{self, CreateLoad};
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::timings::Missed;
use initializer_e2e::watch::{Change, Recorder};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT, s};

/// Slack on top of a computed budget for a busy two-core machine.
const MARGIN: Duration = Duration::from_secs(3);
/// How long the flapping initializer is frozen each time: past the default failure threshold
/// (two probes a second apart, plus the latency budget).
const FLAP_DOWN: Duration = Duration::from_secs(5);
/// How long it answers each time: long enough for the success threshold at the fast probe
/// interval (three probes 100 ms apart), so only the hold-down keeps it out.
const FLAP_UP: Duration = Duration::from_millis(1500);

/// Freeze every initializer pod (it accepts connections and never answers): at the first failed
/// probe the operator degrades the configuration (`failurePolicy: Ignore`, one-second timeout),
/// so creates stop failing; it removes it one failed probe later; after the thaw it registers it
/// again and reports, exactly, the creates that passed without the initializer meanwhile.
pub async fn hung_initializer_is_deregistered_within_budget(ctx: Ctx) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "hung", Health::default()).await?;
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "load")?;
    // A healthy baseline first: creates succeed and are injected.
    tokio::time::sleep(Duration::from_secs(1)).await;
    common::random_phase(&sidecar.health()).await;
    let frozen_at = Instant::now();
    let frozen_wall = k8s_openapi::jiff::Timestamp::now();
    let frozen = common::freeze_all(&ctx, &sidecar).await?;
    let result = measure_fail_open(&ctx, &sidecar, frozen_at).await;
    // The status while it is still frozen (once thawed it answers the next probe, 100 ms on).
    let while_frozen = ops::initializer(&ctx.client(), &sidecar.name).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let attempts = load.stop().await;
    let thawed = common::thaw_all(&ctx, &sidecar, &frozen).await;
    let deregistered_at = result?;
    thawed?;
    let initializer = while_frozen?;

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
    // On-call reads why from the Event: a frozen process's kernel still completes the TCP
    // connection, so the probe stalls in the TLS handshake; or, when the freeze caught a probe
    // in flight (likelier on a loaded machine), waiting for the answer.
    let degraded_note = ops::wait_event_about(
        &ctx.client(),
        &sidecar.name,
        "its Degraded Event".to_string(),
        STEP_TIMEOUT,
        |event| (event.reason.as_deref() == Some("Degraded")).then(|| event.note.clone()),
        |about| format!("{} event(s) about it, none Degraded", about.len()),
    )
    .await?
    .unwrap_or_default();
    ensure!(
        degraded_note.contains("no answer within the latency budget")
            && (degraded_note.contains("(in the TLS handshake)")
                || degraded_note.contains("(waiting for the answer)")),
        "the Degraded Event should say where the probe stalled: {degraded_note}"
    );
    let responding = ops::condition(&initializer, "Responding");
    ensure!(
        responding.is_some_and(|c| c.status == "False"),
        "a frozen initializer should be Responding=False: {}",
        ops::describe(&initializer)
    );
    let degraded = ops::condition(&initializer, "Degraded");
    ensure!(
        degraded.is_some_and(|c| c.status == "True"),
        "a removed initializer should be Degraded=True: {}",
        ops::describe(&initializer)
    );
    ensure!(
        initializer
            .status
            .as_ref()
            .and_then(|s| s.last_outage.as_ref())
            .is_some_and(|o| o.degraded_at.is_some() && o.deregistered_at.is_some()),
        "the status should record the outage's steps: {:?}",
        initializer.status.as_ref().map(|s| &s.last_outage)
    );

    // Thawed: registered again, and the creates that slipped through are counted exactly.
    ops::wait_registered(&ctx.client(), &sidecar.name, REGISTER_TIMEOUT).await?;
    check_missed(&ctx, &sidecar.name, frozen_wall, missed_creates(&attempts)).await
}

/// Creates that succeeded without the initializer's change.
pub fn missed_creates(attempts: &[load::Attempt]) -> usize {
    attempts.iter().filter(|a| a.outcome == Ok(false)).count()
}

/// Waits for the operator's count of missed initializations after `failed_at` and checks it
/// against what the harness saw.
pub async fn check_missed(
    ctx: &Ctx,
    name: &str,
    failed_at: k8s_openapi::jiff::Timestamp,
    actual: usize,
) -> anyhow::Result<()> {
    let missed = ops::wait_missed(&ctx.client(), name, failed_at, STEP_TIMEOUT).await?;
    ctx.row.update(|row| {
        row.missed = Some(Missed {
            reported: missed.count,
            actual,
        })
    });
    eprintln!(
        "{name}: missed initializations reported {} (examples {:?}), seen by the harness {actual}",
        missed.count, missed.examples
    );
    ensure!(
        usize::try_from(missed.count).ok() == Some(actual) && !missed.truncated,
        "the operator reported {} missed initialization(s) (truncated {}, unchecked {:?}), the harness saw {actual} creates pass without the initializer",
        missed.count,
        missed.truncated,
        missed.unchecked
    );
    Ok(())
}

/// When the configuration was first seen degraded after `failed_at`, if it was.
fn degraded_at(sidecar: &common::Sidecar, failed_at: Instant) -> Option<Instant> {
    sidecar
        .configurations
        .first_after(failed_at, |s| {
            s.change == Change::Modified && ops::is_degraded(&s.object)
        })
        .map(|s| s.at)
}

/// Waits for the configuration to go after `failed_at`; returns when it went.
async fn measure_fail_open(
    ctx: &Ctx,
    sidecar: &common::Sidecar,
    failed_at: Instant,
) -> anyhow::Result<Instant> {
    let removed = sidecar.removed_after(failed_at).await?;
    ops::wait_phase(
        &ctx.client(),
        &sidecar.name,
        Phase::Unresponsive,
        STEP_TIMEOUT,
    )
    .await?;
    Ok(removed.at)
}

/// How long after the configuration changes the API server's webhook informer may still use
/// the old one.
const SETTLE: Duration = Duration::from_millis(250);

/// Checks and records the fail-open figures of a failure at `failed_at`.
fn report_fail_open(
    ctx: &Ctx,
    sidecar: &common::Sidecar,
    attempts: &[load::Attempt],
    failed_at: Instant,
    deregistered_at: Instant,
) -> anyhow::Result<()> {
    let to_deregistered = deregistered_at - failed_at;
    let degraded = degraded_at(sidecar, failed_at);
    let stopped_failing = degraded.map_or(deregistered_at, |d| d.min(deregistered_at));
    let first_ok = load::first_success_after(attempts, failed_at).with_context(|| {
        format!(
            "no create succeeded after the failure; errors: {:?}",
            load::errors(attempts)
        )
    })?;
    let to_create_ok = first_ok.finished - failed_at;
    let failed = load::count_in(attempts, failed_at, Some(stopped_failing));
    ctx.row.update(|row| {
        row.failure_to_deregistered = Some(to_deregistered);
        row.failure_to_create_ok = Some(to_create_ok);
        row.failed_creates_failure = Some(failed);
        row.creates_stop_failing = Some(stopped_failing - failed_at);
        row.degraded = degraded.map(|d| d - failed_at);
    });
    eprintln!(
        "{}: degraded {} after the failure, deregistered {}, first create ok after {}, {}/{} creates started before the degradation failed",
        sidecar.name,
        degraded.map_or("never".to_string(), |d| s(d - failed_at)),
        s(to_deregistered),
        s(to_create_ok),
        failed.failed,
        failed.total
    );
    ensure!(
        degraded.is_some(),
        "the configuration was removed without being degraded first: {}",
        sidecar.configurations.summary()
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
    // Fail open: once degraded, creates wait at most the degraded timeout and pass.
    let late = load::count_in(attempts, stopped_failing + SETTLE, None);
    ensure!(
        late.failed == 0,
        "{}/{} creates started after the degradation failed: {:?}",
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
    let removed = sidecar.removed_after(killed_at).await;
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
    let failed = common::record_crash(&ctx, &attempts, killed_at, removed, back);
    ctx.row
        .update(|row| row.creates_stop_failing = Some(to_deregistered));
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

/// Thaw a frozen initializer: it is registered again within a second, no sooner than the
/// hold-down allows; injection resumes; and an initializer that keeps flapping is let back in
/// less and less often (the hold-down doubles), never in a storm.
pub async fn recovered_initializer_is_registered_again_without_a_storm(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "recover", Health::default()).await?;
    let health = sidecar.health();
    let period = Duration::from_secs(u64::try_from(health.period_seconds).unwrap_or(1));

    // Down, then up again.
    common::random_phase(&health).await;
    let frozen_at = Instant::now();
    let frozen = common::freeze_all(&ctx, &sidecar).await?;
    let removed = sidecar.removed_after(frozen_at).await;
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "load")?;
    let thawed_at = Instant::now();
    let thawed = common::thaw_all(&ctx, &sidecar, &frozen).await;
    let back = sidecar.back_after(thawed_at).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let attempts = load.stop().await;
    thawed?;
    let removed = removed?.at;
    let back = back?.at;
    let to_registered = back - thawed_at;
    let degraded = degraded_at(&sidecar, frozen_at);
    let left = degraded.unwrap_or(frozen_at);
    ctx.row.update(|row| {
        row.recovery_to_registered = Some(to_registered);
        row.failed_creates_recovery = Some(load::count_in(&attempts, thawed_at, Some(back)));
        row.degraded = degraded.map(|d| d - frozen_at);
        row.creates_stop_failing = Some(left.min(removed) - frozen_at);
        row.failure_to_deregistered = Some(removed - frozen_at);
    });
    // The hold-down (one period) counts from when the initializer left the path; a tenth of
    // slack for timer jitter.
    ensure!(
        back - left >= period.mul_f64(0.9),
        "registered again {} after it was degraded: sooner than the hold-down of {} allows",
        s(back - left),
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

    // Flapping: frozen long enough to be removed, thawed long enough to come back, again and
    // again. Without a hold-down every thaw would register it again (a storm of one
    // registration and one removal per cycle); with it, the hold-down doubles at every return,
    // so returns thin out.
    let flap_start = Instant::now();
    let cycles = 4;
    for _ in 0..cycles {
        let pods = common::freeze_all(&ctx, &sidecar).await?;
        tokio::time::sleep(FLAP_DOWN).await;
        common::thaw_all(&ctx, &sidecar, &pods).await?;
        tokio::time::sleep(FLAP_UP).await;
    }
    let flap_end = Instant::now();
    let seen: Vec<_> = sidecar
        .configurations
        .seen()
        .into_iter()
        .filter(|s| s.at >= flap_start && s.at < flap_end)
        .collect();
    let registrations = seen.iter().filter(|s| s.change == Change::Added).count();
    let deregistrations = seen.iter().filter(|s| s.change == Change::Deleted).count();
    // Each return, measured from the degradation that preceded it.
    let mut left = None;
    let mut gaps = Vec::new();
    for change in &seen {
        match change.change {
            Change::Modified if ops::is_degraded(&change.object) => {
                left.get_or_insert(change.at);
            }
            Change::Added => {
                if let Some(left) = left.take() {
                    gaps.push(change.at - left);
                }
            }
            _ => {}
        }
    }
    eprintln!(
        "{}: recovered in {}; while flapping for {}: {registrations} registration(s), {deregistrations} deregistration(s), returns {:?} after leaving",
        sidecar.name,
        s(to_registered),
        s(flap_end - flap_start),
        gaps.iter().map(|g| s(*g)).collect::<Vec<_>>()
    );
    ensure!(
        registrations < cycles && deregistrations <= registrations + 1,
        "{cycles} cycles of {} frozen and {} thawed caused {registrations} registration(s) and \
         {deregistrations} deregistration(s): a storm; {}",
        s(FLAP_DOWN),
        s(FLAP_UP),
        sidecar.configurations.summary()
    );
    // The recovery above left a one-period hold-down; each flap doubles it (2, 4, 8 periods).
    for (k, gap) in gaps.iter().enumerate() {
        let hold = period * 2u32.pow(u32::try_from(k).unwrap_or(0) + 1);
        ensure!(
            *gap >= hold.mul_f64(0.9),
            "return {} came {} after the initializer left the path, within the doubled hold-down of {}; {}",
            k + 1,
            s(*gap),
            s(hold),
            sidecar.configurations.summary()
        );
    }
    // And it settles: registered again after the flapping stops.
    ops::wait_registered(&ctx.client(), &sidecar.name, REGISTER_TIMEOUT).await?;
    Ok(())
}

/// The secret-guard example's fallback (`examples/secret-guard-initializer.yaml`) keeps its rule
/// in force while the guard is frozen: short Secrets are refused throughout (by the guard, then
/// by the API server evaluating the fallback), long ones pass once the configuration is
/// degraded, and the operator reports exactly the Secrets the guard never saw. Needs
/// ValidatingAdmissionPolicy from the API server (the real control plane; not the sandbox).
pub async fn fallback_refuses_short_secrets_while_the_guard_is_down(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    if let Err(e) = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .list(&ListParams::default().limit(1))
        .await
    {
        bail!(
            "this scenario needs ValidatingAdmissionPolicy, which {} does not serve: {e}",
            ctx.env.target.name()
        );
    }
    let example: Initializer = serde_saphyr::from_str(include_str!(
        "../../../examples/secret-guard-initializer.yaml"
    ))
    .context("failed to read examples/secret-guard-initializer.yaml")?;
    let workload_ns = common::workload_namespace(&ctx, "guard-init").await?;
    let target_ns = ctx.scope.target_namespace("guard-apps").await?;
    let name = ctx.scope.name("guard");
    let example_fields = json!({"rules": example.spec.rules, "fallback": example.spec.fallback});
    let initializer = common::secret_guard(&ctx, &name, &workload_ns, example_fields)?;
    let configurations = common::record_configurations(&ctx, &name);
    let label = name.clone();
    let bindings: Recorder<ValidatingAdmissionPolicyBinding> = Recorder::start(
        Api::all(client.clone()),
        watcher::Config::default(),
        move |b| {
            b.labels()
                .get(initializer_crds::constants::INITIALIZER_LABEL)
                .is_some_and(|v| *v == label)
        },
    );
    common::apply_until_registered(&ctx, &initializer).await?;
    ops::wait_pods_ready(&client, &workload_ns, &name, 2, STEP_TIMEOUT).await?;

    let secrets = Api::<Secret>::namespaced(client.clone(), &target_ns);
    let id = ctx.scope.id().to_string();
    let short = CreateLoad::start(
        secrets.clone(),
        common::LOAD_INTERVAL,
        {
            let id = id.clone();
            move |n| fixtures::secret(&format!("short-{id}-{n}"), "password", "hunter2")
        },
        |_| false,
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    common::random_phase(&initializer.spec.health_policy()).await;
    let frozen_at = Instant::now();
    let frozen_wall = k8s_openapi::jiff::Timestamp::now();
    let sidecar = common::Sidecar {
        name: name.clone(),
        initializer: initializer.clone(),
        workload_ns: workload_ns.clone(),
        target_ns: target_ns.clone(),
        configurations,
    };
    let frozen = common::freeze_all(&ctx, &sidecar).await?;
    // The guard never changes a Secret, so nothing marks what it checked; the long Secrets start
    // only once the freeze has landed, so every one admitted was admitted without the guard. A
    // create started during the freeze could be answered by the guard and finish after it.
    let long = CreateLoad::start(
        secrets,
        common::LOAD_INTERVAL,
        move |n| {
            fixtures::secret(
                &format!("long-{id}-{n}"),
                "password",
                "correct-horse-battery-staple",
            )
        },
        |_| false,
    );
    let in_force = bindings
        .wait_for("the fallback binding", frozen_at, STEP_TIMEOUT, |s| {
            s.change == Change::Added
        })
        .await;
    let removed = measure_fail_open(&ctx, &sidecar, frozen_at).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let short = short.stop().await;
    let long = long.stop().await;
    let thawed = common::thaw_all(&ctx, &sidecar, &frozen).await;
    let in_force = in_force?.at;
    let removed = removed?;
    thawed?;
    ops::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;
    let lifted = bindings
        .wait_for("the fallback to be lifted", removed, STEP_TIMEOUT, |s| {
            s.change == Change::Deleted
        })
        .await?;

    let admitted: Vec<&load::Attempt> = short.iter().filter(|a| a.succeeded()).collect();
    let by_fallback = short
        .iter()
        .filter_map(|a| a.outcome.as_ref().err())
        .filter(|e| e.contains("secret-guard fallback") && e.contains("password"))
        .count();
    let degraded = degraded_at(&sidecar, frozen_at);
    let stopped_failing = degraded.map_or(removed, |d| d.min(removed));
    ctx.row.update(|row| {
        row.fallback_in_force = Some(in_force - frozen_at);
        row.degraded = degraded.map(|d| d - frozen_at);
        row.creates_stop_failing = Some(stopped_failing - frozen_at);
        row.failure_to_deregistered = Some(removed - frozen_at);
        row.failed_creates_failure = Some(load::count_in(&long, frozen_at, Some(stopped_failing)));
        row.failure_to_create_ok =
            load::first_success_after(&long, frozen_at).map(|a| a.finished - frozen_at);
    });
    eprintln!(
        "{name}: fallback binding {} after the freeze, degraded {}, removed {}, lifted {} after the removal; {} short Secrets, {} admitted, {} refused by the fallback",
        s(in_force - frozen_at),
        degraded.map_or("never".to_string(), |d| s(d - frozen_at)),
        s(removed - frozen_at),
        s(lifted.at - removed),
        short.len(),
        admitted.len(),
        by_fallback
    );
    ensure!(
        admitted.is_empty(),
        "{} short Secret(s) were admitted during the outage although the fallback refuses them",
        admitted.len()
    );
    ensure!(
        by_fallback > 0,
        "no short Secret was refused by the fallback (naming the key): {:?}",
        load::errors(&short)
    );
    ensure!(
        stopped_failing >= in_force,
        "the configuration must fail open only once the fallback is in force: binding at {}, degraded or removed at {}",
        s(in_force - frozen_at),
        s(stopped_failing - frozen_at)
    );
    let late = load::count_in(&long, stopped_failing + SETTLE, None);
    ensure!(
        late.failed == 0,
        "{}/{} long Secrets started after the degradation failed: {:?}",
        late.failed,
        late.total,
        load::errors(&long)
    );
    let actual = long.iter().filter(|a| a.succeeded()).count();
    check_missed(&ctx, &name, frozen_wall, actual).await
}
