//! `make run`: the safety story on the embedded sandbox, told step by step (`make run
//! CLUSTER=real`: the same story on the real control plane; `make run LEGACY=1`: the same
//! story on the Kubernetes 1.7 Initializers, on the sandbox in legacy mode, in `legacy.rs`).
//!
//! Starts the sandbox (no cluster needed), installs the operator from the bundle, applies the
//! tutorial's sidecar Initializer and nginx Deployment, shows the injected pod, freezes the
//! initializer and shows creates succeeding once the operator has degraded it (fail open at
//! once) and then deregistered it, then thaws it and shows it registered again. It then waits,
//! so you can look around with kubectl, until Ctrl-C, when it stops the sandbox and every
//! process it runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use initializer_crds::Initializer;
use initializer_e2e::env::Env;
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::load::{Attempt, CreateLoad};
use initializer_e2e::ops;
use initializer_e2e::target::TargetChoice;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::watch::{Change, Recordable, Recorder, Seen};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const INITIALIZER: &str = "sidecar";
const WORKLOAD_NS: &str = "initializer-demo";
const APPS_NS: &str = "demo";
const DEMO_LABEL: (&str, &str) = ("initializer.dev/demo", "true");
const FIELD_MANAGER: &str = "initializer-demo";
const TIMEOUT: Duration = Duration::from_secs(120);

mod legacy;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    initializer_telemetry::Logging::new()
        .filter("DEMO_LOG", "off")
        .stderr()
        .init();
    let choice = TargetChoice::from_env_with_legacy()?;
    let legacy = choice == TargetChoice::LegacySandbox;
    say(&format!(
        "starting the {} and installing the operator from the bundle ...",
        target_noun()
    ));
    let env = tokio::select! {
        env = Env::start_with(choice) => env?,
        _ = tokio::signal::ctrl_c() => {
            say("interrupted");
            return Ok(());
        }
    };
    let told = async {
        if legacy {
            legacy::story(&env).await
        } else {
            story(&env).await
        }
    };
    let outcome = tokio::select! {
        outcome = told => outcome,
        _ = tokio::signal::ctrl_c() => {
            say("interrupted");
            Ok(())
        }
    };
    if let Err(err) = &outcome {
        eprintln!("\ndemo failed: {err:#}");
        eprintln!(
            "the {} is still up for a look (Ctrl-C to stop it):",
            target_noun()
        );
        explain(&env);
        let _ = tokio::signal::ctrl_c().await;
    }
    say(&format!(
        "stopping the {} and every process it runs ...",
        target_noun()
    ));
    env.shutdown().await;
    say("stopped");
    outcome
}

