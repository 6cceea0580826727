//! DELETE: preconditions, finalizers, propagation policies and collections.

use serde_json::{Value, json};

use super::{
    AdmitHow, ApiServer, DeleteOptions, ListOptions, kinds, meta_str, metadata_mut,
    retries_conflict,
};
use crate::admission::Operation;
use crate::clock::now_rfc3339 as now;
use crate::error::ApiError;
use crate::resource::ResourceType;
use crate::store::object_rv;

impl ApiServer {
    /// DELETE: immediate removal, or a deletionTimestamp while finalizers remain.
    pub async fn delete(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.delete_once(rt, ns, name, opts).await {
                Err(e) if retries_conflict(&e, attempts, opts.resource_version.is_none()) => {
                    continue;
                }
                other => return other,
            }
        }
    }

    async fn delete_once(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let current = self.current(rt, ns, name)?;
        if let Some(uid) = &opts.uid
            && meta_str(&current, "uid") != Some(uid.as_str())
        {
            return Err(precondition_failed(
                rt,
                name,
                "UID",
                uid,
                meta_str(&current, "uid").unwrap_or(""),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && rv.parse::<u64>().ok() != Some(object_rv(&current))
        {
            return Err(precondition_failed(
                rt,
                name,
                "ResourceVersion",
                rv,
                &object_rv(&current).to_string(),
            ));
        }
        self.admit(
            rt,
            "",
            Operation::Delete,
            None,
            Some((*current).clone()),
            AdmitHow {
                dry_run: opts.dry_run,
                between: None,
            },
        )
        .await?;
        if opts.dry_run {
            return Ok(Self::served(rt, &current));
        }
        let mut obj = (*current).clone();
        let hooks = kinds::hooks(&rt.group, &rt.kind);
        let already = obj.pointer("/metadata/deletionTimestamp").is_some();
        let mut finalizers: Vec<Value> = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let propagation = opts.propagation.as_deref().unwrap_or("Background");
        let extra = match propagation {
            "Orphan" => Some("orphan"),
            "Foreground" => Some("foregroundDeletion"),
            _ => None,
        };
        if let Some(f) = extra
            && !finalizers.iter().any(|x| x == f)
        {
            finalizers.push(json!(f));
        }
        if already {
            if finalizers.len()
                != obj
                    .pointer("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            {
                metadata_mut(&mut obj).insert("finalizers".into(), json!(finalizers));
                let stored = self.store.update(
                    &Self::key(rt),
                    Self::stored_form(rt, obj),
                    object_rv(&current),
                )?;
                return Ok(Self::served(rt, &stored));
            }
            return Ok(Self::served(rt, &current));
        }
        if finalizers.is_empty() && !hooks.deletes_in_two_phases() {
            let removed = self.store.remove(
                &Self::key(rt),
                &crate::store::names(&current).0,
                name,
                Some(object_rv(&current)),
            )?;
            hooks.after_remove(self, &removed);
            if hooks.delete_answers_with_object() {
                return Ok(Self::served(rt, &removed));
            }
            return Ok(json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": meta_str(&removed, "uid").unwrap_or("")},
            }));
        }
        let md = metadata_mut(&mut obj);
        md.insert("deletionTimestamp".into(), json!(now()));
        md.insert("deletionGracePeriodSeconds".into(), json!(0));
        if !finalizers.is_empty() {
            md.insert("finalizers".into(), json!(finalizers));
        }
        hooks.deletion_started(&mut obj);
        let stored = self.store.update(
            &Self::key(rt),
            Self::stored_form(rt, obj),
            object_rv(&current),
        )?;
        self.store.changed.notify_one();
        Ok(Self::served(rt, &stored))
    }

    /// DELETE of a collection: every matching object, each through [`ApiServer::delete`].
    pub async fn delete_collection(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        list: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let all = self.list(
            rt,
            ns,
            &ListOptions {
                limit: 0,
                continue_token: None,
                // Uninitialized objects go too, as `DeleteCollection` forced
                // `IncludeUninitialized` in the era's store.go.
                include_uninitialized: true,
                ..list.clone()
            },
        )?;
        let mut deleted = Vec::new();
        for item in all["items"].as_array().into_iter().flatten() {
            let (ons, name) = crate::store::names(item);
            let ons = if ons.is_empty() {
                None
            } else {
                Some(ons.as_str())
            };
            match self.delete(rt, ons, &name, opts).await {
                Ok(_) => deleted.push(item.clone()),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(
            json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(), "metadata": {}, "items": deleted}),
        )
    }
}

/// 409 for a delete whose precondition on `field` (`UID`, `ResourceVersion`) does not hold.
fn precondition_failed(
    rt: &ResourceType,
    name: &str,
    field: &str,
    wanted: &str,
    found: &str,
) -> ApiError {
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {found}",
            rt.qualified()
        ),
    )
}
