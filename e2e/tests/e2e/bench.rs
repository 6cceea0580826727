//! A benchmark, not a test (ignored unless asked for: `make bench-kind` runs it on kind, a real
//! pod network): what an Initializer costs the creates it does not change, and a preset in the
//! API server against the same preset as a webhook. It prints its tables and fails only when it
//! cannot measure, or when what it measures is wrong (a create changed that should not be, one
//! not injected that should be, a webhook call for a create its gate leaves alone).
//!
//! Every create is a server-side dry run (admission runs in full, nothing is stored or
//! scheduled), one after another from this process, as `kubectl create --dry-run=server` makes
//! them. The two sides of each comparison are interleaved so that a machine that slows down
//! slows both: the gate's side by side in rounds (no Initializer registered, then registered,
//! the order swapped each round, each side's round run alike: the API server's counters read,
//! untimed creates, then the timed ones), the engines create by create (two namespaces, one per
//! engine). The whole comparison runs `E2E_BENCH_RUNS` times (3 unless set) on the same
//! Initializers, each run printed, then the median of the runs' figures: one run's p99 is the
//! tenth slowest of 1,000 creates, too few to tell a few per cent apart on a shared machine.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use initializer_crds::{EngineInForce, Initializer, Phase};
use initializer_e2e::install::ENGINE_LABEL;
use initializer_e2e::runner::Ctx;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::{fixtures, ops};
use initializer_test_support::Latencies;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT};
use crate::injection::webhook_counter;

/// Creates on each side of each comparison.
const CREATES: usize = 1_000;
/// Rounds the gate's comparison is split into (each side `CREATES / ROUNDS` per round).
const ROUNDS: usize = 5;
/// Untimed creates before each round's timed ones, on both sides.
const WARM_UP: usize = 20;
/// The API server's count of its calls to a webhook, by the webhook's name.
const CALLS: &str = "apiserver_admission_webhook_request_total";
/// The API server's count of the calls a webhook's `matchConditions` spared, by its name.
const EXCLUSIONS: &str = "apiserver_admission_match_condition_exclusions_total";
/// The label both presets inject.
const INJECTED: &str = "e2e.initializer.dev/bench-injected";
/// How many times the whole comparison runs, unless `E2E_BENCH_RUNS` says.
const DEFAULT_RUNS: usize = 3;

pub async fn create_latency_with_gates_and_engines(ctx: Ctx) -> anyhow::Result<()> {
    let runs = match std::env::var("E2E_BENCH_RUNS") {
        Ok(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("E2E_BENCH_RUNS={text:?} is not a positive count"))?,
        Err(_) => DEFAULT_RUNS,
    };
    let sidecar = common::registered_sidecar(&ctx, "bench-gate", Default::default()).await?;
    let sides = engines_in_force(&ctx).await?;
    let mut figures = Vec::with_capacity(runs);
    for run in 1..=runs {
        let gate = gate_side_by_side(&ctx, &sidecar.name, &sidecar.target_ns).await?;
        let engines = engines_side_by_side(&sides).await?;
        let run_figures = Figures::of(&gate, &engines);
        eprintln!(
            "\nrun {run} of {runs}: create latency, {CREATES} server-side dry-run creates on each \
             side, one after another, interleaved\n\n{}",
            run_figures.table()
        );
        figures.push(run_figures);
    }
    eprintln!(
        "\nthe median of {runs} runs (each figure apart; the changes are the medians of each run's \
         change; the webhook calls and the calls spared are summed over the runs)\n\n{}",
        Figures::median(&figures).table()
    );
    Ok(())
}

