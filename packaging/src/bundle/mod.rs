//! The OLM registry+v1 bundle: generated from code, written to `bundles/initializer-operator`,
//! and checked offline against the rules OLM's validators apply.
//!
//! The bundle is the one definition of how the operator is installed: OLM reads it, and
//! `initializer-operator install --bundle DIR` reads the same files (see [`crate::install`]).
//! [`generate`](fn@generate) and [`validate::check`] are pure; [`Bundle::read`] and [`Bundle::write`] are the
//! only functions that touch the filesystem.

pub mod chart;
pub mod csv;
pub mod generate;
pub mod output;
pub mod pin;
pub mod validate;
pub mod violation;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use generate::generate;
pub use validate::{check, validate};
pub use violation::BundleViolation;

use crate::error::Error;

/// OLM package name.
pub const PACKAGE: &str = "initializer-operator";
/// The channel every version is published to (and the default channel). OLM's channel naming
/// convention (candidate, fast, stable): pre-1.0 releases go to `candidate`.
pub const CHANNEL: &str = "candidate";
/// The CSV's `spec.maturity`: how far the API is along, independent of the channel.
pub const MATURITY: &str = "alpha";
/// Where the bundle is committed, relative to the workspace root.
pub const BUNDLE_DIR: &str = "bundles/initializer-operator";
/// The ClusterServiceVersion, relative to the bundle directory.
pub const CSV_FILE: &str = "manifests/initializer-operator.clusterserviceversion.yaml";
/// The owned CRD, relative to the bundle directory (same file name as in `crds/manifests/`).
pub const CRD_FILE: &str = "manifests/initializer.dev_initializers.yaml";
/// The operator's PodDisruptionBudget, relative to the bundle directory.
pub const PDB_FILE: &str = "manifests/initializer-operator.poddisruptionbudget.yaml";
/// The ClusterRole an administrator binds in each namespace labelled for workloads, relative to
/// the bundle directory.
pub const WORKLOADS_ROLE_FILE: &str = "manifests/initializer-operator-workloads.clusterrole.yaml";
/// The bundle's ClusterRole for the policy canary namespace.
pub const POLICY_CANARY_ROLE_FILE: &str =
    "manifests/initializer-operator-policy-canary.clusterrole.yaml";
/// The bundle annotations, relative to the bundle directory.
pub const ANNOTATIONS_FILE: &str = "metadata/annotations.yaml";
/// The bundle image's Dockerfile, relative to the bundle directory (its build context).
pub const DOCKERFILE: &str = "bundle.Dockerfile";
/// The scorecard configuration, relative to the bundle directory.
pub const SCORECARD_FILE: &str = "tests/scorecard/config.yaml";
/// Directories OLM reads wholesale: stale files in them are removed by [`Bundle::write`]
/// (only those it generated: see [`output`]).
pub const GENERATED_DIRS: [&str; 3] = ["manifests", "metadata", "tests/scorecard"];

/// Flags of `initializer-operator bundle`.
#[derive(Clone, Debug, clap::Args)]
pub struct BundleArgs {
    /// Directory to write the bundle to.
    #[arg(long, default_value = BUNDLE_DIR)]
    pub out: PathBuf,
    /// Only validate the bundle already in `--out`; write nothing.
    #[arg(long, conflicts_with = "images")]
    pub check: bool,
    /// Name an image of ours by this reference instead of its version tag (a release passes
    /// each image's digest: `--image initializer-operator=REGISTRY/initializer-operator@sha256:…`);
    /// repeated, once per image the bundle names.
    #[arg(long = "image", value_name = "BINARY=REFERENCE", value_parser = pin::image_flag)]
    pub images: Vec<(String, initializer_crds::images::Reference)>,
}

/// `initializer-operator bundle`: writes the generated bundle to `args.out`, its images pinned
/// when `--image` is given (or, with `--check`, validates what is there), and validates the
/// result.
pub fn run(args: &BundleArgs) -> Result<(), Error> {
    if !args.check {
        let bundle = generate()?;
        let bundle = if args.images.is_empty() {
            bundle
        } else {
            pin::pin(&bundle, &args.images.iter().cloned().collect())?
        };
        bundle.write(&args.out)?;
    }
    validate(&args.out).map_err(|violations| Error::BundleInvalid(violation::summary(&violations)))
}

/// A bundle as a set of text files, keyed by path relative to the bundle directory (with `/`
/// separators).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bundle {
    /// File contents by relative path.
    pub files: BTreeMap<String, String>,
}

impl Bundle {
    /// Reads every file below `dir`. Files that are not UTF-8 are an error: a bundle is text.
    pub fn read(dir: &Path) -> Result<Self, Error> {
        let mut files = BTreeMap::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(current) = pending.pop() {
            let entries = std::fs::read_dir(&current).map_err(|source| Error::BundleRead {
                path: current.clone(),
                source,
            })?;
            for entry in entries {
                let entry = entry.map_err(|source| Error::BundleRead {
                    path: current.clone(),
                    source,
                })?;
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                // The list of generated files is the writer's bookkeeping, not the bundle's.
                if current.as_path() == dir && entry.file_name() == output::GENERATED_LIST {
                    continue;
                }
                let text = std::fs::read_to_string(&path).map_err(|source| Error::BundleRead {
                    path: path.clone(),
                    source,
                })?;
                files.insert(relative_name(dir, &path), text);
            }
        }
        Ok(Self { files })
    }

