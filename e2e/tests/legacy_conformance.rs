//! The sandbox's legacy mode answers to the real thing: one set of Initializers tests
//! (Kubernetes 1.7–1.13, `admissionregistration.k8s.io/v1alpha1`), run against the sandbox
//! started with `legacy_initializers` and against a real kube-apiserver v1.13.0, the last
//! release that had them (`initializer_controlplane::LegacyApiServer`,
//! `tools/legacy-apiserver/`).
//!
//! Every body is an `async fn(&Target) -> anyhow::Result<()>` in a namespace of its own. The
//! runner runs each body on a fresh sandbox in legacy mode, then starts ONE 1.13 API server and
//! runs each body there, printing `test NAME (sandbox) ... ok` and `test NAME (1.13) ... ok`
//! and a libtest-style summary. The SDK bodies run the real `sidecar-initializer` and
//! `secret-guard-initializer` binaries in controller mode against each target.
//!
//! `cargo build -p sidecar-initializer -p secret-guard-initializer && cargo test -p initializer-e2e --test legacy_conformance`;
//! `E2E_LEGACY_CONFORMANCE=sandbox` or `=real` runs one backend; filters, `--exact`, `--skip`
//! and `--list` work as with any test binary. The real backend needs
//! `target/tools/kube-apiserver-1.13` (`tools/legacy-apiserver/build.sh`, built on first use)
//! and the control plane's etcd (`make controlplane`); when it cannot start, every body fails
//! with its error. No root and no network namespace: both processes listen on loopback.
//!
//! A body that states what only the real server does (authorization: the `initialize` verb) is
//! reported `ignored` on the sandbox with the reason; it is a difference, not a pass.
//!
//! This runner follows `e2e/tests/conformance/main.rs` (same output, same selection); its
//! `Target` is a small copy of that suite's rather than a shared module, because that one is
//! bound to the 1.35 control plane (etcd compaction inside its network namespace).

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

use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::FutureExt;
use futures::future::BoxFuture;
use initializer_controlplane::{LegacyApiServer, LegacyConfig};
use initializer_e2e::paths;
use initializer_e2e::runner::{Args, Scenario};
use initializer_sandbox::{Sandbox, SandboxConfig};
use target::{Backend, Target};

/// A body: Initializers behaviour stated against a target.
type Run = for<'a> fn(&'a Target) -> BoxFuture<'a, anyhow::Result<()>>;

/// One named body.
struct Body {
    name: &'static str,
    run: Run,
    /// Why the sandbox cannot run it (a difference the sandbox states), when it cannot.
    real_only: Option<&'static str>,
}

macro_rules! body {
    ($module:ident :: $name:ident) => {
        Body {
            name: stringify!($name),
            run: |t| $module::$name(t).boxed(),
            real_only: None,
        }
    };
    ($module:ident :: $name:ident, real_only = $why:literal) => {
        Body {
            name: stringify!($name),
            run: |t| $module::$name(t).boxed(),
            real_only: Some($why),
        }
    };
}

