//! The pod runner ("kubelet"): one worker per pod that runs on this node, an address per pod
//! from the node's pod address range.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Error;
use crate::pod::{self, Node};

/// The range pods' addresses come from, such as `127.1.0.0/16` (the sandbox: loopback addresses
/// that need no network setup) or a node's pod CIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodAddresses {
    base: Ipv4Addr,
    prefix_len: u8,
}

impl PodAddresses {
    /// The range `base/prefix_len`; host bits of `base` are cleared. `prefix_len` must be 1 to 30
    /// (a smaller range has no address to give).
    pub fn new(base: Ipv4Addr, prefix_len: u8) -> Result<Self, Error> {
        if !(1..=30).contains(&prefix_len) {
            return Err(Error::PodAddresses(format!(
                "{base}/{prefix_len}: the prefix length must be 1 to 30"
            )));
        }
        let mask = u32::MAX << (32 - u32::from(prefix_len));
        Ok(Self {
            base: Ipv4Addr::from(u32::from(base) & mask),
            prefix_len,
        })
    }

    /// The range's first address (its network address).
    pub fn base(&self) -> Ipv4Addr {
        self.base
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// How many addresses the range spans, network and broadcast included.
    pub fn size(&self) -> u32 {
        1 << (32 - u32::from(self.prefix_len))
    }

    /// Whether the address at `offset` may be given to a pod: not the range's network or
    /// broadcast address, and no `.0` or `.255` address either.
    fn usable(&self, offset: u32) -> bool {
        let last_octet = (u32::from(self.base) + offset) & 0xff;
        offset != 0 && offset != self.size() - 1 && last_octet != 0 && last_octet != 255
    }
}

impl std::fmt::Display for PodAddresses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix_len)
    }
}

impl std::str::FromStr for PodAddresses {
    type Err = Error;

    /// Parses CIDR notation, `10.244.0.0/16`.
    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid =
            || Error::PodAddresses(format!("{s:?} is not an IPv4 CIDR such as 10.244.0.0/16"));
        let (base, prefix_len) = s.split_once('/').ok_or_else(invalid)?;
        let base: Ipv4Addr = base.parse().map_err(|_| invalid())?;
        let prefix_len: u8 = prefix_len.parse().map_err(|_| invalid())?;
        Self::new(base, prefix_len)
    }
}

/// Addresses for pods from a [`PodAddresses`] range, handed out round-robin so an address is not
/// reused right after its pod goes away. Each pool starts at a random place, so nodes sharing a
/// range (sandboxes side by side in parallel tests) rarely hand out the same address.
#[derive(Debug)]
pub struct IpPool {
    range: PodAddresses,
    used: BTreeSet<u32>,
    cursor: u32,
}

impl IpPool {
    /// A pool over `range` starting at a random place.
    pub fn new(range: PodAddresses) -> Self {
        Self::starting_after(range, rand::random_range(0..range.size()))
    }

    /// A pool whose first address follows offset `cursor` within `range`.
    pub fn starting_after(range: PodAddresses, cursor: u32) -> Self {
        Self {
            range,
            used: BTreeSet::new(),
            cursor: cursor % range.size(),
        }
    }

    /// A free address, if any remain.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        let size = self.range.size();
        for _ in 0..size {
            self.cursor = (self.cursor + 1) % size;
            if !self.range.usable(self.cursor) || self.used.contains(&self.cursor) {
                continue;
            }
            self.used.insert(self.cursor);
            return Some(Ipv4Addr::from(u32::from(self.range.base) + self.cursor));
        }
        None
    }

    /// Returns an address to the pool.
    pub fn release(&mut self, ip: Ipv4Addr) {
        self.used
            .remove(&(u32::from(ip).wrapping_sub(u32::from(self.range.base))));
    }
}

/// Whether the node named `node_name` runs `pod`: its `spec.nodeName` names this node, or it
/// is unset and the node takes unbound pods (an API server without a scheduler, such as the
/// sandbox, leaves it so; on a real API server the node binds pods first, see [`binding`]).
///
/// [`binding`]: crate::binding
pub fn runs_here(pod: &Pod, node_name: &str, takes_unbound: bool) -> bool {
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        Some(bound) if !bound.is_empty() => bound == node_name,
        _ => takes_unbound,
    }
}

