//! Idempotent helpers for the usual mutations. Each returns `true` when it changed something,
//! and does nothing when what it would add is already there, so a reinvoked handler never
//! duplicates a container, volume, mount or variable.
//!
//! [`PodSpecHolder`] gives one view of Pods and of every kind with a pod template, so one
//! handler serves `Pod`, `Deployment`, `StatefulSet`, `DaemonSet`, `ReplicaSet`, `Job` and
//! `CronJob` alike.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec, StatefulSet,
    StatefulSetSpec,
};
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, Pod, PodSpec, PodTemplate, PodTemplateSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Annotation listing, comma-separated, the initializers that changed an object, each as
/// `<name>/<generation>/t=<unix seconds>/<MAC>` (see
/// [`Tuning::mark_initialized`](crate::advanced::Tuning::mark_initialized)): the mark the
/// operator looks for after an outage.
pub const INITIALIZED_BY_ANNOTATION: &str = initializer_mark::ANNOTATION;

/// An object that carries a pod spec: a Pod itself or a workload with a pod template.
pub trait PodSpecHolder {
    /// The pod spec, if the object has one (a malformed or minimal object may not).
    fn pod_spec(&self) -> Option<&PodSpec>;
    /// The pod spec, mutable.
    fn pod_spec_mut(&mut self) -> Option<&mut PodSpec>;
    /// The metadata the pods will carry: the Pod's own, or the template's (created if absent
    /// while the template exists).
    fn pod_meta_mut(&mut self) -> Option<&mut ObjectMeta>;
    /// The metadata the pods will carry, if present.
    fn pod_meta(&self) -> Option<&ObjectMeta>;
}

impl PodSpecHolder for Pod {
    fn pod_spec(&self) -> Option<&PodSpec> {
        self.spec.as_ref()
    }
    fn pod_spec_mut(&mut self) -> Option<&mut PodSpec> {
        self.spec.as_mut()
    }
    fn pod_meta_mut(&mut self) -> Option<&mut ObjectMeta> {
        Some(&mut self.metadata)
    }
    fn pod_meta(&self) -> Option<&ObjectMeta> {
        Some(&self.metadata)
    }
}

impl PodSpecHolder for PodTemplateSpec {
    fn pod_spec(&self) -> Option<&PodSpec> {
        self.spec.as_ref()
    }
    fn pod_spec_mut(&mut self) -> Option<&mut PodSpec> {
        self.spec.as_mut()
    }
    fn pod_meta_mut(&mut self) -> Option<&mut ObjectMeta> {
        Some(self.metadata.get_or_insert_with(ObjectMeta::default))
    }
    fn pod_meta(&self) -> Option<&ObjectMeta> {
        self.metadata.as_ref()
    }
}

impl PodSpecHolder for Option<PodTemplateSpec> {
    fn pod_spec(&self) -> Option<&PodSpec> {
        self.as_ref().and_then(PodSpecHolder::pod_spec)
    }
    fn pod_spec_mut(&mut self) -> Option<&mut PodSpec> {
        self.as_mut().and_then(PodSpecHolder::pod_spec_mut)
    }
    fn pod_meta_mut(&mut self) -> Option<&mut ObjectMeta> {
        self.as_mut().and_then(PodSpecHolder::pod_meta_mut)
    }
    fn pod_meta(&self) -> Option<&ObjectMeta> {
        self.as_ref().and_then(PodSpecHolder::pod_meta)
    }
}

/// A workload's `spec`: k8s-openapi types it `Option<_>` up to Kubernetes 1.36 and, for most
/// workload kinds, a plain value from 1.37. The SDK builds with whichever version the
/// initializer's binary chooses, so it reads the field through this either way.
trait WorkloadSpec<T> {
    fn present(&self) -> Option<&T>;
    fn present_mut(&mut self) -> Option<&mut T>;
}

macro_rules! workload_spec {
    ($($spec:ty),*) => {$(
        impl WorkloadSpec<$spec> for $spec {
            fn present(&self) -> Option<&$spec> {
                Some(self)
            }
            fn present_mut(&mut self) -> Option<&mut $spec> {
                Some(self)
            }
        }

        impl WorkloadSpec<$spec> for Option<$spec> {
            fn present(&self) -> Option<&$spec> {
                self.as_ref()
            }
            fn present_mut(&mut self) -> Option<&mut $spec> {
                self.as_mut()
            }
        }
    )*};
}

