//! The sandbox's image map for our binaries: `ghcr.io/initializer-dev/<binary>` → the cargo-built
//! executable (see `docs/contracts.md`, "Images").
//!
//! The map is generated at run time into the sandbox's state directory from the names in
//! `initializer_crds::images`, so it can never drift from the bundle or the kind recipe. Images
//! of third-party workloads the scenarios create (the tutorial's `nginx`) map to a small idle
//! program, so their pods run and show `Running` like on a real cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use initializer_crds::images;

use crate::paths;

/// Repositories the scenarios use for ordinary workloads, mapped to an idle program.
pub const IDLE_IMAGES: [&str; 3] = ["nginx", "docker.io/library/nginx", "busybox"];

/// File name of the idle program written next to the map.
pub const IDLE_PROGRAM: &str = "idle.sh";

/// The image map as (repository without tag → executable), for executables in `bin_dir`.
pub fn image_map(bin_dir: &Path, idle_program: &Path) -> BTreeMap<String, PathBuf> {
    let mut map = BTreeMap::new();
    for binary in paths::shipped_binaries() {
        map.insert(
            format!("{}/{binary}", images::REGISTRY),
            bin_dir.join(binary),
        );
    }
    for image in IDLE_IMAGES {
        map.insert(image.to_string(), idle_program.to_path_buf());
    }
    map
}

/// The map as the sandbox reads it: a YAML mapping of strings.
pub fn render(map: &BTreeMap<String, PathBuf>) -> anyhow::Result<String> {
    let strings: BTreeMap<&str, String> = map
        .iter()
        .map(|(image, path)| (image.as_str(), path.display().to_string()))
        .collect();
    serde_saphyr::to_string(&strings).context("failed to render the image map")
}

/// Writes `images.yaml` and the idle program into `dir`, and returns the map's path.
pub fn write_image_map(dir: &Path) -> anyhow::Result<PathBuf> {
    let idle = dir.join(IDLE_PROGRAM);
    // Sleeps until told to stop, like a server that does nothing; `exec` keeps one process so
    // freeze and kill reach it directly.
    std::fs::write(&idle, "#!/bin/sh\nexec sleep 2147483647\n")
        .with_context(|| format!("failed to write {}", idle.display()))?;
    make_executable(&idle)?;
    let path = dir.join("images.yaml");
    let body = render(&image_map(&paths::bin_dir(), &idle))?;
    std::fs::write(&path, body).with_context(|| format!("failed to write {}", path.display()))?;
    Ok(path)
}

#[cfg(unix)]
fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("failed to make {} executable", path.display()))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> anyhow::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_binary_maps_from_its_registry_repository_to_the_build() {
        let map = image_map(Path::new("/t/debug"), Path::new("/s/idle.sh"));
        assert_eq!(
            map.get("ghcr.io/initializer-dev/initializer-operator"),
            Some(&PathBuf::from("/t/debug/initializer-operator"))
        );
        for binary in images::EXAMPLE_INITIALIZERS {
            assert_eq!(
                map.get(&format!("ghcr.io/initializer-dev/{binary}")),
                Some(&Path::new("/t/debug").join(binary))
            );
        }
        assert_eq!(map.get("nginx"), Some(&PathBuf::from("/s/idle.sh")));
    }

    #[test]
    fn rendered_map_is_a_yaml_mapping_of_image_to_path() {
        let map = image_map(Path::new("/t/debug"), Path::new("/s/idle.sh"));
        let parsed: BTreeMap<String, String> =
            serde_saphyr::from_str(&render(&map).unwrap()).unwrap();
        assert_eq!(parsed.len(), map.len());
        assert_eq!(
            parsed["ghcr.io/initializer-dev/preset-initializer"],
            "/t/debug/preset-initializer"
        );
    }
}
