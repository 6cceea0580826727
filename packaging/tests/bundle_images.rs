//! The image scheme is one: `make docker-build` builds exactly the binaries named in
//! `initializer_crds::images`, each binary is a workspace package of the same name (what
//! `images/Dockerfile` builds with `--package "$BINARY" --bin "$BINARY"`), and the bundle's
//! images come from the same constants.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use initializer_crds::images;
use initializer_packaging::bundle::{self, CSV_FILE};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scheme_binaries() -> BTreeSet<String> {
    [images::OPERATOR, images::PRESET_INITIALIZER]
        .into_iter()
        .chain(images::EXAMPLE_INITIALIZERS)
        .map(String::from)
        .collect()
}

#[test]
fn make_docker_build_builds_every_binary_of_the_image_scheme() {
    let makefile = std::fs::read_to_string(root().join("Makefile")).unwrap();
    let line = makefile
        .lines()
        .find_map(|line| line.strip_prefix("BINARIES :="))
        .expect("the Makefile defines BINARIES");
    let binaries: BTreeSet<String> = line.split_whitespace().map(String::from).collect();
    assert_eq!(binaries, scheme_binaries());
    assert!(makefile.contains("images/Dockerfile"));
}

#[test]
fn every_image_binary_is_a_workspace_package_with_a_binary_of_the_same_name() {
    let mut manifests = vec![root().join("operator/Cargo.toml")];
    for entry in std::fs::read_dir(root().join("initializers")).unwrap() {
        manifests.push(entry.unwrap().path().join("Cargo.toml"));
    }
    let mut packages = BTreeSet::new();
    for manifest in manifests {
        let text = std::fs::read_to_string(&manifest).unwrap();
        let value: toml_like::Manifest = toml_like::parse(&text);
        let implicit_bin =
            value.bins.is_empty() && manifest.parent().unwrap().join("src/main.rs").exists();
        if value.bins.contains(&value.package) || implicit_bin {
            packages.insert(value.package);
        }
    }
    for binary in scheme_binaries() {
        assert!(
            packages.contains(&binary),
            "no workspace package builds a binary named {binary}"
        );
    }
}

#[test]
fn dockerfile_builds_the_package_and_binary_named_by_its_build_argument() {
    let dockerfile = std::fs::read_to_string(root().join("images/Dockerfile")).unwrap();
    assert!(dockerfile.contains("ARG BINARY"));
    assert!(dockerfile.contains(r#"--package "${BINARY}" --bin "${BINARY}""#));
    assert!(dockerfile.contains("gcr.io/distroless/cc-debian12:nonroot"));
    assert!(dockerfile.contains("USER 65532:65532"));
}

/// Supply chain: every base image of `images/Dockerfile` defaults to a reference pinned by
/// digest (`<name>:<tag>@sha256:<64 hex>`), so what a build pulls cannot move under it.
#[test]
fn dockerfile_base_images_are_pinned_by_digest() {
    let dockerfile = std::fs::read_to_string(root().join("images/Dockerfile")).unwrap();
    let defaults: Vec<&str> = dockerfile
        .lines()
        .filter_map(|line| line.strip_prefix("ARG "))
        .filter_map(|arg| arg.split_once('='))
        .filter(|(name, _)| name.ends_with("_IMAGE"))
        .map(|(_, value)| value)
        .collect();
    assert_eq!(
        defaults.len(),
        2,
        "RUST_IMAGE and RUNTIME_IMAGE: {defaults:?}"
    );
    for image in defaults {
        let (reference, digest) = image
            .split_once("@sha256:")
            .unwrap_or_else(|| panic!("{image} is not pinned by digest"));
        assert!(
            reference.contains(':'),
            "{image}: keep the tag, for readers"
        );
        assert!(
            digest.len() == 64
                && digest
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{image}: a sha256 digest is 64 lowercase hex digits"
        );
    }
}

/// The `ARG NAME=default` of a Dockerfile.
fn dockerfile_arg(relative: &str, name: &str) -> String {
    let dockerfile = std::fs::read_to_string(root().join(relative)).unwrap();
    dockerfile
        .lines()
        .filter_map(|line| line.strip_prefix("ARG "))
        .find_map(|arg| arg.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{relative} has no default for {name}"))
        .to_string()
}

#[test]
fn the_olm_and_catalog_images_run_on_the_same_pinned_base_as_ours() {
    for other in [
        "e2e/kind/olm.Dockerfile",
        "tools/release/catalog.Dockerfile",
    ] {
        assert_eq!(
            dockerfile_arg(other, "RUNTIME_IMAGE"),
            dockerfile_arg("images/Dockerfile", "RUNTIME_IMAGE"),
            "{other}"
        );
    }
}

#[test]
fn bundle_images_follow_the_scheme() {
    let bundle = bundle::generate().unwrap();
    let csv = bundle.file(CSV_FILE).unwrap();
    for binary in [images::OPERATOR, images::PRESET_INITIALIZER] {
        assert!(
            csv.contains(&format!("image: {}", images::image(binary))),
            "{binary} is not a related image"
        );
    }
    assert!(csv.contains(&format!(
        "containerImage: {}",
        images::image(images::OPERATOR)
    )));
}

/// Just enough of a Cargo.toml reader for package and binary names.
mod toml_like {
    pub struct Manifest {
        pub package: String,
        pub bins: Vec<String>,
    }

    pub fn parse(text: &str) -> Manifest {
        let mut section = String::new();
        let mut package = String::new();
        let mut bins = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_string();
                continue;
            }
            let Some(value) = line.strip_prefix("name = ") else {
                continue;
            };
            let value = value.trim_matches('"').to_string();
            match section.as_str() {
                "[package]" => package = value,
                "[[bin]]" => bins.push(value),
                _ => {}
            }
        }
        Manifest { package, bins }
    }
}

/// The committed bundle is the source of every release and names each image by its version
/// tag; a release's bundle (`bundle --image`, what `make release` writes) names each by its
/// digest instead (`bundle::pin`'s tests, and `tools/release/verify.sh` on a pushed release).
#[test]
fn the_committed_bundle_names_version_tags_a_release_pins_them() {
    let csv = std::fs::read_to_string(root().join(bundle::BUNDLE_DIR).join(CSV_FILE)).unwrap();
    let csv: serde_json::Value = serde_saphyr::from_str(&csv).unwrap();
    let related: Vec<&str> = csv["spec"]["relatedImages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["image"].as_str().unwrap())
        .collect();
    assert_eq!(
        related,
        [
            images::image(images::OPERATOR),
            images::image(images::PRESET_INITIALIZER)
        ]
    );
    assert!(related.iter().all(|image| !image.contains("@sha256:")));
}
