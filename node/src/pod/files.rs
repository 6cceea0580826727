//! A pod's files on the node: its directory, its volumes' directories, its log files, its
//! kubeconfig, and where its volumes' contents come from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccountTokenProjection};

use crate::cache::Caches;
use crate::credentials::{self, PodCredentials};
use crate::env::Lookup;
use crate::token::{TokenKey, Tokens};

/// The pod's directory under the state directory.
pub fn pod_dir(state_dir: &Path, namespace: &str, name: &str) -> PathBuf {
    state_dir.join("pods").join(format!("{namespace}_{name}"))
}

/// A container's log file: `<state>/logs/<namespace>_<pod>/<container>.log`.
pub fn log_path(state_dir: &Path, namespace: &str, name: &str, container: &str) -> PathBuf {
    state_dir
        .join("logs")
        .join(format!("{namespace}_{name}"))
        .join(format!("{container}.log"))
}

/// Where each volume of `pod` lives: its `hostPath`, else `<pod_dir>/volumes/<name>`.
pub(super) fn volume_dirs(pod: &Pod, pod_dir: &Path) -> BTreeMap<String, PathBuf> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .map(|v| {
            let path = match &v.host_path {
                Some(h) => PathBuf::from(&h.path),
                None => pod_dir.join("volumes").join(&v.name),
            };
            (v.name.clone(), path)
        })
        .collect()
}

/// Writes the pod's kubeconfig as `credentials` say (see [`crate::credentials`]) and returns
/// the path its containers get in `KUBECONFIG`.
pub(super) fn kubeconfig(
    credentials: &PodCredentials,
    pod_dir: &Path,
    pod: &Pod,
    volume_dirs: &BTreeMap<String, PathBuf>,
) -> PathBuf {
    match credentials {
        PodCredentials::Shared(shared) => shared_kubeconfig_file(shared, pod_dir, pod),
        PodCredentials::ServiceAccount { server } => {
            service_account_kubeconfig_file(server, pod_dir, pod, volume_dirs)
        }
    }
}

/// Writes the pod's kubeconfig for its own service account; falls back to an anonymous one in
/// the pod's directory.
fn service_account_kubeconfig_file(
    server: &str,
    pod_dir: &Path,
    pod: &Pod,
    volume_dirs: &BTreeMap<String, PathBuf>,
) -> PathBuf {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let token_dir = credentials::token_volume(pod).and_then(|name| volume_dirs.get(&name));
    let text =
        credentials::service_account_kubeconfig(server, namespace, token_dir.map(PathBuf::as_path));
    let path = pod_dir.join("kubeconfig");
    if let Err(e) = write_private(pod_dir, &path, &text) {
        tracing::warn!(path = %path.display(), error = %e, "failed to write the pod's kubeconfig");
    }
    path
}

/// Writes the node's shared kubeconfig as the pod gets it ([`credentials::shared_kubeconfig`]);
/// falls back to the shared file when it cannot be read, rewritten or written.
fn shared_kubeconfig_file(shared: &Path, pod_dir: &Path, pod: &Pod) -> PathBuf {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let service_account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .unwrap_or("default");
    let path = pod_dir.join("kubeconfig");
    let written = std::fs::read_to_string(shared)
        .ok()
        .and_then(|text| credentials::shared_kubeconfig(&text, namespace, service_account))
        .and_then(|text| write_private(pod_dir, &path, &text).ok());
    match written {
        Some(()) => path,
        None => shared.to_path_buf(),
    }
}

/// Writes `text` to `path` in `dir` (created if missing), readable by the node's user only.
fn write_private(dir: &Path, path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
}

/// What volumes are made of: the node's caches, and the tokens issued to its pods.
pub(super) struct NodeLookup<'a> {
    pub caches: &'a Caches,
    pub tokens: Option<&'a Tokens>,
}

impl Lookup for NodeLookup<'_> {
    fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.caches.secret(namespace, name)
    }

    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.caches.config_map(namespace, name)
    }

    fn service_account_token(
        &self,
        pod: &Pod,
        source: &ServiceAccountTokenProjection,
    ) -> Result<Vec<u8>, String> {
        let Some(tokens) = self.tokens else {
            return Ok(b"sandbox".to_vec());
        };
        tokens
            .get(&TokenKey::of(pod, source))
            .map(String::into_bytes)
            .ok_or_else(|| "the service-account token is not issued yet".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{HostPathVolumeSource, PodSpec, Volume};

    use super::*;

    #[test]
    fn paths_are_per_namespace_and_pod() {
        let state = Path::new("/state");
        assert_eq!(
            pod_dir(state, "ops", "web"),
            PathBuf::from("/state/pods/ops_web")
        );
        assert_eq!(
            log_path(state, "ops", "web", "app"),
            PathBuf::from("/state/logs/ops_web/app.log")
        );
    }

    #[test]
    fn volumes_live_in_the_pod_directory_unless_they_are_host_paths() {
        let pod = Pod {
            spec: Some(PodSpec {
                volumes: Some(vec![
                    Volume {
                        name: "data".into(),
                        ..Volume::default()
                    },
                    Volume {
                        name: "host".into(),
                        host_path: Some(HostPathVolumeSource {
                            path: "/srv/shared".into(),
                            type_: None,
                        }),
                        ..Volume::default()
                    },
                ]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        let dirs = volume_dirs(&pod, Path::new("/state/pods/ops_web"));
        assert_eq!(
            dirs,
            BTreeMap::from([
                (
                    "data".to_owned(),
                    PathBuf::from("/state/pods/ops_web/volumes/data")
                ),
                ("host".to_owned(), PathBuf::from("/srv/shared")),
            ])
        );
        assert!(volume_dirs(&Pod::default(), Path::new("/p")).is_empty());
    }

    #[test]
    fn a_pod_gets_its_own_copy_of_the_shared_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::write(
            &shared,
            "contexts:\n- name: c\n  context:\n    user: admin\nusers:\n- name: admin\n  user: {}\n",
        )
        .unwrap();
        let pod_dir = dir.path().join("pod");
        let pod = Pod {
            metadata: kube::api::ObjectMeta {
                namespace: Some("ops".into()),
                ..Default::default()
            },
            ..Pod::default()
        };
        let path = shared_kubeconfig_file(&shared, &pod_dir, &pod);
        assert_eq!(path, pod_dir.join("kubeconfig"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("system:serviceaccount:ops:default"), "{text}");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn an_unreadable_shared_kubeconfig_is_used_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("missing");
        let pod_dir = dir.path().join("pod");
        assert_eq!(
            shared_kubeconfig_file(&shared, &pod_dir, &Pod::default()),
            shared
        );
        assert!(!pod_dir.exists());
    }
}
