//! The health state machine of one Initializer: a pure type fed with probe results, ready
//! endpoint counts, workload availability and the suspend flag, with the time passed in. It
//! decides when the webhook configuration is registered, degraded, restored and removed, and
//! when the next probe is due.
//!
//! The path out is fast and graded: the first failed probe degrades the configuration
//! (`failurePolicy: Ignore`, a short timeout) so that creates stop failing at once;
//! `failureThreshold` consecutive failures (probed back to back) or zero ready endpoints remove
//! it. The path back is quick but guarded: while waiting, the machine asks for probes every
//! [`HealthConfig::fast_interval`], and `successThreshold` good probes in a row return it to
//! the path.
//!
//! The first way in is proven, not timed: once ready and answering, the machine asks for the
//! proving configuration ([`Action::Prove`]: failing open, with the route check of
//! [`initializer_core::route`]) and registers with the spec's values only when the caller reports
//! that the API server's call reached the initializer ([`Input::Routed`]). New endpoints (after the
//! Service had none) are proven again; a degraded configuration, whose endpoints never left, is
//! restored without. A change of what admits the API server to the pods (their NetworkPolicy,
//! [`Input::RouteChanged`]) degrades a registration to the proving configuration until the route
//! is seen again: the operator's probes do not take that path, so they cannot tell.
//!
//! Hysteresis keeps a flapping initializer from causing a storm: returning needs
//! `successThreshold` consecutive good probes (and an available workload), and every time the
//! initializer leaves the path a hold-down forbids returning for a while, counted from when it
//! left. The hold-down starts at one probe period and doubles each time the initializer fails
//! again soon after returning, up to a cap; a long stable registration resets it.

use std::time::{Duration, Instant};

use initializer_crds::HealthPolicy;

/// Interval between probes while waiting to register or to restore.
pub const FAST_INTERVAL: Duration = Duration::from_millis(100);

/// Thresholds and timings of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// Consecutive failed probes that deregister.
    pub failure_threshold: u32,
    /// Consecutive good probes needed to register or restore.
    pub success_threshold: u32,
    /// Time between probes of a registered, healthy initializer.
    pub period: Duration,
    /// Time between probes while waiting to register or restore.
    pub fast_interval: Duration,
    /// First hold-down after leaving the path.
    pub base_hold_down: Duration,
    /// Largest hold-down.
    pub max_hold_down: Duration,
    /// A registration that lasted this long resets the hold-down to its base.
    pub stable_after: Duration,
    /// Whether registering waits for [`Input::Routed`]: a webhook's, which the API server calls
    /// through the Service; not an `InitializerConfiguration`'s, whose canary probe already
    /// takes the API server's path.
    pub prove_route: bool,
}

impl HealthConfig {
    /// The machine's settings for a spec's health policy: hold-down from one period up to
    /// 64 periods (at most five minutes), reset after ten minutes of stable registration.
    pub fn from_policy(policy: &HealthPolicy) -> Self {
        let period = Duration::from_secs(u64::try_from(policy.period_seconds.max(1)).unwrap_or(1));
        Self {
            failure_threshold: u32::try_from(policy.failure_threshold.max(1)).unwrap_or(1),
            success_threshold: u32::try_from(policy.success_threshold.max(1)).unwrap_or(1),
            period,
            fast_interval: FAST_INTERVAL.min(period),
            base_hold_down: period,
            max_hold_down: (period * 64).min(Duration::from_secs(300)).max(period),
            stable_after: Duration::from_secs(600),
            prove_route: true,
        }
    }
}

/// How long a probe may take before it fails: the policy's latency budget (500 ms when the
/// stored value is negative, which validation never lets through).
pub fn latency_budget(policy: &HealthPolicy) -> Duration {
    Duration::from_millis(u64::try_from(policy.latency_budget_millis).unwrap_or(500))
}

/// Where the Initializer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Never registered yet (or resumed from suspension): waiting to be ready and answering.
    Waiting,
    /// The configuration is registered with the spec's values.
    Registered,
    /// A probe failed: the configuration is registered, degraded to fail open quickly.
    Degraded,
    /// The configuration was removed because the initializer stopped answering.
    Unresponsive,
    /// Out of the path on purpose ([`Aside`]): removed and never registered again until that
    /// ends.
    Aside,
}

