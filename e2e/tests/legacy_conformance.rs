//! The sandbox's legacy mode answers to the real thing: one set of Initializers tests
//! (Kubernetes 1.7–1.13, `admissionregistration.k8s.io/v1alpha1`), run against the sandbox
//! started with `legacy_initializers` and against a real kube-apiserver v1.13.3, of the last
//! minor that had them (`initializer_controlplane::LegacyApiServer`,
//! `tools/legacy-apiserver/`).
//!
//! Every body is an `async fn(&Target) -> anyhow::Result<()>` in a namespace of its own. The
//! runner runs each body on a fresh sandbox in legacy mode, then starts ONE 1.13 API server and
//! runs each body there, printing `test NAME (sandbox) ... ok` and `test NAME (1.13) ... ok`
//! and a libtest-style summary. The SDK bodies run the real `sidecar-initializer` and
//! `secret-guard-initializer` binaries in controller mode against each target.
//!
//! `make legacy-conformance`, or `cargo build -p sidecar-initializer -p secret-guard-initializer
//! && cargo test -p initializer-e2e --test legacy_conformance -- --include-ignored`. The real
//! server needs `target/tools/kube-apiserver-1.13` (`tools/legacy-apiserver/build.sh`, built on
//! first use) and the control plane's etcd (`make controlplane`), both built from Go, so its
//! results are ignored unless asked for: a plain `cargo test` runs the sandbox's and lists the
//! 1.13 ones as ignored, `-- --ignored` runs the 1.13 ones only, and
//! `E2E_LEGACY_CONFORMANCE=sandbox`, `=real` or `=both` names the servers to run. Filters,
//! `--exact`, `--skip` and `--list` work as with any test binary. When the real server cannot
//! start, every body fails with its error. No root and no network namespace: both processes
//! listen on loopback.
//!
//! A body that states what only the real server does (authorization: the `initialize` verb) is
//! reported `ignored` on the sandbox with the reason; it is a difference, not a pass.
//!
//! The runner (output, selection, panics and timeouts) is `initializer_e2e::conformance`, the
//! one `e2e/tests/conformance/main.rs` uses; the `Target` is this suite's own, because that
//! suite's is bound to the 1.35 control plane (etcd compaction inside its network namespace).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "legacy_conformance/api.rs"]
mod api;
#[path = "legacy_conformance/more.rs"]
mod more;
#[path = "legacy_conformance/sdk.rs"]
mod sdk;
#[path = "legacy_conformance/support.rs"]
mod support;
#[path = "legacy_conformance/target.rs"]
mod target;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use initializer_controlplane::{LegacyApiServer, LegacyConfig};
use initializer_e2e::body;
use initializer_e2e::conformance::{self, Body, Outcomes, Server, Suite};
use initializer_sandbox::SandboxHandle;
use target::Target;

const SUITE: Suite<Target> = Suite {
    name: "legacy conformance",
    env_var: "E2E_LEGACY_CONFORMANCE",
    real_label: "1.13",
    real_needs: "needs kube-apiserver 1.13 and etcd built from Go: make legacy-conformance, or cargo test -p initializer-e2e --test legacy_conformance -- --include-ignored",
    bodies: BODIES,
    body_timeout: Duration::from_secs(120),
    sandbox_prefix: "initializer-legacy-conformance-sandbox",
    legacy_initializers: true,
};

