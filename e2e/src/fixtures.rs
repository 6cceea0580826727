//! The objects the scenarios and the demo create, taken from the Kubernetes 1.7 sidecar-initializer
//! walkthrough (the nginx Deployment, the sidecar ConfigMap) where it has them.

use std::collections::BTreeMap;

use anyhow::Context;
use initializer_crds::{Initializer, images};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PodSpec, Secret};
use kube::api::ObjectMeta;
use serde_json::{Value, json};

/// The tutorial's annotation gate.
pub const SIDECAR_ANNOTATION: &str = "initializer.kubernetes.io/sidecar";

/// Name of the sidecar container the tutorial injects.
pub const SIDECAR_CONTAINER: &str = "sidecar-nginx";

/// The tutorial's `sidecar-initializer` ConfigMap content: the containers to inject.
pub const SIDECAR_CONFIG: &str = "containers:
- name: sidecar-nginx
  image: nginx:1.8.1
  imagePullPolicy: IfNotPresent
";

/// Health settings for a scenario; `None` keeps the defaults.
#[derive(Clone, Copy, Debug, Default)]
pub struct Health {
    /// `periodSeconds`.
    pub period_seconds: Option<i32>,
    /// `failureThreshold`.
    pub failure_threshold: Option<i32>,
    /// `successThreshold`.
    pub success_threshold: Option<i32>,
    /// `latencyBudgetMillis`.
    pub latency_budget_millis: Option<i32>,
}

impl Health {
    fn to_json(self) -> Option<Value> {
        let mut map = serde_json::Map::new();
        let mut put = |key: &str, value: Option<i32>| {
            if let Some(value) = value {
                map.insert(key.to_string(), json!(value));
            }
        };
        put("periodSeconds", self.period_seconds);
        put("failureThreshold", self.failure_threshold);
        put("successThreshold", self.success_threshold);
        put("latencyBudgetMillis", self.latency_budget_millis);
        (!map.is_empty()).then_some(Value::Object(map))
    }
}

/// An Initializer from its name and a JSON spec.
pub fn initializer(name: &str, spec: Value) -> anyhow::Result<Initializer> {
    serde_json::from_value(json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .with_context(|| format!("failed to build Initializer {name} from its spec"))
}

/// A namespace selector matching the scope's target label.
pub fn target_namespaces(target: &(String, String)) -> Value {
    json!({"selector": {"matchLabels": {target.0.clone(): target.1.clone()}}})
}

/// The tutorial's sidecar initializer as an Initializer: Deployments created in the target
/// namespaces get the `sidecar-nginx` container when they carry the annotation.
pub fn sidecar_initializer(
    name: &str,
    workload_namespace: &str,
    target: &(String, String),
    health: Health,
) -> anyhow::Result<Initializer> {
    let mut spec = json!({
        "image": images::image("sidecar-initializer"),
        "namespace": workload_namespace,
        "config": {"inline": SIDECAR_CONFIG},
        "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}],
        "namespaces": target_namespaces(target),
        "annotation": {"name": SIDECAR_ANNOTATION, "required": true},
    });
    if let (Some(health), Some(map)) = (health.to_json(), spec.as_object_mut()) {
        map.insert("health".to_string(), health);
    }
    initializer(name, spec)
}

/// The `spec.backend` that registers an Initializer the Kubernetes 1.7 way: an
/// `InitializerConfiguration`, with the initializer run as a controller.
pub const LEGACY_BACKEND: &str = "InitializerConfiguration";

/// `initializer` with `spec.backend` set to `backend`.
pub fn with_backend(initializer: &Initializer, backend: &str) -> anyhow::Result<Initializer> {
    let mut value =
        serde_json::to_value(initializer).context("failed to serialize the Initializer")?;
    value["spec"]["backend"] = json!(backend);
    let changed: Initializer =
        serde_json::from_value(value).context("failed to read the Initializer back")?;
    // Before the operator knew the field, the round trip dropped it: say so rather than test
    // the webhook backend by mistake.
    anyhow::ensure!(
        serde_json::to_value(&changed)
            .ok()
            .is_some_and(|v| v["spec"]["backend"] == json!(backend)),
        "the Initializer type has no spec.backend {backend}"
    );
    Ok(changed)
}

/// The tutorial's nginx Deployment, with the sidecar annotation when `annotated`.
pub fn nginx_deployment(name: &str, annotated: bool, replicas: i32) -> anyhow::Result<Deployment> {
    let mut deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": "nginx"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{
                    "name": "nginx",
                    "image": "nginx:1.8.1",
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 80}],
                }]},
            },
        },
    }))
    .context("failed to build the nginx Deployment")?;
    if annotated {
        deployment.metadata.annotations = Some(BTreeMap::from([(
            SIDECAR_ANNOTATION.to_string(),
            "true".to_string(),
        )]));
    }
    Ok(deployment)
}

