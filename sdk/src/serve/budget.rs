//! How many request-body bytes the server holds at once. Anyone who can reach an initializer's
//! Service can send a body up to the request limit on every connection it opens, and the server
//! holds each body from its first byte until its review is answered: unbounded, one pod sending
//! large bodies on many connections drives the initializer past its memory limit, the kubelet
//! kills it, and the operator takes it out of the path. So bodies draw on a budget of memory
//! sized from the container's limit ([`Sizes::for_memory`]), and one peer address may hold only
//! its share of it, whether or not the server is busy. A body costs its buffer while it arrives
//! (a declared length costs nothing until it is sent), then what decoding it will take
//! ([`decode_cost`]: a review of many small values costs far more than its bytes) before it is
//! decoded; one that does not fit is refused. When the budget is spent, a newcomer's body cuts
//! off one still arriving from the peer holding the most, as a full server closes that peer's
//! connections (`slots`); the API server's reviews are small and arrive at once, so they are
//! never the ones cut off. The decisions are pure ([`Ledger::reserve`], [`victim`],
//! [`decode_cost`]).
//!
//! Justified by safety, not speed: the e2e scenario
//! `body_flood_neither_exhausts_the_guard_nor_lets_a_weak_secret_in` (docs/architecture.md,
//! "a pod sending large bodies does not exhaust an initializer's memory").

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;

/// The memory limit assumed when the container's is unknown: the operator's default for an
/// initializer's container (256 Mi).
pub(crate) const ASSUMED_MEMORY_LIMIT: u64 = 256 * 1024 * 1024;

/// The share of the memory limit bodies may cost at once; the rest is the process's own.
const MEMORY_SHARE: u64 = 2;

/// The share of the budget one peer address may hold: filling it takes four addresses (pods).
const PEER_SHARE: usize = 4;

/// Copies of a body's bytes its review holds at its peak: the body, the object's text in the
/// review, and the object serialized for the patch.
const COPIES: usize = 3;

/// Memory one JSON value or key costs once decoded, with what the allocator keeps besides (see
/// docs/src/security/connections.md for how it was measured).
const COST_PER_TOKEN: usize = 320;

/// Values and keys the largest review may have and still always be served: a big object of a
/// few fields (a ConfigMap holding a file), not one of many small ones.
const FEW_VALUES: usize = 1024;

/// How long a body that found the budget spent waits for the ones cut off to give theirs back.
const ROOM_WAIT: Duration = Duration::from_secs(1);

/// cgroup memory limits at or above this mean "no limit" (cgroup v1 reports unlimited as the
/// largest page-aligned i64).
const UNLIMITED: u64 = 1 << 60;

/// How many body bytes the server holds at most, in all and per peer address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sizes {
    pub total: usize,
    pub per_peer: usize,
}

impl Sizes {
    /// The sizes for a container with `memory_limit` bytes (or [`ASSUMED_MEMORY_LIMIT`]) that
    /// accepts bodies of up to `max_request` bytes: half of the memory in all, a quarter of that
    /// per peer; never less than what the largest body of few values costs, so that such a
    /// review is always served.
    pub fn for_memory(memory_limit: Option<u64>, max_request: usize) -> Self {
        let memory = memory_limit.unwrap_or(ASSUMED_MEMORY_LIMIT);
        let largest = max_request
            .saturating_mul(COPIES)
            .saturating_add(FEW_VALUES * COST_PER_TOKEN);
        let total = usize::try_from(memory / MEMORY_SHARE)
            .unwrap_or(usize::MAX)
            .max(largest);
        Self {
            total,
            per_peer: (total / PEER_SHARE).max(largest).min(total),
        }
    }
}

/// Why a body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shortfall {
    /// Its peer address already holds its share.
    PeerHoldsItsShare,
    /// The server holds its whole budget, and no body may be cut off for this one.
    ServerHoldsItsBudget,
}

/// One body in the ledger.
#[derive(Debug)]
pub(crate) struct Body {
    pub peer: IpAddr,
    pub bytes: usize,
    /// Still arriving: nothing has been worked on, so cutting it off loses no answer.
    pub arriving: bool,
    /// Cancelled when it is cut off to make room; its bytes come back when it is dropped.
    cut: CancellationToken,
}

impl Body {
    fn cut_off(&self) -> bool {
        self.cut.is_cancelled()
    }
}

/// What a reservation's request for more bytes got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    Granted,
    Refused(Shortfall),
    /// Bodies were cut off (or are being cut off) to make room: ask again once they are gone.
    MakingRoom,
}

