//! Unit tests of [`crate::health`].

use super::*;

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// The default policy's machine, without the route check (its own tests below show it), so
/// that the other tests register at the first good probe after the endpoints are counted.
fn config() -> HealthConfig {
    HealthConfig {
        prove_route: false,
        ..HealthConfig::from_policy(&HealthPolicy::default())
    }
}

/// A machine with an available workload and ready endpoints, at time `t0`.
fn ready_machine(t0: Instant) -> Machine {
    let mut m = Machine::new(config());
    assert_eq!(m.observe(Input::Available(true), t0), Action::None);
    assert_eq!(m.observe(Input::Endpoints(2), t0), Action::None);
    m
}

/// Feeds `n` probes of one kind, `step` apart from `*t`, returning every action taken.
fn probes_every(m: &mut Machine, t: &mut Instant, ok: bool, n: u32, step: Duration) -> Vec<Action> {
    let mut actions = Vec::new();
    for _ in 0..n {
        *t += step;
        let input = if ok {
            Input::ProbeSucceeded
        } else {
            Input::ProbeFailed
        };
        let a = m.observe(input, *t);
        if a != Action::None {
            actions.push(a);
        }
    }
    actions
}

/// Feeds `n` probes of one kind, one per second.
fn probes(m: &mut Machine, t: &mut Instant, ok: bool, n: u32) -> Vec<Action> {
    probes_every(m, t, ok, n, SEC)
}

/// Drives the machine the way the prober does: each probe comes when
/// [`Machine::next_probe_in`] says (at least `spacing` apart), and answers as `up(t)` says
/// (a failed probe takes `fail_takes`). Returns every action with its time, until `end`.
fn drive(
    m: &mut Machine,
    start: Instant,
    end: Instant,
    fail_takes: Duration,
    up: impl Fn(Instant) -> bool,
) -> Vec<(Instant, Action)> {
    let spacing = 50 * MS;
    let mut t = start;
    let mut actions = Vec::new();
    while t < end {
        let ok = up(t);
        let answered = if ok { t + 10 * MS } else { t + fail_takes };
        let input = if ok {
            Input::ProbeSucceeded
        } else {
            Input::ProbeFailed
        };
        let a = m.observe(input, answered);
        if a != Action::None {
            actions.push((answered, a));
        }
        t = (answered + m.next_probe_in(answered)).max(t + spacing);
    }
    actions
}

fn registered(t0: Instant) -> (Machine, Instant) {
    let mut m = ready_machine(t0);
    let mut t = t0;
    assert_eq!(probes(&mut m, &mut t, true, 3), [Action::Register]);
    (m, t)
}

fn is_deregister(a: &Action) -> bool {
    matches!(a, Action::Deregister { .. })
}

#[test]
fn the_latency_budget_is_the_policys_in_milliseconds() {
    let policy = HealthPolicy {
        latency_budget_millis: 250,
        ..HealthPolicy::default()
    };
    assert_eq!(latency_budget(&policy), Duration::from_millis(250));
    let negative = HealthPolicy {
        latency_budget_millis: -1,
        ..HealthPolicy::default()
    };
    assert_eq!(latency_budget(&negative), Duration::from_millis(500));
}

#[test]
fn defaults_give_one_second_base_hold_down_capped_at_sixty_four_periods() {
    let c = config();
    assert_eq!((c.failure_threshold, c.success_threshold), (2, 3));
    assert_eq!(c.base_hold_down, SEC);
    assert_eq!(c.max_hold_down, 64 * SEC);
    assert_eq!((c.period, c.fast_interval), (SEC, 100 * MS));
}

#[test]
fn registers_after_success_threshold_good_probes_when_available() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    let mut t = t0;
    assert!(probes(&mut m, &mut t, true, 2).is_empty());
    assert_eq!(m.state(), State::Waiting);
    assert_eq!(probes(&mut m, &mut t, true, 1), [Action::Register]);
    assert!(m.is_registered());
    assert!(
        probes(&mut m, &mut t, true, 5).is_empty(),
        "registers only once"
    );
}

