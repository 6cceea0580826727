//! The Initializer's life as an administrator drives it: deletion, suspend, refusals of bad
//! input, and an operator that dies in the middle of its work.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use initializer_crds::{Initializer, Phase};
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::load;
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::watch::{Change, Recorder};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT, s};

/// Deleting an Initializer removes its configuration before its workload goes, and creates
/// keep succeeding throughout.
pub async fn deletion_removes_the_configuration_before_the_workload(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let sidecar = common::registered_sidecar(&ctx, "delete", Health::default()).await?;
    let deployments: Recorder<Deployment> = common::record_namespaced(&ctx, &sidecar.workload_ns);
    let pods: Recorder<Pod> = common::record_namespaced(&ctx, &sidecar.workload_ns);
    let load = common::deployment_load(&ctx, &sidecar.target_ns, "load")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deleted_at = Instant::now();
    Api::<Initializer>::all(client.clone())
        .delete(&sidecar.name, &DeleteParams::default())
        .await
        .with_context(|| format!("failed to delete Initializer {}", sidecar.name))?;
    let going = |s: &initializer_e2e::watch::Seen<Deployment>| {
        s.change == Change::Deleted || s.object.metadata.deletion_timestamp.is_some()
    };
    let removed = sidecar.removed_after(deleted_at).await;
    let workload_going = deployments
        .wait_for("the workload to go", deleted_at, STEP_TIMEOUT, going)
        .await;
    let gone = wait::until(
        format!("Initializer {} to be gone", sidecar.name),
        STEP_TIMEOUT,
        || async {
            Ok(
                match Api::<Initializer>::all(client.clone())
                    .get_opt(&sidecar.name)
                    .await?
                {
                    None => Check::Done(Instant::now()),
                    Some(initializer) => Check::Pending(format!(
                        "finalizers {:?}, {}",
                        initializer.finalizers(),
                        ops::describe(&initializer)
                    )),
                },
            )
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let attempts = load.stop().await;
    let removed_seen = removed?;
    let workload_seen = workload_going?;
    let removed = removed_seen.at;
    let workload_going = workload_seen.at;
    gone?;
    let failed = load::count_in(&attempts, deleted_at, None);
    ctx.row.update(|row| {
        row.failure_to_deregistered = Some(removed - deleted_at);
        row.failed_creates_failure = Some(failed);
    });
    ensure!(
        removed_seen.before(&workload_seen),
        "the workload started going before the configuration was removed (resourceVersions {:?} \
         and {:?}); configurations: {}; deployments: {}",
        removed_seen.resource_version(),
        workload_seen.resource_version(),
        sidecar.configurations.summary(),
        deployments.summary()
    );
    if let Some(pod_going) = pods.first_after(deleted_at, |s| {
        s.change == Change::Deleted || s.object.metadata.deletion_timestamp.is_some()
    }) {
        ensure!(
            removed_seen.before(&pod_going),
            "pod {} started going before the configuration was removed (resourceVersions {:?} and {:?})",
            pod_going.name,
            removed_seen.resource_version(),
            pod_going.resource_version()
        );
    }
    ensure!(
        failed.failed == 0,
        "{}/{} creates failed while the Initializer was being deleted: {:?}",
        failed.failed,
        failed.total,
        load::errors(&attempts)
    );
    eprintln!(
        "{}: configuration removed {} after the delete, workload going {} after it; {} creates, none failed",
        sidecar.name,
        s(removed - deleted_at),
        s(workload_going.saturating_duration_since(removed)),
        failed.total
    );
    Ok(())
}

/// `suspend: true` deregisters and nothing registers again until it is false; the workload
/// keeps running meanwhile.
pub async fn suspended_initializer_stays_deregistered_until_resumed(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let sidecar = common::registered_sidecar(&ctx, "suspend", Health::default()).await?;
    let suspended_at = Instant::now();
    ops::set_suspend(&client, &sidecar.name, true).await?;
    let removed = sidecar.removed_after(suspended_at).await?.at;
    ops::wait_phase(&client, &sidecar.name, Phase::Suspended, STEP_TIMEOUT).await?;
    ctx.row
        .update(|row| row.failure_to_deregistered = Some(removed - suspended_at));

    // Longer than the success threshold of probes, with the initializer healthy all along.
    let health = sidecar.health();
    let hold = Duration::from_secs(
        u64::try_from(health.period_seconds * health.success_threshold).unwrap_or(3) + 3,
    );
    wait::holds_for("no configuration while suspended", hold, || async {
        let configurations = ops::configurations_of(&client, &sidecar.name).await?;
        let ready = ops::workload_pods(&client, &sidecar.workload_ns, &sidecar.name)
            .await?
            .iter()
            .filter(|p| ops::pod_ready(p))
            .count();
        Ok(if !configurations.is_empty() {
            Err(format!(
                "{} configuration(s) while suspended",
                configurations.len()
            ))
        } else if ready == 0 {
            Err("the workload stopped while suspended; it should keep running".to_string())
        } else {
            Ok(())
        })
    })
    .await?;
    let untouched = common::create_nginx(&ctx, &sidecar.target_ns, "while-suspended", true).await?;
    ensure!(
        !fixtures::has_sidecar(&untouched),
        "a Deployment was injected while the initializer was suspended"
    );

    let resumed_at = Instant::now();
    ops::set_suspend(&client, &sidecar.name, false).await?;
    let back = sidecar.back_after(resumed_at).await?.at;
    ctx.row
        .update(|row| row.recovery_to_registered = Some(back - resumed_at));
    let registrations = sidecar.configurations.additions_since(suspended_at);
    ensure!(
        registrations == 1,
        "expected one registration after resuming, saw {registrations}: {} (written: {})",
        sidecar.configurations.summary(),
        sidecar.configurations.provenance()
    );
    let injected = common::create_nginx(&ctx, &sidecar.target_ns, "after-resume", true).await?;
    ensure!(
        fixtures::has_sidecar(&injected),
        "injection did not resume after suspend was lifted"
    );
    Ok(())
}

/// Initializers that would intercept what must never be intercepted, or carry invalid fields,
/// are refused by the schema or marked `Valid=False`, and nothing is registered for them.
pub async fn bad_input_is_refused_and_registers_nothing(ctx: Ctx) -> anyhow::Result<()> {
    let client = ctx.client();
    let workload_ns = common::workload_namespace(&ctx, "init").await?;
    // A namespace nobody allowed for workloads (no initializer.dev/workloads label).
    let unlabelled_ns = ctx.scope.outside_namespace("unlabelled-init").await?;
    let image = initializer_crds::images::image("sidecar-initializer");
    let pods = json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]);
    let rules = |group: &str, version: &str, resource: &str| json!([{"apiGroups": [group], "apiVersions": [version], "resources": [resource]}]);
    let mut cases: Vec<(&str, &str, Value)> = vec![
        (
            "webhooks",
            "intercepts admission registration",
            json!({"rules": rules("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")}),
        ),
        (
            "leases",
            "intercepts leases",
            json!({"rules": rules("coordination.k8s.io", "v1", "leases")}),
        ),
        (
            "itself",
            "intercepts Initializers",
            json!({"rules": rules("initializer.dev", "v1alpha1", "initializers")}),
        ),
        (
            "everything",
            "intercepts every core resource",
            json!({"rules": rules("", "v1", "*")}),
        ),
        (
            "kube-system",
            "targets kube-system",
            json!({"rules": pods, "namespaces": {"include": ["kube-system"]}}),
        ),
        (
            "operator-ns",
            "targets the operator's namespace",
            json!({"rules": pods, "namespaces": {"include": [ctx.env.operator_namespace]}}),
        ),
        (
            "unlabelled",
            "runs its workload in a namespace not labelled for workloads",
            json!({"rules": pods, "namespace": unlabelled_ns}),
        ),
        (
            "timeout",
            "has timeoutSeconds 31",
            json!({"rules": pods, "timeoutSeconds": 31}),
        ),
        (
            "no-image",
            "has neither image nor preset",
            json!({"rules": pods, "image": null}),
        ),
        (
            "fallback-cel",
            "has a fallback expression that does not compile",
            json!({"rules": pods, "fallback": {"validations": [
                {"expression": "object.spec.containers.all(c, c.image.startsWith('registry.local/')"},
            ]}}),
        ),
        (
            "fallback-ref",
            "has a fallback expression naming an undeclared variable",
            json!({"rules": pods, "fallback": {"validations": [
                {"expression": "objekt.spec.containers.size() < 5"},
            ]}}),
        ),
        (
            "fallback-blank",
            "has a blank fallback expression",
            json!({"rules": pods, "fallback": {"validations": [{"expression": "  "}]}}),
        ),
        (
            "fallback-protected",
            "has a fallback that names ValidatingAdmissionPolicies",
            json!({"rules": pods, "fallback": {
                "validations": [{"expression": "true"}],
                "rules": rules("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"),
            }}),
        ),
    ];
    // What only the API server's own CEL compiler can refuse (a method no library defines):
    // the operator asks it with a dry run, where it serves ValidatingAdmissionPolicy.
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .list(&ListParams::default().limit(1))
        .await;
    if policies.is_ok() {
        cases.push((
            "fallback-api",
            "has a fallback expression only the API server's compiler refuses",
            json!({"rules": pods, "fallback": {"validations": [
                {"expression": "object.metadata.name.noSuchMethod() == 'x'"},
            ]}}),
        ));
    } else {
        eprintln!(
            "bad input: {} serves no ValidatingAdmissionPolicy, so fallback expressions are checked by the operator alone",
            ctx.env.target.name()
        );
    }
    let api =
        Api::<DynamicObject>::all_with(client.clone(), &ApiResource::erase::<Initializer>(&()));
    let mut accepted = Vec::new();
    let mut report = Vec::new();
    for (role, what, fields) in &cases {
        let name = ctx.scope.name(role);
        let mut spec = json!({"image": image, "namespace": workload_ns});
        if let (Some(spec), Some(fields)) = (spec.as_object_mut(), fields.as_object()) {
            for (key, value) in fields {
                if value.is_null() {
                    spec.remove(key);
                } else {
                    spec.insert(key.clone(), value.clone());
                }
            }
        }
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "initializer.dev/v1alpha1",
            "kind": "Initializer",
            "metadata": {"name": name},
            "spec": spec,
        }))?;
        ctx.scope.track_initializer(&name);
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => accepted.push((name, *what)),
            Err(kube::Error::Api(status)) if status.code == 400 || status.code == 422 => {
                report.push(format!(
                    "{what}: refused by the schema ({}: {})",
                    status.code, status.message
                ));
            }
            Err(err) => bail!("creating an Initializer that {what} failed unexpectedly: {err}"),
        }
    }
    for (name, what) in &accepted {
        let invalid = wait::until(
            format!("Initializer {name} (which {what}) to be marked Valid=False"),
            STEP_TIMEOUT,
            || async {
                let initializer = ops::initializer(&client, name).await?;
                let valid = ops::condition(&initializer, "Valid");
                Ok(match valid {
                    Some(c) if c.status == "False" => Check::Done(c.message.clone()),
                    _ => Check::Pending(ops::describe(&initializer)),
                })
            },
        )
        .await?;
        let initializer = ops::initializer(&client, name).await?;
        ensure!(
            initializer.status.as_ref().and_then(|s| s.phase) == Some(Phase::Invalid),
            "an Initializer that {what} is Valid=False but {}",
            ops::describe(&initializer)
        );
        let (event, _) = ops::wait_warning_event(&client, name, STEP_TIMEOUT).await?;
        report.push(format!(
            "{what}: Valid=False ({invalid}), Warning Event {event}"
        ));
    }
    let names: Vec<String> = accepted.iter().map(|(name, _)| name.clone()).collect();
    wait::holds_for(
        "no configuration for any refused Initializer",
        Duration::from_secs(3),
        || async {
            for name in &names {
                let configurations = ops::configurations_of(&client, name).await?;
                if !configurations.is_empty() {
                    return Ok(Err(format!(
                        "Initializer {name} has {} configuration(s)",
                        configurations.len()
                    )));
                }
            }
            Ok(Ok(()))
        },
    )
    .await?;
    eprintln!("bad input:\n  {}", report.join("\n  "));
    Ok(())
}

