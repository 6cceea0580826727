//! The health state machine of one Initializer: a pure type fed with probe results, ready
//! endpoint counts, workload availability and the suspend flag, with the time passed in. It
//! decides when the webhook configuration is registered and when it is removed.
//!
//! Hysteresis keeps a flapping initializer from causing a register/deregister storm:
//! registration needs `successThreshold` consecutive good probes (and an available workload),
//! removal needs `failureThreshold` consecutive failed probes (or zero ready endpoints, at once),
//! and after every removal a hold-down forbids registering again for a while. The hold-down
//! starts at one probe period and doubles each time the initializer fails again soon after
//! being registered, up to a cap; a long stable registration resets it.

use std::time::{Duration, Instant};

use initializer_crds::HealthPolicy;

/// Thresholds and timings of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// Consecutive failed probes that deregister.
    pub failure_threshold: u32,
    /// Consecutive good probes needed to register.
    pub success_threshold: u32,
    /// First hold-down after a removal.
    pub base_hold_down: Duration,
    /// Largest hold-down.
    pub max_hold_down: Duration,
    /// A registration that lasted this long resets the hold-down to its base.
    pub stable_after: Duration,
}

impl HealthConfig {
    /// The machine's settings for a spec's health policy: hold-down from one period up to
    /// 64 periods (at most five minutes), reset after ten minutes of stable registration.
    pub fn from_policy(policy: &HealthPolicy) -> Self {
        let period = Duration::from_secs(u64::try_from(policy.period_seconds.max(1)).unwrap_or(1));
        Self {
            failure_threshold: u32::try_from(policy.failure_threshold.max(1)).unwrap_or(1),
            success_threshold: u32::try_from(policy.success_threshold.max(1)).unwrap_or(1),
            base_hold_down: period,
            max_hold_down: (period * 64).min(Duration::from_secs(300)).max(period),
            stable_after: Duration::from_secs(600),
        }
    }
}

/// Where the Initializer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Never registered yet (or resumed from suspension): waiting to be ready and answering.
    Waiting,
    /// The configuration is registered.
    Registered,
    /// The configuration was removed because the initializer stopped answering.
    Unresponsive,
    /// `spec.suspend` is true: removed and never registered again until it is false.
    Suspended,
}

/// One thing the machine learns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// An active probe answered correctly within the latency budget.
    ProbeSucceeded,
    /// An active probe failed, answered wrongly, or was too slow.
    ProbeFailed,
    /// The Service now has this many ready endpoints.
    Endpoints(u32),
    /// Whether the Deployment is available.
    Available(bool),
    /// The value of `spec.suspend`.
    Suspend(bool),
}

/// Why the configuration is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// `failureThreshold` consecutive probes failed.
    ProbesFailed,
    /// The Service has no ready endpoint.
    NoReadyEndpoints,
    /// `spec.suspend` became true.
    Suspended,
}

impl Cause {
    /// Condition and Event reason for this cause.
    pub fn reason(self) -> &'static str {
        match self {
            Cause::ProbesFailed => "ProbesFailed",
            Cause::NoReadyEndpoints => "NoReadyEndpoints",
            Cause::Suspended => "Suspended",
        }
    }
}

/// What the caller must do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// Create or update the configuration.
    Register,
    /// Delete the configuration. `since` is when the trouble was first seen (first failed probe
    /// or the endpoints going to zero), for the time-to-deregister metric.
    Deregister {
        /// Why.
        cause: Cause,
        /// When the trouble started.
        since: Instant,
    },
}

/// The state machine of one Initializer.
#[derive(Clone, Debug)]
pub struct Machine {
    config: HealthConfig,
    state: State,
    ok_streak: u32,
    fail_streak: u32,
    endpoints: Option<u32>,
    available: bool,
    suspended: bool,
    hold_down: Option<Duration>,
    hold_until: Option<Instant>,
    registered_at: Option<Instant>,
    trouble_since: Option<Instant>,
}

