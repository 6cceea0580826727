//! Where the control plane's binaries are: built from the official Go modules by
//! `tools/controlplane/build.sh` (`make controlplane`) into `target/controlplane/v<version>/`,
//! the version being the one `tools/controlplane/go.mod` pins (or `K8S_VERSION`). When they are
//! missing, [`locate`] runs the build script, which returns at once when they already exist.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// The Kubernetes version `tools/controlplane/go.mod` pins.
pub fn pinned_version() -> &'static str {
    pinned_version_of(include_str!("../../../tools/controlplane/go.mod")).unwrap_or("unknown")
}

/// The `k8s.io/kubernetes` version of a go.mod text, without the `v`.
pub fn pinned_version_of(go_mod: &str) -> Option<&str> {
    go_mod.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("k8s.io/kubernetes v")?;
        rest.split_whitespace().next()
    })
}

/// The version to run: `K8S_VERSION`, else the pinned one.
pub fn version() -> String {
    std::env::var("K8S_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.trim_start_matches('v').to_owned())
        .unwrap_or_else(|| pinned_version().to_owned())
}

/// The built control plane of one version.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// The version, without the `v`.
    pub version: String,
    /// `etcd`.
    pub etcd: PathBuf,
    /// `kube-apiserver`.
    pub apiserver: PathBuf,
    /// `kube-controller-manager`.
    pub controller_manager: PathBuf,
}

fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/controlplane/build.sh")
}

/// The workspace's `target/`, where `make controlplane`, `make legacy-apiserver` and their
/// build scripts put what they build from Go, whatever `CARGO_TARGET_DIR` says.
pub fn workspace_target() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .join("target")
}

/// The binaries of [`version`], building them first when they are missing (minutes on a cold
/// machine; the build's output goes to this process's stderr).
pub fn locate() -> Result<Binaries, Error> {
    let version = version();
    let cache = workspace_target().join("controlplane");
    let dir = cache.join(format!("v{version}"));
    let built = || dir.join(".complete").is_file();
    // Tests start control planes from several processes at once: one builds, the others wait
    // for it and then find the binaries built. Built binaries need no lock (nor the right to
    // write the cache).
    let _lock = if built() {
        None
    } else {
        std::fs::create_dir_all(&cache).map_err(|e| Error::io(&cache, e))?;
        let lock_path = cache.join(".build.lock");
        let lock = std::fs::File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
        lock.lock().map_err(|e| Error::io(&lock_path, e))?;
        Some(lock)
    };
    if !built() {
        eprintln!(
            "controlplane: building Kubernetes v{version} from the Go modules (`make controlplane`)"
        );
        let status = Command::new(build_script())
            .env("K8S_VERSION", &version)
            .env("CONTROLPLANE_CACHE", &cache)
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|e| {
                Error::Build(format!("failed to run {}: {e}", build_script().display()))
            })?;
        if !status.success() {
            return Err(Error::Build(format!(
                "{} exited with {status} (its output above names the module or package)",
                build_script().display()
            )));
        }
    }
    Ok(Binaries {
        etcd: dir.join("etcd"),
        apiserver: dir.join("kube-apiserver"),
        controller_manager: dir.join("kube-controller-manager"),
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_version_is_read_from_go_mod() {
        assert_eq!(
            pinned_version_of("require (\n\tk8s.io/kubernetes v1.35.4 // indirect\n)"),
            Some("1.35.4")
        );
        assert_eq!(pinned_version_of("module x\n"), None);
        assert!(pinned_version().starts_with("1."), "{}", pinned_version());
    }
}