workload_spec!(
    DeploymentSpec,
    StatefulSetSpec,
    DaemonSetSpec,
    ReplicaSetSpec,
    JobSpec,
    CronJobSpec
);

macro_rules! template_holder {
    ($($kind:ty),*) => {$(
        impl PodSpecHolder for $kind {
            fn pod_spec(&self) -> Option<&PodSpec> {
                self.spec.present().and_then(|s| s.template.pod_spec())
            }
            fn pod_spec_mut(&mut self) -> Option<&mut PodSpec> {
                self.spec.present_mut().and_then(|s| s.template.pod_spec_mut())
            }
            fn pod_meta_mut(&mut self) -> Option<&mut ObjectMeta> {
                self.spec.present_mut().and_then(|s| s.template.pod_meta_mut())
            }
            fn pod_meta(&self) -> Option<&ObjectMeta> {
                self.spec.present().and_then(|s| s.template.pod_meta())
            }
        }
    )*};
}

template_holder!(Deployment, StatefulSet, DaemonSet, ReplicaSet, Job);

impl PodSpecHolder for CronJob {
    fn pod_spec(&self) -> Option<&PodSpec> {
        self.spec
            .present()
            .and_then(|s| s.job_template.spec.present())
            .and_then(|s| s.template.pod_spec())
    }
    fn pod_spec_mut(&mut self) -> Option<&mut PodSpec> {
        self.spec
            .present_mut()
            .and_then(|s| s.job_template.spec.present_mut())
            .and_then(|s| s.template.pod_spec_mut())
    }
    fn pod_meta_mut(&mut self) -> Option<&mut ObjectMeta> {
        self.spec
            .present_mut()
            .and_then(|s| s.job_template.spec.present_mut())
            .and_then(|s| s.template.pod_meta_mut())
    }
    fn pod_meta(&self) -> Option<&ObjectMeta> {
        self.spec
            .present()
            .and_then(|s| s.job_template.spec.present())
            .and_then(|s| s.template.pod_meta())
    }
}

impl PodSpecHolder for PodTemplate {
    fn pod_spec(&self) -> Option<&PodSpec> {
        self.template.as_ref().and_then(|t| t.pod_spec())
    }
    fn pod_spec_mut(&mut self) -> Option<&mut PodSpec> {
        self.template.as_mut().and_then(|t| t.pod_spec_mut())
    }
    fn pod_meta_mut(&mut self) -> Option<&mut ObjectMeta> {
        self.template.as_mut().and_then(|t| t.pod_meta_mut())
    }
    fn pod_meta(&self) -> Option<&ObjectMeta> {
        self.template.as_ref().and_then(|t| t.pod_meta())
    }
}

/// Whether `present` already has what `wanted` says: every field `wanted` sets, with its value
/// (a field `wanted` leaves out may hold anything, such as what the API server defaults or a
/// LimitRange adds), lists element by element and of the same length, everything else equal.
pub fn covers(present: &serde_json::Value, wanted: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (present, wanted) {
        (Value::Object(present), Value::Object(wanted)) => wanted
            .iter()
            .all(|(field, value)| present.get(field).is_some_and(|p| covers(p, value))),
        (Value::Array(present), Value::Array(wanted)) => {
            present.len() == wanted.len() && present.iter().zip(wanted).all(|(p, w)| covers(p, w))
        }
        _ => present == wanted,
    }
}

/// Makes `item` the element of `list` named like it: appended when there is none, and put in
/// the place of each one that does not [`covers`] it. An element of that name left as it is
/// already has every field `item` sets.
fn put_named<T: Clone + serde::Serialize>(
    list: &mut Vec<T>,
    item: &T,
    name: impl Fn(&T) -> &str,
) -> bool {
    let wanted = serde_json::to_value(item).unwrap_or_default();
    let mut found = false;
    let mut changed = false;
    for present in list.iter_mut().filter(|p| name(p) == name(item)) {
        found = true;
        if !covers(
            &serde_json::to_value(&*present).unwrap_or_default(),
            &wanted,
        ) {
            *present = item.clone();
            changed = true;
        }
    }
    if !found {
        list.push(item.clone());
    }
    changed || !found
}

