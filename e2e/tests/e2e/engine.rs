//! A preset in the API server: installed as a user installs it (the chart with
//! `policyCanaryNamespace`, the canary ClusterRole bound there by the administrator), a preset
//! Initializer is registered as a webhook, proven, and moved into the API server under the
//! operator's own ServiceAccount and rights; then every pod of its old webhook is deleted and
//! creates go on being injected, with nothing failed, missed or changed in its status.

use std::time::Instant;

use anyhow::{bail, ensure};
use initializer_crds::constants::INITIALIZED_BY_ANNOTATION;
use initializer_crds::{EngineInForce, Initializer, Phase};
use initializer_e2e::install::ENGINE_LABEL;
use initializer_e2e::runner::Ctx;
use initializer_e2e::timings::{CreateCount, Missed};
use initializer_e2e::{fixtures, ops, wait};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::common::{self, STEP_TIMEOUT};

/// Creates after the webhook's pods are deleted.
const CREATES: usize = 30;

/// The label the scenario's preset injects.
const INJECTED: &str = "e2e.initializer.dev/engine-injected";

/// A preset Initializer the operator moved into the API server.
pub struct InApiServer {
    /// Its name.
    pub name: String,
    /// As applied.
    pub initializer: Initializer,
    /// The namespace whose pods it injects.
    pub target_namespace: String,
}

/// Applies a preset Initializer and waits until it is registered as a webhook, proven, and in
/// the API server (its webhook configuration gone); records both times in the row.
pub async fn preset_in_the_api_server(ctx: &Ctx) -> anyhow::Result<InApiServer> {
    let client = ctx.client();
    let target_namespace = ctx
        .scope
        .namespace("engine", &[(ENGINE_LABEL, "true")])
        .await?;
    let name = ctx.scope.name("engine");
    let initializer = fixtures::initializer(
        &name,
        json!({
            "preset": {"inject": {
                "labels": {INJECTED: "true"},
                "containers": [{"name": "engine-sidecar", "image": "busybox:1.36",
                                "command": ["sleep", "3600"]}]
            }},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaces": {"selector": {"matchLabels": {ENGINE_LABEL: "true"}}},
            "replicas": 1,
        }),
    )?;
    let applied = common::apply_until_registered(ctx, &initializer).await?;

    let in_api_server = wait::until("the preset in the API server", STEP_TIMEOUT, || async {
        let found = ops::initializer(&client, &name).await?;
        let status = found.status.as_ref();
        Ok(
            if status.and_then(|s| s.engine) == Some(EngineInForce::Policy)
                && status.and_then(|s| s.phase) == Some(Phase::InApiServer)
            {
                wait::Check::Done(Instant::now())
            } else {
                wait::Check::Pending(ops::describe(&found))
            },
        )
    })
    .await?;
    ctx.row
        .update(|row| row.to_policy = Some(in_api_server - applied));
    ensure!(
        ops::configurations_of(&client, &name).await?.is_empty(),
        "the webhook configuration is still registered with the policy in force"
    );
    Ok(InApiServer {
        name,
        initializer,
        target_namespace,
    })
}

pub async fn preset_runs_in_the_api_server_once_proven_and_outlives_its_webhook(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let InApiServer {
        name,
        initializer,
        target_namespace: target_ns,
    } = preset_in_the_api_server(&ctx).await?;

    // Every pod of the old webhook deleted at once (the Deployment is being scaled to zero
    // anyway): creates go on, injected by the API server.
    let workload_ns = ops::workload_namespace(&initializer, &ctx.env.operator_namespace);
    let pods = ops::workload_pods(&client, &workload_ns, &name).await?;
    common::delete_own_pods(&ctx, &workload_ns, &pods).await?;
    let api = Api::<Pod>::namespaced(client.clone(), &target_ns);
    let (mut failed, mut uninjected) = (0, 0);
    for i in 0..CREATES {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("app-{i}")},
            "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]},
        }))?;
        match api.create(&PostParams::default(), &pod).await {
            Ok(created) => {
                let labelled = created.labels().get(INJECTED).is_some_and(|v| v == "true");
                let marked = created
                    .annotations()
                    .contains_key(INITIALIZED_BY_ANNOTATION);
                let sidecar = created
                    .spec
                    .as_ref()
                    .is_some_and(|s| s.containers.iter().any(|c| c.name == "engine-sidecar"));
                if !(labelled && sidecar) || marked {
                    uninjected += 1;
                }
            }
            Err(_) => failed += 1,
        }
    }
    let after = ops::initializer(&client, &name).await?;
    let status = after.status.clone().unwrap_or_default();
    let reported = status
        .missed_initializations
        .as_ref()
        .map_or(0, |m| m.count);
    ctx.row.update(|row| {
        row.failed_creates_failure = Some(CreateCount {
            failed,
            total: CREATES,
        });
        row.missed = Some(Missed {
            reported,
            actual: uninjected,
        });
    });
    ensure!(
        failed == 0 && uninjected == 0,
        "with the webhook's pods gone, {failed} of {CREATES} creates failed and {uninjected} were not injected by the policy"
    );
    if status.phase != Some(Phase::InApiServer) || status.last_outage.is_some() {
        bail!(
            "the Initializer's state changed when its webhook's pods went: {}",
            ops::describe(&after)
        );
    }
    Ok(())
}
