//! The legacy backend (`spec.backend: InitializerConfiguration`): the Kubernetes 1.7
//! Initializers of the reference walkthrough, run by the operator with the same safety loop.
//!
//! Every scenario here but one runs on the sandbox in legacy mode (the runner starts it after
//! the chosen backend's scenarios): no control plane we can run here serves
//! `admissionregistration.k8s.io/v1alpha1` together with the APIs the operator needs (Kubernetes
//! 1.14 removed it; kube-apiserver 1.13 runs here only in the legacy conformance tier, without
//! controllers or a node), so on the real control plane and kind these scenarios are not in the
//! list at all. The exception, the legacy backend asked for where the API is not served
//! (`legacy_backend_without_the_api_is_invalid_and_deploys_nothing`), runs on every backend.

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use initializer_crds::Initializer;
use initializer_e2e::fixtures::{self, Health, LEGACY_BACKEND, SIDECAR_CONTAINER};
use initializer_e2e::legacy::{self, InitializerConfiguration, PendingRecorder};
use initializer_e2e::load;
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::timings::Released;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::watch::{Change, Recorder, Seen};
use initializer_packaging::readiness::deployment_available;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT, SidecarPlan, s};
use crate::forgery;

/// Slack on top of a computed budget for a busy two-core machine (as for the webhook backend).
const MARGIN: Duration = Duration::from_secs(3);

/// The suffix of every pending name the operator gives an initializer:
/// `<Initializer>.<namespace>.initializer-operator.io`.
const PENDING_NAME_SUFFIX: &str = ".initializer-operator.io";

/// A registered legacy sidecar initializer.
struct LegacySidecar {
    name: String,
    initializer: Initializer,
    workload_ns: String,
    target_ns: String,
    /// The name it is pending as (its configuration's initializer name).
    pending_name: String,
    /// Every change of its InitializerConfiguration since before it was applied.
    configurations: Recorder<InitializerConfiguration>,
}

impl LegacySidecar {
    /// Waits (at most [`STEP_TIMEOUT`]) for its InitializerConfiguration to be removed at or
    /// after `since`.
    async fn removed_after(
        &self,
        since: Instant,
    ) -> anyhow::Result<Seen<InitializerConfiguration>> {
        self.configurations
            .wait_change(
                "the InitializerConfiguration to be removed",
                since,
                STEP_TIMEOUT,
                Change::Deleted,
            )
            .await
    }
}

fn record_configurations(ctx: &Ctx, name: &str) -> Recorder<InitializerConfiguration> {
    let name = name.to_string();
    Recorder::start(
        Api::all(ctx.client()),
        watcher::Config::default(),
        move |c| legacy::belongs_to(c, &name),
    )
}

/// Applies the tutorial's sidecar initializer with the legacy backend in fresh namespaces and
/// waits until its InitializerConfiguration is registered, checking it came only after the
/// initializer's Deployment was available. Records the time to registered in the row.
async fn registered_legacy_sidecar(
    ctx: &Ctx,
    role: &str,
    health: Health,
) -> anyhow::Result<LegacySidecar> {
    let client = ctx.client();
    let SidecarPlan {
        name,
        initializer,
        workload_ns,
        target_ns,
    } = common::sidecar_plan(ctx, role, health).await?;
    let initializer = fixtures::with_backend(&initializer, LEGACY_BACKEND)?;
    let deployments: Recorder<Deployment> = common::record_namespaced(ctx, &workload_ns);
    let configurations = record_configurations(ctx, &name);
    let applied = Instant::now();
    ctx.scope.create_initializer(&initializer).await?;
    legacy::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;
    let added = configurations
        .wait_change(
            "the InitializerConfiguration to appear",
            applied,
            STEP_TIMEOUT,
            Change::Added,
        )
        .await?;
    let available = deployments
        .first_after(applied, |s| deployment_available(&s.object))
        .with_context(|| {
            format!(
                "the InitializerConfiguration appeared {} after apply, but the initializer's \
                 Deployment was never seen available: {}",
                s(added.at - applied),
                deployments.summary()
            )
        })?;
    ensure!(
        available.at <= added.at,
        "the InitializerConfiguration appeared {} before the initializer's Deployment was available",
        s(available.at - added.at)
    );
    ctx.row.update(|row| {
        row.to_registered = Some(added.at - applied);
        row.available_to_registered = Some(added.at - available.at);
    });
    let configuration = added.object;
    let names = configuration.names();
    let [pending_name] = names.as_slice() else {
        bail!(
            "InitializerConfiguration {} should name exactly one initializer: {names:?}",
            configuration.name_any()
        );
    };
    ensure!(
        pending_name.ends_with(PENDING_NAME_SUFFIX) && pending_name.starts_with(&name),
        "the pending name {pending_name} should be <Initializer>.<namespace>{PENDING_NAME_SUFFIX}"
    );
    let rules = &configuration.initializers[0].rules;
    ensure!(
        rules
            .iter()
            .any(|r| r.resources.iter().any(|r| r == "deployments")),
        "the configuration's rules should be the Initializer's (deployments): {rules:?}"
    );
    let status = ops::initializer(&client, &name).await?;
    if let Some(reported) = legacy::detail(&status, legacy::PENDING_NAME_DETAIL) {
        ensure!(
            reported == pending_name,
            "status.details.pendingName is {reported}, the configuration names {pending_name}"
        );
    }
    let replicas = usize::try_from(initializer.spec.replicas).unwrap_or(1);
    ops::wait_pods_ready(&client, &workload_ns, &name, replicas, STEP_TIMEOUT).await?;
    Ok(LegacySidecar {
        pending_name: pending_name.clone(),
        name,
        initializer,
        workload_ns,
        target_ns,
        configurations,
    })
}