async fn story(env: &Env) -> anyhow::Result<()> {
    let client = env.client();
    explain(env);

    step("1. the tutorial's sidecar initializer, as an Initializer");
    let target = prepare_namespaces(env, &client).await?;
    let initializer =
        fixtures::sidecar_initializer(INITIALIZER, WORKLOAD_NS, &target, Health::default())?;
    let configurations: Recorder<MutatingWebhookConfiguration> =
        Recorder::start(Api::all(client.clone()), watcher::Config::default(), |c| {
            ops::belongs_to(c, INITIALIZER)
        });
    let applied = apply_initializer(&client, &initializer).await?;
    say(&format!(
        "applied Initializer {INITIALIZER}: image {}, Deployments annotated {} in namespaces labelled {}={}",
        initializer.spec.image.clone().unwrap_or_default(),
        fixtures::SIDECAR_ANNOTATION,
        DEMO_LABEL.0,
        DEMO_LABEL.1
    ));
    let (configuration, registered) = ops::wait_registered(&client, INITIALIZER, TIMEOUT).await?;
    say(&format!(
        "registered {:.1}s later, once its pods were ready and answering: MutatingWebhookConfiguration {}",
        (registered - applied).as_secs_f64(),
        configuration.name_any()
    ));
    print_pods(&client, WORKLOAD_NS).await?;

    step("2. the tutorial's nginx Deployment gets the sidecar");
    let nginx = fixtures::nginx_deployment("nginx", true, 1)?;
    let created = apply_deployment(&client, &nginx)
        .await
        .context("failed to apply the nginx Deployment")?;
    say(&format!(
        "Deployment nginx created with containers {:?}",
        fixtures::template_containers(&created)
    ));
    wait_app_pod(&client, "nginx").await?;
    print_pods(&client, APPS_NS).await?;

    step("3. the initializer hangs: every pod frozen (it accepts connections and never answers)");
    let names = ops::workload_pod_names(&client, WORKLOAD_NS, INITIALIZER).await?;
    let load = web_load(&client)?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let frozen_at = Instant::now();
    for pod in &names {
        env.target.freeze_pod(WORKLOAD_NS, pod).await?;
    }
    say(&format!(
        "froze {}; creating an annotated Deployment every 0.5s",
        names.join(", ")
    ));
    let mut printed = 0;
    let mut degraded: Option<Instant> = None;
    let mut removed: Option<Instant> = None;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        note_first(
            &configurations,
            frozen_at,
            &mut degraded,
            |s| s.change == Change::Modified && ops::is_degraded(&s.object),
            "a probe failed: the operator degraded the configuration to failurePolicy Ignore, timeoutSeconds 1 (creates now pass after at most a second)",
        );
        note_first(
            &configurations,
            frozen_at,
            &mut removed,
            |s| s.change == Change::Deleted,
            "the operator removed the configuration: the initializer is out of the path (fail open)",
        );
        let attempts = print_from(load.attempts(), printed, frozen_at, out_of_the_path);
        printed = attempts.len();
        if settled_after(&attempts, removed) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    say("waiting for the creates still in flight ...");
    let attempts = print_from(load.stop().await, printed, frozen_at, out_of_the_path);
    let failed: Vec<_> = attempts.iter().filter(|a| !a.succeeded()).collect();
    let out_of_path = degraded.or(removed);
    let after = out_of_path.map_or(0, |at| failed.iter().filter(|a| a.started >= at).count());
    say(&format!(
        "{} of {} creates failed, {after} of them started after the operator took the initializer out of the path",
        failed.len(),
        attempts.len()
    ));
    if let Ok(initializer) = ops::initializer(&client, INITIALIZER).await {
        say(&format!(
            "Initializer status: {}",
            ops::describe(&initializer)
        ));
    }

    let again = format!(
        "after {} good probes in a row",
        initializer.spec.health_policy().success_threshold
    );
    recover(
        env,
        &names,
        &configurations,
        "the configuration to come back",
        &again,
    )
    .await?;

    step(&format!(
        "done: the {} keeps running until Ctrl-C",
        target_noun()
    ));
    look_around(
        env,
        &[
            "  kubectl get initializers".to_string(),
            format!("  kubectl get pods -n {APPS_NS}"),
            "  kubectl get mutatingwebhookconfigurations".to_string(),
        ],
    )
    .await
}

/// What an administrator does before act 1 (`docs/src/install/permissions.md`): the workload
/// namespace labelled and the operator's workloads ClusterRole bound there; and the demo's
/// namespace. Returns the label that selects the demo's namespace.
async fn prepare_namespaces(env: &Env, client: &Client) -> anyhow::Result<(String, String)> {
    let allowed = (
        initializer_crds::constants::WORKLOADS_LABEL,
        initializer_crds::constants::WORKLOADS_LABEL_VALUE,
    );
    apply_namespace(client, WORKLOAD_NS, Some(allowed)).await?;
    allow_workloads(client, WORKLOAD_NS, &env.operator_namespace).await?;
    apply_namespace(client, APPS_NS, Some(DEMO_LABEL)).await?;
    Ok((DEMO_LABEL.0.to_string(), DEMO_LABEL.1.to_string()))
}

/// Applies the sidecar Initializer; returns when it was applied.
async fn apply_initializer(client: &Client, initializer: &Initializer) -> anyhow::Result<Instant> {
    let applied = Instant::now();
    apply(
        &Api::<Initializer>::all(client.clone()),
        INITIALIZER,
        initializer,
    )
    .await
    .context("failed to apply the sidecar Initializer")?;
    Ok(applied)
}

/// Applies `deployment` in the demo's namespace; returns what the API server stored.
async fn apply_deployment(client: &Client, deployment: &Deployment) -> kube::Result<Deployment> {
    let deployments = Api::<Deployment>::namespaced(client.clone(), APPS_NS);
    apply(&deployments, &deployment.name_any(), deployment).await
}

/// Applies `object` as `name` with the demo's field manager, taking over any field another
/// manager set (the demo is rerun on the same target).
async fn apply<K>(api: &Api<K>, name: &str, object: &K) -> kube::Result<K>
where
    K: Recordable + serde::Serialize,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(object)).await
}

