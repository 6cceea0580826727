//! The cluster target: a kubeconfig context (`E2E_CLUSTER=kind` or `E2E_KUBECONTEXT=<ctx>`).
//!
//! Pod control on kind is done where it is honest: on the node. Every kind node is a container
//! of the host's engine, so `docker exec <node> crictl inspect` gives the host PID of each of the
//! pod's containers, and `docker exec <node> kill -STOP <pid>` freezes it exactly as the sandbox
//! does: the process stays, its listening socket keeps accepting connections into the backlog,
//! and nothing answers. Signals from inside the pod would not do (PID 1 of a PID namespace
//! ignores SIGSTOP and SIGKILL sent from within it), and a NetworkPolicy would refuse connections
//! instead of hanging them. Kill is SIGKILL the same way, so the kubelet restarts the container as
//! it would after a crash. Other clusters get a clear error for freeze and kill.
//!
//! What must reach pods from this host (Prometheus scraping the operator in the alerts scenario)
//! runs in the network namespace of a kind worker node (`nsenter --net`), where every pod
//! address is routed: a host process with the node's network, as on the real control plane. Not
//! the control-plane node's, whose address is kube-apiserver's own; and not a pod's own node
//! when what runs attacks that pod, since there it would share the kubelet's address.
//! That needs root and an engine on this machine; elsewhere it is `None`, and the scenario says so.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use tokio::process::Command;

use crate::target::{Access, PodAction, PodFuture, PodRef, RouteBlock, Target};

/// A cluster reached through a kubeconfig context.
pub struct ClusterTarget {
    // The kubeconfig is a copy whose current context is the chosen one.
    access: Access,
    control: PodControl,
    // Holds the kubeconfig copy; removed on drop.
    _dir: tempfile::TempDir,
    docker: String,
    /// The network namespaces of the kind worker nodes (`/proc/<pid>/ns/net`, by node name; the
    /// control-plane node's in a cluster without workers), when this process may enter them.
    node_networks: Vec<(String, PathBuf)>,
}

impl ClusterTarget {
    /// Connects to `context` (or the current context) of the default kubeconfig.
    pub async fn connect(context: Option<String>, kind: bool) -> anyhow::Result<Self> {
        let mut kubeconfig = Kubeconfig::read()
            .context("failed to read the kubeconfig (KUBECONFIG or ~/.kube/config)")?;
        let context = match context {
            Some(context) => context,
            None => kubeconfig.current_context.clone().context(
                "failed to find a current context in the kubeconfig: set E2E_KUBECONTEXT",
            )?,
        };
        if !kubeconfig.contexts.iter().any(|c| c.name == context) {
            bail!("failed to find the context {context:?} in the kubeconfig");
        }
        kubeconfig.current_context = Some(context.clone());
        // Child processes (the installer) must talk to the same cluster: give them a kubeconfig
        // whose current context is the chosen one.
        let dir = tempfile::Builder::new()
            .prefix("initializer-e2e-kubeconfig")
            .tempdir()
            .context("failed to create a directory for the kubeconfig")?;
        let path = dir.path().join("kubeconfig");
        let body =
            serde_saphyr::to_string(&kubeconfig).context("failed to serialize the kubeconfig")?;
        std::fs::write(&path, body)
            .with_context(|| format!("failed to write {}", path.display()))?;
        let options = KubeConfigOptions {
            context: Some(context.clone()),
            ..Default::default()
        };
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .with_context(|| format!("failed to load the kubeconfig context {context:?}"))?;
        // The suite sees every answer as the API server gives it: kube's retry of 429, 503 and
        // 504 would turn a refused create into a slow success.
        config.default_retry = false;
        let client = Client::try_from(config).context("failed to build a client")?;
        let version = client
            .apiserver_version()
            .await
            .with_context(|| format!("failed to reach the API server of context {context:?}"))?;
        // A sandbox started elsewhere (`sandbox up`) controls its pods through its own API.
        let control = if version.git_version.ends_with("-sandbox") {
            PodControl::SandboxApi
        } else if kind {
            PodControl::KindNodes
        } else {
            PodControl::Unsupported
        };
        let docker = std::env::var("E2E_DOCKER").unwrap_or_else(|_| "docker".to_string());
        // Workers' networks, not the control-plane node's: kube-apiserver runs on the host
        // network of that node, so a program run there shares the API server's source address
        // (no pod ever does), and an attacker run there would be taken for the API server.
        let node_networks = match (control, context.strip_prefix("kind-")) {
            (PodControl::KindNodes, Some(cluster)) => kind_node_networks(&docker, cluster).await,
            _ => Vec::new(),
        };
        Ok(Self {
            access: Access {
                name: match control {
                    PodControl::KindNodes => format!("kind ({context})"),
                    PodControl::SandboxApi => format!("sandbox ({context})"),
                    PodControl::Unsupported => context,
                },
                client,
                kubeconfig: path,
            },
            control,
            _dir: dir,
            docker,
            node_networks,
        })
    }

