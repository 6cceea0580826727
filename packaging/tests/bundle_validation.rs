//! The committed OLM bundle is valid, matches what the generator produces, and the project's own
//! validator catches each of its rules (those the official suite lacks, see
//! `initializer_packaging::bundle::validate`) when a copy of the bundle is broken on purpose.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use initializer_crds::Initializer;
use initializer_packaging::bundle::{
    self, Bundle, BundleViolation, CRD_FILE, CSV_FILE, DOCKERFILE, validate,
};
use initializer_packaging::{manifest, monitoring, rbac};
use kube::CustomResourceExt;
use serde_json::{Value, json};

const ANNOTATIONS: &str = "metadata/annotations.yaml";
const MEDIATYPE: &str = "operators.operatorframework.io.bundle.mediatype.v1";

fn committed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(bundle::BUNDLE_DIR)
}

/// A copy of the committed bundle in a temporary directory.
struct Copy {
    dir: tempfile::TempDir,
}

impl Copy {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Bundle::read(&committed_dir())
            .unwrap()
            .write(dir.path())
            .unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn text(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }

    fn write(&self, name: &str, text: &str) {
        let path = self.path(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Edits a YAML file as JSON.
    fn edit(&self, name: &str, change: impl FnOnce(&mut Value)) {
        let mut value: Value = serde_saphyr::from_str(&self.text(name)).unwrap();
        change(&mut value);
        self.write(name, &serde_saphyr::to_string(&value).unwrap());
    }

    fn edit_csv(&self, change: impl FnOnce(&mut Value)) {
        self.edit(CSV_FILE, change);
    }

    fn set(&self, name: &str, pointer: &str, new: Value) {
        self.edit(name, |value| *value.pointer_mut(pointer).unwrap() = new);
    }

    fn violations(&self) -> Vec<BundleViolation> {
        validate(self.dir.path()).expect_err("the broken bundle must not validate")
    }
}

fn assert_reports(violations: &[BundleViolation], expected: impl Fn(&BundleViolation) -> bool) {
    assert!(
        violations.iter().any(expected),
        "expected violation not reported; got {violations:#?}"
    );
}

// The committed bundle.

#[test]
fn committed_bundle_passes_every_rule() {
    if let Err(violations) = validate(&committed_dir()) {
        panic!("the committed bundle is invalid: {violations:#?}");
    }
}

#[test]
fn committed_bundle_equals_what_the_generator_produces() {
    let committed = Bundle::read(&committed_dir()).unwrap();
    let generated = bundle::generate().unwrap();
    for (name, text) in &generated.files {
        assert!(
            committed.file(name) == Some(text.as_str()),
            "{name} drifted from the generator: run `make bundle`"
        );
    }
    let extra: Vec<&String> = committed
        .files
        .keys()
        .filter(|name| !generated.files.contains_key(*name))
        .collect();
    assert!(
        extra.is_empty(),
        "files the generator does not produce: {extra:?}"
    );
}

#[test]
fn committed_bundle_reads_back_as_the_objects_it_was_written_from() {
    // The YAML means what the code built: no string the emitter writes (`"true"`, `"1.0"`,
    // `"*"`, text with `: ` or several lines) comes back as another value.
    fn to_json(object: &impl serde::Serialize) -> Value {
        serde_json::to_value(object).unwrap()
    }
    let committed = Bundle::read(&committed_dir()).unwrap();
    let expected: Vec<(&str, Value)> = vec![
        (CRD_FILE, to_json(&Initializer::crd())),
        (
            CSV_FILE,
            to_json(
                &bundle::generate::cluster_service_version(
                    rbac::cluster_rules(),
                    rbac::namespace_rules(),
                )
                .unwrap(),
            ),
        ),
        (
            bundle::PDB_FILE,
            to_json(&manifest::pod_disruption_budget()),
        ),
        (
            bundle::WORKLOADS_ROLE_FILE,
            to_json(&manifest::workloads_cluster_role()),
        ),
        (
            bundle::POLICY_CANARY_ROLE_FILE,
            to_json(&manifest::policy_canary_cluster_role()),
        ),
        (
            ANNOTATIONS,
            json!({ "annotations": bundle::generate::annotations() }),
        ),
        (bundle::SCORECARD_FILE, bundle::generate::scorecard_config()),
        (
            monitoring::BUNDLE_RULE_FILE,
            monitoring::prometheus_rule(None, &monitoring::AlertParameters::default()),
        ),
        (
            monitoring::BUNDLE_SERVICE_MONITOR_FILE,
            monitoring::service_monitor(None),
        ),
        (
            monitoring::BUNDLE_SERVICE_FILE,
            to_json(&monitoring::metrics_service(None)),
        ),
    ];
    for (name, object) in &expected {
        let read: Value = serde_saphyr::from_str(committed.file(name).unwrap()).unwrap();
        assert!(read == *object, "{name} does not read back as its object");
    }
    let yaml_files: Vec<&String> = committed
        .files
        .keys()
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    assert_eq!(yaml_files.len(), expected.len(), "{yaml_files:?}");
}

#[test]
fn generating_twice_gives_identical_bytes() {
    assert_eq!(bundle::generate().unwrap(), bundle::generate().unwrap());
}

#[test]
fn bundle_crd_is_byte_identical_to_the_committed_crd_manifest() {
    let crds_manifest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(initializer_crds::CRD_MANIFEST_PATH),
    )
    .unwrap();
    let bundle = Bundle::read(&committed_dir()).unwrap();
    assert!(bundle.file(CRD_FILE) == Some(crds_manifest.as_str()));
}

#[test]
fn alm_example_is_the_sidecar_fixture_shown_in_the_book() {
    let fixture: Value = serde_saphyr::from_str(bundle::generate::SIDECAR_EXAMPLE).unwrap();
    let csv: Value =
        serde_saphyr::from_str(bundle::generate().unwrap().file(CSV_FILE).unwrap()).unwrap();
    let examples: Vec<Value> = serde_json::from_str(
        csv["metadata"]["annotations"]["alm-examples"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(examples, vec![fixture.clone()]);
    assert_eq!(
        fixture["spec"]["image"].as_str(),
        Some(initializer_crds::images::image("sidecar-initializer").as_str())
    );
}

/// The book's permissions page, `docs/src/install/permissions.md`, lists exactly the rules the
/// bundle grants.
#[test]
fn book_permissions_table_lists_every_rule_the_bundle_grants() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/install/permissions.md"),
    )
    .unwrap();
    let csv: Value =
        serde_saphyr::from_str(bundle::generate().unwrap().file(CSV_FILE).unwrap()).unwrap();
    let strategy = &csv["spec"]["install"]["spec"];
    let mut rows = 0;
    for field in ["permissions", "clusterPermissions"] {
        for permission in strategy[field].as_array().unwrap() {
            for rule in permission["rules"].as_array().unwrap() {
                let join = |key: &str| {
                    rule[key]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|item| match item.as_str().unwrap() {
                            "" => "core",
                            other => other,
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let row = format!(
                    "| {} | {} | {} |",
                    join("apiGroups"),
                    join("resources"),
                    join("verbs")
                );
                assert!(
                    page.contains(&row),
                    "docs/src/install/permissions.md has no permissions row {row}"
                );
                rows += 1;
            }
        }
    }
    let table_rows = page
        .lines()
        .skip_while(|line| !line.starts_with("| API group |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .count();
    assert_eq!(
        table_rows, rows,
        "docs/src/install/permissions.md lists rules the bundle does not grant"
    );
}

/// The annotated example of the book's Initializer API page, `docs/src/guides/initializer-api.md`,
/// is `examples/sidecar-initializer.yaml`, field for field.
#[test]
fn book_initializer_example_is_the_sidecar_fixture() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/guides/initializer-api.md"),
    )
    .unwrap();
    let block = page
        .split("```yaml\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .find(|block| block.contains("kind: Initializer") && block.contains("name: sidecar"))
        .expect("the Initializer API page shows the sidecar Initializer");
    let shown: Value = serde_saphyr::from_str(block).unwrap();
    let fixture: Value = serde_saphyr::from_str(bundle::generate::SIDECAR_EXAMPLE).unwrap();
    assert_eq!(
        shown, fixture,
        "docs/src/guides/initializer-api.md and examples/sidecar-initializer.yaml differ"
    );
}

/// The NetworkPolicy the book offers to keep the operator's `/metrics` in
/// (`examples/operator-metrics-networkpolicy.yaml`) selects the operator's pods in its default
/// namespace, and admits them on the port that serves `/metrics`, by that port's name.
#[test]
fn the_metrics_network_policy_example_selects_the_operators_pods_and_port() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/operator-metrics-networkpolicy.yaml"),
    )
    .unwrap();
    let policy: Value = serde_saphyr::from_str(&text).unwrap();
    let plan = initializer_packaging::install::plan(
        &bundle::generate().unwrap(),
        manifest::DEFAULT_NAMESPACE,
    )
    .unwrap();
    let operator = plan
        .deployments
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some(manifest::OPERATOR_NAME))
        .unwrap();
    assert_eq!(
        policy["metadata"]["namespace"],
        json!(manifest::DEFAULT_NAMESPACE)
    );
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        serde_json::to_value(&operator.spec.selector.match_labels).unwrap()
    );
    let container = operator.spec.template.spec.as_ref().unwrap().containers[0].clone();
    let metrics_port = container
        .ports
        .iter()
        .flatten()
        .find(|port| port.name.as_deref() == Some(manifest::HTTP_PORT_NAME))
        .expect("the operator's container names its metrics port");
    let admitted = &policy["spec"]["ingress"][0]["ports"][0]["port"];
    assert_eq!(admitted, &json!(metrics_port.name));
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
}

