//! Who a pod's processes run as, and who owns its files.
//!
//! Processes share the host with the node. A node running as root that started pods as root
//! would hand every pod the host: the control plane's keys, the developer's `~/.kube/config`,
//! any file at all. So where the node is root, every container runs as an unprivileged user:
//! its `securityContext.runAsUser`/`runAsGroup` (the container's, else the pod's), by default
//! [`NONROOT`] (uid and gid 65532, the `nonroot` user of the distroless images ours are built
//! on). Root is never granted: a container asking for uid or gid 0 is refused
//! (`CreateContainerConfigError`). The pod's files (volumes, kubeconfig, working directory) are
//! owned by the user its containers share. A node that is not root cannot switch users; its
//! pods run as the node's own user, and `runAsUser` is not enforced.

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod, PodSecurityContext, SecurityContext};

/// The unprivileged uid and gid pods run as by default.
pub const NONROOT: u32 = 65532;

/// A user and its primary group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// Whether the node runs as root, and so must (and can) run pods as someone else.
pub fn node_is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn id(value: Option<i64>, what: &str) -> Result<Option<u32>, String> {
    match value {
        None => Ok(None),
        Some(0) => Err(format!(
            "{what} 0 is refused: the node runs no container as root"
        )),
        Some(v) => u32::try_from(v)
            .map(Some)
            .map_err(|_| format!("{what} {v} is not a valid id")),
    }
}

/// The user `container` of `pod` runs as on a node that is root (`node_root`); `None` on a node
/// that is not (the node's own user). `Err` with the `CreateContainerConfigError` message when
/// it asks for root or an invalid id.
pub fn container_user(
    node_root: bool,
    pod: &Pod,
    container: &Container,
) -> Result<Option<RunAs>, String> {
    if !node_root {
        return Ok(None);
    }
    let pod_context: Option<&PodSecurityContext> =
        pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let own: Option<&SecurityContext> = container.security_context.as_ref();
    let uid = id(
        own.and_then(|c| c.run_as_user)
            .or_else(|| pod_context.and_then(|c| c.run_as_user)),
        "runAsUser",
    )?;
    let gid = id(
        own.and_then(|c| c.run_as_group)
            .or_else(|| pod_context.and_then(|c| c.run_as_group)),
        "runAsGroup",
    )?;
    Ok(Some(RunAs {
        uid: uid.unwrap_or(NONROOT),
        gid: gid.unwrap_or(NONROOT),
    }))
}

/// Who owns the pod's files: the user its containers run as when they agree (the usual case),
/// else [`NONROOT`] (files of mode 0644, the default, stay readable by every container; a
/// stricter mode then reaches only that user). `None` on a node that is not root, and for a
/// pod that asks for root (its containers never start).
pub fn pod_owner(node_root: bool, pod: &Pod) -> Option<RunAs> {
    let mut users = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| container_user(node_root, pod, c));
    let first = users.next().unwrap_or(Ok(None)).ok()??;
    if users.all(|u| u == Ok(Some(first))) {
        Some(first)
    } else {
        Some(RunAs {
            uid: NONROOT,
            gid: NONROOT,
        })
    }
}

/// Gives `path` and everything below it to `owner` (symbolic links themselves, never what
/// they point at, so nothing outside the tree changes hands).
pub fn hand_over(path: &Path, owner: RunAs) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(owner.uid), Some(owner.gid))?;
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            hand_over(&entry?.path(), owner)?;
        }
    }
    Ok(())
}

/// Whether a user other than the directories' owners may reach `dir`: every directory from the
/// root down to it lets others search it (`o+x`). A private ancestor (a `0700` temporary
/// directory) hides everything below it from the pods' user.
pub fn reachable_by_others(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;

    use super::*;

    fn pod(pod_user: Option<i64>, users: &[Option<i64>]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                security_context: Some(PodSecurityContext {
                    run_as_user: pod_user,
                    ..PodSecurityContext::default()
                }),
                containers: users
                    .iter()
                    .map(|u| Container {
                        name: "c".into(),
                        security_context: Some(SecurityContext {
                            run_as_user: *u,
                            ..SecurityContext::default()
                        }),
                        ..Container::default()
                    })
                    .collect(),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    fn user(uid: u32, gid: u32) -> Option<RunAs> {
        Some(RunAs { uid, gid })
    }

    #[test]
    fn a_root_node_runs_containers_as_nonroot_unless_they_name_another_user() {
        let p = pod(None, &[None]);
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_user(true, &p, c), Ok(user(NONROOT, NONROOT)));
        let p = pod(Some(1000), &[None, Some(2000)]);
        let [a, b] = &p.spec.as_ref().unwrap().containers[..] else {
            unreachable!()
        };
        assert_eq!(container_user(true, &p, a), Ok(user(1000, NONROOT)));
        assert_eq!(container_user(true, &p, b), Ok(user(2000, NONROOT)));
    }

    #[test]
    fn root_is_refused_whoever_asks() {
        for p in [pod(Some(0), &[None]), pod(Some(1000), &[Some(0)])] {
            let c = &p.spec.as_ref().unwrap().containers[0];
            let err = container_user(true, &p, c).unwrap_err();
            assert!(err.contains("runAsUser 0 is refused"), "{err}");
        }
        let mut p = pod(None, &[None]);
        p.spec.as_mut().unwrap().containers[0]
            .security_context
            .as_mut()
            .unwrap()
            .run_as_group = Some(0);
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert!(container_user(true, &p, c).is_err());
    }

    #[test]
    fn a_node_that_is_not_root_runs_pods_as_itself() {
        let p = pod(Some(0), &[Some(1000)]);
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_user(false, &p, c), Ok(None));
        assert_eq!(pod_owner(false, &p), None);
    }

    #[test]
    fn the_pods_files_belong_to_the_user_its_containers_share() {
        assert_eq!(
            pod_owner(true, &pod(Some(1000), &[None, None])),
            user(1000, NONROOT)
        );
        assert_eq!(
            pod_owner(true, &pod(None, &[Some(1000), Some(2000)])),
            user(NONROOT, NONROOT)
        );
        assert_eq!(pod_owner(true, &pod(Some(0), &[None])), None);
    }

    #[test]
    fn a_private_ancestor_hides_a_directory() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("state");
        std::fs::create_dir(&inner).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(!reachable_by_others(&inner));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        assert!(reachable_by_others(&inner));
    }
}