/// The body bytes held, in all, per peer address and per body.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    held: usize,
    by_peer: HashMap<IpAddr, usize>,
    bodies: HashMap<u64, Body>,
    next_id: u64,
}

impl Ledger {
    /// A new body from `peer`, holding nothing yet; its id and the token that cuts it off.
    fn open(&mut self, peer: IpAddr) -> (u64, CancellationToken) {
        let id = self.next_id;
        self.next_id += 1;
        let cut = CancellationToken::new();
        self.bodies.insert(
            id,
            Body {
                peer,
                bytes: 0,
                arriving: true,
                cut: cut.clone(),
            },
        );
        (id, cut)
    }

    /// Takes `bytes` more for body `id` if its peer's share and the whole budget allow; when
    /// only the budget stands in the way, cuts off a body another peer holds more with.
    pub fn reserve(&mut self, sizes: Sizes, id: u64, bytes: usize) -> Grant {
        let Some(peer) = self.bodies.get(&id).map(|b| b.peer) else {
            return Grant::Refused(Shortfall::ServerHoldsItsBudget);
        };
        let peer_held = self.by_peer.get(&peer).copied().unwrap_or(0);
        if peer_held.saturating_add(bytes) > sizes.per_peer {
            return Grant::Refused(Shortfall::PeerHoldsItsShare);
        }
        if self.held.saturating_add(bytes) <= sizes.total {
            self.held += bytes;
            *self.by_peer.entry(peer).or_default() += bytes;
            if let Some(body) = self.bodies.get_mut(&id) {
                body.bytes += bytes;
            }
            return Grant::Granted;
        }
        let freeing: usize = self
            .bodies
            .values()
            .filter(|b| b.cut_off())
            .map(|b| b.bytes)
            .sum();
        if (self.held - freeing).saturating_add(bytes) <= sizes.total {
            return Grant::MakingRoom;
        }
        match victim(&self.bodies, &self.by_peer, peer, peer_held + bytes) {
            Some(victim) => {
                if let Some(body) = self.bodies.get(&victim) {
                    body.cut.cancel();
                }
                Grant::MakingRoom
            }
            None => Grant::Refused(Shortfall::ServerHoldsItsBudget),
        }
    }

    /// Body `id` has arrived whole: its review is being answered, and it is no longer cut off.
    fn arrived(&mut self, id: u64) {
        if let Some(body) = self.bodies.get_mut(&id) {
            body.arriving = false;
        }
    }

    /// Body `id` is done with: gives back what it held.
    fn close(&mut self, id: u64) {
        let Some(body) = self.bodies.remove(&id) else {
            return;
        };
        self.held = self.held.saturating_sub(body.bytes);
        if let Some(held) = self.by_peer.get_mut(&body.peer) {
            *held = held.saturating_sub(body.bytes);
            if *held == 0 {
                self.by_peer.remove(&body.peer);
            }
        }
    }

    /// The bytes held in all.
    pub fn held(&self) -> usize {
        self.held
    }

    /// The bytes body `id` holds.
    fn held_by(&self, id: u64) -> usize {
        self.bodies.get(&id).map_or(0, |b| b.bytes)
    }
}

/// What decoding and answering the review in `body` will cost, in bytes of memory: its copies,
/// and each JSON value and key (counted outside strings: every `{`, `[`, `,` and `:`, and the
/// first value) decoded.
pub(crate) fn decode_cost(body: &[u8]) -> usize {
    let mut tokens = 1usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in body {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'{' | b'[' | b',' | b':' => tokens += 1,
                _ => {}
            }
        }
    }
    body.len()
        .saturating_mul(COPIES)
        .saturating_add(tokens.saturating_mul(COST_PER_TOKEN))
}

/// The body to cut off so that `peer`, which would then hold `wanted`, gets room: one still
/// arriving and not yet cut off, of the peer holding the most, if that peer holds more than
/// `wanted` (so a peer never cuts off its own bodies, nor one holding less than it would); the
/// largest of its bodies. `None` when there is no such body.
pub(crate) fn victim(
    bodies: &HashMap<u64, Body>,
    by_peer: &HashMap<IpAddr, usize>,
    peer: IpAddr,
    wanted: usize,
) -> Option<u64> {
    let holding = |p: &IpAddr| by_peer.get(p).copied().unwrap_or(0);
    bodies
        .iter()
        .filter(|(_, b)| b.arriving && !b.cut_off() && b.bytes > 0)
        .filter(|(_, b)| b.peer != peer && holding(&b.peer) > wanted)
        .max_by_key(|(id, b)| (holding(&b.peer), b.bytes, std::cmp::Reverse(**id)))
        .map(|(id, _)| *id)
}