// One broken copy per rule.

#[test]
fn missing_annotations_file_is_reported() {
    let copy = Copy::new();
    std::fs::remove_file(copy.path(ANNOTATIONS)).unwrap();
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::FileMissing { path } if path == ANNOTATIONS),
    );
}

#[test]
fn unparseable_manifest_is_reported() {
    let copy = Copy::new();
    copy.write(CSV_FILE, "kind: [unclosed\n");
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::Unparseable { path, .. } if path == CSV_FILE),
    );
}

#[test]
fn missing_mediatype_annotation_is_reported() {
    let copy = Copy::new();
    copy.edit(ANNOTATIONS, |value| {
        value["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(MEDIATYPE);
    });
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::AnnotationMissing { key } if key == MEDIATYPE),
    );
}

#[test]
fn wrong_mediatype_annotation_is_reported() {
    let copy = Copy::new();
    copy.set(
        ANNOTATIONS,
        &format!("/annotations/{MEDIATYPE}"),
        json!("helm"),
    );
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::AnnotationValue { key, found, .. } if key == MEDIATYPE && found == "helm"),
    );
}

#[test]
fn default_channel_outside_the_channels_is_reported() {
    let copy = Copy::new();
    let key = "operators.operatorframework.io.bundle.channel.default.v1";
    copy.set(ANNOTATIONS, &format!("/annotations/{key}"), json!("stable"));
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::AnnotationValue { key: k, found, .. } if k == key && found == "stable"),
    );
}

