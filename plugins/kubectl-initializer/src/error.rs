//! The plugin's errors: each says what failed and, for bad input, what to do instead. Every
//! error is printed on stderr and ends the process with exit code 1, except
//! [`Error::Unknowable`] (3): `diff` did its work, but part of the answer cannot be known
//! offline.

/// Everything that can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or has no such context.
    #[error("failed to load the kubeconfig: {0}")]
    Kubeconfig(String),
    /// A call to the API server failed.
    #[error("failed to {step}: {source}")]
    Api {
        /// What was being done.
        step: String,
        /// The client's error.
        #[source]
        source: Box<kube::Error>,
    },
    /// No Initializer has this name.
    #[error(
        "failed to find Initializer {0:?}: no such Initializer (`kubectl get initializers` lists them)"
    )]
    InitializerNotFound(String),
    /// The object to explain does not exist.
    #[error("failed to find {0}: it does not exist")]
    ObjectNotFound(String),
    /// The server serves no resource of this name or kind.
    #[error("failed to find a resource type {0:?} on the server")]
    UnknownResource(String),
    /// The command line or an input file is wrong.
    #[error("failed to read the input: {0}")]
    BadInput(String),
    /// The probe got no good answer.
    #[error("failed to probe Initializer {name:?}: {why}")]
    ProbeFailed {
        /// The probed Initializer's name.
        name: String,
        /// What went wrong.
        why: String,
        /// The report, printed on stdout before the error (empty when no probe was sent).
        report: String,
    },
    /// `--wait` ran out of time.
    #[error("failed to see {0}")]
    Timeout(String),
    /// The result could not be rendered.
    #[error("failed to render the output: {0}")]
    Output(String),
    /// `diff`: the preset initializer's code and its compiled policy changed objects
    /// differently (a bug of one of them).
    #[error(
        "failed to agree: the preset initializer's code and its compiled policy change {count} object(s) differently (both changes are printed above)"
    )]
    EnginesDisagree {
        /// How many objects.
        count: usize,
        /// The report, printed on stdout before the error.
        report: String,
    },
    /// `diff`: an Initializer running its own code is called for some objects: what it changes
    /// cannot be known without running it.
    #[error(
        "failed to know the change to {count} object(s) offline: an Initializer with spec.image runs its own code"
    )]
    Unknowable {
        /// How many objects.
        count: usize,
        /// The report, printed on stdout before the error.
        report: String,
    },
}

impl Error {
    /// What to print on stdout before the error: a failed probe's report.
    pub fn stdout(&self) -> &str {
        match self {
            Error::ProbeFailed { report, .. }
            | Error::EnginesDisagree { report, .. }
            | Error::Unknowable { report, .. } => report,
            _ => "",
        }
    }

    /// The process's exit status: 3 when `diff` cannot know a change offline, else 1 (2 is
    /// clap's, for a malformed command line).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Unknowable { .. } => 3,
            _ => 1,
        }
    }

    /// An API error for `step`.
    pub fn api(step: impl Into<String>, source: kube::Error) -> Self {
        Error::Api {
            step: step.into(),
            source: Box::new(source),
        }
    }
}

/// Whether a client error is the API server's 404.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// A result whose error defaults to the plugin's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_probe_prints_its_report_and_other_errors_print_nothing_on_stdout() {
        let failed = Error::ProbeFailed {
            name: "s".into(),
            why: "HTTP 503".into(),
            report: "probe s: FAILED\n".into(),
        };
        assert_eq!(failed.stdout(), "probe s: FAILED\n");
        assert_eq!(
            failed.to_string(),
            "failed to probe Initializer \"s\": HTTP 503"
        );
        assert_eq!(failed.exit_code(), 1);
        let unknowable = Error::Unknowable {
            count: 1,
            report: "x: matched\n".into(),
        };
        assert_eq!(unknowable.exit_code(), 3);
        assert_eq!(unknowable.stdout(), "x: matched\n");
        let missing = Error::InitializerNotFound("x".into());
        assert_eq!(missing.stdout(), "");
        assert!(
            missing
                .to_string()
                .starts_with("failed to find Initializer \"x\"")
        );
    }
}
