//! A benchmark, not a test (ignored unless asked for: `make bench-kind` runs it on kind, a real
//! pod network): what an Initializer costs the creates it does not change, and a preset in the
//! API server against the same preset as a webhook. It prints its tables and fails only when it
//! cannot measure, or when what it measures is wrong (a create changed that should not be, one
//! not injected that should be, a webhook call for a create its gate leaves alone, a gate
//! evaluated for a create outside its namespaces).
//!
//! Every create is a server-side dry run (admission runs in full, nothing is stored or
//! scheduled), one after another from this process, as `kubectl create --dry-run=server` makes
//! them. The two sides of each comparison are interleaved create by create, so that a machine
//! that slows down slows both: the gate's in two namespaces, one that no Initializer covers and
//! the sidecar's own (its webhook registered throughout), the engines' in two namespaces, one per
//! engine. `E2E_BENCH_ONLY` (`gate` or `engines`) makes one comparison alone, with only its own
//! Initializers on the cluster. The comparisons run `E2E_BENCH_RUNS` times (3 unless set) on the
//! same Initializers, each run printed, then every run's creates pooled: one run's p99 is the
//! tenth slowest of 1,000 creates, too few to tell a few per cent apart on a shared machine. The
//! pooled changes come with the interval that the middle 95 % of paired resamples fall in
//! ([`Latencies::change`]): a change is shown within a bound only when that whole interval is.

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use initializer_crds::{EngineInForce, Phase};
use initializer_e2e::install::ENGINE_LABEL;
use initializer_e2e::runner::Ctx;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::{fixtures, ops};
use initializer_test_support::latency::{Change, Latencies, RESAMPLES};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT};
use crate::injection::webhook_counter;

/// Creates on each side of each comparison, in each run.
const CREATES: usize = 1_000;
/// Untimed creates before the timed ones, on both sides.
const WARM_UP: usize = 20;
/// The API server's count of its calls to a webhook, by the webhook's name.
const CALLS: &str = "apiserver_admission_webhook_request_total";
/// The API server's count of the calls a webhook's `matchConditions` spared, by its name.
const EXCLUSIONS: &str = "apiserver_admission_match_condition_exclusions_total";
/// The label both presets inject.
const INJECTED: &str = "e2e.initializer.dev/bench-injected";
/// What the gate may add to a create it leaves alone, p50 and p99, in per cent of the same create
/// with no Initializer: the goal the benchmarks page reports against.
const GATE_BOUND: f64 = 5.0;
/// How many times the comparisons run, unless `E2E_BENCH_RUNS` says.
const DEFAULT_RUNS: usize = 3;
/// The percentiles each table and change reports.
const PERCENTILES: [u32; 2] = [50, 99];
/// The head of every table.
const TABLE_HEAD: &str = "| creates | p50 | p99 | webhook calls |\n|---|---|---|---|\n";

pub async fn create_latency_with_gates_and_engines(ctx: Ctx) -> anyhow::Result<()> {
    let runs = match std::env::var("E2E_BENCH_RUNS") {
        Ok(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("E2E_BENCH_RUNS={text:?} is not a positive count"))?,
        Err(_) => DEFAULT_RUNS,
    };
    let (gate_on, engines_on) = match std::env::var("E2E_BENCH_ONLY").as_deref() {
        Err(_) => (true, true),
        Ok("gate") => (true, false),
        Ok("engines") => (false, true),
        Ok(other) => bail!("E2E_BENCH_ONLY={other:?} is neither gate nor engines"),
    };
    let gate_ready = if gate_on {
        let sidecar = common::registered_sidecar(&ctx, "bench-gate", Default::default()).await?;
        let outside = ctx.scope.namespace("bench-outside", &[]).await?;
        Some((sidecar, outside))
    } else {
        None
    };
    let engines_ready = if engines_on {
        Some(engines_in_force(&ctx).await?)
    } else {
        None
    };
    let (mut gate, mut engines) = (Gate::default(), Engines::default());
    let (mut gate_runs, mut engine_runs) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        let mut table = TABLE_HEAD.to_owned();
        if let Some((sidecar, outside)) = &gate_ready {
            let this_run =
                gate_side_by_side(&ctx, &sidecar.name, outside, &sidecar.target_ns).await?;
            table += &this_run.rows();
            gate_runs.push(percent_changes(this_run.sides()));
            gate.absorb(this_run);
        }
        if let Some(sides) = &engines_ready {
            let this_run = engines_side_by_side(sides).await?;
            table += &this_run.rows();
            engine_runs.push(percent_changes(this_run.sides()));
            engines.absorb(this_run);
        }
        eprintln!(
            "\nrun {run} of {runs}: create latency, {CREATES} server-side dry-run creates on each \
             side, one after another, interleaved create by create\n\n{table}"
        );
    }

    let mut table = TABLE_HEAD.to_owned();
    let mut changes = Vec::new();
    if gate_ready.is_some() {
        table += &gate.rows();
        let [p50, p99] = pooled_changes(gate.sides())?;
        changes.push(format!(
            "gate p50 {p50}; gate p99 {p99}\n\
             the gate's whole interval within {GATE_BOUND} %: p50 {}, p99 {}\n\
             each run's gate change, in per cent: p50 {}; p99 {}",
            p50.within(GATE_BOUND),
            p99.within(GATE_BOUND),
            each_run(&gate_runs, 0),
            each_run(&gate_runs, 1),
        ));
    }
    if engines_ready.is_some() {
        table += &engines.rows();
        let [p50, p99] = pooled_changes(engines.sides())?;
        changes.push(format!(
            "engines p50 {p50}; engines p99 {p99}\n\
             each run's engine change, in per cent: p50 {}; p99 {}",
            each_run(&engine_runs, 0),
            each_run(&engine_runs, 1),
        ));
    }
    eprintln!(
        "\nthe {runs} runs pooled ({} creates on each side of each comparison)\n\n{table}\n\
         pooled changes, with the middle 95 % of {RESAMPLES} paired resamples:\n{}",
        runs * CREATES,
        changes.join("\n")
    );
    Ok(())
}

