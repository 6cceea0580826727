//! Unit tests of [`crate::serve::budget`].

use std::net::Ipv4Addr;

use super::*;

const MIB: usize = 1024 * 1024;
const MAX_REQUEST: usize = 7 * MIB;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn sizes() -> Sizes {
    Sizes::for_memory(None, MAX_REQUEST)
}

#[test]
fn the_default_pod_gets_half_its_memory_and_a_peer_a_quarter_of_that() {
    let sizes = Sizes::for_memory(Some(256 * MIB as u64), MAX_REQUEST);
    assert_eq!((sizes.total, sizes.per_peer), (128 * MIB, 32 * MIB));
    assert_eq!(Sizes::for_memory(None, MAX_REQUEST), sizes);
}

#[test]
fn a_small_pod_still_serves_one_largest_review_of_few_values() {
    let sizes = Sizes::for_memory(Some(16 * MIB as u64), MAX_REQUEST);
    let largest = 21 * MIB + 1024 * COST_PER_TOKEN;
    assert_eq!((sizes.total, sizes.per_peer), (largest, largest));
    let big_value = format!(
        r#"{{"data":{{"blob":"{}"}}}}"#,
        "a".repeat(MAX_REQUEST - 20)
    );
    assert!(decode_cost(big_value.as_bytes()) <= sizes.per_peer);
    let tiny = Sizes::for_memory(Some(0), 0);
    assert_eq!(
        (tiny.total, tiny.per_peer),
        (1024 * COST_PER_TOKEN, 1024 * COST_PER_TOKEN)
    );
}

