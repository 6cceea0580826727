//! The tutorial's scenarios: the nginx Deployments with and without the annotation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::serde::de::DeserializeOwned;
use kube_initializer::mutate::PodSpecHolder;
use kube_initializer::testing::{ReviewBuilder, Tester, review};
use kube_initializer::{AnnotationGate, ServeArgs};
use sidecar_initializer::tutorial;
use sidecar_initializer::{SidecarConfig, initializer};

fn config() -> SidecarConfig {
    serde_saphyr::from_str(tutorial::SIDECAR_CONFIG).unwrap()
}

fn containers(d: &Deployment) -> Vec<String> {
    let spec = d.pod_spec().unwrap();
    spec.containers.iter().map(|c| c.name.clone()).collect()
}

/// What `tester` makes of the object under review (it must patch it).
async fn patched_by<K: DeserializeOwned>(tester: &Tester, review: &ReviewBuilder) -> K {
    tester.call(review).await.unwrap().patched().unwrap()
}

/// Whether `tester` answers the review with a patch.
async fn patches(tester: &Tester, review: &ReviewBuilder) -> bool {
    tester.call(review).await.unwrap().patch().is_some()
}

fn gated() -> Tester {
    Tester::new(
        initializer()
            .fixed_config(config())
            .annotation_gate(Some(AnnotationGate::new(
                tutorial::SIDECAR_ANNOTATION,
                true,
            ))),
    )
}

#[tokio::test]
async fn the_tutorial_config_injects_sidecar_nginx_into_the_nginx_deployment() {
    let tester = Tester::new(initializer().fixed_config(config()));
    let answer = tester
        .call(&review(&tutorial::nginx_deployment()))
        .await
        .unwrap();
    let patched: Deployment = answer.patched().unwrap();
    assert_eq!(containers(&patched), ["nginx", "sidecar-nginx"]);
    let sidecar = &patched.spec.template.spec.unwrap().containers[1];
    assert_eq!(sidecar.image.as_deref(), Some("nginx:1.8.1"));
    assert_eq!(sidecar.image_pull_policy.as_deref(), Some("IfNotPresent"));
}

#[tokio::test]
async fn injection_is_idempotent_under_reinvocation() {
    let tester = Tester::new(initializer().fixed_config(config()));
    let first: Deployment = patched_by(&tester, &review(&tutorial::nginx_deployment())).await;
    let again = tester.call(&review(&first)).await.unwrap();
    assert!(again.allowed());
    assert!(again.patch().is_none());
}

#[tokio::test]
async fn pods_get_the_sidecar_too() {
    let tester = Tester::new(initializer().fixed_config(config()));
    let patched: Pod = patched_by(&tester, &review(&tutorial::nginx_pod())).await;
    assert_eq!(patched.spec.unwrap().containers.len(), 2);
}

#[tokio::test]
async fn with_require_annotation_the_plain_nginx_deployment_is_left_alone() {
    let answer = gated()
        .call(&review(&tutorial::nginx_deployment()))
        .await
        .unwrap();
    assert!(answer.allowed());
    assert!(answer.patch().is_none());
}

#[tokio::test]
async fn with_require_annotation_the_annotated_deployment_gets_the_sidecar() {
    let patched: Deployment =
        patched_by(&gated(), &review(&tutorial::nginx_with_annotation())).await;
    assert_eq!(containers(&patched), ["nginx", "sidecar-nginx"]);
}

#[tokio::test]
async fn volumes_in_the_config_are_added_once() {
    let yaml = format!(
        "{}volumes:\n- name: shared\n  emptyDir: {{}}\n",
        tutorial::SIDECAR_CONFIG
    );
    let cfg: SidecarConfig = serde_saphyr::from_str(&yaml).unwrap();
    let tester = Tester::new(initializer().fixed_config(cfg));
    let patched: Deployment = patched_by(&tester, &review(&tutorial::nginx_deployment())).await;
    let volumes = patched.spec.template.clone().spec.unwrap().volumes.unwrap();
    assert_eq!(volumes.len(), 1);
    assert!(!patches(&tester, &review(&patched)).await);
}

#[tokio::test]
async fn other_kinds_are_admitted_unchanged() {
    let tester = Tester::new(initializer().fixed_config(config()));
    let secret: Secret =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "s"}})).unwrap();
    let answer = tester.call(&review(&secret).dry_run(true)).await.unwrap();
    assert!(answer.allowed());
    assert!(answer.patch().is_none());
}

#[test]
fn the_tutorial_flags_parse_into_a_required_annotation_gate() {
    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let args = Args::parse_from([
        "sidecar-initializer",
        "--annotation=initializer.kubernetes.io/sidecar",
        "--require-annotation",
    ]);
    assert_eq!(
        args.serve.annotation_gate(),
        Some(AnnotationGate::new(
            "initializer.kubernetes.io/sidecar",
            true
        ))
    );
    let args = Args::parse_from([
        "sidecar-initializer",
        "--annotation",
        "a",
        "--require-annotation=false",
    ]);
    assert_eq!(
        args.serve.annotation_gate(),
        Some(AnnotationGate::new("a", false))
    );
    let args = Args::parse_from(["sidecar-initializer"]);
    assert_eq!(args.serve.annotation_gate(), None);
}

#[test]
fn the_same_binary_runs_as_a_controller_by_flag() {
    use kube_initializer::advanced::Mode;
    use sidecar_initializer::tutorial::{SIDECAR_PENDING_NAME, SIDECAR_RULES};
    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let args = Args::parse_from(["sidecar-initializer"]);
    assert_eq!(args.serve.mode, Mode::Webhook);
    let args = Args::parse_from([
        "sidecar-initializer",
        "--mode",
        "controller",
        "--pending-name",
        SIDECAR_PENDING_NAME,
        "--rules",
        SIDECAR_RULES,
        "--annotation=initializer.kubernetes.io/sidecar",
        "--require-annotation",
        "--namespace-selector",
        r#"{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system"]}]}"#,
    ]);
    assert_eq!(args.serve.mode, Mode::Controller);
    assert_eq!(
        args.serve.pending_name.as_deref(),
        Some(SIDECAR_PENDING_NAME)
    );
    let rules = args.serve.rules.unwrap().0;
    assert_eq!(rules[0].resources, ["deployments"]);
    assert!(rules[0].matches("apps", "v1", "deployments"));
    assert!(args.serve.namespace_selector.is_some());
    assert!(
        Args::try_parse_from(["sidecar-initializer", "--rules", "deployments"]).is_err(),
        "rules must be JSON"
    );
}