/// The reference walkthrough end to end, on the 1.7 mechanism: the sidecar ConfigMap, the
/// initializer registered once ready, the nginx Deployment without the annotation untouched,
/// `nginx-with-annotation` injected (its pod runs both containers), an object created with
/// `includeUninitialized=true` shown pending on the initializer then initialized by it, and a
/// Deployment outside the selected namespaces left alone.
pub async fn legacy_walkthrough_sidecar_is_injected_only_where_annotated(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let sidecar = registered_legacy_sidecar(&ctx, "walk", Health::default()).await?;
    let outside = ctx.scope.outside_namespace("elsewhere").await?;

    // 3.2: the ConfigMap of sidecars, the initializer's configuration.
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &sidecar.workload_ns)
        .list(&ListParams::default().labels(&format!(
            "{}={}",
            initializer_crds::constants::INITIALIZER_LABEL,
            sidecar.name
        )))
        .await
        .context("failed to list the initializer's ConfigMaps")?;
    ensure!(
        config_maps.items.iter().any(|c| c
            .data
            .as_ref()
            .is_some_and(|d| d.values().any(|v| v == fixtures::SIDECAR_CONFIG))),
        "no ConfigMap of Initializer {} holds the walkthrough's sidecar containers",
        sidecar.name
    );
    // 3.3: the initializer's own Deployment is initialized (it was not left pending on itself).
    let own = legacy::list(
        &client,
        &legacy::deployments_path(&sidecar.workload_ns),
        true,
    )
    .await?;
    for deployment in own.iter().filter(|d| !legacy::is_canary(d)) {
        ensure!(
            legacy::is_initialized(deployment),
            "the initializer's own Deployment is pending: {:?}",
            legacy::pending_names(deployment)
        );
    }

    // 3.8: the nginx Deployment without the annotation: created, untouched.
    let plain = common::create_nginx(&ctx, &sidecar.target_ns, "nginx", false).await?;
    ensure!(
        fixtures::template_containers(&plain) == ["nginx"],
        "the nginx Deployment without the annotation was touched: {:?}",
        fixtures::template_containers(&plain)
    );
    // 3.9: nginx-with-annotation gets the sidecar, and its pod runs both containers.
    let annotated =
        common::create_nginx(&ctx, &sidecar.target_ns, "nginx-with-annotation", true).await?;
    ensure!(
        fixtures::template_containers(&annotated) == ["nginx", SIDECAR_CONTAINER],
        "nginx-with-annotation should have nginx then {SIDECAR_CONTAINER}: {:?}",
        fixtures::template_containers(&annotated)
    );
    let pod = wait_pod_of(&ctx, &sidecar.target_ns, |p| {
        p.starts_with("nginx-with-annotation-")
    })
    .await?;
    let containers = fixtures::container_names(pod.spec.as_ref());
    ensure!(
        containers.iter().any(|c| c == SIDECAR_CONTAINER),
        "pod {} of nginx-with-annotation lacks the sidecar: {containers:?}",
        pod.name_any()
    );
    let plain_pod = wait_pod_of(&ctx, &sidecar.target_ns, |p| {
        p.starts_with("nginx-") && !p.starts_with("nginx-with-annotation-")
    })
    .await?;
    ensure!(
        fixtures::container_names(plain_pod.spec.as_ref()) == ["nginx"],
        "pod {} of the nginx Deployment without the annotation was touched: {:?}",
        plain_pod.name_any(),
        fixtures::container_names(plain_pod.spec.as_ref())
    );

    // The mechanism itself: created with includeUninitialized=true, the object comes back at
    // once, pending on the initializer; then the initializer injects it and removes its name.
    let path = legacy::deployments_path(&sidecar.target_ns);
    let watched = serde_json::to_value(fixtures::nginx_deployment("nginx-watched", true, 0)?)?;
    let created = legacy::create_uninitialized(&client, &path, &watched).await?;
    ensure!(
        legacy::pending_names(&created) == [sidecar.pending_name.clone()],
        "a new annotated Deployment should be pending on {} only: {:?}",
        sidecar.pending_name,
        legacy::pending_names(&created)
    );
    let initialized =
        legacy::wait_initialized(&client, &path, "nginx-watched", STEP_TIMEOUT).await?;
    ensure!(
        legacy::template_containers(&initialized) == ["nginx", SIDECAR_CONTAINER],
        "nginx-watched was initialized without the sidecar: {:?}",
        legacy::template_containers(&initialized)
    );

    // Outside the selected namespaces the API server still assigns the name (an
    // InitializerConfiguration has no namespace selector); the initializer removes it without
    // running the handler.
    let elsewhere = common::create_nginx(&ctx, &outside, "nginx", true).await?;
    ensure!(
        fixtures::template_containers(&elsewhere) == ["nginx"],
        "a Deployment in {outside}, outside the selected namespaces, was touched: {:?}",
        fixtures::template_containers(&elsewhere)
    );
    for namespace in [&sidecar.target_ns, &outside] {
        let left = legacy::pending_on(
            &client,
            &legacy::deployments_path(namespace),
            &sidecar.pending_name,
        )
        .await?;
        ensure!(
            left.is_empty(),
            "Deployments in {namespace} still pending on {}: {left:?}",
            sidecar.pending_name
        );
    }
    Ok(())
}

