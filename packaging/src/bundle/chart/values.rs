//! The chart's values: each leaf with its default (read back from the CSV through
//! [`Defaults`]), its documentation and its JSON schema, and what is written from them:
//! `values.yaml`, `values.schema.json` and the README's table.

use std::time::Duration;

use initializer_crds::images::{Pin, Reference};
use initializer_crds::yaml;
use serde_json::{Map, Value, json};

use super::defaults::Defaults;
use super::rules::DAY;
use super::{CHART_NAME, GENERATED_HEADER};
use crate::error::Error;
use crate::monitoring::{self, AlertParameters};

/// One value of the chart: a leaf with its default and JSON schema, or a group of values.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// Key in `values.yaml`.
    pub name: &'static str,
    /// What it does, one paragraph (the comment in `values.yaml`, the schema's description, the
    /// README's table).
    pub doc: String,
    /// The default and schema, or the group's fields.
    pub node: Node,
}

/// What a [`Field`] holds: a default with its schema, or more fields.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A value with its default and the JSON schema it must satisfy.
    Leaf {
        /// The default, as `values.yaml` has it.
        default: Value,
        /// The JSON schema (without `description` and `default`, which are added).
        schema: Value,
    },
    /// A map of values.
    Group(Vec<Field>),
}

fn leaf(name: &'static str, doc: &str, default: Value, schema: Value) -> Field {
    Field {
        name,
        doc: doc.to_string(),
        node: Node::Leaf { default, schema },
    }
}

fn group(name: &'static str, doc: &str, fields: Vec<Field>) -> Field {
    Field {
        name,
        doc: doc.to_string(),
        node: Node::Group(fields),
    }
}

/// The chart's `appVersion`, and the tag an empty `tag` value stands for.
pub const APP_VERSION: &str = crate::bundle::generate::VERSION;

/// The `repository`, `tag` and `digest` values of an image. The tag is empty when it is the
/// chart's appVersion (the Helm convention); the digest, when set, wins over the tag (a release
/// pins every image by digest).
fn image_fields(image: &Reference) -> Vec<Field> {
    let (tag, digest) = match &image.pin {
        Pin::Tag(tag) if tag == APP_VERSION => ("", ""),
        Pin::Tag(tag) => (tag.as_str(), ""),
        Pin::Digest(digest) => ("", digest.as_str()),
    };
    vec![
        leaf(
            "repository",
            "Image repository.",
            json!(image.repository),
            json!({"type": "string", "minLength": 1}),
        ),
        leaf(
            "tag",
            "Image tag. Empty: the chart's appVersion.",
            json!(tag),
            json!({"type": "string"}),
        ),
        leaf(
            "digest",
            "Image digest (`sha256:…`). When set, the image is pulled by it and `tag` is not used.",
            json!(digest),
            json!({"type": "string", "pattern": "^(sha256:[a-f0-9]{64})?$"}),
        ),
    ]
}

