//! `kubectl initializer why`: read the object (by `KIND/NAME` through discovery, or from a file),
//! its namespace's labels, every Initializer and its live configuration, then hand them to the
//! pure [`crate::why`] decision (and, for a preset, to the compiled policy's explanation).

use std::path::Path;

use initializer_crds::Initializer;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::discovery::{Discovery, Scope};
use kube::{Api, ResourceExt};
use serde::Serialize;
use serde_json::Value;

use super::{Connection, live_configuration, operator_facts};
use crate::error::{Error, Result, is_not_found};
use crate::object;
use crate::output::{Format, structured};
use crate::why::{self, OperatorFacts, Request, Verdict};

/// What `why` prints as JSON or YAML.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WhyReport {
    object: String,
    operation: String,
    resource: String,
    verdicts: Vec<Verdict>,
}

/// Reads what the decision needs for each object and renders the verdicts in `format`.
pub(super) async fn run(
    conn: &Connection,
    target: Option<&str>,
    filename: Option<&Path>,
    operation: &str,
    operator_namespace: Option<String>,
    format: Format,
) -> Result<String> {
    let requests = match (target, filename) {
        (Some(target), None) => vec![request_for_name(conn, target, operation).await?],
        (None, Some(path)) => requests_from_file(conn, path, operation).await?,
        _ => {
            return Err(Error::BadInput(
                "give the object as KIND/NAME or with -f FILE".to_string(),
            ));
        }
    };
    let initializers = Api::<Initializer>::all(conn.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::api("list Initializers", e))?
        .items;
    let mut lives = Vec::new();
    for initializer in &initializers {
        lives.push(live_configuration(&conn.client, initializer).await?);
    }
    // The operator's namespace is needed for an unregistered Initializer (what it would
    // register) and for a preset (the policy compiled from it has the same exclusions).
    let needs_facts =
        lives.iter().any(Option::is_none) || initializers.iter().any(|i| i.spec.preset.is_some());
    let facts = if needs_facts {
        operator_facts(&conn.client, operator_namespace).await?
    } else {
        OperatorFacts::default()
    };
    let mut reports = Vec::new();
    for request in &requests {
        let verdicts = initializers
            .iter()
            .zip(&lives)
            .map(|(initializer, live)| {
                let would = match live {
                    Some(_) => Err(String::new()),
                    None => why::would_register(initializer, &facts),
                };
                let mut verdict = why::decide(
                    initializer,
                    live.as_ref(),
                    would.as_ref().map_err(String::as_str),
                    &facts,
                    request,
                );
                verdict.policy = why::policy::explain(initializer, &facts, request);
                verdict
            })
            .collect();
        reports.push(WhyReport {
            object: request.object_shown(),
            operation: request.operation.clone(),
            resource: request.resource_shown(),
            verdicts,
        });
    }
    let value = if reports.len() == 1 {
        serde_json::to_value(&reports[0])
    } else {
        serde_json::to_value(&reports)
    }
    .map_err(|e| Error::Output(e.to_string()))?;
    if let Some(out) = structured(format, &value)? {
        return Ok(out);
    }
    Ok(reports
        .iter()
        .map(|r| why::text(&r.object, &r.operation, &r.resource, &r.verdicts))
        .collect::<Vec<_>>()
        .join("\n"))
}

async fn request_for_name(conn: &Connection, target: &str, operation: &str) -> Result<Request> {
    let (query, name) = object::parse_kind_name(target)?;
    let discovery = Discovery::new(conn.client.clone())
        .run()
        .await
        .map_err(|e| Error::api("discover the server's resources", e))?;
    let mut resources = Vec::new();
    let mut scopes = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            resources.push(resource);
            scopes.push(caps.scope);
        }
    }
    let resource = object::pick(&query, &resources)
        .ok_or_else(|| Error::UnknownResource(query.clone()))?
        .clone();
    let namespaced = resources
        .iter()
        .zip(&scopes)
        .find(|(r, _)| **r == resource)
        .is_some_and(|(_, s)| *s == Scope::Namespaced);
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(conn.client.clone(), &conn.namespace, &resource)
    } else {
        Api::all_with(conn.client.clone(), &resource)
    };
    let shown = if namespaced {
        format!(
            "{} {name:?} in namespace {:?}",
            resource.plural, conn.namespace
        )
    } else {
        format!("{} {name:?}", resource.plural)
    };
    let found = api
        .get_opt(&name)
        .await
        .map_err(|e| Error::api(format!("read {shown}"), e))?;
    let found = found.ok_or(Error::ObjectNotFound(shown))?;
    let value = serde_json::to_value(&found).map_err(|e| Error::Output(e.to_string()))?;
    build_request(conn, &resource, namespaced, value, operation).await
}

async fn requests_from_file(
    conn: &Connection,
    path: &Path,
    operation: &str,
) -> Result<Vec<Request>> {
    let source = path.display().to_string();
    let text = if source == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| Error::BadInput(format!("{source}: {e}")))?;
    let mut requests = Vec::new();
    for item in object::parse_objects(&text, &source)? {
        let api_version = item
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = item.get("kind").and_then(Value::as_str).unwrap_or_default();
        let (group, version) = object::group_version(api_version);
        let gvk = GroupVersionKind::gvk(&group, &version, kind);
        let (resource, caps) = kube::discovery::pinned_kind(&conn.client, &gvk)
            .await
            .map_err(|e| {
                if is_not_found(&e) || matches!(e, kube::Error::Discovery(_)) {
                    Error::UnknownResource(format!("{kind} in {api_version}"))
                } else {
                    Error::api(format!("discover {kind} in {api_version}"), e)
                }
            })?;
        let namespaced = caps.scope == Scope::Namespaced;
        requests.push(build_request(conn, &resource, namespaced, item, operation).await?);
    }
    Ok(requests)
}

/// The request's attributes, with the namespace's labels read from the server.
async fn build_request(
    conn: &Connection,
    resource: &ApiResource,
    namespaced: bool,
    mut value: Value,
    operation: &str,
) -> Result<Request> {
    let namespace = namespaced.then(|| {
        value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| conn.namespace.clone())
    });
    let name = crate::object::place_in_namespace(&mut value, namespace.as_deref());
    let namespace_labels = match &namespace {
        Some(ns) => {
            let found = Api::<Namespace>::all(conn.client.clone())
                .get_opt(ns)
                .await
                .map_err(|e| Error::api(format!("read namespace {ns}"), e))?
                .ok_or_else(|| Error::ObjectNotFound(format!("namespace {ns:?}")))?;
            found.labels().clone()
        }
        None => Default::default(),
    };
    Ok(Request {
        group: resource.group.clone(),
        version: resource.version.clone(),
        resource: resource.plural.clone(),
        subresource: String::new(),
        kind: resource.kind.clone(),
        namespaced,
        namespace,
        name,
        operation: operation.to_string(),
        object: value,
        namespace_labels,
    })
}
