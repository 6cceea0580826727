//! What Prometheus needs to watch the operator: the alert rules (as a `PrometheusRule` and as a
//! plain rules file), the `ServiceMonitor` and the metrics `Service` it selects.
//!
//! Everything here is pure and deterministic. The bundle, the Helm chart, the committed
//! `monitoring/` files and the e2e alert scenario all call these functions, so an alert is
//! defined once; only [`AlertParameters`] differ (the e2e scenario shortens the `for` times).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::json;

use crate::error::Error;
use crate::manifest;

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

/// The tunable figures of the alerts. The defaults are for production; a test passes shorter
/// times through the same rules.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertParameters {
    /// How long an Initializer stays deregistered (and not suspended) before
    /// `InitializerDeregistered` fires.
    pub deregistered_for: Duration,
    /// How long an Initializer's configuration stays degraded before `InitializerDegraded`
    /// fires.
    pub degraded_for: Duration,
    /// The fraction of the latency budget the 99th percentile probe latency may reach before
    /// `InitializerProbeLatencyNearBudget` fires.
    pub latency_budget_ratio: f64,
    /// The window the probe latency percentile is computed over.
    pub latency_window: Duration,
    /// How long the latency stays near the budget before the alert fires.
    pub latency_for: Duration,
    /// `InitializerCertificateExpiringSoon` fires when a serving certificate expires sooner
    /// than this. The operator rotates a one-year certificate with a third of its life left,
    /// so a certificate this close to expiry means rotation has failed.
    pub expiry_warning: Duration,
    /// How long no replica may lead before `InitializerOperatorNoLeader` fires (a handoff
    /// takes seconds).
    pub no_leader_for: Duration,
    /// Reconcile errors per second (summed over replicas, per error) above which
    /// `InitializerOperatorReconcileErrors` may fire.
    pub reconcile_error_rate: f64,
    /// The window that rate is computed over.
    pub reconcile_error_window: Duration,
    /// How long the rate stays above the threshold before the alert fires.
    pub reconcile_errors_for: Duration,
    /// Base of the `runbook_url` annotations (each alert appends `#<alert, lowercase>`).
    pub runbook_base: String,
}

impl Default for AlertParameters {
    fn default() -> Self {
        Self {
            deregistered_for: Duration::from_secs(10 * 60),
            degraded_for: Duration::from_secs(10 * 60),
            latency_budget_ratio: 0.8,
            latency_window: Duration::from_secs(5 * 60),
            latency_for: Duration::from_secs(15 * 60),
            expiry_warning: Duration::from_secs(30 * 24 * 3600),
            no_leader_for: Duration::from_secs(5 * 60),
            reconcile_error_rate: 0.05,
            reconcile_error_window: Duration::from_secs(10 * 60),
            reconcile_errors_for: Duration::from_secs(15 * 60),
            runbook_base: format!("{}/blob/main/{RUNBOOK_FILE}", env!("CARGO_PKG_REPOSITORY")),
        }
    }
}

/// One alerting rule, as Prometheus reads it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AlertRule {
    /// The alert's name.
    pub alert: String,
    /// The PromQL expression; every series it returns is a firing (or pending) alert.
    pub expr: String,
    /// How long the expression must hold before the alert fires.
    #[serde(rename = "for")]
    pub for_: String,
    /// `severity` (`critical`, `warning`).
    pub labels: BTreeMap<String, String>,
    /// `summary`, `description` and `runbook_url`.
    pub annotations: BTreeMap<String, String>,
}

/// An alert with the text the runbook shows for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    /// The Prometheus alerting rule (name, expression, `for`, labels, annotations).
    pub rule: AlertRule,
    /// What it means, for the runbook.
    pub meaning: &'static str,
    /// What to do, step by step, for the runbook.
    pub actions: &'static [&'static str],
}