#[test]
fn waiting_probes_come_fast_and_register_within_a_few_hundred_milliseconds() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    assert_eq!(m.next_probe_in(t0), 100 * MS);
    let actions = drive(&mut m, t0, t0 + SEC, 500 * MS, |_| true);
    let (at, action) = actions[0];
    assert_eq!(action, Action::Register);
    assert!(at - t0 <= 400 * MS, "registered after {:?}", at - t0);
    assert_eq!(m.next_probe_in(at), SEC, "steady period once registered");
}

#[test]
fn an_unavailable_workload_is_never_registered_and_registers_once_available() {
    let t0 = Instant::now();
    let mut m = Machine::new(config());
    m.observe(Input::Endpoints(1), t0);
    let mut t = t0;
    assert!(probes(&mut m, &mut t, true, 10).is_empty());
    assert_eq!(m.observe(Input::Available(true), t), Action::Register);
}

#[test]
fn zero_ready_endpoints_block_registration_and_slow_the_probes() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    m.observe(Input::Endpoints(0), t0);
    assert_eq!(m.next_probe_in(t0), SEC);
    let mut t = t0;
    assert!(probes(&mut m, &mut t, true, 10).is_empty());
    assert_eq!(m.observe(Input::Endpoints(1), t), Action::Register);
}

#[test]
fn the_first_failed_probe_degrades_and_failure_threshold_failures_deregister() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    let actions = probes(&mut m, &mut t, false, 1);
    let first_failure = t;
    assert_eq!(
        actions,
        [Action::Degrade {
            since: first_failure
        }]
    );
    assert_eq!(m.state(), State::Degraded);
    assert!(m.is_registered());
    assert_eq!(m.next_probe_in(t), Duration::ZERO, "probes again at once");
    let actions = probes(&mut m, &mut t, false, 1);
    assert_eq!(
        actions,
        [Action::Deregister {
            cause: Cause::ProbesFailed,
            since: first_failure
        }]
    );
    assert_eq!(m.state(), State::Unresponsive);
    assert!(
        probes(&mut m, &mut t, false, 5).is_empty(),
        "deregisters only once"
    );
}

#[test]
fn a_failure_threshold_of_one_deregisters_at_the_first_failure() {
    let t0 = Instant::now();
    let mut m = Machine::new(HealthConfig {
        failure_threshold: 1,
        ..config()
    });
    m.observe(Input::Available(true), t0);
    m.observe(Input::Endpoints(1), t0);
    let mut t = t0;
    probes(&mut m, &mut t, true, 3);
    assert!(m.is_registered());
    let actions = probes(&mut m, &mut t, false, 1);
    assert!(matches!(actions[..], [Action::Deregister { .. }]));
}

#[test]
fn a_hung_initializer_is_degraded_at_the_first_failure_and_removed_one_budget_later() {
    // Probes every second; frozen from 10.3 s; a probe to a frozen initializer fails after
    // the 500 ms budget.
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    let frozen = t0 + 10 * SEC + 300 * MS;
    let actions = drive(&mut m, t0, t0 + 14 * SEC, 500 * MS, |t| t < frozen);
    let degraded = actions
        .iter()
        .find(|(_, a)| matches!(a, Action::Degrade { .. }))
        .unwrap()
        .0;
    let removed = actions.iter().find(|(_, a)| is_deregister(a)).unwrap().0;
    assert!(degraded - frozen <= 1500 * MS, "{:?}", degraded - frozen);
    assert_eq!(
        removed - degraded,
        500 * MS,
        "the second failure is probed at once"
    );
}

#[test]
fn a_refused_connection_is_confirmed_within_the_retry_spacing() {
    let t0 = Instant::now();
    let (mut m, t) = registered(t0);
    let down = t + 200 * MS;
    let actions = drive(&mut m, t, t + 3 * SEC, 2 * MS, |at| at < down);
    let degraded = actions[0].0;
    let removed = actions.iter().find(|(_, a)| is_deregister(a)).unwrap().0;
    assert!(removed - degraded <= 60 * MS, "{:?}", removed - degraded);
}

