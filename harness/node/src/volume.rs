//! Pod volumes materialized as files, and the mount-path rewriting rule.
//!
//! Each volume lives in `<pod dir>/volumes/<volume name>`. Secret, ConfigMap, downwardAPI and
//! projected volumes are written the way the kubelet's atomic writer does it: the files go into
//! a fresh hidden directory, `..data` is swapped to point at it in one rename, and each top-level
//! entry is a symlink through `..data`, so a reader never sees a half-updated set (a certificate
//! with the old key). `emptyDir` is a plain directory; `hostPath` is the host path itself.
//!
//! **Rewriting rule**: a container sees a volume at its `mountPath`. Since processes share the
//! host's filesystem, every arg, command word, env value and `workingDir` that equals a
//! `mountPath`, or starts with `mountPath + "/"`, has that prefix replaced with the volume's
//! directory (plus `subPath` when the mount has one). The longest matching mount path wins.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, Volume,
};

use crate::env::{Lookup, Placement, field_value};
use crate::user::RunAs;

/// A volume's files: relative path → (content, mode).
pub type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// Mount paths of one container mapped to host directories, longest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mounts(Vec<(String, PathBuf)>);

impl Mounts {
    /// The container's mounts, given where each volume lives on the host.
    pub fn of(container: &Container, volume_dirs: &BTreeMap<String, PathBuf>) -> Self {
        let mut pairs: Vec<(String, PathBuf)> = container
            .volume_mounts
            .iter()
            .flatten()
            .filter_map(|m| {
                let dir = volume_dirs.get(&m.name)?;
                let dir = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                    Some(sub) => dir.join(sub),
                    None => dir.clone(),
                };
                let mount = m.mount_path.trim_end_matches('/');
                Some((
                    if mount.is_empty() {
                        "/".into()
                    } else {
                        mount.to_owned()
                    },
                    dir,
                ))
            })
            .collect();
        pairs.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        Self(pairs)
    }

    /// Applies the rewriting rule to one value.
    pub fn rewrite(&self, value: &str) -> String {
        for (mount, dir) in &self.0 {
            if value == mount {
                return dir.display().to_string();
            }
            if let Some(rest) = value.strip_prefix(mount.as_str())
                && let Some(rest) = rest.strip_prefix('/')
            {
                return dir.join(rest).display().to_string();
            }
        }
        value.to_owned()
    }
}

fn mode_of(mode: Option<i32>, default: u32) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok()).unwrap_or(default) & 0o777
}

fn project(
    entries: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: u32,
    what: &str,
    optional: bool,
) -> Result<Files, String> {
    let mut files = Files::new();
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                match entries.get(&item.key) {
                    Some(v) => {
                        files.insert(
                            item.path.clone(),
                            (v.clone(), mode_of(item.mode, default_mode)),
                        );
                    }
                    None if optional => {}
                    None => {
                        return Err(format!("configured key {:?} not found in {what}", item.key));
                    }
                }
            }
        }
        _ => {
            for (k, v) in entries {
                files.insert(k.clone(), (v.clone(), default_mode));
            }
        }
    }
    Ok(files)
}

fn secret_entries(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in s.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone().into_bytes());
    }
    out
}

fn config_map_entries(c: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = c
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in c.binary_data.iter().flatten() {
        out.insert(k.clone(), v.0.clone());
    }
    out
}

fn downward_files(
    pod: &Pod,
    at: &Placement<'_>,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
) -> Files {
    items
        .iter()
        .map(|item| {
            let value = item
                .field_ref
                .as_ref()
                .and_then(|f| field_value(pod, at, &f.field_path))
                .unwrap_or_default();
            (
                item.path.clone(),
                (value.into_bytes(), mode_of(item.mode, default_mode)),
            )
        })
        .collect()
}

/// How one volume appears on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Files to write atomically.
    Files(Files),
    /// An empty directory, kept across container restarts.
    EmptyDir,
    /// An existing host path, used as is.
    HostPath(PathBuf),
}

