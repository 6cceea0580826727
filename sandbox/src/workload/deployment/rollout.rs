//! The Deployment controller's decisions, without IO: the template hash, the rollout plan
//! (which pods to create and delete under `maxSurge`/`maxUnavailable` or `Recreate`), the pods
//! it makes, and the status and conditions it writes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use crate::ids::{SAFE_ALPHABET as ALPHABET, name_suffix};

/// The label that ties a pod to its template.
pub const TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// A stable short hash of the pod template, spelled with Kubernetes' safe alphabet.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    let text = serde_json::to_string(template).unwrap_or_default();
    let mut h: u32 = 0x811c_9dc5;
    for b in text.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let mut out = String::new();
    let mut n = h;
    for _ in 0..10 {
        out.push(char::from(ALPHABET[(n % ALPHABET.len() as u32) as usize]));
        n /= ALPHABET.len() as u32;
        if n == 0 {
            break;
        }
    }
    out
}

/// Resolves an int-or-percent against `total`, rounding up or down.
pub fn scaled(
    value: Option<&IntOrString>,
    default_percent: i32,
    total: i32,
    round_up: bool,
) -> i32 {
    let percent = |p: i32| {
        let x = i64::from(p) * i64::from(total);
        let v = if round_up { (x + 99) / 100 } else { x / 100 };
        i32::try_from(v).unwrap_or(i32::MAX)
    };
    match value {
        None => percent(default_percent),
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => match s
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            Some(p) => percent(p),
            None => s.parse().unwrap_or_else(|_| percent(default_percent)),
        },
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod_ready_since(pod).is_some()
}

/// When the pod became Ready, if it is.
fn pod_ready_since(pod: &Pod) -> Option<jiff::Timestamp> {
    let cond = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    Some(
        cond.last_transition_time
            .as_ref()
            .map_or(jiff::Timestamp::UNIX_EPOCH, |t| t.0),
    )
}

/// What one reconcile decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Pods to create from the current template.
    pub create: usize,
    /// Names of pods to delete.
    pub delete: Vec<String>,
    /// The template hash of the current template.
    pub hash: String,
}

