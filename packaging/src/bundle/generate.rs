//! Builds the bundle's files from the operator's own definitions: the CRD from
//! `initializer-crds`, the Deployment and PodDisruptionBudget from [`crate::manifest`], the RBAC
//! from [`crate::rbac`], and the example from `examples/sidecar-initializer.yaml`.
//!
//! Output is deterministic: `createdAt` comes from the release table, not the clock, and every
//! map is sorted, so regenerating an unchanged tree changes no byte.

use std::collections::BTreeMap;

use base64::Engine as _;
use initializer_crds::{constants, images, yaml};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::csv::{
    API_VERSION, ApiResourceReference, ClusterServiceVersion, CrdDescription, CsvSpec,
    CustomResourceDefinitions, DEPLOYMENT_STRATEGY, Descriptor, Icon, InstallMode, KIND, Link,
    Maintainer, NamedInstallStrategy, Provider, RelatedImage, StrategyDeploymentPermissions,
    StrategyDeploymentSpec, StrategyDetailsDeployment,
};
use super::{
    ANNOTATIONS_FILE, Bundle, CHANNEL, CRD_FILE, CSV_FILE, DOCKERFILE, PACKAGE, PDB_FILE,
    POLICY_CANARY_ROLE_FILE, SCORECARD_FILE, WORKLOADS_ROLE_FILE,
};
use crate::error::Error;
use crate::manifest;

/// The operator's version: the workspace version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Oldest supported Kubernetes version: the oldest minor upstream supports, and the one CI runs
/// the suite on (tools/controlplane/go.mod).
pub const MIN_KUBE_VERSION: &str = "1.35.0";
/// Release dates by version, the source of the CSV's `createdAt`. Add a line when the version
/// changes; generation refuses a version without one.
pub const RELEASES: [(&str, &str); 2] = [
    ("0.1.0", "2026-11-21T00:00:00Z"),
    ("0.2.0", "2026-11-30T00:00:00Z"),
];
/// Project home.
pub const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");
/// The sidecar Initializer shown in the book (`docs/src/guides/initializer-api.md`) and offered
/// by OLM consoles (`alm-examples`).
pub const SIDECAR_EXAMPLE: &str = include_str!("../../../examples/sidecar-initializer.yaml");
/// The icon catalogs show next to the operator's name (SVG, base64-encoded into the CSV).
pub const ICON_SVG: &str = include_str!("assets/icon.svg");
/// The CSV's long description (markdown).
pub const DESCRIPTION: &str = include_str!("assets/description.md");
/// OLM's capability levels, in order.
pub const CAPABILITIES: [&str; 5] = [
    "Basic Install",
    "Seamless Upgrades",
    "Full Lifecycle",
    "Deep Insights",
    "Auto Pilot",
];
/// The capability level claimed: the operator installs and configures its operands; upgrades
/// between versions are not yet automated or tested, so nothing higher is claimed.
pub const CAPABILITY: &str = "Basic Install";
/// OperatorHub categories.
pub const CATEGORIES: &str = "Developer Tools, Security";
/// Scorecard test image (operator-sdk's).
pub const SCORECARD_IMAGE: &str = "quay.io/operator-framework/scorecard-test:v1.39.2";

/// The bundle annotations (`metadata/annotations.yaml`), which the bundle image's labels repeat.
pub fn annotations() -> BTreeMap<String, String> {
    [
        (
            "operators.operatorframework.io.bundle.mediatype.v1",
            "registry+v1",
        ),
        (
            "operators.operatorframework.io.bundle.manifests.v1",
            "manifests/",
        ),
        (
            "operators.operatorframework.io.bundle.metadata.v1",
            "metadata/",
        ),
        ("operators.operatorframework.io.bundle.package.v1", PACKAGE),
        ("operators.operatorframework.io.bundle.channels.v1", CHANNEL),
        (
            "operators.operatorframework.io.bundle.channel.default.v1",
            CHANNEL,
        ),
        (
            "operators.operatorframework.io.test.mediatype.v1",
            "scorecard+v1",
        ),
        (
            "operators.operatorframework.io.test.config.v1",
            "tests/scorecard/",
        ),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .collect()
}

/// The CSV's name for `version`: `<package>.v<version>`.
pub fn csv_name(version: &str) -> String {
    format!("{PACKAGE}.v{version}")
}

/// The release date of `version`, from [`RELEASES`].
pub fn created_at(version: &str) -> Result<&'static str, Error> {
    RELEASES
        .iter()
        .find(|(release, _)| *release == version)
        .map(|(_, date)| *date)
        .ok_or_else(|| Error::BundleGenerate(format!("failed to find the release date of version {version}: add it to bundle::generate::RELEASES")))
}

