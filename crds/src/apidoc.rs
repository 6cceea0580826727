//! The API reference (`docs/api.md`), rendered from the `Initializer` CustomResourceDefinition
//! that `crdgen` prints: every field of the spec and the status with its type, whether it is
//! required, its default, its range, length, item count or enum, and the CEL rules that guard it
//! with their messages. Nothing is listed by hand: a field added to the types shows up here after
//! `make generate`, and `make verify-generated` fails until it does.
//!
//! Kubernetes types embedded whole (a container, an environment variable, a label selector, a
//! condition…) are not expanded: their row links to the Kubernetes API reference. They are
//! recognised by their schema, which must have exactly the properties of the k8s-openapi type
//! ([`EMBEDDED`]); a schema that differs is expanded field by field.
//!
//! [`render`] is pure and deterministic: properties come out sorted by name.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use schemars::JsonSchema;
use serde_json::Value;

/// The Kubernetes minor version whose API reference the embedded types link to: the version of
/// the types the CRD embeds (k8s-openapi's newest, which crdgen is built with).
pub const KUBERNETES_REFERENCE: &str = "v1.37";

/// A Kubernetes type embedded in the schema, recognised by its properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddedType {
    /// Short name (`EnvVar`).
    pub name: String,
    /// Anchor in the Kubernetes API reference (`envvar-v1-core`).
    pub anchor: String,
    /// Its property names, from k8s-openapi's schema.
    pub properties: BTreeSet<String>,
}

impl EmbeddedType {
    /// The type's schema, from k8s-openapi's `JsonSchema` implementation.
    fn of<T: JsonSchema>() -> Self {
        let schema = schemars::schema_for!(T);
        let full_name = T::schema_name();
        Self {
            name: full_name
                .rsplit('.')
                .next()
                .unwrap_or(&full_name)
                .to_string(),
            anchor: anchor(&full_name),
            properties: property_names(schema.as_value()),
        }
    }

    /// Markdown link to the type in the Kubernetes API reference.
    pub fn link(&self) -> String {
        format!(
            "[{}](https://kubernetes.io/docs/reference/generated/kubernetes-api/{KUBERNETES_REFERENCE}/#{})",
            self.name, self.anchor
        )
    }
}

/// The Kubernetes types the Initializer embeds whole, linked rather than expanded.
pub fn embedded() -> Vec<EmbeddedType> {
    use k8s_openapi::api::core::v1::{
        Container, EnvVar, ResourceRequirements, Volume, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
    vec![
        EmbeddedType::of::<Condition>(),
        EmbeddedType::of::<Container>(),
        EmbeddedType::of::<EnvVar>(),
        EmbeddedType::of::<LabelSelector>(),
        EmbeddedType::of::<ResourceRequirements>(),
        EmbeddedType::of::<Volume>(),
        EmbeddedType::of::<VolumeMount>(),
    ]
}

/// Names [`embedded`] covers, for the module documentation's reader.
pub const EMBEDDED: [&str; 7] = [
    "Condition",
    "Container",
    "EnvVar",
    "LabelSelector",
    "ResourceRequirements",
    "Volume",
    "VolumeMount",
];

/// `io.k8s.api.core.v1.EnvVar` → `envvar-v1-core`; `io.k8s.apimachinery.pkg.apis.meta.v1.X` →
/// `x-v1-meta`.
fn anchor(full_name: &str) -> String {
    let parts: Vec<&str> = full_name.split('.').collect();
    match parts.as_slice() {
        [.., group, version, kind] => {
            format!("{}-{version}-{group}", kind.to_ascii_lowercase())
        }
        _ => full_name.to_ascii_lowercase(),
    }
}

fn property_names(schema: &Value) -> BTreeSet<String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// One documented field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Dotted path from the object root (`spec.rules[].apiGroups`).
    pub path: String,
    /// Rendered type (`integer (int32)`, `[]string`, a link for an embedded Kubernetes type).
    pub type_: String,
    /// Whether the parent requires it.
    pub required: bool,
    /// The default, as JSON.
    pub default: Option<String>,
    /// Range, length, item count, enum, pattern, and CEL messages.
    pub validation: Vec<String>,
    /// The field's description, on one line.
    pub description: String,
}