    /// Writes every file below `dir`, creating directories as needed, and removes files in
    /// [`GENERATED_DIRS`] that are not part of the bundle (a renamed manifest must not linger
    /// as a second CSV); refuses, before writing anything, when a file it would replace or
    /// remove was not generated by it ([`output`]).
    pub fn write(&self, dir: &Path) -> Result<(), Error> {
        output::write(
            dir,
            &self.files,
            &GENERATED_DIRS,
            "bundle",
            |path, source| Error::BundleWrite { path, source },
        )
    }

    /// The text of one file, if present.
    pub fn file(&self, name: &str) -> Option<&str> {
        self.files.get(name).map(String::as_str)
    }

    /// Files directly below `manifests/`, by relative path.
    pub fn manifests(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files
            .iter()
            .filter(|(name, _)| {
                name.strip_prefix("manifests/")
                    .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
            })
            .map(|(name, text)| (name.as_str(), text.as_str()))
    }
}

/// `path` relative to `dir`, with `/` separators whatever the platform.
fn relative_name(dir: &Path, path: &Path) -> String {
    let relative: PathBuf = path.strip_prefix(dir).unwrap_or(path).to_path_buf();
    relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_release_replaces_the_one_before_it() {
        assert_eq!(generate::previous_release(generate::RELEASES[0].0), None);
        for pair in generate::RELEASES.windows(2) {
            assert_eq!(generate::previous_release(pair[1].0), Some(pair[0].0));
        }
        assert_eq!(generate::previous_release("9.9.9"), None);
        let csv = generate::cluster_service_version(Vec::new(), Vec::new()).unwrap();
        assert_eq!(
            csv.spec.replaces,
            generate::previous_release(generate::VERSION).map(generate::csv_name)
        );
    }

    #[test]
    fn a_written_bundle_reads_back_identically_and_stale_manifests_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
        std::fs::write(dir.path().join("README.md"), "kept").unwrap();
        // A manifest an earlier run generated, since renamed.
        std::fs::write(
            dir.path().join("manifests/old.clusterserviceversion.yaml"),
            "x",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(output::GENERATED_LIST),
            "manifests/old.clusterserviceversion.yaml\n",
        )
        .unwrap();
        let bundle = generate().unwrap();
        bundle.write(dir.path()).unwrap();
        assert!(
            !dir.path()
                .join("manifests/old.clusterserviceversion.yaml")
                .exists()
        );
        let mut read = Bundle::read(dir.path()).unwrap();
        assert_eq!(read.files.remove("README.md").as_deref(), Some("kept"));
        assert_eq!(read, bundle);
    }

    #[test]
    fn a_bundle_refuses_to_replace_or_remove_files_it_did_not_generate() {
        let bundle = generate().unwrap();
        let csv = bundle
            .manifests()
            .find(|(name, _)| name.ends_with(".clusterserviceversion.yaml"))
            .map(|(name, _)| name.to_owned())
            .unwrap();
        for foreign in [csv.as_str(), "manifests/mine.yaml"] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(foreign);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "kind: Mine\n").unwrap();
            let err = bundle.write(dir.path()).unwrap_err().to_string();
            assert!(err.contains(foreign), "{foreign}: {err}");
            assert!(err.contains("did not generate"), "{err}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "kind: Mine\n");
            assert!(!dir.path().join("metadata/annotations.yaml").exists());
        }
    }

    #[test]
    fn no_role_the_bundle_ships_reaches_every_resource() {
        let bundle = generate().unwrap();
        for (name, text) in bundle.manifests() {
            let value: serde_json::Value = serde_saphyr::from_str(text).unwrap();
            let rules: Vec<&serde_json::Value> = match value["kind"].as_str() {
                Some("ClusterRole") => value["rules"].as_array().into_iter().flatten().collect(),
                Some("ClusterServiceVersion") => ["clusterPermissions", "permissions"]
                    .iter()
                    .flat_map(|key| {
                        value["spec"]["install"]["spec"][key]
                            .as_array()
                            .into_iter()
                            .flatten()
                    })
                    .flat_map(|p| p["rules"].as_array().into_iter().flatten())
                    .collect(),
                _ => continue,
            };
            for rule in rules {
                let everything = |key: &str| {
                    rule[key]
                        .as_array()
                        .is_some_and(|items| items.iter().any(|i| i == "*"))
                };
                assert!(
                    !(everything("apiGroups") && everything("resources")),
                    "{name} grants every resource: {rule}"
                );
            }
        }
    }

    #[test]
    fn manifests_lists_only_files_directly_in_the_manifests_directory() {
        let bundle = generate().unwrap();
        let names: Vec<&str> = bundle.manifests().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            vec![
                crate::monitoring::BUNDLE_SERVICE_FILE,
                POLICY_CANARY_ROLE_FILE,
                WORKLOADS_ROLE_FILE,
                CSV_FILE,
                PDB_FILE,
                crate::monitoring::BUNDLE_RULE_FILE,
                crate::monitoring::BUNDLE_SERVICE_MONITOR_FILE,
                CRD_FILE,
            ]
        );
    }
}
