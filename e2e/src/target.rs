//! What a scenario needs from the place it runs: a client, a kubeconfig, and a way to make an
//! initializer's pod hang or crash. Scenarios see only this trait, so the same code runs on the
//! sandbox and on a real cluster.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context as _;
use futures::FutureExt;
use futures::future::BoxFuture;

/// How a target is reached, whatever runs it.
pub struct Access {
    /// Short name for logs and the timings table (`sandbox`, `kind`, or the context).
    pub name: String,
    /// A client with cluster-admin rights.
    pub client: kube::Client,
    /// The kubeconfig file a person (or a child process) uses to reach this API.
    pub kubeconfig: PathBuf,
}

/// A pod, by namespace and name.
#[derive(Clone, Copy, Debug)]
pub struct PodRef<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod's name.
    pub name: &'a str,
}

/// What controlling a pod returns.
pub type PodFuture<'a> = BoxFuture<'a, anyhow::Result<()>>;

/// A running Kubernetes API (the sandbox, or a cluster reached through a kubeconfig context).
pub trait Target: Send + Sync {
    /// How this target is reached.
    fn access(&self) -> &Access;

    /// Short name for logs and the timings table (`sandbox`, `kind`, or the context).
    fn name(&self) -> &str {
        &self.access().name
    }

    /// The kubeconfig file a person (or a child process) uses to reach this API.
    fn kubeconfig_path(&self) -> &Path {
        &self.access().kubeconfig
    }

    /// A client with cluster-admin rights.
    fn client(&self) -> kube::Client {
        self.access().client.clone()
    }

    /// Freezes, thaws or kills every container process of the pod (see [`PodAction`]).
    fn control_pod<'a>(&'a self, pod: PodRef<'a>, action: PodAction) -> PodFuture<'a>;

    /// Makes every container of the pod stop answering while it stays `Running` and keeps
    /// accepting connections: SIGSTOP to its processes.
    fn freeze_pod<'a>(&'a self, namespace: &'a str, name: &'a str) -> PodFuture<'a> {
        self.control_pod(PodRef { namespace, name }, PodAction::Freeze)
    }

    /// Resumes a frozen pod (SIGCONT).
    fn thaw_pod<'a>(&'a self, namespace: &'a str, name: &'a str) -> PodFuture<'a> {
        self.control_pod(PodRef { namespace, name }, PodAction::Thaw)
    }

    /// Kills every process of the pod (SIGKILL); the pod's restart policy then applies, as when
    /// an initializer crashes.
    fn kill_pod<'a>(&'a self, namespace: &'a str, name: &'a str) -> PodFuture<'a> {
        self.control_pod(PodRef { namespace, name }, PodAction::Kill)
    }

    /// Resolves when the target itself fails (a control-plane process exits), with the
    /// reason; never, for targets that cannot tell. The runner races every scenario against
    /// it, so such a failure fails the scenario at once with the process's last log lines.
    fn failure(&self) -> BoxFuture<'_, anyhow::Error> {
        Box::pin(futures::future::pending())
    }

    /// Lines about the target's own processes for the end of the run (the real control
    /// plane: each component's resident memory); none by default.
    fn resources(&self) -> Vec<String> {
        Vec::new()
    }

    /// A command that runs `program` where the cluster's pods are reachable by their IPs: on
    /// this host by default (the sandbox's pods are processes on loopback); inside the real
    /// control plane's network namespace there. `None` when there is no such place here (a
    /// kind cluster's pods live in its node container).
    fn command_inside(&self, program: &Path) -> Option<std::process::Command> {
        Some(std::process::Command::new(program))
    }

    /// Like [`Target::command_inside`], from a place that is not the node `node` (a pod's
    /// `spec.nodeName`), so that `program` shares no source address with that node's kubelet:
    /// what it does to a pod's connections cannot touch the kubelet's probes of that pod. The
    /// same place by default (the sandbox and the real control plane have one node, whose agent
    /// probes from no address a program there uses); on kind, another worker's network, or
    /// `None` when there is none.
    fn command_inside_away_from(
        &self,
        program: &Path,
        node: Option<&str>,
    ) -> Option<std::process::Command> {
        let _ = node;
        self.command_inside(program)
    }

    /// Makes the API server's connections to the Service address `ip:port` refused on its own
    /// node, as kube-proxy there refuses them until it routes a new Service's endpoints, and as a
    /// firewall between the control plane and the nodes does; pods elsewhere still reach it.
    /// Lifted by [`RouteBlock::lift`], or when the block is dropped. Only kind has such a node
    /// here: the other targets say so.
    fn refuse_from_api_server<'a>(
        &'a self,
        ip: &'a str,
        port: u16,
    ) -> BoxFuture<'a, anyhow::Result<RouteBlock>> {
        Box::pin(async move {
            anyhow::bail!(
                "failed to refuse {ip}:{port} to the API server: {} has no node of its own (runs on kind)",
                self.name()
            )
        })
    }

    /// Stops whatever the target started (the sandbox and every process it runs).
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// Takes what `slot` holds and stops it with `stop`: the first shutdown stops it, a later one
/// finds the slot empty and does nothing.
pub fn shut_down_once<'a, T, F>(
    slot: &Mutex<Option<T>>,
    stop: impl FnOnce(T) -> F + Send + 'a,
) -> BoxFuture<'a, ()>
where
    T: Send + 'a,
    F: Future<Output = ()> + Send + 'a,
{
    let taken = slot.lock().ok().and_then(|mut slot| slot.take());
    async move {
        if let Some(taken) = taken {
            stop(taken).await;
        }
    }
    .boxed()
}