/// The walkthrough's troubleshooting case (section 4), automated: the initializer stops (every
/// pod frozen) while annotated Deployments are created every 200 ms and three more are created
/// uninitialized. Creates block instead of failing; the operator removes the configuration and
/// releases every object still pending on the dead name within the webhook backend's bound,
/// reports how many in `status.details.releasedObjects` with an Event, and after the thaw
/// registers the initializer again.
pub async fn legacy_dead_initializer_is_deregistered_and_stuck_creates_released(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let sidecar = registered_legacy_sidecar(&ctx, "dead", Health::default()).await?;
    let health = sidecar.initializer.spec.health_policy();
    let path = legacy::deployments_path(&sidecar.target_ns);
    // Every namespace: the operator's canaries (in the initializer's namespace) are pending on
    // the same name.
    let pending = PendingRecorder::start(
        client.clone(),
        "/apis/apps/v1/deployments".to_string(),
        sidecar.pending_name.clone(),
    );
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "load")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    common::random_phase(&health).await;
    let frozen_at = Instant::now();
    let frozen = freeze_all(&ctx, &sidecar).await?;

    // 4.2: the walkthrough's nginx, stuck: created uninitialized, pending on the dead name.
    let mut stuck = Vec::new();
    for n in 0..3 {
        let name = format!("stuck-{n}");
        let object = serde_json::to_value(fixtures::nginx_deployment(&name, true, 0)?)?;
        let created = legacy::create_uninitialized(&client, &path, &object).await?;
        ensure!(
            legacy::pending_names(&created).contains(&sidecar.pending_name),
            "{name} created while the initializer was down should be pending on it: {:?}",
            legacy::pending_names(&created)
        );
        stuck.push(name);
    }
    let outcome = measure_release(&ctx, &sidecar, &path, frozen_at).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let attempts = load.stop().await;
    let status_while_down = ops::initializer(&client, &sidecar.name).await;
    let thawed_at = Instant::now();
    let thawed = thaw_all(&ctx, &sidecar, &frozen).await;
    let (deregistered_at, released_at) = outcome?;
    thawed?;
    let status_while_down = status_while_down?;

    // What the harness saw stuck: every object ever pending on the name that the initializer
    // did not inject (it never ran on them). The canaries are counted apart.
    let everything = legacy::list(&client, &path, true).await?;
    let injected: Vec<String> = everything
        .iter()
        .filter(|d| {
            legacy::template_containers(d)
                .iter()
                .any(|c| c == SIDECAR_CONTAINER)
        })
        .map(legacy::key)
        .collect();
    let seen = pending.seen();
    let seen_stuck: Vec<String> = seen
        .objects
        .iter()
        .filter(|key| !injected.contains(key))
        .cloned()
        .collect();
    // What the harness saw released: the name removed from an object still there, after the
    // freeze had taken hold and before the thaw, and not by the initializer. A write it had in
    // flight at the freeze can land after it however late on a loaded machine; that write
    // injected the object, a release does not. The canary pending at that moment, if any, is
    // among them; the operator releases it too but counts only the others (users' objects).
    let took_hold = frozen_at + Duration::from_millis(300);
    let released_seen: Vec<&legacy::Removal> = seen
        .removed_since(took_hold)
        .into_iter()
        .filter(|r| r.at < thawed_at && !injected.contains(&r.key))
        .collect();
    let released_canaries = released_seen.iter().filter(|r| r.canary).count();
    let released_users = released_seen.len() - released_canaries;
    let still_pending: Vec<&Value> = everything
        .iter()
        .filter(|d| !legacy::is_initialized(d))
        .collect();
    let to_deregistered = deregistered_at - frozen_at;
    let to_released = released_at - frozen_at;
    let first_ok = load::first_success_after(&attempts, frozen_at);
    let failed = load::count_in(&attempts, frozen_at, Some(released_at));
    let reported = legacy::released_objects(&status_while_down);
    ctx.row.update(|row| {
        row.failure_to_deregistered = Some(to_deregistered);
        row.failure_to_released = Some(to_released);
        row.failure_to_create_ok = first_ok.map(|a| a.finished - frozen_at);
        row.failed_creates_failure = Some(failed);
        row.released = reported.map(|reported| Released {
            reported,
            stuck: released_users,
        });
    });
    eprintln!(
        "{}: configuration removed {} after the freeze, every stuck object released {} after it; \
         {}/{} creates failed; released reported {reported:?}, seen released {} ({} of them \
         canaries), seen stuck {} ({:?}), canaries pending on it meanwhile {:?}; watch errors {:?}",
        sidecar.name,
        s(to_deregistered),
        s(to_released),
        failed.failed,
        failed.total,
        released_seen.len(),
        released_canaries,
        seen_stuck.len(),
        seen_stuck,
        seen.canaries,
        pending.errors()
    );

    let budget = common::probe_budget(&health);
    ensure!(
        to_deregistered <= budget + MARGIN,
        "the InitializerConfiguration was removed {} after the freeze; the health budget is {} (+{} margin)",
        s(to_deregistered),
        s(budget),
        s(MARGIN)
    );
    ensure!(
        to_released <= budget + MARGIN,
        "the last stuck object was released {} after the freeze; the webhook backend's bound is {} (+{} margin)",
        s(to_released),
        s(budget),
        s(MARGIN)
    );
    ensure!(
        still_pending.is_empty(),
        "objects still pending after the release: {:?}",
        still_pending
            .iter()
            .map(|d| (d["metadata"]["name"].clone(), legacy::pending_names(d)))
            .collect::<Vec<_>>()
    );
    // The blocked creates were answered once released (well before the API server's timeout):
    // none failed, unlike the webhook backend's creates that time out until it is degraded.
    ensure!(
        attempts.iter().all(load::Attempt::succeeded),
        "creates failed while the initializer was down: {:?}",
        load::errors(&attempts)
    );
    for name in &stuck {
        let key = format!("{}/{name}", sidecar.target_ns);
        ensure!(
            seen_stuck.contains(&key),
            "{name}, created uninitialized while the initializer was down, was not seen stuck then \
             released (seen pending on the name: {}; injected: {}): {seen_stuck:?}",
            seen.objects.contains(&key),
            injected.contains(&key)
        );
    }
    // Visible to everyone again (4.4's `kubectl get deploy` without --include-uninitialized).
    let visible = legacy::list(&client, &path, false).await?;
    for name in &stuck {
        ensure!(
            visible.iter().any(|d| d["metadata"]["name"] == json!(name)),
            "{name} is not listed without includeUninitialized after its release"
        );
    }
    let reported = reported.with_context(|| {
        format!(
            "status.details.{} is missing after the release: {}",
            legacy::RELEASED_DETAIL,
            ops::describe(&status_while_down)
        )
    })?;
    ensure!(
        usize::try_from(reported).ok() == Some(released_users),
        "the operator reported {reported} released object(s); the harness saw {} released from {} \
         ({released_canaries} of them its canaries, which it must not count): {:?}",
        released_seen.len(),
        sidecar.pending_name,
        released_seen.iter().map(|r| &r.key).collect::<Vec<_>>()
    );
    for key in &seen_stuck {
        ensure!(
            released_seen.iter().any(|r| r.key == *key),
            "{key} was stuck on {} but never seen released: {:?}",
            sidecar.pending_name,
            released_seen.iter().map(|r| &r.key).collect::<Vec<_>>()
        );
    }
    let note = legacy::wait_event(
        &client,
        &sidecar.name,
        legacy::RELEASED_EVENT_REASON,
        STEP_TIMEOUT,
    )
    .await?;
    eprintln!(
        "{}: Event {}: {note}",
        sidecar.name,
        legacy::RELEASED_EVENT_REASON
    );

    // Recovery: registered again, injection resumes.
    let (_, back) = legacy::wait_registered(&client, &sidecar.name, REGISTER_TIMEOUT).await?;
    ctx.row
        .update(|row| row.recovery_to_registered = Some(back - thawed_at));
    let after = common::create_nginx(&ctx, &sidecar.target_ns, "after-recovery", true).await?;
    ensure!(
        fixtures::has_sidecar(&after),
        "injection did not resume after the initializer recovered: {:?}",
        fixtures::template_containers(&after)
    );
    Ok(())
}

