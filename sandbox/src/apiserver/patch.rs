//! PATCH in every format: JSON merge, JSON, strategic merge, server-side apply (which creates
//! a missing object) and the `scale` subresource.

use serde_json::{Value, json};

use super::update::check_resource_version;
use super::{
    ApiServer, WriteOptions, Written, check_kind, main_scope, meta_str, metadata_mut,
    retries_conflict, shape,
};
use crate::clock::now_rfc3339 as now;
use crate::crd;
use crate::error::ApiError;
use crate::fields::{self, ApplyRequest, Scope};
use crate::patch::{self, PatchKind};
use crate::resource::ResourceType;

impl ApiServer {
    /// PATCH in any format, including server-side apply (which creates a missing object).
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        sub: &str,
        kind: PatchKind,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if kind == PatchKind::Apply && opts.field_manager.as_deref().is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![(
                    "fieldManager".into(),
                    "Required value: is required for apply patch".into(),
                )],
            ));
        }
        if kind == PatchKind::Apply && !body.is_object() {
            return Err(ApiError::bad_request("an apply patch must be an object"));
        }
        // kube-apiserver types an apply patch of a custom resource by its schema first, and a
        // field the schema does not declare fails that, whatever `fieldValidation` says.
        if kind == PatchKind::Apply
            && let Some(schema) = rt.schema.as_ref().filter(|_| rt.custom)
            && let Some(first) = crd::prune(schema, &mut body.clone(), true).first()
        {
            return Err(ApiError::new(
                500,
                "",
                format!(
                    "failed to create typed patch object (/{name}; {}, Kind={}): .{first}: field not declared in schema",
                    rt.api_version(),
                    rt.kind
                ),
            ));
        }
        if kind == PatchKind::Strategic && rt.custom {
            return Err(ApiError::unsupported_media(
                "application/strategic-merge-patch+json",
            ));
        }
        if !sub.is_empty() && sub != "status" {
            return Err(ApiError::no_such_resource());
        }
        // Conflicts from concurrent writers are retried, as the real server does for patches.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let current = match self.current(rt, ns, name) {
                Ok(c) => c,
                Err(e) if kind == PatchKind::Apply && sub.is_empty() => {
                    let _ = e;
                    return self.apply_create(rt, ns, name, body, opts).await;
                }
                Err(e) => return Err(e),
            };
            let result = self
                .patch_once(rt, name, sub, kind, &body, opts, &current)
                .await;
            match result {
                Err(e) if retries_conflict(&e, attempts, !patch_has_rv(kind, &body)) => continue,
                other => return other,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn patch_once(
        &self,
        rt: &ResourceType,
        name: &str,
        sub: &str,
        kind: PatchKind,
        body: &Value,
        opts: &WriteOptions,
        current: &Value,
    ) -> Result<Written, ApiError> {
        let served = Self::served(rt, current);
        match kind {
            PatchKind::Apply => {
                check_kind(rt, body)?;
                if let Some(n) = meta_str(body, "name")
                    && n != name
                {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({name})"
                    )));
                }
                // A resourceVersion in the applied configuration is a precondition, forced or
                // not (it is not one when the apply creates the object: see `apply_create`).
                check_resource_version(rt, name, body, current)?;
                let scope = if sub == "status" {
                    Scope::Status
                } else {
                    main_scope(rt)
                };
                let api_version = rt.api_version();
                let now = now();
                let manager = opts.manager();
                let req = ApplyRequest {
                    shape: shape(rt),
                    scope,
                    manager: &manager,
                    api_version: &api_version,
                    force: opts.force,
                    now: &now,
                };
                let merged =
                    fields::apply(&req, &served, body).map_err(|c| conflict_error(rt, name, &c))?;
                let obj = self.prepare_update(rt, sub, current, merged)?;
                self.finish_update(rt, sub, current, obj, opts, false).await
            }
            _ => {
                let mut patched = served.clone();
                match kind {
                    PatchKind::Merge => patch::merge(&mut patched, body),
                    PatchKind::Json => patch::json(&mut patched, body)?,
                    _ => patch::strategic(&mut patched, body)?,
                }
                check_resource_version(rt, name, &patched, current)?;
                let obj = self.prepare_update(rt, sub, current, patched)?;
                self.finish_update(rt, sub, current, obj, opts, true).await
            }
        }
    }

    async fn apply_create(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        check_kind(rt, &body)?;
        let api_version = rt.api_version();
        let now = now();
        let manager = opts.manager();
        let req = ApplyRequest {
            shape: shape(rt),
            scope: main_scope(rt),
            manager: &manager,
            api_version: &api_version,
            force: opts.force,
            now: &now,
        };
        let mut merged =
            fields::apply(&req, &json!({}), &body).map_err(|c| conflict_error(rt, name, &c))?;
        metadata_mut(&mut merged).insert("name".into(), json!(name));
        // An apply that owns no field leaves no entry (as an empty field set is dropped).
        let managed = Some(
            merged
                .pointer("/metadata/managedFields")
                .cloned()
                .unwrap_or_else(|| json!([])),
        );
        // Create records managers itself; keep the Apply entry instead.
        let mut written = self.create_inner(rt, ns, merged, opts, managed).await?;
        written.created = true;
        Ok(written)
    }

    /// Writes the `scale` subresource: `body` is the new Scale (PUT) or a patch of the current
    /// one; only `spec.replicas` is taken, with the Scale's resourceVersion as a precondition.
    pub async fn set_scale(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        kind: Option<PatchKind>,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let current = self.current(rt, ns, name)?;
        let mut scale = scale_of(&current);
        match kind {
            None => scale = body,
            Some(PatchKind::Json) => patch::json(&mut scale, &body)?,
            Some(PatchKind::Apply) => {
                return Err(ApiError::unsupported_media("application/apply-patch+yaml"));
            }
            Some(_) => patch::merge(&mut scale, &body),
        }
        let replicas = scale
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .filter(|r| *r >= 0)
            .ok_or_else(|| {
                ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![(
                        "spec.replicas".into(),
                        "Invalid value: must be a non-negative integer".into(),
                    )],
                )
            })?;
        let mut p = json!({"spec": {"replicas": replicas}});
        if let Some(rv) = scale
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            p["metadata"] = json!({"resourceVersion": rv});
        }
        let written = self
            .patch(rt, ns, name, "", PatchKind::Merge, p, opts)
            .await?;
        Ok(scale_of(&written.object))
    }
}