/// Every value of the chart, with the defaults read from the CSV.
pub fn values(defaults: &Defaults) -> Vec<Field> {
    let quantities = json!({
        "type": "object",
        "additionalProperties": {"type": ["string", "number"]},
    });
    vec![
        leaf(
            "namespaceOverride",
            "Namespace the operator runs in. Empty: the release namespace (`helm install -n NAMESPACE`). The chart does not create it: pass `--create-namespace` or create it first.",
            json!(""),
            json!({"type": "string", "pattern": "^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$"}),
        ),
        group(
            "image",
            "The operator's image.",
            image_fields(&defaults.image)
                .into_iter()
                .chain([leaf(
                    "pullPolicy",
                    "When the kubelet pulls the image: Always, IfNotPresent or Never.",
                    json!(defaults.pull_policy),
                    json!({"type": "string", "enum": ["Always", "IfNotPresent", "Never"]}),
                )])
                .collect(),
        ),
        leaf(
            "imagePullSecrets",
            "Secrets (by name, in the operator's namespace) to pull images from a private registry.",
            json!([]),
            json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "minLength": 1}},
                    "required": ["name"],
                    "additionalProperties": false,
                },
            }),
        ),
        group(
            "presetImage",
            "Image of the built-in preset initializer, which the operator deploys for an Initializer without `spec.image`.",
            image_fields(&defaults.preset),
        ),
        leaf(
            "replicas",
            "Operator replicas. One leads at a time (a Lease); the others take over within seconds when it goes. The PodDisruptionBudget lets a drain evict one at a time.",
            json!(defaults.replicas),
            json!({"type": "integer", "minimum": 1}),
        ),
        leaf(
            "resources",
            "The operator container's requests and limits.",
            defaults.resources.clone(),
            json!({
                "type": "object",
                "properties": {"limits": quantities, "requests": quantities},
                "additionalProperties": false,
            }),
        ),
        leaf(
            "logFormat",
            "Log format: `text` (for people) or `json` (one object per line, for log collectors).",
            json!("text"),
            json!({"type": "string", "enum": ["text", "json"]}),
        ),
        leaf(
            "logLevel",
            "Log filter, as `RUST_LOG` reads it: `info`, `debug`, `info,initializer_operator=debug`.",
            json!(defaults.log_level),
            json!({"type": "string", "minLength": 1}),
        ),
        group(
            "networkPolicy",
            "A NetworkPolicy in front of every initializer's pods, admitting only the operator's pods and the API server's ranges (the book's Connections page, docs/src/security/connections.md, says what it keeps out and what it may cost).",
            vec![
                leaf(
                    "enabled",
                    "Write the policies: without `apiServerCIDRs`, admitting the API server's addresses read from the cluster, and withdrawing a policy the API server's calls are not seen passing (the operator's default, `--network-policy=auto`); with them, admitting those (`--network-policy=on`). Inert without a network plugin that enforces NetworkPolicy. `false`: none (`--network-policy=off`), and those written before are removed.",
                    json!(true),
                    json!({"type": "boolean"}),
                ),
                leaf(
                    "apiServerCIDRs",
                    "Where the API server's calls to initializers come from, in CIDR notation (`--api-server-cidrs`). A wrong range drops every review while the operator's probe still passes, and is not withdrawn: leave it empty to have the operator read the API server's addresses.",
                    json!([]),
                    json!({"type": "array", "items": {"type": "string", "pattern": "^[0-9a-fA-F:.]+/[0-9]{1,3}$"}}),
                ),
            ],
        ),
        leaf(
            "policyCanaryNamespace",
            "Where a preset's MutatingAdmissionPolicy is proven against its webhook before it takes over (the operator's `--policy-canary-namespace`): a namespace the Initializers intercept, where an administrator binds the ClusterRole `initializer-operator-policy-canary` to the operator's ServiceAccount. Empty: presets stay on the webhook.",
            json!(""),
            json!({"type": "string", "pattern": "^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$"}),
        ),
        leaf(
            "nodeSelector",
            "Node labels the operator's pods must run on.",
            json!({}),
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
        ),
        leaf(
            "tolerations",
            "Tolerations of the operator's pods.",
            json!([]),
            json!({"type": "array", "items": {"type": "object"}}),
        ),
        group(
            "metrics",
            "The operator's Prometheus metrics.",
            vec![
                leaf(
                    "port",
                    "Port of the operator's plain-HTTP listener: `/metrics`, `/healthz` and `/readyz`. The metrics Service (headless, one target per replica) reaches it by name.",
                    json!(defaults.metrics_port),
                    json!({"type": "integer", "minimum": 1, "maximum": 65535}),
                ),
                group(
                    "serviceMonitor",
                    "The ServiceMonitor (prometheus-operator) that scrapes every operator replica.",
                    vec![
                        leaf(
                            "enabled",
                            "Create it where the cluster serves monitoring.coreos.com/v1 ServiceMonitor, as `install --bundle` does. With `helm template`, pass `--api-versions monitoring.coreos.com/v1/ServiceMonitor`.",
                            json!(true),
                            json!({"type": "boolean"}),
                        ),
                        leaf(
                            "interval",
                            "Scrape interval.",
                            json!(defaults.scrape_interval),
                            duration_schema(),
                        ),
                        extra_labels_leaf(
                            "a Prometheus whose serviceMonitorSelector asks for them",
                        ),
                    ],
                ),
                group(
                    "prometheusRule",
                    "The PrometheusRule with the operator's alerts (see monitoring/runbook.md).",
                    rule_fields(),
                ),
            ],
        ),
    ]
}

