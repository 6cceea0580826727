//! The tutorial's sidecar initializer: the containers (and volumes) of its configuration are
//! injected into every Deployment (and Pod, and other kind with a pod template) it sees.
//!
//! The configuration is the `config` value of the tutorial's `sidecar-initializer` ConfigMap:
//!
//! ```yaml
//! containers:
//! - name: sidecar-nginx
//!   image: nginx:1.8.1
//!   imagePullPolicy: IfNotPresent
//! ```
//!
//! With `--annotation initializer.kubernetes.io/sidecar --require-annotation` only objects
//! carrying the annotation are touched (the SDK applies the gate before the handler runs).

pub mod tutorial;

use k8s_openapi::api::core::v1::{Container, Volume};
use kube_initializer::mutate::{self, PodSpecHolder};
use kube_initializer::{Denial, Initialize, Initializer, Review};
use serde::Deserialize;

/// Default name of this initializer.
pub const NAME: &str = "sidecar";

/// `config.yaml`: what to inject.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SidecarConfig {
    /// Containers added to every pod (by name, once).
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Volumes added to every pod (by name, once).
    #[serde(default)]
    pub volumes: Vec<Volume>,
}

/// The handler, the same for Pods and every kind with a pod template.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sidecar;

impl<K: PodSpecHolder> Initialize<K, SidecarConfig> for Sidecar {
    fn initialize(&self, obj: &mut K, review: &Review<SidecarConfig>) -> Result<(), Denial> {
        let Some(spec) = obj.pod_spec_mut() else {
            return Ok(());
        };
        let config = review.config();
        for container in &config.containers {
            mutate::add_container(spec, container);
        }
        for volume in &config.volumes {
            mutate::add_volume(spec, volume);
        }
        Ok(())
    }
}

/// The initializer: the handler for every kind with pods, configuration from `config.yaml`.
pub fn initializer() -> Initializer<SidecarConfig> {
    Initializer::with_config(NAME).handle_pod_kinds(Sidecar)
}
