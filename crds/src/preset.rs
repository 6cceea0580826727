//! Configuration of the built-in preset initializer: which objects to touch and what to inject.
//!
//! This is PodPreset without code. An `Initializer` carries it in `spec.preset`; the operator
//! writes it as `config.yaml` for `preset-initializer`, which reads it with the same type.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the preset initializer matches and what it injects.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PresetConfig {
    /// Which objects the preset applies to, beyond what the webhook rules already select.
    #[serde(default)]
    pub selector: PresetSelector,
    /// What is injected into every selected object's pod template (or pod).
    #[serde(default)]
    pub inject: Injection,
}

/// Narrows the objects a preset applies to. Every present field must match.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PresetSelector {
    /// Kinds to touch: `Pod` and the kinds with a pod template (`Deployment`, `StatefulSet`,
    /// `DaemonSet`, `ReplicaSet`, `Job`, `CronJob`). Empty means every kind with pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// Label selector on the object's own labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<LabelSelector>,
    /// Only objects carrying this annotation (any value other than `"false"`) are touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<String>,
    /// Only objects in these namespaces. Empty means every namespace the webhook sees.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

/// What to add. A container, init container or volume of the same name that lacks a field
/// set here, or holds another value there, is replaced by this one; one that has them all is
/// left as it is. An env var (by name), mount (by path), label or annotation already there is
/// left as it is. Applying twice changes nothing the second time.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Injection {
    /// Containers appended to the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Container>,
    /// Init containers appended to the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    /// Volumes added to the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// Volume mounts added to every existing (not injected) container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Environment variables added to every existing (not injected) container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Labels added to the object (and to its pod template).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to the object (and to its pod template).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}
