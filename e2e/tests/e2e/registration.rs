//! Registration: never before the initializer is ready and answering, and never for its own
//! pods or the system namespaces.

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use initializer_crds::{Phase, images};
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::runner::Ctx;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::watch::{Change, Recorder};
use initializer_e2e::{install, ops};
use initializer_packaging::readiness::deployment_available;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT, s};

/// How long after its pods are ready an Initializer must be registered: the success threshold
/// of probes, 100 ms apart while waiting, takes a few hundred milliseconds; the rest is margin
/// for a busy machine.
const REGISTERED_AFTER_READY: Duration = Duration::from_secs(5);
/// The highest `spec.health.successThreshold` the operator accepts.
const SUCCESS_THRESHOLD_MAX: i32 = 100;

/// Applying an Initializer never yields a configuration while its Deployment is unavailable;
/// it is registered within a bounded time once its pods are ready.
pub async fn initializer_is_registered_only_after_its_pods_are_ready(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();

    // 1. An initializer whose image cannot run: its Deployment never becomes available, so
    //    nothing may ever be registered.
    let stuck_ns = common::workload_namespace(&ctx, "stuck-init").await?;
    let stuck = ctx.scope.name("stuck");
    let mut spec = common::default_sidecar(&ctx, &stuck, &stuck_ns)?;
    spec.spec.image = Some(format!(
        "{}/no-such-initializer:{}",
        images::REGISTRY,
        images::TAG
    ));
    let stuck_configs = common::record_configurations(&ctx, &stuck);
    let stuck_applied = Instant::now();
    ctx.scope.create_initializer(&spec).await?;
    wait::holds_for(
        "no configuration for an initializer whose pods cannot start",
        Duration::from_secs(10),
        || async {
            let initializer = ops::initializer(&client, &stuck).await?;
            let configurations = ops::configurations_of(&client, &stuck).await?;
            Ok(
                if configurations.is_empty() && !ops::status_registered(&initializer) {
                    Ok(())
                } else {
                    Err(format!(
                        "{}; {} configuration(s)",
                        ops::describe(&initializer),
                        configurations.len()
                    ))
                },
            )
        },
    )
    .await?;
    ensure!(
        stuck_configs.additions_since(stuck_applied) == 0,
        "a configuration appeared for the initializer that cannot start: {}",
        stuck_configs.summary()
    );
    let phase = ops::initializer(&client, &stuck)
        .await?
        .status
        .and_then(|s| s.phase);
    ensure!(
        matches!(phase, Some(Phase::Pending) | Some(Phase::Deploying)),
        "an initializer whose pods cannot start should be Pending or Deploying, not {phase:?}"
    );

    // 2. An initializer whose pods become ready but stop answering at once: its probe fails
    //    while its Deployment is available, so it must not be registered until it answers.
    probe_failure_blocks_registration(&ctx).await?;

    // 3. A working initializer: watch its Deployment and its configuration and check the order.
    let workload_ns = common::workload_namespace(&ctx, "init").await?;
    let name = ctx.scope.name("sidecar");
    let initializer = common::default_sidecar(&ctx, &name, &workload_ns)?;
    let deployments: Recorder<Deployment> = common::record_namespaced(&ctx, &workload_ns);
    let configurations = common::record_configurations(&ctx, &name);
    let applied = Instant::now();
    ctx.scope.create_initializer(&initializer).await?;
    ops::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;
    let added = configurations
        .wait_for("the configuration to appear", applied, STEP_TIMEOUT, |s| {
            s.change == Change::Added
        })
        .await?;
    let registered = common::with_spec_values(&configurations, applied).await?;
    ctx.row
        .update(|row| row.to_registered = Some(registered.at - applied));
    let available = deployments
        .first_after(applied, |s| deployment_available(&s.object))
        .with_context(|| {
            format!(
                "the configuration appeared {} after apply, but the Deployment was never seen available \
                 before it; deployments: {}; configurations: {}",
                s(added.at - applied),
                deployments.summary(),
                configurations.summary()
            )
        })?;
    if available.at > added.at {
        bail!(
            "the configuration appeared {} before the Deployment was available; deployments: {}; configurations: {}",
            s(available.at - added.at),
            deployments.summary(),
            configurations.summary()
        );
    }
    let after_ready = registered.at - available.at;
    ctx.row
        .update(|row| row.available_to_registered = Some(after_ready));
    eprintln!(
        "{name}: registered {} after its Deployment was available (failing open from {}, while the route was proven)",
        s(after_ready),
        s(added.at - available.at)
    );
    ensure!(
        after_ready <= REGISTERED_AFTER_READY,
        "registered {} after the Deployment became available (bound {})",
        s(after_ready),
        s(REGISTERED_AFTER_READY)
    );
    let initializer = ops::initializer(&client, &name).await?;
    ensure!(
        initializer.status.as_ref().and_then(|s| s.phase) == Some(Phase::Registered),
        "registered initializer reports {}",
        ops::describe(&initializer)
    );
    for type_ in ["Valid", "Available", "Responding", "Registered"] {
        let condition = ops::condition(&initializer, type_);
        ensure!(
            condition.is_some_and(|c| c.status == "True"),
            "condition {type_} of a registered initializer should be True: {}",
            ops::describe(&initializer)
        );
    }
    eprintln!(
        "initializer_is_registered_only_after_its_pods_are_ready: available after {}, registered {} later",
        s(available.at - applied),
        s(after_ready)
    );
    Ok(())
}

