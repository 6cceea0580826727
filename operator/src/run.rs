//! `initializer-operator run`: wires the client, the operator's endpoints, leader election, the
//! controller, the health supervisor and the orphan sweep together.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use initializer_crds::images::{self, PRESET_INITIALIZER};
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api_client;
use crate::build::Settings;
use crate::build::network_policy::{self, Cidrs, NetworkPolicyMode};
use crate::controller::{self, Context};
use crate::error::{Error, Result};
use crate::guard::GuardState;
use crate::leader::{LeaderConfig, LeaderElector, Leadership};
use crate::metrics::Metrics;
use crate::probe::Connector;
use crate::server::{self, Health};
use crate::supervisor::Supervisor;
use crate::watchdog::Watchdog;

/// Flags of `initializer-operator run`.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// The operator's own namespace: never intercepted, and the default namespace of every
    /// initializer's workload.
    #[arg(long, env = "POD_NAMESPACE", default_value = "initializer-system")]
    pub namespace: String,
    /// The namespace where a preset's MutatingAdmissionPolicy is proven against its webhook
    /// before it takes over (`spec.engine: Auto` or `Policy`): it must be one the Initializers
    /// intercept, and the ClusterRole `initializer-operator-policy-canary` must be bound there
    /// to the operator's ServiceAccount (dry-run creates of the proof's corpus). Unset: presets
    /// stay on the webhook, and their status says why.
    #[arg(long, env = "POLICY_CANARY_NAMESPACE")]
    pub policy_canary_namespace: Option<String>,
    /// Image of the built-in preset initializer (for Initializers with only `spec.preset`).
    #[arg(long, env = "PRESET_IMAGE", default_value_t = images::image(PRESET_INITIALIZER))]
    pub preset_image: String,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Log as JSON lines.
    #[arg(long, env = "LOG_JSON")]
    pub log_json: bool,
    /// Run leader election (the default); only the leader reconciles and probes.
    #[arg(long, overrides_with = "no_leader_election")]
    pub leader_election: bool,
    /// Lead without election (a single replica).
    #[arg(long, overrides_with = "leader_election")]
    pub no_leader_election: bool,
    /// Name of the leader Lease.
    #[arg(long, env = "LEASE_NAME", default_value = "initializer-operator")]
    pub lease_name: String,
    /// Namespace of the leader Lease (defaults to `--namespace`).
    #[arg(long, env = "LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Seconds a Lease holds without renewal.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// This replica's identity (the pod name); defaults to the host name.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// Service account the operator runs as, shown to initializers as the probe's user.
    #[arg(
        long,
        env = "SERVICE_ACCOUNT_NAME",
        default_value = "initializer-operator"
    )]
    pub service_account: String,
    /// How the probes open their connections (not a flag): a plain connect unless a test
    /// running the operator outside the cluster's network sets another.
    #[arg(skip)]
    pub probe_connector: Connector,
    /// `auto` (the default, see the book's security model, `docs/src/security/connections.md`):
    /// a NetworkPolicy in front of every initializer's pods that lets in only the operator's
    /// pods and the API server's addresses (`--api-server-cidrs`, or else the `kubernetes`
    /// Service's EndpointSlice); a policy the API server's calls are not seen passing within
    /// `--route-deadline-seconds` is withdrawn, and where no NetworkPolicy API is served it is
    /// `off`. `on`: the same from `--api-server-cidrs` only, never withdrawn. `off`: none, and
    /// one written before is removed.
    #[arg(long, env = "NETWORK_POLICY", value_enum, default_value_t = NetworkPolicyMode::Auto, requires_if("on", "api_server_cidrs"))]
    pub network_policy: NetworkPolicyMode,
    /// Where the API server's calls to initializers come from (the control plane's address
    /// range, which differs per cluster), as comma-separated CIDRs; required with
    /// `--network-policy=on`.
    #[arg(long, env = "API_SERVER_CIDRS")]
    pub api_server_cidrs: Option<Cidrs>,
    /// How long route checks may go unanswered before an Initializer is `Stalled` (it stays
    /// registered failing open) and, with `--network-policy=auto`, its NetworkPolicy withdrawn.
    #[arg(long, env = "ROUTE_DEADLINE_SECONDS", default_value_t = crate::status::ROUTE_DEADLINE.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub route_deadline_seconds: u64,
}

impl RunArgs {
    fn identity(&self) -> String {
        self.pod_name
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("initializer-operator-{:08x}", rand::random::<u32>()))
    }

    fn elect(&self) -> bool {
        !self.no_leader_election
    }
}

/// The workspace's one tracing setup: `RUST_LOG` (default `info`), JSON lines with `json`. A
/// subscriber set earlier (tests) wins.
pub use initializer_telemetry::init_tracing;

