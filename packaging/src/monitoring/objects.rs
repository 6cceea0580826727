//! The prometheus-operator objects (`PrometheusRule`, `ServiceMonitor`) and the headless metrics
//! `Service` they scrape through, all labelled with the operator's selector labels.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::alerts::{AlertParameters, rule_groups};
use super::{
    METRICS_PATH, METRICS_SERVICE_NAME, MONITORING_API_VERSION, RULES_NAME, SCRAPE_INTERVAL,
};
use crate::manifest;

/// Labels on the monitoring objects: the operator's selector labels.
fn labels() -> BTreeMap<String, String> {
    manifest::selector_labels()
}

fn metadata(name: &str, namespace: Option<&str>) -> serde_json::Value {
    let mut meta = json!({ "name": name, "labels": labels() });
    if let Some(namespace) = namespace {
        meta["namespace"] = json!(namespace);
    }
    meta
}

/// The `PrometheusRule` carrying [`rule_groups`], in `namespace` (none for a bundle, where
/// OLM places it in the install namespace).
pub fn prometheus_rule(namespace: Option<&str>, params: &AlertParameters) -> serde_json::Value {
    json!({
        "apiVersion": MONITORING_API_VERSION,
        "kind": "PrometheusRule",
        "metadata": metadata(RULES_NAME, namespace),
        "spec": { "groups": rule_groups(params) },
    })
}

/// The `ServiceMonitor` scraping every operator replica through [`metrics_service`].
pub fn service_monitor(namespace: Option<&str>) -> serde_json::Value {
    json!({
        "apiVersion": MONITORING_API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": metadata(METRICS_SERVICE_NAME, namespace),
        "spec": {
            "selector": { "matchLabels": labels() },
            "endpoints": [{
                "port": manifest::HTTP_PORT_NAME,
                "path": METRICS_PATH,
                "scheme": "http",
                "interval": SCRAPE_INTERVAL,
            }],
        },
    })
}

/// The headless `Service` in front of every operator replica's metrics port: each replica is
/// scraped on its own (only the leader exports per-Initializer gauges, and every replica says
/// whether it leads).
pub fn metrics_service(namespace: Option<&str>) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(METRICS_SERVICE_NAME.to_string()),
            namespace: namespace.map(str::to_string),
            labels: Some(labels()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(manifest::selector_labels()),
            ports: Some(vec![ServicePort {
                name: Some(manifest::HTTP_PORT_NAME.to_string()),
                port: manifest::HTTP_PORT,
                target_port: Some(IntOrString::String(manifest::HTTP_PORT_NAME.to_string())),
                protocol: Some("TCP".to_string()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}
