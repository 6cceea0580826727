//! CREATE: metadata the server owns, names, namespaces, defaulting, admission and storage.

use serde_json::{Value, json};

use super::{
    ApiServer, WriteOptions, Written, check_kind, is_dns_subdomain, kinds, main_scope,
    metadata_mut, shape,
};
use crate::admission::Operation;
use crate::clock::now_rfc3339 as now;
use crate::crd;
use crate::decode;
use crate::defaults;
use crate::error::ApiError;
use crate::fields;
use crate::ids::{name_suffix, new_uid};
use crate::resource::ResourceType;
use crate::store::ResKey;

impl ApiServer {
    /// CREATE (POST): the object stored with the metadata the server owns, or why not.
    pub async fn create(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        self.create_inner(rt, ns, obj, opts, None).await
    }

    /// Create; `managed` replaces the managed fields a plain create records (apply-create).
    pub(super) async fn create_inner(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        mut obj: Value,
        opts: &WriteOptions,
        managed: Option<Value>,
    ) -> Result<Written, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        check_kind(rt, &obj)?;
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        if !rt.custom {
            decode::built_in(&rt.group, &rt.version, &rt.kind, &obj)?;
        }
        let md = metadata_mut(&mut obj);
        if rt.namespaced {
            let url_ns = ns.unwrap_or("default");
            match md.get("namespace").and_then(Value::as_str) {
                Some(body_ns) if !body_ns.is_empty() && body_ns != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    md.insert("namespace".into(), json!(url_ns));
                }
            }
        } else {
            md.remove("namespace");
        }
        let has_name = md
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if !has_name {
            match md.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => {
                    let name = format!("{prefix}{}", name_suffix());
                    md.insert("name".into(), json!(name));
                }
                _ => {
                    return Err(ApiError::invalid(
                        &rt.group,
                        &rt.kind,
                        "",
                        vec![(
                            "metadata.name".into(),
                            "Required value: name or generateName is required".into(),
                        )],
                    ));
                }
            }
        }
        let name = md
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let hooks = kinds::hooks(&rt.group, &rt.kind);
        if hooks.names_are_dns_subdomains() && !is_dns_subdomain(&name) {
            return Err(ApiError::invalid(
                &rt.group,
                &rt.kind,
                &name,
                vec![(
                    "metadata.name".into(),
                    format!(
                        "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                    ),
                )],
            ));
        }
        if rt.namespaced {
            let ns_name = md
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match self.store.get(&ResKey::new("", "namespaces"), "", &ns_name) {
                None => return Err(ApiError::not_found("", "namespaces", &ns_name)),
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!(
                            "{} \"{name}\" is forbidden: unable to create new content in namespace {ns_name} because it is being terminated",
                            rt.qualified()
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        for f in [
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ] {
            md.remove(f);
        }
        md.insert("uid".into(), json!(new_uid()));
        md.insert("creationTimestamp".into(), json!(now()));
        if defaults::has_generation(&rt.group, &rt.kind, rt.custom) {
            md.insert("generation".into(), json!(1));
        } else {
            md.remove("generation");
        }
        if rt.status_subresource {
            let obj_map = obj.as_object_mut();
            if let Some(m) = obj_map {
                m.remove("status");
                if let Some(s) = defaults::initial_status(&rt.group, &rt.kind) {
                    m.insert("status".into(), s);
                }
            }
        }
        hooks.prepare_create(&mut obj);
        self.drop_initializers_unless_legacy(&mut obj);
        let (mut obj, warnings) = self
            .normalize_and_admit(rt, "", Operation::Create, obj, None, opts)
            .await?;
        obj["apiVersion"] = json!(rt.api_version());
        if rt.custom {
            let causes = crd::process(rt.schema.as_ref(), &mut obj, None);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes));
            }
        }
        hooks.server_status(&mut obj, None);
        match managed {
            Some(m) if m.as_array().is_some_and(|a| !a.is_empty()) => {
                metadata_mut(&mut obj).insert("managedFields".into(), m);
            }
            Some(_) => {}
            None => fields::record_update(
                shape(rt),
                main_scope(rt),
                &opts.manager(),
                &rt.api_version(),
                &now(),
                &json!({}),
                &mut obj,
            ),
        }
        let timeout = opts
            .timeout
            .unwrap_or(super::initialization::DEFAULT_CREATE_TIMEOUT);
        if opts.dry_run {
            if self.must_wait_for_initialization(&obj, opts.include_uninitialized) {
                return Err(Self::wait_for_never_stored(timeout).await);
            }
            return Ok(Written {
                object: Self::served(rt, &obj),
                warnings,
                created: true,
            });
        }
        let stored = self
            .store
            .create(&Self::key(rt), Self::stored_form(rt, obj))?;
        hooks.after_write(self, &stored);
        hooks.after_create(self, &stored);
        let object = if self.must_wait_for_initialization(&stored, opts.include_uninitialized) {
            self.wait_for_initialized(rt, &stored, timeout).await?
        } else {
            (*stored).clone()
        };
        Ok(Written {
            object: Self::served(rt, &object),
            warnings,
            created: true,
        })
    }
}