/// The nftables table a [`RouteBlock`] holds its rule in.
const ROUTE_BLOCK_TABLE: &str = "initializer-e2e-route";
/// `nft` arguments that delete that table.
const DELETE_ROUTE_BLOCK: [&str; 4] = ["delete", "table", "ip", ROUTE_BLOCK_TABLE];

/// A rule in an nftables table of its own in a node container, the table deleted by
/// [`RouteBlock::lift`] or, failing that, when dropped (a scenario that fails or panics leaves
/// no rule behind). Not a rule in iptables' `filter` table: the node's network policy agent
/// (kube-router) saves and restores that table whole, which may drop a rule written between its
/// save and its restore or bring a deleted one back, and it puts its own jump, which accepts,
/// ahead of everything. A drop or reject in a table of one's own is final whatever another
/// table accepts.
pub struct RouteBlock {
    docker: String,
    node: String,
    lifted: bool,
}

impl RouteBlock {
    /// Makes the connections that node opens to `ip:port` refused (a reset). The chain comes
    /// before the service proxy's DNAT (priority `mangle`), so it matches the Service address as
    /// sent.
    pub async fn insert(docker: &str, node: &str, ip: &str, port: u16) -> anyhow::Result<Self> {
        let mut block = Self {
            docker: docker.to_string(),
            node: node.to_string(),
            lifted: true,
        };
        let ruleset = format!(
            "table ip {ROUTE_BLOCK_TABLE} {{\n  chain output {{\n    type filter hook output priority mangle; policy accept;\n    ip daddr {ip} tcp dport {port} counter reject with tcp reset\n  }}\n}}\n"
        );
        let mut child = tokio::process::Command::new(&block.docker)
            .args(["exec", "-i", &block.node, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("failed to run {docker} exec {node} nft"))?;
        if let Some(mut stdin) = child.stdin.take() {
            use tokio::io::AsyncWriteExt as _;
            stdin.write_all(ruleset.as_bytes()).await?;
        }
        let output = child.wait_with_output().await?;
        anyhow::ensure!(
            output.status.success(),
            "failed to load {ruleset} in {node}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        block.lifted = false;
        Ok(block)
    }

    /// Deletes the table, and makes sure the node holds it no more.
    pub async fn lift(mut self) -> anyhow::Result<()> {
        let deleted = self.nft(&DELETE_ROUTE_BLOCK).await?;
        anyhow::ensure!(
            deleted.status.success(),
            "failed to delete the table {ROUTE_BLOCK_TABLE} in {}: {}",
            self.node,
            String::from_utf8_lossy(&deleted.stderr).trim()
        );
        self.lifted = true;
        let listed = self
            .nft(&["list", "table", "ip", ROUTE_BLOCK_TABLE])
            .await?;
        anyhow::ensure!(
            !listed.status.success(),
            "the table {ROUTE_BLOCK_TABLE} is still in {} once deleted:\n{}",
            self.node,
            String::from_utf8_lossy(&listed.stdout)
        );
        Ok(())
    }

    /// How many packets the rule has refused so far (its counter).
    pub async fn matched(&self) -> anyhow::Result<u64> {
        let listed = self
            .nft(&["list", "table", "ip", ROUTE_BLOCK_TABLE])
            .await?;
        let listing = String::from_utf8_lossy(&listed.stdout);
        listing
            .split_whitespace()
            .skip_while(|word| *word != "packets")
            .nth(1)
            .and_then(|packets| packets.parse().ok())
            .with_context(|| format!("no packet counter in {}:\n{listing}", self.node))
    }

    async fn nft(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        tokio::process::Command::new(&self.docker)
            .args(["exec", &self.node, "nft"])
            .args(args)
            .output()
            .await
            .with_context(|| format!("failed to run {} exec {} nft", self.docker, self.node))
    }
}

impl Drop for RouteBlock {
    fn drop(&mut self) {
        if !self.lifted {
            let _ = std::process::Command::new(&self.docker)
                .args(["exec", &self.node, "nft"])
                .args(DELETE_ROUTE_BLOCK)
                .status();
        }
    }
}

/// What to do to a pod's processes: freeze (SIGSTOP, the hung initializer), thaw (SIGCONT) or
/// kill (SIGKILL, the crashed initializer).
pub use initializer_controlplane::signal::PodSignal as PodAction;

/// Which target the environment asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetChoice {
    /// The embedded sandbox, started in-process (the default).
    Sandbox,
    /// The embedded sandbox in its legacy mode: it also serves the Kubernetes 1.7–1.13
    /// Initializers (`admissionregistration.k8s.io/v1alpha1` `InitializerConfiguration`,
    /// `metadata.initializers`). No real control plane we can run here serves them, so the
    /// legacy scenarios and `make run LEGACY=1` run on this one only.
    LegacySandbox,
    /// The real control plane, built from the Go modules and started by this process.
    Real,
    /// The cluster of a kubeconfig context (`None`: the current context).
    Cluster {
        /// The context's name, or the current context.
        context: Option<String>,
        /// Whether the cluster is a kind cluster (pod control through `docker exec` on nodes).
        kind: bool,
    },
}

impl TargetChoice {
    /// Reads `E2E_CLUSTER` (`sandbox`, the default, `real` or `kind`) and `E2E_KUBECONTEXT`.
    pub fn from_env() -> anyhow::Result<Self> {
        let cluster = std::env::var("E2E_CLUSTER").unwrap_or_default();
        let context = std::env::var("E2E_KUBECONTEXT")
            .ok()
            .filter(|c| !c.is_empty());
        Self::parse(&cluster, context)
    }

