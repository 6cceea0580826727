//! A pod that tries to starve a security initializer of connections or of memory: it holds
//! 1,000 idle keep-alive connections and 100 slow-header connections, or 60 request bodies of
//! 7 MB, against the one replica of the secret-guard example, reopening every one the server
//! closes, while the operator probes the replica and the API server sends it reviews. The
//! initializer must stay registered, within its memory, and every create must be reviewed and
//! succeed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use initializer_crds::constants::MEMORY_LIMIT_ENV;
use initializer_e2e::fixtures;
use initializer_e2e::load::{self, CreateLoad};
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::watch::{Change, Recorder};
use initializer_test_support::Latencies;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use crate::common::{self, LOAD_INTERVAL, STEP_TIMEOUT, s};

/// Idle keep-alive connections the attacker keeps open (the figure).
const IDLE_CONNECTIONS: usize = 1_000;
/// Slow-header connections the attacker keeps open (the figure).
const SLOW_CONNECTIONS: usize = 100;
/// Source addresses the attacker spreads its connections over, as that many attacker pods
/// would: 55 connections each, under the server's per-peer cap (64), so the server's total cap
/// is what they press against.
const ATTACKER_ADDRESSES: u8 = 20;
/// How long the attacker waits before reopening a connection the server closed.
const REOPEN_AFTER: Duration = Duration::from_millis(1_000);
/// How long creates run under the attack.
const ATTACK_WINDOW: Duration = Duration::from_secs(30);
/// Connections the attacker must have open at once before the window starts, in any phase:
/// most of the server's default cap (256), so the attack is on when the creates begin. Not the
/// ones past their handshake: the server makes room by closing idle connections, so with more
/// attacker connections than slots most of them are always new (the attacker keeps about 60
/// of 256 past their handshake on the real control plane, 256 on kind, where they share one
/// address and the per-peer share turns the rest away).
const CONNECTED_BEFORE_THE_WINDOW: usize = 200;
/// Request bodies the attacker holds at once, from one address (the figure).
const HELD_BODIES: usize = 60;
/// The size of each: just under the server's request limit (7 MiB).
const BODY_BYTES: usize = 7_000_000;
/// How long each body's last byte is held back: within the server's body timeout (10 s), so the
/// server holds what it has read of the body for as long as a client can make it.
const BODY_HOLD: Duration = Duration::from_secs(8);
/// The serving port of the process contract.
const INITIALIZER_PORT: u16 = 8443;

/// The attacker's last report: `held idle=… slow=… connected=… opened=… closed_by_server=…
/// failed=…`.
#[derive(Clone, Debug, Default)]
struct Report {
    line: String,
    connected: usize,
    opened: usize,
}

fn parse_report(line: &str) -> Report {
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|word| word.strip_prefix(key)?.parse::<usize>().ok())
            .unwrap_or(0)
    };
    Report {
        line: line.to_string(),
        connected: field("connected="),
        opened: field("opened="),
    }
}

/// Addresses in the pod's own /16 that no pod has (`x.y.250.1`, …): the attacker pods'. On the
/// sandbox and the real control plane the whole pod range is local where the attacker runs, so
/// it can bind them; elsewhere the attacker falls back to its one address.
fn attacker_sources(pod_ip: IpAddr) -> Vec<IpAddr> {
    match pod_ip {
        IpAddr::V4(ip) => {
            let [a, b, _, _] = ip.octets();
            (1..=ATTACKER_ADDRESSES)
                .map(|k| IpAddr::V4(Ipv4Addr::new(a, b, 250, k)))
                .collect()
        }
        IpAddr::V6(_) => Vec::new(),
    }
}

/// Where the attacker's connections come from.
#[derive(Clone, Copy)]
enum Sources {
    /// Spread over [`ATTACKER_ADDRESSES`] addresses, as that many attacker pods would.
    Many,
    /// One address no pod has, as one attacker pod.
    One,
}

/// The attacker, running against one initializer pod, and its last report.
struct Attacker {
    pod_ip: IpAddr,
    child: tokio::process::Child,
    report: Arc<Mutex<Report>>,
    reader: tokio::task::JoinHandle<()>,
    /// The CA the attacker verifies the server with, removed when the attacker is dropped.
    _ca_file: tempfile::NamedTempFile,
}