/// Runs a worker for every pod that [`runs_here`] until `shutdown`, each with an address from
/// `addresses`; workers are tracked by `tracker`. A pod that stops running here (deleted, or
/// bound to another node) has its worker cancelled.
pub async fn run(
    node: Arc<Node>,
    addresses: PodAddresses,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let mut changes = node.caches.subscribe();
    let pool = Arc::new(std::sync::Mutex::new(IpPool::new(addresses)));
    let mut workers: HashMap<String, CancellationToken> = HashMap::new();
    loop {
        let mut pods = node.caches.pods.state();
        pods.retain(|p| runs_here(p, &node.node_name, !node.register));
        let live: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        for p in pods {
            let Some(uid) = p.metadata.uid.clone() else {
                continue;
            };
            if workers.contains_key(&uid) {
                continue;
            }
            let Some(ip) = pool.lock().ok().and_then(|mut pool| pool.allocate()) else {
                tracing::error!(range = %addresses, "no address left for pods");
                continue;
            };
            let cancel = shutdown.child_token();
            workers.insert(uid, cancel.clone());
            let (node, pool, shutdown) = (node.clone(), pool.clone(), shutdown.clone());
            tracker.spawn(async move {
                pod::run(node, p, ip, cancel, shutdown).await;
                if let Ok(mut pool) = pool.lock() {
                    pool.release(ip);
                }
            });
        }
        workers.retain(|uid, cancel| {
            let keep = live.contains(uid);
            if !keep {
                cancel.cancel();
            }
            keep
        });
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = changes.changed() => if changed.is_err() { break },
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;

    use super::*;

    fn sandbox_range() -> PodAddresses {
        PodAddresses::new(Ipv4Addr::new(127, 1, 0, 0), 16).unwrap()
    }

    #[test]
    fn addresses_are_unique_loopback_and_skip_network_and_broadcast() {
        let mut pool = IpPool::starting_after(sandbox_range(), 0);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_ne!(a, b);
        assert!(a.is_loopback() && b.is_loopback());
        assert_eq!(a, Ipv4Addr::new(127, 1, 0, 1));
        pool.release(a);
        // Released addresses are not handed out again at once.
        assert_eq!(pool.allocate().unwrap(), Ipv4Addr::new(127, 1, 0, 3));
        let mut all = BTreeSet::new();
        let mut pool = IpPool::new(sandbox_range());
        while let Some(ip) = pool.allocate() {
            assert_ne!(ip.octets()[3], 0);
            assert_ne!(ip.octets()[3], 255);
            assert!(all.insert(ip));
        }
        assert_eq!(all.len(), 256 * 254);
    }

    #[test]
    fn pod_address_ranges_parse_as_cidr_and_stay_inside_their_range() {
        let range: PodAddresses = "10.244.1.7/24".parse().unwrap();
        assert_eq!(range.base(), Ipv4Addr::new(10, 244, 1, 0));
        assert_eq!(range.to_string(), "10.244.1.0/24");
        let mut pool = IpPool::new(range);
        let mut all = BTreeSet::new();
        while let Some(ip) = pool.allocate() {
            assert_eq!(&ip.octets()[..3], &[10, 244, 1]);
            assert!(all.insert(ip));
        }
        assert_eq!(all.len(), 254);
        let small: PodAddresses = "10.0.0.4/30".parse().unwrap();
        let mut pool = IpPool::starting_after(small, 0);
        assert_eq!(pool.allocate(), Some(Ipv4Addr::new(10, 0, 0, 5)));
        assert_eq!(pool.allocate(), Some(Ipv4Addr::new(10, 0, 0, 6)));
        assert_eq!(pool.allocate(), None);
        for bad in [
            "10.0.0.0",
            "10.0.0.0/31",
            "10.0.0.0/0",
            "10.0.0/16",
            "::1/64",
        ] {
            assert!(bad.parse::<PodAddresses>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_node_runs_pods_bound_to_it_or_to_no_node() {
        let pod = |node_name: Option<&str>| Pod {
            spec: Some(PodSpec {
                node_name: node_name.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(runs_here(&pod(None), "node-a", true));
        assert!(runs_here(&pod(Some("")), "node-a", true));
        assert!(runs_here(&pod(Some("node-a")), "node-a", true));
        assert!(!runs_here(&pod(Some("node-b")), "node-a", true));
        assert!(runs_here(&Pod::default(), "node-a", true));
        // A registered node runs only what is bound to it.
        assert!(!runs_here(&pod(None), "node-a", false));
        assert!(!runs_here(&pod(Some("")), "node-a", false));
        assert!(runs_here(&pod(Some("node-a")), "node-a", false));
        assert!(!runs_here(&Pod::default(), "node-a", false));
    }
}
