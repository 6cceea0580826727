//! initializer-test-support: what the workspace's tests share, in one place instead of a copy
//! per test directory.
//!
//! - [`pki`]: a test CA that issues serving certificates, a CA-plus-certificate pair, and a
//!   TLS acceptor for a test server.
//! - [`wait`]: polling with a deadline: [`wait::eventually`] (a bool), [`wait::wait_for`] (a value,
//!   panics naming what it waited for), [`wait::until`] (an error with the last observation).
//! - [`api`]: raw requests through a kube client and the code of an API error.
//! - [`latency`]: latencies measured one by one, and their percentiles.
//! - [`process`]: a child started behind `setpriv --pdeathsig`: when the signal is in place, and
//!   reaping it with a deadline.
//! - [`init_test_tracing`]: test logging through the workspace's one tracing setup.
//!
//! Only tests and the e2e harness (test tooling itself) depend on this crate: no shipped crate
//! may, outside `[dev-dependencies]`. Its helpers panic with a message where a test would
//! otherwise unwrap, so a failed fixture names what failed.

pub mod api;
pub mod latency;
pub mod pki;
pub mod process;
pub mod wait;

pub use latency::Latencies;
pub use pki::{TestCa, TestPki};
pub use wait::{eventually, wait_for, wait_until};

/// Installs test logging on stderr, filtered by the variable `var` (default `off`), unless a
/// subscriber is installed already. The harnesses use `E2E_LOG`.
pub fn init_test_tracing(var: &'static str) {
    initializer_telemetry::Logging::new()
        .filter(var, "off")
        .stderr()
        .init();
}
