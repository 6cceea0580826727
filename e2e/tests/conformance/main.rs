//! The sandbox answers to the real thing: one set of API-behaviour tests, run against the
//! embedded sandbox and against the real control plane (etcd, kube-apiserver and
//! kube-controller-manager from the Go modules, `initializer-controlplane`).
//!
//! Every body is an `async fn(&Target) -> anyhow::Result<()>` that states Kubernetes behaviour
//! through kube-rs or kubectl, in a namespace of its own and with unique names for anything
//! cluster-scoped. The runner runs each body on a fresh in-process sandbox, then starts ONE
//! control plane and runs each body there, printing `test NAME (sandbox) ... ok` and
//! `test NAME (real) ... ok` lines and a libtest-style summary.
//!
//! `make conformance`, or `cargo build -p initializer-node && cargo test -p initializer-e2e --test
//! conformance -- --include-ignored`. The real server needs root (a network namespace) and the
//! Go build (`make controlplane`), so its results are ignored unless asked for: a plain `cargo
//! test` runs the sandbox's and lists the real ones as ignored, `-- --ignored` runs the real
//! ones only, and `E2E_CONFORMANCE=sandbox`, `=real` or `=both` names the servers to run.
//! Filters, `--exact`, `--skip` and `--list` work as with any test binary. When the real server
//! cannot start, every body fails with its error.
//!
//! What only the sandbox has (faults, `view()`, snapshots, startup time, pod logs from the state
//! directory, bookmark interval) stays in `sandbox/tests/api_conformance.rs`. The differences this
//! suite found are listed in `sandbox/README.md`, "Differences from kube-apiserver".

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod apply;
mod crd;
mod deletion;
mod events;
mod kubectl;
mod objects;
mod support;
mod target;
mod watch;

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use initializer_controlplane::{ControlPlane, ControlPlaneConfig};
use initializer_e2e::body;
use initializer_e2e::conformance::{self, Body, Outcomes, Suite};
use initializer_e2e::paths;
use initializer_sandbox::SandboxHandle;
use target::{History, Target};

const SUITE: Suite<Target> = Suite {
    name: "conformance",
    env_var: "E2E_CONFORMANCE",
    real_label: "real",
    real_needs: "needs root and the real control plane: make conformance, or cargo test -p initializer-e2e --test conformance -- --include-ignored",
    bodies: BODIES,
    body_timeout: Duration::from_secs(180),
    sandbox_prefix: "initializer-conformance-sandbox",
    legacy_initializers: false,
};

