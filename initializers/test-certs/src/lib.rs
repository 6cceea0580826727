//! Mount a volume with test certificates into every pod in a test namespace (the second idea
//! in "How initializers work").
//!
//! A namespace is a test namespace when its name matches one of the configured patterns
//! (`test`, `test-*`, `*-test` by default) or, when namespace labels are known (the binary's
//! `--watch-namespaces`), its labels match the configured selector (`environment: test` by
//! default). The certificates come from a Secret (`test-certs`), mounted read-only at
//! `/etc/test-certs` in every container and init container.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, SecretVolumeSource, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::runtime::reflector::{ObjectRef, Store};
use kube_initializer::gate::{name_matches, selector_matches};
use kube_initializer::mutate::{self, PodSpecHolder};
use kube_initializer::{Denial, Initialize, Initializer, Review};
use serde::Deserialize;

/// Default name of this initializer.
pub const NAME: &str = "test-certs";

/// `config.yaml`; every field has a default, an absent file means all defaults.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct TestCertsConfig {
    /// Namespace name patterns: exact, `prefix*` or `*suffix`.
    pub namespaces: Vec<String>,
    /// Label selector on the namespace's labels (used when labels are known).
    pub namespace_selector: Option<LabelSelector>,
    /// The Secret holding the test certificates.
    pub secret_name: String,
    /// Name of the injected volume.
    pub volume_name: String,
    /// Where the certificates are mounted.
    pub mount_path: String,
}

impl Default for TestCertsConfig {
    fn default() -> Self {
        Self {
            namespaces: vec!["test".into(), "test-*".into(), "*-test".into()],
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("environment".into(), "test".into())])),
                match_expressions: None,
            }),
            secret_name: "test-certs".into(),
            volume_name: "test-certs".into(),
            mount_path: "/etc/test-certs".into(),
        }
    }
}

impl TestCertsConfig {
    /// Whether `namespace` (with these labels, when known) is a test namespace.
    pub fn is_test_namespace(
        &self,
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        if self.namespaces.iter().any(|p| name_matches(p, namespace)) {
            return true;
        }
        match (&self.namespace_selector, labels) {
            (Some(selector), Some(labels)) => selector_matches(selector, Some(labels)),
            _ => false,
        }
    }
}

/// Where namespace labels come from.
pub trait NamespaceLabels: Send + Sync {
    /// The labels of `namespace`, `None` when unknown.
    fn labels(&self, namespace: &str) -> Option<BTreeMap<String, String>>;
}

impl NamespaceLabels for Store<Namespace> {
    fn labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.get(&ObjectRef::new(namespace))
            .map(|ns| ns.metadata.labels.clone().unwrap_or_default())
    }
}

impl NamespaceLabels for BTreeMap<String, BTreeMap<String, String>> {
    fn labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.get(namespace).cloned()
    }
}

/// The handler, the same for Pods and every kind with a pod template.
#[derive(Clone, Default)]
pub struct TestCerts {
    namespaces: Option<Arc<dyn NamespaceLabels>>,
}

impl std::fmt::Debug for TestCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCerts")
            .field("knows_namespace_labels", &self.namespaces.is_some())
            .finish()
    }
}

impl TestCerts {
    /// A handler that matches namespaces by name only.
    pub fn by_name() -> Self {
        Self::default()
    }

    /// A handler that also matches namespaces by their labels.
    pub fn with_labels(labels: Arc<dyn NamespaceLabels>) -> Self {
        Self {
            namespaces: Some(labels),
        }
    }
}

impl<K: PodSpecHolder> Initialize<K, TestCertsConfig> for TestCerts {
    fn initialize(&self, obj: &mut K, review: &Review<TestCertsConfig>) -> Result<(), Denial> {
        let config = review.config();
        let Some(namespace) = review.namespace() else {
            return Ok(());
        };
        let labels = self.namespaces.as_ref().and_then(|n| n.labels(namespace));
        if !config.is_test_namespace(namespace, labels.as_ref()) {
            return Ok(());
        }
        let Some(spec) = obj.pod_spec_mut() else {
            return Ok(());
        };
        let volume = Volume {
            name: config.volume_name.clone(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(config.secret_name.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        };
        let mount = VolumeMount {
            name: config.volume_name.clone(),
            mount_path: config.mount_path.clone(),
            read_only: Some(true),
            ..VolumeMount::default()
        };
        mutate::add_volume(spec, &volume);
        mutate::add_volume_mount_to_all(spec, &mount);
        for init in spec.init_containers.iter_mut().flatten() {
            mutate::add_volume_mount(init, &mount);
        }
        Ok(())
    }
}

/// The initializer with `handler`; defaults apply while `config.yaml` is absent.
pub fn initializer(handler: TestCerts) -> Initializer<TestCertsConfig> {
    Initializer::with_config(NAME)
        .fallback_config(TestCertsConfig::default())
        .handle_pod_kinds(handler)
}