#[test]
fn a_degraded_initializer_is_restored_after_success_threshold_good_probes_and_the_hold_down() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    let failed_at = t + SEC;
    probes(&mut m, &mut t, false, 1);
    let mut restored = None;
    for i in 1..30u32 {
        let now = failed_at + 100 * MS * i;
        if m.observe(Input::ProbeSucceeded, now) == Action::Restore {
            restored = Some(now);
            break;
        }
    }
    let restored = restored.unwrap();
    assert_eq!(
        restored - failed_at,
        SEC,
        "not before the one-period hold-down"
    );
    assert_eq!(m.state(), State::Registered);
}

#[test]
fn alternating_probes_degrade_once_and_never_register_deregister_or_restore() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    let mut actions = Vec::new();
    for _ in 0..1000 {
        actions.extend(probes(&mut m, &mut t, false, 1));
        actions.extend(probes(&mut m, &mut t, true, 1));
    }
    assert_eq!(actions.len(), 1, "{:?}", &actions[..actions.len().min(5)]);
    assert!(matches!(actions[0], Action::Degrade { .. }));
    let mut fresh = ready_machine(t0);
    let mut t = t0;
    let mut actions = Vec::new();
    for _ in 0..1000 {
        actions.extend(probes(&mut fresh, &mut t, true, 1));
        actions.extend(probes(&mut fresh, &mut t, false, 1));
    }
    assert!(actions.is_empty(), "{actions:?}");
}

#[test]
fn zero_ready_endpoints_deregister_at_once() {
    let t0 = Instant::now();
    let (mut m, t) = registered(t0);
    let zero_at = t + Duration::from_millis(300);
    assert_eq!(
        m.observe(Input::Endpoints(0), zero_at),
        Action::Deregister {
            cause: Cause::NoReadyEndpoints,
            since: zero_at
        }
    );
    assert_eq!(m.state(), State::Unresponsive);
    assert_eq!(m.observe(Input::Endpoints(0), zero_at + SEC), Action::None);
}

#[test]
fn zero_ready_endpoints_remove_a_degraded_configuration() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    probes(&mut m, &mut t, false, 1);
    let first = t;
    assert_eq!(
        m.observe(Input::Endpoints(0), t + 10 * MS),
        Action::Deregister {
            cause: Cause::NoReadyEndpoints,
            since: first
        }
    );
}

#[test]
fn an_unresponsive_initializer_registers_again_after_success_threshold_and_hold_down() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    probes(&mut m, &mut t, false, 2);
    assert_eq!(m.snapshot().hold_down, Some(SEC));
    assert!(probes(&mut m, &mut t, true, 2).is_empty());
    assert_eq!(probes(&mut m, &mut t, true, 1), [Action::Register]);
}

#[test]
fn a_thawed_initializer_is_registered_again_within_a_second_of_leaving() {
    // Frozen at 10.3 s; thawed the moment its configuration is removed.
    let t0 = Instant::now();
    let frozen = t0 + 10 * SEC + 300 * MS;
    let mut first = ready_machine(t0);
    let actions = drive(&mut first, t0, frozen + 3 * SEC, 500 * MS, |t| t < frozen);
    let left = actions
        .iter()
        .find(|(_, a)| matches!(a, Action::Degrade { .. }))
        .unwrap()
        .0;
    let removed = actions.iter().find(|(_, a)| is_deregister(a)).unwrap().0;
    let mut m = ready_machine(t0);
    let actions = drive(&mut m, t0, frozen + 5 * SEC, 500 * MS, |t| {
        t < frozen || t >= removed
    });
    let back = actions
        .iter()
        .filter(|(at, a)| *a == Action::Register && *at > removed)
        .map(|(at, _)| *at)
        .next()
        .unwrap();
    assert!(back - removed <= SEC, "{:?}", back - removed);
    assert!(
        back - left >= SEC,
        "the hold-down is kept: {:?}",
        back - left
    );
}