fn duration_schema() -> Value {
    json!({"type": "string", "pattern": "^([0-9]+(ms|s|m|h|d|w|y))+$"})
}

fn extra_labels_leaf(for_whom: &str) -> Field {
    leaf(
        "labels",
        &format!("Extra labels on it, for {for_whom} (e.g. `release: prometheus`)."),
        json!({}),
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
    )
}

/// The PrometheusRule's values, with the defaults of [`AlertParameters::default`].
fn rule_fields() -> Vec<Field> {
    let defaults = AlertParameters::default();
    let duration = |name: &'static str, doc: &str, value: Duration| {
        leaf(
            name,
            doc,
            json!(monitoring::prometheus_duration(value)),
            duration_schema(),
        )
    };
    vec![
        leaf(
            "enabled",
            "Create it where the cluster serves monitoring.coreos.com/v1 PrometheusRule, as `install --bundle` does. With `helm template`, pass `--api-versions monitoring.coreos.com/v1/PrometheusRule`.",
            json!(true),
            json!({"type": "boolean"}),
        ),
        extra_labels_leaf("a Prometheus whose ruleSelector asks for them"),
        duration(
            "deregisteredFor",
            "InitializerDeregistered fires when an Initializer (neither suspended nor running in the API server) has been out of the admission path this long.",
            defaults.deregistered_for,
        ),
        duration(
            "degradedFor",
            "InitializerDegraded fires when a configuration has been degraded (failing open) this long.",
            defaults.degraded_for,
        ),
        duration(
            "stalledFor",
            "InitializerStalled fires when an Initializer has been refused (held back included) or in conflict with an object not the operator's this long.",
            defaults.stalled_for,
        ),
        leaf(
            "latencyBudgetRatio",
            "InitializerProbeLatencyNearBudget fires when the 99th percentile probe latency exceeds this fraction of the Initializer's latency budget...",
            json!(defaults.latency_budget_ratio),
            // `--set` passes a decimal as a string: accept both.
            json!({"anyOf": [
                {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                {"type": "string", "pattern": "^(0?\\.[0-9]*[1-9][0-9]*|1(\\.0*)?)$"},
            ]}),
        ),
        duration(
            "latencyWindow",
            "... computed over this window ...",
            defaults.latency_window,
        ),
        duration("latencyFor", "... for this long.", defaults.latency_for),
        leaf(
            "expiryWarningDays",
            "InitializerCertificateExpiringSoon fires when a serving certificate expires within this many days (the operator renews a one-year certificate with a third of its life left).",
            json!(defaults.expiry_warning.as_secs() / DAY),
            json!({"type": "integer", "minimum": 1}),
        ),
        duration(
            "noLeaderFor",
            "InitializerOperatorNoLeader fires when no replica has led this long.",
            defaults.no_leader_for,
        ),
        leaf(
            "reconcileErrorRate",
            "InitializerOperatorReconcileErrors fires when reconciles fail with one error faster than this many per second...",
            json!(defaults.reconcile_error_rate),
            json!({"anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {"type": "string", "pattern": "^[0-9]*\\.?[0-9]+$"},
            ]}),
        ),
        duration(
            "reconcileErrorWindow",
            "... computed over this window ...",
            defaults.reconcile_error_window,
        ),
        duration(
            "reconcileErrorsFor",
            "... for this long.",
            defaults.reconcile_errors_for,
        ),
        leaf(
            "runbookBase",
            "Base of each alert's runbook_url (the alert's name, lowercase, is appended as `#anchor`).",
            json!(defaults.runbook_base),
            json!({"type": "string", "pattern": "^https?://[^\\s'\"]+$"}),
        ),
    ]
}