/// Every initializer pod killed (the walkthrough's deleted initializer, but with a Deployment
/// that restarts it), with probes made slow on purpose (three failed probes five seconds apart):
/// the configuration is removed well within the ten seconds the probe path would need, so the
/// endpoints going to zero did it, as with the webhook backend; no create fails, nothing stays
/// pending, and the restarted initializer is registered again.
pub async fn legacy_crashed_initializer_is_deregistered_by_its_endpoints(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let health = Health {
        period_seconds: Some(5),
        failure_threshold: Some(3),
        ..Health::default()
    };
    let sidecar = registered_legacy_sidecar(&ctx, "crash", health).await?;
    let path = legacy::deployments_path(&sidecar.target_ns);
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "load")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pods = ops::workload_pods(&client, &sidecar.workload_ns, &sidecar.name).await?;
    ensure!(!pods.is_empty(), "Initializer {} has no pods", sidecar.name);
    let killed_at = Instant::now();
    for pod in &pods {
        ctx.env
            .target
            .kill_pod(&sidecar.workload_ns, &pod.name_any())
            .await?;
    }
    let removed = sidecar.removed_after(killed_at).await;
    let back = match &removed {
        Ok(_) => legacy::wait_registered(&client, &sidecar.name, REGISTER_TIMEOUT)
            .await
            .map(|(_, at)| at),
        Err(_) => Ok(Instant::now()),
    };
    let attempts = load.stop().await;
    let removed = removed?.at;
    let back = back.context("the restarted legacy initializer was never registered again")?;
    let to_deregistered = removed - killed_at;
    common::record_crash(&ctx, &attempts, killed_at, removed, back);
    eprintln!(
        "{}: configuration removed {} after the kill, registered again {} later; {} creates, {} failed",
        sidecar.name,
        s(to_deregistered),
        s(back - removed),
        attempts.len(),
        attempts.iter().filter(|a| !a.succeeded()).count()
    );
    let probe_path = Duration::from_secs(10);
    ensure!(
        to_deregistered < probe_path,
        "the InitializerConfiguration was removed {} after the kill: no faster than the probe \
         path (three failed probes 5 s apart, at least {}), so the endpoints were not used",
        s(to_deregistered),
        s(probe_path)
    );
    ensure!(
        attempts.iter().all(load::Attempt::succeeded),
        "creates failed around the crash: {:?}",
        load::errors(&attempts)
    );
    let left = legacy::pending_on(&client, &path, &sidecar.pending_name).await?;
    ensure!(
        left.is_empty(),
        "Deployments still pending on {} after the crash and the recovery: {left:?}",
        sidecar.pending_name
    );
    Ok(())
}