/// The operator pod holding the leader Lease.
async fn leader(ctx: &Ctx) -> anyhow::Result<(String, String)> {
    let client = ctx.client();
    let namespace = ctx.env.operator_namespace.clone();
    wait::until(
        "an operator pod to hold a leader Lease",
        STEP_TIMEOUT,
        || async {
            let pods: BTreeSet<String> = ctx
                .env
                .operator_pods()
                .await?
                .iter()
                .map(|p| p.name_any())
                .collect();
            let leases = Api::<Lease>::namespaced(client.clone(), &namespace)
                .list(&ListParams::default())
                .await?;
            let held = leases.items.iter().find_map(|lease| {
                let holder = lease.spec.as_ref()?.holder_identity.clone()?;
                pods.contains(&holder).then(|| (lease.name_any(), holder))
            });
            Ok(match held {
                Some(found) => Check::Done(found),
                None => Check::Pending(format!(
                    "operator pods {pods:?}; leases {:?}",
                    leases
                        .items
                        .iter()
                        .map(|l| (
                            l.name_any(),
                            l.spec.as_ref().and_then(|s| s.holder_identity.clone())
                        ))
                        .collect::<Vec<_>>()
                )),
            })
        },
    )
    .await
}

/// Kill the operator's leader while an Initializer is rolling out and another is being
/// deleted: the new leader converges, with no duplicate and no orphaned configuration.
pub async fn operator_killed_mid_rollout_converges_without_duplicates_or_orphans(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let client = ctx.client();
    let leaving = common::registered_sidecar(&ctx, "leaving", Health::default()).await?;

    let workload_ns = common::workload_namespace(&ctx, "arriving-init").await?;
    let name = ctx.scope.name("arriving");
    let arriving = common::default_sidecar(&ctx, &name, &workload_ns)?;
    let configurations = common::record_configurations(&ctx, &name);
    let (_, leader_pod) = leader(&ctx).await?;
    let applied = Instant::now();
    ctx.scope.create_initializer(&arriving).await?;
    // Mid-rollout: the workload exists, the configuration does not yet.
    wait::until(
        format!("the Deployment of {name} to exist"),
        STEP_TIMEOUT,
        || async {
            Ok(
                match ops::workload_deployment(&client, &workload_ns, &name).await? {
                    Some(_) => Check::Done(()),
                    None => Check::Pending("no Deployment yet".to_string()),
                },
            )
        },
    )
    .await?;
    let mid_rollout = ops::configurations_of(&client, &name).await?.is_empty();
    Api::<Initializer>::all(client.clone())
        .delete(&leaving.name, &DeleteParams::default())
        .await?;
    let killed_at = Instant::now();
    ctx.env
        .target
        .kill_pod(&ctx.env.operator_namespace, &leader_pod)
        .await?;

    let (_, registered) = ops::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;
    wait::until(
        format!("Initializer {} to be gone", leaving.name),
        REGISTER_TIMEOUT,
        || async {
            Ok(
                match Api::<Initializer>::all(client.clone())
                    .get_opt(&leaving.name)
                    .await?
                {
                    None => Check::Done(()),
                    Some(initializer) => Check::Pending(ops::describe(&initializer)),
                },
            )
        },
    )
    .await?;
    let (_, new_leader) = leader(&ctx).await?;
    ctx.row.update(|row| {
        row.to_registered = Some(registered - applied);
        row.recovery_to_registered = Some(registered.saturating_duration_since(killed_at));
    });
    eprintln!(
        "{name}: leader {leader_pod} killed {}; new leader {new_leader}; registered {} after the kill",
        if mid_rollout {
            "mid-rollout"
        } else {
            "after registration (the rollout was faster than the kill)"
        },
        s(registered.saturating_duration_since(killed_at))
    );

    // Settle for a few probe periods, then check the end state.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let current = ops::configurations_of(&client, &name).await?;
    ensure!(
        current.len() == 1,
        "Initializer {name} has {} configurations, expected one",
        current.len()
    );
    let registrations = configurations.additions_since(applied);
    ensure!(
        registrations == 1,
        "Initializer {name} was registered {registrations} times: {}",
        configurations.summary()
    );
    let orphans = ops::configurations_of(&client, &leaving.name).await?;
    ensure!(
        orphans.is_empty(),
        "the deleted Initializer {} left {} configuration(s)",
        leaving.name,
        orphans.len()
    );
    let existing: BTreeSet<String> = Api::<Initializer>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|i| i.name_any())
        .collect();
    for configuration in ops::managed_configurations(&client).await? {
        ensure!(
            existing
                .iter()
                .any(|name| ops::belongs_to(&configuration, name)),
            "managed configuration {} belongs to no existing Initializer (orphan)",
            configuration.name_any()
        );
    }
    Ok(())
}
