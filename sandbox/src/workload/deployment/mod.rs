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
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::cache::{Caches, wait_for_change};
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
    /// Created pods the API server answered uninitialized (legacy mode): hidden from the pod
    /// cache until their initializers finish, and waited for as long as they exist.
    uninitialized: HashSet<String>,
    since: Option<Instant>,
}

/// Whether the controller may act on a Deployment again: every create and delete it made has
/// shown up in the cache, or the wait timed out and no pod it created is still initializing.
/// A pod held by initializers keeps the Deployment waiting (in Kubernetes 1.7–1.13 the
/// ReplicaSet controller likewise kept its expectation for a create that timed out waiting for
/// initialization), so a stuck initializer does not make the controller pile up pods.
fn expectations_met(exp: &Expectations, timed_out: bool) -> bool {
    (exp.pending.is_empty() && exp.deleting.is_empty())
        || (timed_out && exp.uninitialized.is_empty())
}

/// How a pod create ended.
enum Created {
    /// Stored and initialized (201).
    Initialized,
    /// Stored, waiting for initializers (202).
    Uninitialized,
}

/// Creates a pod without waiting for its initializers (`includeUninitialized=1`; the pod then
/// shows up in the cache once initialized). Outside legacy mode this is a plain create.
async fn create_pod(client: &Client, ns: &str, pod: &Pod) -> Result<Created, String> {
    let body = serde_json::to_vec(pod).map_err(|e| e.to_string())?;
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "/api/v1/namespaces/{ns}/pods?includeUninitialized=1"
        ))
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body))
        .map_err(|e| e.to_string())?;
    let response = client.send(request).await.map_err(|e| e.to_string())?;
    let code = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .map_err(|e| e.to_string())?;
    match code {
        201 | 200 => Ok(Created::Initialized),
        202 => Ok(Created::Uninitialized),
        _ => Err(serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|s| s["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("pod create answered {code}"))),
    }
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
                let sel = deploy.spec.selector.clone();
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
            let hash = template_hash(&deploy.spec.template);
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
            let pod_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let timed_out = exp.since.is_some_and(|s| s.elapsed() > EXPECTATION_TIMEOUT);
            let known = exp.pending.clone();
            exp.uninitialized.retain(|n| known.contains(n));
            if timed_out {
                // Still initializing, or deleted meanwhile (a GET shows uninitialized pods)?
                for name in exp.uninitialized.clone() {
                    if let Ok(None) = pod_api.get_opt(&name).await {
                        exp.uninitialized.remove(&name);
                    }
                }
            }
            if expectations_met(exp, timed_out) {
                exp.pending.clear();
                exp.deleting.clear();
                exp.uninitialized.clear();
                let plan = plan(&deploy, &active, old_terminating);
                if plan.create == 0 {
                    // Nothing left to create: an earlier failure no longer applies.
                    failures.remove(&uid);
                }
                let may_create = create_backoff
                    .get(&uid)
                    .is_none_or(|(at, _)| Instant::now() >= *at);
                for _ in 0..if may_create { plan.create } else { 0 } {
                    let pod = new_pod(&deploy, &plan.hash);
                    let pod_name = pod.metadata.name.clone().unwrap_or_default();
                    match create_pod(&client, &ns, &pod).await {
                        Ok(created) => {
                            failures.remove(&uid);
                            create_backoff.remove(&uid);
                            if matches!(created, Created::Uninitialized) {
                                exp.uninitialized.insert(pod_name.clone());
                            }
                            exp.pending.insert(pod_name);
                        }
                        Err(message) => {
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
        if !wait_for_change(&mut changes, &shutdown, Duration::from_secs(1)).await {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expectations(pending: &[&str], uninitialized: &[&str]) -> Expectations {
        Expectations {
            pending: pending.iter().map(|s| s.to_string()).collect(),
            uninitialized: uninitialized.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_held_by_initializers_keeps_the_deployment_waiting_past_the_timeout() {
        assert!(expectations_met(&expectations(&[], &[]), false));
        assert!(!expectations_met(&expectations(&["p1"], &[]), false));
        assert!(expectations_met(&expectations(&["p1"], &[]), true));
        assert!(!expectations_met(&expectations(&["p1"], &["p1"]), true));
    }
}