/// Why an Initializer is out of the path on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aside {
    /// `spec.suspend` or the break-glass annotation.
    Suspended,
    /// Its preset runs in the API server: the policy took over from the webhook.
    InApiServer,
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
    /// Whether the Initializer is out of the path on purpose, and why.
    Aside(Option<Aside>),
    /// A call of the API server through the Service reached the initializer (the route check
    /// answered).
    Routed,
    /// What admits the API server to the initializer's pods is about to change (their
    /// NetworkPolicy): the route is proven again before the spec's values hold.
    RouteChanged,
}

/// Why the configuration is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// `failureThreshold` consecutive probes failed.
    ProbesFailed,
    /// The Service has no ready endpoint.
    NoReadyEndpoints,
    /// The Initializer went out of the path on purpose ([`Input::Aside`]).
    Aside(Aside),
}

impl Cause {
    /// Whether the Initializer went out of the path on purpose: no outage, nothing missed.
    pub fn is_on_purpose(self) -> bool {
        matches!(self, Cause::Aside(_))
    }

    /// Condition and Event reason for this cause.
    pub fn reason(self) -> &'static str {
        match self {
            Cause::ProbesFailed => "ProbesFailed",
            Cause::NoReadyEndpoints => "NoReadyEndpoints",
            Cause::Aside(Aside::Suspended) => "Suspended",
            Cause::Aside(Aside::InApiServer) => "InApiServer",
        }
    }
}

/// What the caller must do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Leave the configuration as it is.
    None,
    /// Create the proving configuration (failing open, with the route check) and check the
    /// route.
    Prove,
    /// Create or update the configuration with the spec's values.
    Register,
    /// Patch the configuration to fail open quickly (`failurePolicy: Ignore`, short timeout).
    /// `since` is the failed probe.
    Degrade {
        /// When the trouble started.
        since: Instant,
    },
    /// Replace the registered configuration with the proving one ([`Input::RouteChanged`]):
    /// it fails open until the API server is seen reaching the initializer again.
    Reprove,
    /// Patch the degraded configuration back to the spec's values.
    Restore,
    /// Delete the configuration. `since` is when the trouble was first seen (first failed probe
    /// or the endpoints going to zero), for the time-to-deregister metric.
    Deregister {
        /// What took the initializer out of the path (reported in the Event and metric).
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
    before_register: State,
    ok_streak: u32,
    fail_streak: u32,
    endpoints: Option<u32>,
    /// Whether the API server was seen reaching the initializer since its endpoints were last
    /// counted at zero.
    routed: bool,
    available: bool,
    /// Why it is out of the path on purpose, while it is.
    aside: Option<Aside>,
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
    /// The hold-down in force after the last time the initializer left the path.
    pub hold_down: Option<Duration>,
}