const BODIES: &[Body<Target>] = &[
    body!(objects::default_namespaces_exist_with_their_name_label),
    body!(objects::kube_rs_discovery_finds_builtin_groups),
    body!(objects::created_objects_get_uid_timestamp_and_resource_version),
    body!(objects::generation_is_kept_only_by_kinds_that_define_it),
    body!(objects::generate_name_makes_unique_names),
    body!(objects::creating_an_existing_name_is_already_exists),
    body!(objects::getting_a_missing_object_is_not_found_with_a_status_body),
    body!(objects::creating_in_a_missing_namespace_is_not_found),
    body!(objects::replacing_with_a_stale_resource_version_is_a_conflict),
    body!(objects::label_selectors_support_every_operator),
    body!(objects::field_selectors_filter_by_name_and_namespace),
    body!(objects::lists_page_with_limit_and_continue),
    body!(objects::dry_run_writes_answer_like_real_ones_and_store_nothing),
    body!(objects::the_kubeconfig_file_gives_a_working_client),
    body!(objects::unknown_resources_and_methods_get_status_errors),
    body!(objects::methods_a_url_does_not_support_are_method_not_allowed),
    body!(objects::delete_collection_removes_only_selected_objects),
    body!(objects::malformed_bodies_are_bad_requests_and_change_nothing),
    body!(objects::metadata_only_lists_and_watches_serve_partial_object_metadata),
    body!(objects::table_output_has_the_kinds_columns),
    body!(objects::the_scale_subresource_reads_and_sets_replicas),
    body!(watch::watch_resumes_after_a_resource_version),
    body!(watch::watch_from_a_forgotten_version_is_gone),
    body!(watch::streaming_lists_end_their_initial_events_with_a_bookmark),
    body!(watch::watch_reports_objects_leaving_a_label_selector_as_deleted),
    body!(watch::streaming_list_watchers_get_initial_events_then_changes),
    body!(apply::merge_json_and_strategic_patches_apply),
    body!(apply::a_failing_json_patch_test_is_rejected_and_changes_nothing),
    body!(apply::server_side_apply_creates_and_removes_fields_the_manager_drops),
    body!(apply::server_side_apply_conflicts_unless_forced),
    body!(apply::server_side_apply_without_field_manager_is_invalid),
    body!(apply::server_side_apply_to_the_status_subresource_touches_only_status),
    body!(apply::server_side_apply_with_a_stale_resource_version_is_a_conflict_even_forced),
    body!(apply::generation_moves_on_spec_changes_only),
    body!(apply::status_subresource_writes_only_status_and_main_writes_ignore_status),
    body!(apply::reapplying_the_same_configuration_stores_nothing_new),
    body!(apply::apply_creating_a_namespace_behaves_like_a_create),
    body!(deletion::finalizers_hold_deletion_until_removed),
    body!(deletion::garbage_collection_deletes_dependents_of_a_deleted_owner),
    body!(deletion::foreground_deletion_removes_dependents_before_the_owner),
    body!(deletion::orphan_deletion_keeps_dependents_and_strips_their_owner_reference),
    body!(deletion::deleting_a_namespace_deletes_its_contents_then_itself),
    body!(crd::a_crd_serves_its_resource_with_defaults_status_and_established_condition),
    body!(crd::a_crd_schema_rejects_invalid_objects_as_invalid),
    body!(crd::cel_validation_refusals_are_invalid_with_the_rule_message),
    body!(crd::cel_transition_rules_compare_with_the_old_object),
    body!(crd::deleting_a_crd_removes_its_objects_and_its_endpoint),
    body!(crd::every_served_crd_version_reads_the_same_objects),
    body!(crd::strict_field_validation_refuses_unknown_fields_of_custom_resources),
    body!(crd::crd_tables_show_printer_columns),
    body!(events::events_written_through_either_api_are_read_through_both),
    body!(events::event_field_selectors_name_the_fields_of_the_version_asked_for),
    body!(events::kubectl_shows_events_of_both_apis_in_get_and_describe),
    body!(kubectl::kubectl_applies_server_side_and_gets_crd_printer_columns),
    body!(kubectl::kubectl_server_side_apply_reports_conflicts_and_forces_them),
    body!(kubectl::kubectl_creates_gets_and_deletes),
    body!(kubectl::kubectl_patches_with_merge_json_and_strategic_and_scales),
    body!(kubectl::kubectl_waits_for_a_condition_set_later),
    body!(kubectl::kubectl_create_dry_run_server_stores_nothing),
    body!(kubectl::kubectl_lists_api_resources_from_discovery),
];

fn main() -> ExitCode {
    conformance::main(&SUITE, on_sandbox, run_on_real)
}

/// One body on the fresh sandbox `conformance::main` started for it (they start in
/// milliseconds).
async fn on_sandbox(body: &Body<Target>, sandbox: &SandboxHandle) -> Result<(), String> {
    let history = History::Sandbox(sandbox.api());
    run_body(body, sandbox.client(), sandbox.kubeconfig_path(), history).await
}

/// Every body on one real control plane; when it cannot start, every body fails with why.
async fn run_on_real(selected: &[&'static Body<Target>], outcomes: &mut Outcomes) {
    let state = match start_real().await {
        Ok(state) => state,
        Err(err) => {
            let message = format!("the real control plane did not start: {err:#}");
            outcomes.fail_all(&SUITE, selected, &message);
            return;
        }
    };
    let (plane, _state_dir) = state;
    let run = async |body| {
        let history = History::Real {
            netns: plane.netns().to_string(),
        };
        run_body(body, plane.client(), plane.kubeconfig_path(), history).await
    };
    outcomes
        .run_each_on_real(
            &SUITE,
            selected,
            "the control plane is down",
            || plane.check(),
            run,
        )
        .await;
    plane.shutdown().await;
}

async fn start_real() -> anyhow::Result<(ControlPlane, tempfile::TempDir)> {
    let state_dir = SUITE.real_state_dir(
        "initializer-conformance-real",
        "the control plane's state directory",
        "the control plane's state directory",
    )?;
    let config = ControlPlaneConfig::new(
        state_dir.path().join("cluster"),
        paths::binary(initializer_e2e::real::NODE_BINARY)?,
    );
    let plane = ControlPlane::start(config)
        .await
        .context("failed to start the real control plane")?;
    eprintln!(
        "conformance: Kubernetes v{} ready after {:.2}s",
        plane.version(),
        plane.startup().cluster_ready.as_secs_f64()
    );
    Ok((plane, state_dir))
}

/// Prepares the body's namespace, runs the body (a panic or a timeout is a failure), then
/// cleans up whatever happened.
async fn run_body(
    body: &Body<Target>,
    client: kube::Client,
    kubeconfig: &Path,
    history: History,
) -> Result<(), String> {
    let target = Target::prepare(client, kubeconfig, history, body.name).await;
    SUITE.run_prepared(body, target).await
}
