//! The project's own bundle rules: only what the official operator-framework validators
//! (`tools/olm-validate`, run by `make verify-bundle`) do not check. Everything they check (the
//! CSV's display name, provider, icon media type, minKubeVersion, capability level and categories,
//! owned CRDs by group/version/kind and CRDs the CSV does not own, `alm-examples` JSON and kinds,
//! duplicate service accounts, disruption budgets of `maxUnavailable: 0`, the bundle size, typed
//! CSV and CRD decoding) is left to them; `tools/olm-validate/main_test.go` proves they catch each.
//!
//! The rules kept here, each with a violation of its own:
//!
//! 1. **Bundle metadata** (operator-registry's format rules, absent from the api module):
//!    `metadata/annotations.yaml` exists, has the mediatype `registry+v1`, `manifests/`,
//!    `metadata/`, a package, channels and a default channel that is one of the channels
//!    ([`BundleViolation::FileMissing`], [`BundleViolation::AnnotationMissing`],
//!    [`BundleViolation::AnnotationValue`]).
//! 2. **Dockerfile labels**: `bundle.Dockerfile`'s operator-framework labels equal the annotations
//!    ([`BundleViolation::DockerfileLabel`]).
//! 3. **Kinds**: every manifest is a kind registry+v1 accepts ([`BundleViolation::KindNotAllowed`]).
//! 4. **CSV name** is `<package>.v<version>` (the official suite checks only DNS syntax)
//!    ([`BundleViolation::CsvName`]).
//! 5. **Catalog fields** the official suite no longer requires: description, maturity,
//!    maintainers, links, keywords, and the annotations capabilities, categories, containerImage,
//!    createdAt, description, repository, support ([`BundleViolation::MissingField`]).
//! 6. **Strict semver** `spec.version` (the official loader parses it tolerantly: `0.1` passes)
//!    ([`BundleViolation::Semver`]).
//! 7. **Icon data** is base64 (the official suite checks only the media type)
//!    ([`BundleViolation::IconData`]).
//! 8. **Install modes**: each of the four stated exactly once and no other (the official duplicate
//!    check never fires), and AllNamespaces supported, because Initializers are cluster-scoped
//!    ([`BundleViolation::InstallModes`]).
//! 9. **Install strategy** `deployment` ([`BundleViolation::InstallStrategy`]).
//! 10. **Requests**: every container requests CPU and memory (the good-practices check reads
//!     `Quantity::String()`, which is `"0"` for a missing request, so it never fires)
//!     ([`BundleViolation::MissingRequests`]).
//! 11. **Service accounts**: each Deployment runs as an account a permissions entry names, so OLM
//!     creates it ([`BundleViolation::UnknownServiceAccount`]).
//! 12. **Owned CRD names** match a CRD manifest (the official suite matches group/version/kind
//!     only) ([`BundleViolation::OwnedCrd`]).
//! 13. **CRD drift**: the CRD equals `crdgen`'s output ([`BundleViolation::CrdDrift`]).
//! 14. **Typed examples**: each `alm-examples` Initializer deserializes into the Rust type the
//!     operator reads ([`BundleViolation::EmbeddedObject`]).
//! 15. **containerImage** is an image the install strategy runs ([`BundleViolation::ContainerImage`]).
//! 16. **Disruption budgets** select the operator's pods and let a drain evict one at every replica
//!     count up to the Deployment's (the official suite refuses only `maxUnavailable: 0` and
//!     `minAvailable: 100%`) ([`BundleViolation::PdbSelectsNothing`],
//!     [`BundleViolation::PdbBlocksDrain`]).
//!
//! Preconditions of those rules, reported so that nothing is skipped silently: every manifest
//! parses ([`BundleViolation::Unparseable`]), there is exactly one CSV
//! ([`BundleViolation::CsvCount`]), and the Deployment specs, CRDs and budgets the rules read are
//! their Kubernetes types ([`BundleViolation::EmbeddedObject`]). The CSV rules read the typed
//! [`ClusterServiceVersion`] of [`super::csv`]; a CSV that does not decode into it is reported
//! (naming the embedded Deployment spec at fault where that is the cause) and its rules skipped.
//!
//! [`check`] is pure and reports every violation it finds, not just the first; [`validate`]
//! reads a directory and calls it. `install --bundle` runs [`check`] too, where the Go tool is
//! not at hand.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use base64::Engine as _;
use initializer_crds::Initializer;
use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::csv::{ClusterServiceVersion, DEPLOYMENT_STRATEGY};
use super::violation::BundleViolation;
use super::{ANNOTATIONS_FILE, Bundle, DOCKERFILE};