impl Machine {
    /// A machine for a new Initializer: waiting, nothing known.
    pub fn new(config: HealthConfig) -> Self {
        Self {
            config,
            state: State::Waiting,
            before_register: State::Waiting,
            ok_streak: 0,
            fail_streak: 0,
            endpoints: None,
            routed: false,
            available: false,
            aside: None,
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

    /// The thresholds and timings in force.
    pub fn config(&self) -> HealthConfig {
        self.config
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// True when the configuration should exist now (with the spec's values or degraded).
    pub fn is_registered(&self) -> bool {
        matches!(self.state, State::Registered | State::Degraded)
    }

    /// True while the proving configuration should exist: ready to register, the route not
    /// proven yet ([`Action::Prove`]), or degraded because the route changed under a
    /// registration ([`Action::Reprove`]), ready or not.
    pub fn is_proving(&self, now: Instant) -> bool {
        if !self.config.prove_route || self.routed {
            return false;
        }
        match self.state {
            State::Waiting | State::Unresponsive => self.ready(now),
            State::Degraded => true,
            State::Registered | State::Aside => false,
        }
    }

    /// True while the initializer is out of the path after trouble: degraded, or removed and
    /// not yet registered again.
    pub fn in_outage(&self) -> bool {
        matches!(self.state, State::Degraded | State::Unresponsive)
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
    /// that failures remove it; `degraded` when it was found degraded (it is then restored
    /// after enough good probes). Nothing happens while it is aside.
    pub fn adopt_registered(&mut self, degraded: bool, now: Instant) {
        if self.aside.is_none() {
            // Whoever registered it proved its route; a change since is told by
            // [`Input::RouteChanged`].
            self.routed = true;
            self.state = if degraded {
                State::Degraded
            } else {
                State::Registered
            };
            self.registered_at = Some(now);
            self.fail_streak = 0;
            if degraded {
                self.ok_streak = 0;
                self.trouble_since.get_or_insert(now);
            }
        }
    }

    /// Adopts an outage found in progress (after an operator restart the configuration is
    /// absent and the status said Unresponsive): the initializer stays out of the path, with
    /// the base hold-down, until enough good probes come.
    pub fn adopt_unresponsive(&mut self, now: Instant) {
        if self.aside.is_none() && self.state == State::Waiting {
            self.state = State::Unresponsive;
            self.hold_down = Some(self.config.base_hold_down);
            self.hold_until = Some(now + self.config.base_hold_down);
        }
    }

    /// Undoes a [`Action::Register`] the caller could not carry out; the next good probe retries.
    pub fn registration_failed(&mut self) {
        if self.state == State::Registered {
            self.state = self.before_register;
            self.registered_at = None;
        }
    }

    /// How long until the next probe is due, as seen at `now`: at once after a failure (the
    /// caller keeps a small spacing), [`HealthConfig::fast_interval`] while waiting to register
    /// or restore (slower while a long hold-down runs, so that the last
    /// `successThreshold` fast probes end with it), one period when registered and healthy, and
    /// one period while there is nothing to probe (no ready endpoint, aside).
    pub fn next_probe_in(&self, now: Instant) -> Duration {
        let c = &self.config;
        match self.state {
            State::Registered | State::Aside => c.period,
            State::Degraded | State::Unresponsive if self.fail_streak > 0 => {
                if self.state == State::Unresponsive && self.endpoints == Some(0) {
                    c.period
                } else {
                    Duration::ZERO
                }
            }
            State::Waiting | State::Degraded | State::Unresponsive => {
                if self.endpoints == Some(0) {
                    return c.period;
                }
                let lead = c.fast_interval * c.success_threshold;
                match self.hold_until {
                    Some(until) if until > now + lead => {
                        (until - now - lead).clamp(c.fast_interval, c.period)
                    }
                    _ => c.fast_interval,
                }
            }
        }
    }

    /// Feeds one input observed at `now` and returns what to do.
    pub fn observe(&mut self, input: Input, now: Instant) -> Action {
        match input {
            Input::ProbeSucceeded => {
                self.ok_streak = self.ok_streak.saturating_add(1);
                self.fail_streak = 0;
                self.try_return(now)
            }
            Input::ProbeFailed => self.probe_failed(now),
            Input::Endpoints(ready) => self.endpoints_counted(ready, now),
            Input::Available(available) => {
                self.available = available;
                self.try_return(now)
            }
            Input::Aside(Some(aside)) => self.set_aside(aside, now),
            Input::Routed => {
                self.routed = true;
                self.try_return(now)
            }
            Input::RouteChanged => self.route_changed(now),
            Input::Aside(None) => {
                if self.aside.is_some() {
                    self.aside = None;
                    self.state = State::Waiting;
                    self.ok_streak = 0;
                    self.trouble_since = None;
                }
                Action::None
            }
        }
    }

    /// A probe failed: degraded at the first, removed at `failureThreshold` in a row.
    fn probe_failed(&mut self, now: Instant) -> Action {
        let was_proving = self.is_proving(now);
        self.fail_streak = self.fail_streak.saturating_add(1);
        self.ok_streak = 0;
        match self.state {
            State::Registered => {
                self.trouble_since = Some(now);
                self.leave(now);
                if self.fail_streak >= self.config.failure_threshold {
                    self.deregister(Cause::ProbesFailed, now)
                } else {
                    self.state = State::Degraded;
                    Action::Degrade { since: now }
                }
            }
            State::Degraded if self.fail_streak >= self.config.failure_threshold => {
                self.deregister(Cause::ProbesFailed, now)
            }
            _ => self.return_failed(was_proving, now),
        }
    }

    /// A return that fails while its route is being proven failed soon after coming back, as a
    /// registration that fails at once does: it leaves with a doubled hold-down, so a flapping
    /// initializer's proving registrations thin out instead of coming back at every thaw.
    fn return_failed(&mut self, was_proving: bool, now: Instant) -> Action {
        if was_proving {
            self.leave(now);
        }
        Action::None
    }

    /// The Service has `ready` ready endpoints: at zero the configuration goes at once.
    fn endpoints_counted(&mut self, ready: u32, now: Instant) -> Action {
        let was_proving = self.is_proving(now);
        self.endpoints = Some(ready);
        if ready > 0 {
            return self.try_return(now);
        }
        self.routed = false;
        self.ok_streak = 0;
        match self.state {
            State::Registered => {
                // The endpoints going to zero is the trouble itself.
                self.trouble_since = Some(now);
                self.leave(now);
                self.deregister(Cause::NoReadyEndpoints, now)
            }
            State::Degraded => self.deregister(Cause::NoReadyEndpoints, now),
            _ => self.return_failed(was_proving, now),
        }
    }

    /// What admits the API server to the pods changes: the route is not proven any more, and a
    /// registration fails open until it is ([`Action::Reprove`]). No hold-down: nothing failed.
    /// An `InitializerConfiguration`'s route is its canary's, which every probe takes.
    fn route_changed(&mut self, now: Instant) -> Action {
        if !self.config.prove_route {
            return Action::None;
        }
        self.routed = false;
        if self.state != State::Registered {
            return Action::None;
        }
        self.state = State::Degraded;
        self.trouble_since = Some(now);
        Action::Reprove
    }

    /// Out of the path on purpose: a registered configuration goes, with `aside` as its cause.
    fn set_aside(&mut self, aside: Aside, now: Instant) -> Action {
        self.aside = Some(aside);
        let was = self.state;
        self.state = State::Aside;
        self.ok_streak = 0;
        if !matches!(was, State::Registered | State::Degraded) {
            return Action::None;
        }
        self.registered_at = None;
        self.trouble_since = None;
        Action::Deregister {
            cause: Cause::Aside(aside),
            since: now,
        }
    }

    /// Whether the initializer may come back into the path: the workload is available, an
    /// endpoint is ready, `successThreshold` good probes came in a row and the hold-down is over.
    fn ready(&self, now: Instant) -> bool {
        self.aside.is_none()
            && self.available
            && self.endpoints != Some(0)
            && self.ok_streak >= self.config.success_threshold
            && self.hold_until.is_none_or(|until| now >= until)
    }

    /// Back into the path once [`Machine::ready`]: register (from waiting or unresponsive) or
    /// restore (from degraded). Registering first proves the route ([`Action::Prove`] until
    /// [`Input::Routed`]), so that the Service routes to the endpoints where the API server runs;
    /// a degraded configuration kept its endpoints, and is restored at once, unless its route
    /// changed ([`Input::RouteChanged`]): then it is proven first too.
    fn try_return(&mut self, now: Instant) -> Action {
        let ready = self.ready(now);
        let routed = self.routed || !self.config.prove_route;
        match self.state {
            State::Waiting | State::Unresponsive | State::Degraded if ready && !routed => {
                Action::Prove
            }
            State::Waiting | State::Unresponsive if ready => {
                self.before_register = self.state;
                self.state = State::Registered;
                self.registered_at = Some(now);
                self.trouble_since = None;
                Action::Register
            }
            State::Degraded if ready => {
                self.state = State::Registered;
                self.registered_at = Some(now);
                self.trouble_since = None;
                Action::Restore
            }
            _ => Action::None,
        }
    }

    /// Leaving the path from a healthy registration: the hold-down for this outage, counted
    /// from now, doubled when the initializer fails again soon after it came back.
    fn leave(&mut self, now: Instant) {
        let stable = self
            .registered_at
            .is_some_and(|at| now.saturating_duration_since(at) >= self.config.stable_after);
        let hold = match self.hold_down {
            Some(previous) if !stable => (previous * 2).min(self.config.max_hold_down),
            _ => self.config.base_hold_down,
        };
        self.hold_down = Some(hold);
        self.hold_until = Some(now + hold);
        self.registered_at = None;
    }

    fn deregister(&mut self, cause: Cause, now: Instant) -> Action {
        self.state = State::Unresponsive;
        self.registered_at = None;
        self.ok_streak = 0;
        let since = self.trouble_since.take().unwrap_or(now);
        Action::Deregister { cause, since }
    }
}

#[cfg(test)]
mod tests;
