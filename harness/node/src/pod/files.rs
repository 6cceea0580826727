//! A pod's files on the node: its directory, its volumes' directories, its log files, its
//! kubeconfig, and where its volumes' contents come from. Where the pod runs as its own user
//! ([`crate::user`]), its directory and everything the node writes in it belong to that user,
//! readable by no one else; logs stay the node's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccountTokenProjection};

use crate::cache::Caches;
use crate::credentials::{self, PodCredentials};
use crate::env::Lookup;
use crate::token::{TokenKey, Tokens};
use crate::user::{self, RunAs};

/// The pod's directory under the root of pods' directories (`<state>/pods`, or where
/// [`pods_root`] put it).
pub fn pod_dir(pods_root: &Path, namespace: &str, name: &str) -> PathBuf {
    pods_root.join(format!("{namespace}_{name}"))
}

/// Where pods' directories go, and the temporary directory holding them when it is not the
/// state directory's `pods/` (removed when dropped).
///
/// A node running pods as another user ([`crate::user`]) needs that user to reach each pod's
/// directory. A state directory inside a private one (a `0700` temporary directory, a home
/// directory) hides `<state>/pods`; making the private directory searchable would expose what
/// else is in it. So then pods' directories live in a fresh directory of their own under the
/// temporary directory. The root is searchable but not listable by others (`0711`); each pod's
/// directory is its user's alone.
pub fn pods_root(
    state_dir: &Path,
    other_user: bool,
) -> std::io::Result<(PathBuf, Option<tempfile::TempDir>)> {
    use std::os::unix::fs::PermissionsExt as _;
    let in_state = state_dir.join("pods");
    if !other_user {
        return Ok((in_state, None));
    }
    if user::reachable_by_others(state_dir) {
        std::fs::create_dir_all(&in_state)?;
        std::fs::set_permissions(&in_state, std::fs::Permissions::from_mode(0o711))?;
        return Ok((in_state, None));
    }
    let own = tempfile::Builder::new()
        .prefix("initializer-node-pods-")
        .permissions(std::fs::Permissions::from_mode(0o711))
        .tempdir()?;
    if !user::reachable_by_others(own.path()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "neither the state directory {} nor the temporary directory {} is reachable by \
                 the pods' user: make one of them searchable by others (o+x)",
                state_dir.display(),
                own.path().display()
            ),
        ));
    }
    Ok((own.path().to_path_buf(), Some(own)))
}

/// Creates the pod's directory, its user's alone (owner and group: `owner`, mode 0750), or as
/// the node's where the pod runs as the node.
pub(super) fn create_pod_dir(dir: &Path, owner: Option<RunAs>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir)?;
    if let Some(owner) = owner {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))?;
        std::os::unix::fs::lchown(dir, Some(owner.uid), Some(owner.gid))?;
    }
    Ok(())
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

/// Writes the pod's kubeconfig as `credentials` say (see [`crate::credentials`]), readable by
/// `owner` alone, and returns the path its containers get in `KUBECONFIG`; `Err` (the
/// container's `CreateContainerConfigError`) when it cannot be written. The node never hands a
/// pod its own kubeconfig file instead.
pub(super) fn kubeconfig(
    credentials: &PodCredentials,
    pod_dir: &Path,
    pod: &Pod,
    volume_dirs: &BTreeMap<String, PathBuf>,
    owner: Option<RunAs>,
) -> Result<PathBuf, String> {
    let path = match credentials {
        PodCredentials::Shared(shared) => shared_kubeconfig_file(shared, pod_dir, pod)?,
        PodCredentials::ServiceAccount { server } => {
            service_account_kubeconfig_file(server, pod_dir, pod, volume_dirs)?
        }
    };
    if let Some(owner) = owner {
        std::os::unix::fs::lchown(&path, Some(owner.uid), Some(owner.gid))
            .map_err(|e| format!("failed to give the pod its kubeconfig: {e}"))?;
    }
    Ok(path)
}