/// One run's figures, in milliseconds, and the gate's webhook counts.
#[derive(Clone, Debug, Default)]
struct Figures {
    /// p50 and p99 with no Initializer registered.
    none: [f64; 2],
    /// p50 and p99 with the sidecar registered, outside its gate.
    gated: [f64; 2],
    /// p50 and p99 through the preset as a webhook.
    webhook: [f64; 2],
    /// p50 and p99 through the same preset in the API server.
    policy: [f64; 2],
    /// The gated side against the no-Initializer side, p50 and p99, in per cent.
    gate_change: [f64; 2],
    /// The policy against the webhook, p50 and p99, in per cent.
    engine_change: [f64; 2],
    /// The API server's calls to the sidecar's webhook for the gated creates.
    calls: f64,
    /// The calls its `matchConditions` spared it.
    spared: f64,
}

impl Figures {
    fn of(gate: &Gate, engines: &Engines) -> Self {
        let both = |l: &Latencies| [l.millis(50), l.millis(99)];
        let changes = |base: &Latencies, other: &Latencies| {
            [change(base, other, 50), change(base, other, 99)]
        };
        Self {
            none: both(&gate.none),
            gated: both(&gate.gated),
            webhook: both(&engines.webhook),
            policy: both(&engines.policy),
            gate_change: changes(&gate.none, &gate.gated),
            engine_change: changes(&engines.webhook, &engines.policy),
            calls: gate.calls,
            spared: gate.spared,
        }
    }

    /// Each figure's median over `runs` (the upper one of an even count); the counts summed.
    fn median(runs: &[Self]) -> Self {
        let of = |pick: &dyn Fn(&Self) -> [f64; 2]| {
            [0, 1].map(|i| {
                let mut values: Vec<f64> = runs.iter().map(|r| pick(r)[i]).collect();
                values.sort_by(f64::total_cmp);
                values.get(values.len() / 2).copied().unwrap_or_default()
            })
        };
        Self {
            none: of(&|r| r.none),
            gated: of(&|r| r.gated),
            webhook: of(&|r| r.webhook),
            policy: of(&|r| r.policy),
            gate_change: of(&|r| r.gate_change),
            engine_change: of(&|r| r.engine_change),
            calls: runs.iter().map(|r| r.calls).sum(),
            spared: runs.iter().map(|r| r.spared).sum(),
        }
    }

    fn table(&self) -> String {
        let ms = |v: f64| format!("{v:.2} ms");
        format!(
            "| creates | p50 | p99 | webhook calls |\n|---|---|---|---|\n\
             | Deployments, no Initializer registered (the sidecar suspended) | {} | {} | - |\n\
             | the same, the sidecar registered; none carries its annotation | {} ({:+.1} %) | {} ({:+.1} %) | {} ({} spared by matchConditions) |\n\
             | pods, the preset as a webhook | {} | {} | - |\n\
             | pods, the same preset in the API server (MutatingAdmissionPolicy) | {} ({:+.1} %) | {} ({:+.1} %) | - |\n",
            ms(self.none[0]),
            ms(self.none[1]),
            ms(self.gated[0]),
            self.gate_change[0],
            ms(self.gated[1]),
            self.gate_change[1],
            self.calls,
            self.spared,
            ms(self.webhook[0]),
            ms(self.webhook[1]),
            ms(self.policy[0]),
            self.engine_change[0],
            ms(self.policy[1]),
            self.engine_change[1],
        )
    }
}

/// How much `other`'s `p`th percentile differs from `base`'s, in percent.
fn change(base: &Latencies, other: &Latencies, p: u32) -> f64 {
    (other.millis(p) / base.millis(p) - 1.0) * 100.0
}

struct Gate {
    /// With no Initializer registered.
    none: Latencies,
    /// With the sidecar registered, for Deployments its annotation gate leaves alone.
    gated: Latencies,
    /// The API server's calls to the sidecar's webhook during the gated creates.
    calls: f64,
    /// The calls its `matchConditions` spared it meanwhile.
    spared: f64,
}

