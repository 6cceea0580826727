//! The alert rules and the dashboard (generated in `initializer-packaging`) query only metrics
//! the operator exports: the one place that sees both the rules and the operator's gauges.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use initializer_operator::metrics::Metrics;
use initializer_packaging::monitoring::{AlertParameters, MONITORING_DIR, alerts, metric_names};

/// Names Prometheus itself produces, which rules and dashboards may query too.
const PROMETHEUS_OWN: [&str; 2] = ["up", "ALERTS"];

fn check_names(what: &str, exprs: &[String]) {
    let exported = Metrics::exported_names();
    assert!(!exprs.is_empty(), "{what} has no expressions");
    for expr in exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{what}: {expr} reads no metric");
        for name in names {
            assert!(
                exported.contains(&name) || PROMETHEUS_OWN.contains(&name.as_str()),
                "{what} queries {name}, which the operator does not export (it exports {exported:?}): {expr}"
            );
        }
    }
}

#[test]
fn every_metric_the_rules_query_is_exported_by_the_operator() {
    let exprs: Vec<String> = alerts(&AlertParameters::default())
        .into_iter()
        .map(|a| a.rule.expr)
        .collect();
    check_names("the alert rules", &exprs);
}

#[test]
fn every_metric_the_dashboard_queries_is_exported_by_the_operator() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(MONITORING_DIR)
        .join("dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    let mut panels: Vec<&serde_json::Value> =
        dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"].as_str()
            && let Some(inner) = query
                .strip_prefix("label_values(")
                .and_then(|q| q.split(',').next())
        {
            exprs.push(inner.to_string());
        }
    }
    check_names("monitoring/dashboard.json", &exprs);
    let names: std::collections::BTreeSet<String> =
        exprs.iter().flat_map(|e| metric_names(e)).collect();
    for gauge in [
        "initializer_operator_registered",
        "initializer_operator_degraded",
        "initializer_operator_leader",
        "initializer_operator_probe_budget_seconds",
    ] {
        assert!(names.contains(gauge), "the dashboard does not show {gauge}");
    }
}

#[test]
fn a_misspelt_metric_is_caught() {
    let result = std::panic::catch_unwind(|| {
        check_names(
            "a test",
            &["initializer_operator_registerd == 0".to_string()],
        )
    });
    assert!(result.is_err());
}