/// What a volume should contain now, or why it cannot be built yet (the kubelet then keeps the
/// pod in `ContainerCreating`).
pub fn desired(
    pod: &Pod,
    at: &Placement<'_>,
    volume: &Volume,
    lookup: &dyn Lookup,
) -> Result<Source, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let mode = mode_of(s.default_mode, 0o644);
        let optional = s.optional == Some(true);
        return match lookup.secret(ns, &name) {
            Some(secret) => project(
                &secret_entries(&secret),
                s.items.as_ref(),
                mode,
                &format!("secret {ns}/{name}"),
                optional,
            )
            .map(Source::Files),
            None if optional => Ok(Source::Files(Files::new())),
            None => Err(format!("secret {name:?} not found")),
        };
    }
    if let Some(c) = &volume.config_map {
        let name = c.name.clone();
        let mode = mode_of(c.default_mode, 0o644);
        let optional = c.optional == Some(true);
        return match lookup.config_map(ns, &name) {
            Some(cm) => project(
                &config_map_entries(&cm),
                c.items.as_ref(),
                mode,
                &format!("configmap {ns}/{name}"),
                optional,
            )
            .map(Source::Files),
            None if optional => Ok(Source::Files(Files::new())),
            None => Err(format!("configmap {name:?} not found")),
        };
    }
    if let Some(d) = &volume.downward_api {
        let mode = mode_of(d.default_mode, 0o644);
        return Ok(Source::Files(downward_files(
            pod,
            at,
            d.items.as_deref().unwrap_or_default(),
            mode,
        )));
    }
    if let Some(p) = &volume.projected {
        let mode = mode_of(p.default_mode, 0o644);
        let mut files = Files::new();
        for source in p.sources.iter().flatten() {
            if let Some(s) = &source.secret {
                let optional = s.optional == Some(true);
                match lookup.secret(ns, &s.name) {
                    Some(secret) => files.extend(project(
                        &secret_entries(&secret),
                        s.items.as_ref(),
                        mode,
                        &format!("secret {ns}/{}", s.name),
                        optional,
                    )?),
                    None if optional => {}
                    None => return Err(format!("secret {:?} not found", s.name)),
                }
            }
            if let Some(c) = &source.config_map {
                let optional = c.optional == Some(true);
                match lookup.config_map(ns, &c.name) {
                    Some(cm) => files.extend(project(
                        &config_map_entries(&cm),
                        c.items.as_ref(),
                        mode,
                        &format!("configmap {ns}/{}", c.name),
                        optional,
                    )?),
                    None if optional => {}
                    None => return Err(format!("configmap {:?} not found", c.name)),
                }
            }
            if let Some(d) = &source.downward_api {
                files.extend(downward_files(
                    pod,
                    at,
                    d.items.as_deref().unwrap_or_default(),
                    mode,
                ));
            }
            if let Some(t) = &source.service_account_token {
                let token = lookup.service_account_token(pod, t)?;
                files.insert(t.path.clone(), (token, mode));
            }
        }
        return Ok(Source::Files(files));
    }
    if let Some(h) = &volume.host_path {
        return Ok(Source::HostPath(PathBuf::from(&h.path)));
    }
    // emptyDir, and every kind the node cannot provide, is an empty directory.
    Ok(Source::EmptyDir)
}

/// Reads the files currently published under `dir/..data`.
fn published(dir: &Path) -> Option<Files> {
    fn walk(base: &Path, rel: &Path, out: &mut Files) -> std::io::Result<()> {
        for entry in std::fs::read_dir(base.join(rel))? {
            let entry = entry?;
            let rel = rel.join(entry.file_name());
            let meta = std::fs::metadata(base.join(&rel))?;
            if meta.is_dir() {
                walk(base, &rel, out)?;
            } else {
                let content = std::fs::read(base.join(&rel))?;
                out.insert(
                    rel.display().to_string(),
                    (content, meta.permissions().mode() & 0o777),
                );
            }
        }
        Ok(())
    }
    let data = dir.join("..data");
    let mut files = Files::new();
    walk(&data, Path::new(""), &mut files).ok()?;
    Some(files)
}