/// The container names of a pod spec.
pub fn container_names(spec: Option<&PodSpec>) -> Vec<String> {
    spec.map(|spec| spec.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

/// The container names of a Deployment's pod template.
pub fn template_containers(deployment: &Deployment) -> Vec<String> {
    container_names(deployment.spec.template.spec.as_ref())
}

/// Whether the tutorial's sidecar was injected into a Deployment's pod template.
pub fn has_sidecar(deployment: &Deployment) -> bool {
    template_containers(deployment)
        .iter()
        .any(|name| name == SIDECAR_CONTAINER)
}

/// A Secret with one key and value.
pub fn secret(name: &str, key: &str, value: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_initializer_selects_the_target_namespaces_and_requires_the_annotation() {
        let target = (
            "e2e.initializer.dev/target".to_string(),
            "abcde".to_string(),
        );
        let init = sidecar_initializer("s", "s-ns", &target, Health::default()).unwrap();
        assert_eq!(init.spec.namespace.as_deref(), Some("s-ns"));
        let gate = init.spec.annotation.as_ref().unwrap();
        assert_eq!(gate.name, SIDECAR_ANNOTATION);
        assert!(gate.required);
        let selector = init.spec.namespaces.unwrap().selector.unwrap();
        assert_eq!(
            selector.match_labels.unwrap()["e2e.initializer.dev/target"],
            "abcde"
        );
        assert!(init.spec.health.is_none());
    }

    #[test]
    fn health_overrides_only_what_is_given() {
        let target = ("t".to_string(), "v".to_string());
        let health = Health {
            period_seconds: Some(5),
            ..Health::default()
        };
        let init = sidecar_initializer("s", "ns", &target, health).unwrap();
        let health = init.spec.health.unwrap();
        assert_eq!(health.period_seconds, 5);
        assert_eq!(
            health.failure_threshold,
            initializer_crds::DEFAULT_FAILURE_THRESHOLD
        );
    }

    #[test]
    fn the_legacy_backend_is_asked_for_in_the_spec() {
        let target = ("t".to_string(), "v".to_string());
        let init = sidecar_initializer("s", "ns", &target, Health::default()).unwrap();
        let legacy = with_backend(&init, LEGACY_BACKEND).unwrap();
        let spec = serde_json::to_value(&legacy.spec).unwrap();
        assert_eq!(spec["backend"], LEGACY_BACKEND);
        assert_eq!(
            spec["image"],
            serde_json::to_value(&init.spec).unwrap()["image"]
        );
    }

    #[test]
    fn the_legacy_example_is_the_books_and_asks_for_the_legacy_backend() {
        let example = include_str!("../../examples/sidecar-initializer-legacy.yaml");
        // The page shows the file itself, through mdBook's include: the include must be there, in
        // a YAML block, and name this very file.
        let page = include_str!("../../docs/src/guides/legacy.md");
        let include = "{{#include ../../../examples/sidecar-initializer-legacy.yaml}}";
        assert!(
            page.contains(&format!("```yaml\n{include}\n```")),
            "docs/src/guides/legacy.md does not include examples/sidecar-initializer-legacy.yaml"
        );
        let page_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/guides");
        let included = include
            .trim_start_matches("{{#include ")
            .trim_end_matches("}}");
        assert_eq!(
            std::fs::read_to_string(page_dir.join(included)).unwrap(),
            example,
            "the include of docs/src/guides/legacy.md is not examples/sidecar-initializer-legacy.yaml"
        );
        let initializer: Initializer = serde_saphyr::from_str(example).unwrap();
        let spec = serde_json::to_value(&initializer.spec).unwrap();
        assert_eq!(spec["backend"], LEGACY_BACKEND);
        assert_eq!(
            initializer.spec.annotation.as_ref().unwrap().name,
            SIDECAR_ANNOTATION
        );
        assert!(initializer.spec.config.is_some());
    }

    #[test]
    fn nginx_deployment_is_the_tutorials_and_carries_the_annotation_only_when_asked() {
        let plain = nginx_deployment("nginx", false, 1).unwrap();
        assert_eq!(template_containers(&plain), vec!["nginx"]);
        assert!(plain.metadata.annotations.is_none());
        assert!(!has_sidecar(&plain));
        let annotated = nginx_deployment("nginx", true, 1).unwrap();
        assert_eq!(
            annotated.metadata.annotations.unwrap()[SIDECAR_ANNOTATION],
            "true"
        );
    }
}
