//! The operator's one error type: a variant per step that can fail, with the policy that decides
//! whether a failure waits for a change to the Initializer or is retried with backoff.

use std::time::Duration;

/// Everything that can go wrong while reconciling, probing or electing a leader.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The stored Initializer has no name (never true of a real object).
    #[error("failed to read the initializer's name")]
    MissingName,

    /// Making or reading the certificates failed.
    #[error("failed to prepare TLS material: {0}")]
    Tls(String),

    /// Reading an object from the API server failed.
    #[error("failed to read {kind} {name}: {source}")]
    Get {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// Server-side apply of a desired object failed.
    #[error("failed to apply {kind} {name}: {source}")]
    Apply {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// Creating or updating the webhook configuration failed.
    #[error("failed to register webhook configuration {name}: {source}")]
    Register {
        /// Name of the configuration.
        name: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// Deleting the webhook configuration failed.
    #[error("failed to deregister webhook configuration {name}: {source}")]
    Deregister {
        /// Name of the configuration.
        name: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// The webhook configuration is still present after it was deleted; cleanup waits for it.
    #[error("failed to finish cleanup: webhook configuration {0} still exists")]
    CleanupPending(String),

    /// Writing the Initializer's status failed.
    #[error("failed to patch the status of initializer {name}: {source}")]
    Status {
        /// Name of the Initializer.
        name: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// Listing or deleting orphaned configurations failed.
    #[error("failed to remove orphaned configurations: {0}")]
    Orphans(#[source] Box<kube::Error>),

    /// Adding or removing the finalizer failed.
    #[error("failed to run the finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),

    /// Serializing a desired object failed.
    #[error("failed to serialize {what}: {reason}")]
    Serialize {
        /// What was being serialized.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },

    /// Acquiring or renewing the leader Lease failed.
    #[error("failed to hold the leader lease: {0}")]
    Lease(#[source] Box<kube::Error>),

    /// This replica does not hold the leader Lease (any more), so it may not write.
    #[error("failed to {action}: this replica no longer leads")]
    NotLeading {
        /// What was refused.
        action: String,
    },

    /// Supervision of the Initializer stopped (deleted, refused, or this replica stepped down)
    /// while a write was pending; the write is dropped.
    #[error("failed to {action}: supervision stopped")]
    SupervisionStopped {
        /// What was dropped.
        action: String,
    },

    /// An object the operator would create, change or delete exists and is not the one it made
    /// for this Initializer; it is left alone.
    #[error(
        "failed to take over {kind} {name}: it exists and was not created by the operator for this Initializer"
    )]
    NotOurs {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
    },

    /// An API call did not answer within its bound.
    #[error("failed to {what}: no answer within {after:?}")]
    TimedOut {
        /// What was being done.
        what: String,
        /// The bound.
        after: Duration,
    },

    /// Connecting to the API server failed.
    #[error("failed to connect to the API server: {0}")]
    Client(#[source] Box<kube::Error>),

    /// Serving the operator's own endpoints failed.
    #[error("failed to serve on {addr}: {source}")]
    Serve {
        /// The listen address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },

    /// A call of the `InitializerConfiguration` backend failed (discovery, a create with an
    /// explicit pending list, a release, the canary).
    #[error("failed to {what}: {source}")]
    Legacy {
        /// What was being done.
        what: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },

    /// A request could not be built (a name that does not fit in a URL).
    #[error("failed to build the request to {what}: {reason}")]
    BuildRequest {
        /// What the request was for.
        what: String,
        /// Why.
        reason: String,
    },

    /// A dry-run create of the in-force check got no answer.
    #[error("failed to check the admission policy in force in {namespace}: {source}")]
    InForceCheck {
        /// The canary namespace the create was made in.
        namespace: String,
        /// What the client said.
        #[source]
        source: Box<kube::Error>,
    },

    /// Deleting an object failed.
    #[error("failed to delete {kind} {name}: {source}")]
    Delete {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },
}

impl From<initializer_core::tls::TlsError> for Error {
    fn from(e: initializer_core::tls::TlsError) -> Self {
        Error::Tls(e.0)
    }
}

impl Error {
    /// A short, stable label for the `reconcile_errors_total` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::MissingName => "missing_name",
            Error::Tls(_) => "tls",
            Error::Get { .. } => "get",
            Error::Apply { .. } => "apply",
            Error::Register { .. } => "register",
            Error::Deregister { .. } => "deregister",
            Error::CleanupPending(_) => "cleanup_pending",
            Error::Status { .. } if self.is_stale_write() => "stale_status",
            Error::Status { .. } => "status",
            Error::Orphans(_) => "orphans",
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer",
            },
            Error::Serialize { .. } => "serialize",
            Error::Lease(_) => "lease",
            Error::NotLeading { .. } => "not_leading",
            Error::SupervisionStopped { .. } => "supervision_stopped",
            Error::NotOurs { .. } => "not_ours",
            Error::TimedOut { .. } => "timed_out",
            Error::Client(_) => "client",
            Error::Serve { .. } => "serve",
            Error::Delete { .. } => "delete",
            Error::InForceCheck { .. } => "in_force_check",
            Error::Legacy { .. } => "legacy",
            Error::BuildRequest { .. } => "build_request",
        }
    }

    /// True when retrying cannot help until the Initializer changes: the object itself is
    /// unusable, or the API server rejected what we built from it as invalid.
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::MissingName | Error::Serialize { .. } | Error::NotOurs { .. } => true,
            Error::Apply { source, .. } | Error::Register { source, .. } => {
                api_code(source).is_some_and(|code| code == 400 || code == 422)
            }
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.is_permanent(),
                kube::runtime::finalizer::Error::UnnamedObject => true,
                _ => false,
            },
            _ => false,
        }
    }

    /// True when an object the operator would create, change or delete belongs to someone
    /// else: it is left alone and the Initializer reports a `Conflict`.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::NotOurs { .. })
    }

    /// True when a status write was refused because the Initializer changed after the status
    /// was computed (409 Conflict on its resourceVersion): retried from the newer version.
    pub fn is_stale_write(&self) -> bool {
        match self {
            Error::Status { source, .. } => api_code(source) == Some(409),
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.is_stale_write(),
                _ => false,
            },
            _ => false,
        }
    }

    /// How long to wait before retrying a transient failure. Cleanup waiting for the API server
    /// to finish a deletion retries quickly; everything else backs off a little.
    pub fn retry_after(&self) -> Duration {
        match self {
            Error::CleanupPending(_) => Duration::from_millis(500),
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.retry_after(),
                _ => Duration::from_secs(5),
            },
            Error::Apply { source, .. } if api_code(source) == Some(409) => Duration::from_secs(1),
            _ if self.is_stale_write() => Duration::from_secs(1),
            _ => Duration::from_secs(5),
        }
    }
}

