//! Pods with and without port 80, with and without the annotation, on the tutorial's objects.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::serde::de::DeserializeOwned;
use kube_initializer::mutate::{self, PodSpecHolder};
use kube_initializer::testing::{ReviewBuilder, Tester, review};
use proxy_initializer::{DEFAULT_ANNOTATION, ProxyConfig, initializer};
use sidecar_initializer::tutorial;

fn tester() -> Tester {
    Tester::new(initializer().fixed_config(ProxyConfig::default()))
}

/// What `tester` makes of the object under review (it must patch it).
async fn patched_by<K: DeserializeOwned>(tester: &Tester, review: &ReviewBuilder) -> K {
    tester.call(review).await.unwrap().patched().unwrap()
}

/// Whether `tester` answers the review with a patch.
async fn patches(tester: &Tester, review: &ReviewBuilder) -> bool {
    tester.call(review).await.unwrap().patch().is_some()
}

fn names(pod: &Pod) -> Vec<String> {
    let spec = pod.pod_spec().unwrap();
    spec.containers.iter().map(|c| c.name.clone()).collect()
}

fn pod_on_port(port: i32) -> Pod {
    let mut pod = tutorial::nginx_pod();
    pod.spec.as_mut().unwrap().containers[0]
        .ports
        .as_mut()
        .unwrap()[0]
        .container_port = port;
    pod
}

#[tokio::test]
async fn the_nginx_pod_on_port_80_gets_the_proxy() {
    let patched: Pod = patched_by(&tester(), &review(&tutorial::nginx_pod())).await;
    assert_eq!(names(&patched), ["nginx", "proxy"]);
}

#[tokio::test]
async fn a_pod_without_port_80_or_annotation_is_left_alone() {
    let answer = tester().call(&review(&pod_on_port(8080))).await.unwrap();
    assert!(answer.allowed());
    assert!(answer.patch().is_none());
}

#[tokio::test]
async fn the_annotation_asks_for_the_proxy_without_port_80() {
    let mut pod = pod_on_port(8080);
    mutate::set_annotation(&mut pod.metadata, DEFAULT_ANNOTATION, "true");
    let patched: Pod = patched_by(&tester(), &review(&pod)).await;
    assert_eq!(names(&patched), ["nginx", "proxy"]);
}

#[tokio::test]
async fn the_annotation_set_to_false_refuses_the_proxy_even_on_port_80() {
    let mut pod = tutorial::nginx_pod();
    mutate::set_annotation(&mut pod.metadata, DEFAULT_ANNOTATION, "false");
    assert!(!patches(&tester(), &review(&pod)).await);
}

#[tokio::test]
async fn deployments_get_the_proxy_in_their_template_once() {
    let tester = tester();
    let patched: Deployment = patched_by(&tester, &review(&tutorial::nginx_deployment())).await;
    let containers = &patched.spec.template.spec.as_ref().unwrap().containers;
    assert_eq!(containers[1].name, "proxy");
    assert!(!patches(&tester, &review(&patched)).await);
}

#[tokio::test]
async fn the_proxy_container_comes_from_the_config() {
    let config: ProxyConfig =
        serde_saphyr::from_str("container:\n  name: my-proxy\n  image: haproxy:2\nport: 8080\n")
            .unwrap();
    let tester = Tester::new(initializer().fixed_config(config));
    let patched: Pod = patched_by(&tester, &review(&pod_on_port(8080))).await;
    assert_eq!(names(&patched), ["nginx", "my-proxy"]);
    assert!(!patches(&tester, &review(&tutorial::nginx_pod())).await);
}

#[tokio::test]
async fn without_a_config_file_the_defaults_apply() {
    let tester = Tester::new(initializer());
    let patched: Pod = patched_by(&tester, &review(&tutorial::nginx_pod())).await;
    assert_eq!(names(&patched), ["nginx", "proxy"]);
}