#[test]
fn dockerfile_label_differing_from_its_annotation_is_reported() {
    let copy = Copy::new();
    let text = copy.text(DOCKERFILE).replace(
        "bundle.package.v1=initializer-operator",
        "bundle.package.v1=someone-else",
    );
    copy.write(DOCKERFILE, &text);
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::DockerfileLabel { label: Some(label), .. } if label == "someone-else"),
    );
}

#[test]
fn second_csv_is_reported() {
    let copy = Copy::new();
    copy.write(
        "manifests/copy.clusterserviceversion.yaml",
        &copy.text(CSV_FILE),
    );
    assert_reports(&copy.violations(), |v| {
        matches!(v, BundleViolation::CsvCount { found: 2 })
    });
}

#[test]
fn missing_csv_is_reported() {
    let copy = Copy::new();
    std::fs::remove_file(copy.path(CSV_FILE)).unwrap();
    assert_reports(&copy.violations(), |v| {
        matches!(v, BundleViolation::CsvCount { found: 0 })
    });
}

#[test]
fn csv_name_without_the_package_and_version_is_reported() {
    let copy = Copy::new();
    copy.set(
        CSV_FILE,
        "/metadata/name",
        json!("initializer-operator-0.1.0"),
    );
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::CsvName { name, .. } if name == "initializer-operator-0.1.0"),
    );
}

