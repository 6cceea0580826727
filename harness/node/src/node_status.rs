//! Being a node of a real API server, as the kubelet is: the Node object with its addresses,
//! capacity and a `Ready` condition, the `node.kubernetes.io/not-ready` taint removed once
//! Ready, and a Lease in `kube-node-lease` renewed every [`LEASE_RENEW`], which is the
//! heartbeat kube-controller-manager's node lifecycle controller watches (a node whose lease
//! stops being renewed is marked unreachable and its pods evicted).
//!
//! The objects are built by pure functions of the node's settings and the time; [`run`] only
//! writes them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus, NodeSystemInfo,
    Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// How often the Lease is renewed (the kubelet's default).
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// The Lease's duration (the kubelet's default).
pub const LEASE_SECONDS: i32 = 40;
/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The taint the API server puts on a new node until it is Ready.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// How many pods the node says it can run.
pub const MAX_PODS: &str = "110";

/// What the Node object says about this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIdentity {
    /// The Node object's name, and its Lease's.
    pub name: String,
    /// Its `InternalIP`.
    pub host_ip: IpAddr,
    /// The version it reports as `kubeletVersion` (the API server's own).
    pub version: String,
    /// CPUs in its capacity and allocatable.
    pub cpus: usize,
    /// Memory in its capacity and allocatable, in KiB.
    pub memory_kib: u64,
}

/// The Node object as first created: labels the kubelet sets.
pub fn node_object(identity: &NodeIdentity) -> Node {
    let labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), identity.name.clone()),
        (
            "kubernetes.io/os".to_owned(),
            std::env::consts::OS.to_owned(),
        ),
        ("kubernetes.io/arch".to_owned(), arch().to_owned()),
        (
            "node.initializer.dev/agent".to_owned(),
            "initializer-node".to_owned(),
        ),
    ]);
    Node {
        metadata: ObjectMeta {
            name: Some(identity.name.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec::default()),
        status: None,
    }
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The node's status at `now`: Ready, no pressure, its addresses and capacity.
pub fn node_status(identity: &NodeIdentity, now: jiff::Timestamp) -> NodeStatus {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    let capacity = BTreeMap::from([
        ("cpu".to_owned(), Quantity(identity.cpus.to_string())),
        (
            "memory".to_owned(),
            Quantity(format!("{}Ki", identity.memory_kib)),
        ),
        ("pods".to_owned(), Quantity(MAX_PODS.to_owned())),
        ("ephemeral-storage".to_owned(), Quantity("10Gi".to_owned())),
    ]);
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_owned(),
                address: identity.host_ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".to_owned(),
                address: identity.name.clone(),
            },
        ]),
        allocatable: Some(capacity.clone()),
        capacity: Some(capacity),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "the node agent does not measure memory pressure",
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "the node agent does not measure disk pressure",
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "the node agent does not measure PID pressure",
            ),
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "initializer-node is posting ready status",
            ),
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints::default()),
        node_info: Some(NodeSystemInfo {
            architecture: arch().to_owned(),
            operating_system: std::env::consts::OS.to_owned(),
            kubelet_version: identity.version.clone(),
            kube_proxy_version: String::new(),
            container_runtime_version: "process://initializer-node".to_owned(),
            kernel_version: String::new(),
            os_image: "initializer-node (pods as processes)".to_owned(),
            machine_id: String::new(),
            system_uuid: String::new(),
            boot_id: String::new(),
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    }
}

/// The taints without `not-ready`, or `None` when there is nothing to remove.
pub fn without_not_ready(taints: &[Taint]) -> Option<Vec<Taint>> {
    let kept: Vec<Taint> = taints
        .iter()
        .filter(|t| t.key != NOT_READY_TAINT)
        .cloned()
        .collect();
    (kept.len() != taints.len()).then_some(kept)
}

/// The node's Lease, renewed at `now`.
pub fn lease(name: &str, now: jiff::Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(LEASE_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_owned()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        }),
    }
}

/// The machine's CPUs and memory (KiB), for the Node's capacity.
pub fn machine_capacity() -> (usize, u64) {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(1024 * 1024);
    (cpus, memory)
}

/// Registers the node, then keeps it Ready and its Lease renewed until `shutdown`.
pub async fn run(client: Client, identity: NodeIdentity, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(LEASE_RENEW);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = ticker.tick() => {}
        }
        if let Err(e) = heartbeat(&client, &identity).await {
            tracing::warn!(node = %identity.name, error = %e, "failed to update the node; retrying");
        }
    }
}

/// One heartbeat: the Node exists with a fresh status and no `not-ready` taint, and the Lease
/// is renewed.
pub async fn heartbeat(client: &Client, identity: &NodeIdentity) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = match nodes.get_opt(&identity.name).await? {
        Some(node) => node,
        None => match nodes
            .create(&PostParams::default(), &node_object(identity))
            .await
        {
            Ok(node) => node,
            Err(kube::Error::Api(status)) if status.code == 409 => {
                nodes.get(&identity.name).await?
            }
            Err(e) => return Err(e),
        },
    };
    let now = crate::clock::now();
    nodes
        .patch_status(
            &identity.name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": node_status(identity, now) })),
        )
        .await?;
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if let Some(kept) = without_not_ready(&taints) {
        nodes
            .patch(
                &identity.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "taints": kept } })),
            )
            .await?;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let renewed = lease(&identity.name, now);
    match leases.get_opt(&identity.name).await? {
        None => {
            leases.create(&PostParams::default(), &renewed).await?;
        }
        Some(current) => {
            let mut next = renewed;
            next.metadata.resource_version = current.metadata.resource_version;
            leases
                .replace(&identity.name, &PostParams::default(), &next)
                .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn identity() -> NodeIdentity {
        NodeIdentity {
            name: "node-1".into(),
            host_ip: IpAddr::V4(Ipv4Addr::new(10, 200, 0, 1)),
            version: "v1.35.4".into(),
            cpus: 2,
            memory_kib: 1024,
        }
    }

    #[test]
    fn the_status_is_ready_with_the_internal_address_and_capacity() {
        let status = node_status(&identity(), jiff::Timestamp::UNIX_EPOCH);
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        let addresses = status.addresses.unwrap();
        assert_eq!(addresses[0].type_, "InternalIP");
        assert_eq!(addresses[0].address, "10.200.0.1");
        let capacity = status.capacity.unwrap();
        assert_eq!(capacity["cpu"].0, "2");
        assert_eq!(capacity["memory"].0, "1024Ki");
        assert_eq!(capacity["pods"].0, MAX_PODS);
        assert_eq!(status.node_info.unwrap().kubelet_version, "v1.35.4");
    }

    #[test]
    fn only_the_not_ready_taint_is_removed() {
        let taint = |key: &str| Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        assert_eq!(without_not_ready(&[taint("dedicated")]), None);
        assert_eq!(
            without_not_ready(&[taint(NOT_READY_TAINT), taint("dedicated")]),
            Some(vec![taint("dedicated")])
        );
        assert_eq!(without_not_ready(&[]), None);
    }

    #[test]
    fn the_lease_is_held_by_the_node_in_kube_node_lease() {
        let lease = lease("node-1", jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(lease.metadata.namespace.as_deref(), Some(LEASE_NAMESPACE));
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("node-1"));
        assert_eq!(spec.lease_duration_seconds, Some(LEASE_SECONDS));
    }
}