    /// Freezes, thaws or kills every container process of the pod: on a kind node by signalling
    /// it, on a sandbox through its API.
    async fn signal_pod(
        &self,
        namespace: &str,
        name: &str,
        action: PodAction,
    ) -> anyhow::Result<()> {
        let signal = action.signal();
        match self.control {
            PodControl::KindNodes => {}
            PodControl::SandboxApi => {
                let client = &self.access.client;
                return crate::sandbox::pod_action(client, namespace, name, action).await;
            }
            PodControl::Unsupported => bail!(
                "failed to {signal} pod {namespace}/{name}: pod control needs a kind cluster \
                 (processes are signalled on the node) or a sandbox; set E2E_CLUSTER=kind"
            ),
        }
        let pod = Api::<Pod>::namespaced(self.access.client.clone(), namespace)
            .get(name)
            .await
            .with_context(|| format!("failed to get pod {namespace}/{name}"))?;
        let node = pod
            .spec
            .as_ref()
            .and_then(|spec| spec.node_name.clone())
            .with_context(|| {
                format!("failed to {signal} pod {namespace}/{name}: it has no node")
            })?;
        let ids: Vec<String> = pod
            .status
            .iter()
            .flat_map(|status| status.container_statuses.iter().flatten())
            .filter_map(|status| status.container_id.as_deref())
            .map(|id| id.rsplit("://").next().unwrap_or(id).to_string())
            .collect();
        if ids.is_empty() {
            bail!("failed to {signal} pod {namespace}/{name}: no container has started");
        }
        for id in ids {
            let pid = self
                .node_exec(
                    &node,
                    &[
                        "crictl",
                        "inspect",
                        "--output",
                        "go-template",
                        "--template",
                        "{{.info.pid}}",
                        &id,
                    ],
                )
                .await?;
            let pid = pid.trim();
            if pid.is_empty() || pid == "0" {
                // The container is not running (it exited and waits for its restart).
                continue;
            }
            self.node_exec(&node, &["kill", &format!("-{signal}"), pid])
                .await?;
        }
        Ok(())
    }

