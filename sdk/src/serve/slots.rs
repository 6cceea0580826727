//! Who gets a connection slot once they run out. Anyone who can reach an initializer's Service
//! can open connections to it, and the API server and the operator's probe must still get in:
//! so a full server is not a wall. A newcomer takes the slot of a connection that runs no
//! request (idle between requests, or still sending its head or its body), taken from the peer
//! holding the most connections, idle before half-sent, the longest in its phase first; a peer already
//! holding its share ([`Caps::per_peer`]) of a full server is refused instead, before any TLS
//! work is spent on it. The choice is pure ([`admit`]); [`Registry`] is the shared table the
//! accept loop consults and the connections leave when they end.
//!
//! Justified by safety, not speed: the e2e scenario
//! `connection_attack_neither_deregisters_the_guard_nor_fails_a_create` (docs/architecture.md,
//! "a pod holding connections does not keep the API server and the probe out"; 0 failed creates
//! of 151 on kind).

use std::cmp::Reverse;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::serve::conn::{Activity, Phase};

/// How many connections the server holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Open connections at most (every one holds up to one request body in memory).
    pub total: usize,
    /// Connections one peer address may hold once the server is full: beyond it, that peer's
    /// new connections are refused rather than allowed to push others out.
    pub per_peer: usize,
}

/// One open connection, as admission sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub id: u64,
    pub peer: IpAddr,
    pub phase: Phase,
    /// When it entered `phase`.
    pub since: Instant,
}

/// Why a new connection was closed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The server is full and this peer already holds its share.
    PeerHoldsItsShare,
    /// The server is full and every connection is running a request.
    AllBusy,
}

impl Refusal {
    /// The metric label of the refusal.
    pub fn reason(self) -> &'static str {
        match self {
            Self::PeerHoldsItsShare => "peer_holds_its_share",
            Self::AllBusy => "all_busy",
        }
    }
}

/// What to do with a new connection from `peer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// A slot is free.
    Admit,
    /// Close the connection with this id, then admit.
    Evict(u64),
    /// Close the new connection.
    Refuse(Refusal),
}

/// The decision for a new connection from `peer` when `held` are open.
pub(crate) fn admit(held: &[Held], peer: IpAddr, caps: Caps) -> Admission {
    if held.len() < caps.total {
        return Admission::Admit;
    }
    if held.iter().filter(|c| c.peer == peer).count() >= caps.per_peer {
        return Admission::Refuse(Refusal::PeerHoldsItsShare);
    }
    match victim(held) {
        Some(id) => Admission::Evict(id),
        None => Admission::Refuse(Refusal::AllBusy),
    }
}

/// The connection to close for a newcomer: one running no request, of the peer holding the most
/// connections (an attacker, long before the API server or the probe, which hold a few); idle
/// before half-sent, a head before a body (a request in progress may be a real one about to
/// complete, and a body comes after a whole head); the longest in its phase. `None` when every
/// connection runs a request.
pub(crate) fn victim(held: &[Held]) -> Option<u64> {
    let mut per_peer: HashMap<IpAddr, usize> = HashMap::new();
    for c in held {
        *per_peer.entry(c.peer).or_default() += 1;
    }
    let closing_order = |phase: Phase| match phase {
        Phase::Idle => 2,
        Phase::Head => 1,
        Phase::Body | Phase::Busy => 0,
    };
    held.iter()
        .filter(|c| c.phase != Phase::Busy)
        .max_by_key(|c| {
            (
                per_peer.get(&c.peer).copied().unwrap_or(0),
                closing_order(c.phase),
                Reverse(c.since),
                Reverse(c.id),
            )
        })
        .map(|c| c.id)
}

/// A connection's entry in the table.
struct Entry {
    peer: IpAddr,
    activity: Arc<Activity>,
    evicted: CancellationToken,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Entry>,
}

/// The open connections of one listener.
pub(crate) struct Registry {
    caps: Caps,
    table: Mutex<Table>,
}

/// A connection's place in the table, given up when dropped.
pub(crate) struct Slot {
    id: u64,
    registry: Arc<Registry>,
    /// The connection's phase, shared with its IO wrapper, service and watchdog.
    pub activity: Arc<Activity>,
    /// Cancelled when a newcomer takes this connection's slot.
    pub evicted: CancellationToken,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.lock().open.remove(&self.id);
    }
}

/// What admitting a connection did.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub slot: Slot,
    /// The peer of the connection closed to make room, if one was.
    pub evicted: Option<IpAddr>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("id", &self.id).finish()
    }
}