/// Make `container` the container of its name: appended when there is none, replaced whole
/// when the one there differs in a field `container` sets ([`covers`]). The object's author
/// writes the names, so a container of that name is no proof that this one is there; use
/// [`add_container`] where the object's own container should win.
pub fn put_container(spec: &mut PodSpec, container: &Container) -> bool {
    put_named(&mut spec.containers, container, |c| &c.name)
}

/// [`put_container`] for the init containers.
pub fn put_init_container(spec: &mut PodSpec, container: &Container) -> bool {
    put_named(
        spec.init_containers.get_or_insert_with(Vec::new),
        container,
        |c| &c.name,
    )
}

/// [`put_container`] for the volumes: `volume` is the volume of its name.
pub fn put_volume(spec: &mut PodSpec, volume: &Volume) -> bool {
    put_named(spec.volumes.get_or_insert_with(Vec::new), volume, |v| {
        &v.name
    })
}

/// Append `container` unless a container with its name exists.
pub fn add_container(spec: &mut PodSpec, container: &Container) -> bool {
    if spec.containers.iter().any(|c| c.name == container.name) {
        return false;
    }
    spec.containers.push(container.clone());
    true
}

/// Append `container` to the init containers unless one with its name exists.
pub fn add_init_container(spec: &mut PodSpec, container: &Container) -> bool {
    let inits = spec.init_containers.get_or_insert_with(Vec::new);
    if inits.iter().any(|c| c.name == container.name) {
        return false;
    }
    inits.push(container.clone());
    true
}

/// Add `volume` unless a volume with its name exists.
pub fn add_volume(spec: &mut PodSpec, volume: &Volume) -> bool {
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    if volumes.iter().any(|v| v.name == volume.name) {
        return false;
    }
    volumes.push(volume.clone());
    true
}

/// Add `mount` to one container unless it already mounts something at that path.
pub fn add_volume_mount(container: &mut Container, mount: &VolumeMount) -> bool {
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    if mounts.iter().any(|m| m.mount_path == mount.mount_path) {
        return false;
    }
    mounts.push(mount.clone());
    true
}

/// Add `mount` to every container (not init containers) that lacks that mount path.
pub fn add_volume_mount_to_all(spec: &mut PodSpec, mount: &VolumeMount) -> bool {
    let mut changed = false;
    for container in &mut spec.containers {
        changed |= add_volume_mount(container, mount);
    }
    changed
}

/// Add `var` to one container unless a variable with its name is already set there.
pub fn add_env_var(container: &mut Container, var: &EnvVar) -> bool {
    let env = container.env.get_or_insert_with(Vec::new);
    if env.iter().any(|e| e.name == var.name) {
        return false;
    }
    env.push(var.clone());
    true
}

/// Set `var` in one container, replacing a variable of the same name.
pub fn set_env_var(container: &mut Container, var: &EnvVar) -> bool {
    let env = container.env.get_or_insert_with(Vec::new);
    match env.iter_mut().find(|e| e.name == var.name) {
        Some(existing) if existing == var => false,
        Some(existing) => {
            *existing = var.clone();
            true
        }
        None => {
            env.push(var.clone());
            true
        }
    }
}

/// Add `var` to every container (not init containers) that does not set it.
pub fn add_env_var_to_all(spec: &mut PodSpec, var: &EnvVar) -> bool {
    let mut changed = false;
    for container in &mut spec.containers {
        changed |= add_env_var(container, var);
    }
    changed
}

fn set_entry(
    map: &mut Option<BTreeMap<String, String>>,
    key: &str,
    value: &str,
    overwrite: bool,
) -> bool {
    let map = map.get_or_insert_with(BTreeMap::new);
    match map.get(key) {
        Some(existing) if existing == value || !overwrite => false,
        _ => {
            map.insert(key.to_owned(), value.to_owned());
            true
        }
    }
}

/// Set a label, replacing another value.
pub fn set_label(meta: &mut ObjectMeta, key: &str, value: &str) -> bool {
    set_entry(&mut meta.labels, key, value, true)
}

