//! The objects of the sidecar tutorial this crate implements (its ConfigMap, the `nginx`
//! Deployments with and without the gate annotation, and a pod as the ReplicaSet creates it),
//! written for `apps/v1` (which requires a `selector`). The tests of every initializer and the
//! load generator's default review use them.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;

/// The `config` value of the `sidecar-initializer` ConfigMap.
pub const SIDECAR_CONFIG: &str = "\
containers:
- name: sidecar-nginx
  image: nginx:1.8.1
  imagePullPolicy: IfNotPresent
";

/// The `nginx` Deployment without annotation.
pub const NGINX_DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  labels:
    app: nginx
  name: nginx
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
      name: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:1.8.1
        imagePullPolicy: IfNotPresent
        ports:
        - containerPort: 80
";

/// The `nginx-with-annotation` Deployment.
pub const NGINX_WITH_ANNOTATION: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  annotations:
    initializer.kubernetes.io/sidecar: \"true\"
  labels:
    app: nginx
    envoy: \"true\"
  name: nginx-with-annotation
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
        envoy: \"true\"
      name: nginx-with-annotation
    spec:
      containers:
      - name: nginx
        image: nginx:1.8.1
        imagePullPolicy: IfNotPresent
        ports:
        - containerPort: 80
";

/// The annotation the tutorial's sidecar initializer is gated on.
pub const SIDECAR_ANNOTATION: &str = "initializer.kubernetes.io/sidecar";

/// The initializer's name in the 1.7 walkthrough: what its `InitializerConfiguration` appends to
/// `metadata.initializers.pending`, and the controller mode's `--pending-name`.
pub const SIDECAR_PENDING_NAME: &str = "sidecar.initializer.kubernetes.io";

/// The walkthrough's `InitializerConfiguration` (Kubernetes 1.7–1.13): the sidecar initializer
/// for Deployments of every group and version.
pub const SIDECAR_INITIALIZER_CONFIGURATION: &str = "\
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: InitializerConfiguration
metadata:
  name: sidecar
initializers:
- name: sidecar.initializer.kubernetes.io
  rules:
  - apiGroups:
    - \"*\"
    apiVersions:
    - \"*\"
    resources:
    - deployments
";

/// The configuration's rules as the controller mode's `--rules` takes them.
pub const SIDECAR_RULES: &str =
    r#"[{"apiGroups":["*"],"apiVersions":["*"],"resources":["deployments"]}]"#;

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    // Compiled-in fixtures: a parse failure is a bug in this file, caught by its tests.
    serde_saphyr::from_str(yaml).unwrap_or_else(|e| unreachable!("tutorial fixture: {e}"))
}

/// The `nginx` Deployment.
pub fn nginx_deployment() -> Deployment {
    parse(NGINX_DEPLOYMENT)
}

/// The `nginx-with-annotation` Deployment.
pub fn nginx_with_annotation() -> Deployment {
    parse(NGINX_WITH_ANNOTATION)
}

/// A pod of the `nginx` Deployment, as its ReplicaSet creates it.
pub fn nginx_pod() -> Pod {
    let deployment = nginx_deployment();
    let template = deployment.spec.template;
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.name = None;
    metadata.generate_name = Some("nginx-f5f94b64-".into());
    metadata.namespace = Some("default".into());
    Pod {
        metadata,
        spec: template.spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tutorial_fixtures_parse() {
        assert_eq!(nginx_deployment().metadata.name.as_deref(), Some("nginx"));
        let annotated = nginx_with_annotation();
        assert_eq!(
            annotated.metadata.annotations.unwrap()[SIDECAR_ANNOTATION],
            "true"
        );
        assert_eq!(nginx_pod().spec.unwrap().containers[0].name, "nginx");
        let config: serde_json::Value = serde_saphyr::from_str(SIDECAR_CONFIG).unwrap();
        assert_eq!(config["containers"][0]["name"], "sidecar-nginx");
    }

    #[test]
    fn the_configuration_names_the_pending_name_and_the_rules() {
        let configuration: serde_json::Value =
            serde_saphyr::from_str(SIDECAR_INITIALIZER_CONFIGURATION).unwrap();
        let initializer = &configuration["initializers"][0];
        assert_eq!(initializer["name"], SIDECAR_PENDING_NAME);
        let rules: serde_json::Value = serde_saphyr::from_str(SIDECAR_RULES).unwrap();
        assert_eq!(initializer["rules"], rules);
    }
}
