//! The preset on the tutorial's objects: selection by kind, labels, annotation, namespace;
//! idempotent injection of every field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use initializer_crds::PresetConfig;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::serde::de::DeserializeOwned;
use kube_initializer::mutate;
use kube_initializer::testing::{ReviewBuilder, Tester, review};
use preset_initializer::initializer;
use sidecar_initializer::tutorial;

const PRESET: &str = "
inject:
  containers:
  - name: sidecar-nginx
    image: nginx:1.8.1
  initContainers:
  - name: init
    image: busybox
  volumes:
  - name: shared
    emptyDir: {}
  volumeMounts:
  - name: shared
    mountPath: /shared
  env:
  - name: MODE
    value: preset
  labels:
    preset: \"true\"
  annotations:
    example.com/preset: applied
";

fn preset(selector: &str) -> PresetConfig {
    serde_saphyr::from_str(&format!("{PRESET}{selector}")).unwrap()
}

fn tester(selector: &str) -> Tester {
    Tester::new(initializer().fixed_config(preset(selector)))
}

/// What `tester` makes of the object under review (it must patch it).
async fn patched_by<K: DeserializeOwned>(tester: &Tester, review: &ReviewBuilder) -> K {
    tester.call(review).await.unwrap().patched().unwrap()
}

/// Whether `tester` answers the review with a patch.
async fn patches(tester: &Tester, review: &ReviewBuilder) -> bool {
    tester.call(review).await.unwrap().patch().is_some()
}

fn container<'a>(containers: &'a [Container], name: &str) -> &'a Container {
    containers.iter().find(|c| c.name == name).unwrap()
}

#[tokio::test]
async fn everything_is_injected_into_the_nginx_deployment() {
    let answer = tester("")
        .call(&review(&tutorial::nginx_deployment()))
        .await
        .unwrap();
    let d: Deployment = answer.patched().unwrap();
    assert_eq!(d.metadata.labels.as_ref().unwrap()["preset"], "true");
    assert_eq!(
        d.metadata.annotations.as_ref().unwrap()["example.com/preset"],
        "applied"
    );
    assert!(mutate::is_initialized_by(&d.metadata, "preset"));
    let template = d.spec.template;
    assert_eq!(
        template.metadata.as_ref().unwrap().labels.as_ref().unwrap()["preset"],
        "true"
    );
    let spec = template.spec.unwrap();
    let nginx = container(&spec.containers, "nginx");
    assert_eq!(
        nginx.volume_mounts.as_ref().unwrap()[0].mount_path,
        "/shared"
    );
    assert_eq!(
        nginx.env.as_ref().unwrap()[0].value.as_deref(),
        Some("preset")
    );
    let sidecar = container(&spec.containers, "sidecar-nginx");
    assert!(
        sidecar.volume_mounts.is_none() && sidecar.env.is_none(),
        "injected containers are left as given"
    );
    assert_eq!(spec.init_containers.unwrap()[0].name, "init");
    assert_eq!(spec.volumes.unwrap()[0].name, "shared");
}

#[tokio::test]
async fn reinvocation_on_the_injected_object_changes_nothing() {
    let tester = tester("");
    let d: Deployment = patched_by(&tester, &review(&tutorial::nginx_deployment())).await;
    let again = tester.call(&review(&d)).await.unwrap();
    assert!(again.patch().is_none(), "{:?}", again.patch());
    let p: Pod = patched_by(&tester, &review(&tutorial::nginx_pod())).await;
    assert!(!patches(&tester, &review(&p)).await);
}

#[tokio::test]
async fn existing_values_are_left_as_they_are() {
    let mut d = tutorial::nginx_deployment();
    mutate::set_label(&mut d.metadata, "preset", "mine");
    let patched: Deployment = patched_by(&tester(""), &review(&d)).await;
    assert_eq!(patched.metadata.labels.unwrap()["preset"], "mine");
}

