//! Holes: the places in the chart's objects where a value goes. An object carries a hole as a
//! token string ([`Hole::token`]); [`render_template`] writes it as Helm template text and
//! [`fill_holes`] fills it with values (the unit tests fill it with the defaults).

use initializer_crds::{constants, yaml};
use serde_json::{Map, Value};

use super::HELPER;
use super::defaults::{API_SERVER_CIDRS_ENV, LOG_JSON_ENV, NETWORK_POLICY_ENV, POLICY_CANARY_ENV};
use super::rules::rule_parameters;
use crate::error::Error;

/// A place in an object where a value of the chart goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hole {
    /// Every `metadata.namespace` and binding subject: the release namespace or the override.
    Namespace,
    /// The chart's standard labels, added to every object's labels.
    Labels,
    /// The Deployment's `replicas`.
    Replicas,
    /// The operator container's image.
    Image,
    /// The operator container's `imagePullPolicy`.
    PullPolicy,
    /// The preset initializer's image, an argument of the operator.
    PresetImage,
    /// The operator container's requests and limits.
    Resources,
    /// The value of `RUST_LOG`, the operator's log filter.
    LogLevel,
    /// `LOG_JSON`, present only with `logFormat: json`.
    LogFormat,
    /// `NETWORK_POLICY`: `off` without `networkPolicy.enabled`; `on` with
    /// `networkPolicy.apiServerCIDRs`, beside `API_SERVER_CIDRS`; else absent (the operator's
    /// default, `auto`).
    NetworkPolicy,
    /// `POLICY_CANARY_NAMESPACE`, present only with `policyCanaryNamespace` set.
    PolicyCanary,
    /// `METRICS_ADDR`: the pod IP and the metrics port.
    MetricsAddr,
    /// The container port of the health and metrics listener.
    MetricsPort,
    /// Optional pod fields: `imagePullSecrets`, `nodeSelector`, `tolerations`.
    PodScheduling,
    /// The ServiceMonitor's scrape interval.
    ScrapeInterval,
    /// Extra labels on the ServiceMonitor.
    ServiceMonitorLabels,
    /// Extra labels on the PrometheusRule.
    RuleLabels,
}

/// Every hole, in a fixed order.
pub const HOLES: [Hole; 17] = [
    Hole::Namespace,
    Hole::Labels,
    Hole::Replicas,
    Hole::Image,
    Hole::PullPolicy,
    Hole::PresetImage,
    Hole::Resources,
    Hole::LogLevel,
    Hole::LogFormat,
    Hole::NetworkPolicy,
    Hole::PolicyCanary,
    Hole::MetricsAddr,
    Hole::MetricsPort,
    Hole::PodScheduling,
    Hole::ScrapeInterval,
    Hole::ServiceMonitorLabels,
    Hole::RuleLabels,
];

/// How a hole is written in a template.
enum Shape {
    /// The quoted token is replaced in place by a template expression.
    Inline(String),
    /// The line holding the token (as a map key, a list item or a map value) is replaced by
    /// lines made for the line's indentation.
    Block(fn(usize) -> Vec<String>),
}

impl Hole {
    /// The string that marks the hole in an object before it is written as a template.
    pub fn token(self) -> String {
        format!("@@{self:?}@@")
    }

    fn shape(self) -> Shape {
        let inline = |text: String| Shape::Inline(text);
        match self {
            Hole::Namespace => inline(format!("{{{{ include \"{HELPER}.namespace\" . }}}}")),
            Hole::Labels => Shape::Block(|indent| {
                vec![format!(
                    "{{{{- include \"{HELPER}.labels\" . | nindent {indent} }}}}"
                )]
            }),
            Hole::Replicas => inline("{{ int .Values.replicas }}".to_string()),
            Hole::Image => inline(format!("{{{{ include \"{HELPER}.image\" . | quote }}}}")),
            Hole::PullPolicy => inline("{{ .Values.image.pullPolicy }}".to_string()),
            Hole::PresetImage => inline(format!(
                "{{{{ include \"{HELPER}.presetImage\" . | quote }}}}"
            )),
            Hole::Resources => Shape::Block(|indent| {
                vec![format!(
                    "{{{{- toYaml .Values.resources | nindent {indent} }}}}"
                )]
            }),
            Hole::LogLevel => inline("{{ .Values.logLevel | quote }}".to_string()),
            Hole::LogFormat => Shape::Block(|_| {
                vec![
                    "{{- if eq .Values.logFormat \"json\" }}".to_string(),
                    format!("- name: {LOG_JSON_ENV}"),
                    "  value: \"true\"".to_string(),
                    "{{- end }}".to_string(),
                ]
            }),
            // Enabled with ranges: those (`on`); without: nothing, so the operator's default
            // (`auto`) reads the API server's own and withdraws a policy its calls are not seen
            // passing, and the defaults render what the bundle carries.
            Hole::NetworkPolicy => Shape::Block(|_| {
                vec![
                    "{{- if not .Values.networkPolicy.enabled }}".to_string(),
                    format!("- name: {NETWORK_POLICY_ENV}"),
                    "  value: \"off\"".to_string(),
                    "{{- else if .Values.networkPolicy.apiServerCIDRs }}".to_string(),
                    format!("- name: {NETWORK_POLICY_ENV}"),
                    "  value: \"on\"".to_string(),
                    format!("- name: {API_SERVER_CIDRS_ENV}"),
                    "  value: {{ join \",\" .Values.networkPolicy.apiServerCIDRs | quote }}"
                        .to_string(),
                    "{{- end }}".to_string(),
                ]
            }),
            Hole::PolicyCanary => Shape::Block(|_| {
                vec![
                    "{{- with .Values.policyCanaryNamespace }}".to_string(),
                    format!("- name: {POLICY_CANARY_ENV}"),
                    "  value: {{ . | quote }}".to_string(),
                    "{{- end }}".to_string(),
                ]
            }),
            Hole::MetricsAddr => inline(format!(
                "{{{{ printf \"$({}):%d\" (int .Values.metrics.port) | quote }}}}",
                constants::POD_IP_ENV
            )),
            Hole::MetricsPort => inline("{{ int .Values.metrics.port }}".to_string()),
            Hole::PodScheduling => Shape::Block(|indent| {
                ["imagePullSecrets", "nodeSelector", "tolerations"]
                    .into_iter()
                    .flat_map(|field| {
                        [
                            format!("{{{{- with .Values.{field} }}}}"),
                            format!("{field}:"),
                            format!("  {{{{- toYaml . | nindent {} }}}}", indent + 2),
                            "{{- end }}".to_string(),
                        ]
                    })
                    .collect()
            }),
            Hole::ScrapeInterval => {
                inline("{{ .Values.metrics.serviceMonitor.interval | quote }}".to_string())
            }
            Hole::ServiceMonitorLabels => {
                Shape::Block(|indent| extra_labels("metrics.serviceMonitor.labels", indent))
            }
            Hole::RuleLabels => {
                Shape::Block(|indent| extra_labels("metrics.prometheusRule.labels", indent))
            }
        }
    }
}