impl Attacker {
    /// Starts the attacker against `pod` of the Initializer `name` (verifying it as any client
    /// would, with the CA of its webhook), with `settings` (`ATTACK_*`) on top of the target's.
    async fn start(
        ctx: &Ctx,
        name: &str,
        pod: &Pod,
        sources: Sources,
        settings: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let webhook = ops::registered_webhook(&ctx.client(), name).await?;
        let service = webhook
            .client_config
            .service
            .as_ref()
            .context("the guard's webhook calls no Service")?;
        let ca = webhook
            .client_config
            .ca_bundle
            .as_ref()
            .context("the guard's webhook has no caBundle")?;
        let pod_ip: IpAddr = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .context("the guard's pod has no IP")?
            .parse()?;
        let ca_file = tempfile::NamedTempFile::new()?;
        std::fs::write(ca_file.path(), &ca.0)?;
        let attacker = Path::new(env!("CARGO_BIN_EXE_attacker"));
        // Not from the guard's node: there the attacker would share the kubelet's source
        // address, and the kubelet's readiness probes would be refused as the attacker's own
        // connections (no pod has that address; a host-network pod needs rights no attacker is
        // given).
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref());
        let Some(command) = ctx.env.target.command_inside_away_from(attacker, node) else {
            bail!(
                "failed to run the attacker: backend {} has no place where pods are reachable \
                 other than the guard's node {node:?}",
                ctx.env.target.name()
            );
        };
        let mut addresses = attacker_sources(pod_ip);
        if matches!(sources, Sources::One) {
            addresses.truncate(1);
        }
        let sources: Vec<String> = addresses.iter().map(ToString::to_string).collect();
        let mut command = tokio::process::Command::from(command);
        command
            .env(
                "ATTACK_TARGET",
                SocketAddr::new(pod_ip, INITIALIZER_PORT).to_string(),
            )
            .env(
                "ATTACK_SERVER_NAME",
                format!("{}.{}.svc", service.name, service.namespace),
            )
            .env("ATTACK_CA", ca_file.path())
            .env("ATTACK_REOPEN_MS", REOPEN_AFTER.as_millis().to_string())
            .env("ATTACK_SOURCES", sources.join(","))
            .envs(settings.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().context("failed to start the attacker")?;
        let report = Arc::new(Mutex::new(Report::default()));
        let stdout = child.stdout.take().context("the attacker has no stdout")?;
        let reader = tokio::spawn({
            let report = Arc::clone(&report);
            async move {
                let mut lines = tokio::io::BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut report) = report.lock() {
                        *report = parse_report(&line);
                    }
                }
            }
        });
        Ok(Self {
            pod_ip,
            child,
            report,
            reader,
            _ca_file: ca_file,
        })
    }

    /// The attacker's last report.
    fn last(&self) -> Report {
        self.report.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Waits for a report that `done` accepts (then returns it) for at most [`STEP_TIMEOUT`].
    async fn wait_for(
        &self,
        what: String,
        done: impl Fn(&Report) -> bool,
    ) -> anyhow::Result<Report> {
        wait::until(what, STEP_TIMEOUT, || async {
            let report = self.last();
            Ok(if done(&report) {
                Check::Done(report)
            } else {
                Check::Pending(format!("attacker: {}", report.line))
            })
        })
        .await
    }

    /// Stops the attacker; returns its last report.
    async fn stop(mut self) -> Report {
        let last = self.last();
        let _ = self.child.kill().await;
        self.reader.abort();
        last
    }
}

/// The secret-guard example with one replica (and the default `failurePolicy: Fail`),
/// registered; returns its name and its pod.
async fn registered_guard(ctx: &Ctx) -> anyhow::Result<(String, Pod)> {
    let workload_ns = common::workload_namespace(ctx, "guard-init").await?;
    let name = ctx.scope.name("guard");
    let initializer = common::secret_guard(ctx, &name, &workload_ns, json!({"replicas": 1}))?;
    common::apply_until_registered(ctx, &initializer).await?;
    let pods = ops::wait_pods_ready(&ctx.client(), &workload_ns, &name, 1, STEP_TIMEOUT).await?;
    let pod = pods
        .into_iter()
        .next()
        .context("the guard has no ready pod")?;
    Ok((name, pod))
}

/// Any pod in the cluster can connect to an initializer's pods: 1,000 idle and 100 slow-header
/// connections against its one replica must neither get it deregistered (the operator's probe
/// still gets through) nor fail a create (the API server's reviews still get through).
pub async fn connection_attack_neither_deregisters_the_guard_nor_fails_a_create(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let (name, pod) = registered_guard(&ctx).await?;
    let configurations = common::record_configurations(&ctx, &name);
    let attacker = Attacker::start(
        &ctx,
        &name,
        &pod,
        Sources::Many,
        &[
            ("ATTACK_IDLE", IDLE_CONNECTIONS.to_string()),
            ("ATTACK_SLOW", SLOW_CONNECTIONS.to_string()),
        ],
    )
    .await?;
    let pod_ip = attacker.pod_ip;
    let attack = attacker
        .wait_for(
            format!("the attacker to have {CONNECTED_BEFORE_THE_WINDOW} connections open"),
            |report| report.connected >= CONNECTED_BEFORE_THE_WINDOW,
        )
        .await?;
    eprintln!("attack on {pod_ip}: {}", attack.line);
    creates_under_attack(&ctx, &name, attacker, &configurations).await?;
    Ok(())
}