const BODIES: &[Body] = &[
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

/// The longest one body may run.
const BODY_TIMEOUT: Duration = Duration::from_secs(120);

/// Args::selects works on scenarios; a body is selected by the same rules.
fn as_scenario(body: &Body) -> Scenario {
    Scenario::new(body.name, |_| futures::future::ready(Ok(())).boxed())
}

fn backends() -> anyhow::Result<Vec<Backend>> {
    match std::env::var("E2E_LEGACY_CONFORMANCE").as_deref() {
        Err(_) | Ok("") | Ok("both") => Ok(vec![Backend::Sandbox, Backend::Real]),
        Ok("sandbox") => Ok(vec![Backend::Sandbox]),
        Ok("real") => Ok(vec![Backend::Real]),
        Ok(other) => {
            anyhow::bail!("E2E_LEGACY_CONFORMANCE={other}: expected sandbox, real or both")
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse(std::env::args().skip(1));
    let selected: Vec<&Body> = BODIES
        .iter()
        .filter(|body| args.selects(&as_scenario(body)))
        .collect();
    let backends = match backends() {
        Ok(b) => b,
        Err(err) => {
            eprintln!("legacy conformance: {err}");
            return ExitCode::FAILURE;
        }
    };
    if args.list {
        for body in &selected {
            println!("{}: test", body.name);
        }
        return ExitCode::SUCCESS;
    }
    initializer_test_support::init_test_tracing("E2E_LOG");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("legacy conformance: failed to start the tokio runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(&selected, &backends))
}

/// One result line's outcome.
enum Outcome {
    Passed,
    Failed(String),
    Ignored,
}

async fn run(selected: &[&Body], backends: &[Backend]) -> ExitCode {
    let started = Instant::now();
    let total = selected.len() * backends.len();
    println!(
        "\nrunning {total} test{}",
        if total == 1 { "" } else { "s" }
    );
    let mut outcomes: Vec<(String, Outcome)> = Vec::new();
    for &backend in backends {
        if selected.is_empty() {
            break;
        }
        match backend {
            Backend::Sandbox => run_on_sandboxes(selected, &mut outcomes).await,
            Backend::Real => run_on_real(selected, &mut outcomes).await,
        }
    }
    let failed: Vec<(&String, &String)> = outcomes
        .iter()
        .filter_map(|(name, o)| match o {
            Outcome::Failed(message) => Some((name, message)),
            _ => None,
        })
        .collect();
    let ignored = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Ignored))
        .count();
    if !failed.is_empty() {
        println!("\nfailures:");
        for (name, message) in &failed {
            println!("\n---- {name} ----\n{message}");
        }
        println!("\nfailures:");
        for (name, _) in &failed {
            println!("    {name}");
        }
    }
    let passed = outcomes.len() - failed.len() - ignored;
    println!(
        "\ntest result: {}. {passed} passed; {} failed; {ignored} ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len(),
        (BODIES.len() - selected.len()) * backends.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}

fn report(
    body: &Body,
    backend: Backend,
    result: Result<(), String>,
    outcomes: &mut Vec<(String, Outcome)>,
) {
    let name = format!("{} ({})", body.name, backend.label());
    let outcome = match result {
        Ok(()) => {
            println!("test {name} ... ok");
            Outcome::Passed
        }
        Err(message) => {
            println!("test {name} ... FAILED");
            eprintln!("---- {name} ----\n{message}\n");
            Outcome::Failed(message)
        }
    };
    outcomes.push((name, outcome));
}

/// Each body on a sandbox of its own, in legacy mode, without workload controllers (the 1.13
/// server has no controller manager either).
async fn run_on_sandboxes(selected: &[&Body], outcomes: &mut Vec<(String, Outcome)>) {
    for body in selected {
        if let Some(why) = body.real_only {
            let name = format!("{} ({})", body.name, Backend::Sandbox.label());
            println!("test {name} ... ignored, {why}");
            outcomes.push((name, Outcome::Ignored));
            continue;
        }
        let result = on_fresh_sandbox(body).await.map_err(|e| format!("{e:#}"));
        report(body, Backend::Sandbox, result.and_then(|r| r), outcomes);
    }
}

async fn on_fresh_sandbox(body: &Body) -> anyhow::Result<Result<(), String>> {
    let dir = tempfile::Builder::new()
        .prefix("initializer-legacy-conformance-sandbox")
        .tempdir()
        .context("failed to create the sandbox's state directory")?;
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.workloads = false;
    config.legacy_initializers = true;
    let handle = Sandbox::start(config)
        .await
        .context("failed to start the sandbox in legacy mode")?;
    let result = run_body(
        body,
        Backend::Sandbox,
        handle.client(),
        None,
        handle.kubeconfig_path(),
    )
    .await;
    handle.shutdown().await;
    Ok(result)
}

/// Every body on one kube-apiserver 1.13; when it cannot start, every body fails with why.
async fn run_on_real(selected: &[&Body], outcomes: &mut Vec<(String, Outcome)>) {
    let (server, _state_dir) = match start_real().await {
        Ok(state) => state,
        Err(err) => {
            let message = format!("kube-apiserver 1.13 did not start: {err:#}");
            for body in selected {
                report(body, Backend::Real, Err(message.clone()), outcomes);
            }
            return;
        }
    };
    for body in selected {
        let result = match server.check() {
            Err(err) => Err(format!("kube-apiserver 1.13 is down: {err}")),
            Ok(()) => {
                run_body(
                    body,
                    Backend::Real,
                    server.client(),
                    Some(server.unprivileged_client()),
                    server.kubeconfig_path(),
                )
                .await
            }
        };
        report(body, Backend::Real, result, outcomes);
    }
    server.shutdown().await;
}

async fn start_real() -> anyhow::Result<(LegacyApiServer, tempfile::TempDir)> {
    let mut state_dir = tempfile::Builder::new()
        .prefix("initializer-legacy-conformance-real")
        .tempdir()
        .context("failed to create the API server's state directory")?;
    if std::env::var_os("E2E_KEEP_STATE").is_some_and(|v| v == "1") {
        state_dir.disable_cleanup(true);
        eprintln!(
            "legacy conformance: keeping the state directory {}",
            state_dir.path().display()
        );
    }
    let mut config = LegacyConfig::new(state_dir.path().join("server"));
    config.target_dir = paths::target_dir();
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
    body: &Body,
    backend: Backend,
    client: kube::Client,
    unprivileged: Option<kube::Client>,
    kubeconfig: &std::path::Path,
) -> Result<(), String> {
    let target = Target::prepare(backend, client, unprivileged, kubeconfig, body.name)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let run = AssertUnwindSafe((body.run)(&target)).catch_unwind();
    let result = match tokio::time::timeout(BODY_TIMEOUT, run).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(err))) => Err(format!("{err:#}")),
        Ok(Err(panic)) => Err(panic_message(panic)),
        Err(_) => Err(format!("the body took over {}s", BODY_TIMEOUT.as_secs())),
    };
    for warning in target.cleanup().await {
        eprintln!("legacy conformance: cleanup after {}: {warning}", body.name);
    }
    result
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        format!("panicked: {message}")
    } else if let Some(message) = payload.downcast_ref::<String>() {
        format!("panicked: {message}")
    } else {
        "panicked".to_string()
    }
}