/// Decides creations and deletions for `deploy` given its active (not terminating) pods and
/// whether pods of an earlier template are still terminating.
pub fn plan(deploy: &Deployment, active: &[Arc<Pod>], old_terminating: bool) -> Plan {
    let spec = deploy.spec.clone();
    let desired = spec.replicas.unwrap_or(1).max(0);
    let hash = template_hash(&spec.template);
    let has_hash = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(TEMPLATE_HASH_LABEL))
            == Some(&hash)
    };
    let (new, old): (Vec<&Arc<Pod>>, Vec<&Arc<Pod>>) = active.iter().partition(|p| has_hash(p));
    let name = |p: &&Arc<Pod>| p.metadata.name.clone().unwrap_or_default();
    let mut delete = Vec::new();
    let mut create = 0usize;
    if spec.paused == Some(true) {
        // Paused: scale only, from the current template, without rolling anything out.
        let total = i32::try_from(active.len()).unwrap_or(i32::MAX);
        if total < desired {
            create = (desired - total) as usize;
        } else if total > desired {
            let mut extra: Vec<&Arc<Pod>> = active.iter().collect();
            extra.sort_by_key(|p| (is_ready(p), has_hash(p)));
            delete.extend(extra.iter().take((total - desired) as usize).map(name));
        }
        return Plan {
            create,
            delete,
            hash,
        };
    }
    let new_len = i32::try_from(new.len()).unwrap_or(i32::MAX);
    // Too many current pods: remove the unready, then the youngest.
    if new_len > desired {
        let mut extra = new.clone();
        extra.sort_by_key(|p| {
            (
                is_ready(p),
                std::cmp::Reverse(p.metadata.creation_timestamp.clone().map(|t| t.0)),
            )
        });
        delete.extend(extra.iter().take((new_len - desired) as usize).map(name));
    }
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    if recreate {
        delete.extend(old.iter().map(name));
        if old.is_empty() && !old_terminating && new_len < desired {
            create = (desired - new_len) as usize;
        }
        return Plan {
            create,
            delete,
            hash,
        };
    }
    let rolling = spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.clone())
        .unwrap_or_default();
    let mut max_surge = scaled(rolling.max_surge.as_ref(), 25, desired, true).max(0);
    let max_unavailable = scaled(rolling.max_unavailable.as_ref(), 25, desired, false).max(0);
    if max_surge == 0 && max_unavailable == 0 {
        max_surge = 1;
    }
    let total = i32::try_from(active.len()).unwrap_or(i32::MAX);
    if new_len < desired {
        let room = (desired + max_surge - total).max(0);
        create = (desired - new_len).min(room) as usize;
    }
    if !old.is_empty() {
        let available = i32::try_from(active.iter().filter(|p| is_ready(p)).count()).unwrap_or(0);
        let min_available = desired - max_unavailable;
        // Unready old pods cost no availability: they go first and always.
        let (old_ready, old_unready): (Vec<&&Arc<Pod>>, Vec<&&Arc<Pod>>) =
            old.iter().partition(|p| is_ready(p));
        delete.extend(old_unready.iter().map(|p| name(p)));
        // Never go below desired pods in total on the old side's account.
        let surplus = (total - i32::try_from(old_unready.len()).unwrap_or(0) - desired
            + max_unavailable)
            .max(0);
        let can_remove = (available - min_available).max(0).min(surplus);
        delete.extend(old_ready.iter().take(can_remove as usize).map(|p| name(p)));
    }
    Plan {
        create,
        delete,
        hash,
    }
}

fn condition(
    kind: &str,
    status: bool,
    reason: &str,
    message: String,
    previous: Option<&Value>,
    now: &str,
    progressed: bool,
) -> Value {
    let status_s = if status { "True" } else { "False" };
    let same = previous.is_some_and(|p| p["status"] == status_s);
    let same_reason = same && previous.is_some_and(|p| p["reason"] == reason);
    // The previous time stays while `kept`; otherwise (or without one) it is now.
    let time = |kept: bool, field: &str| {
        let previous_time = previous.and_then(|p| p[field].as_str()).filter(|_| kept);
        previous_time.unwrap_or(now).to_owned()
    };
    let transition = time(same, "lastTransitionTime");
    let update = time(same_reason && !progressed, "lastUpdateTime");
    json!({"type": kind, "status": status_s, "reason": reason, "message": message, "lastUpdateTime": update, "lastTransitionTime": transition})
}

