//! `make bench-scale`: N preset Initializers (replicas 1, default health settings, rules on pods,
//! a namespace selector) applied at once, as a user would with kubectl, on the sandbox and on
//! the real control plane, each run on a fresh control plane with the operator installed from
//! the bundle. For each run it reports the time until every one is Registered, how often one
//! left Registered (churn), and over a steady window afterwards the leader's resident memory
//! and CPU (from `/proc`: pods are processes of this machine on both control planes), the API
//! requests it makes per second by verb and its probe rounds per second (from its `/metrics`),
//! and the pods' restarts. A benchmark, not a test: it prints a table and fails only when it
//! cannot measure.
//!
//!   scale-bench [--cluster sandbox|real|both] [--counts 10,30,100] [--settle-seconds 30]
//!               [--steady-seconds 30] [--timeout-seconds 300] [--repeats 1]
//!
//! With `--repeats N` each control plane and count runs N times, each on a fresh control plane,
//! and the table gives every run and then the median of each figure (`scale::median`).
//!
//! The steady window opens `--settle-seconds` after the last Initializer was Registered (or
//! after the timeout): the last ones' pods, Deployments and first probes settle meanwhile.
//!
//! Build it and every binary it runs in release (`make bench-scale` does): the pods run the
//! binaries beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use initializer_crds::Initializer;
use initializer_e2e::env::Env;
use initializer_e2e::fixtures;
use initializer_e2e::procfs;
use initializer_e2e::scale::{self, Row};
use initializer_e2e::target::TargetChoice;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// The operator's metrics port (`manifest::HTTP_PORT`).
const METRICS_PORT: u16 = 8080;
/// The label the Initializers' namespace selector asks for.
const TARGET_LABEL: &str = "scale-bench.initializer.dev/target";

struct Args {
    clusters: Vec<TargetChoice>,
    counts: Vec<usize>,
    settle: Duration,
    steady: Duration,
    timeout: Duration,
    repeats: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        clusters: vec![TargetChoice::Sandbox, TargetChoice::Real],
        counts: vec![10, 30, 100],
        settle: Duration::from_secs(30),
        steady: Duration::from_secs(30),
        timeout: Duration::from_secs(300),
        repeats: 1,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--cluster" => {
                args.clusters = match value.as_str() {
                    "sandbox" => vec![TargetChoice::Sandbox],
                    "real" => vec![TargetChoice::Real],
                    "both" => vec![TargetChoice::Sandbox, TargetChoice::Real],
                    other => bail!("--cluster is sandbox, real or both, not {other}"),
                }
            }
            "--counts" => {
                args.counts = value
                    .split(',')
                    .map(|n| n.trim().parse().context("--counts takes numbers"))
                    .collect::<anyhow::Result<_>>()?
            }
            "--settle-seconds" => args.settle = Duration::from_secs(value.parse()?),
            "--steady-seconds" => args.steady = Duration::from_secs(value.parse()?),
            "--timeout-seconds" => args.timeout = Duration::from_secs(value.parse()?),
            "--repeats" => {
                args.repeats = value.parse().context("--repeats takes a number")?;
                if args.repeats == 0 {
                    bail!("--repeats must be at least 1");
                }
            }
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    initializer_telemetry::Logging::new()
        .filter("BENCH_LOG", "warn,kube_client=off")
        .stderr()
        .init();
    let args = parse_args()?;
    let ticks_per_second = clock_ticks()?;
    let mut rows = Vec::new();
    let mut medians = Vec::new();
    for cluster in &args.clusters {
        for &count in &args.counts {
            let mut runs = Vec::new();
            for repeat in 1..=args.repeats {
                let env = Env::start_with(cluster.clone()).await?;
                let name = match cluster {
                    TargetChoice::Real => "real",
                    _ => "sandbox",
                };
                eprintln!(
                    "scale-bench: {count} Initializers on the {name} control plane (run {repeat} of {})",
                    args.repeats
                );
                let row = run(&env, name, count, &args, ticks_per_second).await;
                env.shutdown().await;
                let row = row?;
                eprintln!("{}", scale::table(std::slice::from_ref(&row)));
                runs.push(row);
            }
            medians.extend(scale::median(&runs));
            rows.extend(runs);
        }
    }
    if args.repeats > 1 {
        println!("every run:\n{}", scale::table(&rows));
        println!("medians of {} runs:", args.repeats);
        rows = medians;
    }
    println!("{}", scale::table(&rows));
    Ok(())
}