/// The server's budget, shared by its connections.
#[derive(Clone, Debug)]
pub(crate) struct BodyBudget(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    sizes: Sizes,
    ledger: Mutex<Ledger>,
    /// Woken whenever a body gives its bytes back.
    released: tokio::sync::Notify,
    /// The bytes held, exported as `initializer_request_body_bytes`.
    gauge: Gauge,
}

impl BodyBudget {
    pub fn new(sizes: Sizes, gauge: Gauge) -> Self {
        Self(Arc::new(Shared {
            sizes,
            ledger: Mutex::new(Ledger::default()),
            released: tokio::sync::Notify::new(),
            gauge,
        }))
    }

    pub fn sizes(&self) -> Sizes {
        self.0.sizes
    }

    /// An empty reservation for one body from `peer`, grown as the body arrives and given back
    /// when dropped.
    pub fn reservation(&self, peer: IpAddr) -> Reservation {
        let (id, cut) = self.ledger().open(peer);
        Reservation {
            budget: self.clone(),
            id,
            cut,
        }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, ledger: &Ledger) {
        self.0
            .gauge
            .set(i64::try_from(ledger.held()).unwrap_or(i64::MAX));
    }
}

/// The bytes one body holds; given back when dropped (once its review is answered, or it was
/// refused or cut off).
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: BodyBudget,
    id: u64,
    cut: CancellationToken,
}

impl Reservation {
    /// Takes `bytes` more, waiting up to a second for bodies cut off to make room to give theirs
    /// back; or says why it cannot (the reservation keeps what it had).
    pub async fn grow(&mut self, bytes: usize) -> Result<(), Shortfall> {
        if bytes == 0 {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + ROOM_WAIT;
        loop {
            let released = self.budget.0.released.notified();
            tokio::pin!(released);
            // Registered before the ledger is read, so a release in between is not missed.
            released.as_mut().enable();
            let grant = {
                let mut ledger = self.budget.ledger();
                let grant = ledger.reserve(self.budget.sizes(), self.id, bytes);
                self.budget.publish(&ledger);
                grant
            };
            match grant {
                Grant::Granted => return Ok(()),
                Grant::Refused(short) => return Err(short),
                Grant::MakingRoom => {}
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return Err(Shortfall::ServerHoldsItsBudget);
            }
        }
    }

    /// The body has arrived whole: from now on it is not cut off to make room.
    pub fn arrived(&self) {
        self.budget.ledger().arrived(self.id);
    }

    /// Grows the reservation to `cost` in all (a no-op when it holds that much already).
    pub async fn grow_to(&mut self, cost: usize) -> Result<(), Shortfall> {
        let held = self.budget.ledger().held_by(self.id);
        self.grow(cost.saturating_sub(held)).await
    }

    /// Resolves when the body is cut off to make room for another.
    pub async fn cut_off(&self) {
        self.cut.cancelled().await;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        {
            let mut ledger = self.budget.ledger();
            ledger.close(self.id);
            self.budget.publish(&ledger);
        }
        self.budget.0.released.notify_waiters();
    }
}

/// In a request's extensions: the budget its body draws on, and the peer it comes from.
#[derive(Clone, Debug)]
pub(crate) struct BodyAllowance {
    pub budget: BodyBudget,
    pub peer: IpAddr,
}

/// The memory limit of the cgroup this process runs in: cgroup v2's `memory.max`, else cgroup
/// v1's `memory.limit_in_bytes`; `None` when there is none or it cannot be read.
pub(crate) fn cgroup_memory_limit() -> Option<u64> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .and_then(|text| parse_cgroup_limit(&text))
}

/// A cgroup memory limit file's value: `None` for `max` or an unlimited v1 value.
pub(crate) fn parse_cgroup_limit(text: &str) -> Option<u64> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|&limit| limit > 0 && limit < UNLIMITED)
}

/// The memory limit to size the budget from: the smaller of the one the operator passed (the
/// downward API's `limits.memory`, which is the node's allocatable memory when the container
/// has no limit) and the cgroup's.
pub(crate) fn memory_limit(passed: Option<u64>, cgroup: Option<u64>) -> Option<u64> {
    match (passed.filter(|&m| m > 0), cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests;