#[test]
fn the_hold_down_delays_registration_even_with_enough_good_probes() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    let mut t = t0;
    // Force a long hold-down by flapping repeatedly.
    for _ in 0..4 {
        m.adopt_registered(false, t);
        probes(&mut m, &mut t, false, 2);
    }
    let hold = m.snapshot().hold_down.unwrap();
    assert_eq!(hold, 8 * SEC);
    // The hold-down counts from leaving the path, one probe before the removal.
    let left_at = t - SEC;
    let mut registered_at = None;
    for i in 1..200u32 {
        let now = t + Duration::from_millis(100) * i;
        if m.observe(Input::ProbeSucceeded, now) == Action::Register {
            registered_at = Some(now);
            break;
        }
    }
    let registered_at = registered_at.unwrap();
    assert!(registered_at >= left_at + hold);
    assert!(registered_at < left_at + hold + SEC);
}

#[test]
fn during_a_long_hold_down_probes_slow_down_and_speed_up_before_it_ends() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    let mut t = t0;
    for _ in 0..4 {
        m.adopt_registered(false, t);
        probes(&mut m, &mut t, false, 2);
    }
    m.observe(Input::ProbeSucceeded, t);
    assert_eq!(m.next_probe_in(t), SEC);
    let left_at = t - SEC;
    let near_end = left_at + 8 * SEC - 200 * MS;
    assert_eq!(m.next_probe_in(near_end), 100 * MS);
}

#[test]
fn repeated_flapping_doubles_the_hold_down_up_to_the_cap_and_bounds_registrations() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    let mut t = t0;
    // The worst pattern that satisfies both thresholds: three good, two bad, forever.
    let mut registrations = 0;
    let mut holds = Vec::new();
    for _ in 0..2000 {
        for a in probes(&mut m, &mut t, true, 3) {
            if a == Action::Register {
                registrations += 1;
            }
        }
        for a in probes(&mut m, &mut t, false, 2) {
            if is_deregister(&a) {
                holds.push(m.snapshot().hold_down.unwrap());
            }
        }
    }
    assert_eq!(&holds[..4], [SEC, 2 * SEC, 4 * SEC, 8 * SEC]);
    assert_eq!(*holds.last().unwrap(), 64 * SEC);
    // Without a hold-down this pattern registers every 5 s (2000 times in 10000 s); with
    // it, once the cap is reached, at most once per 64 s.
    let elapsed = t.duration_since(t0).as_secs();
    assert!(
        registrations < 2000 / 5,
        "{registrations} registrations in {elapsed} s"
    );
    assert!(registrations as u64 <= elapsed / 60 + 8);
}

#[test]
fn a_flapping_initializer_probed_fast_causes_no_storm() {
    // Down 1.5 s, up 1.5 s, for ten minutes, driven by the prober's own timing: without the
    // hold-down every up phase would register (200 registrations); with it, the returns
    // thin out as the hold-down doubles, and degradations follow returns one for one.
    let t0 = Instant::now();
    let (mut m, t) = registered(t0);
    let cycle = 3 * SEC;
    let end = t + 600 * SEC;
    let actions = drive(&mut m, t, end, 500 * MS, |at| {
        (at - t).as_millis() % cycle.as_millis() >= 1500
    });
    let returns = actions
        .iter()
        .filter(|(_, a)| matches!(a, Action::Register | Action::Restore))
        .count();
    let leaves = actions
        .iter()
        .filter(|(_, a)| matches!(a, Action::Degrade { .. }))
        .count();
    assert!(returns <= 16, "{returns} returns in ten minutes");
    assert!(
        leaves <= returns + 1,
        "{leaves} degradations, {returns} returns"
    );
    // Every return comes at least the hold-down after the initializer left the path.
    let mut left = None;
    let mut gaps = Vec::new();
    for (at, action) in &actions {
        match action {
            Action::Degrade { .. } => left = Some(*at),
            Action::Register | Action::Restore => gaps.push(*at - left.unwrap()),
            _ => {}
        }
    }
    for (i, gap) in gaps.iter().enumerate() {
        let hold = (SEC * 2u32.pow(u32::try_from(i).unwrap().min(6))).min(64 * SEC);
        assert!(
            *gap >= hold,
            "return {i} after {gap:?}, hold-down {hold:?}: {gaps:?}"
        );
    }
}

