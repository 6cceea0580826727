//! The pod runner ("kubelet"): one worker per pod, a loopback address per pod.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::pod::{self, Node};

/// Loopback addresses for pods: `127.1.0.1` to `127.1.255.254`, handed out round-robin so an
/// address is not reused right after its pod goes away. Each pool starts at a random place, so
/// sandboxes running side by side (parallel tests) rarely hand out the same address.
#[derive(Debug)]
pub struct IpPool {
    used: BTreeSet<u32>,
    cursor: u32,
}

impl Default for IpPool {
    fn default() -> Self {
        Self::starting_after(rand::random_range(0..POOL_SIZE))
    }
}

const POOL_BASE: u32 = u32::from_be_bytes([127, 1, 0, 0]);
const POOL_SIZE: u32 = 1 << 16;

impl IpPool {
    /// A pool whose first address follows offset `cursor` within `127.1.0.0/16`.
    pub fn starting_after(cursor: u32) -> Self {
        Self {
            used: BTreeSet::new(),
            cursor: cursor % POOL_SIZE,
        }
    }

    /// A free address, if any remain.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        for _ in 0..POOL_SIZE {
            self.cursor = (self.cursor + 1) % POOL_SIZE;
            let host = self.cursor & 0xff;
            if host == 0 || host == 255 || self.used.contains(&self.cursor) {
                continue;
            }
            self.used.insert(self.cursor);
            return Some(Ipv4Addr::from(POOL_BASE + self.cursor));
        }
        None
    }

    /// Returns an address to the pool.
    pub fn release(&mut self, ip: Ipv4Addr) {
        self.used.remove(&(u32::from(ip).wrapping_sub(POOL_BASE)));
    }
}

/// Runs a worker for every pod until `shutdown`; workers are tracked by `tracker`.
pub async fn run(node: Arc<Node>, shutdown: CancellationToken, tracker: TaskTracker) {
    let mut changes = node.caches.subscribe();
    let pool = Arc::new(std::sync::Mutex::new(IpPool::default()));
    let mut workers: HashMap<String, CancellationToken> = HashMap::new();
    loop {
        let pods = node.caches.pods.state();
        let live: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        for p in pods {
            let Some(uid) = p.metadata.uid.clone() else {
                continue;
            };
            if workers.contains_key(&uid) {
                continue;
            }
            let Some(ip) = pool.lock().ok().and_then(|mut pool| pool.allocate()) else {
                tracing::error!("no loopback address left for pods");
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
    use super::*;

    #[test]
    fn addresses_are_unique_loopback_and_skip_network_and_broadcast() {
        let mut pool = IpPool::starting_after(0);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_ne!(a, b);
        assert!(a.is_loopback() && b.is_loopback());
        assert_eq!(a, Ipv4Addr::new(127, 1, 0, 1));
        pool.release(a);
        // Released addresses are not handed out again at once.
        assert_eq!(pool.allocate().unwrap(), Ipv4Addr::new(127, 1, 0, 3));
        let mut all = BTreeSet::new();
        let mut pool = IpPool::default();
        while let Some(ip) = pool.allocate() {
            assert_ne!(ip.octets()[3], 0);
            assert_ne!(ip.octets()[3], 255);
            assert!(all.insert(ip));
        }
        assert_eq!(all.len(), 256 * 254);
    }
}
