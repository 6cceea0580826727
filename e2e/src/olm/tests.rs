//! Unit tests of [`crate::olm`].

use super::*;

const CSV: &str = "\
apiVersion: operators.coreos.com/v1alpha1
kind: ClusterServiceVersion
metadata:
  annotations:
    containerImage: ghcr.io/initializer-dev/initializer-operator:0.1.0
  name: initializer-operator.v0.1.0
spec:
  version: 0.1.0
  install:
    spec:
      deployments:
      - spec:
          template:
            spec:
              containers:
              - image: ghcr.io/initializer-dev/initializer-operator:0.1.0
";

#[test]
fn olm_as_pods_runs_the_loaded_image_with_the_processes_flags() {
    let docs: Vec<serde_json::Value> = operators_yaml("initializer-e2e/olm:v1")
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Deployment"
        ]
    );
    let container = &docs[4]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "initializer-e2e/olm:v1");
    assert_eq!(container["imagePullPolicy"], "Never");
    assert_eq!(container["command"][0], "/usr/local/bin/catalog");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "--namespace",
            "olm",
            "--writeStatusName",
            "",
            "--interval",
            "10s",
            "--opmImage",
            "initializer-e2e/olm:v1",
            "--util-image",
            "initializer-e2e/olm:v1"
        ]
    );
}

#[test]
fn the_catalog_service_serves_the_address_the_catalog_source_names() {
    let docs: Vec<serde_json::Value> = catalog_yaml("initializer-e2e/olm:v1")
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let service = &docs[1];
    assert_eq!(
        format!(
            "{}.{}.svc:{}",
            service["metadata"]["name"].as_str().unwrap(),
            service["metadata"]["namespace"].as_str().unwrap(),
            service["spec"]["ports"][0]["port"].as_u64().unwrap()
        ),
        catalog_service_address()
    );
    let pod = &docs[0]["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["args"][3], "50051");
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["subPath"],
        "index.yaml"
    );
    assert!(
        subscription_yaml(CatalogSource::Address(&catalog_service_address()))
            .contains("address: initializer-catalog.olm.svc:50051")
    );
}

#[test]
fn the_next_csv_changes_only_the_version_and_replaces_the_committed_one() {
    let next: serde_json::Value =
        serde_saphyr::from_str(&bump_csv(CSV, "0.1.0", "0.2.0").unwrap()).unwrap();
    assert_eq!(next["metadata"]["name"], "initializer-operator.v0.2.0");
    assert_eq!(next["spec"]["version"], "0.2.0");
    assert_eq!(next["spec"]["replaces"], "initializer-operator.v0.1.0");
    assert_eq!(
        next["metadata"]["annotations"]["containerImage"],
        "ghcr.io/initializer-dev/initializer-operator:0.2.0"
    );
    let mut back: serde_json::Value = next.clone();
    back["spec"].as_object_mut().unwrap().remove("replaces");
    let back = serde_saphyr::to_string(&back)
        .unwrap()
        .replace("0.2.0", "0.1.0");
    assert_eq!(
        serde_saphyr::from_str::<serde_json::Value>(&back).unwrap(),
        serde_saphyr::from_str::<serde_json::Value>(CSV).unwrap()
    );
    assert!(bump_csv(CSV, "0.3.0", "0.4.0").is_err());
}

#[test]
fn the_channel_lists_each_bundle_with_what_it_replaces() {
    let entries = [
        Entry {
            bundle: "/a".into(),
            version: "0.1.0".into(),
            replaces: None,
        },
        Entry {
            bundle: "/b".into(),
            version: "0.2.0".into(),
            replaces: Some(csv_name("0.1.0")),
        },
    ];
    let channel: serde_json::Value = serde_saphyr::from_str(&channel_yaml(&entries)).unwrap();
    assert_eq!(channel["schema"], "olm.channel");
    assert_eq!(channel["name"], CHANNEL);
    assert_eq!(channel["entries"][0]["name"], "initializer-operator.v0.1.0");
    assert_eq!(
        channel["entries"][1]["replaces"],
        "initializer-operator.v0.1.0"
    );
}

/// The book shows exactly what the scenarios apply and run: the Subscription on the OLM install
/// page, the removal commands in the OLM section of the uninstall page.
#[test]
fn the_book_shows_exactly_what_the_scenarios_apply_and_run() {
    let install = paths::read_workspace_file("docs/src/install/olm.md").unwrap();
    assert!(
        install.contains(&format!("```yaml\n{SUBSCRIPTION_YAML}```")),
        "the Subscription YAML of docs/src/install/olm.md"
    );
    let uninstall = paths::read_workspace_file("docs/src/install/uninstall.md").unwrap();
    let section = uninstall
        .split("\n## OLM\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the OLM section of docs/src/install/uninstall.md");
    assert!(
        section.contains(&format!("```sh\n{REMOVAL_COMMANDS}```")),
        "the removal commands of docs/src/install/uninstall.md"
    );
    assert!(
        subscription_yaml(CatalogSource::Address("127.0.0.1:4242"))
            .contains("address: 127.0.0.1:4242 ")
    );
}

#[test]
fn a_catalog_image_replaces_the_address_and_nothing_else() {
    let image = "localhost:5000/initializer-dev/initializer-operator-catalog@sha256:ab";
    let yaml = subscription_yaml(CatalogSource::Image(image));
    assert!(yaml.contains(&format!("  image: {image}\n")), "{yaml}");
    assert!(!yaml.contains("address:"), "{yaml}");
    assert_eq!(
        yaml.lines().count(),
        SUBSCRIPTION_YAML.lines().count(),
        "only the address line changes"
    );
}