#[test]
fn a_long_stable_registration_resets_the_hold_down() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    let mut t = t0;
    for _ in 0..5 {
        m.adopt_registered(false, t);
        probes(&mut m, &mut t, false, 2);
    }
    assert_eq!(m.snapshot().hold_down, Some(16 * SEC));
    t += 20 * SEC;
    assert_eq!(probes(&mut m, &mut t, true, 3), [Action::Register]);
    t += Duration::from_secs(601);
    probes(&mut m, &mut t, false, 2);
    assert_eq!(m.snapshot().hold_down, Some(SEC));
}

#[test]
fn suspend_deregisters_and_never_registers_while_true() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    assert_eq!(
        m.observe(Input::Aside(Some(Aside::Suspended)), t),
        Action::Deregister {
            cause: Cause::Aside(Aside::Suspended),
            since: t
        }
    );
    assert_eq!(m.state(), State::Aside);
    assert!(probes(&mut m, &mut t, true, 20).is_empty());
    assert_eq!(m.observe(Input::Endpoints(3), t), Action::None);
    assert_eq!(m.observe(Input::Available(true), t), Action::None);
    m.adopt_registered(false, t);
    assert_eq!(
        m.state(),
        State::Aside,
        "a found configuration is not adopted"
    );
    assert_eq!(
        m.observe(Input::Aside(Some(Aside::Suspended)), t),
        Action::None
    );
}

#[test]
fn the_hand_over_to_the_api_server_is_its_own_cause_and_on_purpose() {
    let t0 = Instant::now();
    let (mut m, t) = registered(t0);
    let cause = Cause::Aside(Aside::InApiServer);
    assert_eq!(
        m.observe(Input::Aside(Some(Aside::InApiServer)), t),
        Action::Deregister { cause, since: t }
    );
    assert_eq!(cause.reason(), "InApiServer");
    assert!(cause.is_on_purpose() && !Cause::ProbesFailed.is_on_purpose());
    // Suspended while in the API server: still aside, nothing more to remove.
    assert_eq!(
        m.observe(Input::Aside(Some(Aside::Suspended)), t),
        Action::None
    );
    assert_eq!(m.state(), State::Aside);
}

#[test]
fn suspending_a_degraded_initializer_removes_its_configuration() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    probes(&mut m, &mut t, false, 1);
    assert!(matches!(
        m.observe(Input::Aside(Some(Aside::Suspended)), t),
        Action::Deregister {
            cause: Cause::Aside(Aside::Suspended),
            ..
        }
    ));
}

#[test]
fn resuming_needs_fresh_good_probes() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    m.observe(Input::Aside(Some(Aside::Suspended)), t);
    probes(&mut m, &mut t, true, 5);
    assert_eq!(m.observe(Input::Aside(None), t), Action::None);
    assert_eq!(m.state(), State::Waiting);
    assert!(probes(&mut m, &mut t, true, 2).is_empty());
    assert_eq!(probes(&mut m, &mut t, true, 1), [Action::Register]);
}

#[test]
fn suspending_an_unregistered_initializer_does_nothing_but_holds_it() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    assert_eq!(
        m.observe(Input::Aside(Some(Aside::Suspended)), t0),
        Action::None
    );
    let mut t = t0;
    assert!(probes(&mut m, &mut t, true, 5).is_empty());
}

#[test]
fn an_adopted_configuration_is_removed_when_probes_fail() {
    let t0 = Instant::now();
    let mut m = Machine::new(config());
    m.adopt_registered(false, t0);
    assert!(m.is_registered());
    let mut t = t0;
    let actions = probes(&mut m, &mut t, false, 2);
    assert!(matches!(
        actions[..],
        [
            Action::Degrade { .. },
            Action::Deregister {
                cause: Cause::ProbesFailed,
                ..
            }
        ]
    ));
}

#[test]
fn an_adopted_degraded_configuration_is_restored_after_good_probes() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    m.adopt_registered(true, t0);
    assert_eq!(m.state(), State::Degraded);
    let mut t = t0;
    assert_eq!(probes(&mut m, &mut t, true, 3), [Action::Restore]);
}

