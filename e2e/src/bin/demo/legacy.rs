//! `make run LEGACY=1`: the same safety story on the Kubernetes 1.7 Initializers, on the
//! sandbox in legacy mode. The Initializer asks for `spec.backend: InitializerConfiguration`:
//! the operator runs the initializer as a controller, registers an `InitializerConfiguration`
//! once a canary comes back initialized, and when the initializer stops it removes the
//! configuration and releases the objects left pending on it (the walkthrough's section 4,
//! done by hand there).

use std::time::{Duration, Instant};

use anyhow::Context;
use initializer_e2e::env::Env;
use initializer_e2e::fixtures::{self, Health, LEGACY_BACKEND};
use initializer_e2e::legacy::{self, InitializerConfiguration};
use initializer_e2e::load::Attempt;
use initializer_e2e::ops;
use initializer_e2e::watch::{Change, Recorder};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::{
    APPS_NS, INITIALIZER, TIMEOUT, WORKLOAD_NS, apply_deployment, apply_initializer, explain,
    look_around, note_first, prepare_namespaces, print_from, print_pods, recover, say,
    settled_after, step, wait_app_pod, web_load,
};

/// The story, act by act; waits for Ctrl-C at the end.
pub async fn story(env: &Env) -> anyhow::Result<()> {
    let client = env.client();
    explain(env);

    step(
        "1. the walkthrough's sidecar initializer, registered the Kubernetes 1.7 way (spec.backend: InitializerConfiguration)",
    );
    let target = prepare_namespaces(env, &client).await?;
    let initializer = fixtures::with_backend(
        &fixtures::sidecar_initializer(INITIALIZER, WORKLOAD_NS, &target, Health::default())?,
        LEGACY_BACKEND,
    )?;
    let configurations: Recorder<InitializerConfiguration> =
        Recorder::start(Api::all(client.clone()), watcher::Config::default(), |c| {
            legacy::belongs_to(c, INITIALIZER)
        });
    let applied = apply_initializer(&client, &initializer).await?;
    say(&format!(
        "applied Initializer {INITIALIZER} with backend {LEGACY_BACKEND}: the initializer runs as a controller watching Deployments with includeUninitialized=true"
    ));
    let (configuration, registered) =
        legacy::wait_registered(&client, INITIALIZER, TIMEOUT).await?;
    let pending_name = configuration.names().into_iter().next().unwrap_or_default();
    say(&format!(
        "registered {:.1}s later, once its pods were ready and a canary created pending on it came back initialized:",
        (registered - applied).as_secs_f64()
    ));
    say(&format!(
        "  InitializerConfiguration {}: initializer {pending_name} for {:?}",
        configuration.name_any(),
        configuration
            .initializers
            .iter()
            .flat_map(|i| i.rules.iter().flat_map(|r| r.resources.clone()))
            .collect::<Vec<_>>()
    ));
    print_pods(&client, WORKLOAD_NS).await?;

    step(
        "2. the walkthrough's nginx Deployments: the annotated one gets the sidecar, the other is untouched",
    );
    for (name, annotated) in [("nginx", false), ("nginx-with-annotation", true)] {
        let deployment = fixtures::nginx_deployment(name, annotated, 1)?;
        let created = apply_deployment(&client, &deployment)
            .await
            .with_context(|| format!("failed to apply Deployment {name}"))?;
        say(&format!(
            "Deployment {name} created with containers {:?}",
            fixtures::template_containers(&created)
        ));
        wait_app_pod(&client, name).await?;
    }
    print_pods(&client, APPS_NS).await?;
    let path = legacy::deployments_path(APPS_NS);
    let watched = serde_json::to_value(fixtures::nginx_deployment("nginx-watched", true, 0)?)?;
    let created_at = Instant::now();
    let created = legacy::create_uninitialized(&client, &path, &watched).await?;
    say(&format!(
        "created nginx-watched with ?includeUninitialized=true: answered at once, pending on {:?}",
        legacy::pending_names(&created)
    ));
    let initialized = legacy::wait_initialized(&client, &path, "nginx-watched", TIMEOUT).await?;
    say(&format!(
        "+{:.2}s the initializer injected it and removed its name in one update: containers {:?}, pending {:?}",
        created_at.elapsed().as_secs_f64(),
        legacy::template_containers(&initialized),
        legacy::pending_names(&initialized)
    ));

    step(
        "3. the initializer stops: every pod frozen (the walkthrough's section 4: creates hang, objects stay uninitialized)",
    );
    let pods = ops::workload_pod_names(&client, WORKLOAD_NS, INITIALIZER).await?;
    let frozen_at = Instant::now();
    for pod in &pods {
        env.target.freeze_pod(WORKLOAD_NS, pod).await?;
    }
    let load = web_load(&client)?;
    say(&format!(
        "froze {}; creating an annotated Deployment every 0.5s (each create waits for its pending list to empty)",
        pods.join(", ")
    ));
    let stuck = serde_json::to_value(fixtures::nginx_deployment("nginx-stuck", true, 0)?)?;
    let stuck = legacy::create_uninitialized(&client, &path, &stuck).await?;
    let hidden = !legacy::list(&client, &path, false)
        .await?
        .iter()
        .any(|d| d["metadata"]["name"] == "nginx-stuck");
    say(&format!(
        "nginx-stuck created uninitialized, pending on {:?}: {} `kubectl get deploy`, listed only with includeUninitialized=true",
        legacy::pending_names(&stuck),
        if hidden {
            "hidden from"
        } else {
            "(unexpectedly) shown by"
        }
    ));
    let mut printed = 0;
    let mut removed: Option<Instant> = None;
    let mut released: Option<Instant> = None;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        note_first(
            &configurations,
            frozen_at,
            &mut removed,
            |s| s.change == Change::Deleted,
            "the operator removed the InitializerConfiguration: new objects are no longer assigned to the initializer",
        );
        if removed.is_some()
            && released.is_none()
            && legacy::pending_on(&client, &path, &pending_name)
                .await?
                .is_empty()
        {
            let at = Instant::now();
            released = Some(at);
            say(&format!(
                "+{:.1}s no object is pending on {pending_name} any more: the operator removed the dead name from every object still waiting on it",
                (at - frozen_at).as_secs_f64()
            ));
        }
        let attempts = print_from(load.attempts(), printed, frozen_at, not_injected(removed));
        printed = attempts.len();
        if settled_after(&attempts, released) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    say("waiting for the creates still in flight ...");
    let attempts = print_from(load.stop().await, printed, frozen_at, not_injected(removed));
    let failed = attempts.iter().filter(|a| !a.succeeded()).count();
    let longest = attempts
        .iter()
        .map(|a| a.finished - a.started)
        .max()
        .unwrap_or_default();
    say(&format!(
        "{failed} of {} creates failed; the longest waited {:.1}s (the API server of that era gave up after 30s)",
        attempts.len(),
        longest.as_secs_f64()
    ));
    if let Some(object) = legacy::get_uninitialized(&client, &path, "nginx-stuck").await? {
        say(&format!(
            "nginx-stuck now: pending {:?}, containers {:?} (released without the sidecar; recreate it once the initializer is back)",
            legacy::pending_names(&object),
            legacy::template_containers(&object)
        ));
    }
    if let Ok(initializer) = ops::initializer(&client, INITIALIZER).await {
        let phase = initializer
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .map_or("-".to_string(), |p| format!("{p:?}"));
        let responding = ops::condition(&initializer, "Responding")
            .map_or("-".to_string(), |c| format!("{} ({})", c.status, c.reason));
        say(&format!(
            "Initializer status: phase {phase}, Responding={responding}, releasedObjects {}",
            legacy::detail(&initializer, legacy::RELEASED_DETAIL).unwrap_or("-")
        ));
    }
    if let Ok(note) = legacy::wait_event(
        &client,
        INITIALIZER,
        legacy::RELEASED_EVENT_REASON,
        Duration::from_secs(5),
    )
    .await
    {
        say(&format!("Event {}: {note}", legacy::RELEASED_EVENT_REASON));
    }

    let what = "the InitializerConfiguration to come back";
    let again = "once the canary came back initialized";
    recover(env, &pods, &configurations, what, again).await?;

    step("done: the sandbox keeps running until Ctrl-C");
    look_around(
        env,
        &[
            "  kubectl get initializers".to_string(),
            "  kubectl get initializerconfigurations".to_string(),
            format!("  kubectl get deploy,pods -n {APPS_NS}"),
            format!(
                "  kubectl get --raw '{}?includeUninitialized=true'   # today's kubectl has no --include-uninitialized",
                legacy::deployments_path(APPS_NS)
            ),
        ],
    )
    .await
}

/// The legacy story's words for a create that was not injected; `removed`: when the
/// configuration was seen removed (a create started before it was held, then released).
fn not_injected(removed: Option<Instant>) -> impl Fn(&Attempt, f64, f64) -> String {
    move |attempt, started, took| {
        if removed.is_some_and(|at| attempt.started >= at) {
            format!(
                "+{started:.1}s create ok after {took:.2}s, not injected: created after the configuration was removed"
            )
        } else {
            format!(
                "+{started:.1}s create ok after {took:.2}s, not injected: it waited on the dead initializer until the operator released it"
            )
        }
    }
}