/// A comparison's two sides: the base, and the side measured against it.
type Sides<'a> = (&'a Latencies, &'a Latencies);

/// The measured side's change at each of `PERCENTILES`, in per cent of the base's.
fn percent_changes((base, other): Sides) -> [f64; 2] {
    PERCENTILES.map(|p| base.percent_change(other, p))
}

/// The measured side's change at each of `PERCENTILES`, each with its interval.
fn pooled_changes((base, other): Sides) -> anyhow::Result<[Change; 2]> {
    let change = |p| {
        base.change(other, p).with_context(|| {
            format!(
                "no p{p} change between {} and {} creates",
                base.len(),
                other.len()
            )
        })
    };
    Ok([change(PERCENTILES[0])?, change(PERCENTILES[1])?])
}

/// The runs' changes at `PERCENTILES[which]`, in per cent, for one line.
fn each_run(runs: &[[f64; 2]], which: usize) -> String {
    runs.iter()
        .map(|changes| format!("{:+.1}", changes[which]))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A table's row: `what`, then `side`'s p50 and p99 in milliseconds, each with its change
/// against `base` when there is one, then `calls`.
fn row(what: &str, side: &Latencies, base: Option<&Latencies>, calls: &str) -> String {
    let cells = PERCENTILES.map(|p| {
        let ms = format!("{:.2} ms", side.millis(p));
        match base {
            Some(base) => format!("{ms} ({:+.1} %)", base.percent_change(side, p)),
            None => ms,
        }
    });
    format!("| {what} | {} | {} | {calls} |\n", cells[0], cells[1])
}

#[derive(Default)]
struct Gate {
    /// In a namespace no Initializer covers.
    outside: Latencies,
    /// In the sidecar's namespace, for Deployments its annotation gate leaves alone.
    gated: Latencies,
    /// The API server's calls to the sidecar's webhook meanwhile.
    calls: f64,
    /// The calls its `matchConditions` spared it meanwhile.
    spared: f64,
}

impl Gate {
    /// Another run's creates and counts added to these.
    fn absorb(&mut self, run: Self) {
        self.outside.extend(run.outside);
        self.gated.extend(run.gated);
        self.calls += run.calls;
        self.spared += run.spared;
    }

    /// No Initializer, then the gated creates measured against it.
    fn sides(&self) -> Sides<'_> {
        (&self.outside, &self.gated)
    }

    /// Its rows of a table.
    fn rows(&self) -> String {
        let (base, gated) = self.sides();
        row(
            "Deployments in a namespace no Initializer covers",
            base,
            None,
            "-",
        ) + &row(
            "the same in the sidecar's namespace; none carries its annotation",
            gated,
            Some(base),
            &format!("{} ({} spared by matchConditions)", self.calls, self.spared),
        )
    }
}