/// A duration as Prometheus writes it (`15s`, `10m`, `1h`, `30d`), in the largest unit that
/// divides it exactly.
pub fn prometheus_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    for (unit, size) in [
        ("d", 86_400_000u128),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// Every alert, with its runbook text.
pub fn alerts(params: &AlertParameters) -> Vec<Alert> {
    let runbook = |alert: &str| format!("{}#{}", params.runbook_base, alert.to_lowercase());
    let rule = |alert: &str,
                severity: &str,
                expr: String,
                for_: Duration,
                summary: &str,
                description: String| AlertRule {
        alert: alert.to_string(),
        expr,
        for_: prometheus_duration(for_),
        labels: BTreeMap::from([("severity".to_string(), severity.to_string())]),
        annotations: BTreeMap::from([
            ("summary".to_string(), summary.to_string()),
            ("description".to_string(), description),
            ("runbook_url".to_string(), runbook(alert)),
        ]),
    };
    let deregistered_for = prometheus_duration(params.deregistered_for);
    let degraded_for = prometheus_duration(params.degraded_for);
    let latency_window = prometheus_duration(params.latency_window);
    let error_window = prometheus_duration(params.reconcile_error_window);
    let ratio_percent = (params.latency_budget_ratio * 100.0).round();
    vec![
        Alert {
            rule: rule(
                "InitializerDeregistered",
                "critical",
                "(max by (initializer) (initializer_operator_registered) == 0)\n\
                 unless on (initializer)\n\
                 (max by (initializer) (initializer_operator_suspended) == 1)"
                    .to_string(),
                params.deregistered_for,
                &format!(
                    "Initializer {{{{ $labels.initializer }}}} has been out of the admission path for more than {deregistered_for}"
                ),
                format!(
                    "The webhook configuration of Initializer {{{{ $labels.initializer }}}} has not been registered for {deregistered_for} although the Initializer is not suspended: the operator took it out of the path (it stopped answering its probes, or lost its ready endpoints) or never got it in (its workload is not available). Matching objects are created without it. Check `kubectl describe initializer {{{{ $labels.initializer }}}}` (phase, conditions, Events) and the initializer's pods."
                ),
            ),
            meaning: "The Initializer's webhook configuration does not exist and the Initializer is not suspended. The operator removed it because the initializer stopped answering (probes failed or no ready endpoints), or never registered it because the workload never became available and answering. Creates are not blocked (fail open), but every matching object created meanwhile is created without the initializer.",
            actions: &[
                "`kubectl describe initializer NAME`: the phase, the `Responding`, `Available` and `Registered` conditions and the operator's Events say why (`Deregistered` with the cause).",
                "Look at the initializer's pods in its workload namespace (`kubectl get pods -n NS -l initializer.dev/initializer=NAME`): crash loops, a hung process, a failing readiness probe.",
                "Once it answers again the operator registers it after `successThreshold` good probes; the Initializer's status then lists `missedInitializations`: recreate those objects.",
                "To keep it out of the path on purpose, set `spec.suspend: true` (the alert then stops).",
            ],
        },
        Alert {
            rule: rule(
                "InitializerDegraded",
                "warning",
                "max by (initializer) (initializer_operator_degraded) == 1".to_string(),
                params.degraded_for,
                &format!(
                    "Initializer {{{{ $labels.initializer }}}} has been failing open for more than {degraded_for}"
                ),
                format!(
                    "The configuration of Initializer {{{{ $labels.initializer }}}} has been degraded (failurePolicy Ignore, 1 s timeout) for {degraded_for}: its probes fail often enough to degrade it but not to remove it. Creates it matches may skip it. Check its probe latency and failures (`kubectl describe initializer {{{{ $labels.initializer }}}}`)."
                ),
            ),
            meaning: "A probe failed and the operator degraded the configuration to `failurePolicy: Ignore` with a one-second timeout, and it has not been restored since: the initializer answers some probes but not enough good ones in a row to be restored.",
            actions: &[
                "`kubectl describe initializer NAME`: last probe latency and error, Events `Degraded` and `Restored`.",
                "Compare the probe latency with `spec.health.latencyBudgetMillis`: an initializer slower than its budget fails its probes; make it faster or raise the budget.",
                "Check the initializer's pods for restarts and resource limits (CPU throttling makes answers slow).",
            ],
        },
        Alert {
            rule: rule(
                "InitializerProbeLatencyNearBudget",
                "warning",
                format!(
                    "histogram_quantile(0.99, sum by (initializer, le) (rate(initializer_operator_probe_latency_seconds_bucket[{latency_window}])))\n\
                     > on (initializer)\n\
                     ({} * max by (initializer) (initializer_operator_probe_budget_seconds))",
                    params.latency_budget_ratio
                ),
                params.latency_for,
                &format!(
                    "Initializer {{{{ $labels.initializer }}}} answers its probes in more than {ratio_percent}% of its latency budget"
                ),
                format!(
                    "The 99th percentile of Initializer {{{{ $labels.initializer }}}}'s probe latency over {latency_window} is {{{{ $value | humanizeDuration }}}}, more than {ratio_percent}% of its budget: a little slower and its probes fail, which degrades and then removes its configuration. Matching creates wait about as long."
                ),
            ),
            meaning: "The 99th percentile of the active probes' latency (a dry-run AdmissionReview, sent to every ready pod as the API server would) is close to `spec.health.latencyBudgetMillis`. Slower probes fail: the configuration is degraded and then removed.",
            actions: &[
                "Check the initializer's CPU and memory (throttling, garbage collection) and what its handler waits on (API calls, external services).",
                "Scale it (`spec.replicas`) if it is saturated.",
                "If the latency is expected, raise `spec.health.latencyBudgetMillis` (and keep `spec.timeoutSeconds` above it).",
            ],
        },
        Alert {
            rule: rule(
                "InitializerCertificateExpiringSoon",
                "warning",
                format!(
                    "max by (initializer) (initializer_operator_certificate_expiry_timestamp_seconds) - time() < {}",
                    params.expiry_warning.as_secs()
                ),
                Duration::from_secs(15 * 60).min(params.expiry_warning),
                "The serving certificate of Initializer {{ $labels.initializer }} expires soon",
                format!(
                    "The serving certificate of Initializer {{{{ $labels.initializer }}}} expires in {{{{ $value | humanizeDuration }}}}, less than {}. The operator rotates certificates with a third of their life left, so rotation has failed: once it expires the API server cannot call the initializer and the operator takes it out of the path.",
                    prometheus_duration(params.expiry_warning)
                ),
            ),
            meaning: "The serving certificate in the Initializer's TLS Secret expires soon. The operator renews a one-year certificate when a third of its life remains, so reaching this point means renewal keeps failing.",
            actions: &[
                "Look at the operator's logs and the Initializer's Events for TLS errors (`failed to ...` with `tls`).",
                "Check that the operator may update the Secret `NAME-tls` in the workload namespace (RBAC: the workloads ClusterRole bound there).",
                "Deleting the Secret makes the operator issue a new certificate on the next reconcile.",
            ],
        },
        Alert {
            rule: rule(
                "InitializerOperatorNoLeader",
                "critical",
                "(sum(initializer_operator_leader) or vector(0)) < 1".to_string(),
                params.no_leader_for,
                "No initializer-operator replica is leading",
                format!(
                    "No replica of initializer-operator has held the leader Lease for {}: nothing probes the initializers, and a registered initializer that stops answering stays in the admission path (with failurePolicy Fail, its matching creates are refused).",
                    prometheus_duration(params.no_leader_for)
                ),
            ),
            meaning: "No scraped operator replica reports `initializer_operator_leader 1` (or none is scraped at all). Without a leader nothing probes, registers or deregisters: an initializer that hangs now stays in the admission path.",
            actions: &[
                "`kubectl get pods -n initializer-system -l app.kubernetes.io/name=initializer-operator`: are the replicas running and ready?",
                "`kubectl get lease -n initializer-system initializer-operator -o yaml`: who holds it and when it was renewed; the operator's logs say why it cannot renew (RBAC on leases, API server unreachable).",
                "While no replica leads, suspend any Initializer that stops answering (`spec.suspend: true`) or delete its MutatingWebhookConfiguration by hand.",
            ],
        },
        Alert {
            rule: rule(
                "InitializerOperatorReconcileErrors",
                "warning",
                format!(
                    "sum by (error) (rate(initializer_operator_reconcile_errors_total{{error!~\"not_leading|supervision_stopped\"}}[{error_window}])) > {}",
                    params.reconcile_error_rate
                ),
                params.reconcile_errors_for,
                "initializer-operator reconciles keep failing with {{ $labels.error }}",
                format!(
                    "initializer-operator reconciles have failed with `{{{{ $labels.error }}}}` at {{{{ printf \"%.3f\" $value }}}} per second over {error_window} for {}: Initializers may not converge (workloads not updated, certificates not rotated).",
                    prometheus_duration(params.reconcile_errors_for)
                ),
            ),
            meaning: "Reconciles keep failing with the same error (the `error` label names the step: `apply`, `register`, `status`, `tls`, `get`, ...). Handoffs between replicas (`not_leading`, `supervision_stopped`) are not counted.",
            actions: &[
                "The operator's logs (`kubectl logs -n initializer-system deploy/initializer-operator`) carry the full error; Events on the Initializers name the one affected.",
                "`apply`, `get`, `register`, `status`: often RBAC (the bundle's ClusterRole, the workloads ClusterRole bound in the workload namespace) or an admission policy refusing the operator's writes.",
                "`cleanup_pending` that lasts: a deleted Initializer whose workload does not go away (finalizers on its objects).",
            ],
        },
    ]
}

/// The rule groups (`groups:` of a rules file, `spec.groups` of a `PrometheusRule`).
pub fn rule_groups(params: &AlertParameters) -> serde_json::Value {
    let alerts = alerts(params);
    let rules: Vec<&AlertRule> = alerts.iter().map(|a| &a.rule).collect();
    json!([{ "name": RULES_NAME, "rules": rules }])
}

/// The alert rules as a plain Prometheus rules file (`promtool check rules` reads it).
pub fn rules_file(params: &AlertParameters) -> Result<String, Error> {
    let body = serde_yaml::to_string(&json!({ "groups": rule_groups(params) }))
        .map_err(|err| Error::BundleGenerate(format!("failed to serialize the rules: {err}")))?;
    Ok(format!(
        "# Generated by `initializer-operator monitoring`; do not edit.\n\
         # The same rules ship as the PrometheusRule of the bundle and the Helm chart.\n{body}"
    ))
}

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

/// The runbook: one section per alert (what it means, what to do), linked from each alert's
/// `runbook_url`.
pub fn runbook(params: &AlertParameters) -> String {
    let mut out = String::from(
        "<!-- Generated by `initializer-operator monitoring`; do not edit. -->\n\
         # initializer-operator alerts: runbook\n\n\
         The alerts in `initializer-operator.rules.yaml` (and in the bundle's and the Helm \
         chart's PrometheusRule), with the default parameters.\n",
    );
    for alert in alerts(params) {
        let rule = &alert.rule;
        out.push_str(&format!(
            "\n## {}\n\nSeverity `{}`, fires after `{}`.\n\n```promql\n{}\n```\n\n{}\n\nWhat to do:\n\n",
            rule.alert,
            rule.labels.get("severity").map(String::as_str).unwrap_or("none"),
            rule.for_,
            rule.expr,
            alert.meaning,
        ));
        for (i, action) in alert.actions.iter().enumerate() {
            out.push_str(&format!("{}. {action}\n", i + 1));
        }
    }
    out
}

/// The files of `monitoring/` generated from the code, by name: the rules file and the
/// runbook.
pub fn generated_files(params: &AlertParameters) -> Result<BTreeMap<String, String>, Error> {
    Ok(BTreeMap::from([
        (RULES_FILE_NAME.to_string(), rules_file(params)?),
        ("runbook.md".to_string(), runbook(params)),
    ]))
}

/// The bundle's `PrometheusRule`, relative to the bundle directory.
pub const BUNDLE_RULE_FILE: &str = "manifests/initializer-operator.prometheusrule.yaml";
/// The bundle's `ServiceMonitor`, relative to the bundle directory.
pub const BUNDLE_SERVICE_MONITOR_FILE: &str = "manifests/initializer-operator.servicemonitor.yaml";
/// The bundle's metrics `Service`, relative to the bundle directory.
pub const BUNDLE_SERVICE_FILE: &str = "manifests/initializer-operator-metrics.service.yaml";

/// The bundle's monitoring manifests (no namespace: OLM puts them in the install namespace),
/// by path relative to the bundle directory, with the default parameters.
pub fn bundle_files() -> Result<BTreeMap<String, String>, Error> {
    let yaml = |what: &str, value: serde_json::Value| {
        serde_yaml::to_string(&value)
            .map_err(|err| Error::BundleGenerate(format!("failed to serialize {what}: {err}")))
    };
    let service = serde_json::to_value(metrics_service(None)).map_err(|err| {
        Error::BundleGenerate(format!("failed to serialize the metrics Service: {err}"))
    })?;
    Ok(BTreeMap::from([
        (
            BUNDLE_RULE_FILE.to_string(),
            yaml(
                "the PrometheusRule",
                prometheus_rule(None, &AlertParameters::default()),
            )?,
        ),
        (
            BUNDLE_SERVICE_MONITOR_FILE.to_string(),
            yaml("the ServiceMonitor", service_monitor(None))?,
        ),
        (
            BUNDLE_SERVICE_FILE.to_string(),
            yaml("the metrics Service", service)?,
        ),
    ]))
}

/// PromQL words that are not metric names: operators, modifiers, keywords, and the
/// aggregation operators (which may be followed by `by (...)` rather than `(`).
const PROMQL_KEYWORDS: [&str; 27] = [
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
    "atan2",
    "le",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// The metric names a PromQL expression reads: identifiers outside label matchers, label
/// lists, strings and range selectors that are neither function names (followed by `(`) nor
/// keywords. Grafana's `$variables` are ignored.
pub fn metric_names(expr: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    // After `by`, `on`, `without`, `ignoring`, `group_left`, `group_right`, the parenthesised
    // list holds label names.
    let mut label_list_next = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if label_list_next => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                i += 1;
                label_list_next = false;
            }
            '$' => {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let is_call = chars.get(next) == Some(&'(');
                let lower = word.to_lowercase();
                if [
                    "by",
                    "on",
                    "without",
                    "ignoring",
                    "group_left",
                    "group_right",
                ]
                .contains(&lower.as_str())
                {
                    label_list_next = is_call;
                } else if !is_call && !PROMQL_KEYWORDS.contains(&lower.as_str()) {
                    names.insert(word);
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number, possibly with an exponent or a duration unit.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

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

impl AlertParameters {
    /// These parameters with every alert's `for` set to `for_`.
    pub fn with_for(self, for_: Duration) -> Self {
        Self {
            deregistered_for: for_,
            degraded_for: for_,
            latency_for: for_,
            no_leader_for: for_,
            reconcile_errors_for: for_,
            ..self
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
mod tests {
    use super::*;

    fn rule<'a>(alerts: &'a [Alert], name: &str) -> &'a AlertRule {
        &alerts
            .iter()
            .find(|a| a.rule.alert == name)
            .unwrap_or_else(|| panic!("no alert {name}"))
            .rule
    }

    #[test]
    fn durations_are_written_in_the_largest_exact_unit() {
        assert_eq!(prometheus_duration(Duration::from_secs(15)), "15s");
        assert_eq!(prometheus_duration(Duration::from_secs(600)), "10m");
        assert_eq!(prometheus_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(prometheus_duration(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(prometheus_duration(Duration::from_secs(90)), "90s");
        assert_eq!(prometheus_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(prometheus_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn every_alert_the_issue_asks_for_exists_with_a_severity_and_runbook_text() {
        let alerts = alerts(&AlertParameters::default());
        let names: Vec<&str> = alerts.iter().map(|a| a.rule.alert.as_str()).collect();
        assert_eq!(
            names,
            [
                "InitializerDeregistered",
                "InitializerDegraded",
                "InitializerProbeLatencyNearBudget",
                "InitializerCertificateExpiringSoon",
                "InitializerOperatorNoLeader",
                "InitializerOperatorReconcileErrors",
            ]
        );
        for alert in &alerts {
            let rule = &alert.rule;
            assert!(
                ["critical", "warning"].contains(&rule.labels["severity"].as_str()),
                "{}",
                rule.alert
            );
            for key in ["summary", "description", "runbook_url"] {
                assert!(
                    !rule.annotations[key].is_empty(),
                    "{} lacks {key}",
                    rule.alert
                );
            }
            assert!(
                rule.annotations["runbook_url"]
                    .ends_with(&format!("#{}", rule.alert.to_lowercase())),
                "{}",
                rule.alert
            );
            assert!(!alert.actions.is_empty() && !alert.meaning.is_empty());
        }
    }

    #[test]
    fn the_parameters_reach_the_rules() {
        let params = AlertParameters {
            deregistered_for: Duration::from_secs(15),
            degraded_for: Duration::from_secs(20),
            latency_budget_ratio: 0.9,
            expiry_warning: Duration::from_secs(7 * 86_400),
            no_leader_for: Duration::from_secs(60),
            reconcile_error_rate: 0.5,
            ..AlertParameters::default()
        };
        let alerts = alerts(&params);
        assert_eq!(rule(&alerts, "InitializerDeregistered").for_, "15s");
        assert!(rule(&alerts, "InitializerDeregistered").annotations["summary"].ends_with("15s"));
        assert_eq!(rule(&alerts, "InitializerDegraded").for_, "20s");
        assert!(
            rule(&alerts, "InitializerProbeLatencyNearBudget")
                .expr
                .contains("(0.9 * max by (initializer)")
        );
        assert!(
            rule(&alerts, "InitializerCertificateExpiringSoon")
                .expr
                .ends_with("< 604800")
        );
        assert_eq!(rule(&alerts, "InitializerOperatorNoLeader").for_, "1m");
        assert!(
            rule(&alerts, "InitializerOperatorReconcileErrors")
                .expr
                .ends_with("> 0.5")
        );
    }

    #[test]
    fn a_suspended_initializer_is_not_reported_as_deregistered() {
        let alerts = alerts(&AlertParameters::default());
        let expr = &rule(&alerts, "InitializerDeregistered").expr;
        assert!(expr.contains("initializer_operator_registered) == 0"));
        assert!(expr.contains("unless on (initializer)"));
        assert!(expr.contains("initializer_operator_suspended) == 1"));
    }

    #[test]
    fn the_prometheus_rule_carries_the_same_groups_as_the_rules_file() {
        let params = AlertParameters::default();
        let rule = prometheus_rule(Some("initializer-system"), &params);
        assert_eq!(rule["apiVersion"], MONITORING_API_VERSION);
        assert_eq!(rule["kind"], "PrometheusRule");
        assert_eq!(rule["metadata"]["namespace"], "initializer-system");
        let file: serde_json::Value = serde_yaml::from_str(&rules_file(&params).unwrap()).unwrap();
        assert_eq!(rule["spec"]["groups"], file["groups"]);
        assert!(
            prometheus_rule(None, &params)["metadata"]
                .get("namespace")
                .is_none()
        );
    }

    #[test]
    fn the_service_monitor_selects_the_metrics_service_on_the_operators_port() {
        let monitor = service_monitor(None);
        let service = metrics_service(None);
        let service_labels = service.metadata.labels.clone().unwrap();
        for (key, value) in monitor["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap()
        {
            assert_eq!(service_labels.get(key).map(String::as_str), value.as_str());
        }
        let spec = service.spec.unwrap();
        let port = &spec.ports.unwrap()[0];
        assert_eq!(
            monitor["spec"]["endpoints"][0]["port"],
            port.name.clone().unwrap()
        );
        assert_eq!(
            port.target_port,
            Some(IntOrString::String(manifest::HTTP_PORT_NAME.to_string()))
        );
        assert_eq!(spec.selector.unwrap(), manifest::selector_labels());
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(monitor["spec"]["endpoints"][0]["path"], METRICS_PATH);
    }

    #[test]
    fn the_operators_container_serves_the_port_the_service_targets() {
        let container = manifest::operator_container();
        let ports = container.ports.unwrap_or_default();
        assert!(
            ports
                .iter()
                .any(|p| p.name.as_deref() == Some(manifest::HTTP_PORT_NAME)
                    && p.container_port == manifest::HTTP_PORT)
        );
    }

    #[test]
    fn the_runbook_has_a_section_per_alert_with_numbered_actions() {
        let params = AlertParameters::default();
        let text = runbook(&params);
        for alert in alerts(&params) {
            assert!(text.contains(&format!("\n## {}\n", alert.rule.alert)));
        }
        assert!(text.contains("\n1. "));
    }

    #[test]
    fn check_reports_every_drifted_file_and_writing_fixes_it() {
        let dir = tempfile::tempdir().unwrap();
        let check = MonitoringArgs {
            out: dir.path().to_path_buf(),
            check: true,
            for_seconds: None,
        };
        let err = run(&check).unwrap_err().to_string();
        assert!(
            err.contains(RULES_FILE_NAME) && err.contains("runbook.md"),
            "{err}"
        );
        run(&MonitoringArgs {
            out: dir.path().to_path_buf(),
            check: false,
            for_seconds: None,
        })
        .unwrap();
        run(&check).unwrap();
        let short = MonitoringArgs {
            out: dir.path().to_path_buf(),
            check: false,
            for_seconds: Some(15),
        };
        run(&short).unwrap();
        let rules = std::fs::read_to_string(dir.path().join(RULES_FILE_NAME)).unwrap();
        assert_eq!(rules.matches("for: 15s").count(), 5, "{rules}");
        assert!(
            rules.contains("for: 15m"),
            "the certificate alert keeps its own for"
        );
        assert!(run(&check).is_err());
    }

    #[test]
    fn metric_names_skip_functions_labels_strings_ranges_and_variables() {
        let names = metric_names(
            "histogram_quantile(0.99, sum by (initializer, le) (rate(a_bucket{x=\"y\", le=~\"0.5\"}[5m])))\n\
             > on (initializer) group_left (pod) (0.8 * max by (initializer) (b_seconds)) \
             unless c_total offset 5m or vector(0) and d:recorded[$__rate_interval] - time() < 1e3",
        );
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["a_bucket", "b_seconds", "c_total", "d:recorded"]
        );
    }

    #[test]
    fn the_committed_monitoring_files_match_the_code() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(MONITORING_DIR);
        run(&MonitoringArgs {
            out: dir,
            check: true,
            for_seconds: None,
        })
        .unwrap();
    }
}
