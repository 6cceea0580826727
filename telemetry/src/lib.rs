//! initializer-telemetry: the one tracing setup every binary of the workspace shares.
//!
//! The operator, the node agent, the sandbox, initializers built on the SDK and the test
//! harnesses all log through `tracing-subscriber`'s formatter with an `EnvFilter`; they differ
//! only in the variable that filters (`RUST_LOG`, `E2E_LOG`, ...), the filter used when it is
//! unset, JSON or text, and stdout or stderr. [`Logging`] names those four choices; it depends on
//! nothing but `tracing-subscriber`, which every one of those crates already used.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// How a binary logs. [`Logging::new`] is `RUST_LOG`, default `info`, text, stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logging {
    var: &'static str,
    default: &'static str,
    json: bool,
    stderr: bool,
}

impl Default for Logging {
    fn default() -> Self {
        Self::new()
    }
}

impl Logging {
    /// `RUST_LOG` filters (default `info`), text lines on stdout.
    pub fn new() -> Self {
        Self {
            var: "RUST_LOG",
            default: "info",
            json: false,
            stderr: false,
        }
    }

    /// Filters with the directives of environment variable `var`, or `default` when it is unset
    /// or does not parse.
    pub fn filter(mut self, var: &'static str, default: &'static str) -> Self {
        self.var = var;
        self.default = default;
        self
    }

    /// JSON lines instead of text when `json` is true.
    pub fn json(mut self, json: bool) -> Self {
        self.json = json;
        self
    }

    /// Writes to stderr instead of stdout (tools whose stdout is their output).
    pub fn stderr(mut self) -> Self {
        self.stderr = true;
        self
    }

    /// Installs the global subscriber. Returns false, and changes nothing, when one is already
    /// installed (a test harness or an earlier call wins).
    pub fn init(self) -> bool {
        let value = std::env::var(self.var).ok();
        let filter = filter_from(value.as_deref(), self.default);
        let writer = if self.stderr {
            BoxMakeWriter::new(std::io::stderr)
        } else {
            BoxMakeWriter::new(std::io::stdout)
        };
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer);
        if self.json {
            builder.json().try_init().is_ok()
        } else {
            builder.try_init().is_ok()
        }
    }
}

/// The setup of a service (the operator, an initializer): `RUST_LOG` (default `info`) on stdout,
/// JSON lines when `json`. Returns false when a subscriber was installed already.
pub fn init_tracing(json: bool) -> bool {
    Logging::new().json(json).init()
}

/// The filter for a variable's `value`: its directives when set and valid, else `default`.
fn filter_from(value: Option<&str>, default: &str) -> EnvFilter {
    value
        .and_then(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new(default))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_variable_wins_over_the_default() {
        assert_eq!(filter_from(Some("debug"), "info").to_string(), "debug");
        assert_eq!(
            filter_from(Some("warn,kube_client=off"), "info").to_string(),
            "kube_client=off,warn"
        );
    }

    #[test]
    fn an_unset_or_unparsable_variable_gives_the_default() {
        assert_eq!(filter_from(None, "off").to_string(), "off");
        assert_eq!(filter_from(Some("a=b=c"), "info").to_string(), "info");
    }

    #[test]
    fn the_builder_records_each_choice() {
        let logging = Logging::new().filter("E2E_LOG", "off").json(true).stderr();
        assert_eq!(
            logging,
            Logging {
                var: "E2E_LOG",
                default: "off",
                json: true,
                stderr: true
            }
        );
        assert_eq!(Logging::default(), Logging::new());
    }

    #[test]
    fn only_the_first_init_installs_a_subscriber() {
        assert!(Logging::new().filter("TELEMETRY_TEST_LOG", "off").init());
        assert!(!init_tracing(true));
        tracing::info!("still works after a refused second init");
    }
}
