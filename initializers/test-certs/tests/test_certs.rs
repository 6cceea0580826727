//! Pods and Deployments in test namespaces (by name and by label) and elsewhere.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube_initializer::testing::{Tester, review};
use sidecar_initializer::tutorial;
use test_certs_initializer::{TestCerts, TestCertsConfig, initializer};

fn mounts(c: &Container) -> Vec<String> {
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.clone())
        .collect()
}

async fn patched_pod(tester: &Tester, namespace: &str) -> Option<Pod> {
    let answer = tester
        .call(&review(&tutorial::nginx_pod()).namespace(Some(namespace)))
        .await
        .unwrap();
    assert!(answer.allowed());
    answer.patch().map(|_| answer.patched().unwrap())
}

#[tokio::test]
async fn pods_in_a_test_namespace_get_the_certificate_volume_mounted() {
    let tester = Tester::new(initializer(TestCerts::by_name()));
    let pod = patched_pod(&tester, "test").await.unwrap();
    let spec = pod.spec.unwrap();
    let volume = &spec.volumes.unwrap()[0];
    assert_eq!(volume.name, "test-certs");
    assert_eq!(
        volume.secret.as_ref().unwrap().secret_name.as_deref(),
        Some("test-certs")
    );
    assert_eq!(mounts(&spec.containers[0]), ["/etc/test-certs"]);
    assert_eq!(
        spec.containers[0].volume_mounts.as_ref().unwrap()[0].read_only,
        Some(true)
    );
}

#[tokio::test]
async fn namespaces_named_with_test_prefix_or_suffix_count() {
    let tester = Tester::new(initializer(TestCerts::by_name()));
    assert!(patched_pod(&tester, "test-payments").await.is_some());
    assert!(patched_pod(&tester, "payments-test").await.is_some());
}

#[tokio::test]
async fn pods_outside_test_namespaces_are_left_alone() {
    let tester = Tester::new(initializer(TestCerts::by_name()));
    assert!(patched_pod(&tester, "default").await.is_none());
    assert!(patched_pod(&tester, "contest").await.is_none());
}

#[tokio::test]
async fn namespaces_labelled_as_test_count_when_labels_are_known() {
    let labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::from([
        (
            "qa".into(),
            BTreeMap::from([("environment".into(), "test".into())]),
        ),
        (
            "prod".into(),
            BTreeMap::from([("environment".into(), "production".into())]),
        ),
    ]);
    let tester = Tester::new(initializer(TestCerts::with_labels(Arc::new(labels))));
    assert!(patched_pod(&tester, "qa").await.is_some());
    assert!(patched_pod(&tester, "prod").await.is_none());
    assert!(patched_pod(&tester, "unknown").await.is_none());
    let by_name_only = Tester::new(initializer(TestCerts::by_name()));
    assert!(patched_pod(&by_name_only, "qa").await.is_none());
}

#[tokio::test]
async fn the_volume_is_mounted_once_under_reinvocation() {
    let tester = Tester::new(initializer(TestCerts::by_name()));
    let pod = patched_pod(&tester, "test").await.unwrap();
    let again = tester
        .call(&review(&pod).namespace(Some("test")))
        .await
        .unwrap();
    assert!(again.patch().is_none());
}

#[tokio::test]
async fn deployments_in_test_namespaces_get_it_in_their_template() {
    let tester = Tester::new(initializer(TestCerts::by_name()));
    let answer = tester
        .call(&review(&tutorial::nginx_deployment()).namespace(Some("test")))
        .await
        .unwrap();
    let patched: Deployment = answer.patched().unwrap();
    let spec = patched.spec.template.spec.unwrap();
    assert_eq!(mounts(&spec.containers[0]), ["/etc/test-certs"]);
}

#[tokio::test]
async fn the_namespaces_and_secret_come_from_the_config() {
    let config: TestCertsConfig = serde_saphyr::from_str(
        "namespaces: [staging]\nsecretName: staging-ca\nmountPath: /certs\n",
    )
    .unwrap();
    let tester = Tester::new(initializer(TestCerts::by_name()).fixed_config(config));
    assert!(patched_pod(&tester, "test").await.is_none());
    let pod = patched_pod(&tester, "staging").await.unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(
        spec.volumes.unwrap()[0]
            .secret
            .as_ref()
            .unwrap()
            .secret_name
            .as_deref(),
        Some("staging-ca")
    );
    assert_eq!(mounts(&spec.containers[0]), ["/certs"]);
}