/// Creates an annotated Deployment `web-<n>` in the demo's namespace every half second.
fn web_load(client: &Client) -> anyhow::Result<CreateLoad> {
    let template = fixtures::nginx_deployment("web", true, 0)?;
    Ok(CreateLoad::start(
        Api::<Deployment>::namespaced(client.clone(), APPS_NS),
        Duration::from_millis(500),
        move |n| {
            let mut deployment = template.clone();
            deployment.metadata.name = Some(format!("web-{n}"));
            deployment
        },
        fixtures::has_sidecar,
    ))
}

/// Sorts `attempts` by when they finished and prints those after the first `printed` (see
/// [`print_attempts`]); returns them all.
fn print_from(
    mut attempts: Vec<Attempt>,
    printed: usize,
    frozen_at: Instant,
    not_injected: impl Fn(&Attempt, f64, f64) -> String,
) -> Vec<Attempt> {
    attempts.sort_by_key(|a| a.finished);
    print_attempts(
        attempts.get(printed..).unwrap_or_default(),
        frozen_at,
        not_injected,
    );
    attempts
}

/// Act 4 of both stories: thaws the frozen `pods`, waits for the configuration to come back
/// (`what`), says how long that took and `again` why then, and shows `nginx-after` injected.
async fn recover<K>(
    env: &Env,
    pods: &[String],
    configurations: &Recorder<K>,
    what: &str,
    again: &str,
) -> anyhow::Result<()>
where
    K: Recordable,
{
    let client = env.client();
    step("4. the initializer recovers: pods thawed");
    let thawed_at = Instant::now();
    let live = ops::workload_pod_names(&client, WORKLOAD_NS, INITIALIZER).await?;
    for pod in pods.iter().filter(|p| live.contains(p)) {
        env.target.thaw_pod(WORKLOAD_NS, pod).await?;
    }
    let back = configurations
        .wait_change(what, thawed_at, TIMEOUT, Change::Added)
        .await?;
    say(&format!(
        "+{:.1}s registered again, {again}",
        (back.at - thawed_at).as_secs_f64()
    ));
    let after = fixtures::nginx_deployment("nginx-after", true, 1)?;
    let created = apply_deployment(&client, &after).await?;
    say(&format!(
        "Deployment nginx-after created with containers {:?}",
        fixtures::template_containers(&created)
    ));
    wait_app_pod(&client, "nginx-after").await?;
    print_pods(&client, APPS_NS).await
}

/// The end of both stories: how to reach the target, the `commands` worth running, and a wait
/// for Ctrl-C.
async fn look_around(env: &Env, commands: &[String]) -> anyhow::Result<()> {
    explain(env);
    for command in commands {
        say(command);
    }
    tokio::signal::ctrl_c()
        .await
        .context("failed to wait for Ctrl-C")?;
    Ok(())
}

/// Says `what` happened, timed from the freeze, the first time `configurations` shows a change
/// after `frozen_at` that `pick` picks, and keeps when in `at` (left alone once set).
fn note_first<K: Recordable>(
    configurations: &Recorder<K>,
    frozen_at: Instant,
    at: &mut Option<Instant>,
    pick: impl Fn(&Seen<K>) -> bool,
    what: &str,
) {
    if at.is_none()
        && let Some(seen) = configurations.first_after(frozen_at, pick)
    {
        *at = Some(seen.at);
        say(&format!(
            "+{:.1}s {what}",
            (seen.at - frozen_at).as_secs_f64()
        ));
    }
}

/// Prints each create's outcome, timed from the freeze (`+Ns`); `not_injected` words a create
/// that succeeded without the sidecar, given the attempt, its start and how long it took, since
/// why it was not injected is what each story tells.
fn print_attempts(
    attempts: &[Attempt],
    frozen_at: Instant,
    not_injected: impl Fn(&Attempt, f64, f64) -> String,
) {
    for attempt in attempts {
        let started = attempt
            .started
            .saturating_duration_since(frozen_at)
            .as_secs_f64();
        let took = (attempt.finished - attempt.started).as_secs_f64();
        match &attempt.outcome {
            Ok(true) => say(&format!(
                "+{started:.1}s create ok, sidecar injected ({took:.2}s)"
            )),
            Ok(false) => say(&not_injected(attempt, started, took)),
            Err(message) => say(&format!(
                "+{started:.1}s create failed after {took:.2}s: {message}"
            )),
        }
    }
}