/// `values.yaml`: every value with its default, each after its description as a comment.
pub fn values_yaml(fields: &[Field]) -> Result<String, Error> {
    let mut text = format!(
        "{GENERATED_HEADER}\n# Every value is checked by values.schema.json: `helm install` and `helm template` refuse\n# a wrong one and name it.\n"
    );
    write_values(fields, 0, &mut text)?;
    Ok(text)
}

fn write_values(fields: &[Field], indent: usize, text: &mut String) -> Result<(), Error> {
    let pad = " ".repeat(indent);
    for field in fields {
        if indent == 0 {
            text.push('\n');
        }
        for line in wrap(&field.doc, 96 - indent - 2) {
            text.push_str(&format!("{pad}# {line}\n"));
        }
        match &field.node {
            Node::Group(children) => {
                text.push_str(&format!("{pad}{}:\n", field.name));
                write_values(children, indent + 2, text)?;
            }
            Node::Leaf { default, .. } => {
                let yaml = yaml::to_string(default).map_err(|err| {
                    Error::ChartGenerate(format!("failed to serialize a default: {err}"))
                })?;
                let nested = match default {
                    Value::Object(map) => !map.is_empty(),
                    Value::Array(items) => !items.is_empty(),
                    _ => false,
                };
                if nested {
                    text.push_str(&format!("{pad}{}:\n", field.name));
                    for line in yaml.lines() {
                        text.push_str(&format!("{pad}  {line}\n"));
                    }
                } else {
                    text.push_str(&format!("{pad}{}: {}\n", field.name, yaml.trim_end()));
                }
            }
        }
    }
    Ok(())
}

/// Words of `text` in lines of at most `width` characters (a longer word gets its own line).
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// `values.schema.json`: a JSON schema of every value; unknown keys are refused, so a typo is
/// named instead of silently ignored.
pub fn values_schema(fields: &[Field]) -> Value {
    let mut schema = group_schema(fields);
    if let Value::Object(map) = &mut schema {
        map.insert(
            "$schema".to_string(),
            json!("https://json-schema.org/draft-07/schema#"),
        );
        map.insert(
            "title".to_string(),
            json!(format!("Values of the {CHART_NAME} chart")),
        );
    }
    schema
}

fn group_schema(fields: &[Field]) -> Value {
    let mut properties = Map::new();
    for field in fields {
        let mut schema = match &field.node {
            Node::Group(children) => group_schema(children),
            Node::Leaf { default, schema } => {
                let mut schema = schema.clone();
                if let Value::Object(map) = &mut schema {
                    map.insert("default".to_string(), default.clone());
                }
                schema
            }
        };
        if let Value::Object(map) = &mut schema {
            map.insert("description".to_string(), json!(field.doc));
        }
        properties.insert(field.name.to_string(), schema);
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": fields.iter().map(|field| field.name).collect::<Vec<_>>(),
        "additionalProperties": false,
    })
}

/// Every leaf as (dotted path, default, description), in `values.yaml` order.
pub fn leaves(fields: &[Field]) -> Vec<(String, Value, String)> {
    let mut out = Vec::new();
    for field in fields {
        match &field.node {
            Node::Leaf { default, .. } => {
                out.push((field.name.to_string(), default.clone(), field.doc.clone()));
            }
            Node::Group(children) => {
                for (path, default, doc) in leaves(children) {
                    out.push((format!("{}.{path}", field.name), default, doc));
                }
            }
        }
    }
    out
}
