//! The operator's alerts: each Prometheus alerting rule with the runbook's text for it, and the
//! figures ([`AlertParameters`]) a deployment or a test may tune.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use super::{RULES_NAME, RUNBOOK_FILE};

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
    /// How long an Initializer stays stalled (refused, held back, in conflict) before
    /// `InitializerStalled` fires.
    pub stalled_for: Duration,
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
            stalled_for: Duration::from_secs(10 * 60),
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

impl AlertParameters {
    /// These parameters with every alert's `for` set to `for_`.
    pub fn with_for(self, for_: Duration) -> Self {
        Self {
            deregistered_for: for_,
            degraded_for: for_,
            stalled_for: for_,
            latency_for: for_,
            no_leader_for: for_,
            reconcile_errors_for: for_,
            ..self
        }
    }
}

/// One alerting rule, as Prometheus reads it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AlertRule {
    /// The alert's name; its runbook section's anchor is the name in lowercase.
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
    let stalled_for = prometheus_duration(params.stalled_for);
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
                 (max by (initializer) (initializer_operator_suspended) == 1)\n\
                 unless on (initializer)\n\
                 (max by (initializer) (initializer_operator_engine{engine=\"Policy\"}) == 1)"
                    .to_string(),
                params.deregistered_for,
                &format!(
                    "Initializer {{{{ $labels.initializer }}}} has been out of the admission path for more than {deregistered_for}"
                ),
                format!(
                    "The webhook configuration of Initializer {{{{ $labels.initializer }}}} has not been registered for {deregistered_for} although the Initializer is neither suspended nor running in the API server: the operator took it out of the path (it stopped answering its probes, or lost its ready endpoints) or never got it in (its workload is not available). Matching objects are created without it. Check `kubectl describe initializer {{{{ $labels.initializer }}}}` (phase, conditions, Events) and the initializer's pods."
                ),
            ),
            meaning: "The Initializer's webhook configuration does not exist, the Initializer is not suspended, and its injection does not run in the API server (`initializer_operator_engine{engine=\"Policy\"}`, phase `InApiServer`, where no webhook is registered on purpose). The operator removed it because the initializer stopped answering (probes failed or no ready endpoints), or never registered it because the workload never became available and answering. Creates are not blocked (fail open), but every matching object created meanwhile is created without the initializer.",
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
                    "Initializer {{{{ $labels.initializer }}}} has been degraded for more than {degraded_for}"
                ),
                format!(
                    "The configuration of Initializer {{{{ $labels.initializer }}}} has been degraded for {degraded_for}: its probes fail often enough to degrade it but not to remove it. With a webhook configuration that means failurePolicy Ignore and a 1 s timeout, so creates it matches may skip it; an InitializerConfiguration has no failure policy to relax and stays as it is, so creates it matches may wait on a slow initializer. Check its probe latency and failures (`kubectl describe initializer {{{{ $labels.initializer }}}}`)."
                ),
            ),
            meaning: "A probe failed and the operator degraded the configuration to `failurePolicy: Ignore` with a one-second timeout, and it has not been restored since: the initializer answers some probes but not enough good ones in a row to be restored. With `backend: InitializerConfiguration` the configuration stays as it was (it has no failure policy to relax): the alert then means the initializer is slow or failing some probes while objects still wait on it.",
            actions: &[
                "`kubectl describe initializer NAME`: last probe latency and error, Events `Degraded` and `Restored`.",
                "Compare the probe latency with `spec.health.latencyBudgetMillis`: an initializer slower than its budget fails its probes; make it faster or raise the budget.",
                "Check the initializer's pods for restarts and resource limits (CPU throttling makes answers slow).",
            ],
        },
        Alert {
            rule: rule(
                "InitializerStalled",
                "warning",
                "max by (initializer, reason) (initializer_operator_stalled) == 1".to_string(),
                params.stalled_for,
                &format!(
                    "Initializer {{{{ $labels.initializer }}}} has been stalled ({{{{ $labels.reason }}}}) for more than {stalled_for}"
                ),
                format!(
                    "The operator has not been able to deploy or register Initializer {{{{ $labels.initializer }}}} for {stalled_for} ({{{{ $labels.reason }}}}), and will not until something changes: Refused means its spec was refused or is held back (the Valid condition says why), Conflict that an object it would create belongs to someone else (the Conflict condition names it), ProgressDeadlineExceeded that its workload never became ready within its Deployment's progress deadline; nothing of it is in the admission path. RouteNotProven means the API server has not been seen reaching its Service: it is registered failing open, so creates pass without it. Check `kubectl describe initializer {{{{ $labels.initializer }}}}`."
                ),
            ),
            meaning: "The operator refused the Initializer (`Valid=False`: an invalid spec, a workload namespace not allowed, or held back because nothing shows its author may register webhooks) or left it alone because an object it would create belongs to someone else (`Conflict=True`), or its workload never became ready within its Deployment's progress deadline (an image that cannot be pulled, a pod that never starts). Its `Stalled` condition says which. It registers nothing until the spec, the namespace, the other object or the workload changes, so nothing it should do is done, and no other alert says so: it was never in the path. Or (`RouteNotProven`) it is registered failing open because the API server has not been seen reaching its Service for five minutes: creates pass without it until the network or the image is put right, then it registers by itself.",
            actions: &[
                "`kubectl describe initializer NAME`: the `Stalled` condition, the `Valid` or `Conflict` condition and the `Refused` or `Conflict` Event say what to change.",
                "Refused: fix the spec. Held back: have someone who may create mutatingwebhookconfigurations change its spec (any change), so that the guard on Initializers judges them. A workload namespace not allowed: `kubectl label namespace NS initializer.dev/workloads=true` and the RoleBinding the message names.",
                "Conflict: remove or rename the object named in the message (it is not the operator's, and the operator never takes it over), or rename the Initializer.",
                "ProgressDeadlineExceeded: `kubectl -n NAMESPACE describe deployment NAME` (the Deployment is named after the Initializer) and its pods' events say why they never became ready (image pull, crash, scheduling); fix the image or the cluster.",
                "RouteNotProven: the `Registered` condition's message says what the last route check saw. A refused or timed-out call: a firewall or NetworkPolicy between the API server and the initializer's pods on port 8443 (`--api-server-cidrs`), or kube-proxy on the API server's nodes; a call answered without the check's answer: an image that does not serve `/route-check` (rebuild it on the current SDK).",
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
            meaning: "Reconciles keep failing with the same error (the `error` label names the step: `apply`, `register`, `status`, `tls`, `get`, ...). Handoffs between replicas (`not_leading`, `supervision_stopped`) are not counted. `status` and `stale_status` also count the writes of a supervised Initializer's status, which its own writer makes after the reconcile.",
            actions: &[
                "The operator's logs (`kubectl logs -n initializer-system deploy/initializer-operator`) carry the full error; Events on the Initializers name the one affected.",
                "`apply`, `get`, `register`, `status`: often RBAC (the bundle's ClusterRole, the workloads ClusterRole bound in the workload namespace) or an admission policy refusing the operator's writes.",
                "`cleanup_pending` that lasts: a deleted Initializer whose workload does not go away (finalizers on its objects).",
                "`stale_status` that lasts: the operator writes a status onto the Initializer's version it last read, and something keeps writing the Initializer between that read and the write (a controller or script patching it in a loop). One now and then is normal: a user's edit landed first, and the reconcile of that edit writes the status.",
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
