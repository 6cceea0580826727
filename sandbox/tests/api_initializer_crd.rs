//! The project's own `Initializer` CRD (the committed YAML in `crds/manifests/`) on the sandbox:
//! registration, defaulting, CEL rules and printer columns as the operator and kubectl see them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api_support;

use api_support::{api_code, raw, start};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

async fn install(client: &kube::Client) -> Api<DynamicObject> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crds/manifests/initializer.dev_initializers.yaml"
    );
    let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd).unwrap(),
    )
    .await
    .unwrap();
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("initializer.dev", "v1alpha1", "Initializer"),
            "initializers",
        ),
    )
}

fn initializer(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "initializer.dev/v1alpha1", "kind": "Initializer", "metadata": {"name": name}, "spec": spec})).unwrap()
}

/// An Initializer with an image and one rule, as the CEL rules want it.
fn valid(name: &str) -> DynamicObject {
    initializer(
        name,
        json!({"image": "example/init:1", "rules": [pods_rule()]}),
    )
}

fn pods_rule() -> Value {
    json!({"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]})
}

#[tokio::test]
async fn a_valid_initializer_is_stored_with_schema_defaults() {
    let sb = start().await;
    let inits = install(&sb.client()).await;
    let created = inits
        .create(&PostParams::default(), &valid("ok"))
        .await
        .unwrap();
    assert!(created.data["spec"]["rules"].is_array());
    assert!(created.metadata.namespace.is_none());
}

#[tokio::test]
async fn cel_rules_refuse_an_initializer_without_image_or_preset() {
    let sb = start().await;
    let inits = install(&sb.client()).await;
    let err = inits
        .create(
            &PostParams::default(),
            &initializer("bad", json!({"rules": [pods_rule()]})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), (422, "Invalid".into()));
    if let kube::Error::Api(s) = &err {
        assert!(
            s.message.contains("spec.image or spec.preset is required"),
            "{}",
            s.message
        );
    }
}

#[tokio::test]
async fn cel_rules_refuse_intercepting_protected_resources() {
    let sb = start().await;
    let inits = install(&sb.client()).await;
    let rule = json!({"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"], "resources": ["leases"]});
    let err = inits
        .create(
            &PostParams::default(),
            &initializer(
                "leases",
                json!({"image": "example/init:1", "rules": [rule]}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err).0, 422);
    if let kube::Error::Api(s) = &err {
        assert!(s.message.contains("must not intercept"), "{}", s.message);
    }
}

#[tokio::test]
async fn the_table_shows_the_initializer_printer_columns() {
    let sb = start().await;
    let client = sb.client();
    let inits = install(&client).await;
    inits
        .create(&PostParams::default(), &valid("ok"))
        .await
        .unwrap();
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let (code, table) = raw(
        &client,
        "GET",
        "/apis/initializer.dev/v1alpha1/initializers",
        Some(accept),
        None,
        None,
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{table}");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        cols,
        vec![
            "Name",
            "Phase",
            "Registered",
            "Ready",
            "Engine",
            "Probe-ms",
            "Age"
        ]
    );
}