/// Kinds OLM accepts in a bundle's `manifests/` directory.
pub const ALLOWED_KINDS: [&str; 20] = [
    "ClusterServiceVersion",
    "CustomResourceDefinition",
    "Secret",
    "ClusterRole",
    "ClusterRoleBinding",
    "ConfigMap",
    "ServiceAccount",
    "Service",
    "Role",
    "RoleBinding",
    "PrometheusRule",
    "ServiceMonitor",
    "PodDisruptionBudget",
    "PriorityClass",
    "VerticalPodAutoscaler",
    "ConsoleYAMLSample",
    "ConsoleQuickStart",
    "ConsoleCLIDownload",
    "ConsoleLink",
    "NetworkPolicy",
];

/// The four OperatorGroup shapes every CSV must state.
pub const INSTALL_MODE_TYPES: [&str; 4] = [
    "OwnNamespace",
    "SingleNamespace",
    "MultiNamespace",
    "AllNamespaces",
];

/// Annotation keys and, where fixed, their required value.
const REQUIRED_ANNOTATIONS: [(&str, Option<&str>); 6] = [
    (
        "operators.operatorframework.io.bundle.mediatype.v1",
        Some("registry+v1"),
    ),
    (
        "operators.operatorframework.io.bundle.manifests.v1",
        Some("manifests/"),
    ),
    (
        "operators.operatorframework.io.bundle.metadata.v1",
        Some("metadata/"),
    ),
    ("operators.operatorframework.io.bundle.package.v1", None),
    ("operators.operatorframework.io.bundle.channels.v1", None),
    (
        "operators.operatorframework.io.bundle.channel.default.v1",
        None,
    ),
];
const PACKAGE_KEY: &str = "operators.operatorframework.io.bundle.package.v1";
const CHANNELS_KEY: &str = "operators.operatorframework.io.bundle.channels.v1";
const DEFAULT_CHANNEL_KEY: &str = "operators.operatorframework.io.bundle.channel.default.v1";

/// CSV metadata annotations catalogs show, which the official suite does not require.
const REQUIRED_CSV_ANNOTATIONS: [&str; 7] = [
    "capabilities",
    "categories",
    "containerImage",
    "createdAt",
    "description",
    "repository",
    "support",
];

