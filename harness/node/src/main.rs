//! `initializer-node`: the node agent as its own process, running the pods of any API server as
//! local processes until SIGINT or SIGTERM.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Parser;
use initializer_node::{NodeConfig, PodAddresses, PodCredentials};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    name = "initializer-node",
    about = "Run the pods of a Kubernetes API server as local processes"
)]
struct Cli {
    /// Kubeconfig of the API server; pods get a copy of it. Default: kube's usual inference
    /// ($KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The node's name: pods whose spec.nodeName is unset or equal to it run here. Default: the
    /// host name.
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// The node's address, reported as pods' status.hostIP.
    #[arg(long, default_value = "127.0.0.1")]
    host_ip: IpAddr,
    /// The range pods' addresses come from. Pods' servers bind their own address, so the range
    /// must be local to this host (127.0.0.0/8 always is; for another range, e.g.
    /// `ip route add local 10.244.0.0/16 dev lo`).
    #[arg(long, default_value = "127.1.0.0/16")]
    pod_cidr: PodAddresses,
    /// Directory for pods' files (volumes, kubeconfigs) and logs. Created if missing.
    #[arg(long, default_value = ".initializer-node")]
    state_dir: PathBuf,
    /// Image map: YAML mapping image references to local executables.
    #[arg(long)]
    images: Option<PathBuf>,
    /// Register a Node with the API server, renew its Lease and bind unbound pods to it (a real
    /// API server, which has no scheduler here). Then only pods bound to this node run.
    #[arg(long)]
    register_node: bool,
    /// The API server's URL as pods reach it. Given, each pod gets a kubeconfig with its own
    /// service-account token (TokenRequest, bound to the pod) and the cluster's CA from its
    /// `kube-api-access` volume; without it, every pod gets a copy of the node's kubeconfig.
    #[arg(long)]
    api_server: Option<String>,
    /// Log as JSON lines.
    #[arg(long, env = "LOG_JSON")]
    log_json: bool,
}

/// The host name, as the kubelet defaults its node name.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().to_lowercase();
    (!name.is_empty()).then_some(name)
}

/// The kubeconfig file kube's inference reads when none is given: the first of `$KUBECONFIG`,
/// else `~/.kube/config`.
fn inferred_kubeconfig() -> Option<PathBuf> {
    if let Some(list) = std::env::var_os("KUBECONFIG") {
        return std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty());
    }
    std::env::var_os("HOME").map(|home| Path::new(&home).join(".kube").join("config"))
}

async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("failed to read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .context("failed to load kubeconfig")?
        }
        None => kube::Config::infer()
            .await
            .context("failed to infer the api server's configuration")?,
    };
    kube::Client::try_from(config).context("failed to build client")
}

/// An absolute path: pods run in their own directories, so relative paths would not reach them.
fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("failed to resolve {}", path.display()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    initializer_telemetry::Logging::new()
        .json(cli.log_json)
        .stderr()
        .init();
    let node_name = cli
        .node_name
        .or_else(host_name)
        .context("failed to find the host name: give --node-name")?;
    let client = client(cli.kubeconfig.as_deref()).await?;
    let pod_kubeconfig = match cli.kubeconfig.or_else(inferred_kubeconfig) {
        Some(path) => absolute(&path)?,
        None => PathBuf::new(),
    };
    if !pod_kubeconfig.is_file() {
        tracing::warn!(kubeconfig = %pod_kubeconfig.display(), "no kubeconfig file to give pods");
    }
    std::fs::create_dir_all(&cli.state_dir)
        .with_context(|| format!("failed to create {}", cli.state_dir.display()))?;
    let state_dir = std::fs::canonicalize(&cli.state_dir)
        .with_context(|| format!("failed to resolve {}", cli.state_dir.display()))?;
    let image_map = cli.images.as_deref().map(absolute).transpose()?;
    let node = initializer_node::start(NodeConfig {
        client,
        node_name: node_name.clone(),
        host_ip: cli.host_ip,
        pod_addresses: cli.pod_cidr,
        state_dir: state_dir.clone(),
        image_map,
        pod_credentials: match cli.api_server {
            Some(server) => PodCredentials::ServiceAccount { server },
            None => PodCredentials::Shared(pod_kubeconfig),
        },
        register: cli.register_node,
        shutdown: CancellationToken::new(),
    })
    .await
    .context("failed to start the node")?;
    tracing::info!(
        node = %node_name,
        pod_cidr = %cli.pod_cidr,
        state_dir = %state_dir.display(),
        "node running"
    );
    wait_for_signal().await?;
    tracing::info!("shutting down");
    node.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("failed to watch SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("failed to watch SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
