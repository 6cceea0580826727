//! What Prometheus needs to watch the operator: the alert rules (as a `PrometheusRule` and as a
//! plain rules file), the `ServiceMonitor` and the metrics `Service` it selects.
//!
//! Everything here is pure and deterministic except [`run`], which writes (or checks) the
//! files. The bundle, the Helm chart, the committed `monitoring/` files and the e2e alert
//! scenario all call these functions, so an alert is defined once; only [`AlertParameters`]
//! differ (the e2e scenario shortens the `for` times).
//!
//! - `alerts.rs`: the alerts (rule, meaning, actions) and their tunable figures;
//! - `objects.rs`: the `PrometheusRule`, the `ServiceMonitor` and the metrics `Service`;
//! - `files.rs`: what is written from them: the rules file, the runbook, the bundle's manifests;
//! - `promql.rs`: the metric names an expression reads (the tests check that each exists).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::Error;

mod alerts;
mod files;
mod objects;
mod promql;

pub use alerts::{Alert, AlertParameters, AlertRule, alerts, prometheus_duration, rule_groups};
pub use files::{
    BUNDLE_RULE_FILE, BUNDLE_SERVICE_FILE, BUNDLE_SERVICE_MONITOR_FILE, bundle_files,
    generated_files, rules_file, runbook,
};
pub use objects::{metrics_service, prometheus_rule, service_monitor};
pub use promql::metric_names;

/// API version of `PrometheusRule` and `ServiceMonitor` (prometheus-operator).
pub const MONITORING_API_VERSION: &str = "monitoring.coreos.com/v1";
/// The API group of [`MONITORING_API_VERSION`].
pub const MONITORING_GROUP: &str = "monitoring.coreos.com";
/// Name of the `PrometheusRule`, the `ServiceMonitor` and the rule group.
pub const RULES_NAME: &str = "initializer-operator";
/// Name of the metrics `Service` (and of the `ServiceMonitor`).
pub const METRICS_SERVICE_NAME: &str = "initializer-operator-metrics";
/// Where the operator serves its metrics.
pub const METRICS_PATH: &str = "/metrics";
/// How often the `ServiceMonitor` asks Prometheus to scrape.
pub const SCRAPE_INTERVAL: &str = "30s";
/// File name of the plain rules file in `monitoring/`.
pub const RULES_FILE_NAME: &str = "initializer-operator.rules.yaml";
/// Where the generated monitoring files are committed, relative to the workspace root.
pub const MONITORING_DIR: &str = "monitoring";
/// Where each alert's runbook section lives (`monitoring/runbook.md`, generated).
pub const RUNBOOK_FILE: &str = "monitoring/runbook.md";

/// Flags of `initializer-operator monitoring`.
#[derive(Clone, Debug, clap::Args)]
pub struct MonitoringArgs {
    /// Directory to write the rules file and the runbook to.
    #[arg(long, default_value = MONITORING_DIR)]
    pub out: PathBuf,
    /// Only compare the files in `--out` with what the code generates; write nothing.
    #[arg(long)]
    pub check: bool,
    /// Set every alert's `for` to this many seconds instead of the shipped minutes (a test
    /// that wants to see an alert fire soon; the committed files use the defaults).
    #[arg(long)]
    pub for_seconds: Option<u64>,
}

impl MonitoringArgs {
    /// The alert parameters these flags ask for.
    pub fn parameters(&self) -> AlertParameters {
        let defaults = AlertParameters::default();
        match self.for_seconds {
            Some(seconds) => defaults.with_for(Duration::from_secs(seconds)),
            None => defaults,
        }
    }
}

/// `initializer-operator monitoring`: writes the generated files with the default parameters
/// (or, with `--check`, fails naming each file that differs).
pub fn run(args: &MonitoringArgs) -> Result<(), Error> {
    let files = generated_files(&args.parameters())?;
    let mut drifted = Vec::new();
    for (name, text) in &files {
        let path = args.out.join(name);
        if args.check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                drifted.push(path.display().to_string());
            }
            continue;
        }
        std::fs::create_dir_all(&args.out).map_err(|source| Error::BundleWrite {
            path: args.out.clone(),
            source,
        })?;
        std::fs::write(&path, text).map_err(|source| Error::BundleWrite { path, source })?;
    }
    if drifted.is_empty() {
        Ok(())
    } else {
        Err(Error::BundleGenerate(format!(
            "failed to match the generated monitoring files: {} differ; run `initializer-operator monitoring`",
            drifted.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests;
