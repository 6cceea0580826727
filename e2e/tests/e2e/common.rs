//! What several scenarios share: a registered sidecar initializer in its own namespaces, pod
//! control over all of its pods, a stream of creates, and the health budget.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use initializer_crds::{HealthPolicy, Initializer};
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::load::{self, Attempt, CreateLoad};
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::timings::CreateCount;
use initializer_e2e::watch::{Change, Recordable, Recorder, Seen};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::process::Command;

/// How long an Initializer may take from apply to registered (pods start, probes pass).
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(120);
/// How long any single awaited transition may take before the scenario fails.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// Interval between creates of the background load.
pub const LOAD_INTERVAL: Duration = Duration::from_millis(200);

/// A sidecar initializer that is registered, with everything a scenario needs to poke at it.
pub struct Sidecar {
    /// The Initializer's name.
    pub name: String,
    /// The Initializer as applied.
    pub initializer: Initializer,
    /// Where its workload runs.
    pub workload_ns: String,
    /// A namespace it selects.
    pub target_ns: String,
    /// Every change of its webhook configuration since before it was applied.
    pub configurations: Recorder<MutatingWebhookConfiguration>,
}

/// A change of a webhook configuration, as recorded.
pub type ConfigurationSeen = Seen<MutatingWebhookConfiguration>;

impl Sidecar {
    /// The health policy in force.
    pub fn health(&self) -> HealthPolicy {
        self.initializer.spec.health_policy()
    }

    /// Waits (at most [`STEP_TIMEOUT`]) for its configuration to be removed at or after `since`.
    pub async fn removed_after(&self, since: Instant) -> anyhow::Result<ConfigurationSeen> {
        self.configurations
            .wait_change(
                "the configuration to be removed",
                since,
                STEP_TIMEOUT,
                Change::Deleted,
            )
            .await
    }

    /// Waits (at most [`REGISTER_TIMEOUT`]) for its configuration to come back at or after
    /// `since`.
    pub async fn back_after(&self, since: Instant) -> anyhow::Result<ConfigurationSeen> {
        self.configurations
            .wait_change(
                "the configuration to come back",
                since,
                REGISTER_TIMEOUT,
                Change::Added,
            )
            .await
    }

    /// The names of its live pods.
    pub async fn pods(&self, ctx: &Ctx) -> anyhow::Result<Vec<String>> {
        pod_names(ctx, &self.workload_ns, &self.name).await
    }
}

/// Watches the webhook configurations of the Initializer `name`.
pub fn record_configurations(ctx: &Ctx, name: &str) -> Recorder<MutatingWebhookConfiguration> {
    let name = name.to_string();
    Recorder::start(
        Api::all(ctx.client()),
        watcher::Config::default(),
        move |c| ops::belongs_to(c, &name),
    )
}

/// Watches every object of kind `K` in `namespace`.
pub fn record_namespaced<K>(ctx: &Ctx, namespace: &str) -> Recorder<K>
where
    K: Recordable + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    Recorder::start(
        Api::namespaced(ctx.client(), namespace),
        watcher::Config::default(),
        |_| true,
    )
}

/// Creates a busybox pod labelled `app=e2e-probe` with no annotations (an initializer that
/// intercepts it adds its own) and returns what the API server stored.
pub async fn create_probe_pod(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Pod> {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "e2e-probe"}, "annotations": std::collections::BTreeMap::<String, String>::new()},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]},
    }))?;
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&kube::api::PostParams::default(), &pod)
        .await
        .with_context(|| format!("failed to create pod {namespace}/{name}"))
}

/// A fresh namespace for an Initializer's workload, named for `role`, that the operator may
/// deploy to.
pub async fn workload_namespace(ctx: &Ctx, role: &str) -> anyhow::Result<String> {
    ctx.scope
        .workload_namespace(role, &ctx.env.operator_namespace)
        .await
}

/// The tutorial's sidecar initializer `name` with the default health policy, its workload in
/// `workload_ns`, selecting the scope's target namespaces.
pub fn default_sidecar(ctx: &Ctx, name: &str, workload_ns: &str) -> anyhow::Result<Initializer> {
    let target = ctx.scope.target_selector();
    fixtures::sidecar_initializer(name, workload_ns, &target, Health::default())
}