/// The release before `version` in [`RELEASES`], which its CSV replaces.
pub fn previous_release(version: &str) -> Option<&'static str> {
    let at = RELEASES
        .iter()
        .position(|(release, _)| *release == version)?;
    at.checked_sub(1).map(|before| RELEASES[before].0)
}

/// Generates the whole bundle with the operator's RBAC from [`crate::rbac`].
pub fn generate() -> Result<Bundle, Error> {
    generate_with_rules(crate::rbac::cluster_rules(), crate::rbac::namespace_rules())
}

/// Generates the whole bundle granting the operator `cluster_rules` cluster-wide and
/// `namespace_rules` in its own namespace.
pub fn generate_with_rules(
    cluster_rules: Vec<PolicyRule>,
    namespace_rules: Vec<PolicyRule>,
) -> Result<Bundle, Error> {
    let crd = initializer_crds::crd_yaml().map_err(|err| yaml_error("the CRD", &err))?;
    let csv = cluster_service_version(cluster_rules, namespace_rules)?;
    let csv_yaml = yaml::to_string(&csv).map_err(|err| yaml_error("the CSV", &err))?;
    let annotations = annotations();
    let annotations_yaml = yaml::to_string(&BTreeMap::from([("annotations", &annotations)]))
        .map_err(|err| yaml_error("the annotations", &err))?;
    let scorecard = yaml::to_string(&scorecard_config())
        .map_err(|err| yaml_error("the scorecard configuration", &err))?;
    let pdb = yaml::to_string(&manifest::pod_disruption_budget())
        .map_err(|err| yaml_error("the PodDisruptionBudget", &err))?;
    let workloads_role = yaml::to_string(&manifest::workloads_cluster_role())
        .map_err(|err| yaml_error("the workloads ClusterRole", &err))?;
    let policy_canary_role = yaml::to_string(&manifest::policy_canary_cluster_role())
        .map_err(|err| yaml_error("the policy canary ClusterRole", &err))?;
    let mut files = BTreeMap::from([
        (POLICY_CANARY_ROLE_FILE.to_string(), policy_canary_role),
        (CSV_FILE.to_string(), csv_yaml),
        (CRD_FILE.to_string(), crd),
        (PDB_FILE.to_string(), pdb),
        (WORKLOADS_ROLE_FILE.to_string(), workloads_role),
        (ANNOTATIONS_FILE.to_string(), annotations_yaml),
        (DOCKERFILE.to_string(), dockerfile(&annotations)),
        (SCORECARD_FILE.to_string(), scorecard),
    ]);
    files.extend(crate::monitoring::bundle_files()?);
    Ok(Bundle { files })
}