/// Runs the operator until SIGINT/SIGTERM.
pub async fn run(args: RunArgs) -> Result<()> {
    init_tracing(args.log_json);
    let metrics = Metrics::shared();
    let config = kube::Config::infer()
        .await
        .map_err(|e| Error::Client(Box::new(kube::Error::InferConfig(e))))?;
    let client = api_client::build(config, &metrics)?;
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutting down");
        stop.cancel();
    });
    run_with_metrics(client, metrics, args, shutdown).await
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
        match term {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs the operator with `client` until `shutdown` (used by `run` and by tests).
pub async fn run_with(client: Client, args: RunArgs, shutdown: CancellationToken) -> Result<()> {
    run_with_metrics(client, Metrics::shared(), args, shutdown).await
}

/// [`run_with`], exporting `metrics` (which the client may already count into).
pub async fn run_with_metrics(
    client: Client,
    metrics: Arc<Metrics>,
    args: RunArgs,
    shutdown: CancellationToken,
) -> Result<()> {
    let ready = Arc::new(AtomicBool::new(false));
    let watchdog = Watchdog::new();
    let health = Health {
        metrics: metrics.clone(),
        ready: ready.clone(),
        watchdog: watchdog.clone(),
    };
    let addr = args.metrics_addr;
    let listener_stop = shutdown.clone();
    let server = tokio::spawn(async move { server::serve(addr, health, listener_stop).await });

    let version = client
        .apiserver_version()
        .await
        .map_err(|e| Error::Client(Box::new(e)))?;
    info!(server = %version.git_version, namespace = %args.namespace, "connected");
    let guard = keep_bounds_and_guard(&client, ready, &shutdown);
    let identity = args.identity();
    let mut election = Election::start(&client, &args, &identity, &shutdown);
    let replica = Replica {
        metrics,
        leadership: election.leadership.clone(),
        watchdog,
        guard,
    };
    lead_while_elected(
        &client,
        &args,
        &identity,
        &replica,
        &mut election.leading,
        &shutdown,
    )
    .await;
    election.release().await;
    match server.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(Error::Serve { addr, source }),
        Err(_) => Ok(()),
    }
}

/// Starts keeping the operator's bounds and the guard applied, in the background (failing to
/// apply them must not stop the operator, which RBAC still bounds), and sets `ready` once the
/// guard is in force; returns the guard's state.
fn keep_bounds_and_guard(
    client: &Client,
    ready: Arc<AtomicBool>,
    shutdown: &CancellationToken,
) -> watch::Receiver<GuardState> {
    tokio::spawn(crate::bounds::keep_trying(client.clone(), shutdown.clone()));
    let (guard_tx, guard) = watch::channel(GuardState::Unknown);
    tokio::spawn(crate::guard::keep_applied(
        client.clone(),
        guard_tx,
        shutdown.clone(),
    ));
    // Ready once the guard is known to be in force (or not served): a CSV reaches Succeeded,
    // and an install returns, only when an Initializer created from then on is guarded.
    tokio::spawn(ready_once_guarded(guard.clone(), ready, shutdown.clone()));
    guard
}

/// This replica's part in leader election: whether it leads now, and the campaign to end and
/// the Lease to release when it stops (none with leader election off: it always leads).
struct Election {
    leadership: Leadership,
    leading: watch::Receiver<bool>,
    campaign: Option<(LeaderElector, tokio::task::JoinHandle<()>)>,
}

impl Election {
    fn start(
        client: &Client,
        args: &RunArgs,
        identity: &str,
        shutdown: &CancellationToken,
    ) -> Self {
        let (leading_tx, leading) = watch::channel(!args.elect());
        if !args.elect() {
            drop(leading_tx);
            return Self {
                leadership: Leadership::unconditional(),
                leading,
                campaign: None,
            };
        }
        let config = LeaderConfig::new(
            &args.lease_name,
            args.lease_namespace.as_deref().unwrap_or(&args.namespace),
            identity,
            Duration::from_secs(args.lease_duration_seconds.max(3)),
        );
        let leadership = Leadership::elected(config.renew_deadline);
        let elector = LeaderElector::new(client.clone(), config, leadership.clone());
        let campaign = tokio::spawn(elector.clone().run(leading_tx, shutdown.clone()));
        Self {
            leadership,
            leading,
            campaign: Some((elector, campaign)),
        }
    }

    /// Ends the campaign and releases the Lease. Called once the controllers and supervisors
    /// have stopped: only then may another replica take over.
    async fn release(self) {
        if let Some((elector, campaign)) = self.campaign {
            let _ = campaign.await;
            elector.release().await;
        }
    }
}

/// Runs the controllers for each term this replica leads, until `shutdown`.
async fn lead_while_elected(
    client: &Client,
    args: &RunArgs,
    identity: &str,
    replica: &Replica,
    leading: &mut watch::Receiver<bool>,
    shutdown: &CancellationToken,
) {
    loop {
        if !*leading.borrow_and_update() {
            tokio::select! {
                () = shutdown.cancelled() => break,
                changed = leading.changed() => {
                    if changed.is_err() && !*leading.borrow() {
                        shutdown.cancelled().await;
                        break;
                    }
                    continue;
                }
            }
        }
        replica.metrics.leader.set(1);
        let term = shutdown.child_token();
        let lead = tokio::spawn(lead(
            client.clone(),
            args.clone(),
            identity.to_string(),
            replica.clone(),
            term.clone(),
        ));
        until_the_term_ends(leading, shutdown).await;
        term.cancel();
        let _ = lead.await;
        replica.metrics.leader.set(0);
        if shutdown.is_cancelled() {
            break;
        }
    }
}