#[test]
fn missing_keywords_are_reported() {
    let copy = Copy::new();
    copy.edit_csv(|csv| {
        csv["spec"].as_object_mut().unwrap().remove("keywords");
    });
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::MissingField { field } if field == "spec.keywords"),
    );
}

#[test]
fn missing_support_annotation_is_reported() {
    let copy = Copy::new();
    copy.edit_csv(|csv| {
        csv["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("support");
    });
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::MissingField { field } if field == "metadata.annotations.support"),
    );
}

#[test]
fn version_that_is_not_semver_is_reported() {
    let copy = Copy::new();
    copy.set(CSV_FILE, "/spec/version", json!("0.1"));
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::Semver { field, .. } if field == "spec.version"),
    );
}

#[test]
fn icon_that_is_not_base64_is_reported() {
    let copy = Copy::new();
    copy.set(
        CSV_FILE,
        "/spec/icon/0/base64data",
        json!("<svg>not encoded</svg>"),
    );
    assert_reports(&copy.violations(), |v| {
        matches!(v, BundleViolation::IconData { .. })
    });
}

#[test]
fn unsupported_all_namespaces_install_mode_is_reported() {
    let copy = Copy::new();
    copy.set(CSV_FILE, "/spec/installModes/3/supported", json!(false));
    assert_reports(&copy.violations(), |v| {
        matches!(v, BundleViolation::InstallModes { .. })
    });
}

#[test]
fn missing_install_mode_is_reported() {
    let copy = Copy::new();
    copy.edit_csv(|csv| {
        csv["spec"]["installModes"]
            .as_array_mut()
            .unwrap()
            .remove(0);
    });
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::InstallModes { message } if message.contains("OwnNamespace")),
    );
}

#[test]
fn install_mode_stated_twice_is_reported() {
    let copy = Copy::new();
    copy.edit_csv(|csv| {
        csv["spec"]["installModes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "OwnNamespace", "supported": false}));
    });
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::InstallModes { message } if message.contains("OwnNamespace is stated 2 times")),
    );
}

#[test]
fn install_strategy_other_than_deployment_is_reported() {
    let copy = Copy::new();
    copy.set(CSV_FILE, "/spec/install/strategy", json!("helm"));
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::InstallStrategy { found } if found == "helm"),
    );
}

#[test]
fn deployment_spec_that_is_not_a_deployment_spec_is_reported() {
    let copy = Copy::new();
    copy.set(
        CSV_FILE,
        "/spec/install/spec/deployments/0/spec/replicas",
        json!("two"),
    );
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::EmbeddedObject { type_name, .. } if type_name == "DeploymentSpec"),
    );
}

#[test]
fn csv_that_is_not_a_cluster_service_version_is_reported() {
    let copy = Copy::new();
    copy.set(CSV_FILE, "/spec/installModes/0/supported", json!("yes"));
    let violations = copy.violations();
    assert_reports(
        &violations,
        |v| matches!(v, BundleViolation::EmbeddedObject { type_name, .. } if type_name == "ClusterServiceVersion"),
    );
    assert!(
        !violations.iter().any(|v| matches!(v, BundleViolation::EmbeddedObject { type_name, .. } if type_name == "DeploymentSpec")),
        "the Deployment specs decode: {violations:#?}"
    );
}

#[test]
fn crd_that_is_not_a_crd_is_reported() {
    let copy = Copy::new();
    copy.set(CRD_FILE, "/spec/versions", json!("v1alpha1"));
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::EmbeddedObject { type_name, .. } if type_name == "CustomResourceDefinition"),
    );
}

#[test]
fn alm_example_that_is_not_a_valid_initializer_is_reported() {
    let copy = Copy::new();
    copy.edit_csv(|csv| {
        let examples = csv["metadata"]["annotations"]["alm-examples"]
            .as_str()
            .unwrap();
        let mut examples: Value = serde_json::from_str(examples).unwrap();
        examples[0]["spec"]["replicas"] = json!("two");
        csv["metadata"]["annotations"]["alm-examples"] = json!(examples.to_string());
    });
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::EmbeddedObject { type_name, .. } if type_name == "Initializer"),
    );
}

