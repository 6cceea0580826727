//! Unit tests of the alerts, the monitoring objects, the generated files and the PromQL reader.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::manifest;

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
            "InitializerStalled",
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
            rule.annotations["runbook_url"].ends_with(&format!("#{}", rule.alert.to_lowercase())),
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
        stalled_for: Duration::from_secs(25),
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
    assert_eq!(rule(&alerts, "InitializerStalled").for_, "25s");
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
    let file: serde_json::Value = serde_saphyr::from_str(&rules_file(&params).unwrap()).unwrap();
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
    assert_eq!(rules.matches("for: 15s").count(), 6, "{rules}");
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

#[test]
fn the_committed_rules_file_reads_back_as_the_rule_groups() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(MONITORING_DIR)
        .join(RULES_FILE_NAME);
    let read: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        read,
        serde_json::json!({ "groups": rule_groups(&AlertParameters::default()) })
    );
}
