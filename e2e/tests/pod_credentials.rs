//! A pod cannot take the credentials of whoever runs the cluster (`make cluster`, `make run
//! CLUSTER=real`, the e2e suite): on the real control plane (etcd, kube-apiserver,
//! kube-controller-manager and our node agent, started as root), a pod that points
//! `KUBECONFIG` at the cluster-admin kubeconfig (`system:masters`) and reaches for the node's
//! and the CA's keys gets nothing, runs as an unprivileged user with a `HOME` of its own, and
//! still reads what is its own (a Secret volume of mode 0400).
//!
//! Needs the binaries `cargo build --workspace --bins` makes and the control plane `make
//! controlplane` builds, as root (a network namespace): a plain `cargo test` lists it as
//! ignored, and `make unit-real` runs it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use initializer_controlplane::{ControlPlane, ControlPlaneConfig};
use initializer_e2e::paths;
use initializer_test_support::wait::wait_for;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::PostParams;

/// What the pod tries, one verdict a line.
const ATTACK: &str = r#"
echo "uid=$(id -u) gid=$(id -g)"
echo "home=$HOME"
echo "kubectl=$(command -v kubectl)"
for f in "$KUBECONFIG" "$NODE_KUBECONFIG" "$OUTSIDE_KUBECONFIG" "$CA_KEY"; do
  if cat "$f" >/dev/null 2>&1; then echo "stole=$f"; else echo "denied=$f"; fi
done
if kubectl get secrets --all-namespaces >/dev/null 2>&1; then
  echo "system-masters=yes"
else
  echo "system-masters=no"
fi
if cat "$OWN_SECRET" >/dev/null 2>&1; then echo "own-secret=read"; else echo "own-secret=denied"; fi
"#;

fn attacker(plane: &ControlPlane) -> Pod {
    let state = plane.state_dir();
    let file = |name: &str| state.join(name).display().to_string();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "attacker", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "attacker",
                "image": "attack.example/shell",
                "command": ["sh", "-c", ATTACK],
                "env": [
                    // The pod's own env names the cluster-admin kubeconfig.
                    {"name": "KUBECONFIG", "value": file("admin.kubeconfig")},
                    {"name": "NODE_KUBECONFIG", "value": file("node.kubeconfig")},
                    {"name": "OUTSIDE_KUBECONFIG", "value": file("kubeconfig")},
                    {"name": "CA_KEY", "value": file("pki/ca.key")},
                    {"name": "OWN_SECRET", "value": "/etc/own/key"},
                ],
                "volumeMounts": [{"name": "own", "mountPath": "/etc/own"}],
            }],
            "volumes": [{"name": "own", "secret": {"secretName": "own", "defaultMode": 0o400}}],
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real control plane: make unit-real, or cargo test -p initializer-e2e --test pod_credentials -- --ignored"]
async fn a_pod_cannot_take_the_credentials_of_whoever_runs_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images.yaml");
    std::fs::write(&images, "attack.example/shell: /bin/sh\n").unwrap();
    let mut config = ControlPlaneConfig::new(
        dir.path().join("plane"),
        paths::binary("initializer-node").unwrap(),
    );
    config.image_map = Some(images);
    let plane = ControlPlane::start(config).await.unwrap();
    let client = plane.client();
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "own", "namespace": "default"},
        "stringData": {"key": "the pod's own"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(client, "default");
    pods.create(&PostParams::default(), &attacker(&plane))
        .await
        .unwrap();
    let phase = wait_for("the attacker to end", Duration::from_secs(60), || async {
        let pod = pods.get("attacker").await.ok()?;
        let phase = pod.status?.phase?;
        matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
    })
    .await;
    let log_file = plane
        .state_dir()
        .join("node/logs/default_attacker/attacker.log");
    let log = std::fs::read_to_string(&log_file).unwrap_or_default();
    plane.shutdown().await;
    assert_eq!(phase, "Succeeded", "{log}");
    let said = |key: &str| -> Vec<&str> {
        log.lines()
            .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .collect()
    };
    assert_eq!(said("uid"), ["65532 gid=65532"], "{log}");
    let home = said("home");
    assert!(
        home.len() == 1 && home[0].ends_with("/default_attacker"),
        "HOME is the pod's own directory, not the node's: {log}"
    );
    assert_ne!(home.first().copied(), std::env::var("HOME").ok().as_deref());
    assert_eq!(said("kubectl"), ["/usr/bin/kubectl"], "{log}");
    assert!(said("stole").is_empty(), "{log}");
    assert_eq!(said("denied").len(), 4, "{log}");
    assert_eq!(said("system-masters"), ["no"], "{log}");
    assert_eq!(said("own-secret"), ["read"], "{log}");
}
