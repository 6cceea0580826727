//! The kind recipe's configurations (`e2e/kind/kind-config.yaml`, and the offline one the recipe
//! uses when `kindest/node` cannot be pulled), read back and checked so that a broken file is
//! caught here rather than on someone's laptop.

use serde::Deserialize;

/// Path of the kind configuration, relative to the workspace root.
pub const KIND_CONFIG: &str = "e2e/kind/kind-config.yaml";
/// Path of the configuration for a node image assembled on this machine (`e2e/kind/offline`).
pub const KIND_OFFLINE_CONFIG: &str = "e2e/kind/offline/kind-config.yaml";
/// The placeholder the recipe replaces with the offline node image's name (`versions.sh`).
pub const OFFLINE_NODE_IMAGE: &str = "${NODE_IMAGE}";
/// Path of the recipe script, relative to the workspace root.
pub const KIND_RECIPE: &str = "e2e/kind/run.sh";
/// The list of binaries `make release` pushes an image of.
pub const RELEASE_BINARIES: &str = "tools/release/common.sh";

/// The fields of kind's `Cluster` (kind.x-k8s.io/v1alpha4) the recipe uses; any other field is
/// refused, so a typo cannot pass unnoticed.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KindCluster {
    /// Always `Cluster`.
    pub kind: String,
    /// Always `kind.x-k8s.io/v1alpha4`.
    pub api_version: String,
    /// The cluster's default name.
    pub name: Option<String>,
    /// The nodes.
    pub nodes: Vec<KindNode>,
    /// Cluster networking (the offline configuration turns kind's own CNI off).
    #[serde(default)]
    pub networking: Option<KindNetworking>,
    /// kubeadm configuration patches, each a YAML document.
    #[serde(default)]
    pub kubeadm_config_patches: Vec<String>,
    /// containerd configuration patches, each TOML (the registry hosts directory the recipe
    /// writes into, [`CONTAINERD_HOSTS_PATCH`]).
    #[serde(default)]
    pub containerd_config_patches: Vec<String>,
}

/// What each node's containerd must be told for the recipe's registry to reach it: read
/// registries' hosts from the directory the recipe writes them into (kind's local-registry way).
pub const CONTAINERD_HOSTS_PATCH: &str = "config_path = \"/etc/containerd/certs.d\"";

/// The networking fields of kind's `Cluster` the recipe uses.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KindNetworking {
    /// No kindnetd: `e2e/kind/offline/network.sh` configures the pod network instead.
    #[serde(rename = "disableDefaultCNI")]
    pub disable_default_cni: Option<bool>,
}

/// One node of a kind cluster.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KindNode {
    /// `control-plane` or `worker`.
    pub role: String,
    /// The `kindest/node` image.
    pub image: Option<String>,
}