/// A CEL rule on a field (`x-kubernetes-validations`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CelRule {
    /// The path of the field it guards (`spec`, `spec.rules[]`).
    pub path: String,
    /// The CEL expression.
    pub rule: String,
    /// The message the API server returns when it is false.
    pub message: String,
}

/// Every field below `schema` (an object schema), depth first, sorted by name; `prefix` is the
/// path of `schema` itself.
pub fn fields(schema: &Value, prefix: &str, types: &[EmbeddedType]) -> Vec<Field> {
    let mut out = Vec::new();
    collect_fields(schema, prefix, types, &mut out);
    out
}

fn collect_fields(schema: &Value, prefix: &str, types: &[EmbeddedType], out: &mut Vec<Field>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: BTreeSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = properties.keys().collect();
    names.sort();
    for name in names {
        let node = &properties[name];
        let path = format!("{prefix}.{name}");
        out.push(Field {
            path: path.clone(),
            type_: type_name(node, types),
            required: required.contains(name.as_str()),
            default: node.get("default").map(Value::to_string),
            validation: validation(node),
            description: one_line(node.get("description").and_then(Value::as_str)),
        });
        descend(node, &path, types, out);
    }
}

/// Into an object's properties, an array's items or a map's values, unless they are an embedded
/// Kubernetes type.
fn descend(node: &Value, path: &str, types: &[EmbeddedType], out: &mut Vec<Field>) {
    if embedded_type(node, types).is_some() {
        return;
    }
    if let Some(items) = node.get("items") {
        descend(items, &format!("{path}[]"), types, out);
    } else if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        descend(values, &format!("{path}{{}}"), types, out);
    } else {
        collect_fields(node, path, types, out);
    }
}

fn embedded_type<'a>(node: &Value, types: &'a [EmbeddedType]) -> Option<&'a EmbeddedType> {
    let properties = property_names(node);
    if properties.is_empty() {
        return None;
    }
    types.iter().find(|t| t.properties == properties)
}

/// The type as a reader wants it: `[]string`, `map[string]string`, `integer (int32)`, `object`,
/// or a link for an embedded Kubernetes type.
pub fn type_name(node: &Value, types: &[EmbeddedType]) -> String {
    if let Some(t) = embedded_type(node, types) {
        return t.link();
    }
    if node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "int or string".to_string();
    }
    if node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return "any".to_string();
    }
    let base = node.get("type").and_then(Value::as_str).unwrap_or("any");
    match base {
        "array" => format!(
            "[]{}",
            node.get("items")
                .map_or_else(|| "any".to_string(), |items| type_name(items, types))
        ),
        "object" => match node.get("additionalProperties").filter(|v| v.is_object()) {
            Some(values) => format!("map[string]{}", type_name(values, types)),
            None => "object".to_string(),
        },
        _ => match node.get("format").and_then(Value::as_str) {
            Some(format) => format!("{base} ({format})"),
            None => base.to_string(),
        },
    }
}

/// Range, length, item count, enum, pattern and CEL messages of one node; an array's scalar
/// items add theirs prefixed with "each".
pub fn validation(node: &Value) -> Vec<String> {
    let mut out = constraints(node);
    if let Some(items) = node.get("items")
        && items.get("properties").is_none()
    {
        out.extend(
            constraints(items)
                .into_iter()
                .map(|constraint| format!("each {constraint}")),
        );
    }
    if let Some(items) = node.get("items") {
        out.extend(
            cel(items)
                .into_iter()
                .map(|(_, message)| format!("each item, CEL: {message}")),
        );
    }
    out.extend(
        cel(node)
            .into_iter()
            .map(|(_, message)| format!("CEL: {message}")),
    );
    out
}

