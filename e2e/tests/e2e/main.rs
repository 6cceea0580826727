//! The end-to-end suite: the safety story, scenario by scenario, on the sandbox (default) or a
//! kind cluster (`E2E_CLUSTER=kind`).
//!
//! Run it with `make e2e` (builds every binary first). One process starts one backend, installs
//! the operator from the bundle, runs the scenarios in this order, each in fresh namespaces and
//! cleaned up afterwards, and prints the timings table at the end. Filters work as with any
//! test binary: `cargo test -p initializer-e2e --test e2e -- hung`.

mod common;
mod failure;
mod injection;
mod lifecycle;
mod registration;

use std::process::ExitCode;

use futures::FutureExt;
use initializer_e2e::runner::{self, Scenario};

/// A scenario named after its function; `ignore = "why"` when it cannot pass yet.
macro_rules! scenario {
    ($module:ident :: $name:ident) => {
        Scenario::new(stringify!($name), |ctx| $module::$name(ctx).boxed())
    };
    ($module:ident :: $name:ident, ignore = $reason:expr) => {
        Scenario::ignored(stringify!($name), $reason, |ctx| {
            $module::$name(ctx).boxed()
        })
    };
}

const SCENARIOS: &[Scenario] = &[
    scenario!(registration::initializer_is_registered_only_after_its_pods_are_ready),
    scenario!(injection::tutorial_sidecar_is_injected_only_where_asked),
    scenario!(injection::secret_guard_denial_reaches_the_client),
    scenario!(injection::proxy_sidecar_goes_to_pods_exposing_port_80),
    scenario!(injection::test_certificates_go_to_pods_in_test_namespaces),
    scenario!(registration::own_pods_and_system_namespaces_are_never_intercepted),
    scenario!(failure::hung_initializer_is_deregistered_within_budget),
    scenario!(failure::crashed_initializer_is_deregistered_by_its_endpoints),
    scenario!(failure::recovered_initializer_is_registered_again_without_a_storm),
    scenario!(lifecycle::deletion_removes_the_configuration_before_the_workload),
    scenario!(lifecycle::suspended_initializer_stays_deregistered_until_resumed),
    scenario!(lifecycle::bad_input_is_refused_and_registers_nothing),
    scenario!(lifecycle::operator_killed_mid_rollout_converges_without_duplicates_or_orphans),
];

fn main() -> ExitCode {
    runner::main(SCENARIOS)
}