/// The Deployment's status given its pods, the previous status and the last create failure.
pub fn status(
    deploy: &Deployment,
    active: &[Arc<Pod>],
    create_failure: Option<&str>,
    now: jiff::Timestamp,
) -> Value {
    let spec = deploy.spec.clone();
    let desired = spec.replicas.unwrap_or(1).max(0);
    let hash = template_hash(&spec.template);
    let name = deploy.metadata.name.clone().unwrap_or_default();
    let rs = format!("{name}-{hash}");
    let min_ready = Duration::from_secs(
        spec.min_ready_seconds
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(0),
    );
    let replicas = active.len() as i32;
    let updated = active
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(TEMPLATE_HASH_LABEL))
                == Some(&hash)
        })
        .count() as i32;
    let ready = active.iter().filter(|p| is_ready(p)).count() as i32;
    let available = active
        .iter()
        .filter_map(|p| pod_ready_since(p))
        .filter(|since| {
            now.duration_since(*since).unsigned_abs() >= min_ready || min_ready.is_zero()
        })
        .count() as i32;
    let rolling = spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.clone())
        .unwrap_or_default();
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let max_unavailable = if recreate {
        desired
    } else {
        scaled(rolling.max_unavailable.as_ref(), 25, desired, false).max(0)
    };
    let previous = deploy
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    let prev_cond = |kind: &str| {
        previous["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
            .cloned()
    };
    let now_s = crate::clock::rfc3339(now);
    let progressed = [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ]
    .iter()
    .zip([replicas, updated, ready, available])
    .any(|(k, v)| previous[*k].as_i64().unwrap_or(0) != i64::from(v));
    let available_ok = available >= desired - max_unavailable;
    let available_cond = if available_ok {
        condition(
            "Available",
            true,
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            prev_cond("Available").as_ref(),
            &now_s,
            false,
        )
    } else {
        condition(
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            prev_cond("Available").as_ref(),
            &now_s,
            false,
        )
    };
    let complete = updated == desired && replicas == desired && available == desired;
    let deadline = spec
        .progress_deadline_seconds
        .and_then(|s| u64::try_from(s).ok())
        .unwrap_or(600);
    let prev_progress = prev_cond("Progressing");
    let progressing_cond = if spec.paused == Some(true) {
        let transition = match &prev_progress {
            Some(c) if c["reason"] == "DeploymentPaused" => c["lastTransitionTime"]
                .as_str()
                .unwrap_or(&now_s)
                .to_owned(),
            _ => now_s.clone(),
        };
        let update = match &prev_progress {
            Some(c) if c["reason"] == "DeploymentPaused" => {
                c["lastUpdateTime"].as_str().unwrap_or(&now_s).to_owned()
            }
            _ => now_s.clone(),
        };
        json!({"type": "Progressing", "status": "Unknown", "reason": "DeploymentPaused", "message": "Deployment is paused",
            "lastUpdateTime": update, "lastTransitionTime": transition})
    } else if complete {
        condition(
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            format!("ReplicaSet {rs:?} has successfully progressed."),
            prev_progress.as_ref(),
            &now_s,
            progressed,
        )
    } else {
        let last_update = prev_progress
            .as_ref()
            .and_then(|c| c["lastUpdateTime"].as_str())
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        let stalled = !progressed
            && last_update.is_some_and(|t| {
                now.duration_since(t).unsigned_abs() > Duration::from_secs(deadline)
            });
        if stalled
            || prev_progress
                .as_ref()
                .is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded")
                && !progressed
        {
            condition(
                "Progressing",
                false,
                "ProgressDeadlineExceeded",
                format!("ReplicaSet {rs:?} has timed out progressing."),
                prev_progress.as_ref(),
                &now_s,
                false,
            )
        } else {
            condition(
                "Progressing",
                true,
                "ReplicaSetUpdated",
                format!("ReplicaSet {rs:?} is progressing."),
                prev_progress.as_ref(),
                &now_s,
                progressed,
            )
        }
    };
    let mut conditions = vec![available_cond, progressing_cond];
    if let Some(message) = create_failure {
        conditions.push(condition(
            "ReplicaFailure",
            true,
            "FailedCreate",
            message.to_owned(),
            prev_cond("ReplicaFailure").as_ref(),
            &now_s,
            false,
        ));
    }
    let opt = |v: i32| if v > 0 { json!(v) } else { Value::Null };
    json!({
        "observedGeneration": deploy.metadata.generation.unwrap_or(0),
        "replicas": opt(replicas),
        "updatedReplicas": opt(updated),
        "readyReplicas": opt(ready),
        "availableReplicas": opt(available),
        "unavailableReplicas": opt((desired - available).max(0)),
        "conditions": conditions,
    })
}

