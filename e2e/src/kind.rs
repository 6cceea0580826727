//! The kind recipe's configuration (`e2e/kind/kind-config.yaml`), read back and checked so that
//! a broken file is caught here rather than on someone's laptop.

use serde::Deserialize;

/// Path of the kind configuration, relative to the workspace root.
pub const KIND_CONFIG: &str = "e2e/kind/kind-config.yaml";
/// Path of the recipe script, relative to the workspace root.
pub const KIND_RECIPE: &str = "e2e/kind/run.sh";

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
/// known roles, and node images of one Kubernetes version no older than 1.31.
pub fn check(text: &str) -> anyhow::Result<KindCluster> {
    let cluster: KindCluster = serde_yaml::from_str(text)?;
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
        if let Some(image) = &node.image {
            let version = image
                .strip_prefix("kindest/node:v")
                .ok_or_else(|| anyhow::anyhow!("node image {image} is not a kindest/node image"))?;
            let minor: u32 = version
                .split('.')
                .nth(1)
                .and_then(|m| m.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("failed to read the version of {image}"))?;
            anyhow::ensure!(
                minor >= 31,
                "node image {image} is older than Kubernetes 1.31"
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
        assert!(check(text).unwrap_err().to_string().contains("1.31"));
    }

    #[test]
    fn recipe_loads_an_image_for_every_shipped_binary() {
        let script = paths::read_workspace_file(KIND_RECIPE).unwrap();
        for binary in paths::shipped_binaries() {
            assert!(
                script.lines().any(|line| line.trim() == binary),
                "{KIND_RECIPE} does not load the image of {binary}"
            );
        }
    }
}