/// Waits for the configuration to go after `failed_at`, then for no object of `path` to be
/// pending on the dead name; returns both instants.
async fn measure_release(
    ctx: &Ctx,
    sidecar: &LegacySidecar,
    path: &str,
    failed_at: Instant,
) -> anyhow::Result<(Instant, Instant)> {
    let removed = sidecar.removed_after(failed_at).await?;
    let client = ctx.client();
    let released = wait::until(
        format!("no object pending on {}", sidecar.pending_name),
        STEP_TIMEOUT,
        || async {
            let left = legacy::pending_on(&client, path, &sidecar.pending_name).await?;
            Ok(if left.is_empty() {
                Check::Done(Instant::now())
            } else {
                Check::Pending(format!("still pending: {left:?}"))
            })
        },
    )
    .await?;
    Ok((removed.at, released))
}

/// An initializer whose rules match pods, so the API server puts its name on every new pod in
/// the cluster, its own included: its pods are never left pending on it (the operator creates
/// its Deployment with an explicit empty pending list and clears its name from its own pods),
/// deleting them all brings replacements up (no deadlock) and it registers again; pods in
/// `kube-system` and the operator's namespace are created and never intercepted.
pub async fn legacy_own_pods_never_deadlock(ctx: Ctx) -> anyhow::Result<()> {
    let client = ctx.client();
    let workload_ns = common::workload_namespace(&ctx, "init").await?;
    let target_ns = ctx.scope.target_namespace("apps").await?;
    let name = ctx.scope.name("all-pods");
    let mark = format!("e2e.initializer.dev/seen-by-{}", ctx.scope.id());
    let initializer = fixtures::initializer(
        &name,
        json!({
            "namespace": workload_ns,
            "preset": {"inject": {"annotations": {mark.clone(): "true"}}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaces": fixtures::target_namespaces(&ctx.scope.target_selector()),
        }),
    )?;
    let initializer = fixtures::with_backend(&initializer, LEGACY_BACKEND)?;
    let applied = Instant::now();
    ctx.scope.create_initializer(&initializer).await?;
    let (configuration, registered) =
        legacy::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;
    ctx.row
        .update(|row| row.to_registered = Some(registered - applied));
    let pending_name = configuration.names().into_iter().next().unwrap_or_default();
    let replicas = usize::try_from(initializer.spec.replicas).unwrap_or(1);
    let pods = ops::wait_pods_ready(&client, &workload_ns, &name, replicas, STEP_TIMEOUT).await?;
    let marked = |pod: &Pod| pod.annotations().contains_key(&mark);

    let probe = common::create_probe_pod(&client, &target_ns, "probe").await?;
    ensure!(
        marked(&probe),
        "a pod in {target_ns} was not initialized by the legacy initializer: annotations {:?}",
        probe.annotations()
    );
    for pod in &pods {
        ensure!(
            !marked(pod),
            "the initializer's own pod {} was initialized by it",
            pod.name_any()
        );
    }

    // Every pod at once: the replacements are created while the configuration (matching all
    // pods) may still exist, so they may get the initializer's name with nobody to remove it
    // but the operator.
    let (deleted, old) = common::delete_own_pods(&ctx, &workload_ns, &pods).await?;
    let pods_path = format!("/api/v1/namespaces/{workload_ns}/pods");
    let replacements = wait::until(
        "replacement pods of the legacy initializer to be ready",
        STEP_TIMEOUT,
        || async {
            let fresh = common::fresh_pods(&ctx, &workload_ns, &name, &old).await?;
            let ready = fresh.iter().filter(|p| ops::pod_ready(p)).count();
            Ok(if ready >= replicas {
                Check::Done(fresh)
            } else {
                let stuck = legacy::pending_on(&client, &pods_path, &pending_name).await?;
                Check::Pending(format!(
                    "replacements: {}; pods pending on {pending_name}: {stuck:?}",
                    ops::pod_states(&fresh)
                ))
            })
        },
    )
    .await?;
    let ready_at = Instant::now();
    for pod in &replacements {
        ensure!(
            !marked(pod),
            "the replacement pod {} was initialized by its own initializer",
            pod.name_any()
        );
    }
    let (_, back) = legacy::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;
    ctx.row
        .update(|row| row.recovery_to_registered = Some(back - deleted));
    eprintln!(
        "{name}: own pods replaced and ready {} after deletion, registered again {} after it",
        s(ready_at - deleted),
        s(back - deleted)
    );
    let after = common::create_probe_pod(&client, &target_ns, "after").await?;
    ensure!(
        marked(&after),
        "after its pods were replaced, a pod in {target_ns} was not initialized"
    );

    for namespace in ["kube-system", ctx.env.operator_namespace.as_str()] {
        let pod =
            common::create_probe_pod(&client, namespace, &format!("e2e-probe-{}", ctx.scope.id()))
                .await?;
        let intercepted = marked(&pod);
        Api::<Pod>::namespaced(client.clone(), namespace)
            .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
            .await?;
        ensure!(
            !intercepted,
            "a pod in {namespace} was initialized by the legacy initializer: annotations {:?}",
            pod.annotations()
        );
    }
    Ok(())
}

/// The secret-guard example as a legacy initializer: a Secret with a 7-character value fails
/// to create with the handler's message (naming the key), as a 4xx, and is not stored (the API
/// server deletes an object whose initialization failed); a long one is created.
pub async fn legacy_denial_fails_the_create_with_the_handlers_message(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let workload_ns = common::workload_namespace(&ctx, "guard-init").await?;
    let target = ctx.scope.target_namespace("apps").await?;
    let name = ctx.scope.name("guard");
    let initializer = fixtures::with_backend(
        &common::secret_guard(&ctx, &name, &workload_ns, json!({}))?,
        LEGACY_BACKEND,
    )?;
    let applied = Instant::now();
    ctx.scope.create_initializer(&initializer).await?;
    let (_, registered) = legacy::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;
    ctx.row
        .update(|row| row.to_registered = Some(registered - applied));

    let secrets = Api::<Secret>::namespaced(client.clone(), &target);
    let short = fixtures::secret("weak", "password", "hunter2");
    match secrets.create(&PostParams::default(), &short).await {
        Ok(_) => bail!("a Secret whose value `password` has 7 characters was created"),
        Err(kube::Error::Api(status)) => {
            ensure!(
                status.message.contains("password"),
                "the failure should carry the handler's message naming `password`; the client saw: {} ({} {})",
                status.message,
                status.code,
                status.reason
            );
            ensure!(
                (400..500).contains(&status.code),
                "a denial should be a 4xx, got {} {}",
                status.code,
                status.reason
            );
            eprintln!(
                "{name}: the weak Secret's create failed: {} {}: {}",
                status.code, status.reason, status.message
            );
        }
        Err(err) => bail!("creating a weak Secret failed in an unexpected way: {err}"),
    }
    // The era's API server answers the waiting create as soon as it sees the failure, and
    // removes the object right after, in the update that recorded it
    // (`shouldDeleteForFailedInitialization`): the answer can reach the client first.
    let secrets_path = format!("/api/v1/namespaces/{target}/secrets");
    wait::until(
        "the refused Secret to be removed".to_string(),
        STEP_TIMEOUT,
        || async {
            Ok(
                match legacy::get_uninitialized(&client, &secrets_path, "weak").await? {
                    None => Check::Done(()),
                    Some(_) => Check::Pending(
                        "the refused Secret is still stored (uninitialized or not)".to_string(),
                    ),
                },
            )
        },
    )
    .await?;
    let strong = fixtures::secret("strong", "password", "correct-horse-battery-staple");
    secrets
        .create(&PostParams::default(), &strong)
        .await
        .context("a Secret whose values are all 20 characters or more was refused")?;
    Ok(())
}

/// The legacy backend asked for where the API server does not serve
/// `admissionregistration.k8s.io/v1alpha1` (the sandbox outside legacy mode, Kubernetes ≥
/// 1.14): `Valid=False` saying so, a Warning Event, and nothing deployed or registered.
pub async fn legacy_backend_without_the_api_is_invalid_and_deploys_nothing(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    ensure!(
        !legacy::served(&client).await?,
        "{} serves admissionregistration.k8s.io/v1alpha1 InitializerConfigurations; this \
         scenario needs an API server without them",
        ctx.env.target.name()
    );
    let workload_ns = common::workload_namespace(&ctx, "init").await?;
    let name = ctx.scope.name("legacy");
    let initializer = fixtures::with_backend(
        &common::default_sidecar(&ctx, &name, &workload_ns)?,
        LEGACY_BACKEND,
    )?;
    ctx.scope.create_initializer(&initializer).await?;
    let invalid = wait_invalid(&client, &name).await?;
    let says = invalid.message.to_lowercase();
    ensure!(
        says.contains("initializerconfiguration") || says.contains("v1alpha1"),
        "Valid=False should say the API server does not serve InitializerConfiguration: {} ({})",
        invalid.message,
        invalid.reason
    );
    let (reason, note) = ops::wait_warning_event(&client, &name, STEP_TIMEOUT).await?;
    eprintln!(
        "{name}: Valid=False ({}): {}; Event {reason}: {note}",
        invalid.reason, invalid.message
    );
    // Nothing deployed, nothing registered, for a while.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let deployment = ops::workload_deployment(&client, &workload_ns, &name).await?;
        ensure!(
            deployment.is_none(),
            "a Deployment was created for an Initializer whose backend is not served"
        );
        ensure!(
            ops::configurations_of(&client, &name).await?.is_empty(),
            "a MutatingWebhookConfiguration was registered for an Initializer that asked for InitializerConfiguration"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pods = ops::workload_pods(&client, &workload_ns, &name).await?;
    ensure!(
        pods.is_empty(),
        "pods were started: {}",
        ops::pod_states(&pods)
    );
    Ok(())
}

/// Waits until the Initializer `name` is `Valid=False`, and returns that condition.
async fn wait_invalid(
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    wait::until(
        format!("Initializer {name} to be Valid=False"),
        STEP_TIMEOUT,
        || async {
            let initializer = ops::initializer(client, name).await?;
            Ok(match ops::condition(&initializer, "Valid") {
                Some(valid) if valid.status == "False" => Check::Done(valid.clone()),
                _ => Check::Pending(ops::describe(&initializer)),
            })
        },
    )
    .await
}

/// Bad names, refused as the era's API server refused them: an `InitializerConfiguration`
/// whose initializer name is not fully qualified (the walkthrough's `sidecar` without a
/// domain) and an object created with an invalid pending name are answered 422 with the
/// messages kube-apiserver 1.13 gave (run by hand here: `tools/legacy-apiserver/README.md`); a legacy Initializer whose pending name would be too long for the API
/// server, or whose rules ask for updates, is `Valid=False` and nothing is deployed.
pub async fn legacy_bad_names_are_refused_with_the_eras_messages(ctx: Ctx) -> anyhow::Result<()> {
    let client = ctx.client();
    let configuration = json!({
        "apiVersion": legacy::API_VERSION,
        "kind": "InitializerConfiguration",
        "metadata": {"name": ctx.scope.name("unqualified")},
        "initializers": [{
            "name": "sidecar",
            "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["deployments"]}],
        }],
    });
    let (code, body) = initializer_test_support::api::raw(
        &client,
        "POST",
        "/apis/admissionregistration.k8s.io/v1alpha1/initializerconfigurations",
        Some("application/json"),
        Some("application/json"),
        Some(configuration),
    )
    .await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(
        code == 422
            && message.contains(
                "initializers[0].name: Invalid value: \"sidecar\": should be a domain with at least three segments separated by dots"
            ),
        "an InitializerConfiguration naming `sidecar` should be refused with 422 and the era's message; got {code}: {body}"
    );

    let target = ctx.scope.target_namespace("apps").await?;
    let object = legacy::with_pending(
        serde_json::to_value(fixtures::nginx_deployment("short", true, 0)?)?,
        &["short.io"],
    );
    let uri = format!(
        "{}?includeUninitialized=true",
        legacy::deployments_path(&target)
    );
    let (code, body) = initializer_test_support::api::raw(
        &client,
        "POST",
        &uri,
        Some("application/json"),
        Some("application/json"),
        Some(object),
    )
    .await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(
        code == 422
            && message.contains("metadata.initializers.pending[0].name")
            && message.contains("\"short.io\""),
        "a Deployment pending on `short.io` should be refused with 422 naming the field; got {code}: {body}"
    );

    let workload_ns = common::workload_namespace(&ctx, "init").await?;
    // 230 characters of Initializer name leave no room for `.<namespace>.initializer-operator.io`
    // within the 253 a pending name may have.
    let long = format!("e2e-{}-{}", ctx.scope.id(), "x".repeat(220));
    let updates = ctx.scope.name("updates");
    let base = |name: &str| {
        fixtures::with_backend(
            &common::default_sidecar(&ctx, name, &workload_ns)?,
            LEGACY_BACKEND,
        )
    };
    ctx.scope.create_initializer(&base(&long)?).await?;
    let mut on_updates = base(&updates)?;
    for rule in &mut on_updates.spec.rules {
        rule.operations = vec![
            initializer_crds::Operation::Create,
            initializer_crds::Operation::Update,
        ];
    }
    ctx.scope.create_initializer(&on_updates).await?;
    for (name, says) in [(&long, "pending name"), (&updates, "operations")] {
        let invalid = wait_invalid(&client, name).await?;
        ensure!(
            invalid.message.contains(says),
            "Initializer {name} should be Valid=False about its {says}: {} ({})",
            invalid.message,
            invalid.reason
        );
        eprintln!(
            "{}: Valid=False: {}",
            &name[..name.len().min(40)],
            invalid.message
        );
    }
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        for name in [&long, &updates] {
            ensure!(
                ops::workload_pods(&client, &workload_ns, name)
                    .await?
                    .is_empty()
                    && legacy::configurations_of(&client, name).await?.is_empty(),
                "something was deployed or registered for the invalid Initializer {name}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// The controller mode's side of the forged mark: once the frozen legacy initializer's
/// configuration is removed, Deployments are created (no longer pending on anything) carrying
/// the mark as an author can write it (unsigned, a made-up MAC, a genuine mark copied from
/// another object) and one without. Once the initializer is back, the operator's count of missed
/// initializations holds every one of them: before the marks were signed, only the unmarked
/// one. (Objects pending when the configuration goes are released by the operator and reported
/// in `status.details.releasedObjects`, not in this count; the window opens at the removal.)
pub async fn legacy_forged_marks_do_not_hide_objects_from_the_missed_count(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let sidecar = registered_legacy_sidecar(&ctx, "forged", Health::default()).await?;
    let path = legacy::deployments_path(&sidecar.target_ns);
    let genuine = common::create_nginx(&ctx, &sidecar.target_ns, "genuine", true).await?;
    ensure!(
        fixtures::has_sidecar(&genuine),
        "the initializer should inject before the outage"
    );
    let genuine_mark = forgery::mark_of(&genuine)
        .context("the initialized Deployment carries no mark")?
        .to_string();
    eprintln!("{}: a genuine mark: {genuine_mark}", sidecar.name);

    let frozen_wall = k8s_openapi::jiff::Timestamp::now();
    let frozen_at = Instant::now();
    let frozen = freeze_all(&ctx, &sidecar).await?;
    let created = async {
        let (removed_at, released_at) = measure_release(&ctx, &sidecar, &path, frozen_at).await?;
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let mut marks: Vec<(&str, Option<String>)> = forgery::forgeries(&genuine_mark, now)?
            .into_iter()
            .map(|(what, mark)| (what, Some(mark)))
            .collect();
        marks.push(("no mark", None));
        let mut created = Vec::new();
        for (n, (what, mark)) in marks.into_iter().enumerate() {
            let mut object =
                serde_json::to_value(fixtures::nginx_deployment(&format!("forged-{n}"), true, 0)?)?;
            if let Some(mark) = mark {
                object["metadata"]["annotations"][forgery::MARK] = json!(mark);
            }
            let body = legacy::create_uninitialized(&client, &path, &object).await?;
            ensure!(
                legacy::is_initialized(&body),
                "{what}: created after the configuration was removed, it should pend on nothing: {body}"
            );
            created.push((what, body["metadata"]["name"].clone()));
        }
        anyhow::Ok((created, removed_at, released_at))
    }
    .await;
    let thawed = thaw_all(&ctx, &sidecar, &frozen).await;
    let (created, removed_at, released_at) = created?;
    thawed?;
    eprintln!(
        "{}: configuration removed {} after the freeze (pending objects released {} after it); \
         then {} Deployments created with forged or no marks",
        sidecar.name,
        s(removed_at - frozen_at),
        s(released_at - frozen_at),
        created.len(),
    );
    let stored = legacy::list(&client, &path, true).await?;
    for (what, name) in &created {
        let object = stored
            .iter()
            .find(|d| d["metadata"]["name"] == *name)
            .with_context(|| format!("{what}: {name} is gone"))?;
        ensure!(
            !legacy::template_containers(object)
                .iter()
                .any(|c| c == SIDECAR_CONTAINER),
            "{what}: {name} was created while the initializer was out, yet injected: {object}"
        );
    }
    legacy::wait_registered(&client, &sidecar.name, REGISTER_TIMEOUT).await?;
    crate::failure::check_missed(&ctx, &sidecar.name, frozen_wall, created.len()).await
}

/// Freezes every pod of the legacy initializer; returns their names.
async fn freeze_all(ctx: &Ctx, sidecar: &LegacySidecar) -> anyhow::Result<Vec<String>> {
    common::freeze_pods(ctx, &sidecar.workload_ns, &sidecar.name).await
}

/// Thaws the given pods (ones that are gone are skipped).
async fn thaw_all(ctx: &Ctx, sidecar: &LegacySidecar, pods: &[String]) -> anyhow::Result<()> {
    common::thaw_pods(ctx, &sidecar.workload_ns, &sidecar.name, pods).await
}

/// Waits for a pod in `namespace` whose name `matches`.
async fn wait_pod_of(
    ctx: &Ctx,
    namespace: &str,
    matches: impl Fn(&str) -> bool,
) -> anyhow::Result<Pod> {
    let client = ctx.client();
    let matches = &matches;
    wait::until(
        format!("a pod of the Deployment in {namespace}"),
        STEP_TIMEOUT,
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), namespace)
                .list(&ListParams::default())
                .await?;
            Ok(
                match pods.items.into_iter().find(|p| matches(&p.name_any())) {
                    Some(pod) => Check::Done(pod),
                    None => Check::Pending("no pod yet".to_string()),
                },
            )
        },
    )
    .await
}
