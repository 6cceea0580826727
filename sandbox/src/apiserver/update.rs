//! UPDATE (PUT), and the steps every update shares with PATCH and apply.

use serde_json::{Value, json};

use super::{
    ApiServer, WriteOptions, Written, check_kind, kinds, main_scope, meta_str, metadata_mut, shape,
    spec_part,
};
use crate::admission::Operation;
use crate::clock::now_rfc3339 as now;
use crate::crd;
use crate::decode;
use crate::defaults;
use crate::error::ApiError;
use crate::fields::{self, Scope};
use crate::json::elements;
use crate::resource::ResourceType;
use crate::store::object_rv;

impl ApiServer {
    /// UPDATE (PUT) of the main resource or the `status` subresource.
    pub async fn update(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        sub: &str,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        check_kind(rt, &body)?;
        if !rt.custom && body.is_object() {
            let mut typed = body.clone();
            typed["apiVersion"] = json!(rt.api_version());
            typed["kind"] = json!(rt.kind);
            decode::built_in(&rt.group, &rt.version, &rt.kind, &typed)?;
        }
        if let Some(body_name) = meta_str(&body, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let current = self.current(rt, ns, name)?;
        check_resource_version(rt, name, &body, &current)?;
        let obj = self.prepare_update(rt, sub, &current, body)?;
        self.finish_update(rt, sub, &current, obj, opts, true).await
    }

    /// The object to store for an update of `current` to `new` through `sub`.
    pub(super) fn prepare_update(
        &self,
        rt: &ResourceType,
        sub: &str,
        current: &Value,
        mut new: Value,
    ) -> Result<Value, ApiError> {
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        let mut result = if sub == "status" {
            let mut r = current.clone();
            match new.get("status") {
                Some(s) => r["status"] = s.clone(),
                None => {
                    if let Some(m) = r.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if let Some(mf) = new.pointer("/metadata/managedFields") {
                r["metadata"]["managedFields"] = mf.clone();
            }
            self.initializers_from_status_body(&mut r, &new);
            r
        } else {
            if rt.status_subresource {
                match current.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            new
        };
        result["apiVersion"] = json!(rt.api_version());
        result["kind"] = json!(rt.kind);
        let cur_md = current
            .get("metadata")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let md = metadata_mut(&mut result);
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
            "name",
            "generation",
        ] {
            match cur_md.get(f) {
                Some(v) => {
                    md.insert(f.into(), v.clone());
                }
                None => {
                    md.remove(f);
                }
            }
        }
        md.remove("resourceVersion");
        if cur_md.get("deletionTimestamp").is_some() {
            let had = cur_md
                .get("finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let added: Vec<String> = elements(md.get("finalizers"))
                .filter(|f| !had.contains(f))
                .map(|f| format!("{:?}", f.as_str().unwrap_or_default()))
                .collect();
            if !added.is_empty() {
                let name = cur_md.get("name").and_then(Value::as_str).unwrap_or("");
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    vec![(
                        "metadata.finalizers".into(),
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                            added.join(", ")
                        ),
                    )],
                ));
            }
        }
        kinds::hooks(&rt.group, &rt.kind).prepare_update(&mut result, &cur_md);
        Ok(result)
    }

    pub(super) async fn finish_update(
        &self,
        rt: &ResourceType,
        sub: &str,
        current: &Value,
        mut obj: Value,
        opts: &WriteOptions,
        record_manager: bool,
    ) -> Result<Written, ApiError> {
        self.drop_initializers_unless_legacy(&mut obj);
        let (mut obj, warnings) = self
            .normalize_and_admit(rt, sub, Operation::Update, obj, Some(current), opts)
            .await?;
        if rt.custom {
            let name = meta_str(&obj, "name").unwrap_or("").to_string();
            let old = Self::served(rt, current);
            let causes = crd::process(rt.schema.as_ref(), &mut obj, Some(&old));
            if !causes.is_empty() {
                return Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes));
            }
        }
        let hooks = kinds::hooks(&rt.group, &rt.kind);
        if sub.is_empty() {
            hooks.server_status(&mut obj, Some(current));
        }
        if spec_part(&obj) != spec_part(current)
            && defaults::has_generation(&rt.group, &rt.kind, rt.custom)
        {
            let g = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            metadata_mut(&mut obj).insert("generation".into(), json!(g));
        }
        if record_manager {
            let scope = if sub == "status" {
                Scope::Status
            } else {
                main_scope(rt)
            };
            fields::record_update(
                shape(rt),
                scope,
                &opts.manager(),
                &rt.api_version(),
                &now(),
                current,
                &mut obj,
            );
        }
        if opts.dry_run {
            let mut out = obj;
            metadata_mut(&mut out).insert(
                "resourceVersion".into(),
                json!(object_rv(current).to_string()),
            );
            return Ok(Written {
                object: Self::served(rt, &out),
                warnings,
                created: false,
            });
        }
        if unchanged(current, &obj) {
            // A write that changes nothing is not stored: no new resourceVersion, no watch event
            // (controllers that apply on every reconcile would otherwise wake themselves).
            return Ok(Written {
                object: Self::served(rt, current),
                warnings,
                created: false,
            });
        }
        let stored = self.store.update(
            &Self::key(rt),
            Self::stored_form(rt, obj),
            object_rv(current),
        )?;
        hooks.after_write(self, &stored);
        self.end_failed_initialization(rt, &stored);
        let stored = self.finalize_if_done(rt, stored);
        Ok(Written {
            object: Self::served(rt, &stored),
            warnings,
            created: false,
        })
    }
}

/// The precondition a write's body may carry: a non-empty `metadata.resourceVersion` must be the
/// stored one (409 Conflict otherwise); an empty or absent one means unconditional.
pub(super) fn check_resource_version(
    rt: &ResourceType,
    name: &str,
    body: &Value,
    current: &Value,
) -> Result<(), ApiError> {
    match meta_str(body, "resourceVersion").filter(|s| !s.is_empty()) {
        Some(rv) if rv.parse::<u64>().ok() != Some(object_rv(current)) => {
            Err(ApiError::conflict(&rt.group, &rt.plural, name))
        }
        _ => Ok(()),
    }
}

/// Whether `new` equals `current` apart from resourceVersion and managed-field timestamps.
fn unchanged(current: &Value, new: &Value) -> bool {
    let normalize = |v: &Value| {
        let mut v = v.clone();
        if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            md.remove("resourceVersion");
            if let Some(entries) = md.get_mut("managedFields").and_then(Value::as_array_mut) {
                for e in entries.iter_mut() {
                    if let Some(m) = e.as_object_mut() {
                        m.remove("time");
                    }
                }
            }
        }
        v
    };
    normalize(current) == normalize(new)
}