/// Parses and checks a kind configuration: the kind and version, at least one control plane,
/// known roles, and node images of one Kubernetes version no older than 1.35, pinned by digest.
pub fn check(text: &str) -> anyhow::Result<KindCluster> {
    let cluster: KindCluster = serde_saphyr::from_str(text)?;
    anyhow::ensure!(
        cluster.kind == "Cluster",
        "kind must be Cluster, not {}",
        cluster.kind
    );
    anyhow::ensure!(
        cluster.api_version == "kind.x-k8s.io/v1alpha4",
        "apiVersion must be kind.x-k8s.io/v1alpha4, not {}",
        cluster.api_version
    );
    anyhow::ensure!(
        cluster.nodes.iter().any(|n| n.role == "control-plane"),
        "a kind cluster needs a control-plane node"
    );
    for node in &cluster.nodes {
        anyhow::ensure!(
            node.role == "control-plane" || node.role == "worker",
            "unknown node role {}",
            node.role
        );
        if let Some(image) = node.image.as_deref().filter(|i| *i != OFFLINE_NODE_IMAGE) {
            let version = image
                .strip_prefix("kindest/node:v")
                .ok_or_else(|| anyhow::anyhow!("node image {image} is not a kindest/node image"))?;
            let minor: u32 = version
                .split('.')
                .nth(1)
                .and_then(|m| m.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("failed to read the version of {image}"))?;
            anyhow::ensure!(
                minor >= 35,
                "node image {image} is older than Kubernetes 1.35"
            );
            let digest = image.split_once("@sha256:").map(|(_, digest)| digest);
            anyhow::ensure!(
                digest.is_some_and(|d| d.len() == 64
                    && d.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))),
                "node image {image} is not pinned by digest (a tag moves; kind's release notes, \
                 and pkg/apis/config/defaults/image.go in its module, give each node image's)"
            );
        }
    }
    let images: std::collections::BTreeSet<_> = cluster.nodes.iter().map(|n| &n.image).collect();
    anyhow::ensure!(images.len() == 1, "all nodes must run the same image");
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths;

    #[test]
    fn committed_kind_config_is_a_valid_cluster_with_workers() {
        let cluster = check(&paths::read_workspace_file(KIND_CONFIG).unwrap()).unwrap();
        assert!(cluster.nodes.iter().filter(|n| n.role == "worker").count() >= 2);
    }

    #[test]
    fn offline_config_has_the_same_nodes_on_the_assembled_image_without_kindnetd() {
        let online = check(&paths::read_workspace_file(KIND_CONFIG).unwrap()).unwrap();
        let offline = check(&paths::read_workspace_file(KIND_OFFLINE_CONFIG).unwrap()).unwrap();
        let roles = |c: &KindCluster| c.nodes.iter().map(|n| n.role.clone()).collect::<Vec<_>>();
        assert_eq!(roles(&online), roles(&offline));
        assert!(
            offline
                .nodes
                .iter()
                .all(|n| n.image.as_deref() == Some(OFFLINE_NODE_IMAGE))
        );
        assert_eq!(
            offline.networking.and_then(|n| n.disable_default_cni),
            Some(true)
        );
        for patch in &offline.kubeadm_config_patches {
            let _: serde_json::Value = serde_saphyr::from_str(patch).unwrap();
        }
    }

    #[test]
    fn a_misspelled_field_is_refused() {
        let err =
            check("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodez: []\n").unwrap_err();
        assert!(err.to_string().contains("nodez"), "{err}");
    }

    #[test]
    fn a_cluster_without_control_plane_is_refused() {
        let err =
            check("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: worker\n")
                .unwrap_err();
        assert!(err.to_string().contains("control-plane"), "{err}");
    }

    #[test]
    fn an_old_node_image_is_refused() {
        let text = "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n  image: kindest/node:v1.29.0\n";
        assert!(check(text).unwrap_err().to_string().contains("1.35"));
    }

    /// Runs the recipe with fakes of docker, kind, kubectl and cargo first on PATH, `kind get
    /// clusters` answering `existing`; returns its exit status, its stderr and every kind
    /// command it ran.
    fn recipe_with_fakes(existing: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kind.log");
        let fake = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        fake(
            "kind",
            &format!(
                "echo \"$*\" >> '{}'\n[ \"$1\" = get ] && printf '%s\\n' {}\nexit 0",
                log.display(),
                existing.join(" ")
            ),
        );
        for tool in ["docker", "kubectl", "cargo"] {
            fake(tool, "exit 0");
        }
        let path = format!(
            "{}:{}",
            dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let output = std::process::Command::new("bash")
            .arg(paths::workspace_root().join(KIND_RECIPE))
            .env("PATH", path)
            .env("DOCKER", dir.path().join("docker"))
            .env("CARGO", dir.path().join("cargo"))
            .env("CARGO_TARGET_DIR", dir.path().join("target"))
            .env("KIND_STATE_DIR", dir.path().join("state"))
            .env_remove("E2E_KIND_CLUSTER")
            .env_remove("STAGE_LOG")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let commands = std::fs::read_to_string(&log).unwrap_or_default();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stderr).into_owned(),
            commands,
        )
    }

    #[test]
    fn recipe_never_deletes_a_cluster_it_did_not_make() {
        let name = format!("theirs-{}", std::process::id());
        let ran = recipe_with_fakes(
            &["kind", &name],
            &[("E2E_KIND_CLUSTER", &name), ("KIND_CLUSTER_NAME", "kind")],
        );
        assert_left_alone(ran, &name);
    }

    /// The recipe stopped at the existing cluster `name`: it failed saying so and ran no kind
    /// command that would delete or create one.
    fn assert_left_alone((status, stderr, commands): (i32, String, String), name: &str) {
        assert_eq!(status, 1, "{stderr}");
        assert!(
            stderr.contains(&format!("a kind cluster named '{name}' exists")),
            "{stderr}"
        );
        assert!(
            !commands.contains("delete") && !commands.contains("create"),
            "the recipe ran: {commands}"
        );
    }

    #[test]
    fn recipe_ignores_kinds_own_cluster_name() {
        let ran = recipe_with_fakes(
            &["kind", "initializer-e2e"],
            &[("KIND_CLUSTER_NAME", "kind")],
        );
        assert_left_alone(ran, "initializer-e2e");
    }

    #[test]
    fn a_node_image_by_tag_alone_is_refused() {
        let text = "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n  image: kindest/node:v1.37.0\n";
        assert!(check(text).unwrap_err().to_string().contains("digest"));
    }

    /// The recipe installs a release, and the release pushes an image of every shipped binary.
    #[test]
    fn recipe_releases_an_image_for_every_shipped_binary() {
        let script = paths::read_workspace_file(KIND_RECIPE).unwrap();
        assert!(
            script.contains("tools/release/release.sh"),
            "{KIND_RECIPE} makes no release"
        );
        let release = paths::read_workspace_file(RELEASE_BINARIES).unwrap();
        for binary in paths::shipped_binaries() {
            assert!(
                release.lines().any(|line| line.trim() == binary),
                "{RELEASE_BINARIES} does not release an image of {binary}"
            );
        }
    }

    /// Both configurations let the nodes pull from the recipe's registry.
    #[test]
    fn both_configs_point_containerd_at_the_registry_hosts_the_recipe_writes() {
        for config in [KIND_CONFIG, KIND_OFFLINE_CONFIG] {
            let cluster = check(&paths::read_workspace_file(config).unwrap()).unwrap();
            assert!(
                cluster
                    .containerd_config_patches
                    .iter()
                    .any(|patch| patch.contains(CONTAINERD_HOSTS_PATCH)),
                "{config}"
            );
        }
        let script = paths::read_workspace_file(KIND_RECIPE).unwrap();
        assert!(script.contains("/etc/containerd/certs.d/$host/hosts.toml"));
    }
}