/// Validates the bundle in `dir`; every violation found is returned.
pub fn validate(dir: &Path) -> Result<(), Vec<BundleViolation>> {
    let bundle = Bundle::read(dir).map_err(|err| {
        vec![BundleViolation::Unparseable {
            path: dir.display().to_string(),
            message: err.to_string(),
        }]
    })?;
    let violations = check(&bundle);
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

/// Checks every rule against `bundle` and returns every violation.
pub fn check(bundle: &Bundle) -> Vec<BundleViolation> {
    let mut out = Vec::new();
    let annotations = check_annotations(bundle, &mut out);
    check_dockerfile(bundle, &annotations, &mut out);

    let mut csvs = Vec::new();
    let mut crds = Vec::new();
    let mut budgets = Vec::new();
    for (path, text) in bundle.manifests() {
        // Without the source snippet: the message is one line of the violation list.
        let plain = serde_saphyr::options! { with_snippet: false };
        let value: Value = match serde_saphyr::from_str_with_options(text, plain) {
            Ok(value) => value,
            Err(err) => {
                out.push(BundleViolation::Unparseable {
                    path: path.to_string(),
                    message: err.to_string(),
                });
                continue;
            }
        };
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !ALLOWED_KINDS.contains(&kind.as_str()) {
            out.push(BundleViolation::KindNotAllowed {
                path: path.to_string(),
                kind: kind.clone(),
            });
        }
        match kind.as_str() {
            "ClusterServiceVersion" => csvs.push((path, typed_csv(path, value, &mut out))),
            "CustomResourceDefinition" => {
                match serde_json::from_value::<CustomResourceDefinition>(value) {
                    Ok(crd) => crds.push((path, text, crd)),
                    Err(err) => out.push(embedded(path, "CustomResourceDefinition", &err)),
                }
            }
            "PodDisruptionBudget" => match serde_json::from_value::<PodDisruptionBudget>(value) {
                Ok(pdb) => budgets.push(pdb),
                Err(err) => out.push(embedded(path, "PodDisruptionBudget", &err)),
            },
            _ => {}
        }
    }
    if csvs.len() != 1 {
        out.push(BundleViolation::CsvCount { found: csvs.len() });
    }
    if let Some((path, Some(csv))) = csvs.first() {
        let package = annotations
            .get(PACKAGE_KEY)
            .map(String::as_str)
            .unwrap_or("");
        check_csv(path, csv, package, &mut out);
        check_install(csv, &mut out);
        check_owned_crds(csv, &crds, &mut out);
        check_disruption_budgets(csv, &budgets, &mut out);
    }
    check_crd_drift(&crds, &mut out);
    out
}

/// Annotation keys and values; returns the annotations for the checks that need them.
fn check_annotations(bundle: &Bundle, out: &mut Vec<BundleViolation>) -> BTreeMap<String, String> {
    let Some(text) = bundle.file(ANNOTATIONS_FILE) else {
        out.push(BundleViolation::FileMissing {
            path: ANNOTATIONS_FILE.to_string(),
        });
        return BTreeMap::new();
    };
    #[derive(serde::Deserialize)]
    struct File {
        annotations: BTreeMap<String, String>,
    }
    let plain = serde_saphyr::options! { with_snippet: false };
    let annotations = match serde_saphyr::from_str_with_options::<File>(text, plain) {
        Ok(file) => file.annotations,
        Err(err) => {
            out.push(BundleViolation::Unparseable {
                path: ANNOTATIONS_FILE.to_string(),
                message: err.to_string(),
            });
            return BTreeMap::new();
        }
    };
    for (key, expected) in REQUIRED_ANNOTATIONS {
        match (annotations.get(key), expected) {
            (None, _) => out.push(BundleViolation::AnnotationMissing {
                key: key.to_string(),
            }),
            (Some(found), Some(expected)) if found != expected => {
                out.push(BundleViolation::AnnotationValue {
                    key: key.to_string(),
                    found: found.clone(),
                    expected: expected.to_string(),
                })
            }
            (Some(found), None) if found.trim().is_empty() => {
                out.push(BundleViolation::AnnotationValue {
                    key: key.to_string(),
                    found: found.clone(),
                    expected: "a non-empty value".to_string(),
                })
            }
            _ => {}
        }
    }
    if let (Some(channels), Some(default)) = (
        annotations.get(CHANNELS_KEY),
        annotations.get(DEFAULT_CHANNEL_KEY),
    ) && !channels.split(',').any(|channel| channel.trim() == default)
    {
        out.push(BundleViolation::AnnotationValue {
            key: DEFAULT_CHANNEL_KEY.to_string(),
            found: default.clone(),
            expected: format!("one of the channels {channels:?}"),
        });
    }
    annotations
}

/// `bundle.Dockerfile`'s operator-framework labels equal the annotations.
fn check_dockerfile(
    bundle: &Bundle,
    annotations: &BTreeMap<String, String>,
    out: &mut Vec<BundleViolation>,
) {
    let Some(text) = bundle.file(DOCKERFILE) else {
        out.push(BundleViolation::FileMissing {
            path: DOCKERFILE.to_string(),
        });
        return;
    };
    let labels: BTreeMap<String, String> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("LABEL "))
        .flat_map(|rest| rest.split_whitespace())
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_string(), value.trim_matches('"').to_string()))
        .filter(|(key, _)| key.starts_with("operators.operatorframework.io."))
        .collect();
    let keys: BTreeSet<&String> = labels.keys().chain(annotations.keys()).collect();
    for key in keys {
        let (label, annotation) = (labels.get(key), annotations.get(key));
        if label != annotation {
            out.push(BundleViolation::DockerfileLabel {
                key: key.clone(),
                label: label.cloned(),
                annotation: annotation.cloned(),
            });
        }
    }
}

