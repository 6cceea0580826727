//! The install plan's objects as the chart's templates hold them: JSON with the installer's
//! `managed-by` label replaced by the chart's labels and the holes of the operator's Deployment
//! and the monitoring objects opened, each with its template file and condition.

use serde::Serialize;
use serde_json::{Value, json};

use super::defaults::{LOG_LEVEL_ENV, PRESET_IMAGE_FLAG};
use super::guard_hook::guard_hook_objects;
use super::holes::Hole;
use super::rules::open_rule_parameters;
use super::{MANAGED_BY_LABEL, json_error, missing};
use crate::error::Error;
use crate::install::InstallPlan;
use crate::{manifest, monitoring};

/// One object of the chart with its holes open, and the template it goes to.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateObject {
    /// File below `templates/`.
    pub file: String,
    /// The object, with [`Hole::token`] strings where values go.
    pub object: Value,
    /// The template condition under which it is rendered, if any.
    pub condition: Option<String>,
}

/// The namespace the plan is made for: the [`Hole::Namespace`] token, so that every place the
/// plan puts the namespace becomes the hole.
pub fn namespace_token() -> String {
    Hole::Namespace.token()
}

/// The objects of `plan` (made for [`namespace_token`]) with their holes, by template file.
pub fn template_objects(plan: &InstallPlan) -> Result<Vec<TemplateObject>, Error> {
    let mut objects = Vec::new();
    let mut hooks = Vec::new();
    // The guard is applied by the chart's hook (`guard_hook.rs`), never as a template: Helm
    // creates kinds it does not order (ValidatingAdmissionPolicy) after the Deployment, so it
    // would race the operator's own apply of it.
    let mut push = |file: &str, object: Result<Value, Error>| -> Result<(), Error> {
        objects.push(TemplateObject {
            file: file.to_string(),
            object: object?,
            condition: None,
        });
        Ok(())
    };
    for crd in &plan.crds {
        push(CRD_FILE, kept_on_uninstall(with_labels(crd)?))?;
    }
    for account in &plan.service_accounts {
        push("serviceaccount.yaml", with_labels(account))?;
    }
    for role in &plan.cluster_roles {
        push("clusterrole.yaml", with_labels(role))?;
    }
    for binding in &plan.cluster_role_bindings {
        push("clusterrolebinding.yaml", with_labels(binding))?;
    }
    for role in &plan.roles {
        push("role.yaml", with_labels(role))?;
    }
    for binding in &plan.role_bindings {
        push("rolebinding.yaml", with_labels(binding))?;
    }
    for role in &plan.bundle_cluster_roles {
        let file = bundle_role_template(role.metadata.name.as_deref().unwrap_or_default());
        push(file, with_labels(role))?;
    }
    for deployment in &plan.deployments {
        let mut object = with_labels(deployment)?;
        if deployment.metadata.name.as_deref() == Some(manifest::OPERATOR_NAME) {
            open_deployment_holes(&mut object)?;
            hooks.extend(guard_hook_objects(deployment)?);
        }
        push("deployment.yaml", Ok(object))?;
    }
    for pdb in &plan.pod_disruption_budgets {
        push("poddisruptionbudget.yaml", with_labels(pdb))?;
    }
    for service in &plan.services {
        push("metrics-service.yaml", with_labels(service))?;
    }
    objects.extend(hooks);
    for object in &plan.monitoring {
        let kind = object["kind"].as_str().unwrap_or_default();
        let (file, value, labels_hole) = match kind {
            "ServiceMonitor" => (
                "servicemonitor.yaml",
                "serviceMonitor",
                Hole::ServiceMonitorLabels,
            ),
            "PrometheusRule" => ("prometheusrule.yaml", "prometheusRule", Hole::RuleLabels),
            other => {
                return Err(Error::ChartGenerate(format!(
                    "failed to template the bundle's {other}: the chart knows ServiceMonitor and PrometheusRule"
                )));
            }
        };
        let mut value_object = with_labels(object)?;
        if let Some(labels) = value_object
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
        {
            labels.insert(labels_hole.token(), json!(""));
        }
        match kind {
            "ServiceMonitor" => set(
                &mut value_object,
                "/spec/endpoints/0/interval",
                Value::String(Hole::ScrapeInterval.token()),
            )?,
            _ => open_rule_parameters(&mut value_object)?,
        }
        objects.push(TemplateObject {
            file: file.to_string(),
            object: value_object,
            condition: Some(format!(
                "and .Values.metrics.{value}.enabled (.Capabilities.APIVersions.Has \"{}/{kind}\")",
                monitoring::MONITORING_API_VERSION
            )),
        });
    }
    Ok(objects)
}