/// Freezes an initializer's pods the moment its Deployment is seen available (the highest
/// success threshold, a hundred probes 100 ms apart while waiting, leaves ten seconds before it
/// could register: the Deployment's status and the signals through the node's runtime take
/// seconds of their own on a loaded machine), checks that nothing is registered while they do
/// not answer, then thaws them and checks it registers only then.
async fn probe_failure_blocks_registration(ctx: &Ctx) -> anyhow::Result<()> {
    let client = ctx.client();
    let workload_ns = common::workload_namespace(ctx, "mute-init").await?;
    let name = ctx.scope.name("mute");
    let health = Health {
        success_threshold: Some(SUCCESS_THRESHOLD_MAX),
        ..Health::default()
    };
    let initializer =
        fixtures::sidecar_initializer(&name, &workload_ns, &ctx.scope.target_selector(), health)?;
    let deployments: Recorder<Deployment> = common::record_namespaced(ctx, &workload_ns);
    let configurations = common::record_configurations(ctx, &name);
    let applied = Instant::now();
    ctx.scope.create_initializer(&initializer).await?;
    deployments
        .wait_for(
            "the Deployment to be available",
            applied,
            REGISTER_TIMEOUT,
            |s| deployment_available(&s.object),
        )
        .await?;
    let available_at = Instant::now();
    let pods = common::pod_names(ctx, &workload_ns, &name).await?;
    futures::future::try_join_all(
        pods.iter()
            .map(|pod| ctx.env.target.freeze_pod(&workload_ns, pod)),
    )
    .await?;
    let frozen_at = Instant::now();
    ensure!(
        configurations.additions_since(applied) == 0,
        "the configuration appeared before the initializer had answered {SUCCESS_THRESHOLD_MAX} \
         probes (Deployment seen available {} after apply, pods frozen {} later): {}",
        s(available_at - applied),
        s(frozen_at - available_at),
        configurations.summary()
    );
    let held = wait::holds_for(
        "no configuration while the probe fails",
        Duration::from_secs(8),
        || async {
            let configurations = ops::configurations_of(&client, &name).await?;
            Ok(if configurations.is_empty() {
                Ok(())
            } else {
                Err("a configuration appeared".to_string())
            })
        },
    )
    .await;
    common::thaw_pods(ctx, &workload_ns, &name, &pods).await?;
    held.with_context(|| format!("configurations: {}", configurations.summary()))?;
    let thawed_at = Instant::now();
    let added = configurations
        .wait_change(
            "the configuration once the initializer answers",
            thawed_at,
            REGISTER_TIMEOUT,
            Change::Added,
        )
        .await?;
    eprintln!(
        "probe failing from {} after apply: nothing registered; registered {} after the thaw",
        s(frozen_at - applied),
        s(added.at - thawed_at)
    );
    Ok(())
}