/// Writes the pod's kubeconfig for its own service account (an anonymous one when it mounts
/// no token).
fn service_account_kubeconfig_file(
    server: &str,
    pod_dir: &Path,
    pod: &Pod,
    volume_dirs: &BTreeMap<String, PathBuf>,
) -> Result<PathBuf, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let token_dir = credentials::token_volume(pod).and_then(|name| volume_dirs.get(&name));
    let text =
        credentials::service_account_kubeconfig(server, namespace, token_dir.map(PathBuf::as_path));
    let path = pod_dir.join("kubeconfig");
    write_private(pod_dir, &path, &text)
        .map_err(|e| format!("failed to write the pod's kubeconfig: {e}"))?;
    Ok(path)
}

/// Writes the node's shared kubeconfig as the pod gets it ([`credentials::shared_kubeconfig`]).
/// A shared file that cannot be read or rewritten is an error, never handed over as it is.
fn shared_kubeconfig_file(shared: &Path, pod_dir: &Path, pod: &Pod) -> Result<PathBuf, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let service_account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .unwrap_or("default");
    let path = pod_dir.join("kubeconfig");
    let text = std::fs::read_to_string(shared)
        .map_err(|e| format!("failed to read the node's kubeconfig for pods: {e}"))?;
    let text = credentials::shared_kubeconfig(&text, namespace, service_account)
        .ok_or("failed to rewrite the node's kubeconfig for the pod: it is not a kubeconfig")?;
    write_private(pod_dir, &path, &text)
        .map_err(|e| format!("failed to write the pod's kubeconfig: {e}"))?;
    Ok(path)
}

/// Writes `text` to `path` in `dir` (created if missing), readable by its owner only.
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
            pod_dir(&state.join("pods"), "ops", "web"),
            PathBuf::from("/state/pods/ops_web")
        );
        assert_eq!(
            log_path(state, "ops", "web", "app"),
            PathBuf::from("/state/logs/ops_web/app.log")
        );
    }

    #[test]
    fn pods_live_where_their_user_can_reach_them() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // A private ancestor, as a home directory is (tempfile makes 0755 directories).
        let private = tempfile::tempdir().unwrap();
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let state = private.path().join("state");
        std::fs::create_dir(&state).unwrap();
        // Run as the node: the state directory, whatever its ancestors.
        let (root, own) = pods_root(&state, false).unwrap();
        assert_eq!((root, own.is_none()), (state.join("pods"), true));
        // As another user, behind a private ancestor: a directory of their own elsewhere.
        let (root, own) = pods_root(&state, true).unwrap();
        assert!(
            own.is_some() && !root.starts_with(private.path()),
            "{root:?}"
        );
        assert!(user::reachable_by_others(&root));
        assert_eq!(mode(&root), 0o711);
        drop(own);
        assert!(!root.exists(), "removed with the node");
        // A reachable state directory keeps them.
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let (root, own) = pods_root(&state, true).unwrap();
        assert_eq!((root.clone(), own.is_none()), (state.join("pods"), true));
        assert_eq!(mode(&root), 0o711);
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
        let path = shared_kubeconfig_file(&shared, &pod_dir, &pod).unwrap();
        assert_eq!(path, pod_dir.join("kubeconfig"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("system:serviceaccount:ops:default"), "{text}");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_shared_kubeconfig_that_cannot_be_rewritten_is_never_handed_to_the_pod() {
        let dir = tempfile::tempdir().unwrap();
        let pod_dir = dir.path().join("pod");
        // The node's own file, unreadable or not a kubeconfig: the pod gets an error, not it.
        let shared = dir.path().join("node.kubeconfig");
        std::fs::write(&shared, "not: [a kubeconfig").unwrap();
        let missing = dir.path().join("missing");
        for file in [&shared, &missing] {
            let result = shared_kubeconfig_file(file, &pod_dir, &Pod::default());
            assert!(result.is_err(), "{result:?}");
        }
        assert!(!pod_dir.join("kubeconfig").exists());
    }
}