fn constraints(node: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let number = |key: &str| node.get(key).map(number_text);
    match (number("minimum"), number("maximum")) {
        (Some(min), Some(max)) => out.push(format!("{min} to {max}")),
        (Some(min), None) => out.push(format!("at least {min}")),
        (None, Some(max)) => out.push(format!("at most {max}")),
        (None, None) => {}
    }
    for (min_key, max_key, unit) in [
        ("minLength", "maxLength", "characters"),
        ("minItems", "maxItems", "items"),
        ("minProperties", "maxProperties", "entries"),
    ] {
        match (number(min_key), number(max_key)) {
            (Some(min), Some(max)) => out.push(format!("{min} to {max} {unit}")),
            (Some(min), None) => out.push(format!("at least {min} {unit}")),
            (None, Some(max)) => out.push(format!("at most {max} {unit}")),
            (None, None) => {}
        }
    }
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .map(|value| match value.as_str() {
                Some(text) => format!("`{text}`"),
                None => format!("`{value}`"),
            })
            .collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    if let Some(pattern) = node.get("pattern").and_then(Value::as_str) {
        out.push(format!("matches `{pattern}`"));
    }
    out
}

/// A JSON number as written in a spec: schemars writes integer bounds as floats (`1.0`).
fn number_text(value: &Value) -> String {
    match value.as_f64() {
        Some(n) if n.fract() == 0.0 && n.abs() < 1e15 => format!("{n:.0}"),
        _ => value.to_string(),
    }
}