/// An Initializer whose rules match every pod keeps working when its own pods are deleted and
/// recreated (no deadlock), and pods in the system namespaces and the operator's namespace are
/// never sent to it.
pub async fn own_pods_and_system_namespaces_are_never_intercepted(ctx: Ctx) -> anyhow::Result<()> {
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
            // Every namespace, the policy canary included: this is about the webhook's own
            // pods, so the webhook it stays.
            "engine": "Webhook",
        }),
    )?;
    common::apply_until_registered(&ctx, &initializer).await?;
    let pods = ops::wait_pods_ready(&client, &workload_ns, &name, 2, STEP_TIMEOUT).await?;
    let marked = |pod: &Pod| pod.annotations().contains_key(&mark);

    // A pod in a selected namespace is intercepted: the preset's annotation proves it.
    let probe = common::create_probe_pod(&client, &target_ns, "probe").await?;
    ensure!(
        marked(&probe),
        "a pod in {target_ns} was not intercepted: annotations {:?}",
        probe.annotations()
    );

    // Its own pods carry the exclusion label and were never intercepted.
    for pod in &pods {
        ensure!(
            !marked(pod),
            "the initializer's own pod {} was intercepted",
            pod.name_any()
        );
    }

    // Delete every pod of the initializer at once: the replacements must start (they are not
    // intercepted, so no deadlock) and the initializer must come back.
    let (deleted, old) = common::delete_own_pods(&ctx, &workload_ns, &pods).await?;
    let replacements = wait::until(
        "replacement pods of the initializer to be ready",
        STEP_TIMEOUT,
        || async {
            let fresh = common::fresh_pods(&ctx, &workload_ns, &name, &old).await?;
            let ready = fresh.iter().filter(|p| ops::pod_ready(p)).count();
            Ok(if ready >= 2 {
                wait::Check::Done(fresh)
            } else {
                wait::Check::Pending(format!("replacements: {}", ops::pod_states(&fresh)))
            })
        },
    )
    .await?;
    for pod in &replacements {
        ensure!(
            !marked(pod),
            "the replacement pod {} was intercepted by its own initializer",
            pod.name_any()
        );
    }
    let (_, back) = ops::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;
    eprintln!(
        "own pods replaced and registered again {} after deletion",
        s(back - deleted)
    );
    let after = common::create_probe_pod(&client, &target_ns, "after").await?;
    ensure!(
        marked(&after),
        "after its pods were replaced, a pod in {target_ns} was not intercepted"
    );

    // System namespaces and the operator's namespace are never intercepted.
    let namespaces = Api::<Namespace>::all(client.clone());
    for namespace in [
        "kube-system",
        "kube-node-lease",
        ctx.env.operator_namespace.as_str(),
    ] {
        if namespaces.get_opt(namespace).await?.is_none() {
            bail!(
                "namespace {namespace} does not exist; the API server should create the system namespaces"
            );
        }
        let pod =
            common::create_probe_pod(&client, namespace, &format!("e2e-probe-{}", ctx.scope.id()))
                .await?;
        let intercepted = marked(&pod);
        Api::<Pod>::namespaced(client.clone(), namespace)
            .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
            .await?;
        ensure!(
            !intercepted,
            "a pod in {namespace} was sent to the initializer: annotations {:?}",
            pod.annotations()
        );
    }
    Ok(())
}

/// What the API server and the operator logged of the Initializer `name` (its webhooks are named
/// after it): why the route checks went unanswered, for a scenario that waited in vain.
async fn what_the_route_checks_met(ctx: &Ctx, name: &str) -> String {
    let client = ctx.client();
    let api_server =
        ops::log_lines_mentioning(&client, "kube-system", "component=kube-apiserver", name, 20)
            .await;
    let operator = ops::log_lines_mentioning(
        &client,
        &ctx.env.operator_namespace,
        install::OPERATOR_POD_SELECTOR,
        name,
        40,
    )
    .await;
    let show = |lines: anyhow::Result<Vec<String>>| match lines {
        Ok(lines) if lines.is_empty() => "nothing".to_string(),
        Ok(lines) => lines.join("\n"),
        Err(e) => format!("{e:#}"),
    };
    format!(
        "the route checks never proved the route once it was given back; the API server logged:\n{}\nthe operator logged:\n{}",
        show(api_server),
        show(operator)
    )
}

/// How long the scenario below holds the API server's route refused once the initializer is
/// ready: long enough for the route check to back off to its longest interval.
const ROUTE_REFUSED_FOR: Duration = Duration::from_secs(8);