#[test]
fn container_without_a_cpu_request_is_reported() {
    let copy = Copy::new();
    copy.edit_csv(|csv| {
        csv.pointer_mut(
            "/spec/install/spec/deployments/0/spec/template/spec/containers/0/resources/requests",
        )
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("cpu");
    });
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::MissingRequests { resource, .. } if resource == "cpu"),
    );
}

#[test]
fn deployment_service_account_without_permissions_is_reported() {
    let copy = Copy::new();
    copy.set(
        CSV_FILE,
        "/spec/install/spec/deployments/0/spec/template/spec/serviceAccountName",
        json!("nobody"),
    );
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::UnknownServiceAccount { name, .. } if name == "nobody"),
    );
}

#[test]
fn kind_a_bundle_may_not_contain_is_reported() {
    let copy = Copy::new();
    copy.write(
        "manifests/deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: sneaky\n",
    );
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::KindNotAllowed { kind, .. } if kind == "Deployment"),
    );
}

#[test]
fn owned_crd_without_a_crd_file_is_reported() {
    let copy = Copy::new();
    copy.set(
        CSV_FILE,
        "/spec/customresourcedefinitions/owned/0/name",
        json!("others.initializer.dev"),
    );
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::OwnedCrd { name } if name == "others.initializer.dev"),
    );
}

#[test]
fn crd_differing_from_crdgen_is_reported() {
    let copy = Copy::new();
    let text = copy.text(CRD_FILE) + "# edited by hand\n";
    copy.write(CRD_FILE, &text);
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::CrdDrift { path } if path == CRD_FILE),
    );
}

#[test]
fn container_image_annotation_not_run_by_the_install_strategy_is_reported() {
    let copy = Copy::new();
    copy.set(
        CSV_FILE,
        "/metadata/annotations/containerImage",
        json!("example.com/other:1.0.0"),
    );
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::ContainerImage { annotation, .. } if annotation == "example.com/other:1.0.0"),
    );
}

// The operator's PodDisruptionBudget.

#[test]
fn committed_bundle_gives_the_operator_a_disruption_budget_of_max_unavailable_one() {
    let bundle = Bundle::read(&committed_dir()).unwrap();
    let pdb: Value = serde_saphyr::from_str(bundle.file(bundle::PDB_FILE).unwrap()).unwrap();
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["kind"], "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(pdb["spec"].get("minAvailable").is_none());
    assert!(
        pdb["metadata"].get("namespace").is_none(),
        "OLM puts it in the install namespace"
    );
}

#[test]
fn a_disruption_budget_that_blocks_the_drain_of_a_single_replica_is_reported() {
    let copy = Copy::new();
    copy.edit(bundle::PDB_FILE, |pdb| {
        pdb["spec"]
            .as_object_mut()
            .unwrap()
            .remove("maxUnavailable");
        pdb["spec"]["minAvailable"] = json!(1);
    });
    assert_reports(&copy.violations(), |v| {
        matches!(v, BundleViolation::PdbBlocksDrain { replicas: 1, .. })
    });
}

#[test]
fn a_disruption_budget_of_max_unavailable_zero_is_reported() {
    let copy = Copy::new();
    copy.set(bundle::PDB_FILE, "/spec/maxUnavailable", json!(0));
    assert_reports(&copy.violations(), |v| {
        matches!(v, BundleViolation::PdbBlocksDrain { .. })
    });
}

#[test]
fn a_disruption_budget_that_selects_no_operator_pod_is_reported() {
    let copy = Copy::new();
    copy.set(
        bundle::PDB_FILE,
        "/spec/selector/matchLabels",
        json!({"app.kubernetes.io/name": "someone-else"}),
    );
    assert_reports(&copy.violations(), |v| {
        matches!(v, BundleViolation::PdbSelectsNothing { .. })
    });
}

#[test]
fn a_disruption_budget_that_is_not_one_is_reported() {
    let copy = Copy::new();
    copy.set(bundle::PDB_FILE, "/spec/maxUnavailable", json!({"no": 1}));
    assert_reports(
        &copy.violations(),
        |v| matches!(v, BundleViolation::EmbeddedObject { type_name, .. } if type_name == "PodDisruptionBudget"),
    );
}