/// The CRD's template: a template, not a file of `crds/`, so that Helm creates it after the
/// guard's pre-install hook (it creates `crds/` before any hook) and upgrades it with the chart.
pub const CRD_FILE: &str = "crd.yaml";
/// The annotation that has Helm leave an object in place on `helm uninstall`.
pub const RESOURCE_POLICY_ANNOTATION: &str = "helm.sh/resource-policy";

/// `object` with Helm's `resource-policy: keep`: deleting the CRD would delete every Initializer
/// with it, so `helm uninstall` leaves it, as it left a CRD of `crds/`.
fn kept_on_uninstall(mut object: Value) -> Result<Value, Error> {
    let metadata = object
        .pointer_mut("/metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Error::ChartGenerate("failed to find the CRD's metadata".to_string()))?;
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(RESOURCE_POLICY_ANNOTATION.to_string(), json!("keep"));
    }
    Ok(object)
}

/// The object as JSON with the installer's `managed-by` label replaced by [`Hole::Labels`].
pub(super) fn with_labels(object: &impl Serialize) -> Result<Value, Error> {
    let mut value = serde_json::to_value(object).map_err(|err| json_error("an object", &err))?;
    let labels = value
        .pointer_mut("/metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Error::ChartGenerate("failed to find an object's metadata".to_string()))?
        .entry("labels")
        .or_insert_with(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.remove(MANAGED_BY_LABEL);
        labels.insert(Hole::Labels.token(), json!(""));
    }
    Ok(value)
}

/// Opens the holes of the operator's Deployment.
fn open_deployment_holes(deployment: &mut Value) -> Result<(), Error> {
    let token = |hole: Hole| Value::String(hole.token());
    set(deployment, "/spec/replicas", token(Hole::Replicas))?;
    let pod = deployment
        .pointer_mut("/spec/template/spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| missing("a pod spec"))?;
    pod.insert(Hole::PodScheduling.token(), json!(""));
    let container = pod
        .get_mut("containers")
        .and_then(Value::as_array_mut)
        .and_then(|containers| {
            containers
                .iter_mut()
                .find(|c| c.get("name").and_then(Value::as_str) == Some(manifest::OPERATOR_NAME))
        })
        .ok_or_else(|| missing("the operator container"))?;
    set(container, "/image", token(Hole::Image))?;
    set(container, "/imagePullPolicy", token(Hole::PullPolicy))?;
    set(container, "/resources", token(Hole::Resources))?;
    let args = container
        .get_mut("args")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| missing("args"))?;
    let at = args
        .iter()
        .position(|arg| arg.as_str() == Some(PRESET_IMAGE_FLAG))
        .ok_or_else(|| missing(PRESET_IMAGE_FLAG))?;
    let preset = args
        .get_mut(at + 1)
        .ok_or_else(|| missing("the preset image"))?;
    *preset = token(Hole::PresetImage);
    let env = container
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| missing("env"))?;
    for (name, hole) in [
        (LOG_LEVEL_ENV, Hole::LogLevel),
        (manifest::METRICS_ADDR_ENV, Hole::MetricsAddr),
    ] {
        let var = env
            .iter_mut()
            .find(|var| var.get("name").and_then(Value::as_str) == Some(name))
            .ok_or_else(|| missing(name))?;
        set(var, "/value", token(hole))?;
    }
    env.push(token(Hole::LogFormat));
    env.push(token(Hole::NetworkPolicy));
    env.push(token(Hole::PolicyCanary));
    let port = container
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .and_then(|ports| {
            ports.iter_mut().find(|port| {
                port.get("name").and_then(Value::as_str) == Some(manifest::HTTP_PORT_NAME)
            })
        })
        .ok_or_else(|| missing("the metrics port"))?;
    set(port, "/containerPort", token(Hole::MetricsPort))
}

fn set(value: &mut Value, pointer: &str, new: Value) -> Result<(), Error> {
    let slot = value
        .pointer_mut(pointer)
        .ok_or_else(|| missing(pointer.trim_start_matches('/')))?;
    *slot = new;
    Ok(())
}

/// The template a ClusterRole shipped in the bundle goes to.
pub(crate) fn bundle_role_template(name: &str) -> &'static str {
    if name == crate::rbac::POLICY_CANARY_CLUSTER_ROLE {
        "policy-canary-clusterrole.yaml"
    } else {
        "workloads-clusterrole.yaml"
    }
}
