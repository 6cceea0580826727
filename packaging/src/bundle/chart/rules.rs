//! The alert parameters as chart values. The PrometheusRule is made with sentinel parameters
//! (figures that appear nowhere else in the rules), and each sentinel's text is then replaced by
//! the template text that reads its value.

use std::time::Duration;

use serde_json::Value;

use super::json_error;
use crate::error::Error;
use crate::monitoring::{self, AlertParameters};

/// Alert parameters whose figures appear nowhere else in the rules, so that each can be
/// replaced by its value wherever [`monitoring::prometheus_rule`] writes it.
pub fn sentinel_parameters() -> AlertParameters {
    let secs = Duration::from_secs;
    AlertParameters {
        deregistered_for: secs(1001),
        degraded_for: secs(1002),
        stalled_for: secs(1008),
        latency_budget_ratio: 0.4321,
        latency_window: secs(1003),
        latency_for: secs(1004),
        expiry_warning: secs(77 * DAY),
        no_leader_for: secs(1005),
        reconcile_error_rate: 0.0321,
        reconcile_error_window: secs(1006),
        reconcile_errors_for: secs(1007),
        runbook_base: "https://runbook.invalid/sentinel".to_string(),
    }
}

/// Seconds in a day, the unit of the `expiryWarningDays` value.
pub(super) const DAY: u64 = 24 * 3600;
const RULE_VALUES: &str = ".Values.metrics.prometheusRule";

/// One alert parameter of the chart: the text [`sentinel_parameters`] puts in the rules, the
/// template text that replaces it, and what the default parameters put there.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleParameter {
    /// Text in the rules made with [`sentinel_parameters`].
    pub sentinel: String,
    /// Template text that replaces it.
    pub template: String,
    /// Text in the rules made with the default parameters.
    pub default: String,
}

/// Every alert parameter the chart opens, as sentinel, template and default text.
pub fn rule_parameters() -> Vec<RuleParameter> {
    let sentinel = sentinel_parameters();
    let defaults = AlertParameters::default();
    let duration = |value: &str, sentinel: Duration, default: Duration| RuleParameter {
        sentinel: monitoring::prometheus_duration(sentinel),
        template: format!("{{{{ {RULE_VALUES}.{value} }}}}"),
        default: monitoring::prometheus_duration(default),
    };
    let percent = |ratio: f64| format!("{}%", (ratio * 100.0).round());
    vec![
        duration(
            "deregisteredFor",
            sentinel.deregistered_for,
            defaults.deregistered_for,
        ),
        duration("degradedFor", sentinel.degraded_for, defaults.degraded_for),
        duration("stalledFor", sentinel.stalled_for, defaults.stalled_for),
        duration(
            "latencyWindow",
            sentinel.latency_window,
            defaults.latency_window,
        ),
        duration("latencyFor", sentinel.latency_for, defaults.latency_for),
        duration(
            "noLeaderFor",
            sentinel.no_leader_for,
            defaults.no_leader_for,
        ),
        duration(
            "reconcileErrorWindow",
            sentinel.reconcile_error_window,
            defaults.reconcile_error_window,
        ),
        duration(
            "reconcileErrorsFor",
            sentinel.reconcile_errors_for,
            defaults.reconcile_errors_for,
        ),
        RuleParameter {
            sentinel: sentinel.latency_budget_ratio.to_string(),
            template: format!("{{{{ {RULE_VALUES}.latencyBudgetRatio }}}}"),
            default: defaults.latency_budget_ratio.to_string(),
        },
        RuleParameter {
            sentinel: percent(sentinel.latency_budget_ratio),
            template: format!("{{{{ round (mulf {RULE_VALUES}.latencyBudgetRatio 100) 0 }}}}%"),
            default: percent(defaults.latency_budget_ratio),
        },
        RuleParameter {
            sentinel: sentinel.reconcile_error_rate.to_string(),
            template: format!("{{{{ {RULE_VALUES}.reconcileErrorRate }}}}"),
            default: defaults.reconcile_error_rate.to_string(),
        },
        RuleParameter {
            sentinel: sentinel.expiry_warning.as_secs().to_string(),
            template: format!("{{{{ mul (int {RULE_VALUES}.expiryWarningDays) {DAY} }}}}"),
            default: defaults.expiry_warning.as_secs().to_string(),
        },
        RuleParameter {
            sentinel: monitoring::prometheus_duration(sentinel.expiry_warning),
            template: format!("{{{{ int {RULE_VALUES}.expiryWarningDays }}}}d"),
            default: monitoring::prometheus_duration(defaults.expiry_warning),
        },
        RuleParameter {
            sentinel: sentinel.runbook_base.clone(),
            template: format!("{{{{ {RULE_VALUES}.runbookBase }}}}"),
            default: defaults.runbook_base.clone(),
        },
    ]
}

/// Replaces the PrometheusRule's rules by those made with [`sentinel_parameters`], after
/// checking that the bundle's rules are [`monitoring::prometheus_rule`] with the defaults.
pub(super) fn open_rule_parameters(rule: &mut Value) -> Result<(), Error> {
    let ours = monitoring::prometheus_rule(None, &AlertParameters::default());
    if rule.get("spec") != ours.get("spec") {
        return Err(Error::ChartGenerate(
            "failed to template the PrometheusRule: the bundle's rules are not monitoring::prometheus_rule with the default parameters".to_string(),
        ));
    }
    let sentinel = monitoring::prometheus_rule(None, &sentinel_parameters());
    let text =
        serde_json::to_string(&sentinel["spec"]).map_err(|err| json_error("the rules", &err))?;
    for parameter in rule_parameters() {
        if !text.contains(&parameter.sentinel) {
            return Err(Error::ChartGenerate(format!(
                "failed to template the PrometheusRule: the rules never write `{}`",
                parameter.sentinel
            )));
        }
    }
    rule["spec"] = sentinel["spec"].clone();
    Ok(())
}

/// Replaces every sentinel in the strings of `value` by what `pick` gives for its parameter.
pub fn fill_parameters(value: &Value, pick: &impl Fn(&RuleParameter) -> String) -> Value {
    match value {
        Value::String(text) => {
            let mut text = text.clone();
            for parameter in rule_parameters() {
                text = text.replace(&parameter.sentinel, &pick(&parameter));
            }
            Value::String(text)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| fill_parameters(item, pick))
                .collect(),
        ),
        Value::Object(entries) => Value::Object(
            entries
                .iter()
                .map(|(key, item)| (key.clone(), fill_parameters(item, pick)))
                .collect(),
        ),
        other => other.clone(),
    }
}