/// The API server's own node refuses the initializer's Service (as kube-proxy there does until
/// it routes new endpoints, or a firewall between the control plane and the nodes): the
/// initializer, ready and answering the operator's direct probes, is registered failing open and
/// says `ProvingRoute`, and creates go through untouched rather than refused. Once the route
/// works it is registered with the spec's `failurePolicy: Fail` and injects.
pub async fn a_route_the_api_server_lacks_fails_open_until_it_works(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let workload_ns = common::workload_namespace(&ctx, "routeless-init").await?;
    let target_ns = ctx.scope.target_namespace("routeless-apps").await?;
    let name = ctx.scope.name("routeless");
    let mut initializer = common::default_sidecar(&ctx, &name, &workload_ns)?;
    ensure!(
        initializer.spec.failure_policy == initializer_crds::FailurePolicy::Fail,
        "the scenario needs failurePolicy Fail, which a refused route would turn into refused creates"
    );
    // Suspended, the operator deploys the workload and its Service but registers nothing: the
    // route is refused before anything could prove it, however fast the pods come up.
    initializer.spec.suspend = true;
    let applied = Instant::now();
    ctx.scope.create_initializer(&initializer).await?;
    let ip = wait::until("the initializer's Service", STEP_TIMEOUT, || async {
        Ok(
            match ops::workload_service_ip(&client, &workload_ns, &name).await? {
                Some(ip) => Check::Done(ip),
                None => Check::Pending("no Service with a cluster IP yet".to_string()),
            },
        )
    })
    .await?;
    let block = ctx.env.target.refuse_from_api_server(&ip, 443).await?;
    ops::set_suspend(&client, &name, false).await?;
    let proving = wait::until(
        "the configuration failing open while the route is proven",
        REGISTER_TIMEOUT,
        || async {
            let configurations = ops::configurations_of(&client, &name).await?;
            Ok(match configurations.first() {
                Some(c) if ops::is_proving(c) => Check::Done(Instant::now()),
                Some(c) => Check::Pending(format!("{} holds no route check", c.name_any())),
                None => Check::Pending("no configuration yet".to_string()),
            })
        },
    )
    .await?;
    let proving_route = |initializer: &initializer_crds::Initializer| {
        ops::condition(initializer, "Registered")
            .is_some_and(|c| c.status == "False" && c.reason == "ProvingRoute")
    };
    wait::until("the status to say ProvingRoute", STEP_TIMEOUT, || async {
        let current = ops::initializer(&client, &name).await?;
        Ok(if proving_route(&current) {
            Check::Done(())
        } else {
            Check::Pending(ops::describe(&current))
        })
    })
    .await?;
    // Held refused: never registered, and no configuration takes the spec's values. A probe
    // that fails meanwhile withdraws the proving configuration until the initializer is ready
    // again (the status then says WaitingForReadiness): that fails open too, so it is counted,
    // not refused.
    let (mut checks, mut withdrawn) = (0, 0);
    while proving.elapsed() < ROUTE_REFUSED_FOR {
        let configurations = ops::configurations_of(&client, &name).await?;
        ensure!(
            configurations.iter().all(ops::is_proving),
            "registered with the spec's values {} after the route was refused: {:?}",
            s(proving.elapsed()),
            configurations
                .iter()
                .map(ResourceExt::name_any)
                .collect::<Vec<_>>()
        );
        let current = ops::initializer(&client, &name).await?;
        let waiting = ops::condition(&current, "Registered")
            .is_some_and(|c| c.status == "False" && c.reason == "WaitingForReadiness");
        ensure!(
            !ops::status_registered(&current) && (proving_route(&current) || waiting),
            "while the route is refused Registered should be False/ProvingRoute (or \
             WaitingForReadiness, the proof withdrawn after a failed probe): {}",
            ops::describe(&current)
        );
        withdrawn += usize::from(waiting);
        checks += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let passed = common::create_nginx(&ctx, &target_ns, "nginx", true)
        .await
        .context("a create was refused while the route was: the configuration did not fail open")?;
    ensure!(
        fixtures::template_containers(&passed) == ["nginx"],
        "the API server reached the initializer through a refused route: {:?}",
        fixtures::template_containers(&passed)
    );
    let message = ops::initializer(&client, &name)
        .await
        .ok()
        .and_then(|i| ops::condition(&i, "Registered").map(|c| c.message.clone()))
        .unwrap_or_default();
    let refused = block.matched().await?;
    ensure!(
        refused > 0,
        "the rule refused no connection of the API server's: the route was never refused, and the scenario proved nothing"
    );
    block.lift().await?;
    let lifted = Instant::now();
    let (configuration, _) = match ops::wait_registered(&client, &name, REGISTER_TIMEOUT).await {
        Ok(registered) => registered,
        Err(e) => return Err(e.context(what_the_route_checks_met(&ctx, &name).await)),
    };
    let back = lifted.elapsed();
    ensure!(
        !ops::is_proving(&configuration)
            && configuration
                .webhooks
                .iter()
                .flatten()
                .all(|w| w.failure_policy.as_deref() == Some("Fail")),
        "once the route works the spec's failurePolicy Fail should be registered: {:?}",
        configuration.webhooks
    );
    let injected = common::create_nginx(&ctx, &target_ns, "nginx-routed", true).await?;
    ensure!(
        fixtures::has_sidecar(&injected),
        "not injected once registered: {:?}",
        fixtures::template_containers(&injected)
    );
    ctx.row
        .update(|row| row.to_registered = Some(lifted - applied + back));
    eprintln!(
        "{name}: failing open {} with the route refused ({refused} connections refused, {checks} checks, {withdrawn} with the proof withdrawn; Registered said: {message}); registered {} after the route came back",
        s(ROUTE_REFUSED_FOR),
        s(back)
    );
    Ok(())
}