    /// The target of `make run LEGACY=1`: [`from_env`](Self::from_env) when `E2E_LEGACY` is
    /// empty or `0`, else the legacy sandbox, which only the sandbox can be.
    pub fn from_env_with_legacy() -> anyhow::Result<Self> {
        let legacy = std::env::var("E2E_LEGACY").unwrap_or_default();
        Self::with_legacy(Self::from_env()?, &legacy)
    }

    /// `choice`, or its legacy-mode variant when `legacy` is set (anything but empty or `0`).
    pub fn with_legacy(choice: Self, legacy: &str) -> anyhow::Result<Self> {
        if legacy.is_empty() || legacy == "0" {
            return Ok(choice);
        }
        match choice {
            Self::Sandbox | Self::LegacySandbox => Ok(Self::LegacySandbox),
            Self::Real => anyhow::bail!(
                "failed to run with LEGACY={legacy} on the real control plane: it is Kubernetes \
                 1.35, which removed the 1.7–1.13 Initializers (admissionregistration.k8s.io/v1alpha1); \
                 only the sandbox serves them (drop CLUSTER=real)"
            ),
            Self::Cluster { context, .. } => anyhow::bail!(
                "failed to run with LEGACY={legacy} on the cluster of context {}: only the sandbox \
                 serves the 1.7–1.13 Initializers (admissionregistration.k8s.io/v1alpha1) together \
                 with the APIs the operator needs (the real control plane is Kubernetes 1.35)",
                context.as_deref().unwrap_or("(current)")
            ),
        }
    }