#[test]
fn an_adopted_outage_stays_out_of_the_path_until_good_probes() {
    let t0 = Instant::now();
    let mut m = ready_machine(t0);
    m.adopt_unresponsive(t0);
    assert!(m.in_outage());
    let mut t = t0;
    assert_eq!(probes(&mut m, &mut t, true, 3), [Action::Register]);
}

#[test]
fn a_failed_registration_is_retried_on_the_next_good_probe_and_keeps_the_outage() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    m.registration_failed();
    assert_eq!(m.state(), State::Waiting);
    assert_eq!(probes(&mut m, &mut t, true, 1), [Action::Register]);
    probes(&mut m, &mut t, false, 2);
    t += 5 * SEC;
    assert_eq!(probes(&mut m, &mut t, true, 3), [Action::Register]);
    m.registration_failed();
    assert_eq!(m.state(), State::Unresponsive);
    assert!(m.in_outage());
}

#[test]
fn the_time_to_deregister_counts_from_the_first_failed_probe() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    let first = t + SEC;
    let actions = probes(&mut m, &mut t, false, 2);
    let Action::Deregister { since, .. } = actions[1] else {
        panic!("expected a deregistration");
    };
    assert_eq!(since, first);
    assert_eq!(t.duration_since(since), SEC);
}

#[test]
fn raised_thresholds_apply_to_the_next_inputs() {
    let t0 = Instant::now();
    let (mut m, mut t) = registered(t0);
    m.set_config(HealthConfig {
        failure_threshold: 4,
        ..config()
    });
    assert_eq!(probes(&mut m, &mut t, false, 3).len(), 1, "degraded only");
    assert_eq!(probes(&mut m, &mut t, false, 1).len(), 1);
}

#[test]
fn registration_waits_until_the_api_server_is_seen_reaching_the_initializer() {
    let t0 = Instant::now();
    let proving = HealthConfig::from_policy(&HealthPolicy::default());
    assert!(proving.prove_route, "a webhook proves its route by default");
    let mut m = Machine::new(proving);
    m.observe(Input::Available(true), t0);
    m.observe(Input::Endpoints(2), t0);
    assert!(!m.is_proving(t0), "not before the good probes");
    let mut t = t0;
    let early = probes_every(&mut m, &mut t, true, 50, 100 * MS);
    assert!(
        early.iter().all(|a| *a == Action::Prove) && !early.is_empty(),
        "five seconds of good probes without the route: {early:?}"
    );
    assert!(m.is_proving(t) && !m.is_registered());
    assert_eq!(m.observe(Input::Routed, t), Action::Register);
    assert!(m.is_registered() && !m.is_proving(t));
}

#[test]
fn a_machine_that_is_not_ready_proves_nothing_and_a_route_seen_early_waits_for_readiness() {
    let t0 = Instant::now();
    let mut m = Machine::new(HealthConfig::from_policy(&HealthPolicy::default()));
    m.observe(Input::Endpoints(1), t0);
    let mut t = t0;
    assert!(
        probes_every(&mut m, &mut t, true, 5, 100 * MS).is_empty(),
        "no available workload"
    );
    assert!(!m.is_proving(t));
    assert_eq!(m.observe(Input::Routed, t), Action::None);
    assert_eq!(m.observe(Input::Available(true), t), Action::Register);
}

/// Probes every 100 ms from `*t` (40 probes at most), reporting the route proven at the
/// `routed_at`-th probe that asks to prove it, and returns the actions other than
/// [`Action::Prove`] and how many probes asked to prove.
fn probes_proving(m: &mut Machine, t: &mut Instant, routed_at: usize) -> (Vec<Action>, usize) {
    let mut actions = Vec::new();
    let mut proving = 0;
    for _ in 0..40 {
        *t += 100 * MS;
        match m.observe(Input::ProbeSucceeded, *t) {
            Action::Prove => {
                proving += 1;
                if proving == routed_at {
                    actions.push(m.observe(Input::Routed, *t));
                }
            }
            Action::None => {}
            other => actions.push(other),
        }
    }
    (actions, proving)
}