/// The `autoscaling/v1` Scale of a Deployment or ReplicaSet.
pub fn scale_of(obj: &Value) -> Value {
    let md = &obj["metadata"];
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            let mut parts: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            parts.sort();
            parts.join(",")
        })
        .unwrap_or_default();
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": md["name"], "namespace": md["namespace"], "uid": md["uid"],
            "resourceVersion": md["resourceVersion"], "creationTimestamp": md["creationTimestamp"],
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(1))},
        "status": {
            "replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector,
        },
    })
}

fn patch_has_rv(kind: PatchKind, body: &Value) -> bool {
    match kind {
        PatchKind::Json => body
            .as_array()
            .is_some_and(|ops| ops.iter().any(|o| o["path"] == "/metadata/resourceVersion")),
        _ => body.pointer("/metadata/resourceVersion").is_some(),
    }
}

fn conflict_error(rt: &ResourceType, name: &str, conflicts: &[fields::Conflict]) -> ApiError {
    let lines: Vec<String> = conflicts
        .iter()
        .map(|c| {
            format!(
                "conflict with {}: {}",
                c.describe_manager(),
                fields::display_path(&c.path)
            )
        })
        .collect();
    let message = if lines.len() == 1 {
        format!("Apply failed with 1 conflict: {}", lines[0])
    } else {
        format!(
            "Apply failed with {} conflicts: {}",
            lines.len(),
            lines.join("\n")
        )
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", c.describe_manager()), "field": fields::display_path(&c.path)}))
        .collect();
    ApiError {
        code: 409,
        reason: "Conflict".into(),
        message,
        details: Some(
            json!({"name": name, "group": rt.group, "kind": rt.plural, "causes": causes}),
        ),
    }
}
