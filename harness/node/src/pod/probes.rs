//! What a probe result does to its container: the startup probe gates the others, readiness
//! sets `ready`, and a startup or liveness probe that fails too often restarts the container.
//! The worker runs the probes and carries out the action.

use k8s_openapi::api::core::v1::{Container, Probe};

/// Which probe a result is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProbeKind {
    Startup,
    Readiness,
    Liveness,
}

impl ProbeKind {
    /// The probes a container runs once it has started (past its startup probe, if any).
    pub(super) const AFTER_START: [Self; 2] = [Self::Readiness, Self::Liveness];

    /// This probe in `container`'s spec, if it sets one.
    pub(super) fn of(self, container: &Container) -> Option<&Probe> {
        match self {
            Self::Startup => container.startup_probe.as_ref(),
            Self::Readiness => container.readiness_probe.as_ref(),
            Self::Liveness => container.liveness_probe.as_ref(),
        }
    }

    /// Whether this probe stops after its first success (only the startup probe does).
    pub(super) fn ends_on_success(self) -> bool {
        self == Self::Startup
    }
}

/// What the worker does after one probe result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProbeAction {
    /// Nothing changes.
    Keep,
    /// The container's readiness becomes this.
    Ready(bool),
    /// The startup probe passed: the container has started; it is ready unless it has a
    /// readiness probe, which now runs with the liveness probe.
    Started,
    /// The container is stopped, to be restarted per its pod's restart policy.
    Restart,
}

/// The action for a `kind` probe result that `passed`, given the `verdict` its tracker returned
/// (`Some` when a threshold was crossed).
pub(super) fn action(kind: ProbeKind, passed: bool, verdict: Option<bool>) -> ProbeAction {
    match (kind, verdict) {
        (ProbeKind::Readiness, Some(ready)) => ProbeAction::Ready(ready),
        (ProbeKind::Startup, _) if passed => ProbeAction::Started,
        (ProbeKind::Startup | ProbeKind::Liveness, Some(false)) => ProbeAction::Restart,
        _ => ProbeAction::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_its_verdict_and_never_restarts() {
        use ProbeKind::Readiness;
        assert_eq!(
            action(Readiness, true, Some(true)),
            ProbeAction::Ready(true)
        );
        assert_eq!(
            action(Readiness, false, Some(false)),
            ProbeAction::Ready(false)
        );
        assert_eq!(action(Readiness, false, None), ProbeAction::Keep);
        assert_eq!(action(Readiness, true, None), ProbeAction::Keep);
    }

    #[test]
    fn the_first_startup_success_starts_the_container() {
        use ProbeKind::Startup;
        // Even below its success threshold: the kubelet's startup probe has a threshold of 1.
        assert_eq!(action(Startup, true, None), ProbeAction::Started);
        assert_eq!(action(Startup, true, Some(true)), ProbeAction::Started);
        assert_eq!(action(Startup, false, None), ProbeAction::Keep);
        assert_eq!(action(Startup, false, Some(false)), ProbeAction::Restart);
    }

    #[test]
    fn liveness_restarts_only_past_its_failure_threshold() {
        use ProbeKind::Liveness;
        assert_eq!(action(Liveness, false, None), ProbeAction::Keep);
        assert_eq!(action(Liveness, false, Some(false)), ProbeAction::Restart);
        assert_eq!(action(Liveness, true, Some(true)), ProbeAction::Keep);
    }

    #[test]
    fn each_kind_reads_its_own_probe_from_the_spec() {
        let probe = |seconds| Probe {
            period_seconds: Some(seconds),
            ..Probe::default()
        };
        let container = Container {
            startup_probe: Some(probe(1)),
            readiness_probe: Some(probe(2)),
            ..Container::default()
        };
        let period = |kind: ProbeKind| kind.of(&container).and_then(|p| p.period_seconds);
        assert_eq!(period(ProbeKind::Startup), Some(1));
        assert_eq!(period(ProbeKind::Readiness), Some(2));
        assert_eq!(period(ProbeKind::Liveness), None);
        assert!(ProbeKind::Startup.ends_on_success());
        assert!(!ProbeKind::Liveness.ends_on_success());
    }
}
