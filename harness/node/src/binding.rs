//! Scheduling, the simplest way: every pod that no node has been chosen for is bound to this
//! one through `pods/binding`, as kube-scheduler would bind it on a one-node cluster. Only on
//! a real API server; the sandbox runs pods without binding them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::pod::Node;

/// How long a failed binding waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// Whether a pod waits for a node: no `spec.nodeName`, not being deleted, not finished.
pub fn needs_binding(pod: &Pod) -> bool {
    let unbound = pod
        .spec
        .as_ref()
        .is_some_and(|spec| spec.node_name.as_deref().unwrap_or_default().is_empty());
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
    unbound && pod.metadata.deletion_timestamp.is_none() && !finished
}

/// The Binding that assigns `pod` to `node`.
pub fn binding(pod: &Pod, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..ObjectReference::default()
        },
    }
}

/// Binds `pod` to `node`. A pod bound meanwhile (409) or gone (404) is not an error.
pub async fn bind(client: &Client, pod: &Pod, node: &str) -> Result<(), kube::Error> {
    let (Some(name), Some(namespace)) = (&pod.metadata.name, &pod.metadata.namespace) else {
        return Ok(());
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding(pod, node),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Binds every unbound pod of the node's cache to the node until `shutdown`.
pub async fn run(node: Arc<Node>, shutdown: CancellationToken) {
    let mut changes = node.caches.subscribe();
    // Pods whose binding failed, by uid, with when to try again.
    let mut failed: HashMap<String, Instant> = HashMap::new();
    loop {
        let now = Instant::now();
        for pod in node.caches.pods.state() {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if !needs_binding(&pod) || failed.get(&uid).is_some_and(|at| *at > now) {
                continue;
            }
            match bind(&node.client, &pod, &node.node_name).await {
                Ok(()) => {
                    failed.remove(&uid);
                }
                Err(e) => {
                    tracing::warn!(pod = ?pod.metadata.name, error = %e, "failed to bind the pod; retrying");
                    failed.insert(uid, now + RETRY);
                }
            }
        }
        let live: std::collections::HashSet<String> = node
            .caches
            .pods
            .state()
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        failed.retain(|uid, _| live.contains(uid));
        let retry = failed.values().min().copied();
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = changes.changed() => if changed.is_err() { break },
            () = async {
                match retry {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    fn pod(node: Option<&str>, phase: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-1".into()),
                namespace: Some("demo".into()),
                uid: Some("u-1".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: phase.map(Into::into),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn only_unbound_live_pods_wait_for_a_node() {
        assert!(needs_binding(&pod(None, Some("Pending"))));
        assert!(needs_binding(&pod(Some(""), None)));
        assert!(!needs_binding(&pod(Some("node-1"), Some("Pending"))));
        assert!(!needs_binding(&pod(None, Some("Succeeded"))));
        let mut deleting = pod(None, None);
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert!(!needs_binding(&deleting));
    }

    #[test]
    fn the_binding_names_the_pod_and_targets_the_node() {
        let b = binding(&pod(None, None), "node-1");
        assert_eq!(b.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(b.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(b.target.kind.as_deref(), Some("Node"));
        assert_eq!(b.target.name.as_deref(), Some("node-1"));
    }
}