/// `(rule, message)` of each `x-kubernetes-validations` entry.
fn cel(node: &Value) -> Vec<(String, String)> {
    node.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .map(|rule| {
                    let text = |key: &str| {
                        rule.get(key)
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string()
                    };
                    let message = match text("message") {
                        message if message.is_empty() => text("messageExpression"),
                        message => message,
                    };
                    (text("rule"), message)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every CEL rule below (and on) `schema`, with the path of the node it sits on.
pub fn cel_rules(schema: &Value, path: &str) -> Vec<CelRule> {
    let mut out = Vec::new();
    collect_cel(schema, path, &mut out);
    out
}

fn collect_cel(node: &Value, path: &str, out: &mut Vec<CelRule>) {
    out.extend(cel(node).into_iter().map(|(rule, message)| CelRule {
        path: path.to_string(),
        rule,
        message,
    }));
    if let Some(items) = node.get("items") {
        collect_cel(items, &format!("{path}[]"), out);
    }
    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        collect_cel(values, &format!("{path}{{}}"), out);
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        let mut names: Vec<&String> = properties.keys().collect();
        names.sort();
        for name in names {
            collect_cel(&properties[name], &format!("{path}.{name}"), out);
        }
    }
}

fn one_line(text: Option<&str>) -> String {
    text.unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Escapes what would break a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn table(out: &mut String, rows: &[Field]) {
    out.push_str("| Field | Type | Required | Default | Validation | Description |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for row in rows {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} |",
            row.path,
            cell(&row.type_),
            if row.required { "yes" } else { "" },
            row.default
                .as_deref()
                .map(|default| format!("`{}`", cell(default)))
                .unwrap_or_default(),
            cell(&row.validation.join("; ")),
            cell(&row.description),
        );
    }
}

/// Renders the reference for the CRD (as JSON: what `crdgen` prints, parsed). Errors name what
/// the CRD lacks.
pub fn render(crd: &Value) -> Result<String, String> {
    let spec = crd
        .get("spec")
        .ok_or("failed to render the API reference: the CRD has no spec")?;
    let kind = spec
        .pointer("/names/kind")
        .and_then(Value::as_str)
        .ok_or("failed to render the API reference: the CRD has no spec.names.kind")?;
    let group = spec.get("group").and_then(Value::as_str).unwrap_or("");
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .filter(|versions| !versions.is_empty())
        .ok_or("failed to render the API reference: the CRD has no versions")?;
    let types = embedded();
    let mut out = String::new();
    let _ = writeln!(out, "# API reference: {kind}\n");
    out.push_str(
        "<!-- Generated by `cargo run -p initializer-crds --bin apidoc` from the \
         CustomResourceDefinition that crdgen prints; do not edit. -->\n\n",
    );
    for version in versions {
        let name = version.get("name").and_then(Value::as_str).unwrap_or("");
        let schema = version.pointer("/schema/openAPIV3Schema").ok_or_else(|| {
            format!("failed to render the API reference: version {name} has no schema")
        })?;
        let _ = writeln!(out, "## {group}/{name}\n");
        let description = one_line(schema.get("description").and_then(Value::as_str));
        if !description.is_empty() {
            let _ = writeln!(out, "{description}\n");
        }
        let scope = spec.get("scope").and_then(Value::as_str).unwrap_or("");
        let plural = spec
            .pointer("/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("");
        let list = |pointer: &str| {
            spec.pointer(pointer)
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|item| format!("`{item}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        let _ = writeln!(out, "- Scope: {scope}");
        let _ = writeln!(out, "- Resource: `{plural}`");
        let short = list("/names/shortNames");
        if !short.is_empty() {
            let _ = writeln!(out, "- Short names: {short}");
        }
        let categories = list("/names/categories");
        if !categories.is_empty() {
            let _ = writeln!(out, "- Categories: {categories}");
        }
        let served = version.get("served") == Some(&Value::Bool(true));
        let storage = version.get("storage") == Some(&Value::Bool(true));
        let _ = writeln!(
            out,
            "- Served: {}, storage version: {}",
            if served { "yes" } else { "no" },
            if storage { "yes" } else { "no" }
        );
        if let Some(subresources) = version.get("subresources").and_then(Value::as_object) {
            let names: Vec<String> = subresources.keys().map(|k| format!("`{k}`")).collect();
            let _ = writeln!(out, "- Subresources: {}", names.join(", "));
        }
        out.push('\n');
        if let Some(columns) = version
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
        {
            out.push_str("### Printer columns (`kubectl get`)\n\n");
            out.push_str("| Name | Type | JSONPath | Description |\n|---|---|---|---|\n");
            for column in columns {
                let text = |key: &str| column.get(key).and_then(Value::as_str).unwrap_or("");
                let _ = writeln!(
                    out,
                    "| {} | {} | `{}` | {} |",
                    cell(text("name")),
                    cell(text("type")),
                    cell(text("jsonPath")),
                    cell(&one_line(Some(text("description")))),
                );
            }
            out.push('\n');
        }
        let mut rules = Vec::new();
        for top in ["spec", "status"] {
            let Some(node) = schema.pointer(&format!("/properties/{top}")) else {
                continue;
            };
            let _ = writeln!(out, "### {top}\n");
            let description = one_line(node.get("description").and_then(Value::as_str));
            if !description.is_empty() {
                let _ = writeln!(out, "{description}\n");
            }
            for (_, message) in cel(node) {
                let _ = writeln!(out, "- CEL: {message}");
            }
            if !cel(node).is_empty() {
                out.push('\n');
            }
            table(&mut out, &fields(node, top, &types));
            out.push('\n');
            rules.extend(cel_rules(node, top));
        }
        if !rules.is_empty() {
            out.push_str("### CEL validation rules\n\n");
            out.push_str(
                "The API server evaluates these on every create and update and refuses the \
                 object with the message when a rule is false.\n\n",
            );
            for rule in rules {
                let _ = writeln!(
                    out,
                    "#### `{}`\n\nMessage: {}\n\n```cel\n{}\n```\n",
                    rule.path, rule.message, rule.rule
                );
            }
        }
        out.push_str("### Embedded Kubernetes types\n\n");
        out.push_str(
            "Fields of these types are not expanded here; their schema is the Kubernetes one:\n\n",
        );
        for t in &types {
            let _ = writeln!(out, "- {}", t.link());
        }
    }
    Ok(out)
}

/// The reference of the `Initializer` CRD, exactly as committed in `docs/api.md`.
pub fn initializer_reference() -> Result<String, String> {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(crate::Initializer::crd())
        .map_err(|err| format!("failed to serialize the CRD: {err}"))?;
    render(&crd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(spec_schema: Value) -> Value {
        json!({
            "spec": {
                "group": "example.dev",
                "scope": "Cluster",
                "names": {"kind": "Thing", "plural": "things", "shortNames": ["th"]},
                "versions": [{
                    "name": "v1",
                    "served": true,
                    "storage": true,
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "description": "A thing.",
                        "properties": {"spec": spec_schema}
                    }}
                }]
            }
        })
    }

    fn row<'a>(rows: &'a [Field], path: &str) -> &'a Field {
        rows.iter()
            .find(|row| row.path == path)
            .unwrap_or_else(|| panic!("no row {path} in {rows:#?}"))
    }

    #[test]
    fn a_field_shows_its_type_default_range_and_whether_it_is_required() {
        let spec = json!({
            "type": "object",
            "required": ["replicas"],
            "properties": {
                "replicas": {"type": "integer", "format": "int32", "default": 2,
                             "minimum": 1, "maximum": 10, "description": "How many\n pods."},
                "mode": {"type": "string", "enum": ["Fail", "Ignore"], "default": "Fail"},
                "image": {"type": "string", "minLength": 1, "maxLength": 512},
            }
        });
        let rows = fields(&spec, "spec", &[]);
        let replicas = row(&rows, "spec.replicas");
        assert_eq!(replicas.type_, "integer (int32)");
        assert!(replicas.required);
        assert_eq!(replicas.default.as_deref(), Some("2"));
        assert_eq!(replicas.validation, vec!["1 to 10"]);
        let float_bounds = json!({"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 1.0, "maximum": 2.5}
        }});
        assert_eq!(
            fields(&float_bounds, "spec", &[])[0].validation,
            vec!["1 to 2.5"]
        );
        assert_eq!(replicas.description, "How many pods.");
        let mode = row(&rows, "spec.mode");
        assert!(!mode.required);
        assert_eq!(mode.default.as_deref(), Some("\"Fail\""));
        assert_eq!(mode.validation, vec!["one of `Fail`, `Ignore`"]);
        assert_eq!(
            row(&rows, "spec.image").validation,
            vec!["1 to 512 characters"]
        );
    }

    #[test]
    fn arrays_and_maps_are_descended_with_their_item_constraints() {
        let spec = json!({
            "type": "object",
            "properties": {
                "rules": {"type": "array", "minItems": 1, "maxItems": 16, "items": {
                    "type": "object",
                    "x-kubernetes-validations": [{"rule": "self.x != 'y'", "message": "x must not be y"}],
                    "properties": {"groups": {"type": "array", "items": {"type": "string", "maxLength": 253}}}
                }},
                "details": {"type": "object", "additionalProperties": {"type": "string"}},
            }
        });
        let rows = fields(&spec, "spec", &[]);
        let rules = row(&rows, "spec.rules");
        assert_eq!(rules.type_, "[]object");
        assert_eq!(
            rules.validation,
            vec!["1 to 16 items", "each item, CEL: x must not be y"]
        );
        let groups = row(&rows, "spec.rules[].groups");
        assert_eq!(groups.type_, "[]string");
        assert_eq!(groups.validation, vec!["each at most 253 characters"]);
        assert_eq!(row(&rows, "spec.details").type_, "map[string]string");
    }

    #[test]
    fn an_embedded_kubernetes_type_is_linked_and_not_expanded() {
        let types = embedded();
        let env_var = types.iter().find(|t| t.name == "EnvVar").unwrap();
        assert_eq!(env_var.anchor, "envvar-v1-core");
        let selector = types.iter().find(|t| t.name == "LabelSelector").unwrap();
        assert_eq!(selector.anchor, "labelselector-v1-meta");
        let spec = json!({
            "type": "object",
            "properties": {
                "env": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "value": {"type": "string"},
                    "valueFrom": {"type": "object", "properties": {"x": {"type": "string"}}}
                }}},
            }
        });
        let rows = fields(&spec, "spec", &types);
        assert_eq!(rows.len(), 1, "{rows:#?}");
        assert!(
            rows[0]
                .type_
                .starts_with("[][EnvVar](https://kubernetes.io/")
        );
        assert!(rows[0].type_.ends_with("#envvar-v1-core)"));
    }

    #[test]
    fn a_schema_that_differs_from_the_kubernetes_type_is_expanded() {
        let spec = json!({
            "type": "object",
            "properties": {"env": {"type": "object", "properties": {
                "name": {"type": "string"}, "value": {"type": "string"}
            }}}
        });
        let rows = fields(&spec, "spec", &embedded());
        assert_eq!(row(&rows, "spec.env").type_, "object");
        assert_eq!(row(&rows, "spec.env.name").type_, "string");
    }

    #[test]
    fn cel_rules_are_listed_with_their_path_rule_and_message() {
        let doc = render(&crd(json!({
            "type": "object",
            "x-kubernetes-validations": [{"rule": "has(self.a) || has(self.b)", "message": "a or b is required"}],
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}}
        })))
        .unwrap();
        assert!(doc.contains("- CEL: a or b is required"), "{doc}");
        assert!(
            doc.contains(
                "#### `spec`\n\nMessage: a or b is required\n\n```cel\nhas(self.a) || has(self.b)\n```"
            ),
            "{doc}"
        );
    }

    #[test]
    fn pipes_in_a_cell_are_escaped() {
        let doc = render(&crd(json!({
            "type": "object",
            "properties": {"a": {"type": "string", "description": "this | that"}}
        })))
        .unwrap();
        assert!(doc.contains("this \\| that"), "{doc}");
    }

    #[test]
    fn a_crd_without_versions_is_refused_with_a_clear_error() {
        let err =
            render(&json!({"spec": {"names": {"kind": "Thing"}, "versions": []}})).unwrap_err();
        assert!(err.starts_with("failed to render"), "{err}");
        assert!(err.contains("no versions"), "{err}");
    }

    #[test]
    fn every_field_of_the_initializer_schema_has_a_row_unless_inside_an_embedded_type() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(crate::Initializer::crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let doc = render(&crd).unwrap();
        let types = embedded();
        // Every leaf path the schema has, cut at the embedded types.
        fn paths(node: &Value, path: &str, types: &[EmbeddedType], out: &mut Vec<String>) {
            if embedded_type(node, types).is_some() {
                return;
            }
            if let Some(items) = node.get("items") {
                return paths(items, &format!("{path}[]"), types, out);
            }
            if let Some(properties) = node.get("properties").and_then(Value::as_object) {
                for (name, child) in properties {
                    let child_path = format!("{path}.{name}");
                    out.push(child_path.clone());
                    paths(child, &child_path, types, out);
                }
            }
        }
        let mut all = Vec::new();
        for top in ["spec", "status"] {
            paths(&schema["properties"][top], top, &types, &mut all);
        }
        assert!(all.len() > 60, "the walk found only {} fields", all.len());
        for path in all {
            assert!(
                doc.contains(&format!("| `{path}` |")),
                "{path} is not documented"
            );
        }
    }

    #[test]
    fn the_initializer_reference_carries_the_protected_rule_and_defaults() {
        let doc = initializer_reference().unwrap();
        assert!(doc.contains(&format!(
            "each item, CEL: rules must not intercept {}",
            crate::PROTECTED_SUMMARY
        )));
        assert!(doc.contains(&format!(
            "Message: rules must not intercept {}",
            crate::PROTECTED_SUMMARY
        )));
        let replicas = doc
            .lines()
            .find(|line| line.starts_with("| `spec.replicas` |"))
            .unwrap();
        assert!(replicas.contains("| `2` |"), "{replicas}");
        assert!(replicas.contains("1 to 10"), "{replicas}");
        for name in EMBEDDED {
            assert!(
                doc.contains(&format!("- [{name}](")),
                "{name} is not listed"
            );
        }
    }

    #[test]
    fn rendering_twice_gives_identical_bytes() {
        assert_eq!(
            initializer_reference().unwrap(),
            initializer_reference().unwrap()
        );
    }

    #[test]
    fn committed_api_reference_matches_the_generated_one() {
        let committed = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md"),
        )
        .unwrap();
        assert!(
            committed == initializer_reference().unwrap(),
            "docs/api.md is stale: run `make generate`"
        );
    }
}
