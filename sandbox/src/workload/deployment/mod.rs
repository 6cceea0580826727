//! The Deployment controller.
//!
//! Pods are owned directly by their Deployment (no ReplicaSet objects): each pod carries the
//! `pod-template-hash` label of the template it was made from and a controller ownerReference to
//! the Deployment. Rolling updates honour `maxSurge` and `maxUnavailable` (defaults 25 %),
//! `Recreate` deletes every old pod before creating new ones. Status carries `replicas`,
//! `updatedReplicas`, `readyReplicas`, `availableReplicas` (ready for `minReadySeconds`),
//! `unavailableReplicas`, `observedGeneration` and the `Available`, `Progressing` and
//! `ReplicaFailure` conditions with the real controller's reasons and messages (which name the
//! ReplicaSet `<deployment>-<hash>` the real controller would have made).
//!
//! This module is the controller loop (caches in, pod creates/deletes and status patches out,
//! expectations and create backoff); its decisions are pure functions in `rollout`.

mod rollout;

pub use rollout::{Plan, TEMPLATE_HASH_LABEL, plan, scaled, status, template_hash};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::cache::Caches;
use crate::selector;
use rollout::{new_pod, status_differs};

/// First delay after a failed pod create.
const CREATE_BACKOFF_START: Duration = Duration::from_secs(1);
/// Longest delay between failed pod creates.
const CREATE_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How long a create or delete may stay unobserved before the controller stops waiting for it.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Expectations {
    pending: HashSet<String>,
    deleting: HashSet<String>,
    since: Option<Instant>,
}

/// Runs the controller until `shutdown`.
pub async fn run(client: Client, caches: Caches, shutdown: CancellationToken) {
    let mut changes = caches.subscribe();
    let mut expectations: HashMap<String, Expectations> = HashMap::new();
    let mut failures: HashMap<String, String> = HashMap::new();
    // After a failed create: when to try again, and the next delay (1 s doubling to 30 s), as the
    // real controller rate-limits a failing ReplicaSet.
    let mut create_backoff: HashMap<String, (Instant, Duration)> = HashMap::new();
    loop {
        let pods = caches.pods.state();
        for deploy in caches.deployments.state() {
            let uid = deploy.metadata.uid.clone().unwrap_or_default();
            let ns = deploy.metadata.namespace.clone().unwrap_or_default();
            if deploy.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let owned: Vec<Arc<Pod>> = pods
                .iter()
                .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
                .filter(|p| {
                    p.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.uid == uid && o.controller == Some(true))
                })
                .cloned()
                .collect();
            let selector_matches = |p: &Pod| {
                let sel = deploy
                    .spec
                    .as_ref()
                    .map(|s| s.selector.clone())
                    .unwrap_or_default();
                let labels: BTreeMap<String, String> =
                    p.metadata.labels.clone().unwrap_or_default();
                selector::selects(&sel, &labels).unwrap_or(false)
            };
            let active: Vec<Arc<Pod>> = owned
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none() && selector_matches(p))
                .filter(|p| {
                    !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
                })
                .cloned()
                .collect();
            let hash = template_hash(&deploy.spec.clone().unwrap_or_default().template);
            let old_terminating = owned.iter().any(|p| {
                p.metadata.deletion_timestamp.is_some()
                    && p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(TEMPLATE_HASH_LABEL))
                        != Some(&hash)
            });
            // Wait until earlier creates and deletes show up in the cache.
            let exp = expectations.entry(uid.clone()).or_default();
            let names: HashSet<String> = active
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            exp.pending.retain(|n| !names.contains(n));
            exp.deleting.retain(|n| names.contains(n));
            let satisfied = (exp.pending.is_empty() && exp.deleting.is_empty())
                || exp.since.is_some_and(|s| s.elapsed() > EXPECTATION_TIMEOUT);
            if satisfied {
                exp.pending.clear();
                exp.deleting.clear();
                let plan = plan(&deploy, &active, old_terminating);
                if plan.create == 0 {
                    // Nothing left to create: an earlier failure no longer applies.
                    failures.remove(&uid);
                }
                let pod_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let may_create = create_backoff
                    .get(&uid)
                    .is_none_or(|(at, _)| Instant::now() >= *at);
                for _ in 0..if may_create { plan.create } else { 0 } {
                    let pod = new_pod(&deploy, &plan.hash);
                    let pod_name = pod.metadata.name.clone().unwrap_or_default();
                    match pod_api.create(&PostParams::default(), &pod).await {
                        Ok(_) => {
                            failures.remove(&uid);
                            create_backoff.remove(&uid);
                            exp.pending.insert(pod_name);
                        }
                        Err(e) => {
                            let message = match &e {
                                kube::Error::Api(s) => s.message.clone(),
                                other => other.to_string(),
                            };
                            tracing::warn!(deployment = %format!("{ns}/{}", deploy.metadata.name.as_deref().unwrap_or_default()), %message, "failed to create pod");
                            failures.insert(uid.clone(), message);
                            let delay = create_backoff
                                .get(&uid)
                                .map_or(CREATE_BACKOFF_START, |(_, d)| *d);
                            create_backoff.insert(
                                uid.clone(),
                                (Instant::now() + delay, (delay * 2).min(CREATE_BACKOFF_MAX)),
                            );
                            break;
                        }
                    }
                }
                for pod_name in plan.delete {
                    match pod_api.delete(&pod_name, &DeleteParams::default()).await {
                        Ok(_) => {
                            exp.deleting.insert(pod_name);
                        }
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => {
                            tracing::warn!(pod = %pod_name, error = %e, "failed to delete pod")
                        }
                    }
                }
                exp.since = Some(Instant::now());
            }
            let wanted = status(
                &deploy,
                &active,
                failures.get(&uid).map(String::as_str),
                crate::clock::now(),
            );
            let stored = deploy
                .status
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or(Value::Null);
            if status_differs(&stored, &wanted) {
                let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
                let name = deploy.metadata.name.clone().unwrap_or_default();
                if let Err(e) = api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": wanted})),
                    )
                    .await
                    && !matches!(&e, kube::Error::Api(s) if s.code == 404)
                {
                    tracing::warn!(deployment = %format!("{ns}/{name}"), error = %e, "failed to write deployment status");
                }
            }
        }
        let live: HashSet<String> = caches
            .deployments
            .state()
            .iter()
            .filter_map(|d| d.metadata.uid.clone())
            .collect();
        expectations.retain(|k, _| live.contains(k));
        failures.retain(|k, _| live.contains(k));
        create_backoff.retain(|k, _| live.contains(k));
        // Waiting expectations and minReadySeconds need a look again without a watch event.
        let recheck = tokio::time::sleep(Duration::from_secs(1));
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = changes.changed() => if changed.is_err() { break },
            () = recheck => {}
        }
    }
}
