//! Discovery documents as kubectl and kube-rs read them: `/api`, `/apis`, `/api/v1`,
//! `/apis/GROUP`, `/apis/GROUP/VERSION`, `/version`, and minimal OpenAPI documents.
//!
//! Aggregated discovery is not served: clients asking for it get the legacy documents, which
//! they accept (the response's Content-Type says which one it is).

use serde_json::{Value, json};

use crate::resource::{Registry, ResourceType};

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "31",
        "gitVersion": "v1.31.0-sandbox",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.22.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`.
pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_doc(&g, &vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/GROUP`, if the group exists.
pub fn group(reg: &Registry, group: &str) -> Option<Value> {
    let (_, vs) = reg.groups().into_iter().find(|(g, _)| g == group)?;
    let mut doc = group_doc(group, &vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

fn resource_doc(r: &ResourceType) -> Value {
    let mut doc = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs(),
    });
    if !r.short_names.is_empty() {
        doc["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        doc["categories"] = json!(r.categories);
    }
    doc
}

/// `/api/v1` or `/apis/GROUP/VERSION`, if served.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in reg
        .all()
        .filter(|r| r.group == group && r.version == version)
    {
        resources.push(resource_doc(r));
        if r.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if r.group == "apps" && matches!(r.plural.as_str(), "deployments" | "replicasets") {
            resources.push(json!({
                "name": format!("{}/scale", r.plural), "singularName": "", "namespaced": true,
                "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if r.group.is_empty() && r.plural == "services" {
            resources.push(json!({
                "name": "services/proxy", "singularName": "", "namespaced": true, "kind": "ServiceProxyOptions",
                "verbs": ["create", "delete", "get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// `/openapi/v3`: the index of group-version documents.
pub fn openapi_v3_index(reg: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    paths.insert(
        "api/v1".into(),
        json!({"serverRelativeURL": "/openapi/v3/api/v1"}),
    );
    for (g, vs) in reg.groups() {
        if g.is_empty() {
            continue;
        }
        for v in vs {
            paths.insert(
                format!("apis/{g}/{v}"),
                json!({"serverRelativeURL": format!("/openapi/v3/apis/{g}/{v}")}),
            );
        }
    }
    json!({"paths": paths})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/GROUP/VERSION`: a document with one PATCH
/// operation per resource that declares the `fieldValidation` query parameter, and no schemas.
///
/// kubectl reads exactly that to decide that the server validates fields itself, and then
/// skips client-side schema validation (which would need full schemas).
pub fn openapi_v3_group_version(reg: &Registry, group: &str, version: &str) -> Value {
    let mut paths = serde_json::Map::new();
    for r in reg
        .all()
        .filter(|r| r.group == group && r.version == version)
    {
        let prefix = if group.is_empty() {
            "/api/v1".to_string()
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        let op = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", r.kind),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}}
                ],
                "responses": {"200": {"description": "OK"}}
            })
        };
        paths.insert(path, json!({"patch": op("patch"), "put": op("put")}));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.31.0"},
        "paths": paths,
        "components": {"schemas": {}},
    })
}

/// `/openapi/v2`: a valid Swagger document with no definitions.
pub fn openapi_v2_empty() -> Value {
    json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.31.0"}, "paths": {}, "definitions": {}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_names_status_subresources() {
        let reg = Registry::with_builtins();
        let doc = resource_list(&reg, "", "v1").unwrap();
        let names: Vec<&str> = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(
            names.contains(&"pods")
                && names.contains(&"pods/status")
                && names.contains(&"configmaps")
        );
        assert!(resource_list(&reg, "", "v2").is_none());
    }

    #[test]
    fn group_list_prefers_the_first_version() {
        let reg = Registry::with_builtins();
        let doc = group_list(&reg);
        let apps = doc["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "apps")
            .unwrap();
        assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
    }
}