/// The sidecar example `name` registered, and Deployments without its annotation created by
/// turns in `outside`, a namespace no Initializer covers, and in `gated`, one of the sidecar's.
/// The baseline is the same creates with no Initializer applying: for `outside` the API server
/// matches the webhook's namespace selector against the namespace's labels and goes no further
/// (no call, no `matchConditions` evaluated), which the exclusion count proves (it counts the
/// gated side's creates alone).
async fn gate_side_by_side(
    ctx: &Ctx,
    name: &str,
    outside: &str,
    gated: &str,
) -> anyhow::Result<Gate> {
    let client = ctx.client();
    suspend(ctx, name, false).await?;
    let webhook = ops::registered_webhook(&client, name).await?.name;
    let apis = [
        Api::<Deployment>::namespaced(client.clone(), outside),
        Api::<Deployment>::namespaced(client.clone(), gated),
    ];
    let plain = fixtures::nginx_deployment("bench-plain", false, 1)?;
    let annotated = fixtures::nginx_deployment("bench-annotated", true, 1)?;
    let unchanged = |d: &Deployment| fixtures::template_containers(d) == ["nginx"];
    // What the API server does, not only what the operator says: the annotated Deployment is
    // injected in the sidecar's namespace, and not outside it.
    wait::until(
        "the API server to call the sidecar's webhook",
        STEP_TIMEOUT,
        || async {
            let created = dry_run(&apis[1], &annotated).await?;
            Ok(if fixtures::has_sidecar(&created) {
                Check::Done(())
            } else {
                Check::Pending(format!("{:?}", fixtures::template_containers(&created)))
            })
        },
    )
    .await?;
    ensure!(
        !fixtures::has_sidecar(&dry_run(&apis[0], &annotated).await?),
        "a Deployment in {outside}, which no Initializer covers, was injected"
    );
    let calls = webhook_counter(ctx, CALLS, &webhook).await?;
    let spared = webhook_counter(ctx, EXCLUSIONS, &webhook).await?;
    for api in &apis {
        timed(api, &plain, WARM_UP, unchanged).await?;
    }
    let [outside, gated] = by_turns(&apis, &plain, unchanged).await?;
    let gate = Gate {
        outside,
        gated,
        calls: webhook_counter(ctx, CALLS, &webhook).await? - calls,
        spared: webhook_counter(ctx, EXCLUSIONS, &webhook).await? - spared,
    };
    // Left suspended: the engines' pods are in no scope of its, and no webhook of it is called.
    suspend(ctx, name, true).await?;
    ensure!(
        gate.calls == 0.0,
        "the API server called the sidecar's webhook {} times for {} Deployments its gate leaves alone",
        gate.calls,
        gate.gated.len()
    );
    let gated_creates = (WARM_UP + gate.gated.len()) as f64;
    ensure!(
        gate.spared == gated_creates,
        "the API server counted {} match-condition exclusions for {gated_creates} Deployments in \
         the sidecar's namespace (and none should count for the {} outside it)",
        gate.spared,
        WARM_UP + gate.outside.len()
    );
    Ok(gate)
}

/// Sets the Initializer's `spec.suspend` and waits until the operator did what it says.
async fn suspend(ctx: &Ctx, name: &str, suspended: bool) -> anyhow::Result<()> {
    let client = ctx.client();
    ops::set_suspend(&client, name, suspended).await?;
    if suspended {
        ops::wait_deregistered(&client, name, STEP_TIMEOUT).await?;
    } else {
        ops::wait_registered(&client, name, REGISTER_TIMEOUT).await?;
    }
    Ok(())
}

#[derive(Default)]
struct Engines {
    webhook: Latencies,
    policy: Latencies,
}

impl Engines {
    /// Another run's creates added to these.
    fn absorb(&mut self, run: Self) {
        self.webhook.extend(run.webhook);
        self.policy.extend(run.policy);
    }

    /// The webhook, then the policy measured against it.
    fn sides(&self) -> Sides<'_> {
        (&self.webhook, &self.policy)
    }

    /// Its rows of a table.
    fn rows(&self) -> String {
        let (base, policy) = self.sides();
        row("pods, the preset as a webhook", base, None, "-")
            + &row(
                "pods, the same preset in the API server (MutatingAdmissionPolicy)",
                policy,
                Some(base),
                "-",
            )
    }
}

/// Where the engines' pods are created, and what an injected one looks like.
struct EngineSides {
    /// The preset's webhook's namespace, then the policy's.
    apis: [Api<Pod>; 2],
    pod: Pod,
}

