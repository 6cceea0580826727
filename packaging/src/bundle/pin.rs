//! A release's bundle: the generated bundle with every image of ours named by the reference a
//! release gives it (its digest in the release's registry) instead of the version tag, as
//! `operator-sdk generate bundle --use-image-digests` pins an operator's images. Pure: the
//! release reads the digests from its registry and passes them as `bundle --image`.

use std::collections::BTreeMap;

use initializer_crds::images::{self, Reference};

use super::Bundle;
use crate::error::Error;

/// Every binary that ships as an image of ours.
pub fn binaries() -> impl Iterator<Item = &'static str> {
    [images::OPERATOR, images::PRESET_INITIALIZER]
        .into_iter()
        .chain(images::EXAMPLE_INITIALIZERS)
}

/// Parses `bundle --image`'s `BINARY=REFERENCE`.
pub fn image_flag(text: &str) -> Result<(String, Reference), String> {
    let (binary, reference) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not BINARY=REFERENCE"))?;
    if !binaries().any(|ours| ours == binary) {
        return Err(format!(
            "{binary:?} is not an image of ours (one of: {})",
            binaries().collect::<Vec<_>>().join(", ")
        ));
    }
    let parsed = Reference::parse(reference).ok_or_else(|| {
        format!("{reference:?} is not an image reference (repository:tag or repository@sha256:…)")
    })?;
    Ok((binary.to_string(), parsed))
}

/// `bundle` with each image of `pins` (by binary) named by its reference wherever the bundle
/// names it (the CSV's Deployment and `relatedImages`, its `containerImage`, the example in
/// `alm-examples`). Refuses a bundle that still names an image of ours by its version tag after
/// pinning: a release names every image it ships by one reference, never half by digest.
pub fn pin(bundle: &Bundle, pins: &BTreeMap<String, Reference>) -> Result<Bundle, Error> {
    let files = bundle
        .files
        .iter()
        .map(|(name, text)| {
            let pinned = pins.iter().fold(text.clone(), |text, (binary, reference)| {
                text.replace(&images::image(binary), &reference.to_string())
            });
            (name.clone(), pinned)
        })
        .collect::<BTreeMap<_, _>>();
    let unpinned: Vec<String> = binaries()
        .filter(|binary| {
            let tagged = images::image(binary);
            files.values().any(|text| text.contains(&tagged))
        })
        .map(str::to_string)
        .collect();
    if !unpinned.is_empty() {
        return Err(Error::BundleGenerate(format!(
            "the bundle still names {} by its version tag: pass --image for each",
            unpinned.join(", ")
        )));
    }
    Ok(Bundle { files })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u8) -> String {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
    }

    fn pinned(binary: &str, n: u8) -> (String, Reference) {
        image_flag(&format!(
            "{binary}=127.0.0.1:5000/initializer-dev/{binary}@{}",
            digest(n)
        ))
        .unwrap()
    }

    #[test]
    fn every_image_the_bundle_names_is_pinned_and_nothing_else_changes() {
        let bundle = super::super::generate().unwrap();
        let pins = BTreeMap::from([
            pinned(images::OPERATOR, 1),
            pinned(images::PRESET_INITIALIZER, 2),
            pinned("sidecar-initializer", 3),
        ]);
        let release = pin(&bundle, &pins).unwrap();
        let csv = release.file(super::super::CSV_FILE).unwrap();
        for (binary, reference) in &pins {
            assert!(
                csv.contains(&reference.to_string()),
                "{binary} is not pinned"
            );
            assert!(
                !csv.contains(&images::image(binary)),
                "{binary} still by tag"
            );
        }
        let csv: serde_json::Value = serde_saphyr::from_str(csv).unwrap();
        let related: Vec<&str> = csv["spec"]["relatedImages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|image| image["image"].as_str().unwrap())
            .collect();
        assert!(
            related.iter().all(|image| image.contains("@sha256:")),
            "{related:?}"
        );
        let deployment = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"];
        let container = &deployment["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], pins[images::OPERATOR].to_string());
        assert_eq!(release.files.len(), bundle.files.len());
        for (name, text) in &bundle.files {
            if name != super::super::CSV_FILE {
                assert_eq!(release.file(name), Some(text.as_str()), "{name} changed");
            }
        }
    }

    #[test]
    fn a_bundle_half_pinned_is_refused_naming_what_is_missing() {
        let bundle = super::super::generate().unwrap();
        let pins = BTreeMap::from([pinned(images::OPERATOR, 1)]);
        let err = pin(&bundle, &pins).unwrap_err().to_string();
        assert!(err.contains("preset-initializer"), "{err}");
        assert!(err.contains("sidecar-initializer"), "{err}");
        assert!(!err.contains("initializer-operator,"), "{err}");
    }

    #[test]
    fn an_image_flag_names_one_of_our_binaries_and_a_reference() {
        assert!(
            image_flag("nginx=nginx:1.27")
                .unwrap_err()
                .contains("not an image of ours")
        );
        assert!(
            image_flag("preset-initializer")
                .unwrap_err()
                .contains("BINARY=REFERENCE")
        );
        assert!(
            image_flag("preset-initializer=r/p@sha256:abc")
                .unwrap_err()
                .contains("not an image reference")
        );
        let (binary, reference) = image_flag("preset-initializer=r/p:1.2").unwrap();
        assert_eq!(
            (binary.as_str(), reference.to_string()),
            ("preset-initializer", "r/p:1.2".to_string())
        );
    }
}