/// The CSV as [`ClusterServiceVersion`], or `None` with the reason reported: the embedded
/// Deployment spec that does not decode when that is the cause, else the CSV as a whole.
fn typed_csv(
    path: &str,
    value: Value,
    out: &mut Vec<BundleViolation>,
) -> Option<ClusterServiceVersion> {
    let deployments = value
        .pointer("/spec/install/spec/deployments")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match serde_json::from_value::<ClusterServiceVersion>(value) {
        Ok(csv) => Some(csv),
        Err(err) => {
            let before = out.len();
            for (index, deployment) in deployments.iter().enumerate() {
                let spec = deployment.get("spec").cloned().unwrap_or(Value::Null);
                if let Err(err) = serde_json::from_value::<DeploymentSpec>(spec) {
                    out.push(embedded(
                        &format!("{path} spec.install.spec.deployments[{index}].spec"),
                        "DeploymentSpec",
                        &err,
                    ));
                }
            }
            if out.len() == before {
                out.push(embedded(path, "ClusterServiceVersion", &err));
            }
            None
        }
    }
}

/// Name, catalog fields, strict semver, icon data, install modes, typed examples.
fn check_csv(
    path: &str,
    csv: &ClusterServiceVersion,
    package: &str,
    out: &mut Vec<BundleViolation>,
) {
    let spec = &csv.spec;
    let version = spec.version.as_str();
    let name = csv.metadata.name.as_deref().unwrap_or("");
    let expected = format!("{package}.v{version}");
    if name != expected {
        out.push(BundleViolation::CsvName {
            name: name.to_string(),
            expected,
        });
    }
    for (field, empty) in [
        ("description", spec.description.trim().is_empty()),
        ("version", version.trim().is_empty()),
        ("maturity", spec.maturity.trim().is_empty()),
        ("maintainers", spec.maintainers.is_empty()),
        ("links", spec.links.is_empty()),
        ("keywords", spec.keywords.is_empty()),
    ] {
        if empty {
            out.push(BundleViolation::MissingField {
                field: format!("spec.{field}"),
            });
        }
    }
    let annotation = |key: &str| {
        csv.metadata
            .annotations
            .as_ref()
            .and_then(|map| map.get(key))
            .map_or("", String::as_str)
    };
    for key in REQUIRED_CSV_ANNOTATIONS {
        if annotation(key).trim().is_empty() {
            out.push(BundleViolation::MissingField {
                field: format!("metadata.annotations.{key}"),
            });
        }
    }
    if !version.is_empty()
        && let Err(err) = semver::Version::parse(version)
    {
        out.push(BundleViolation::Semver {
            field: "spec.version".to_string(),
            value: version.to_string(),
            message: err.to_string(),
        });
    }
    for icon in &spec.icon {
        if let Err(err) = base64::engine::general_purpose::STANDARD.decode(&icon.base64data) {
            out.push(BundleViolation::IconData {
                message: err.to_string(),
            });
        }
    }
    check_install_modes(csv, out);
    check_examples(path, annotation("alm-examples"), out);
}

fn check_install_modes(csv: &ClusterServiceVersion, out: &mut Vec<BundleViolation>) {
    let mut seen: BTreeMap<&str, Vec<bool>> = BTreeMap::new();
    for mode in &csv.spec.install_modes {
        let type_ = mode.type_.as_str();
        if !INSTALL_MODE_TYPES.contains(&type_) {
            out.push(BundleViolation::InstallModes {
                message: format!("unknown install mode {type_:?}"),
            });
        }
        seen.entry(type_).or_default().push(mode.supported);
    }
    for type_ in INSTALL_MODE_TYPES {
        let count = seen.get(type_).map_or(0, Vec::len);
        if count != 1 {
            out.push(BundleViolation::InstallModes {
                message: format!("{type_} is stated {count} times, expected once"),
            });
        }
    }
    if seen.get("AllNamespaces") != Some(&vec![true]) {
        out.push(BundleViolation::InstallModes {
            message: "AllNamespaces must be supported: Initializers are cluster-scoped".to_string(),
        });
    }
}

