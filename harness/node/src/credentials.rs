//! How a pod reaches the API server: the kubeconfig the node gives it through `KUBECONFIG`.
//!
//! Processes share the host's filesystem, so the in-cluster files at
//! `/var/run/secrets/kubernetes.io/serviceaccount` cannot be where clients look for them. On a
//! real API server each pod therefore gets a kubeconfig that points at its own service-account
//! volume (the one mounted at that path): the CA and the bound token the node wrote there, the
//! token read again by the client whenever it changes. A pod that mounts no token gets a
//! kubeconfig with no credentials, so it is anonymous, as it would be in a cluster. On the
//! sandbox, which has no per-service-account identity, every pod gets a copy of one shared
//! kubeconfig.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

/// Where Kubernetes mounts a pod's service-account token, CA and namespace.
pub const SERVICE_ACCOUNT_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How pods get their credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodCredentials {
    /// Every pod gets a copy of this kubeconfig, with its namespace as the context's (the
    /// sandbox: every pod acts as the kubeconfig's user).
    Shared(PathBuf),
    /// Each pod gets a kubeconfig for `server` with its own service-account token and CA.
    ServiceAccount {
        /// The API server's URL as pods reach it.
        server: String,
    },
}

/// The volume mounted at [`SERVICE_ACCOUNT_MOUNT`] by the pod's first container that mounts it.
pub fn token_volume(pod: &Pod) -> Option<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .find(|m| m.mount_path.trim_end_matches('/') == SERVICE_ACCOUNT_MOUNT)
        .map(|m| m.name.clone())
}

/// A kubeconfig for `server` in `namespace`: with the CA and token files of `token_dir` when
/// the pod mounts its service account, without any credentials otherwise.
pub fn service_account_kubeconfig(
    server: &str,
    namespace: &str,
    token_dir: Option<&Path>,
) -> String {
    let (cluster_ca, user) = match token_dir {
        Some(dir) => (
            format!(
                "\n    certificate-authority: {}",
                dir.join("ca.crt").display()
            ),
            format!("\n    tokenFile: {}", dir.join("token").display()),
        ),
        // Anonymous, and without the cluster's CA: like a pod without a service-account
        // volume, it cannot even verify the API server (and nothing here skips verification).
        None => (String::new(), " {}".to_owned()),
    };
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: {server}{cluster_ca}
users:
- name: service-account
  user:{user}
contexts:
- name: in-cluster
  context:
    cluster: cluster
    user: service-account
    namespace: {namespace}
current-context: in-cluster
"
    )
}

/// The node's shared kubeconfig `text` as a pod of `namespace` running as `service_account`
/// gets it: every context's namespace is the pod's (an in-cluster client defaults to its own
/// namespace) and its user is named `system:serviceaccount:<namespace>:<service_account>`.
/// Credentials stay the shared file's. `None` when `text` is not a kubeconfig with contexts and
/// users.
pub fn shared_kubeconfig(text: &str, namespace: &str, service_account: &str) -> Option<String> {
    let mut config: serde_json::Value = serde_saphyr::from_str(text).ok()?;
    let user = serde_json::Value::from(format!(
        "system:serviceaccount:{namespace}:{service_account}"
    ));
    let old_user = config["contexts"][0]["context"]["user"].clone();
    for context in config.get_mut("contexts")?.as_array_mut()? {
        if let Some(c) = context
            .get_mut("context")
            .and_then(serde_json::Value::as_object_mut)
        {
            c.insert("namespace".into(), namespace.into());
            c.insert("user".into(), user.clone());
        }
    }
    for entry in config.get_mut("users")?.as_array_mut()? {
        if entry.get("name") == Some(&old_user)
            && let Some(m) = entry.as_object_mut()
        {
            m.insert("name".into(), user.clone());
        }
    }
    serde_saphyr::to_string(&config).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, VolumeMount};

    fn pod(mount: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    volume_mounts: Some(vec![
                        VolumeMount {
                            name: "config".into(),
                            mount_path: "/etc/config".into(),
                            ..VolumeMount::default()
                        },
                        VolumeMount {
                            name: "kube-api-access-x1".into(),
                            mount_path: mount.into(),
                            ..VolumeMount::default()
                        },
                    ]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn the_token_volume_is_the_one_at_the_service_account_path() {
        assert_eq!(
            token_volume(&pod(SERVICE_ACCOUNT_MOUNT)).as_deref(),
            Some("kube-api-access-x1")
        );
        assert_eq!(token_volume(&pod("/somewhere/else")), None);
    }

    #[test]
    fn a_pod_with_a_token_reads_it_from_its_volume() {
        let text =
            service_account_kubeconfig("https://10.200.0.1:6443", "ops", Some(Path::new("/v/t")));
        let parsed = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let user = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some("/v/t/token"));
        let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/v/t/ca.crt")
        );
        assert_eq!(
            parsed.contexts[0]
                .context
                .as_ref()
                .unwrap()
                .namespace
                .as_deref(),
            Some("ops")
        );
    }

    #[test]
    fn a_pod_without_a_token_is_anonymous() {
        let text = service_account_kubeconfig("https://10.200.0.1:6443", "ops", None);
        let parsed = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let user = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_none() && user.token_file.is_none());
        assert!(user.client_certificate_data.is_none());
    }

    const SHARED: &str = "apiVersion: v1
kind: Config
clusters:
- name: sandbox
  cluster:
    server: https://127.0.0.1:6443
users:
- name: admin
  user:
    token: secret-token
- name: other
  user:
    token: other-token
contexts:
- name: sandbox
  context:
    cluster: sandbox
    user: admin
current-context: sandbox
";

    #[test]
    fn a_shared_kubeconfig_acts_in_the_pods_namespace_as_its_service_account() {
        let text = shared_kubeconfig(SHARED, "ops", "builder").unwrap();
        let parsed = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let context = parsed.contexts[0].context.as_ref().unwrap();
        assert_eq!(context.namespace.as_deref(), Some("ops"));
        assert_eq!(
            context.user.as_deref(),
            Some("system:serviceaccount:ops:builder")
        );
        let yaml: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let users = yaml["users"].as_array().unwrap();
        let renamed = users
            .iter()
            .find(|u| u["name"] == "system:serviceaccount:ops:builder")
            .unwrap();
        assert_eq!(
            renamed["user"]["token"], "secret-token",
            "credentials stay the shared file's"
        );
        assert!(parsed.auth_infos.iter().any(|a| a.name == "other"));
        assert_eq!(parsed.clusters[0].name, "sandbox");
    }

    #[test]
    fn text_that_is_not_a_kubeconfig_is_refused() {
        assert_eq!(
            shared_kubeconfig("not: [a kubeconfig", "ops", "default"),
            None
        );
        assert_eq!(shared_kubeconfig("users: []\n", "ops", "default"), None);
        assert_eq!(shared_kubeconfig("contexts: []\n", "ops", "default"), None);
    }
}
