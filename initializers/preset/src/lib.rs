//! The built-in preset initializer: PodPreset without code. Its whole behaviour comes from
//! `config.yaml`, an [`initializer_crds::PresetConfig`] that the operator writes from an
//! `Initializer`'s `spec.preset`:
//!
//! ```yaml
//! selector:
//!   kinds: [Deployment]            # empty: every kind with pods
//!   labels: {matchLabels: {app: nginx}}
//!   annotation: example.com/preset # only objects carrying it (value not "false")
//!   namespaces: [default]          # empty: every namespace
//! inject:
//!   containers: [{name: sidecar, image: busybox}]
//!   initContainers: []
//!   volumes: [{name: shared, emptyDir: {}}]
//!   volumeMounts: [{name: shared, mountPath: /shared}]
//!   env: [{name: MODE, value: preset}]
//!   labels: {preset: "true"}
//!   annotations: {}
//! ```
//!
//! Containers, init containers and volumes are the preset's: one of the same name that lacks a
//! field the preset sets, or holds another value there, is replaced by the preset's (the
//! object's author writes the names, so a name is no proof that the preset's item is there),
//! and one that has them all is left as it is (with what the API server defaulted). Env vars,
//! mounts, labels and annotations are defaults: one already there (by name, or mount path)
//! stays as it is. Mounts and env go to the object's own containers, not to injected ones.
//! Applying twice changes nothing the second time.

use std::collections::BTreeSet;

use initializer_crds::PresetConfig;
use initializer_crds::preset::{Injection, PresetSelector};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube_initializer::advanced::Tuning;
use kube_initializer::gate::{AnnotationGate, name_matches, selector_matches};
use kube_initializer::mutate::{self, PodSpecHolder};
use kube_initializer::{Denial, Initialize, Initializer, Review};

/// Default name of this initializer.
pub const NAME: &str = "preset";

/// Whether the selector picks an object of `kind` with `meta` in `namespace`.
pub fn selects(
    selector: &PresetSelector,
    kind: &str,
    meta: &ObjectMeta,
    namespace: Option<&str>,
) -> bool {
    if !selector.kinds.is_empty() && !selector.kinds.iter().any(|k| k.eq_ignore_ascii_case(kind)) {
        return false;
    }
    if let Some(labels) = &selector.labels
        && !selector_matches(labels, meta.labels.as_ref())
    {
        return false;
    }
    if let Some(annotation) = selector.annotation.as_deref().filter(|a| !a.is_empty())
        && !AnnotationGate::new(annotation, true).admits(meta.annotations.as_ref())
    {
        return false;
    }
    if !selector.namespaces.is_empty() {
        let ns = namespace.or(meta.namespace.as_deref()).unwrap_or_default();
        if !selector.namespaces.iter().any(|p| name_matches(p, ns)) {
            return false;
        }
    }
    true
}

/// Merge the injection into a pod spec.
pub fn inject_spec(inject: &Injection, spec: &mut PodSpec) {
    let injected: BTreeSet<&str> = inject
        .containers
        .iter()
        .chain(&inject.init_containers)
        .map(|c| c.name.as_str())
        .collect();
    let own = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
        .filter(|c| !injected.contains(c.name.as_str()));
    for container in own {
        for mount in &inject.volume_mounts {
            mutate::add_volume_mount(container, mount);
        }
        for var in &inject.env {
            mutate::add_env_var(container, var);
        }
    }
    // Of items sharing a name, the first is the preset's: putting the second would replace it.
    for container in first_of_each_name(&inject.containers, |c| &c.name) {
        mutate::put_container(spec, container);
    }
    for container in first_of_each_name(&inject.init_containers, |c| &c.name) {
        mutate::put_init_container(spec, container);
    }
    for volume in first_of_each_name(&inject.volumes, |v| &v.name) {
        mutate::put_volume(spec, volume);
    }
}

/// The items, but for any whose name an earlier one has.
fn first_of_each_name<T>(items: &[T], name: impl Fn(&T) -> &str) -> Vec<&T> {
    let mut seen = BTreeSet::new();
    items
        .iter()
        .filter(|item| seen.insert(name(item)))
        .collect()
}

/// Merge the labels and annotations into one set of metadata.
pub fn inject_meta(inject: &Injection, meta: &mut ObjectMeta) {
    for (k, v) in &inject.labels {
        mutate::add_label(meta, k, v);
    }
    for (k, v) in &inject.annotations {
        mutate::add_annotation(meta, k, v);
    }
}

/// The handler, the same for Pods and every kind with a pod template.
#[derive(Clone, Copy, Debug, Default)]
pub struct Preset;

impl<K> Initialize<K, PresetConfig> for Preset
where
    K: Resource<DynamicType = ()> + PodSpecHolder,
{
    fn initialize(&self, obj: &mut K, review: &Review<PresetConfig>) -> Result<(), Denial> {
        let config = review.config();
        if !selects(
            &config.selector,
            &K::kind(&()),
            obj.meta(),
            review.namespace(),
        ) {
            return Ok(());
        }
        inject_meta(&config.inject, obj.meta_mut());
        // `pod_meta_mut` creates a template's missing metadata: only ask for it with something
        // to add, or an object left as it was would come back with `metadata: {}` (a change,
        // which the SDK then marks as initialized, and which the compiled policy does not make).
        let has_meta = !config.inject.labels.is_empty() || !config.inject.annotations.is_empty();
        if has_meta && let Some(meta) = obj.pod_meta_mut() {
            inject_meta(&config.inject, meta);
        }
        if let Some(spec) = obj.pod_spec_mut() {
            inject_spec(&config.inject, spec);
        }
        Ok(())
    }
}

/// The initializer: the preset from `config.yaml`, objects it changes marked as initialized.
pub fn initializer() -> Initializer<PresetConfig> {
    Initializer::with_config(NAME)
        .handle_pod_kinds(Preset)
        .mark_initialized(true)
}