/// Whether `status` (as sent, with nulls for absent counts) differs from the stored status.
pub(super) fn status_differs(stored: &Value, wanted: &Value) -> bool {
    wanted.as_object().is_some_and(|w| {
        w.iter().any(|(k, v)| {
            let s = stored.get(k).unwrap_or(&Value::Null);
            if k == "conditions" {
                // Compare the conditions without their times unless a reason or status changed.
                let strip = |c: &Value| {
                    c.as_array().map(|cs| {
                        cs.iter()
                            .map(|c| {
                                (
                                    c["type"].clone(),
                                    c["status"].clone(),
                                    c["reason"].clone(),
                                    c["message"].clone(),
                                    c["lastUpdateTime"].clone(),
                                )
                            })
                            .collect::<Vec<_>>()
                    })
                };
                strip(s) != strip(v)
            } else {
                s != v
            }
        })
    })
}

/// A pod for `deploy` from its template.
pub(super) fn new_pod(deploy: &Deployment, hash: &str) -> Pod {
    let spec = deploy.spec.clone();
    let template = spec.template;
    let name = deploy.metadata.name.clone().unwrap_or_default();
    let suffix = name_suffix();
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(TEMPLATE_HASH_LABEL.into(), hash.into());
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{hash}-{suffix}")),
            namespace: deploy.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.clone()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name,
                uid: deploy.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    use super::*;

    fn deployment(replicas: i32, image: &str, surge: i32, unavailable: i32) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("a".into()),
                uid: Some("d-uid".into()),
                generation: Some(2),
                ..Default::default()
            },
            spec: DeploymentSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                    ..Default::default()
                },
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(IntOrString::Int(surge)),
                        max_unavailable: Some(IntOrString::Int(unavailable)),
                    }),
                }),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some([("app".to_owned(), "web".to_owned())].into()),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![k8s_openapi::api::core::v1::Container {
                            name: "c".into(),
                            image: Some(image.into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                },
                ..Default::default()
            },
            status: None,
        }
    }

    fn pod(name: &str, hash: &str, ready: bool) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    [
                        ("app".to_owned(), "web".to_owned()),
                        (TEMPLATE_HASH_LABEL.to_owned(), hash.to_owned()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn percentages_round_like_the_deployment_controller() {
        assert_eq!(scaled(None, 25, 3, true), 1);
        assert_eq!(scaled(None, 25, 3, false), 0);
        assert_eq!(
            scaled(Some(&IntOrString::String("50%".into())), 25, 3, false),
            1
        );
        assert_eq!(scaled(Some(&IntOrString::Int(2)), 25, 3, false), 2);
    }

    #[test]
    fn template_hash_is_stable_and_changes_with_the_template() {
        let a = deployment(1, "img:1", 1, 0).spec.template;
        let b = deployment(1, "img:2", 1, 0).spec.template;
        assert_eq!(template_hash(&a), template_hash(&a));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert!(
            template_hash(&a)
                .chars()
                .all(|c| ALPHABET.contains(&(c as u8)))
        );
    }

    #[test]
    fn fresh_deployment_creates_all_replicas() {
        let d = deployment(3, "img:1", 1, 0);
        assert_eq!(plan(&d, &[], false).create, 3);
    }

    #[test]
    fn scale_down_removes_unready_pods_first() {
        let d = deployment(1, "img:1", 1, 0);
        let h = template_hash(&d.spec.template);
        let p = plan(&d, &[pod("a", &h, true), pod("b", &h, false)], false);
        assert_eq!(p.delete, vec!["b".to_owned()]);
        assert_eq!(p.create, 0);
    }

    #[test]
    fn rolling_update_with_surge_one_and_no_unavailability_steps_one_pod_at_a_time() {
        let d = deployment(2, "img:2", 1, 0);
        let h = template_hash(&d.spec.template);
        let old = |name| pod(name, "old", true);
        // Each step of the rollout: the pods there are, and (created, deleted).
        for (step, pods, want) in [
            (
                "start: two old ready pods; surge one new pod, delete nothing",
                vec![old("o1"), old("o2")],
                (1, 0),
            ),
            (
                "the new pod is not ready yet: wait",
                vec![old("o1"), old("o2"), pod("n1", &h, false)],
                (0, 0),
            ),
            (
                "new pod ready: one old pod may go",
                vec![old("o1"), old("o2"), pod("n1", &h, true)],
                (0, 1),
            ),
            (
                "after it went: surge the second new pod",
                vec![old("o2"), pod("n1", &h, true)],
                (1, 0),
            ),
        ] {
            let p = plan(&d, &pods, false);
            assert_eq!((p.create, p.delete.len()), want, "{step}");
        }
    }

    #[test]
    fn rolling_update_without_surge_deletes_before_creating() {
        let d = deployment(2, "img:2", 0, 1);
        let p = plan(&d, &[pod("o1", "old", true), pod("o2", "old", true)], false);
        assert_eq!((p.create, p.delete.len()), (0, 1));
    }

    #[test]
    fn unready_old_pods_are_replaced_at_once() {
        let d = deployment(2, "img:2", 1, 0);
        let p = plan(
            &d,
            &[pod("o1", "old", false), pod("o2", "old", false)],
            false,
        );
        assert_eq!(p.delete.len(), 2);
    }

    #[test]
    fn recreate_waits_for_old_pods_to_be_gone() {
        let mut d = deployment(2, "img:2", 1, 0);
        d.spec.strategy = Some(DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        });
        let p = plan(&d, &[pod("o1", "old", true)], false);
        assert_eq!((p.create, p.delete.clone()), (0, vec!["o1".to_owned()]));
        assert_eq!(plan(&d, &[], true).create, 0);
        assert_eq!(plan(&d, &[], false).create, 2);
    }

    #[test]
    fn status_reports_counts_and_conditions_with_real_reasons() {
        let d = deployment(2, "img:1", 1, 0);
        let h = template_hash(&d.spec.template);
        let s = status(
            &d,
            &[pod("a", &h, true), pod("b", &h, true)],
            None,
            jiff::Timestamp::now(),
        );
        assert_eq!(s["replicas"], 2);
        assert_eq!(s["updatedReplicas"], 2);
        assert_eq!(s["readyReplicas"], 2);
        assert_eq!(s["availableReplicas"], 2);
        assert_eq!(s["unavailableReplicas"], Value::Null);
        assert_eq!(s["observedGeneration"], 2);
        assert_eq!(s["conditions"][0]["reason"], "MinimumReplicasAvailable");
        assert_eq!(s["conditions"][1]["reason"], "NewReplicaSetAvailable");
        assert_eq!(
            s["conditions"][1]["message"],
            format!("ReplicaSet \"web-{h}\" has successfully progressed.")
        );
        let s = status(
            &d,
            &[pod("a", &h, false)],
            Some("admission webhook denied"),
            jiff::Timestamp::now(),
        );
        assert_eq!(s["readyReplicas"], Value::Null);
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][0]["reason"], "MinimumReplicasUnavailable");
        assert_eq!(s["conditions"][1]["reason"], "ReplicaSetUpdated");
        assert_eq!(s["conditions"][2]["reason"], "FailedCreate");
    }

    #[test]
    fn paused_deployment_scales_without_rolling_out() {
        let mut d = deployment(3, "img:2", 1, 0);
        d.spec.paused = Some(true);
        let p = plan(&d, &[pod("o1", "old", true), pod("o2", "old", true)], false);
        assert_eq!((p.create, p.delete.len()), (1, 0));
        d.spec.replicas = Some(1);
        let p = plan(
            &d,
            &[pod("o1", "old", true), pod("o2", "old", false)],
            false,
        );
        assert_eq!((p.create, p.delete.clone()), (0, vec!["o2".to_owned()]));
        let s = status(&d, &[pod("o1", "old", true)], None, jiff::Timestamp::now());
        assert_eq!(s["conditions"][1]["reason"], "DeploymentPaused");
        assert_eq!(s["conditions"][1]["status"], "Unknown");
    }
}
