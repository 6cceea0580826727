//! What the suite reads of a release directory (`make release`, tools/release/release.sh): its
//! images by digest (`images.txt`), its version (the bundle's CSV), its registry; and the two
//! releases a real upgrade runs between, as `e2e/kind/run.sh` names them.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::paths;

/// The catalog image's repository.
pub const CATALOG: &str = "initializer-operator-catalog";
/// The chart's repository (`oci://<registry>/charts/initializer-operator`).
const CHART: &str = "charts/initializer-operator";
/// The CSV of a release's bundle.
const CSV: &str = "bundle/manifests/initializer-operator.clusterserviceversion.yaml";
/// The book's example Initializer in a release, its images by the release's digests.
const EXAMPLE: &str = "examples/sidecar-initializer.yaml";

/// Env var naming the release a real upgrade starts from (tools/release/previous.sh writes it);
/// [`paths::RELEASE_ENV`] names the one it ends at.
pub const PREVIOUS_RELEASE_ENV: &str = "E2E_PREVIOUS_RELEASE";

/// The release the upgrade starts from and the one it ends at.
#[derive(Clone, Debug)]
pub struct Upgrade {
    pub from: PathBuf,
    pub to: PathBuf,
}

impl Upgrade {
    /// The two releases the environment names, when it names both.
    pub fn from_env() -> Option<Self> {
        let from = std::env::var_os(PREVIOUS_RELEASE_ENV).filter(|dir| !dir.is_empty())?;
        Some(Self {
            from: PathBuf::from(from),
            to: paths::release_dir()?,
        })
    }
}

/// Where a release's images live in its registry (`<registry>/initializer-dev/<binary>`).
const IMAGES: &str = "initializer-dev";

/// The reference, by digest, of the image `repository` (`initializer-operator`, [`CATALOG`],
/// …) in the release `release`, as its `images.txt` lists it.
pub fn image(release: &Path, repository: &str) -> anyhow::Result<String> {
    find(release, &format!("/{IMAGES}/{repository}@sha256:"))
        .with_context(|| format!("{} lists no {repository} image", release.display()))
}

/// The registry the release was pushed to (`host:port`), from its chart's reference.
pub fn registry(release: &Path) -> anyhow::Result<String> {
    let marker = format!("/{CHART}@sha256:");
    let chart =
        find(release, &marker).with_context(|| format!("{} lists no chart", release.display()))?;
    Ok(chart
        .split_once(&marker)
        .map(|(registry, _)| registry.to_string())
        .unwrap_or_default())
}

/// The line of the release's `images.txt` that contains `marker`.
fn find(release: &Path, marker: &str) -> anyhow::Result<String> {
    let list = release.join("images.txt");
    let images = std::fs::read_to_string(&list)
        .with_context(|| format!("failed to read {}", list.display()))?;
    images
        .lines()
        .find(|image| image.contains(marker))
        .map(str::to_string)
        .context("not listed")
}

/// The release's version: its CSV's `spec.version`.
pub fn version(release: &Path) -> anyhow::Result<String> {
    let path = release.join(CSV);
    let csv: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(&path)
            .with_context(|| format!("failed to read {}", path.display()))?,
    )
    .with_context(|| format!("failed to parse {}", path.display()))?;
    csv["spec"]["version"]
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("{} has no spec.version", path.display()))
}

/// The release's copy of the book's example Initializer.
pub fn example(release: &Path) -> PathBuf {
    release.join(EXAMPLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(images: &str, version: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("images.txt"), images).unwrap();
        let csv = dir.path().join(CSV);
        std::fs::create_dir_all(csv.parent().unwrap()).unwrap();
        std::fs::write(
            csv,
            format!("kind: ClusterServiceVersion\nspec:\n  version: \"{version}\"\n"),
        )
        .unwrap();
        dir
    }

    #[test]
    fn a_release_names_its_images_registry_and_version() {
        let images = "localhost:5000/charts/initializer-operator@sha256:cc\n\
                      localhost:5000/initializer-dev/initializer-operator@sha256:aa\n\
                      localhost:5000/initializer-dev/initializer-operator-catalog@sha256:bb\n";
        let dir = release(images, "0.2.0");
        assert_eq!(
            image(dir.path(), "initializer-operator").unwrap(),
            "localhost:5000/initializer-dev/initializer-operator@sha256:aa"
        );
        assert_eq!(
            image(dir.path(), CATALOG).unwrap(),
            "localhost:5000/initializer-dev/initializer-operator-catalog@sha256:bb"
        );
        assert_eq!(registry(dir.path()).unwrap(), "localhost:5000");
        assert_eq!(version(dir.path()).unwrap(), "0.2.0");
        let err = image(dir.path(), "preset-initializer").unwrap_err();
        assert!(format!("{err}").contains("lists no preset-initializer image"));
    }

    #[test]
    fn a_release_without_its_chart_names_no_registry() {
        let dir = release(
            "localhost:5000/initializer-dev/initializer-operator@sha256:aa\n",
            "0.2.0",
        );
        assert!(registry(dir.path()).is_err());
    }
}
