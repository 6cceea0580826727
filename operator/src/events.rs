//! The reasons of the Events the operator publishes about an Initializer, in one place: they are
//! part of its interface (people alert on them, the book lists them in
//! `docs/src/reference/events.md`, a test holds the two together), and a reason spelled
//! differently at one call site would be a new one.

/// Why an Event about an Initializer was published.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// Its configuration is registered: the initializer is available and answering.
    Registered,
    /// A probe failed: the configuration fails open (`failurePolicy: Ignore`) until it answers.
    Degraded,
    /// The initializer answers again: the spec's failure policy and timeout are back.
    Restored,
    /// The NetworkPolicy in front of its pods changed: the configuration fails open until the
    /// API server is seen reaching the initializer through it.
    RouteChanged,
    /// The configuration is removed (failure, suspension, or deletion of the Initializer).
    Deregistered,
    /// A configuration that appeared while the initializer was out of the path, removed.
    StrayConfigurationRemoved,
    /// Suspended: `spec.suspend` is true or the break-glass annotation is present.
    Suspended,
    /// The fallback ValidatingAdmissionPolicy is in force while the initializer is out.
    FallbackInstalled,
    /// The fallback is removed: the initializer is back in the path.
    FallbackRemoved,
    /// The API server does not serve ValidatingAdmissionPolicy.
    FallbackUnsupported,
    /// Objects still pending on a removed legacy initializer were released.
    ReleasedPendingObjects,
    /// Objects in scope were created without the initializer during an outage.
    MissedInitializations,
    /// None were, during the last outage.
    NoMissedInitializations,
    /// The spec is refused (invalid, or not allowed here).
    Refused,
    /// A configuration or workload of the Initializer's name belongs to someone else.
    Conflict,
    /// A preset's injection moved into the API server (Normal), or back to the webhook
    /// (Warning, with why).
    EngineSwitched,
    /// The compiled policy and the webhook disagreed in the canary: the webhook stays, and
    /// the Event says what differed.
    EngineDisproved,
    /// The proof of the compiled policy could not finish; it is tried again.
    ProofFailed,
    /// `spec.engine: Policy`, and something keeps the webhook in force (the Event says what).
    PolicyUnavailable,
    /// Under `--network-policy=auto`, the NetworkPolicy in front of its pods was taken away: the
    /// API server's calls were not seen passing it within the route deadline.
    NetworkPolicyWithdrawn,
}

impl Reason {
    /// Every reason, for the tests that hold the documentation to them.
    pub const ALL: [Reason; 20] = [
        Reason::Registered,
        Reason::Degraded,
        Reason::Restored,
        Reason::RouteChanged,
        Reason::Deregistered,
        Reason::StrayConfigurationRemoved,
        Reason::Suspended,
        Reason::FallbackInstalled,
        Reason::FallbackRemoved,
        Reason::FallbackUnsupported,
        Reason::ReleasedPendingObjects,
        Reason::MissedInitializations,
        Reason::NoMissedInitializations,
        Reason::Refused,
        Reason::Conflict,
        Reason::EngineSwitched,
        Reason::EngineDisproved,
        Reason::ProofFailed,
        Reason::PolicyUnavailable,
        Reason::NetworkPolicyWithdrawn,
    ];

    /// The Event's `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Registered => "Registered",
            Reason::Degraded => "Degraded",
            Reason::Restored => "Restored",
            Reason::RouteChanged => "RouteChanged",
            Reason::Deregistered => "Deregistered",
            Reason::StrayConfigurationRemoved => "StrayConfigurationRemoved",
            Reason::Suspended => "Suspended",
            Reason::FallbackInstalled => "FallbackInstalled",
            Reason::FallbackRemoved => "FallbackRemoved",
            Reason::FallbackUnsupported => "FallbackUnsupported",
            Reason::ReleasedPendingObjects => "ReleasedPendingObjects",
            Reason::MissedInitializations => "MissedInitializations",
            Reason::NoMissedInitializations => "NoMissedInitializations",
            Reason::Refused => "Refused",
            Reason::Conflict => "Conflict",
            Reason::EngineSwitched => "EngineSwitched",
            Reason::EngineDisproved => "EngineDisproved",
            Reason::ProofFailed => "ProofFailed",
            Reason::PolicyUnavailable => "PolicyUnavailable",
            Reason::NetworkPolicyWithdrawn => "NetworkPolicyWithdrawn",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_spelled_once_and_as_its_variant() {
        let spelled: std::collections::BTreeSet<&str> =
            Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(spelled.len(), Reason::ALL.len());
        for reason in Reason::ALL {
            assert_eq!(format!("{reason:?}"), reason.as_str());
        }
    }

    /// The book's table of Events (`docs/src/reference/events.md`) names every reason once,
    /// and no other.
    #[test]
    fn the_book_lists_every_event_reason() {
        let page = include_str!("../../docs/src/reference/events.md");
        let start = page.find("| reason |").expect("the book's table of Events");
        let rows: Vec<&str> = page[start..]
            .lines()
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .collect();
        let named: std::collections::BTreeSet<&str> = rows
            .iter()
            .filter_map(|row| row.split('`').nth(1))
            .collect();
        let reasons: std::collections::BTreeSet<&str> =
            Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(named.len(), rows.len(), "a reason listed twice: {rows:#?}");
        assert_eq!(named, reasons, "docs/src/reference/events.md: {rows:#?}");
    }
}