    /// The choice for the given `E2E_CLUSTER` value and context.
    pub fn parse(cluster: &str, context: Option<String>) -> anyhow::Result<Self> {
        match cluster {
            "" | "sandbox" if context.is_none() => Ok(Self::Sandbox),
            "real" if context.is_none() => Ok(Self::Real),
            "real" => anyhow::bail!(
                "failed to understand E2E_CLUSTER=real with E2E_KUBECONTEXT: the real target \
                 starts its own control plane; unset one of them"
            ),
            "" | "sandbox" | "kind" => {
                let kind =
                    cluster == "kind" || context.as_deref().is_some_and(|c| c.starts_with("kind-"));
                Ok(Self::Cluster { context, kind })
            }
            other => anyhow::bail!(
                "failed to understand E2E_CLUSTER={other:?}: use `sandbox` (the default), `real` or `kind`"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_setting_means_the_sandbox() {
        assert_eq!(
            TargetChoice::parse("", None).unwrap(),
            TargetChoice::Sandbox
        );
    }

    #[test]
    fn real_means_the_control_plane_this_process_starts() {
        assert_eq!(
            TargetChoice::parse("real", None).unwrap(),
            TargetChoice::Real
        );
        assert!(TargetChoice::parse("real", Some("kind-x".into())).is_err());
    }

    #[test]
    fn kind_means_the_current_context_of_a_kind_cluster() {
        assert_eq!(
            TargetChoice::parse("kind", None).unwrap(),
            TargetChoice::Cluster {
                context: None,
                kind: true
            }
        );
    }

    #[test]
    fn a_kind_context_is_recognised_by_its_prefix() {
        assert_eq!(
            TargetChoice::parse("", Some("kind-e2e".into())).unwrap(),
            TargetChoice::Cluster {
                context: Some("kind-e2e".into()),
                kind: true
            }
        );
        assert_eq!(
            TargetChoice::parse("", Some("prod".into())).unwrap(),
            TargetChoice::Cluster {
                context: Some("prod".into()),
                kind: false
            }
        );
    }

    #[test]
    fn legacy_means_the_sandbox_in_legacy_mode_and_nothing_else() {
        assert_eq!(
            TargetChoice::with_legacy(TargetChoice::Sandbox, "1").unwrap(),
            TargetChoice::LegacySandbox
        );
        assert_eq!(
            TargetChoice::with_legacy(TargetChoice::Sandbox, "0").unwrap(),
            TargetChoice::Sandbox
        );
        assert_eq!(
            TargetChoice::with_legacy(TargetChoice::Real, "").unwrap(),
            TargetChoice::Real
        );
        let err = TargetChoice::with_legacy(TargetChoice::Real, "1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("v1alpha1") && err.contains("1.35"), "{err}");
    }

    #[test]
    fn an_unknown_cluster_kind_is_refused_with_the_choices() {
        let err = TargetChoice::parse("minikube", None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sandbox") && err.contains("real") && err.contains("kind"),
            "{err}"
        );
    }
}
