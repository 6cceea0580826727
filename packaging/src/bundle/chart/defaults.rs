//! The chart's defaults, read back from the operator's Deployment in the CSV, so that the chart
//! rendered with its defaults gives the bundle's objects again.

use initializer_crds::constants;
use initializer_crds::images::Reference;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};
use serde_json::{Value, json};

use super::holes::Hole;
use super::{json_error, missing};
use crate::error::Error;
use crate::install::InstallPlan;
use crate::manifest;

/// The env var that switches the operator's logs to JSON (`run --log-json`).
pub const LOG_JSON_ENV: &str = "LOG_JSON";
/// The operator's `--network-policy` as an environment variable (`auto`, `on` or `off`).
pub const NETWORK_POLICY_ENV: &str = "NETWORK_POLICY";
/// The operator's `--policy-canary-namespace`, as its environment variable.
pub const POLICY_CANARY_ENV: &str = "POLICY_CANARY_NAMESPACE";
/// The operator's `--api-server-cidrs` as an environment variable (comma-separated CIDRs).
pub const API_SERVER_CIDRS_ENV: &str = "API_SERVER_CIDRS";
/// The env var holding the operator's log filter.
pub const LOG_LEVEL_ENV: &str = "RUST_LOG";
/// The operator's flag naming the preset initializer's image.
pub const PRESET_IMAGE_FLAG: &str = "--preset-image";

/// The chart's values that have a default in the CSV, read from its Deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct Defaults {
    /// The operator's image: by tag (the chart's appVersion when it is the operator's version)
    /// or, in a release, by digest.
    pub image: Reference,
    /// The operator container's pull policy.
    pub pull_policy: String,
    /// The preset initializer's image, likewise.
    pub preset: Reference,
    /// How many operator replicas run (one leads, the others stand by).
    pub replicas: i32,
    /// The operator container's `resources`.
    pub resources: Value,
    /// The operator's log filter, as its `RUST_LOG` has it.
    pub log_level: String,
    /// Port of the health and metrics listener.
    pub metrics_port: i32,
    /// The ServiceMonitor's scrape interval.
    pub scrape_interval: String,
}

impl Defaults {
    /// Reads the defaults from the operator's Deployment as the plan has it.
    pub fn from_plan(plan: &InstallPlan) -> Result<Self, Error> {
        let deployment = operator_deployment(plan)?;
        let spec = &deployment.spec;
        let container = operator_container(&spec.template)?;
        let image = container
            .image
            .as_deref()
            .ok_or_else(|| missing("an image"))?;
        let image =
            Reference::parse(image).ok_or_else(|| missing("an image with a tag or a digest"))?;
        let args = container.args.as_deref().unwrap_or_default();
        let preset = args
            .iter()
            .position(|arg| arg == PRESET_IMAGE_FLAG)
            .and_then(|at| args.get(at + 1))
            .ok_or_else(|| missing(PRESET_IMAGE_FLAG))?;
        let preset = Reference::parse(preset)
            .ok_or_else(|| missing("a preset image with a tag or a digest"))?;
        let log_level = container
            .env
            .iter()
            .flatten()
            .find(|var| var.name == LOG_LEVEL_ENV)
            .and_then(|var| var.value.clone())
            .ok_or_else(|| missing(LOG_LEVEL_ENV))?;
        let metrics_port = container
            .ports
            .iter()
            .flatten()
            .find(|port| port.name.as_deref() == Some(manifest::HTTP_PORT_NAME))
            .map(|port| port.container_port)
            .ok_or_else(|| missing("the metrics port"))?;
        let scrape_interval = plan
            .monitoring
            .iter()
            .find(|object| object["kind"] == json!("ServiceMonitor"))
            .and_then(|monitor| monitor.pointer("/spec/endpoints/0/interval"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::ChartGenerate(
                    "failed to find the ServiceMonitor's interval in the bundle".to_string(),
                )
            })?
            .to_string();
        let resources = serde_json::to_value(container.resources.clone().unwrap_or_default())
            .map_err(|err| json_error("the resources", &err))?;
        Ok(Self {
            image,
            pull_policy: container
                .image_pull_policy
                .clone()
                .ok_or_else(|| missing("an imagePullPolicy"))?,
            preset,
            replicas: spec.replicas.ok_or_else(|| missing("replicas"))?,
            resources,
            log_level,
            metrics_port,
            scrape_interval,
        })
    }

    /// What filling `hole` with the defaults gives: the value for an inline hole or a map
    /// value, the entries a map-key hole adds, the items a list-item hole adds.
    pub fn fill(&self, hole: Hole, namespace: &str) -> Value {
        match hole {
            Hole::Namespace => json!(namespace),
            Hole::Labels | Hole::PodScheduling | Hole::ServiceMonitorLabels | Hole::RuleLabels => {
                json!({})
            }
            Hole::ScrapeInterval => json!(self.scrape_interval),
            Hole::Replicas => json!(self.replicas),
            Hole::Image => json!(self.image.to_string()),
            Hole::PullPolicy => json!(self.pull_policy),
            Hole::PresetImage => json!(self.preset.to_string()),
            Hole::Resources => self.resources.clone(),
            Hole::LogLevel => json!(self.log_level),
            Hole::LogFormat | Hole::NetworkPolicy | Hole::PolicyCanary => json!([]),
            Hole::MetricsAddr => {
                json!(format!(
                    "$({}):{}",
                    constants::POD_IP_ENV,
                    self.metrics_port
                ))
            }
            Hole::MetricsPort => json!(self.metrics_port),
        }
    }
}

fn operator_deployment(plan: &InstallPlan) -> Result<&Deployment, Error> {
    plan.deployments
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some(manifest::OPERATOR_NAME))
        .ok_or_else(|| {
            Error::ChartGenerate(format!(
                "failed to find the Deployment {} in the CSV's install strategy",
                manifest::OPERATOR_NAME
            ))
        })
}

fn operator_container(template: &PodTemplateSpec) -> Result<&Container, Error> {
    template
        .spec
        .as_ref()
        .and_then(|pod| {
            pod.containers
                .iter()
                .find(|c| c.name == manifest::OPERATOR_NAME)
        })
        .ok_or_else(|| missing("the operator container"))
}