/// Two Initializers with the same preset, one pinned to its webhook, the other moved into the
/// API server once proven, each for its own namespace; returns once each injects.
async fn engines_in_force(ctx: &Ctx) -> anyhow::Result<EngineSides> {
    let client = ctx.client();
    let by_webhook_ns = ctx.scope.target_namespace("bench-webhook").await?;
    let by_policy_ns = ctx
        .scope
        .namespace("bench-policy", &[(ENGINE_LABEL, "true")])
        .await?;
    let by_webhook = ctx.scope.name("bench-webhook");
    let by_policy = ctx.scope.name("bench-policy");
    let target = ctx.scope.target_selector();
    ctx.scope
        .create_initializer(&fixtures::initializer(
            &by_webhook,
            preset(json!({
                "engine": "Webhook",
                "namespaces": fixtures::target_namespaces(&target),
            })),
        )?)
        .await?;
    ctx.scope
        .create_initializer(&fixtures::initializer(
            &by_policy,
            preset(json!({
                "engine": "Auto",
                "namespaces": {"selector": {"matchLabels": {ENGINE_LABEL: "true"}}},
            })),
        )?)
        .await?;
    ops::wait_registered(&client, &by_webhook, REGISTER_TIMEOUT).await?;
    wait::until(
        "the second preset in the API server",
        STEP_TIMEOUT,
        || async {
            let found = ops::initializer(&client, &by_policy).await?;
            let status = found.status.as_ref();
            Ok(
                if status.and_then(|s| s.engine) == Some(EngineInForce::Policy)
                    && status.and_then(|s| s.phase) == Some(Phase::InApiServer)
                {
                    Check::Done(())
                } else {
                    Check::Pending(ops::describe(&found))
                },
            )
        },
    )
    .await?;

    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bench-app"},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]},
    }))?;
    let apis = [
        Api::<Pod>::namespaced(client.clone(), &by_webhook_ns),
        Api::<Pod>::namespaced(client.clone(), &by_policy_ns),
    ];
    // Both in force before any is timed: each side's first create injected.
    for api in &apis {
        wait::until("the first create injected", STEP_TIMEOUT, || async {
            let created = dry_run(api, &pod).await?;
            Ok(if injected(&created) {
                Check::Done(())
            } else {
                Check::Pending(format!("labels {:?}", created.labels()))
            })
        })
        .await?;
    }
    Ok(EngineSides { apis, pod })
}

fn injected(pod: &Pod) -> bool {
    pod.labels().get(INJECTED).is_some_and(|v| v == "true")
}

/// Pods created through the two engines by turns, every one injected.
async fn engines_side_by_side(sides: &EngineSides) -> anyhow::Result<Engines> {
    let [webhook, policy] = by_turns(&sides.apis, &sides.pod, injected).await?;
    Ok(Engines { webhook, policy })
}

/// `CREATES` dry-run creates of `object` through each of the two `apis` by turns, the order
/// swapped each pair (so that a machine that slows down slows both), each checked by
/// `expected`; the latencies of each side.
async fn by_turns<K>(
    apis: &[Api<K>; 2],
    object: &K,
    expected: impl Fn(&K) -> bool,
) -> anyhow::Result<[Latencies; 2]>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut sides = [
        Latencies::with_capacity(CREATES),
        Latencies::with_capacity(CREATES),
    ];
    for i in 0..CREATES {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            sides[side].extend(timed(&apis[side], object, 1, &expected).await?);
        }
    }
    Ok(sides)
}

/// The preset both engines run, with `extra` (engine, namespaces) merged in.
fn preset(extra: Value) -> Value {
    let mut spec = json!({
        "preset": {"inject": {
            "labels": {INJECTED: "true"},
            "env": [{"name": "BENCH", "value": "on"}],
            "containers": [{"name": "bench-sidecar", "image": "busybox:1.36",
                            "command": ["sleep", "3600"]}]
        }},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "replicas": 1,
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

/// A server-side dry-run create of `object`: what the API server would store.
async fn dry_run<K>(api: &Api<K>, object: &K) -> anyhow::Result<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&params, object)
        .await
        .with_context(|| format!("a dry-run create of {} failed", object.name_any()))
}

/// `count` dry-run creates one after another, each timed and each checked by `expected`.
async fn timed<K>(
    api: &Api<K>,
    object: &K,
    count: usize,
    expected: impl Fn(&K) -> bool,
) -> anyhow::Result<Vec<Duration>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let created = dry_run(api, object).await?;
        latencies.push(started.elapsed());
        ensure!(
            expected(&created),
            "a create came back other than expected: {:?}",
            created.meta()
        );
    }
    Ok(latencies)
}