/// How many pods a budget lets a drain evict when `replicas` healthy pods are expected, as the
/// disruption controller computes it (percentages round up, as `GetScaledValueFromIntOrPercent`
/// with `roundUp` does). A budget with neither field allows every eviction.
pub fn disruptions_allowed(spec: &PodDisruptionBudgetSpec, replicas: i32) -> i32 {
    let scaled = |value: &IntOrString| match value {
        IntOrString::Int(n) => *n,
        IntOrString::String(text) => {
            let percent: i64 = text
                .strip_suffix('%')
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or(0);
            let scaled = (percent * i64::from(replicas) + 99).div_euclid(100);
            i32::try_from(scaled).unwrap_or(i32::MAX)
        }
    };
    let desired_healthy = match (&spec.min_available, &spec.max_unavailable) {
        (Some(min), _) => scaled(min),
        (None, Some(max)) => (replicas - scaled(max)).max(0),
        (None, None) => 0,
    };
    (replicas - desired_healthy).max(0)
}

/// Each PodDisruptionBudget selects a deployment of the install strategy and lets a drain evict
/// a pod at every replica count from one to the deployment's.
fn check_disruption_budgets(
    csv: &ClusterServiceVersion,
    budgets: &[PodDisruptionBudget],
    out: &mut Vec<BundleViolation>,
) {
    let deployments: Vec<(String, BTreeMap<String, String>, i32)> = csv
        .spec
        .install
        .spec
        .deployments
        .iter()
        .map(|deployment| {
            let labels = deployment
                .spec
                .template
                .metadata
                .as_ref()
                .and_then(|metadata| metadata.labels.clone())
                .unwrap_or_default();
            let replicas = deployment.spec.replicas.unwrap_or(1);
            (deployment.name.clone(), labels, replicas)
        })
        .collect();
    for pdb in budgets {
        let name = pdb.metadata.name.clone().unwrap_or_default();
        let spec = pdb.spec.clone().unwrap_or_default();
        let selector = spec.selector.clone().unwrap_or_default();
        let wanted = selector.match_labels.clone().unwrap_or_default();
        let selected: Vec<&(String, BTreeMap<String, String>, i32)> = deployments
            .iter()
            .filter(|(_, labels, _)| {
                !wanted.is_empty()
                    && selector
                        .match_expressions
                        .as_ref()
                        .is_none_or(Vec::is_empty)
                    && wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .collect();
        if selected.is_empty() {
            out.push(BundleViolation::PdbSelectsNothing { name: name.clone() });
        }
        for (deployment, _, replicas) in selected {
            if let Some(blocked) =
                (1..=(*replicas).max(1)).find(|n| disruptions_allowed(&spec, *n) < 1)
            {
                out.push(BundleViolation::PdbBlocksDrain {
                    name: name.clone(),
                    deployment: deployment.clone(),
                    replicas: blocked,
                });
            }
        }
    }
}

/// Each `alm-examples` Initializer deserializes into [`Initializer`]. Examples that are not a
/// JSON array, or of a kind the CSV does not own, are the official suite's to report.
fn check_examples(path: &str, examples: &str, out: &mut Vec<BundleViolation>) {
    let Ok(examples) = serde_json::from_str::<Vec<Value>>(examples) else {
        return;
    };
    for (index, example) in examples.iter().enumerate() {
        if example.get("kind").and_then(Value::as_str) == Some(initializer_crds::constants::KIND)
            && let Err(err) = serde_json::from_value::<Initializer>(example.clone())
        {
            out.push(embedded(
                &format!("{path} alm-examples[{index}]"),
                "Initializer",
                &err,
            ));
        }
    }
}

/// Install strategy, Deployments, requests, service accounts, containerImage.
fn check_install(csv: &ClusterServiceVersion, out: &mut Vec<BundleViolation>) {
    let install = &csv.spec.install;
    if install.strategy != DEPLOYMENT_STRATEGY {
        out.push(BundleViolation::InstallStrategy {
            found: install.strategy.clone(),
        });
    }
    let mut images = Vec::new();
    if install.spec.deployments.is_empty() {
        out.push(BundleViolation::MissingField {
            field: "spec.install.spec.deployments".to_string(),
        });
    }
    for deployment in &install.spec.deployments {
        let name = &deployment.name;
        let pod = deployment.spec.template.spec.clone().unwrap_or_default();
        if let Some(account) = pod.service_account_name.as_deref()
            && !install
                .spec
                .permissions
                .iter()
                .chain(&install.spec.cluster_permissions)
                .any(|permission| permission.service_account_name == account)
        {
            out.push(BundleViolation::UnknownServiceAccount {
                deployment: name.clone(),
                name: account.to_string(),
            });
        }
        for container in pod.init_containers.iter().flatten().chain(&pod.containers) {
            images.extend(container.image.clone());
            let requests = container
                .resources
                .as_ref()
                .and_then(|resources| resources.requests.as_ref());
            for resource in ["cpu", "memory"] {
                if !requests.is_some_and(|requests| requests.contains_key(resource)) {
                    out.push(BundleViolation::MissingRequests {
                        deployment: name.clone(),
                        container: container.name.clone(),
                        resource: resource.to_string(),
                    });
                }
            }
        }
    }
    let container_image = csv
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get("containerImage"))
        .map_or("", String::as_str);
    if !container_image.is_empty()
        && !images.is_empty()
        && !images.iter().any(|image| image == container_image)
    {
        out.push(BundleViolation::ContainerImage {
            annotation: container_image.to_string(),
            images,
        });
    }
}

/// Each owned CRD names a CRD manifest of the bundle. (Kind and version are matched by the
/// official suite, which keys owned CRDs by group/version/kind and never compares names.)
fn check_owned_crds(
    csv: &ClusterServiceVersion,
    crds: &[(&str, &str, CustomResourceDefinition)],
    out: &mut Vec<BundleViolation>,
) {
    for description in &csv.spec.customresourcedefinitions.owned {
        let name = description.name.as_str();
        if !crds
            .iter()
            .any(|(_, _, crd)| crd.metadata.name.as_deref() == Some(name))
        {
            out.push(BundleViolation::OwnedCrd {
                name: name.to_string(),
            });
        }
    }
}

/// The Initializer CRD file equals `crdgen`'s output byte for byte.
fn check_crd_drift(
    crds: &[(&str, &str, CustomResourceDefinition)],
    out: &mut Vec<BundleViolation>,
) {
    let Ok(generated) = initializer_crds::crd_yaml() else {
        return;
    };
    for (path, text, crd) in crds {
        if crd.metadata.name.as_deref() == Some(initializer_crds::constants::CRD_NAME)
            && *text != generated
        {
            out.push(BundleViolation::CrdDrift {
                path: path.to_string(),
            });
        }
    }
}

fn embedded(path: &str, type_name: &str, err: &serde_json::Error) -> BundleViolation {
    BundleViolation::EmbeddedObject {
        path: path.to_string(),
        type_name: type_name.to_string(),
        message: err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudgetSpec {
        PodDisruptionBudgetSpec {
            min_available: min,
            max_unavailable: max,
            ..PodDisruptionBudgetSpec::default()
        }
    }

    #[test]
    fn max_unavailable_one_lets_a_drain_evict_one_pod_whatever_the_replicas() {
        let one = spec(None, Some(IntOrString::Int(1)));
        assert_eq!(disruptions_allowed(&one, 1), 1);
        assert_eq!(disruptions_allowed(&one, 2), 1);
    }

    #[test]
    fn min_available_one_blocks_a_drain_of_a_single_replica() {
        let one = spec(Some(IntOrString::Int(1)), None);
        assert_eq!(disruptions_allowed(&one, 1), 0);
        assert_eq!(disruptions_allowed(&one, 2), 1);
    }

    #[test]
    fn percentages_round_up_as_the_disruption_controller_does() {
        let half = |s: &str| IntOrString::String(s.to_string());
        // minAvailable 50% of one pod is one pod: nothing may go.
        assert_eq!(disruptions_allowed(&spec(Some(half("50%")), None), 1), 0);
        // maxUnavailable 50% of one pod is one pod: it may go.
        assert_eq!(disruptions_allowed(&spec(None, Some(half("50%"))), 1), 1);
        assert_eq!(disruptions_allowed(&spec(None, Some(half("0%"))), 2), 0);
        assert_eq!(disruptions_allowed(&spec(Some(half("0%")), None), 1), 1);
    }

    #[test]
    fn max_unavailable_zero_blocks_every_drain() {
        assert_eq!(
            disruptions_allowed(&spec(None, Some(IntOrString::Int(0))), 2),
            0
        );
    }
}