#[test]
fn a_review_costs_its_copies_and_every_value_and_key_outside_strings() {
    // One value: the body's three copies and one token.
    assert_eq!(decode_cost(b"1"), 3 + COST_PER_TOKEN);
    // {"a":"b,c:{","d":[1,2]}: `{`, `:`, `,`, `:`, `[`, `,` and the first value.
    let body = br#"{"a":"b,c:{","d":[1,2]}"#;
    assert_eq!(decode_cost(body), 3 * body.len() + 7 * COST_PER_TOKEN);
    // An escaped quote does not end a string.
    let escaped = br#"{"a":"x\",y"}"#;
    assert_eq!(decode_cost(escaped), 3 * escaped.len() + 3 * COST_PER_TOKEN);
    // Many small values cost far more than their bytes.
    let many: String = (0..1000).map(|n| format!(r#""{n:x}":"","#)).collect();
    assert!(decode_cost(many.as_bytes()) > 20 * many.len());
}

#[test]
fn one_peer_is_held_to_its_share_even_on_an_idle_server() {
    let mut ledger = Ledger::default();
    let (first, _) = ledger.open(ip(9));
    let (second, _) = ledger.open(ip(9));
    assert_eq!(ledger.reserve(sizes(), first, 32 * MIB), Grant::Granted);
    assert_eq!(
        ledger.reserve(sizes(), second, 1),
        Grant::Refused(Shortfall::PeerHoldsItsShare)
    );
    let (api_server, _) = ledger.open(ip(1));
    assert_eq!(ledger.reserve(sizes(), api_server, MIB), Grant::Granted);
    assert_eq!(ledger.held(), 33 * MIB);
}

#[test]
fn a_spent_budget_cuts_off_an_arriving_body_of_the_peer_holding_the_most() {
    let sizes = Sizes {
        total: 10,
        per_peer: 6,
    };
    let mut ledger = Ledger::default();
    let (greedy_a, cut_a) = ledger.open(ip(9));
    let (greedy_b, cut_b) = ledger.open(ip(9));
    let (modest, cut_modest) = ledger.open(ip(8));
    assert_eq!(ledger.reserve(sizes, greedy_a, 4), Grant::Granted);
    assert_eq!(ledger.reserve(sizes, greedy_b, 2), Grant::Granted);
    assert_eq!(ledger.reserve(sizes, modest, 3), Grant::Granted);
    // The API server's review needs 2 of the 1 left: the greediest peer's largest arriving body
    // is cut off, not the modest one's.
    let (api_server, _) = ledger.open(ip(1));
    assert_eq!(ledger.reserve(sizes, api_server, 2), Grant::MakingRoom);
    assert!(cut_a.is_cancelled());
    assert!(!cut_b.is_cancelled() && !cut_modest.is_cancelled());
    // Asked again before it is gone, nothing more is cut off: enough is on its way.
    assert_eq!(ledger.reserve(sizes, api_server, 2), Grant::MakingRoom);
    assert!(!cut_b.is_cancelled());
    ledger.close(greedy_a);
    assert_eq!(ledger.reserve(sizes, api_server, 2), Grant::Granted);
    assert_eq!(ledger.held(), 7);
}

#[test]
fn no_body_is_cut_off_for_a_peer_that_would_hold_as_much_nor_one_being_answered() {
    let sizes = Sizes {
        total: 10,
        per_peer: 6,
    };
    let mut ledger = Ledger::default();
    let (answered, cut_answered) = ledger.open(ip(9));
    let (arriving, cut_arriving) = ledger.open(ip(8));
    assert_eq!(ledger.reserve(sizes, answered, 6), Grant::Granted);
    assert_eq!(ledger.reserve(sizes, arriving, 4), Grant::Granted);
    ledger.arrived(answered);
    // Peer 8 wants 1 more: the only body of a peer holding more is being answered.
    let (more, _) = ledger.open(ip(8));
    assert_eq!(
        ledger.reserve(sizes, more, 1),
        Grant::Refused(Shortfall::ServerHoldsItsBudget)
    );
    // A newcomer wanting 4 would hold as much as peer 8: neither is cut off for it.
    let (newcomer, _) = ledger.open(ip(7));
    assert_eq!(
        ledger.reserve(sizes, newcomer, 4),
        Grant::Refused(Shortfall::ServerHoldsItsBudget)
    );
    assert!(!cut_answered.is_cancelled() && !cut_arriving.is_cancelled());
}

#[test]
fn closing_gives_back_everything_and_forgets_the_peer() {
    let mut ledger = Ledger::default();
    let (empty, _) = ledger.open(ip(9));
    let (full, _) = ledger.open(ip(9));
    assert_eq!(ledger.reserve(sizes(), full, MIB), Grant::Granted);
    ledger.close(empty);
    ledger.close(full);
    assert_eq!(ledger.held(), 0);
    assert!(ledger.by_peer.is_empty() && ledger.bodies.is_empty());
}

#[tokio::test]
async fn a_reservation_waits_for_a_body_cut_off_for_it_and_gives_back_when_dropped() {
    let gauge = Gauge::default();
    let budget = BodyBudget::new(
        Sizes {
            total: 10,
            per_peer: 8,
        },
        gauge.clone(),
    );
    let mut greedy = budget.reservation(ip(9));
    greedy.grow(8).await.expect("room");
    assert_eq!(gauge.get(), 8);
    let mut api_server = budget.reservation(ip(1));
    let waiting = tokio::spawn(async move {
        let grown = api_server.grow(4).await;
        (grown, api_server)
    });
    // The greedy body learns it was cut off, and goes.
    tokio::time::timeout(Duration::from_secs(5), greedy.cut_off())
        .await
        .expect("the greedy body was never cut off");
    drop(greedy);
    let (grown, api_server) = waiting.await.expect("joined");
    assert_eq!(grown, Ok(()));
    assert_eq!(gauge.get(), 4);
    drop(api_server);
    assert_eq!(gauge.get(), 0);
    assert_eq!(budget.ledger().held(), 0);
}

#[tokio::test]
async fn a_body_cut_off_that_never_goes_leaves_the_newcomer_refused_after_the_wait() {
    tokio::time::pause();
    let budget = BodyBudget::new(
        Sizes {
            total: 10,
            per_peer: 8,
        },
        Gauge::default(),
    );
    let mut greedy = budget.reservation(ip(9));
    greedy.grow(8).await.expect("room");
    let mut newcomer = budget.reservation(ip(1));
    assert_eq!(newcomer.grow(4).await, Err(Shortfall::ServerHoldsItsBudget));
    assert_eq!(
        newcomer.grow(0).await,
        Ok(()),
        "nothing asked, nothing refused"
    );
}

#[test]
fn cgroup_limits_read_as_bytes_and_unlimited_as_none() {
    assert_eq!(parse_cgroup_limit("268435456\n"), Some(268_435_456));
    assert_eq!(parse_cgroup_limit("max\n"), None);
    assert_eq!(parse_cgroup_limit("9223372036854771712\n"), None);
    assert_eq!(parse_cgroup_limit("0"), None);
    assert_eq!(parse_cgroup_limit(""), None);
}

#[test]
fn the_smaller_of_the_passed_and_the_cgroup_limit_wins() {
    // No container limit: the downward API passes the node's allocatable memory.
    assert_eq!(
        memory_limit(Some(16 << 30), Some(256 << 20)),
        Some(256 << 20)
    );
    assert_eq!(memory_limit(Some(256 << 20), None), Some(256 << 20));
    assert_eq!(memory_limit(None, Some(64 << 20)), Some(64 << 20));
    assert_eq!(memory_limit(Some(0), None), None);
    assert_eq!(memory_limit(None, None), None);
}