/// A pod's author who names a container like the injected one does not opt out: the preset's
/// container takes its place, and the pod is marked as changed (so the missed count sees it).
#[tokio::test]
async fn a_container_named_like_the_injected_one_is_replaced() {
    let mut pod = tutorial::nginx_pod();
    let own = Container {
        name: "sidecar-nginx".into(),
        image: Some("registry.example/not-the-sidecar:1".into()),
        command: Some(vec!["sleep".into(), "infinity".into()]),
        ..Container::default()
    };
    pod.spec.as_mut().unwrap().containers.push(own);
    let review_answer = tester("").call(&review(&pod)).await.unwrap();
    let patched: Pod = review_answer.patched().unwrap();
    let containers = &patched.spec.unwrap().containers;
    let sidecar: Vec<_> = containers
        .iter()
        .filter(|c| c.name == "sidecar-nginx")
        .collect();
    assert_eq!(sidecar.len(), 1, "{containers:?}");
    assert_eq!(sidecar[0].image.as_deref(), Some("nginx:1.8.1"));
    assert_eq!(sidecar[0].command, None, "nothing of the namesake is kept");
    assert!(
        mutate::is_initialized_by(&patched.metadata, "preset"),
        "marked: {:?}",
        patched.metadata.annotations
    );
}

#[tokio::test]
async fn kinds_narrow_the_selection() {
    let tester = tester("selector:\n  kinds: [Deployment]\n");
    assert!(patches(&tester, &review(&tutorial::nginx_deployment())).await);
    assert!(!patches(&tester, &review(&tutorial::nginx_pod())).await);
}

#[tokio::test]
async fn the_label_selector_narrows_the_selection() {
    let tester = tester("selector:\n  labels:\n    matchLabels:\n      envoy: \"true\"\n");
    assert!(!patches(&tester, &review(&tutorial::nginx_deployment())).await);
    assert!(patches(&tester, &review(&tutorial::nginx_with_annotation())).await);
}

#[tokio::test]
async fn the_annotation_narrows_the_selection() {
    let tester = tester(&format!(
        "selector:\n  annotation: {}\n",
        tutorial::SIDECAR_ANNOTATION
    ));
    assert!(!patches(&tester, &review(&tutorial::nginx_deployment())).await);
    assert!(patches(&tester, &review(&tutorial::nginx_with_annotation())).await);
}

#[tokio::test]
async fn namespaces_narrow_the_selection() {
    let tester = tester("selector:\n  namespaces: [team-a]\n");
    let d = tutorial::nginx_deployment();
    assert!(!patches(&tester, &review(&d)).await);
    assert!(patches(&tester, &review(&d).namespace(Some("team-a"))).await);
}

#[tokio::test]
async fn the_config_the_operator_writes_round_trips() {
    let written = serde_saphyr::to_string(&preset("selector:\n  kinds: [Pod]\n")).unwrap();
    let read: PresetConfig = serde_saphyr::from_str(&written).unwrap();
    assert_eq!(read, preset("selector:\n  kinds: [Pod]\n"));
    let empty: PresetConfig = serde_saphyr::from_str("{}").unwrap();
    let tester = Tester::new(initializer().fixed_config(empty));
    assert!(!patches(&tester, &review(&tutorial::nginx_pod())).await);
}

#[tokio::test]
async fn a_template_without_metadata_gets_none_when_no_label_or_annotation_is_added() {
    let job: Job = serde_saphyr::from_str(
        "metadata: {name: j}\nspec: {template: {spec: {containers: [{name: task, image: busybox}]}}}\n",
    )
    .unwrap();
    let only_env: PresetConfig =
        serde_saphyr::from_str("inject:\n  env: [{name: MODE, value: preset}]\n").unwrap();
    let only_env = Tester::new(initializer().fixed_config(only_env));
    let patched: Job = patched_by(&only_env, &review(&job)).await;
    let template = patched.spec.unwrap().template;
    assert!(template.metadata.is_none(), "{:?}", template.metadata);
    assert_eq!(
        template.spec.unwrap().containers[0]
            .env
            .as_ref()
            .unwrap()
            .len(),
        1
    );
    // With labels to add, the missing metadata is made to hold them.
    let labelled: Job = patched_by(&tester(""), &review(&job)).await;
    let metadata = labelled.spec.unwrap().template.metadata.unwrap();
    assert_eq!(metadata.labels.unwrap()["preset"], "true");
}