/// Add a label unless the object already has that label (with any value).
pub fn add_label(meta: &mut ObjectMeta, key: &str, value: &str) -> bool {
    set_entry(&mut meta.labels, key, value, false)
}

/// Set an annotation, replacing another value.
pub fn set_annotation(meta: &mut ObjectMeta, key: &str, value: &str) -> bool {
    set_entry(&mut meta.annotations, key, value, true)
}

/// Add an annotation unless the object already has it (with any value).
pub fn add_annotation(meta: &mut ObjectMeta, key: &str, value: &str) -> bool {
    set_entry(&mut meta.annotations, key, value, false)
}

/// The initializer named by one entry of [`INITIALIZED_BY_ANNOTATION`] (`name`,
/// `name/generation`, or either signed: `…/t=<time>/<MAC>`).
fn entry_name(entry: &str) -> &str {
    initializer_mark::entry_name(entry)
}

/// True when [`INITIALIZED_BY_ANNOTATION`] has an entry for `initializer` (any generation).
/// Only the name is looked at: whether the initializer made the entry is for the holder of its
/// key to check (`initializer_mark::verify`), as the operator does.
pub fn is_initialized_by(meta: &ObjectMeta, initializer: &str) -> bool {
    let name = entry_name(initializer);
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(INITIALIZED_BY_ANNOTATION))
        .is_some_and(|v| v.split(',').any(|e| entry_name(e) == name))
}

/// Records `mark` (an entry: `name`, `name/generation`, or either signed) in
/// [`INITIALIZED_BY_ANNOTATION`]: appended when the initializer has no entry yet, replacing its
/// entry when it differs (another generation, or an entry the object's author wrote).
pub fn mark_initialized(meta: &mut ObjectMeta, mark: &str) -> bool {
    let mark = mark.trim();
    let name = entry_name(mark);
    if name.is_empty() {
        return false;
    }
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    let existing = annotations
        .get(INITIALIZED_BY_ANNOTATION)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if existing.iter().any(|e| e == mark) {
        return false;
    }
    let mut entries: Vec<String> = existing;
    match entries.iter_mut().find(|e| entry_name(e) == name) {
        Some(entry) => *entry = mark.to_owned(),
        None => entries.push(mark.to_owned()),
    }
    annotations.insert(INITIALIZED_BY_ANNOTATION.to_owned(), entries.join(","));
    true
}