/// The secret-guard example `name` (it refuses Secrets with a value shorter than 20
/// characters), its workload in `workload_ns`, for Secrets in the scope's target namespaces;
/// `extra` adds or replaces spec fields.
pub fn secret_guard(
    ctx: &Ctx,
    name: &str,
    workload_ns: &str,
    extra: serde_json::Value,
) -> anyhow::Result<Initializer> {
    let mut spec = serde_json::json!({
        "image": initializer_crds::images::image("secret-guard-initializer"),
        "namespace": workload_ns,
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
        "namespaces": fixtures::target_namespaces(&ctx.scope.target_selector()),
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    fixtures::initializer(name, spec)
}

/// Applies `initializer` and waits until it is registered; records the time to registered in
/// the row and returns when it was applied.
pub async fn apply_until_registered(
    ctx: &Ctx,
    initializer: &Initializer,
) -> anyhow::Result<Instant> {
    let applied = Instant::now();
    ctx.scope.create_initializer(initializer).await?;
    let name = initializer.name_any();
    let (_, registered) = ops::wait_registered(&ctx.client(), &name, REGISTER_TIMEOUT).await?;
    ctx.row
        .update(|row| row.to_registered = Some(registered - applied));
    Ok(applied)
}

/// The tutorial's sidecar initializer for `role`, not yet applied: its name, its fresh
/// namespaces (`<role>-init` for the workload, `<role>-apps` selected) and the Initializer.
pub struct SidecarPlan {
    /// The Initializer's name.
    pub name: String,
    /// The Initializer, with the given health policy.
    pub initializer: Initializer,
    /// Where its workload is to run.
    pub workload_ns: String,
    /// A namespace it selects.
    pub target_ns: String,
}

/// Creates the namespaces of the tutorial's sidecar initializer for `role` and builds it.
pub async fn sidecar_plan(ctx: &Ctx, role: &str, health: Health) -> anyhow::Result<SidecarPlan> {
    let workload_ns = workload_namespace(ctx, &format!("{role}-init")).await?;
    let target_ns = ctx.scope.target_namespace(&format!("{role}-apps")).await?;
    let name = ctx.scope.name(role);
    let initializer =
        fixtures::sidecar_initializer(&name, &workload_ns, &ctx.scope.target_selector(), health)?;
    Ok(SidecarPlan {
        name,
        initializer,
        workload_ns,
        target_ns,
    })
}

/// Waits until a configuration recorded at or after `applied` carries the spec's values (not
/// the fail-open ones it is registered with while its route is proven).
pub async fn with_spec_values(
    configurations: &Recorder<MutatingWebhookConfiguration>,
    applied: Instant,
) -> anyhow::Result<ConfigurationSeen> {
    configurations
        .wait_for(
            "the configuration with the spec's values",
            applied,
            STEP_TIMEOUT,
            |s| s.change != Change::Deleted && !ops::is_proving(&s.object),
        )
        .await
}

/// Applies the tutorial's sidecar initializer in fresh namespaces and waits until it is
/// registered and all its pods are ready. Records the time to registered in the row.
pub async fn registered_sidecar(ctx: &Ctx, role: &str, health: Health) -> anyhow::Result<Sidecar> {
    let SidecarPlan {
        name,
        initializer,
        workload_ns,
        target_ns,
    } = sidecar_plan(ctx, role, health).await?;
    let configurations = record_configurations(ctx, &name);
    let applied = Instant::now();
    ctx.scope.create_initializer(&initializer).await?;
    ops::wait_registered(&ctx.client(), &name, REGISTER_TIMEOUT).await?;
    let registered = with_spec_values(&configurations, applied).await?.at;
    ctx.row
        .update(|row| row.to_registered = Some(registered - applied));
    let replicas = usize::try_from(initializer.spec.replicas).unwrap_or(1);
    ops::wait_pods_ready(&ctx.client(), &workload_ns, &name, replicas, STEP_TIMEOUT).await?;
    Ok(Sidecar {
        name,
        initializer,
        workload_ns,
        target_ns,
        configurations,
    })
}

/// Freezes every pod of the sidecar initializer; returns their names.
pub async fn freeze_all(ctx: &Ctx, sidecar: &Sidecar) -> anyhow::Result<Vec<String>> {
    freeze_pods(ctx, &sidecar.workload_ns, &sidecar.name).await
}

/// The names of the live pods of the Initializer `name` (any backend).
pub async fn pod_names(ctx: &Ctx, workload_ns: &str, name: &str) -> anyhow::Result<Vec<String>> {
    ops::workload_pod_names(&ctx.client(), workload_ns, name).await
}

/// Freezes every pod of the Initializer `name` (any backend) that may still act, terminating
/// ones included: a pod being replaced goes on answering (a controller goes on initializing)
/// through its shutdown delay, and an initializer with such a pod running is not down. Returns
/// the names of the pods frozen. A terminating pod may exit or vanish at any moment, so a
/// failure to freeze one is taken for that, said and passed over; a failure on a live pod fails.
pub async fn freeze_pods(ctx: &Ctx, workload_ns: &str, name: &str) -> anyhow::Result<Vec<String>> {
    let pods = ops::workload_pods_with_terminating(&ctx.client(), workload_ns, name).await?;
    anyhow::ensure!(
        pods.iter().any(|p| p.metadata.deletion_timestamp.is_none()),
        "failed to freeze: Initializer {name} has no pods"
    );
    let mut frozen = Vec::with_capacity(pods.len());
    for pod in &pods {
        let pod_name = pod.name_any();
        let terminating = pod.metadata.deletion_timestamp.is_some();
        match ctx.env.target.freeze_pod(workload_ns, &pod_name).await {
            Ok(()) if terminating => {
                eprintln!("e2e: {name}: froze {pod_name} too, which is terminating");
                frozen.push(pod_name);
            }
            Ok(()) => frozen.push(pod_name),
            Err(e) if terminating => {
                eprintln!("e2e: {name}: passed over {pod_name}, which is terminating: {e:#}");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(frozen)
}

/// Sleeps a random part of one probe period. An outage does not wait for the prober: without
/// this, a scenario that freezes a fixed time after registering always freezes just after a
/// probe, and measures the worst case (a whole period before the next probe) every time.
pub async fn random_phase(health: &HealthPolicy) {
    let period = Duration::from_secs(u64::try_from(health.period_seconds).unwrap_or(1));
    let offset = period.mul_f64(rand::random::<f64>());
    tokio::time::sleep(offset).await;
}

/// Thaws the given pods of the sidecar initializer (ones that are gone are skipped).
pub async fn thaw_all(ctx: &Ctx, sidecar: &Sidecar, pods: &[String]) -> anyhow::Result<()> {
    thaw_pods(ctx, &sidecar.workload_ns, &sidecar.name, pods).await
}

/// Thaws the given pods of the Initializer `name` (any backend; ones that are gone are
/// skipped, and a failure to thaw a terminating one, which may exit at any moment, is passed
/// over).
pub async fn thaw_pods(
    ctx: &Ctx,
    workload_ns: &str,
    name: &str,
    pods: &[String],
) -> anyhow::Result<()> {
    let present = ops::workload_pods_with_terminating(&ctx.client(), workload_ns, name).await?;
    for pod in present.iter().filter(|p| pods.contains(&p.name_any())) {
        match ctx.env.target.thaw_pod(workload_ns, &pod.name_any()).await {
            Err(_) if pod.metadata.deletion_timestamp.is_some() => {}
            result => result?,
        }
    }
    Ok(())
}

/// Kills every pod of the sidecar initializer at once; returns their names. At once, because
/// the kubelet restarts a killed container at once: a pod killed seconds after another (each
/// kill on kind is a few `docker exec`s, slow on a loaded machine) can be ready again before
/// the last one dies, so the Service never lacks a ready endpoint.
pub async fn kill_all(ctx: &Ctx, sidecar: &Sidecar) -> anyhow::Result<Vec<String>> {
    let pods = sidecar.pods(ctx).await?;
    anyhow::ensure!(
        !pods.is_empty(),
        "failed to kill: Initializer {} has no pods",
        sidecar.name
    );
    futures::future::try_join_all(
        pods.iter()
            .map(|pod| ctx.env.target.kill_pod(&sidecar.workload_ns, pod)),
    )
    .await?;
    Ok(pods)
}

/// Creates an annotated nginx Deployment (no replicas) in `namespace` every [`LOAD_INTERVAL`];
/// an attempt counts as mutated when the sidecar was injected.
pub fn deployment_load(ctx: &Ctx, namespace: &str, prefix: &str) -> anyhow::Result<CreateLoad> {
    let prefix = format!("{prefix}-{}", ctx.scope.id());
    let template = fixtures::nginx_deployment(&prefix, true, 0)?;
    Ok(CreateLoad::start(
        Api::<Deployment>::namespaced(ctx.client(), namespace),
        LOAD_INTERVAL,
        move |n| {
            let mut deployment = template.clone();
            deployment.metadata.name = Some(format!("{prefix}-{n}"));
            deployment
        },
        fixtures::has_sidecar,
    ))
}

/// Creates one annotated (or not) nginx Deployment and returns what the API server stored.
pub async fn create_nginx(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    annotated: bool,
) -> anyhow::Result<Deployment> {
    let deployment = fixtures::nginx_deployment(name, annotated, 1)?;
    Api::<Deployment>::namespaced(ctx.client(), namespace)
        .create(&Default::default(), &deployment)
        .await
        .with_context(|| format!("failed to create Deployment {namespace}/{name}"))
}

/// How long the operator may take to notice a hung initializer by probing: `failureThreshold`
/// probes, `periodSeconds` apart, each allowed the latency budget.
pub fn probe_budget(health: &HealthPolicy) -> Duration {
    let period = Duration::from_secs(u64::try_from(health.period_seconds).unwrap_or(1));
    let failures = u32::try_from(health.failure_threshold).unwrap_or(1);
    let latency = Duration::from_millis(u64::try_from(health.latency_budget_millis).unwrap_or(500));
    period * failures + latency
}

/// `elapsed` as seconds, for messages.
pub fn s(elapsed: Duration) -> String {
    initializer_e2e::wait::secs(elapsed)
}

/// Deletes every pod of an initializer at once (no grace period), so none is left to answer
/// while the replacements start; returns when the deletion began and the old pods' names, to
/// tell the replacements apart.
pub async fn delete_own_pods(
    ctx: &Ctx,
    namespace: &str,
    pods: &[Pod],
) -> anyhow::Result<(Instant, Vec<String>)> {
    let deleted = Instant::now();
    let pod_api = Api::<Pod>::namespaced(ctx.client(), namespace);
    for pod in pods {
        pod_api
            .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
            .await?;
    }
    Ok((deleted, pods.iter().map(|p| p.name_any()).collect()))
}

/// The initializer `name`'s pods that are not among `old`.
pub async fn fresh_pods(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    old: &[String],
) -> anyhow::Result<Vec<Pod>> {
    let pods = ops::workload_pods(&ctx.client(), namespace, name).await?;
    Ok(pods
        .into_iter()
        .filter(|p| !old.contains(&p.name_any()))
        .collect())
}

/// Records a crash scenario's timings in its row: the kill to the configuration's removal and
/// to the first good create, the removal to registered again, and the creates that failed in
/// each span; returns those failed between the kill and the removal.
pub fn record_crash(
    ctx: &Ctx,
    attempts: &[Attempt],
    killed_at: Instant,
    removed: Instant,
    back: Instant,
) -> CreateCount {
    let failed = load::count_in(attempts, killed_at, Some(removed));
    ctx.row.update(|row| {
        row.failure_to_deregistered = Some(removed - killed_at);
        row.failure_to_create_ok =
            load::first_success_after(attempts, killed_at).map(|a| a.finished - killed_at);
        row.failed_creates_failure = Some(failed);
        row.recovery_to_registered = Some(back - removed);
        row.failed_creates_recovery = Some(load::count_in(attempts, removed, Some(back)));
    });
    failed
}

/// Runs kubectl against the backend's cluster; its stdout, or an error with its stderr.
pub async fn kubectl(ctx: &Ctx, args: &[&str]) -> anyhow::Result<String> {
    let (stdout, stderr) = kubectl_both(ctx, args).await?;
    if !stderr.trim().is_empty() {
        eprintln!("kubectl {}: {}", args.join(" "), stderr.trim());
    }
    Ok(stdout)
}

/// Runs kubectl; its stdout and stderr, or an error when it fails.
pub async fn kubectl_both(ctx: &Ctx, args: &[&str]) -> anyhow::Result<(String, String)> {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(ctx.env.kubeconfig_path())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .context("failed to run kubectl")?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        bail!("kubectl {} failed: {}", args.join(" "), stderr.trim());
    }
    Ok((stdout, stderr))
}