/// Runs strong Secret creates every [`LOAD_INTERVAL`] and a weak one every second for
/// [`ATTACK_WINDOW`] while `attacker` runs, then stops it: fails unless every strong create
/// succeeded, every weak one was refused by the guard itself, and the guard's configuration
/// stayed as it was and its Initializer Registered. Returns the attacker's last report.
async fn creates_under_attack(
    ctx: &Ctx,
    name: &str,
    attacker: Attacker,
    configurations: &Recorder<MutatingWebhookConfiguration>,
) -> anyhow::Result<Report> {
    let pod_ip = attacker.pod_ip;
    let target = ctx.scope.target_namespace("apps").await?;
    let secrets = Api::<Secret>::namespaced(ctx.client(), &target);
    let window_start = Instant::now();
    let prefix = format!("strong-{}", ctx.scope.id());
    let creates = CreateLoad::start(
        secrets.clone(),
        LOAD_INTERVAL,
        move |n| {
            fixtures::secret(
                &format!("{prefix}-{n}"),
                "password",
                "correct-horse-battery-staple",
            )
        },
        |_| false,
    );
    // Weak Secrets must be refused by the guard itself all along: a webhook that failed open
    // (degraded to `Ignore`) or was removed would let them through.
    let mut weak_refused = 0;
    let mut weak_let_through = Vec::new();
    let mut weak_failed_otherwise = Vec::new();
    let mut n = 0;
    while window_start.elapsed() < ATTACK_WINDOW {
        n += 1;
        let weak = fixtures::secret(&format!("weak-{n}"), "password", "hunter2");
        match secrets.create(&PostParams::default(), &weak).await {
            Ok(_) => weak_let_through.push(n),
            Err(kube::Error::Api(status)) if status.message.contains("password") => {
                weak_refused += 1;
            }
            Err(err) => weak_failed_otherwise.push(err.to_string()),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let attempts = creates.stop().await;
    let during = attacker.stop().await;

    let failed = load::count_in(&attempts, window_start, None);
    ctx.row
        .update(|row| row.failed_creates_failure = Some(failed));
    let latencies: Latencies = attempts.iter().map(|a| a.finished - a.started).collect();
    eprintln!(
        "attack on {pod_ip}: {} creates in {}, {} failed, latency p50 {} p99 {} max {}; \
         weak Secrets refused {weak_refused}/{n}; attacker at the end: {}",
        failed.total,
        s(ATTACK_WINDOW),
        failed.failed,
        s(latencies.percentile(50)),
        s(latencies.percentile(99)),
        s(latencies.max()),
        during.line,
    );

    let changes: Vec<String> = configurations
        .seen()
        .into_iter()
        .filter(|seen| seen.at >= window_start)
        .map(|seen| {
            let state = if seen.change == Change::Deleted {
                "deleted".to_string()
            } else if ops::is_degraded(&seen.object) {
                "degraded".to_string()
            } else {
                "modified".to_string()
            };
            format!("{} at +{}", state, s(seen.at - window_start))
        })
        .collect();
    if !changes.is_empty() {
        let why = ops::warning_events(&ctx.client(), name).await?;
        bail!(
            "the guard's webhook configuration changed under the attack (the operator judged \
             the attacked replica unhealthy): {changes:?}; its Warning Events: {why:?}; \
             attacker: {}",
            during.line
        );
    }
    let initializer = ops::initializer(&ctx.client(), name).await?;
    ensure!(
        ops::status_registered(&initializer),
        "the guard is no longer registered after the attack: {}",
        ops::describe(&initializer)
    );
    ensure!(
        failed.failed == 0 && failed.total > 0,
        "{}/{} creates failed under the attack: {:?}; attacker: {}",
        failed.failed,
        failed.total,
        load::errors(&attempts),
        during.line
    );
    ensure!(
        weak_let_through.is_empty() && weak_failed_otherwise.is_empty(),
        "under the attack, weak Secrets {weak_let_through:?} were let through and others failed \
         without the guard's answer: {weak_failed_otherwise:?}; attacker: {}",
        during.line
    );
    Ok(during)
}

/// Any pod in the cluster can send an initializer request bodies: 60 of 7 MB from one address,
/// each held just within the body timeout, against the one replica of a `failurePolicy: Fail`
/// secret guard. The replica must stay within its memory (on kind, where the limit is enforced,
/// it is never OOM-killed; where pods are processes, its peak resident memory stays under the
/// limit), no weak Secret may be admitted, and the API server's reviews, from an address of
/// their own, must still get through.
pub async fn body_flood_neither_exhausts_the_guard_nor_lets_a_weak_secret_in(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let (name, pod) = registered_guard(&ctx).await?;
    let limit = memory_limit(&pod)?;
    let configurations = common::record_configurations(&ctx, &name);
    let attacker = Attacker::start(
        &ctx,
        &name,
        &pod,
        Sources::One,
        &[
            ("ATTACK_BODIES", HELD_BODIES.to_string()),
            ("ATTACK_BODY_BYTES", BODY_BYTES.to_string()),
            ("ATTACK_BODY_HOLD_MS", BODY_HOLD.as_millis().to_string()),
        ],
    )
    .await?;
    let pod_ip = attacker.pod_ip;
    let attack = attacker
        .wait_for(
            format!("the attacker to have sent {HELD_BODIES} bodies"),
            |report| report.opened >= HELD_BODIES,
        )
        .await?;
    eprintln!("body flood on {pod_ip}: {}", attack.line);
    let under = creates_under_attack(&ctx, &name, attacker, &configurations).await;

    // Whatever the creates saw, say what the replica's memory did.
    let pods = Api::<Pod>::namespaced(ctx.client(), pod.namespace().as_deref().unwrap_or_default());
    let now = pods.get(&pod.name_any()).await?;
    let restarts = restarts_of(&now);
    let memory = process_memory(&now)?;
    eprintln!(
        "body flood on {pod_ip}: memory limit {limit}, {}, restarts {restarts:?}",
        memory.map_or(
            "peak resident unknown (not a process here)".to_string(),
            |m| format!(
                "peak resident {} MiB of the {} MiB the process was told",
                m.peak_kib / 1024,
                m.limit / MIB
            )
        ),
    );
    let under = under?;
    ensure!(
        restarts.is_empty(),
        "the guard's container restarted under the body flood: {restarts:?}; attacker: {}",
        under.line
    );
    if let Some(m) = memory {
        ensure!(
            m.peak_kib * 1024 < m.limit,
            "the guard's peak resident memory, {} MiB, passed its limit of {} MiB: on a \
             kubelet it would have been OOM-killed; attacker: {}",
            m.peak_kib / 1024,
            m.limit / MIB,
            under.line
        );
    }
    Ok(())
}

const MIB: u64 = 1024 * 1024;

/// The memory limit of the pod's container, as written.
fn memory_limit(pod: &Pod) -> anyhow::Result<String> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .and_then(|limits| limits.get("memory"))
        .map(|q| q.0.clone())
        .context("the guard's container has no memory limit")
}

/// What a pod's process used and was told of its memory.
#[derive(Clone, Copy)]
struct ProcessMemory {
    /// Its peak resident memory, in KiB.
    peak_kib: u64,
    /// The limit the operator passed it (`INITIALIZER_MEMORY_LIMIT`, by the downward API), in
    /// bytes.
    limit: u64,
}

/// Where pods are processes of this machine (the sandbox and the real control plane), what the
/// pod's process used and was told of its memory; `None` elsewhere.
fn process_memory(pod: &Pod) -> anyhow::Result<Option<ProcessMemory>> {
    let Some(pid) = initializer_controlplane::signal::process_groups(pod)
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    let peak_kib = initializer_e2e::procfs::peak_rss_kib(&status)
        .context("the guard's process has no VmHWM")?;
    let limit = environ
        .split(|b| *b == 0)
        .find_map(|entry| {
            entry
                .strip_prefix(MEMORY_LIMIT_ENV.as_bytes())?
                .strip_prefix(b"=")
        })
        .and_then(|value| std::str::from_utf8(value).ok()?.parse().ok())
        .with_context(|| format!("the operator did not pass the guard {MEMORY_LIMIT_ENV}"))?;
    Ok(Some(ProcessMemory { peak_kib, limit }))
}

/// Each restart of the pod's containers: its count and why the last one ended.
fn restarts_of(pod: &Pod) -> Vec<String> {
    pod.status
        .iter()
        .flat_map(|status| status.container_statuses.iter().flatten())
        .filter(|c| c.restart_count > 0)
        .map(|c| {
            let why = c
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.reason.clone())
                .unwrap_or_default();
            format!("{}: {} restart(s), last {why}", c.name, c.restart_count)
        })
        .collect()
}