/// The sidecar example `name` registered, and Deployments without its annotation created in
/// `namespace` beside the same Deployments with the sidecar suspended (its webhook
/// configuration removed).
async fn gate_side_by_side(ctx: &Ctx, name: &str, namespace: &str) -> anyhow::Result<Gate> {
    let client = ctx.client();
    suspend(ctx, name, false).await?;
    let webhook = ops::registered_webhook(&client, name).await?.name;
    let deployments = Api::<Deployment>::namespaced(client.clone(), namespace);
    let plain = fixtures::nginx_deployment("bench-plain", false, 1)?;
    let annotated = fixtures::nginx_deployment("bench-annotated", true, 1)?;
    let unchanged = |d: &Deployment| fixtures::template_containers(d) == ["nginx"];
    let per_round = CREATES / ROUNDS;
    let mut gate = Gate {
        none: Latencies::with_capacity(CREATES),
        gated: Latencies::with_capacity(CREATES),
        calls: 0.0,
        spared: 0.0,
    };
    for round in 0..ROUNDS {
        for registered in [round % 2 == 0, round % 2 == 1] {
            suspend(ctx, name, !registered).await?;
            // What the API server does, not only what the operator says: the annotated
            // Deployment is injected exactly while the configuration is in the API server's hands.
            wait::until(
                format!("the API server to see the sidecar's webhook registered={registered}"),
                STEP_TIMEOUT,
                || async {
                    let created = dry_run(&deployments, &annotated).await?;
                    Ok(if fixtures::has_sidecar(&created) == registered {
                        Check::Done(())
                    } else {
                        Check::Pending(format!("{:?}", fixtures::template_containers(&created)))
                    })
                },
            )
            .await?;
            // Both sides alike: the API server's counters read (a large /metrics answer, whose
            // garbage its next requests pay for), then untimed creates, then the timed ones.
            let calls = webhook_counter(ctx, CALLS, &webhook).await?;
            let spared = webhook_counter(ctx, EXCLUSIONS, &webhook).await?;
            timed(&deployments, &plain, WARM_UP, unchanged).await?;
            let latencies = timed(&deployments, &plain, per_round, unchanged).await?;
            let calls = webhook_counter(ctx, CALLS, &webhook).await? - calls;
            let spared = webhook_counter(ctx, EXCLUSIONS, &webhook).await? - spared;
            if registered {
                gate.gated.extend(latencies);
                gate.calls += calls;
                gate.spared += spared;
            } else {
                ensure!(
                    calls == 0.0 && spared == 0.0,
                    "with the sidecar suspended, the API server counted {calls} calls and {spared} \
                     exclusions of its webhook"
                );
                gate.none.extend(latencies);
            }
        }
    }
    // Left suspended: the engines' pods are in no scope of its, and no webhook of it is called.
    suspend(ctx, name, true).await?;
    ensure!(
        gate.calls == 0.0,
        "the API server called the sidecar's webhook {} times for {} Deployments its gate leaves alone",
        gate.calls,
        gate.gated.len()
    );
    ensure!(
        gate.spared >= gate.gated.len() as f64,
        "the API server counted {} match-condition exclusions for {} Deployments",
        gate.spared,
        gate.gated.len()
    );
    Ok(gate)
}

/// Sets the Initializer's `spec.suspend` and waits until the operator did what it says.
async fn suspend(ctx: &Ctx, name: &str, suspended: bool) -> anyhow::Result<()> {
    let client = ctx.client();
    Api::<Initializer>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": suspended}})),
        )
        .await
        .with_context(|| format!("failed to set suspend={suspended} on {name}"))?;
    if suspended {
        ops::wait_deregistered(&client, name, STEP_TIMEOUT).await?;
    } else {
        ops::wait_registered(&client, name, REGISTER_TIMEOUT).await?;
    }
    Ok(())
}

struct Engines {
    webhook: Latencies,
    policy: Latencies,
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
    let mut engines = Engines {
        webhook: Latencies::with_capacity(CREATES),
        policy: Latencies::with_capacity(CREATES),
    };
    for i in 0..CREATES {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let latency = timed(&sides.apis[side], &sides.pod, 1, injected).await?;
            if side == 0 {
                engines.webhook.extend(latency);
            } else {
                engines.policy.extend(latency);
            }
        }
    }
    Ok(engines)
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