/// The HTTP status code of an API error, if the error came from the API server.
pub fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// True when the API server answered 404 Not Found.
pub fn is_not_found(err: &kube::Error) -> bool {
    api_code(err) == Some(404)
}

/// The operator's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: "test".into(),
            reason: "Test".into(),
            ..Default::default()
        }))
    }

    #[test]
    fn invalid_objects_wait_for_a_change_to_the_initializer() {
        let err = Error::Apply {
            kind: "Deployment",
            name: "x".into(),
            source: Box::new(api_error(422)),
        };
        assert!(err.is_permanent());
        assert_eq!(err.metric_label(), "apply");
    }

    #[test]
    fn conflicts_and_server_errors_are_retried() {
        for code in [409, 500, 503, 403] {
            let err = Error::Apply {
                kind: "Service",
                name: "x".into(),
                source: Box::new(api_error(code)),
            };
            assert!(!err.is_permanent(), "code {code} should be retried");
        }
    }

    #[test]
    fn a_status_refused_for_a_stale_version_is_retried_soon_from_the_newer_one() {
        let stale = Error::Status {
            name: "x".into(),
            source: Box::new(api_error(409)),
        };
        assert!(stale.is_stale_write());
        assert!(!stale.is_permanent());
        assert_eq!(stale.metric_label(), "stale_status");
        let wrapped = Error::Finalizer(Box::new(kube::runtime::finalizer::Error::ApplyFailed(
            stale,
        )));
        assert!(wrapped.is_stale_write());
        assert_eq!(wrapped.retry_after(), Duration::from_secs(1));
        let refused = Error::Status {
            name: "x".into(),
            source: Box::new(api_error(403)),
        };
        assert!(!refused.is_stale_write());
        assert_eq!(refused.metric_label(), "status");
        assert_eq!(refused.retry_after(), Duration::from_secs(5));
    }

    #[test]
    fn pending_cleanup_is_retried_quickly() {
        let err = Error::CleanupPending("cfg".into());
        assert!(!err.is_permanent());
        assert!(err.retry_after() < Duration::from_secs(1));
        let wrapped = Error::Finalizer(Box::new(kube::runtime::finalizer::Error::CleanupFailed(
            Error::CleanupPending("cfg".into()),
        )));
        assert!(wrapped.retry_after() < Duration::from_secs(1));
        assert_eq!(wrapped.metric_label(), "cleanup_pending");
    }

    #[test]
    fn finalizer_errors_take_the_policy_of_the_inner_error() {
        let inner = Error::Register {
            name: "cfg".into(),
            source: Box::new(api_error(400)),
        };
        let wrapped = Error::Finalizer(Box::new(kube::runtime::finalizer::Error::ApplyFailed(
            inner,
        )));
        assert!(wrapped.is_permanent());
        assert_eq!(wrapped.metric_label(), "register");
        let unnamed = Error::Finalizer(Box::new(kube::runtime::finalizer::Error::UnnamedObject));
        assert!(unnamed.is_permanent());
    }

    #[test]
    fn missing_names_are_permanent_and_lease_failures_are_not() {
        assert!(Error::MissingName.is_permanent());
        assert!(!Error::Lease(Box::new(api_error(500))).is_permanent());
        assert!(!Error::Tls("x".into()).is_permanent());
    }

    #[test]
    fn messages_say_what_failed() {
        let err = Error::Deregister {
            name: "cfg".into(),
            source: Box::new(api_error(500)),
        };
        assert!(
            err.to_string()
                .starts_with("failed to deregister webhook configuration cfg")
        );
    }
}