    async fn node_exec(&self, node: &str, args: &[&str]) -> anyhow::Result<String> {
        let output = Command::new(&self.docker)
            .arg("exec")
            .arg(node)
            .args(args)
            .output()
            .await
            .with_context(|| {
                format!(
                    "failed to run {} exec {node} {}",
                    self.docker,
                    args.join(" ")
                )
            })?;
        if !output.status.success() {
            bail!(
                "failed to run {} exec {node} {}: {}",
                self.docker,
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// The network namespaces of kind cluster `cluster`'s worker nodes, by node name (a kind node's
/// container is named as its Node), or the control-plane node's when it has no worker; empty
/// unless this process is root and the engine runs here (its PIDs are then this machine's).
async fn kind_node_networks(docker: &str, cluster: &str) -> Vec<(String, PathBuf)> {
    if !is_root() {
        return Vec::new();
    }
    let mut networks = Vec::new();
    for role in ["worker", "control-plane"] {
        for node in kind_nodes(docker, cluster, role).await {
            if let Some(network) = node_network(docker, &node).await {
                networks.push((node, network));
            }
        }
        if !networks.is_empty() {
            break;
        }
    }
    networks
}

/// The node containers of kind cluster `cluster` with `role`, by name.
async fn kind_nodes(docker: &str, cluster: &str, role: &str) -> Vec<String> {
    let output = Command::new(docker)
        .args([
            "ps",
            "--filter",
            &format!("label=io.x-k8s.kind.cluster={cluster}"),
            "--filter",
            &format!("label=io.x-k8s.kind.role={role}"),
            "--format",
            "{{.Names}}",
        ])
        .output()
        .await;
    let mut nodes: Vec<String> = output
        .map(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    nodes
}

/// The network namespace of the kind node container `node`.
async fn node_network(docker: &str, node: &str) -> Option<PathBuf> {
    let output = Command::new(docker)
        .args(["inspect", "--format", "{{.State.Pid}}", node])
        .output()
        .await
        .ok()?;
    let pid: u32 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .ok()?;
    let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
    (pid != 0 && path.exists()).then_some(path)
}

/// Whether this process runs as root (entering another network namespace needs it).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|id| id == "0"))
        })
        .unwrap_or(false)
}

/// `program` run in the network namespace `network` (`nsenter --net`), with this host's files.
fn enter(network: &Path, program: &Path) -> std::process::Command {
    let mut command = std::process::Command::new("nsenter");
    command
        .arg(format!("--net={}", network.display()))
        .arg("--")
        .arg(program);
    command
}

/// How pods of this cluster are frozen, thawed and killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PodControl {
    /// Signals sent on the kind node (`docker exec`).
    KindNodes,
    /// The sandbox's `/sandbox/v1/pods` API.
    SandboxApi,
    /// Neither: scenarios that freeze or kill fail with a clear message.
    Unsupported,
}

impl Target for ClusterTarget {
    fn access(&self) -> &Access {
        &self.access
    }

    fn command_inside(&self, program: &Path) -> Option<std::process::Command> {
        // The pods' network is the node container's: run there, with this host's files.
        let (_, network) = self.node_networks.first()?;
        Some(enter(network, program))
    }

    fn command_inside_away_from(
        &self,
        program: &Path,
        node: Option<&str>,
    ) -> Option<std::process::Command> {
        // On the pod's own node this program's source address would be the kubelet's (the
        // node's end of the pod's link), and its probes would share its fate.
        let (_, network) = self
            .node_networks
            .iter()
            .find(|(name, _)| Some(name.as_str()) != node)?;
        Some(enter(network, program))
    }

    fn control_pod<'a>(&'a self, pod: PodRef<'a>, action: PodAction) -> PodFuture<'a> {
        self.signal_pod(pod.namespace, pod.name, action).boxed()
    }

    fn refuse_from_api_server<'a>(
        &'a self,
        ip: &'a str,
        port: u16,
    ) -> BoxFuture<'a, anyhow::Result<RouteBlock>> {
        async move {
            if self.control != PodControl::KindNodes {
                bail!(
                    "failed to refuse {ip}:{port} to the API server: it needs a kind cluster, whose control-plane node is a container here"
                );
            }
            let nodes = Api::<Node>::all(self.access.client.clone())
                .list(&ListParams::default().labels("node-role.kubernetes.io/control-plane"))
                .await
                .context("failed to list the control-plane nodes")?;
            let node = nodes
                .items
                .first()
                .map(ResourceExt::name_any)
                .context("failed to find a control-plane node")?;
            // kube-apiserver runs on that node's host network: its connections to a Service
            // leave through that node's output hook.
            RouteBlock::insert(&self.docker, &node, ip, port).await
        }
        .boxed()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }
}