/// True when any container (not init container) declares `port` as a container port.
pub fn exposes_port(spec: &PodSpec, port: i32) -> bool {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .any(|p| p.container_port == port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, SecretVolumeSource};

    fn nginx_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "nginx", "labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.8.1",
                "ports": [{"containerPort": 80}]}]}
        }))
        .unwrap()
    }

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("nginx:1.8.1".into()),
            ..Container::default()
        }
    }

    #[test]
    fn add_container_appends_once_by_name() {
        let mut pod = nginx_pod();
        let spec = pod.pod_spec_mut().unwrap();
        assert!(add_container(spec, &container("sidecar-nginx")));
        assert!(!add_container(spec, &container("sidecar-nginx")));
        assert!(!add_container(spec, &container("nginx")));
        let names: Vec<_> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["nginx", "sidecar-nginx"]);
    }

    #[test]
    fn covers_is_every_wanted_field_with_its_value() {
        let wanted = serde_json::json!({"name": "proxy", "image": "proxy:1",
            "ports": [{"containerPort": 80}], "resources": {"requests": {"cpu": "10m"}}});
        let defaulted = serde_json::json!({"name": "proxy", "image": "proxy:1",
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "10m"}, "limits": {"cpu": "1"}},
            "terminationMessagePath": "/dev/termination-log"});
        assert!(
            covers(&defaulted, &wanted),
            "extra fields are not differences"
        );
        for (field, value) in [
            ("image", serde_json::json!("mine:1")),
            (
                "ports",
                serde_json::json!([{"containerPort": 80}, {"containerPort": 81}]),
            ),
            ("ports", serde_json::json!([{"containerPort": 8080}])),
            ("resources", serde_json::json!({"limits": {"cpu": "1"}})),
        ] {
            let mut changed = defaulted.clone();
            changed[field] = value;
            assert!(!covers(&changed, &wanted), "{field}: {changed}");
        }
        let mut missing = defaulted.clone();
        missing.as_object_mut().unwrap().remove("image");
        assert!(!covers(&missing, &wanted));
    }

    #[test]
    fn put_container_replaces_a_namesake_that_lacks_what_it_sets() {
        let mut pod = nginx_pod();
        let spec = pod.pod_spec_mut().unwrap();
        let sidecar = Container {
            command: Some(vec!["proxy".into()]),
            ..container("sidecar")
        };
        let own = Container {
            image: Some("mine:1".into()),
            command: Some(vec!["sleep".into(), "inf".into()]),
            ..container("sidecar")
        };
        spec.containers.push(own);
        assert!(put_container(spec, &sidecar), "the namesake is replaced");
        assert_eq!(spec.containers[1], sidecar);
        assert!(!put_container(spec, &sidecar), "then left alone");
        // What the API server defaults, or a LimitRange adds, stays.
        spec.containers[1].termination_message_path = Some("/dev/termination-log".into());
        assert!(!put_container(spec, &sidecar));
        assert_eq!(spec.containers.len(), 2);
        assert!(put_init_container(spec, &sidecar), "appended where absent");
        assert!(!put_init_container(spec, &sidecar));
        let volume = Volume {
            name: "shared".into(),
            empty_dir: Some(Default::default()),
            ..Volume::default()
        };
        let own_volume = Volume {
            name: "shared".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some("mine".into()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        };
        spec.volumes = Some(vec![own_volume]);
        assert!(put_volume(spec, &volume));
        assert_eq!(spec.volumes.as_deref(), Some(&[volume.clone()][..]));
        assert!(!put_volume(spec, &volume));
    }

    #[test]
    fn add_init_container_appends_once_by_name() {
        let mut pod = nginx_pod();
        let spec = pod.pod_spec_mut().unwrap();
        assert!(add_init_container(spec, &container("init")));
        assert!(!add_init_container(spec, &container("init")));
        assert_eq!(spec.init_containers.as_ref().unwrap().len(), 1);
        assert_eq!(spec.containers.len(), 1);
    }

    #[test]
    fn add_volume_adds_once_by_name() {
        let mut pod = nginx_pod();
        let spec = pod.pod_spec_mut().unwrap();
        let volume = Volume {
            name: "certs".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some("test-certs".into()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        };
        assert!(add_volume(spec, &volume));
        assert!(!add_volume(spec, &volume));
        assert_eq!(spec.volumes.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn volume_mounts_are_added_to_containers_lacking_the_path() {
        let mut pod = nginx_pod();
        let spec = pod.pod_spec_mut().unwrap();
        add_container(spec, &container("second"));
        let mount = VolumeMount {
            name: "certs".into(),
            mount_path: "/etc/certs".into(),
            ..VolumeMount::default()
        };
        add_volume_mount(&mut spec.containers[1], &mount);
        assert!(add_volume_mount_to_all(spec, &mount));
        assert!(!add_volume_mount_to_all(spec, &mount));
        for c in &spec.containers {
            assert_eq!(c.volume_mounts.as_ref().unwrap().len(), 1, "{}", c.name);
        }
    }

    #[test]
    fn env_vars_are_added_once_and_set_replaces() {
        let mut c = container("app");
        let var = |v: &str| EnvVar {
            name: "MODE".into(),
            value: Some(v.into()),
            ..EnvVar::default()
        };
        assert!(add_env_var(&mut c, &var("a")));
        assert!(!add_env_var(&mut c, &var("b")));
        assert_eq!(c.env.as_ref().unwrap()[0].value.as_deref(), Some("a"));
        assert!(set_env_var(&mut c, &var("b")));
        assert!(!set_env_var(&mut c, &var("b")));
        assert_eq!(c.env.as_ref().unwrap().len(), 1);
        assert_eq!(c.env.as_ref().unwrap()[0].value.as_deref(), Some("b"));
    }

    #[test]
    fn env_vars_reach_every_container() {
        let mut pod = nginx_pod();
        let spec = pod.pod_spec_mut().unwrap();
        add_container(spec, &container("second"));
        let var = EnvVar {
            name: "A".into(),
            value: Some("1".into()),
            ..EnvVar::default()
        };
        assert!(add_env_var_to_all(spec, &var));
        assert!(!add_env_var_to_all(spec, &var));
        assert!(
            spec.containers
                .iter()
                .all(|c| c.env.as_ref().unwrap().len() == 1)
        );
    }

    #[test]
    fn labels_and_annotations_set_or_add() {
        let mut meta = ObjectMeta::default();
        assert!(add_label(&mut meta, "app", "x"));
        assert!(!add_label(&mut meta, "app", "y"));
        assert!(set_label(&mut meta, "app", "y"));
        assert!(!set_label(&mut meta, "app", "y"));
        assert_eq!(meta.labels.as_ref().unwrap()["app"], "y");
        assert!(add_annotation(&mut meta, "a", "1"));
        assert!(!add_annotation(&mut meta, "a", "2"));
        assert!(set_annotation(&mut meta, "a", "2"));
        assert_eq!(meta.annotations.as_ref().unwrap()["a"], "2");
    }

    #[test]
    fn marking_initialized_appends_each_name_once() {
        let mut meta = ObjectMeta::default();
        assert!(!is_initialized_by(&meta, "sidecar"));
        assert!(mark_initialized(&mut meta, "sidecar"));
        assert!(!mark_initialized(&mut meta, "sidecar"));
        assert!(mark_initialized(&mut meta, "proxy"));
        assert!(is_initialized_by(&meta, "sidecar"));
        assert!(is_initialized_by(&meta, "proxy"));
        assert_eq!(
            meta.annotations.unwrap()[INITIALIZED_BY_ANNOTATION],
            "sidecar,proxy"
        );
    }

    #[test]
    fn the_mark_carries_the_generation_and_a_new_one_replaces_the_old() {
        let mut meta = ObjectMeta::default();
        assert!(mark_initialized(&mut meta, "sidecar/3"));
        assert!(!mark_initialized(&mut meta, "sidecar/3"));
        assert!(mark_initialized(&mut meta, "proxy/1"));
        assert!(mark_initialized(&mut meta, "sidecar/4"));
        assert!(is_initialized_by(&meta, "sidecar"));
        assert!(is_initialized_by(&meta, "sidecar/9"));
        assert!(!is_initialized_by(&meta, "side"));
        assert_eq!(
            meta.annotations.unwrap()[INITIALIZED_BY_ANNOTATION],
            "sidecar/4,proxy/1"
        );
    }

    #[test]
    fn deployments_and_cronjobs_expose_their_template() {
        let mut deployment: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "nginx"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "nginx"}]}}}
        }))
        .unwrap();
        assert!(add_container(
            deployment.pod_spec_mut().unwrap(),
            &container("s")
        ));
        assert!(set_label(deployment.pod_meta_mut().unwrap(), "a", "b"));
        assert_eq!(deployment.pod_spec().unwrap().containers.len(), 2);
        let tmpl = deployment.spec.template;
        assert_eq!(tmpl.metadata.unwrap().labels.unwrap()["a"], "b");

        let mut cron: CronJob = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template":
                {"spec": {"containers": [{"name": "job"}]}}}}}
        }))
        .unwrap();
        assert!(add_container(cron.pod_spec_mut().unwrap(), &container("s")));
        assert_eq!(cron.pod_spec().unwrap().containers.len(), 2);
    }

    #[test]
    fn objects_without_a_pod_spec_offer_none() {
        let mut deployment = Deployment::default();
        assert!(deployment.pod_spec_mut().is_none());
        let mut pod = Pod::default();
        assert!(pod.pod_spec_mut().is_none());
    }

    #[test]
    fn exposes_port_looks_at_container_ports() {
        let mut pod = nginx_pod();
        assert!(exposes_port(pod.pod_spec().unwrap(), 80));
        assert!(!exposes_port(pod.pod_spec().unwrap(), 8080));
        pod.spec.as_mut().unwrap().containers[0].ports = Some(vec![ContainerPort {
            container_port: 8080,
            ..ContainerPort::default()
        }]);
        assert!(!exposes_port(pod.pod_spec().unwrap(), 80));
    }
}