/// The ClusterServiceVersion built from the manifests and the given RBAC rules (the rules are
/// parameters so tests can check what a change of rights does to the CSV).
pub fn cluster_service_version(
    cluster_rules: Vec<PolicyRule>,
    namespace_rules: Vec<PolicyRule>,
) -> Result<ClusterServiceVersion, Error> {
    let example: serde_json::Value = serde_saphyr::from_str(SIDECAR_EXAMPLE).map_err(|err| {
        Error::BundleGenerate(format!("failed to parse the sidecar example: {err}"))
    })?;
    let alm_examples = serde_json::to_string_pretty(&vec![example])
        .map_err(|err| Error::BundleGenerate(format!("failed to serialize alm-examples: {err}")))?;
    let operator_image = images::image(images::OPERATOR);
    let metadata_annotations: BTreeMap<String, String> = [
        ("alm-examples", alm_examples.as_str()),
        ("capabilities", CAPABILITY),
        ("categories", CATEGORIES),
        ("containerImage", operator_image.as_str()),
        ("createdAt", created_at(VERSION)?),
        ("description", crate::manifest::OPERATOR_DESCRIPTION),
        (
            "operatorframework.io/suggested-namespace",
            manifest::DEFAULT_NAMESPACE,
        ),
        ("repository", REPOSITORY),
        ("support", "initializer-dev"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .collect();
    Ok(ClusterServiceVersion {
        api_version: API_VERSION.to_string(),
        kind: KIND.to_string(),
        metadata: ObjectMeta {
            name: Some(csv_name(VERSION)),
            annotations: Some(metadata_annotations),
            ..ObjectMeta::default()
        },
        spec: CsvSpec {
            display_name: "Initializer Operator".to_string(),
            description: DESCRIPTION.to_string(),
            version: VERSION.to_string(),
            min_kube_version: Some(MIN_KUBE_VERSION.to_string()),
            replaces: previous_release(VERSION).map(csv_name),
            maturity: super::MATURITY.to_string(),
            provider: Provider {
                name: "initializer-dev".to_string(),
                url: Some("https://github.com/initializer-dev".to_string()),
            },
            maintainers: vec![Maintainer {
                name: "initializer-dev maintainers".to_string(),
                email: "maintainers@initializer.dev".to_string(),
            }],
            links: vec![
                Link {
                    name: "Documentation".to_string(),
                    url: format!("{REPOSITORY}#readme"),
                },
                Link {
                    name: "Source Code".to_string(),
                    url: REPOSITORY.to_string(),
                },
            ],
            keywords: [
                "admission",
                "initializer",
                "webhook",
                "mutating",
                "sidecar",
                "injection",
                "podpreset",
            ]
            .map(String::from)
            .to_vec(),
            icon: vec![Icon {
                base64data: base64::engine::general_purpose::STANDARD.encode(ICON_SVG),
                mediatype: "image/svg+xml".to_string(),
            }],
            customresourcedefinitions: CustomResourceDefinitions {
                owned: vec![initializer_description()],
                required: Vec::new(),
            },
            install: NamedInstallStrategy {
                strategy: DEPLOYMENT_STRATEGY.to_string(),
                spec: StrategyDetailsDeployment {
                    deployments: vec![StrategyDeploymentSpec {
                        name: manifest::OPERATOR_NAME.to_string(),
                        label: manifest::selector_labels(),
                        spec: manifest::deployment_spec(),
                    }],
                    permissions: vec![StrategyDeploymentPermissions {
                        service_account_name: manifest::OPERATOR_NAME.to_string(),
                        rules: namespace_rules,
                    }],
                    cluster_permissions: vec![StrategyDeploymentPermissions {
                        service_account_name: manifest::OPERATOR_NAME.to_string(),
                        rules: cluster_rules,
                    }],
                },
            },
            install_modes: [
                ("OwnNamespace", false),
                ("SingleNamespace", false),
                ("MultiNamespace", false),
                ("AllNamespaces", true),
            ]
            .into_iter()
            .map(|(type_, supported)| InstallMode {
                type_: type_.to_string(),
                supported,
            })
            .collect(),
            related_images: [images::OPERATOR, images::PRESET_INITIALIZER]
                .into_iter()
                .map(|binary| RelatedImage {
                    name: binary.to_string(),
                    image: images::image(binary),
                })
                .collect(),
        },
    })
}

/// The owned `Initializer` CRD's description, with the fields consoles should show.
fn initializer_description() -> CrdDescription {
    let descriptor = |path: &str, name: &str, description: &str, hints: &[&str]| Descriptor {
        path: path.to_string(),
        display_name: name.to_string(),
        description: description.to_string(),
        x_descriptors: hints.iter().map(|hint| hint.to_string()).collect(),
    };
    let resource = |kind: &str, name: &str, version: &str| ApiResourceReference {
        kind: kind.to_string(),
        name: name.to_string(),
        version: version.to_string(),
    };
    CrdDescription {
        name: constants::CRD_NAME.to_string(),
        version: constants::VERSION.to_string(),
        kind: constants::KIND.to_string(),
        display_name: "Initializer".to_string(),
        description: "An initializer: mutates or rejects objects before Kubernetes creates them, registered only while it is ready and answering.".to_string(),
        resources: vec![
            resource("ConfigMap", "configmaps", "v1"),
            resource("Deployment", "deployments", "v1"),
            resource("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "v1"),
            resource("PodDisruptionBudget", "poddisruptionbudgets", "v1"),
            resource("Secret", "secrets", "v1"),
            resource("Service", "services", "v1"),
            resource("ServiceAccount", "serviceaccounts", "v1"),
        ],
        spec_descriptors: vec![
            descriptor("image", "Image", "Container image of the initializer; omit it to run the built-in preset initializer.", &["urn:alm:descriptor:com.tectonic.ui:text"]),
            descriptor("replicas", "Replicas", "Number of initializer pods.", &["urn:alm:descriptor:com.tectonic.ui:podCount"]),
            descriptor("failurePolicy", "Failure policy", "What the API server does when the initializer cannot be reached while registered.", &["urn:alm:descriptor:com.tectonic.ui:select:Fail", "urn:alm:descriptor:com.tectonic.ui:select:Ignore"]),
            descriptor("timeoutSeconds", "Timeout", "How long the API server waits for the initializer, in seconds.", &["urn:alm:descriptor:com.tectonic.ui:number"]),
            descriptor("suspend", "Suspend", "Deregister and stay deregistered while true (break-glass).", &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"]),
            descriptor("rules", "Rules", "Which requests are intercepted, as in admission registration.", &["urn:alm:descriptor:com.tectonic.ui:advanced"]),
            descriptor("namespace", "Namespace", "Namespace the initializer's workload runs in; defaults to the operator's.", &["urn:alm:descriptor:io.kubernetes:Namespace"]),
        ],
        status_descriptors: vec![
            descriptor("phase", "Phase", "Lifecycle phase: Pending, Deploying, Registered, Unresponsive, Suspended or Invalid.", &["urn:alm:descriptor:io.kubernetes.phase"]),
            descriptor("conditions", "Conditions", "Valid, Available, Responding and Registered.", &["urn:alm:descriptor:io.kubernetes.conditions"]),
            descriptor("registered", "Registered", "Whether the webhook configuration is registered now.", &["urn:alm:descriptor:text"]),
            descriptor("readyReplicas", "Ready replicas", "Ready initializer pods.", &["urn:alm:descriptor:com.tectonic.ui:podCount"]),
            descriptor("configurationName", "Configuration", "Name of the registered MutatingWebhookConfiguration.", &["urn:alm:descriptor:text"]),
            descriptor("lastProbeLatencyMillis", "Probe latency (ms)", "Latency of the last active probe through the API server.", &["urn:alm:descriptor:text"]),
            descriptor("certificateNotAfter", "Certificate expiry", "Expiry of the serving certificate.", &["urn:alm:descriptor:timestamp"]),
        ],
    }
}

/// `bundle.Dockerfile`: a scratch image whose labels repeat the annotations, built with the
/// bundle directory as context.
pub fn dockerfile(annotations: &BTreeMap<String, String>) -> String {
    let mut text = String::from(
        "# Generated by `initializer-operator bundle`; do not edit.\n\
         # Build from the bundle directory: docker build -f bundle.Dockerfile -t IMAGE .\n\
         FROM scratch\n\n",
    );
    for (key, value) in annotations {
        text.push_str(&format!("LABEL {key}={value}\n"));
    }
    text.push_str(
        "\nCOPY manifests /manifests/\nCOPY metadata /metadata/\nCOPY tests/scorecard /tests/scorecard/\n",
    );
    text
}

/// The scorecard configuration, as operator-sdk writes it: the basic and olm suites.
pub fn scorecard_config() -> serde_json::Value {
    let test = |entrypoint: &str, suite: &str| {
        serde_json::json!({
            "entrypoint": ["scorecard-test", entrypoint],
            "image": SCORECARD_IMAGE,
            "labels": {"suite": suite, "test": format!("{entrypoint}-test")},
            "storage": {"spec": {"mountPath": {}}},
        })
    };
    serde_json::json!({
        "apiVersion": "scorecard.operatorframework.io/v1alpha3",
        "kind": "Configuration",
        "metadata": {"name": "config"},
        "stages": [
            {"parallel": true, "tests": [
                test("basic-check-spec", "basic"),
                test("olm-bundle-validation", "olm"),
                test("olm-crds-have-validation", "olm"),
                test("olm-crds-have-resources", "olm"),
                test("olm-spec-descriptors", "olm"),
                test("olm-status-descriptors", "olm"),
            ]},
        ],
        "storage": {"spec": {"mountPath": {}}},
    })
}

fn yaml_error(what: &str, err: &serde_saphyr::SerializeError) -> Error {
    Error::BundleGenerate(format!("failed to serialize {what}: {err}"))
}