#[test]
fn endpoints_that_came_back_are_proven_again_but_a_degraded_configuration_is_restored_at_once() {
    let t0 = Instant::now();
    let mut m = Machine::new(HealthConfig {
        base_hold_down: 100 * MS,
        max_hold_down: 100 * MS,
        ..HealthConfig::from_policy(&HealthPolicy::default())
    });
    m.observe(Input::Available(true), t0);
    m.observe(Input::Endpoints(1), t0);
    let mut t = t0;
    let (actions, proving) = probes_proving(&mut m, &mut t, 3);
    assert_eq!(actions, [Action::Register]);
    assert_eq!(proving, 3, "proved at the third check, then registered");
    // A failed probe degrades; good probes after the hold-down restore without a new proof.
    t += SEC;
    assert!(matches!(
        m.observe(Input::ProbeFailed, t),
        Action::Degrade { .. }
    ));
    let (restored, proving) = probes_proving(&mut m, &mut t, 1);
    assert_eq!((restored, proving), (vec![Action::Restore], 0));
    // Removed after failed probes with the endpoints still there: registered again at once.
    for _ in 0..3 {
        t += SEC;
        m.observe(Input::ProbeFailed, t);
    }
    assert!(!m.is_registered());
    let (back, proving) = probes_proving(&mut m, &mut t, 1);
    assert_eq!((back, proving), (vec![Action::Register], 0));
    // The endpoints go to zero and come back: the new ones must be proven first.
    endpoints_leave_and_return(&mut m, &mut t);
    let (again, proving) = probes_proving(&mut m, &mut t, 2);
    assert_eq!((again, proving), (vec![Action::Register], 2));
}

/// The endpoints go to zero a second after `*t` (the registration is withdrawn) and a new one
/// appears a second later.
fn endpoints_leave_and_return(m: &mut Machine, t: &mut Instant) {
    *t += SEC;
    assert!(matches!(
        m.observe(Input::Endpoints(0), *t),
        Action::Deregister { .. }
    ));
    *t += SEC;
    m.observe(Input::Endpoints(1), *t);
}

/// Feeds good probes 100 ms apart from `*t` until the machine asks to prove the route, and
/// returns when it did (within `limit` probes).
fn until_proving(m: &mut Machine, t: &mut Instant, limit: u32) -> Option<Instant> {
    for _ in 0..limit {
        *t += 100 * MS;
        if m.observe(Input::ProbeSucceeded, *t) == Action::Prove {
            return Some(*t);
        }
    }
    None
}

/// A return that fails while its route is being proven (frozen again: its endpoints went, or a
/// probe failed) failed soon after coming back, as a registration that fails at once does: the
/// hold-down doubles, so a flapping initializer's proving registrations thin out instead of
/// coming back at every thaw.
#[test]
fn a_return_that_fails_while_its_route_is_proven_doubles_the_hold_down() {
    for fails in [Input::Endpoints(0), Input::ProbeFailed] {
        let t0 = Instant::now();
        let mut m = Machine::new(HealthConfig::from_policy(&HealthPolicy::default()));
        let base = m.config().base_hold_down;
        m.observe(Input::Available(true), t0);
        m.observe(Input::Endpoints(1), t0);
        let mut t = t0;
        let (registered, _) = probes_proving(&mut m, &mut t, 1);
        assert_eq!(registered, [Action::Register]);
        endpoints_leave_and_return(&mut m, &mut t);
        until_proving(&mut m, &mut t, 40).expect("proven again after the hold-down");
        let left = t;
        assert_eq!(m.observe(fails, t), Action::None, "{fails:?}");
        m.observe(Input::Endpoints(1), t);
        let again = until_proving(&mut m, &mut t, 100).expect("proven again in the end");
        assert!(
            again - left >= base * 2,
            "{fails:?}: proven again {:?} after a failed return, within the doubled hold-down of {:?}",
            again - left,
            base * 2
        );
    }
}