/// The main story's words for a create that was not injected.
fn out_of_the_path(_: &Attempt, started: f64, took: f64) -> String {
    format!(
        "+{started:.1}s create ok, not injected: the initializer is out of the path ({took:.2}s)"
    )
}

/// Whether at least three creates started after `at` (the initializer left the path) have
/// succeeded: the load has settled and the story can go on.
fn settled_after(attempts: &[Attempt], at: Option<Instant>) -> bool {
    at.is_some_and(|at| {
        attempts
            .iter()
            .filter(|a| a.started > at && a.succeeded())
            .count()
            >= 3
    })
}

fn say(line: &str) {
    println!("{line}");
}

fn step(title: &str) {
    println!("\n== {title}");
}

fn explain(env: &Env) {
    say(&format!("kubeconfig: {}", env.kubeconfig_path().display()));
    say(&format!(
        "  export KUBECONFIG={}",
        env.kubeconfig_path().display()
    ));
}

async fn apply_namespace(
    client: &Client,
    name: &str,
    label: Option<(&str, &str)>,
) -> anyhow::Result<()> {
    let labels: BTreeMap<&str, &str> = label.into_iter().collect();
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels},
    }))?;
    apply(&Api::<Namespace>::all(client.clone()), name, &namespace)
        .await
        .with_context(|| format!("failed to apply namespace {name}"))?;
    Ok(())
}

/// Binds the operator's `initializer-operator-workloads` ClusterRole in `namespace` to its
/// service account in `operator_namespace`.
async fn allow_workloads(
    client: &Client,
    namespace: &str,
    operator_namespace: &str,
) -> anyhow::Result<()> {
    use initializer_e2e::scope::{OPERATOR_ACCOUNT, WORKLOADS_CLUSTER_ROLE};
    use k8s_openapi::api::rbac::v1::RoleBinding;
    let binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": WORKLOADS_CLUSTER_ROLE, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WORKLOADS_CLUSTER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_ACCOUNT, "namespace": operator_namespace}],
    }))?;
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), namespace);
    apply(&bindings, WORKLOADS_CLUSTER_ROLE, &binding)
        .await
        .with_context(|| format!("failed to bind {WORKLOADS_CLUSTER_ROLE} in {namespace}"))?;
    Ok(())
}

/// Waits for a pod of the Deployment `name` (the tutorial's pods are labelled `app: nginx`).
async fn wait_app_pod(client: &Client, name: &str) -> anyhow::Result<()> {
    let prefix = format!("{name}-");
    wait::until(
        format!("a running pod of Deployment {name}"),
        TIMEOUT,
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), APPS_NS)
                .list(&ListParams::default())
                .await?;
            let running = pods.items.iter().any(|p| {
                p.name_any().starts_with(&prefix)
                    && p.name_any()[prefix.len()..]
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-')
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            });
            Ok(if running {
                Check::Done(())
            } else {
                Check::Pending(format!("{} pod(s)", pods.items.len()))
            })
        },
    )
    .await
}

/// Prints pods like `kubectl get pods -o custom-columns=NAME,READY,STATUS,CONTAINERS`.
async fn print_pods(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    let mut rows = vec![[
        "NAME".to_string(),
        "READY".to_string(),
        "STATUS".to_string(),
        "CONTAINERS".to_string(),
    ]];
    for pod in &pods.items {
        let containers = fixtures::container_names(pod.spec.as_ref());
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default();
        let ready = statuses.iter().filter(|s| s.ready).count();
        let waiting = statuses
            .iter()
            .find_map(|s| s.state.as_ref()?.waiting.as_ref()?.reason.clone());
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        rows.push([
            pod.name_any(),
            format!("{ready}/{}", containers.len()),
            waiting.unwrap_or(phase),
            containers.join(","),
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    println!("$ kubectl get pods -n {namespace}");
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", cells.join("   ").trim_end());
    }
    Ok(())
}

/// What the demo runs on, as the messages name it.
fn target_noun() -> &'static str {
    match TargetChoice::from_env_with_legacy() {
        Ok(TargetChoice::Real) => "real control plane",
        Ok(TargetChoice::Cluster { .. }) => "cluster",
        Ok(TargetChoice::LegacySandbox) => "sandbox (serving the Kubernetes 1.7 Initializers)",
        _ => "sandbox",
    }
}