/// A read-only view of the machine, for status and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Current state.
    pub state: State,
    /// Consecutive good probes.
    pub ok_streak: u32,
    /// Consecutive failed probes.
    pub fail_streak: u32,
    /// Ready endpoints last seen (`None` before the first count).
    pub endpoints: Option<u32>,
    /// Whether the Deployment was last seen available.
    pub available: bool,
    /// The hold-down in force after the last removal.
    pub hold_down: Option<Duration>,
}

impl Machine {
    /// A machine for a new Initializer: waiting, nothing known.
    pub fn new(config: HealthConfig) -> Self {
        Self {
            config,
            state: State::Waiting,
            ok_streak: 0,
            fail_streak: 0,
            endpoints: None,
            available: false,
            suspended: false,
            hold_down: None,
            hold_until: None,
            registered_at: None,
            trouble_since: None,
        }
    }

    /// Replaces thresholds and timings (the spec changed); counters and state are kept.
    pub fn set_config(&mut self, config: HealthConfig) {
        self.config = config;
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// True when the configuration should exist now.
    pub fn is_registered(&self) -> bool {
        self.state == State::Registered
    }

    /// A read-only view.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            state: self.state,
            ok_streak: self.ok_streak,
            fail_streak: self.fail_streak,
            endpoints: self.endpoints,
            available: self.available,
            hold_down: self.hold_down,
        }
    }

    /// Adopts a configuration found registered (for example after an operator restart), so
    /// that failures remove it; nothing happens while suspended.
    pub fn adopt_registered(&mut self, now: Instant) {
        if !self.suspended {
            self.state = State::Registered;
            self.registered_at = Some(now);
            self.fail_streak = 0;
        }
    }

    /// Undoes a [`Action::Register`] the caller could not carry out; the next good probe retries.
    pub fn registration_failed(&mut self) {
        if self.state == State::Registered {
            self.state = State::Waiting;
            self.registered_at = None;
        }
    }

    /// Feeds one input observed at `now` and returns what to do.
    pub fn observe(&mut self, input: Input, now: Instant) -> Action {
        match input {
            Input::ProbeSucceeded => {
                self.ok_streak = self.ok_streak.saturating_add(1);
                self.fail_streak = 0;
                if self.state == State::Registered {
                    self.trouble_since = None;
                }
                self.try_register(now)
            }
            Input::ProbeFailed => {
                self.fail_streak = self.fail_streak.saturating_add(1);
                self.ok_streak = 0;
                if self.trouble_since.is_none() {
                    self.trouble_since = Some(now);
                }
                if self.state == State::Registered
                    && self.fail_streak >= self.config.failure_threshold
                {
                    self.deregister(Cause::ProbesFailed, now)
                } else {
                    Action::None
                }
            }
            Input::Endpoints(ready) => {
                self.endpoints = Some(ready);
                if ready == 0 {
                    self.ok_streak = 0;
                    if self.state == State::Registered {
                        // The endpoints going to zero is the trouble itself; a probe that failed
                        // earlier does not make this removal look slower than it was.
                        self.trouble_since = Some(now);
                        return self.deregister(Cause::NoReadyEndpoints, now);
                    }
                    Action::None
                } else {
                    self.try_register(now)
                }
            }
            Input::Available(available) => {
                self.available = available;
                self.try_register(now)
            }
            Input::Suspend(true) => {
                self.suspended = true;
                let was = self.state;
                self.state = State::Suspended;
                self.ok_streak = 0;
                if was == State::Registered {
                    self.registered_at = None;
                    Action::Deregister {
                        cause: Cause::Suspended,
                        since: now,
                    }
                } else {
                    Action::None
                }
            }
            Input::Suspend(false) => {
                if self.suspended {
                    self.suspended = false;
                    self.state = State::Waiting;
                    self.ok_streak = 0;
                    self.trouble_since = None;
                }
                Action::None
            }
        }
    }

    fn try_register(&mut self, now: Instant) -> Action {
        let ready = self.state != State::Registered
            && !self.suspended
            && self.available
            && self.endpoints != Some(0)
            && self.ok_streak >= self.config.success_threshold
            && self.hold_until.is_none_or(|until| now >= until);
        if ready {
            self.state = State::Registered;
            self.registered_at = Some(now);
            self.trouble_since = None;
            Action::Register
        } else {
            Action::None
        }
    }

    fn deregister(&mut self, cause: Cause, now: Instant) -> Action {
        let stable = self
            .registered_at
            .is_some_and(|at| now.saturating_duration_since(at) >= self.config.stable_after);
        let hold = match self.hold_down {
            Some(previous) if !stable => (previous * 2).min(self.config.max_hold_down),
            _ => self.config.base_hold_down,
        };
        self.hold_down = Some(hold);
        self.hold_until = Some(now + hold);
        self.state = State::Unresponsive;
        self.registered_at = None;
        self.ok_streak = 0;
        let since = self.trouble_since.take().unwrap_or(now);
        Action::Deregister { cause, since }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn config() -> HealthConfig {
        HealthConfig::from_policy(&HealthPolicy::default())
    }

    /// A machine with an available workload and ready endpoints, at time `t0`.
    fn ready_machine(t0: Instant) -> Machine {
        let mut m = Machine::new(config());
        assert_eq!(m.observe(Input::Available(true), t0), Action::None);
        assert_eq!(m.observe(Input::Endpoints(2), t0), Action::None);
        m
    }

    /// Feeds `n` probes of one kind, one per second from `*t`, returning every action taken.
    fn probes(m: &mut Machine, t: &mut Instant, ok: bool, n: u32) -> Vec<Action> {
        let mut actions = Vec::new();
        for _ in 0..n {
            *t += SEC;
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

    fn registered(t0: Instant) -> (Machine, Instant) {
        let mut m = ready_machine(t0);
        let mut t = t0;
        assert_eq!(probes(&mut m, &mut t, true, 3), [Action::Register]);
        (m, t)
    }

    #[test]
    fn defaults_give_one_second_base_hold_down_capped_at_sixty_four_periods() {
        let c = config();
        assert_eq!((c.failure_threshold, c.success_threshold), (2, 3));
        assert_eq!(c.base_hold_down, SEC);
        assert_eq!(c.max_hold_down, 64 * SEC);
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
    fn an_unavailable_workload_is_never_registered_and_registers_once_available() {
        let t0 = Instant::now();
        let mut m = Machine::new(config());
        let mut t = t0;
        assert!(probes(&mut m, &mut t, true, 10).is_empty());
        assert_eq!(m.observe(Input::Available(true), t), Action::Register);
    }

    #[test]
    fn zero_ready_endpoints_block_registration() {
        let t0 = Instant::now();
        let mut m = ready_machine(t0);
        m.observe(Input::Endpoints(0), t0);
        let mut t = t0;
        assert!(probes(&mut m, &mut t, true, 10).is_empty());
        assert_eq!(m.observe(Input::Endpoints(1), t), Action::Register);
    }

    #[test]
    fn one_failed_probe_is_tolerated_and_failure_threshold_failures_deregister() {
        let t0 = Instant::now();
        let (mut m, mut t) = registered(t0);
        assert!(probes(&mut m, &mut t, false, 1).is_empty());
        let first_failure = t;
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
    fn a_good_probe_between_failures_resets_the_failure_streak() {
        let t0 = Instant::now();
        let (mut m, mut t) = registered(t0);
        for _ in 0..10 {
            assert!(probes(&mut m, &mut t, false, 1).is_empty());
            assert!(probes(&mut m, &mut t, true, 1).is_empty());
        }
        assert!(m.is_registered());
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
    fn an_unresponsive_initializer_registers_again_after_success_threshold_and_hold_down() {
        let t0 = Instant::now();
        let (mut m, mut t) = registered(t0);
        probes(&mut m, &mut t, false, 2);
        assert_eq!(m.snapshot().hold_down, Some(SEC));
        assert!(probes(&mut m, &mut t, true, 2).is_empty());
        assert_eq!(probes(&mut m, &mut t, true, 1), [Action::Register]);
    }

    #[test]
    fn the_hold_down_delays_registration_even_with_enough_good_probes() {
        let t0 = Instant::now();
        let mut m = ready_machine(t0);
        let mut t = t0;
        // Force a long hold-down by flapping repeatedly.
        for _ in 0..4 {
            m.adopt_registered(t);
            probes(&mut m, &mut t, false, 2);
        }
        let hold = m.snapshot().hold_down.unwrap();
        assert_eq!(hold, 8 * SEC);
        // Good probes every 100 ms: success threshold is met long before the hold-down ends.
        let deregistered_at = t;
        let mut registered_at = None;
        for i in 1..200u32 {
            let now = deregistered_at + Duration::from_millis(100) * i;
            if m.observe(Input::ProbeSucceeded, now) == Action::Register {
                registered_at = Some(now);
                break;
            }
        }
        let registered_at = registered_at.unwrap();
        assert!(registered_at >= deregistered_at + hold);
        assert!(registered_at < deregistered_at + hold + SEC);
    }

    #[test]
    fn alternating_probes_never_cause_a_register_or_deregister() {
        let t0 = Instant::now();
        let (mut m, mut t) = registered(t0);
        let mut actions = Vec::new();
        for _ in 0..1000 {
            actions.extend(probes(&mut m, &mut t, false, 1));
            actions.extend(probes(&mut m, &mut t, true, 1));
        }
        assert!(actions.is_empty(), "{actions:?}");
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
                if matches!(a, Action::Deregister { .. }) {
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
    fn a_long_stable_registration_resets_the_hold_down() {
        let t0 = Instant::now();
        let mut m = ready_machine(t0);
        let mut t = t0;
        for _ in 0..5 {
            m.adopt_registered(t);
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
            m.observe(Input::Suspend(true), t),
            Action::Deregister {
                cause: Cause::Suspended,
                since: t
            }
        );
        assert_eq!(m.state(), State::Suspended);
        assert!(probes(&mut m, &mut t, true, 20).is_empty());
        assert_eq!(m.observe(Input::Endpoints(3), t), Action::None);
        assert_eq!(m.observe(Input::Available(true), t), Action::None);
        m.adopt_registered(t);
        assert_eq!(
            m.state(),
            State::Suspended,
            "a found configuration is not adopted"
        );
        assert_eq!(m.observe(Input::Suspend(true), t), Action::None);
    }

    #[test]
    fn resuming_needs_fresh_good_probes() {
        let t0 = Instant::now();
        let (mut m, mut t) = registered(t0);
        m.observe(Input::Suspend(true), t);
        probes(&mut m, &mut t, true, 5);
        assert_eq!(m.observe(Input::Suspend(false), t), Action::None);
        assert_eq!(m.state(), State::Waiting);
        assert!(probes(&mut m, &mut t, true, 2).is_empty());
        assert_eq!(probes(&mut m, &mut t, true, 1), [Action::Register]);
    }

    #[test]
    fn suspending_an_unregistered_initializer_does_nothing_but_holds_it() {
        let t0 = Instant::now();
        let mut m = ready_machine(t0);
        assert_eq!(m.observe(Input::Suspend(true), t0), Action::None);
        let mut t = t0;
        assert!(probes(&mut m, &mut t, true, 5).is_empty());
    }

    #[test]
    fn an_adopted_configuration_is_removed_when_probes_fail() {
        let t0 = Instant::now();
        let mut m = Machine::new(config());
        m.adopt_registered(t0);
        assert!(m.is_registered());
        let mut t = t0;
        let actions = probes(&mut m, &mut t, false, 2);
        assert!(matches!(
            actions[..],
            [Action::Deregister {
                cause: Cause::ProbesFailed,
                ..
            }]
        ));
    }

    #[test]
    fn a_failed_registration_is_retried_on_the_next_good_probe() {
        let t0 = Instant::now();
        let (mut m, mut t) = registered(t0);
        m.registration_failed();
        assert_eq!(m.state(), State::Waiting);
        assert_eq!(probes(&mut m, &mut t, true, 1), [Action::Register]);
    }

    #[test]
    fn the_time_to_deregister_counts_from_the_first_failed_probe() {
        let t0 = Instant::now();
        let (mut m, mut t) = registered(t0);
        let first = t + SEC;
        let actions = probes(&mut m, &mut t, false, 2);
        let Action::Deregister { since, .. } = actions[0] else {
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
        assert!(probes(&mut m, &mut t, false, 3).is_empty());
        assert_eq!(probes(&mut m, &mut t, false, 1).len(), 1);
    }
}
