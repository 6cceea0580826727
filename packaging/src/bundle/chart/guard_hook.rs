//! The chart's hook that puts the guard on Initializers in force before Helm creates (or
//! upgrades) the CRD: a Job that runs `initializer-operator guard` in the operator's image, under
//! a ServiceAccount of its own that may only read and apply the guard's two objects. It runs
//! before an upgrade too: `helm upgrade --install` upgrades a release whose first install failed,
//! and that path must not create the CRD before the guard either; with the guard there, the Job
//! ends at once.
//!
//! The guard's objects are not hooks themselves: Helm deletes and creates a hook object again
//! each time the hook runs, and the operator holds back every Initializer created before a new
//! binding was in force. The Job applies the guard (a binding already there stays, with its
//! UID) and completes only once a new binding is in force; Helm waits for a hook Job to complete
//! before it creates the templates, the CRD among them. Argo CD runs Helm's pre-install and
//! pre-upgrade hooks as PreSync hooks, before every sync; the Job then finds the guard there and
//! ends at once.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::holes::Hole;
use super::missing;
use super::objects::{TemplateObject, with_labels};
use crate::error::Error;
use crate::manifest;

/// The name of the hook's Job, ServiceAccount, ClusterRole and binding.
pub const GUARD_HOOK_NAME: &str = "initializer-operator-guard-hook";
/// The operator's subcommand the Job runs.
pub const GUARD_SUBCOMMAND: &str = "guard";
/// When Helm runs the hook.
pub const HOOK_EVENTS: &str = "pre-install,pre-upgrade";
/// The template file the hook's objects go to.
pub const GUARD_HOOK_FILE: &str = "guard-hook.yaml";
/// How long the Job may run, its pod's start (a first pull of the image on a cold node, and the
/// backoff between tries) included: Helm's own default `--timeout`, which it waits for the hook
/// at most anyway.
const ACTIVE_DEADLINE_SECONDS: i64 = 300;
/// Tries of the Job's pod before the install fails.
const BACKOFF_LIMIT: i32 = 3;

/// The hook's objects, with their holes open: the ServiceAccount, ClusterRole and binding (hook
/// weight -10), then the Job (weight 0) in the operator's image, with the operator pod's
/// security contexts and scheduling.
pub fn guard_hook_objects(operator: &Deployment) -> Result<Vec<TemplateObject>, Error> {
    let objects = [
        (with_labels(&service_account())?, -10),
        (with_labels(&cluster_role())?, -10),
        (with_labels(&cluster_role_binding())?, -10),
        (job_with_holes(operator)?, 0),
    ];
    objects
        .into_iter()
        .map(|(mut object, weight)| {
            annotate_as_hook(&mut object, weight)?;
            Ok(TemplateObject {
                file: GUARD_HOOK_FILE.to_string(),
                object,
                condition: None,
            })
        })
        .collect()
}

fn metadata(namespaced: bool) -> ObjectMeta {
    ObjectMeta {
        name: Some(GUARD_HOOK_NAME.to_string()),
        namespace: namespaced.then(|| Hole::Namespace.token()),
        ..ObjectMeta::default()
    }
}

fn service_account() -> ServiceAccount {
    ServiceAccount {
        metadata: metadata(true),
        ..ServiceAccount::default()
    }
}

/// What `initializer-operator guard` calls: a get and a server-side apply of the guard's policy
/// and binding, and nothing else. An apply that creates is authorized as a create that names
/// its object, so every verb is held to the guard's name.
fn cluster_role() -> ClusterRole {
    ClusterRole {
        metadata: metadata(false),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["admissionregistration.k8s.io".to_string()]),
            resources: Some(vec![
                "validatingadmissionpolicies".to_string(),
                "validatingadmissionpolicybindings".to_string(),
            ]),
            resource_names: Some(vec![manifest::GUARD_NAME.to_string()]),
            verbs: ["get", "patch", "create"].map(String::from).to_vec(),
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    }
}

fn cluster_role_binding() -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: metadata(false),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_string()),
            kind: "ClusterRole".to_string(),
            name: GUARD_HOOK_NAME.to_string(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name: GUARD_HOOK_NAME.to_string(),
            namespace: Some(Hole::Namespace.token()),
            ..Subject::default()
        }]),
    }
}

/// The Job, from the operator's pod: its image, security contexts and labels (the operator's
/// pods are excluded from interception, and so is this one).
fn job(operator: &Deployment) -> Result<Job, Error> {
    let template = &operator.spec.template;
    let pod = template
        .spec
        .as_ref()
        .ok_or_else(|| missing("a pod spec"))?;
    let container = pod
        .containers
        .iter()
        .find(|c| c.name == manifest::OPERATOR_NAME)
        .ok_or_else(|| missing("the operator container"))?;
    let labels = template
        .metadata
        .as_ref()
        .and_then(|meta| meta.labels.clone())
        .map(|mut labels| {
            labels.insert(
                manifest::COMPONENT_LABEL.to_string(),
                GUARD_SUBCOMMAND.to_string(),
            );
            labels
        });
    Ok(Job {
        metadata: metadata(true),
        spec: Some(JobSpec {
            backoff_limit: Some(BACKOFF_LIMIT),
            active_deadline_seconds: Some(ACTIVE_DEADLINE_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels,
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(GUARD_HOOK_NAME.to_string()),
                    restart_policy: Some("Never".to_string()),
                    security_context: pod.security_context.clone(),
                    containers: vec![Container {
                        name: GUARD_SUBCOMMAND.to_string(),
                        image: container.image.clone(),
                        args: Some(vec![GUARD_SUBCOMMAND.to_string()]),
                        security_context: container.security_context.clone(),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    })
}

/// The Job as JSON with the chart's labels and the operator's image, pull policy, resources
/// and scheduling holes open.
fn job_with_holes(operator: &Deployment) -> Result<Value, Error> {
    let mut object = with_labels(&job(operator)?)?;
    let pod = object
        .pointer_mut("/spec/template/spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| missing("the Job's pod spec"))?;
    pod.insert(Hole::PodScheduling.token(), Value::String(String::new()));
    let container = object
        .pointer_mut("/spec/template/spec/containers/0")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| missing("the Job's container"))?;
    container.insert("image".to_string(), Value::String(Hole::Image.token()));
    for (field, hole) in [
        ("imagePullPolicy", Hole::PullPolicy),
        // A namespace whose quota wants requests runs the Job as it runs the operator.
        ("resources", Hole::Resources),
    ] {
        container.insert(field.to_string(), Value::String(hole.token()));
    }
    Ok(object)
}

/// Marks `object` as a pre-install and pre-upgrade hook of `weight`, deleted before the hook
/// runs again and once it has succeeded; the account and its rights also once it has failed
/// (the Job stays, for its pod's log).
fn annotate_as_hook(object: &mut Value, weight: i32) -> Result<(), Error> {
    let is_job = object["kind"] == "Job";
    let metadata = object
        .pointer_mut("/metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| missing("a hook object's metadata"))?;
    let delete_policy = if is_job {
        "before-hook-creation,hook-succeeded"
    } else {
        "before-hook-creation,hook-succeeded,hook-failed"
    };
    let annotations = serde_json::json!({
        "helm.sh/hook": HOOK_EVENTS,
        "helm.sh/hook-weight": weight.to_string(),
        "helm.sh/hook-delete-policy": delete_policy,
    });
    metadata.insert("annotations".to_string(), annotations);
    Ok(())
}