fn top_level(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

/// Publishes `files` in `dir` atomically; returns whether anything changed.
pub fn write_atomically(dir: &Path, files: &Files) -> std::io::Result<bool> {
    write_atomically_as(dir, files, None)
}

/// [`write_atomically`], with the volume's directory and files owned by `owner` (the pod's
/// user): given to it before they are published, so a reader never meets a file it may not
/// read.
pub fn write_atomically_as(
    dir: &Path,
    files: &Files,
    owner: Option<RunAs>,
) -> std::io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    if let Some(owner) = owner {
        std::os::unix::fs::lchown(dir, Some(owner.uid), Some(owner.gid))?;
    }
    let current = published(dir);
    if current.as_ref() == Some(files) {
        return Ok(false);
    }
    let stamp = format!(
        "..{}_{:08x}",
        crate::clock::now().strftime("%Y_%m_%d_%H_%M_%S.%f"),
        rand::random::<u32>()
    );
    let staged = dir.join(&stamp);
    std::fs::create_dir_all(&staged)?;
    for (rel, (content, mode)) in files {
        if rel.split('/').any(|c| c == ".." || c.is_empty()) {
            continue;
        }
        let path = staged.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, content)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))?;
    }
    if let Some(owner) = owner {
        crate::user::hand_over(&staged, owner)?;
    }
    let previous = std::fs::read_link(dir.join("..data")).ok();
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&stamp, &tmp_link)?;
    std::fs::rename(&tmp_link, dir.join("..data"))?;
    let wanted: std::collections::BTreeSet<&str> = files.keys().map(|k| top_level(k)).collect();
    for name in &wanted {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !wanted.contains(name.as_str()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = previous.filter(|p| p.as_os_str() != stamp.as_str()) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::VolumeMount;

    use super::*;

    fn container(mounts: &[(&str, &str, Option<&str>)]) -> Container {
        Container {
            name: "c".into(),
            volume_mounts: Some(
                mounts
                    .iter()
                    .map(|(name, path, sub)| VolumeMount {
                        name: (*name).into(),
                        mount_path: (*path).into(),
                        sub_path: sub.map(Into::into),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn values_equal_to_or_under_a_mount_path_are_rewritten() {
        let dirs: BTreeMap<String, PathBuf> = [
            (
                "tls".to_owned(),
                PathBuf::from("/state/pods/a_p/volumes/tls"),
            ),
            (
                "etc".to_owned(),
                PathBuf::from("/state/pods/a_p/volumes/etc"),
            ),
        ]
        .into();
        let m = Mounts::of(
            &container(&[
                ("etc", "/etc/initializer", None),
                ("tls", "/etc/initializer/tls/", None),
            ]),
            &dirs,
        );
        assert_eq!(
            m.rewrite("/etc/initializer/tls"),
            "/state/pods/a_p/volumes/tls"
        );
        assert_eq!(
            m.rewrite("/etc/initializer/tls/tls.crt"),
            "/state/pods/a_p/volumes/tls/tls.crt"
        );
        assert_eq!(
            m.rewrite("/etc/initializer/config.yaml"),
            "/state/pods/a_p/volumes/etc/config.yaml"
        );
        assert_eq!(m.rewrite("/etc/initializertls"), "/etc/initializertls");
        assert_eq!(
            m.rewrite("--tls-dir=/etc/initializer/tls"),
            "--tls-dir=/etc/initializer/tls"
        );
    }

    #[test]
    fn sub_path_is_appended_to_the_volume_directory() {
        let dirs: BTreeMap<String, PathBuf> = [("cfg".to_owned(), PathBuf::from("/v/cfg"))].into();
        let m = Mounts::of(
            &container(&[("cfg", "/config.yaml", Some("config.yaml"))]),
            &dirs,
        );
        assert_eq!(m.rewrite("/config.yaml"), "/v/cfg/config.yaml");
    }

    #[test]
    fn a_volume_written_for_the_pods_user_is_theirs_before_it_is_published() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("tls");
        let mut files = Files::new();
        files.insert("tls.key".into(), (b"key".to_vec(), 0o400));
        let owner = RunAs {
            uid: crate::user::NONROOT,
            gid: crate::user::NONROOT,
        };
        let written = write_atomically_as(&vol, &files, Some(owner));
        if crate::user::node_is_root() {
            written.unwrap();
            for path in [vol.clone(), vol.join("tls.key"), vol.join("..data/")] {
                let meta = std::fs::metadata(&path).unwrap();
                assert_eq!((meta.uid(), meta.gid()), (owner.uid, owner.gid), "{path:?}");
            }
            let key = std::fs::metadata(vol.join("tls.key")).unwrap();
            assert_eq!(
                key.permissions().mode() & 0o777,
                0o400,
                "the mode stays the spec's"
            );
        } else {
            // Only root gives files away.
            assert_eq!(
                written.unwrap_err().kind(),
                std::io::ErrorKind::PermissionDenied
            );
        }
    }

    #[test]
    fn atomic_writes_publish_through_data_and_skip_unchanged_content() {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("tls");
        let mut files = Files::new();
        files.insert("tls.crt".into(), (b"cert-1".to_vec(), 0o644));
        files.insert("tls.key".into(), (b"key-1".to_vec(), 0o600));
        assert!(write_atomically(&vol, &files).unwrap());
        assert_eq!(std::fs::read(vol.join("tls.crt")).unwrap(), b"cert-1");
        assert_eq!(
            std::fs::metadata(vol.join("tls.key"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        assert!(!write_atomically(&vol, &files).unwrap());
        files.insert("tls.crt".into(), (b"cert-2".to_vec(), 0o644));
        files.remove("tls.key");
        assert!(write_atomically(&vol, &files).unwrap());
        assert_eq!(std::fs::read(vol.join("tls.crt")).unwrap(), b"cert-2");
        assert!(!vol.join("tls.key").exists());
        // Only the current timestamped directory remains.
        let hidden = std::fs::read_dir(&vol).unwrap().filter(|e| {
            let n = e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .into_owned();
            n.starts_with("..") && n != "..data"
        });
        assert_eq!(hidden.count(), 1);
    }

    #[test]
    fn items_project_selected_keys_to_paths() {
        let entries: BTreeMap<String, Vec<u8>> = [
            ("a".to_owned(), b"1".to_vec()),
            ("b".to_owned(), b"2".to_vec()),
        ]
        .into();
        let items = vec![KeyToPath {
            key: "a".into(),
            path: "sub/x".into(),
            mode: Some(0o600),
            ..KeyToPath::default()
        }];
        let files = project(&entries, Some(&items), 0o644, "configmap n/c", false).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files["sub/x"], (b"1".to_vec(), 0o600));
        let missing = vec![KeyToPath {
            key: "zz".into(),
            path: "z".into(),
            mode: None,
            ..KeyToPath::default()
        }];
        assert!(project(&entries, Some(&missing), 0o644, "configmap n/c", false).is_err());
        assert!(
            project(&entries, Some(&missing), 0o644, "configmap n/c", true)
                .unwrap()
                .is_empty()
        );
    }
}
