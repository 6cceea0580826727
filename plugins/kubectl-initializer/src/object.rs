//! What `why` is asked about: `KIND/NAME` or the objects of a file. Parsing and matching a
//! resource name against discovery are pure; fetching is in [`crate::commands`].

use kube::discovery::ApiResource;
use serde_json::Value;

use crate::error::{Error, Result};

/// kubectl's short names for the common built-in resources (discovery does not carry them in
/// kube's types), and the Initializer's own.
const SHORT_NAMES: &[(&str, &str)] = &[
    ("po", "pods"),
    ("deploy", "deployments"),
    ("svc", "services"),
    ("cm", "configmaps"),
    ("ns", "namespaces"),
    ("sts", "statefulsets"),
    ("ds", "daemonsets"),
    ("rs", "replicasets"),
    ("sa", "serviceaccounts"),
    ("cj", "cronjobs"),
    ("ing", "ingresses"),
    ("pvc", "persistentvolumeclaims"),
    ("pv", "persistentvolumes"),
    ("netpol", "networkpolicies"),
    ("init", "initializers"),
];

/// Puts `object` in `namespace` (given for a namespaced object) as the API server would, and
/// returns the name it is known by: `metadata.name`, else `metadata.generateName`.
pub fn place_in_namespace(object: &mut Value, namespace: Option<&str>) -> String {
    if let (Some(ns), Some(meta)) = (
        namespace,
        object.get_mut("metadata").and_then(Value::as_object_mut),
    ) {
        meta.insert("namespace".to_string(), Value::String(ns.to_string()));
    }
    object
        .pointer("/metadata/name")
        .or_else(|| object.pointer("/metadata/generateName"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// `KIND/NAME` split into the resource query and the name.
pub fn parse_kind_name(text: &str) -> Result<(String, String)> {
    match text.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((kind.to_string(), name.to_string()))
        }
        _ => Err(Error::BadInput(format!(
            "{text:?} is not KIND/NAME (for example deployment/nginx); or pass the object with -f FILE"
        ))),
    }
}

/// Whether a resource query (`deployment`, `deployments`, `Deployment`, `deploy`,
/// `deployments.apps`) names `resource`.
pub fn names_resource(query: &str, resource: &ApiResource) -> bool {
    let query = query.to_ascii_lowercase();
    let (name, group) = match query.split_once('.') {
        Some((name, group)) => (name.to_string(), Some(group.to_string())),
        None => (query.clone(), None),
    };
    if group.as_deref().is_some_and(|g| g != resource.group) {
        return false;
    }
    let full = SHORT_NAMES
        .iter()
        .find(|(short, _)| *short == name)
        .map(|(_, plural)| (*plural).to_string())
        .unwrap_or(name);
    full == resource.plural || full == resource.kind.to_ascii_lowercase()
}

/// Of several resources a query names, the one kubectl would pick: the core group first, then
/// the built-in groups (no dot, or ending in `k8s.io`), then the rest, each in discovery order.
pub fn pick<'a>(query: &str, resources: &'a [ApiResource]) -> Option<&'a ApiResource> {
    let named: Vec<&ApiResource> = resources
        .iter()
        .filter(|r| names_resource(query, r))
        .collect();
    let rank = |r: &ApiResource| {
        if r.group.is_empty() {
            0
        } else if !r.group.contains('.') || r.group.ends_with(".k8s.io") {
            1
        } else {
            2
        }
    };
    named.into_iter().min_by_key(|r| rank(r))
}

/// The objects of a YAML or JSON text (several YAML documents; a `List`'s items), each with an
/// `apiVersion` and a `kind`.
pub fn parse_objects(text: &str, source: &str) -> Result<Vec<Value>> {
    // Empty documents are skipped; the error names its line, in one line.
    let plain = serde_saphyr::options! { with_snippet: false };
    let documents: Vec<Value> = serde_saphyr::from_multiple_with_options(text, plain)
        .map_err(|e| Error::BadInput(format!("{source} is not YAML: {e}")))?;
    let mut objects = Vec::new();
    for (i, value) in documents.into_iter().enumerate() {
        let items = match value.get("kind").and_then(Value::as_str) {
            Some(kind) if kind.ends_with("List") => value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            _ => vec![value],
        };
        for item in items {
            let has = |field: &str| {
                item.get(field)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
            };
            if !has("apiVersion") || !has("kind") {
                return Err(Error::BadInput(format!(
                    "{source}: document {} has no apiVersion and kind",
                    i + 1
                )));
            }
            objects.push(item);
        }
    }
    if objects.is_empty() {
        return Err(Error::BadInput(format!("{source} holds no object")));
    }
    Ok(objects)
}

/// The group and version of an `apiVersion` (`v1` → core).
pub fn group_version(api_version: &str) -> (String, String) {
    match api_version.split_once('/') {
        Some((group, version)) => (group.to_string(), version.to_string()),
        None => (String::new(), api_version.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if group.is_empty() {
                version.into()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    #[test]
    fn kind_name_needs_both_parts() {
        assert_eq!(
            parse_kind_name("deployment/nginx").unwrap(),
            ("deployment".to_string(), "nginx".to_string())
        );
        for bad in ["nginx", "deployment/", "/nginx", "a/b/c"] {
            let err = parse_kind_name(bad).unwrap_err().to_string();
            assert!(err.contains("KIND/NAME"), "{err}");
        }
    }

    #[test]
    fn a_resource_is_named_by_kind_plural_short_name_or_with_its_group() {
        let deployments = resource("apps", "v1", "Deployment", "deployments");
        for query in [
            "deployment",
            "deployments",
            "Deployment",
            "deploy",
            "deployments.apps",
        ] {
            assert!(names_resource(query, &deployments), "{query}");
        }
        assert!(!names_resource("deployments.extensions", &deployments));
        assert!(!names_resource("pods", &deployments));
    }

    #[test]
    fn the_core_group_wins_over_a_custom_resource_of_the_same_name() {
        let resources = [
            resource("example.com", "v1", "Pod", "pods"),
            resource("", "v1", "Pod", "pods"),
        ];
        assert_eq!(pick("pod", &resources).unwrap().group, "");
        assert_eq!(
            pick("pods.example.com", &resources).unwrap().group,
            "example.com"
        );
        assert!(pick("widgets", &resources).is_none());
    }

    #[test]
    fn files_hold_documents_and_lists_and_each_needs_its_type() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---\n{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"s\"}}]}\n";
        let objects = parse_objects(text, "x.yaml").unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1]["kind"], "Secret");
        let err = parse_objects("metadata: {name: a}\n", "x.yaml").unwrap_err();
        assert!(err.to_string().contains("no apiVersion and kind"), "{err}");
        assert!(parse_objects("", "x.yaml").is_err());
        assert!(parse_objects("a: [", "x.yaml").is_err());
    }

    #[test]
    fn api_versions_split_into_group_and_version() {
        assert_eq!(group_version("v1"), (String::new(), "v1".to_string()));
        assert_eq!(
            group_version("apps/v1"),
            ("apps".to_string(), "v1".to_string())
        );
    }
}