const BODIES: &[Body<Target>] = &[
    body!(api::discovery_lists_initializer_configurations_in_v1alpha1),
    body!(api::configurations_append_names_in_name_order_and_and_their_rules),
    body!(api::an_explicit_initializers_field_is_kept_as_given),
    body!(api::an_include_uninitialized_create_is_accepted_at_once),
    body!(api::a_blocking_create_answers_created_once_another_client_removes_the_name_and_mutates),
    body!(api::a_create_that_times_out_is_a_timeout_and_the_object_stays),
    body!(api::lists_and_watches_hide_uninitialized_objects_and_get_shows_them),
    body!(api::an_unaware_watcher_sees_added_when_initialization_completes),
    body!(api::a_failure_result_fails_the_create_with_its_status_and_deletes_the_object),
    body!(api::an_uninitialized_object_can_be_deleted),
    body!(api::configuration_validation_refuses_with_the_eras_messages),
    body!(api::an_invalid_pending_name_is_refused_with_the_eras_message),
    body!(api::strategic_merge_and_json_patches_remove_a_pending_name),
    body!(more::without_a_timeout_parameter_a_create_waits_30_seconds),
    body!(more::deleting_the_object_a_create_waits_on_fails_the_create),
    body!(more::a_failure_result_without_a_code_fails_the_create_with_500),
    body!(more::a_result_set_at_creation_fails_the_create_and_the_object_stays),
    body!(more::a_stale_resource_version_is_a_conflict_on_an_uninitialized_object),
    body!(more::a_put_without_the_field_and_a_merge_patch_emptying_pending_initialize),
    body!(more::names_may_be_appended_and_removed_out_of_order),
    body!(more::an_initialized_object_cannot_get_initializers_back),
    body!(more::rule_validation_refuses_with_the_eras_messages),
    body!(more::a_failed_initialization_is_seen_only_by_aware_watchers),
    body!(more::deletecollection_removes_uninitialized_objects_too),
    body!(more::include_uninitialized_takes_the_eras_boolean_spellings),
    body!(more::rules_select_by_group_version_and_resource),
    body!(more::a_result_must_be_a_failure),
    body!(more::deleting_an_uninitialized_object_is_seen_only_by_aware_watchers),
    body!(more::a_status_write_without_the_field_initializes_a_deployment),
    body!(more::a_dry_run_create_waits_for_an_initialization_that_cannot_come),
    body!(
        api::setting_or_changing_pending_needs_the_initialize_verb,
        real_only =
            "the sandbox has no authorization: every client may set and change pending lists"
    ),
    body!(sdk::the_sidecar_controller_injects_into_a_blocked_deployment_create),
    body!(sdk::the_sidecar_controller_leaves_a_deployment_without_the_annotation_untouched),
    body!(sdk::the_sidecar_controller_initializes_creates_that_waited_before_it_started),
    body!(sdk::a_namespace_selector_on_the_namespace_name_works_where_namespaces_lack_the_label),
    body!(sdk::a_denial_in_controller_mode_fails_the_create_with_the_handlers_message),
];

fn main() -> ExitCode {
    conformance::main(&SUITE, on_sandbox, run_on_real)
}

/// One body on the fresh sandbox `conformance::main` started for it: in legacy mode, without
/// workload controllers (the 1.13 server has no controller manager either).
async fn on_sandbox(body: &Body<Target>, sandbox: &SandboxHandle) -> Result<(), String> {
    run_body(
        body,
        Server::Sandbox,
        sandbox.client(),
        None,
        sandbox.kubeconfig_path(),
    )
    .await
}

/// Every body on one kube-apiserver 1.13; when it cannot start, every body fails with why.
async fn run_on_real(selected: &[&'static Body<Target>], outcomes: &mut Outcomes) {
    let (server, _state_dir) = match start_real().await {
        Ok(state) => state,
        Err(err) => {
            let message = format!("kube-apiserver 1.13 did not start: {err:#}");
            outcomes.fail_all(&SUITE, selected, &message);
            return;
        }
    };
    let run = async |body| {
        run_body(
            body,
            Server::Real,
            server.client(),
            Some(server.unprivileged_client()),
            server.kubeconfig_path(),
        )
        .await
    };
    outcomes
        .run_each_on_real(
            &SUITE,
            selected,
            "kube-apiserver 1.13 is down",
            || server.check(),
            run,
        )
        .await;
    server.shutdown().await;
}

async fn start_real() -> anyhow::Result<(LegacyApiServer, tempfile::TempDir)> {
    let state_dir = SUITE.real_state_dir(
        "initializer-legacy-conformance-real",
        "the API server's state directory",
        "the state directory",
    )?;
    let config = LegacyConfig::new(state_dir.path().join("server"));
    let server = LegacyApiServer::start(config)
        .await
        .context("failed to start kube-apiserver 1.13")?;
    eprintln!(
        "legacy conformance: kube-apiserver v{} healthy after {:.2}s",
        initializer_controlplane::legacy::LEGACY_VERSION,
        server.healthy_after().as_secs_f64()
    );
    Ok((server, state_dir))
}

/// Prepares the body's namespace, runs the body (a panic or a timeout is a failure), then
/// cleans up whatever happened.
async fn run_body(
    body: &Body<Target>,
    server: Server,
    client: kube::Client,
    unprivileged: Option<kube::Client>,
    kubeconfig: &std::path::Path,
) -> Result<(), String> {
    let target = Target::prepare(
        SUITE.label(server),
        client,
        unprivileged,
        kubeconfig,
        body.name,
    )
    .await;
    SUITE.run_prepared(body, target).await
}