impl Registry {
    /// An empty table with these caps.
    pub fn new(caps: Caps) -> Arc<Self> {
        Arc::new(Self {
            caps,
            table: Mutex::new(Table::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a new connection from `peer` (closing another to make room when the server is
    /// full), or says why it is refused.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, Refusal> {
        let mut table = self.lock();
        let mut evicted = None;
        // A connection that started a request since the snapshot is not taken; the next
        // candidate is chosen instead (each round removes one candidate, so this ends). Below
        // the cap no snapshot is needed: `admit` admits whatever it would hold.
        while table.open.len() >= self.caps.total {
            let held: Vec<Held> = table
                .open
                .iter()
                .map(|(&id, e)| {
                    let (phase, since) = e.activity.phase();
                    Held {
                        id,
                        peer: e.peer,
                        phase,
                        since,
                    }
                })
                .collect();
            match admit(&held, peer, self.caps) {
                Admission::Admit => break,
                Admission::Refuse(why) => return Err(why),
                Admission::Evict(id) => {
                    let Some(entry) = table.open.remove(&id) else {
                        continue;
                    };
                    if entry.activity.can_close() {
                        entry.evicted.cancel();
                        evicted = Some(entry.peer);
                        break;
                    }
                    // Busy after all: keep it; the next snapshot shows it busy.
                    table.open.insert(id, entry);
                }
            }
        }
        let id = table.next_id;
        table.next_id += 1;
        let activity = Activity::new();
        let evicted_token = CancellationToken::new();
        table.open.insert(
            id,
            Entry {
                peer,
                activity: Arc::clone(&activity),
                evicted: evicted_token.clone(),
            },
        );
        Ok(Admitted {
            slot: Slot {
                id,
                registry: Arc::clone(self),
                activity,
                evicted: evicted_token,
            },
            evicted,
        })
    }

    /// How many connections are open.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().open.len()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use super::*;

    const CAPS: Caps = Caps {
        total: 4,
        per_peer: 2,
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 244, 0, last))
    }

    fn held(id: u64, peer: u8, phase: Phase, age_secs: u64, now: Instant) -> Held {
        Held {
            id,
            peer: ip(peer),
            phase,
            since: now - Duration::from_secs(age_secs),
        }
    }

    #[test]
    fn below_the_cap_everyone_is_admitted_however_many_they_hold() {
        let now = Instant::now();
        let open = [
            held(0, 9, Phase::Idle, 1, now),
            held(1, 9, Phase::Idle, 1, now),
            held(2, 9, Phase::Idle, 1, now),
        ];
        assert_eq!(admit(&open, ip(9), CAPS), Admission::Admit);
    }

    #[test]
    fn a_full_server_closes_the_oldest_idle_connection_of_the_greediest_peer() {
        let now = Instant::now();
        let open = [
            held(0, 1, Phase::Idle, 50, now), // the API server's, oldest of all
            held(1, 9, Phase::Idle, 5, now),
            held(2, 9, Phase::Idle, 7, now),
            held(3, 9, Phase::Busy, 9, now),
        ];
        assert_eq!(admit(&open, ip(1), CAPS), Admission::Evict(2));
        assert_eq!(admit(&open, ip(5), CAPS), Admission::Evict(2));
    }

    #[test]
    fn idle_connections_go_before_half_sent_heads_then_bodies_and_running_requests_never() {
        let now = Instant::now();
        let open = [
            held(0, 9, Phase::Body, 9, now),
            held(1, 9, Phase::Head, 5, now),
            held(2, 9, Phase::Idle, 1, now),
            held(3, 9, Phase::Busy, 60, now),
        ];
        assert_eq!(victim(&open), Some(2));
        assert_eq!(victim(&open[..2]), Some(1));
        assert_eq!(victim(&open[..1]), Some(0));
        assert_eq!(victim(&open[3..]), None);
    }

    #[test]
    fn a_peer_holding_its_share_of_a_full_server_is_refused_not_let_push_others_out() {
        let now = Instant::now();
        let open = [
            held(0, 1, Phase::Idle, 1, now),
            held(1, 9, Phase::Idle, 5, now),
            held(2, 9, Phase::Idle, 7, now),
            held(3, 8, Phase::Idle, 9, now),
        ];
        assert_eq!(
            admit(&open, ip(9), CAPS),
            Admission::Refuse(Refusal::PeerHoldsItsShare)
        );
        // The API server (one connection) still gets in, at the greediest peer's expense.
        assert_eq!(admit(&open, ip(1), CAPS), Admission::Evict(2));
    }

    #[test]
    fn a_full_server_of_running_requests_refuses_newcomers() {
        let now = Instant::now();
        let open: Vec<Held> = (0..4).map(|i| held(i, 9, Phase::Busy, 1, now)).collect();
        assert_eq!(
            admit(&open, ip(1), CAPS),
            Admission::Refuse(Refusal::AllBusy)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_registry_closes_the_chosen_connection_and_frees_slots_on_drop() {
        let registry = Registry::new(CAPS);
        let attacker: Vec<Admitted> = (0..2).map(|_| registry.admit(ip(9)).unwrap()).collect();
        tokio::time::advance(Duration::from_secs(1)).await;
        let other = registry.admit(ip(8)).unwrap();
        let probe = registry.admit(ip(2)).unwrap();
        assert_eq!(registry.len(), 4);

        let api_server = registry.admit(ip(1)).unwrap();
        assert_eq!(api_server.evicted, Some(ip(9)));
        assert!(attacker[0].slot.evicted.is_cancelled());
        assert!(!attacker[1].slot.evicted.is_cancelled());
        assert_eq!(registry.len(), 4);

        // A running request is never taken: with the rest busy, the newcomer is refused.
        for admitted in [&attacker[1], &other, &probe, &api_server] {
            admitted.slot.activity.request_started();
        }
        assert_eq!(registry.admit(ip(3)).unwrap_err(), Refusal::AllBusy);

        drop(other);
        assert_eq!(registry.len(), 3);
        assert!(registry.admit(ip(3)).is_ok());
    }
}