/// Lines adding the labels of a map value to a labels map at `indent`.
fn extra_labels(value: &str, indent: usize) -> Vec<String> {
    vec![
        format!("{{{{- with .Values.{value} }}}}"),
        format!("{{{{- toYaml . | nindent {indent} }}}}"),
        "{{- end }}".to_string(),
    ]
}

/// Fills every hole of `value` with what `fill` gives for it: tokens as values are replaced,
/// token keys are replaced by the entries of the filling, token list items by its items.
pub fn fill_holes(value: &Value, fill: &impl Fn(Hole) -> Value) -> Value {
    let hole_of = |text: &str| HOLES.into_iter().find(|hole| hole.token() == text);
    match value {
        Value::String(text) => hole_of(text).map_or_else(|| value.clone(), fill),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .flat_map(|item| match item.as_str().and_then(hole_of) {
                    Some(hole) => match fill(hole) {
                        Value::Array(filled) => filled,
                        other => vec![other],
                    },
                    None => vec![fill_holes(item, fill)],
                })
                .collect(),
        ),
        Value::Object(entries) => {
            let mut filled = Map::new();
            for (key, item) in entries {
                match hole_of(key) {
                    Some(hole) => {
                        if let Value::Object(added) = fill(hole) {
                            filled.extend(added);
                        }
                    }
                    None => {
                        filled.insert(key.clone(), fill_holes(item, fill));
                    }
                }
            }
            Value::Object(filled)
        }
        other => other.clone(),
    }
}

/// Writes `object` as a template: YAML whose hole tokens become template text.
pub fn render_template(object: &Value) -> Result<String, Error> {
    let yaml = yaml::to_string(object)
        .map_err(|err| Error::ChartGenerate(format!("failed to serialize an object: {err}")))?;
    // Literal braces (the alerts' own `{{ $labels.x }}` templates) are printed by Helm as text.
    let yaml = yaml.replace("{{", "{{ \"{{\" }}");
    let mut lines = Vec::new();
    for line in yaml.lines() {
        lines.extend(render_line(line));
    }
    let mut text = lines.join("\n");
    for parameter in rule_parameters() {
        text = text.replace(&parameter.sentinel, &parameter.template);
    }
    if let Some(at) = text.find("@@") {
        return Err(Error::ChartGenerate(format!(
            "failed to template an object: a hole was left open near `{}`",
            text[at..].chars().take(40).collect::<String>()
        )));
    }
    Ok(text + "\n")
}

/// One line of an object's YAML, with its hole (if any) replaced.
fn render_line(line: &str) -> Vec<String> {
    let indent = line.len() - line.trim_start().len();
    let pad = " ".repeat(indent);
    for hole in HOLES {
        // The emitter double-quotes a token (`@` cannot start a plain scalar).
        let quoted = format!("\"{}\"", hole.token());
        if !line.contains(&quoted) {
            continue;
        }
        let trimmed = line.trim_start();
        return match hole.shape() {
            Shape::Inline(text) => vec![line.replace(&quoted, &text)],
            Shape::Block(lines) => {
                let (head, at) =
                    if trimmed == format!("- {quoted}") || trimmed == format!("{quoted}: \"\"") {
                        (None, indent)
                    } else if let Some(key) = trimmed.strip_suffix(&format!(" {quoted}")) {
                        (Some(format!("{pad}{key}")), indent + 2)
                    } else {
                        return vec![line.to_string()];
                    };
                let at_pad = " ".repeat(at);
                head.into_iter()
                    .chain(lines(at).into_iter().map(|text| format!("{at_pad}{text}")))
                    .collect()
            }
        };
    }
    vec![line.to_string()]
}
