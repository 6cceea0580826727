//! What the bundle validator reports: one variant per broken rule, each naming the file, field
//! or object at fault, so a failed `make bundle` or `install --bundle` says what to fix.

use super::{ANNOTATIONS_FILE, DOCKERFILE};

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BundleViolation {
    /// A required file is absent.
    #[error("{path} is missing")]
    FileMissing {
        /// Path relative to the bundle directory.
        path: String,
    },
    /// A file does not parse.
    #[error("{path} does not parse: {message}")]
    Unparseable {
        /// Path relative to the bundle directory.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A required bundle annotation is absent.
    #[error("annotation {key} is missing from {ANNOTATIONS_FILE}")]
    AnnotationMissing {
        /// The annotation key.
        key: String,
    },
    /// A bundle annotation has the wrong value.
    #[error("annotation {key} is {found:?}, expected {expected}")]
    AnnotationValue {
        /// The annotation key.
        key: String,
        /// What the file says.
        found: String,
        /// What it must say.
        expected: String,
    },
    /// A `bundle.Dockerfile` label differs from the annotation of the same key.
    #[error("{DOCKERFILE} label {key} is {label:?} but the annotation is {annotation:?}")]
    DockerfileLabel {
        /// The label / annotation key.
        key: String,
        /// The label's value, if any.
        label: Option<String>,
        /// The annotation's value, if any.
        annotation: Option<String>,
    },
    /// A manifest's kind is not one OLM accepts in a bundle.
    #[error("{path} has kind {kind}, which a bundle may not contain")]
    KindNotAllowed {
        /// Path relative to the bundle directory.
        path: String,
        /// The kind found.
        kind: String,
    },
    /// There is not exactly one ClusterServiceVersion.
    #[error("the bundle has {found} ClusterServiceVersions, expected exactly one")]
    CsvCount {
        /// How many there are.
        found: usize,
    },
    /// The CSV's name is not `<package>.v<version>`.
    #[error("the CSV is named {name:?}, expected {expected:?}")]
    CsvName {
        /// The name found.
        name: String,
        /// `<package>.v<version>`.
        expected: String,
    },
    /// A field OperatorHub requires is absent or empty.
    #[error("the CSV's {field} is missing or empty")]
    MissingField {
        /// Dotted path of the field.
        field: String,
    },
    /// A version field is not semantic versioning.
    #[error("the CSV's {field} {value:?} is not a semantic version: {message}")]
    Semver {
        /// Dotted path of the field.
        field: String,
        /// Its value.
        value: String,
        /// Why it does not parse.
        message: String,
    },
    /// The icon is not valid base64.
    #[error("icon data is not valid base64: {message}")]
    IconData {
        /// The decoder's message.
        message: String,
    },
    /// `installModes` does not state each mode once, or does not support AllNamespaces.
    #[error("installModes are invalid: {message}")]
    InstallModes {
        /// What is wrong.
        message: String,
    },
    /// The install strategy is not `deployment`.
    #[error("install strategy {found:?} is not \"deployment\"")]
    InstallStrategy {
        /// The strategy found.
        found: String,
    },
    /// An embedded object does not deserialize into its Kubernetes type.
    #[error("{path} is not a valid {type_name}: {message}")]
    EmbeddedObject {
        /// Where the object is.
        path: String,
        /// The Kubernetes type it must be.
        type_name: String,
        /// The deserializer's message.
        message: String,
    },
    /// A container of the install strategy has no CPU or memory request.
    #[error("container {container} of deployment {deployment} has no {resource} request")]
    MissingRequests {
        /// Deployment name.
        deployment: String,
        /// Container name.
        container: String,
        /// `cpu` or `memory`.
        resource: String,
    },
    /// A Deployment runs as a service account that no permissions entry names, so OLM would
    /// not create it.
    #[error(
        "deployment {deployment} runs as service account {name}, which no permissions entry names"
    )]
    UnknownServiceAccount {
        /// Deployment name.
        deployment: String,
        /// The service account.
        name: String,
    },
    /// An owned CRD names no CRD manifest of the bundle.
    #[error("owned CRD {name} has no CRD manifest of that name")]
    OwnedCrd {
        /// The CRD's name.
        name: String,
    },
    /// The CRD file differs from what `crdgen` produces.
    #[error("{path} differs from crdgen's output: run `make bundle`")]
    CrdDrift {
        /// Path relative to the bundle directory.
        path: String,
    },
    /// `containerImage` is not the image the install strategy runs.
    #[error("containerImage {annotation:?} is not an image of the install strategy ({images:?})")]
    ContainerImage {
        /// The annotation's value.
        annotation: String,
        /// The install strategy's images.
        images: Vec<String>,
    },
    /// A PodDisruptionBudget selects none of the install strategy's pods.
    #[error("PodDisruptionBudget {name} selects no pods of the install strategy's deployments")]
    PdbSelectsNothing {
        /// The PodDisruptionBudget's name.
        name: String,
    },
    /// A PodDisruptionBudget would let no pod be evicted: a node drain would hang on it.
    #[error(
        "PodDisruptionBudget {name} allows no eviction with {replicas} replica(s) of deployment {deployment}: a drain would block"
    )]
    PdbBlocksDrain {
        /// The PodDisruptionBudget's name.
        name: String,
        /// The deployment it selects.
        deployment: String,
        /// The replica count at which it blocks.
        replicas: i32,
    },
}

/// One line per violation, for error messages.
pub fn summary(violations: &[BundleViolation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
