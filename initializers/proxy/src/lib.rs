//! Inject a proxy sidecar into pods that expose container port 80 or carry the proxy
//! annotation (the first idea in "How initializers work"). An annotation value of `"false"`
//! opts a pod out even when it exposes port 80.
//!
//! The annotation is read on the object and, for workloads, on its pod template.

use k8s_openapi::api::core::v1::{Container, ContainerPort};
use kube::Resource;
use kube_initializer::mutate::{self, PodSpecHolder};
use kube_initializer::{Denial, Initialize, Initializer, Review};
use serde::Deserialize;

/// Default name of this initializer.
pub const NAME: &str = "proxy";
/// Default annotation that asks for (or, with `"false"`, refuses) the proxy.
pub const DEFAULT_ANNOTATION: &str = "initializer.dev/proxy";

/// `config.yaml`; every field has a default, an absent file means all defaults.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ProxyConfig {
    /// The proxy container to inject.
    pub container: Container,
    /// Pods exposing this container port get the proxy.
    pub port: i32,
    /// Pods carrying this annotation (any value but `"false"`) get the proxy.
    pub annotation: String,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            container: Container {
                name: "proxy".into(),
                image: Some("envoyproxy/envoy:v1.31.0".into()),
                image_pull_policy: Some("IfNotPresent".into()),
                ports: Some(vec![ContainerPort {
                    name: Some("proxy".into()),
                    container_port: 15001,
                    ..ContainerPort::default()
                }]),
                ..Container::default()
            },
            port: 80,
            annotation: DEFAULT_ANNOTATION.into(),
        }
    }
}

/// What the annotation says: `Some(true)` asks for the proxy, `Some(false)` refuses it.
fn annotation_says(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    name: &str,
) -> Option<bool> {
    annotations
        .and_then(|a| a.get(name))
        .map(|v| v.trim() != "false")
}

/// Whether an object should get the proxy under `config`.
pub fn wants_proxy<K: Resource + PodSpecHolder>(obj: &K, config: &ProxyConfig) -> bool {
    let own = annotation_says(obj.meta().annotations.as_ref(), &config.annotation);
    let template = obj
        .pod_meta()
        .and_then(|m| annotation_says(m.annotations.as_ref(), &config.annotation));
    match own.or(template) {
        Some(decided) => decided,
        None => obj
            .pod_spec()
            .is_some_and(|s| mutate::exposes_port(s, config.port)),
    }
}

/// The handler, the same for Pods and every kind with a pod template.
#[derive(Clone, Copy, Debug, Default)]
pub struct Proxy;

impl<K: Resource + PodSpecHolder> Initialize<K, ProxyConfig> for Proxy {
    fn initialize(&self, obj: &mut K, review: &Review<ProxyConfig>) -> Result<(), Denial> {
        let config = review.config();
        if !wants_proxy(obj, config) {
            return Ok(());
        }
        if let Some(spec) = obj.pod_spec_mut() {
            mutate::add_container(spec, &config.container);
        }
        Ok(())
    }
}

/// The initializer: defaults apply while `config.yaml` is absent.
pub fn initializer() -> Initializer<ProxyConfig> {
    Initializer::with_config(NAME)
        .fallback_config(ProxyConfig::default())
        .handle_pod_kinds(Proxy)
}
