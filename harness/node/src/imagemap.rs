//! The image map: a YAML mapping from image reference to a local executable.
//!
//! A key without a tag (or digest) matches every tag of that repository; an exact key wins over
//! a tagless one. Relative paths are resolved against the map file's directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::Error;

/// Image references and repositories, each mapped to an absolute executable path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageMap {
    entries: BTreeMap<String, PathBuf>,
}

/// The repository part of an image reference: without `:tag` and `@digest`.
pub fn repository(image: &str) -> &str {
    let without_digest = image.split_once('@').map_or(image, |(repo, _)| repo);
    // A colon after the last slash separates the tag; one before it belongs to a registry port.
    match without_digest.rfind(':') {
        Some(colon) if colon > without_digest.rfind('/').unwrap_or(0) => &without_digest[..colon],
        _ => without_digest,
    }
}

impl ImageMap {
    /// Parses the map's YAML text; relative paths are resolved against `base_dir`.
    pub fn parse(text: &str, base_dir: &Path) -> Result<Self, Error> {
        let raw: BTreeMap<String, String> = if text.trim().is_empty() {
            BTreeMap::new()
        } else {
            let plain = serde_saphyr::options! { with_snippet: false };
            serde_saphyr::from_str_with_options(text, plain)
                .map_err(|e| Error::ImageMap(e.to_string()))?
        };
        let entries = raw
            .into_iter()
            .map(|(image, path)| {
                let path = PathBuf::from(path);
                let path = if path.is_absolute() {
                    path
                } else {
                    base_dir.join(path)
                };
                (image, path)
            })
            .collect();
        Ok(Self { entries })
    }

    /// Reads and parses the map file.
    pub fn load(file: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::ImageMap(format!("failed to read {}: {e}", file.display())))?;
        Self::parse(&text, file.parent().unwrap_or(Path::new(".")))
    }

    /// The executable for `image`, if mapped.
    pub fn resolve(&self, image: &str) -> Option<&Path> {
        self.entries
            .get(image)
            .or_else(|| self.entries.get(repository(image)))
            .map(PathBuf::as_path)
    }

    /// Whether `path` is one of the mapped executables.
    pub fn contains_executable(&self, path: &Path) -> bool {
        self.entries.values().any(|p| p == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_strips_tag_and_digest_but_not_registry_port() {
        assert_eq!(repository("ghcr.io/a/b:0.1.0"), "ghcr.io/a/b");
        assert_eq!(repository("ghcr.io/a/b@sha256:abc"), "ghcr.io/a/b");
        assert_eq!(repository("localhost:5000/a/b"), "localhost:5000/a/b");
        assert_eq!(repository("localhost:5000/a/b:1"), "localhost:5000/a/b");
        assert_eq!(repository("busybox"), "busybox");
    }

    #[test]
    fn tagless_key_matches_every_tag_and_exact_key_wins() {
        let map = ImageMap::parse(
            "ghcr.io/x/op: bin/op\nghcr.io/x/op:debug: /opt/op-debug\n",
            Path::new("/maps"),
        )
        .unwrap();
        assert_eq!(
            map.resolve("ghcr.io/x/op:0.1.0"),
            Some(Path::new("/maps/bin/op"))
        );
        assert_eq!(map.resolve("ghcr.io/x/op"), Some(Path::new("/maps/bin/op")));
        assert_eq!(
            map.resolve("ghcr.io/x/op:debug"),
            Some(Path::new("/opt/op-debug"))
        );
        assert_eq!(map.resolve("ghcr.io/x/other:1"), None);
        assert!(map.contains_executable(Path::new("/opt/op-debug")));
    }

    #[test]
    fn malformed_map_is_an_error() {
        assert!(ImageMap::parse("- a\n- b\n", Path::new("/")).is_err());
        assert_eq!(
            ImageMap::parse("", Path::new("/")).unwrap(),
            ImageMap::default()
        );
    }
}