async fn run(
    env: &Env,
    cluster: &str,
    count: usize,
    args: &Args,
    ticks_per_second: u64,
) -> anyhow::Result<Row> {
    let client = env.client();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "scale-target", "labels": {TARGET_LABEL: "true"}}
            }))?,
        )
        .await
        .context("failed to create the target namespace")?;
    let initializers: Api<Initializer> = Api::all(client.clone());
    let applied = Instant::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let initializers = initializers.clone();
            async move {
                let initializer = fixtures::initializer(
                    &format!("scale-{i:03}"),
                    json!({
                        "preset": {"inject": {"annotations": {format!("scale.initializer.dev/{i:03}"): "true"}}},
                        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                        "namespaces": {"selector": {"matchLabels": {TARGET_LABEL: "true"}}},
                        "replicas": 1,
                    }),
                )?;
                initializers
                    .create(&PostParams::default(), &initializer)
                    .await
                    .with_context(|| format!("failed to create {}", initializer.name_any()))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;

    // Until every one is Registered (or the timeout), then a steady window of the same
    // polling: an Initializer seen Registered and later not is churn.
    let mut seen_registered = BTreeSet::new();
    let mut left_registered = 0;
    let mut all_registered = None;
    let mut steady_from = None;
    let mut first_sample = None;
    loop {
        let registered: BTreeSet<String> = initializers
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|i| {
                i.status
                    .as_ref()
                    .and_then(|s| s.phase.as_ref())
                    .is_some_and(|p| *p == initializer_crds::Phase::Registered)
            })
            .map(ResourceExt::name_any)
            .collect();
        left_registered += seen_registered.difference(&registered).count();
        seen_registered = registered;
        if all_registered.is_none() && seen_registered.len() == count {
            all_registered = Some(applied.elapsed());
            eprintln!(
                "scale-bench: all {count} Registered after {:.1}s",
                applied.elapsed().as_secs_f64()
            );
        }
        let converged_at = all_registered.map(|took| applied + took);
        let settled = converged_at.is_some_and(|at| at.elapsed() >= args.settle)
            || applied.elapsed() > args.timeout + args.settle;
        if settled && steady_from.is_none() {
            steady_from = Some(Instant::now());
            first_sample = Some(sample(env).await?);
        }
        if steady_from.is_some_and(|from| from.elapsed() >= args.steady) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let first = first_sample.context("no first sample")?;
    let last = sample(env).await?;
    if first.leader_pod != last.leader_pod {
        bail!(
            "the leader changed during the steady window ({} → {})",
            first.leader_pod,
            last.leader_pod
        );
    }
    let window = last.at - first.at;
    let seconds = window.as_secs_f64();
    let requests_per_second = last
        .requests
        .iter()
        .map(|(verb, total)| {
            let before = first.requests.get(verb).copied().unwrap_or(0.0);
            (verb.clone(), (total - before) / seconds)
        })
        .collect();
    Ok(Row {
        cluster: cluster.into(),
        initializers: count,
        all_registered,
        registered_at_end: seen_registered.len(),
        left_registered,
        leader_rss_mib: last.rss_kib as f64 / 1024.0,
        leader_cpu_percent: scale::cpu_percent(
            last.cpu_ticks.saturating_sub(first.cpu_ticks),
            ticks_per_second,
            window,
        ),
        requests_per_second,
        probes_per_second: (last.probes - first.probes) / seconds,
        restarts: restarts(&client).await?,
    })
}

/// What the leader shows at one moment.
struct Sample {
    at: Instant,
    leader_pod: String,
    cpu_ticks: u64,
    rss_kib: u64,
    requests: BTreeMap<String, f64>,
    probes: f64,
}

async fn sample(env: &Env) -> anyhow::Result<Sample> {
    let mut leader = None;
    for pod in env.operator_pods().await? {
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let text = metrics(env, &ip).await?;
        if scale::metric_sum(&text, "initializer_operator_leader") == 1.0 {
            leader = Some((pod.name_any(), text));
        }
    }
    let at = Instant::now();
    let (leader_pod, text) = leader.context("no operator replica says it leads")?;
    let pid = pid_of(&leader_pod)?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(Sample {
        at,
        leader_pod,
        cpu_ticks: scale::cpu_ticks(&stat).context("unreadable /proc/<pid>/stat")?,
        rss_kib: scale::rss_kib(&status).context("no VmRSS in /proc/<pid>/status")?,
        requests: scale::metric_by_label(&text, "initializer_operator_api_requests_total", "verb"),
        probes: scale::metric_sum(&text, "initializer_operator_probe_latency_seconds_count"),
    })
}

/// The operator's `/metrics` at a pod address, fetched from where pods are reachable (inside
/// the real control plane's network namespace; from here on the sandbox).
async fn metrics(env: &Env, ip: &str) -> anyhow::Result<String> {
    let curl = PathBuf::from("curl");
    let command = env
        .target
        .command_inside(&curl)
        .context("this target cannot run a command where pods are reachable")?;
    let output = tokio::process::Command::from(command)
        .args([
            "-sS",
            "--max-time",
            "5",
            &format!("http://{ip}:{METRICS_PORT}/metrics"),
        ])
        .output()
        .await
        .context("failed to run curl (is it installed?)")?;
    if !output.status.success() {
        bail!(
            "curl {ip}:{METRICS_PORT}/metrics failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The process of the operator's pod `pod`: the one whose environment names it (`POD_NAME`, the
/// Downward API variable of the operator's Deployment).
fn pid_of(pod: &str) -> anyhow::Result<u32> {
    let mut found = Vec::new();
    for (pid, dir) in procfs::processes()? {
        let Ok(environ) = std::fs::read(dir.join("environ")) else {
            continue;
        };
        let exe = std::fs::read_link(dir.join("exe")).unwrap_or_default();
        if scale::environ_has(&environ, "POD_NAME", pod)
            && exe
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("initializer-operator"))
        {
            found.push(pid);
        }
    }
    match found.as_slice() {
        [pid] => Ok(*pid),
        [] => bail!("no process of pod {pod} found in /proc (run as root)"),
        many => bail!("several processes claim pod {pod}: {many:?}"),
    }
}

/// Container restarts of every pod in the cluster.
async fn restarts(client: &Client) -> anyhow::Result<u32> {
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(pods
        .items
        .iter()
        .flat_map(|pod| pod.status.iter())
        .flat_map(|status| status.container_statuses.iter().flatten())
        .map(|container| container.restart_count.max(0) as u32)
        .sum())
}

/// The kernel's clock ticks per second, the unit of `/proc/<pid>/stat`'s CPU times.
fn clock_ticks() -> anyhow::Result<u64> {
    let output = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("failed to run getconf")?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .context("getconf CLK_TCK did not print a number")
}