/// A registration proven before its NetworkPolicy changed is not proven after: the route is
/// the API server's, which the operator's probes do not take. The machine degrades it to the
/// proving configuration at once, whatever the probes say, and restores the spec's values only
/// once the API server is seen again.
#[test]
fn a_route_changed_under_a_registration_fails_open_until_it_is_proven_again() {
    let t0 = Instant::now();
    let mut m = Machine::new(HealthConfig::from_policy(&HealthPolicy::default()));
    m.observe(Input::Available(true), t0);
    m.observe(Input::Endpoints(1), t0);
    let mut t = t0;
    let (registered, _) = probes_proving(&mut m, &mut t, 1);
    assert_eq!(registered, [Action::Register]);
    let hold_down = m.snapshot().hold_down;

    t += SEC;
    assert_eq!(m.observe(Input::RouteChanged, t), Action::Reprove);
    assert_eq!(m.state(), State::Degraded);
    assert!(
        m.is_proving(t),
        "the proving configuration replaces the spec's values"
    );
    assert!(
        m.in_outage(),
        "failing open: the fallback and the missed count apply"
    );
    let (good_probes_alone, proving) = probes_proving(&mut m, &mut t, usize::MAX);
    assert!(
        good_probes_alone.is_empty() && proving > 0,
        "good probes without the route restore nothing: {good_probes_alone:?}"
    );
    assert!(m.is_proving(t), "still proving");
    assert_eq!(m.observe(Input::Routed, t), Action::Restore);
    assert_eq!(m.state(), State::Registered);
    assert!(!m.is_proving(t));
    assert_eq!(
        m.snapshot().hold_down,
        hold_down,
        "nothing failed: no hold-down"
    );
}

/// A change that finds the initializer out of the path only forgets the route: the next
/// registration proves it anyway. A probe that fails while the changed route is proven counts
/// as it does for any degraded configuration.
#[test]
fn a_route_change_out_of_the_path_forgets_the_route_and_failures_still_remove_it() {
    let t0 = Instant::now();
    let mut waiting = Machine::new(HealthConfig::from_policy(&HealthPolicy::default()));
    assert_eq!(waiting.observe(Input::RouteChanged, t0), Action::None);
    assert_eq!(waiting.state(), State::Waiting);

    let mut m = Machine::new(HealthConfig::from_policy(&HealthPolicy::default()));
    m.observe(Input::Available(true), t0);
    m.observe(Input::Endpoints(1), t0);
    let mut t = t0;
    assert_eq!(probes_proving(&mut m, &mut t, 1).0, [Action::Register]);
    t += SEC;
    let changed = t;
    m.observe(Input::RouteChanged, changed);
    let threshold = m.config().failure_threshold;
    let failed = probes(&mut m, &mut t, false, threshold);
    assert_eq!(
        failed,
        [Action::Deregister {
            cause: Cause::ProbesFailed,
            since: changed
        }],
        "removed at the failure threshold, the trouble counted from the change"
    );
    assert_eq!(m.state(), State::Unresponsive);
}

/// The legacy backend's canary already takes the API server's path at every probe: a route
/// change changes nothing there.
#[test]
fn a_route_change_leaves_a_machine_that_proves_no_route_alone() {
    let t0 = Instant::now();
    let (mut m, t) = registered(t0);
    assert_eq!(m.observe(Input::RouteChanged, t), Action::None);
    assert_eq!(m.state(), State::Registered);
}

/// A configuration found registered after a restart was proven by whoever registered it: a
/// degraded one is restored by good probes alone, as before.
#[test]
fn an_adopted_degraded_configuration_with_a_route_to_prove_is_restored_by_good_probes() {
    let t0 = Instant::now();
    let mut m = Machine::new(HealthConfig::from_policy(&HealthPolicy::default()));
    m.observe(Input::Available(true), t0);
    m.observe(Input::Endpoints(1), t0);
    m.adopt_registered(true, t0);
    assert!(!m.is_proving(t0));
    let mut t = t0 + 2 * SEC;
    let restored = probes_every(&mut m, &mut t, true, 5, 100 * MS);
    assert_eq!(restored, [Action::Restore]);
}