/// Waits until this replica loses the lead or `shutdown`.
async fn until_the_term_ends(leading: &mut watch::Receiver<bool>, shutdown: &CancellationToken) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = async {
            loop {
                if leading.changed().await.is_err() {
                    // No elector (leader election off): lead until shutdown.
                    shutdown.cancelled().await;
                    return;
                }
                if !*leading.borrow() {
                    warn!("lost the leader lease: stopping the controllers");
                    return;
                }
            }
        } => {}
    }
}

/// Sets `ready` once the guard's state is settled ([`GuardState::is_settled`]).
async fn ready_once_guarded(
    mut guard: watch::Receiver<GuardState>,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    loop {
        let state = guard.borrow_and_update().clone();
        if state.is_settled(jiff::Timestamp::now()) {
            ready.store(true, Ordering::Relaxed);
            return;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = guard.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// What a replica keeps across its terms as leader, handed to each.
#[derive(Clone)]
struct Replica {
    metrics: Arc<Metrics>,
    leadership: Leadership,
    watchdog: Watchdog,
    /// The guard's state, published by [`crate::guard::keep_applied`].
    guard: watch::Receiver<GuardState>,
}

/// `--network-policy` as this term applies it: `auto` is `off` where the API server serves no
/// NetworkPolicy API (nothing to write, and a watch of it would only fail).
async fn network_policy_mode(client: &Client, mode: NetworkPolicyMode) -> NetworkPolicyMode {
    if mode == NetworkPolicyMode::Auto && !crate::apply::network_policy::served(client).await {
        info!(
            "--network-policy=auto: the API server serves no NetworkPolicy API, so none is written"
        );
        return NetworkPolicyMode::Off;
    }
    mode
}

async fn lead(
    client: Client,
    args: RunArgs,
    identity: String,
    replica: Replica,
    term: CancellationToken,
) {
    let Replica {
        metrics,
        leadership,
        watchdog,
        guard,
    } = replica;
    info!(%identity, "leading: starting the controllers");
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "initializer-operator".into(),
            instance: Some(identity),
        },
    );
    // Kept by the orphan sweep's watch; read by the probers.
    let (configurations, configurations_writer) = kube::runtime::reflector::store();
    let supervisor = Supervisor::new(
        client.clone(),
        recorder.clone(),
        metrics.clone(),
        format!(
            "system:serviceaccount:{}:{}",
            args.namespace, args.service_account
        ),
        leadership,
    )
    .with_connector(args.probe_connector.clone())
    .with_route_deadline(Duration::from_secs(args.route_deadline_seconds))
    .with_watchdog(watchdog)
    .with_configurations(configurations);
    let memory = controller::Memory::default();
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder,
        metrics,
        settings: Settings {
            preset_image: args.preset_image.clone(),
            network_policy: network_policy::settings(
                network_policy_mode(&client, args.network_policy).await,
                args.api_server_cidrs.as_ref(),
                &args.namespace,
            ),
        },
        operator_namespace: args.namespace.clone(),
        supervisor: supervisor.clone(),
        memory: memory.clone(),
        guard,
        policy_canary: args.policy_canary_namespace.clone(),
        policy_api: controller::PolicyApi::default(),
        seen_ranges: Default::default(),
    });
    tokio::join!(
        controller::run(ctx, term.clone()),
        controller::watch_orphans(
            client,
            supervisor.clone(),
            memory,
            configurations_writer,
            term.clone()
        ),
    );
    supervisor.stop_all();
    info!("controllers stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_policy_is_auto_by_default_and_on_needs_api_server_cidrs() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let parse = |args: &[&str]| Cli::try_parse_from([&["run"], args].concat());
        let default = parse(&[]).unwrap().run;
        assert_eq!(
            (default.network_policy, default.api_server_cidrs),
            (NetworkPolicyMode::Auto, None),
            "auto by default, reading the API server's ranges"
        );
        let off = parse(&["--network-policy", "off"]).unwrap().run;
        assert_eq!(off.network_policy, NetworkPolicyMode::Off);
        let err = parse(&["--network-policy", "on"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--api-server-cidrs"), "{err}");
        assert!(parse(&["--network-policy", "on", "--api-server-cidrs", ""]).is_err());
        let on = parse(&[
            "--network-policy",
            "on",
            "--api-server-cidrs",
            "10.0.0.0/24",
        ])
        .unwrap()
        .run;
        assert_eq!(on.api_server_cidrs, Some("10.0.0.0/24".parse().unwrap()));
        let auto = parse(&["--network-policy", "auto"]).unwrap().run;
        assert_eq!(
            (auto.network_policy, auto.api_server_cidrs),
            (NetworkPolicyMode::Auto, None),
            "auto reads the API server's ranges when none are given"
        );
        assert_eq!(auto.route_deadline_seconds, 300);
        assert!(parse(&["--route-deadline-seconds", "0"]).is_err());
    }
}
