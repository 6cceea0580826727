//! The API server's semantics, independent of HTTP: get, list, create, update, patch, apply and
//! delete over the store, with defaulting, generation, managed fields, status subresources,
//! custom resource schemas, admission and dry run.
//!
//! One module per verb: `read` (get, list), `create`, `update` (PUT, and what every update
//! shares), `patch` (merge, JSON, strategic, server-side apply, scale) and `delete`; what differs
//! by kind is in the `kinds` hook table. Watches are served over HTTP by `crate::http`.

mod create;
mod delete;
pub mod initialization;
mod initialization_hooks;
mod kinds;
mod patch;
mod read;
mod update;

pub use patch::scale_of;

use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use serde_json::{Value, json};

use crate::admission::{Admission, Attributes, Between, Operation, Outcome, UserInfo};
use crate::crd;
use crate::defaults;
use crate::error::ApiError;
use crate::event;
use crate::faults::Faults;
use crate::fields::{Scope, Shape};
use crate::resource::{ResourceType, split_api_version};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{ResKey, Store, object_rv};
use crate::view::{ClusterView, ResourceRef};

/// Options common to writes.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub field_manager: Option<String>,
    /// The client's User-Agent, whose first word names the manager when none is given.
    pub user_agent: String,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `force=true` (apply).
    pub force: bool,
    /// `fieldValidation`: `Strict`, `Warn` (default) or `Ignore`; applies to custom resources.
    pub field_validation: Option<String>,
    /// `includeUninitialized` on a create (legacy mode): answer at once, without waiting for
    /// the object's initializers.
    pub include_uninitialized: bool,
    /// `timeout` on a create (legacy mode): how long it waits for initialization; `None` is
    /// the era's 30 s.
    pub timeout: Option<Duration>,
}

impl WriteOptions {
    fn manager(&self) -> String {
        match &self.field_manager {
            Some(m) if !m.is_empty() => m.clone(),
            _ => {
                let ua = self.user_agent.split('/').next().unwrap_or("").trim();
                if ua.is_empty() {
                    "unknown".to_string()
                } else {
                    ua.to_string()
                }
            }
        }
    }
}

/// `DeleteOptions` as far as they are honoured.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `Orphan`, `Background` or `Foreground`.
    pub propagation: Option<String>,
    /// Precondition on uid.
    pub uid: Option<String>,
    /// Precondition on resourceVersion.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` body (and the legacy `orphanDependents`).
    pub fn from_body(body: &Value) -> Self {
        let mut propagation = body["propagationPolicy"].as_str().map(str::to_string);
        if propagation.is_none() {
            match body["orphanDependents"].as_bool() {
                Some(true) => propagation = Some("Orphan".into()),
                Some(false) => propagation = Some("Background".into()),
                None => {}
            }
        }
        DeleteOptions {
            propagation,
            uid: body
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            resource_version: body
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
            dry_run: body["dryRun"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == "All")),
        }
    }
}

/// What a list or deletecollection selects and how it pages.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// Page size (0: all).
    pub limit: usize,
    /// Where the previous page ended (opaque to clients).
    pub continue_token: Option<String>,
    /// `includeUninitialized` (legacy mode): list objects whose initialization is not done.
    pub include_uninitialized: bool,
}

/// How a write is admitted: as a dry run or not, and the API server's own step between the
/// mutating and the validating webhooks, if any.
#[derive(Clone, Copy)]
struct AdmitHow<'a> {
    dry_run: bool,
    between: Option<&'a Between<'a>>,
}

/// The result of a write.
#[derive(Clone, Debug)]
pub struct Written {
    /// The object as served.
    pub object: Value,
    /// Warnings from pruning and admission, sent as `Warning` headers.
    pub warnings: Vec<String>,
    /// Whether the write created the object (201).
    pub created: bool,
}

/// The API server: its verbs over one store, with admission and injected faults.
pub struct ApiServer {
    pub store: Arc<Store>,
    pub admission: Admission,
    pub faults: Arc<Faults>,
    /// Kubernetes 1.7–1.13 Initializers (see [`initialization`]): off unless the sandbox was
    /// started with them.
    legacy_initializers: bool,
    next_ip: AtomicU32,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

fn shape(rt: &ResourceType) -> Shape<'_> {
    if rt.custom {
        Shape::Schema(rt.schema.as_ref())
    } else {
        Shape::Builtin
    }
}

fn main_scope(rt: &ResourceType) -> Scope {
    if rt.status_subresource {
        Scope::MainWithoutStatus
    } else {
        Scope::Whole
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

fn metadata_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(m) => m,
        // metadata was just made an object above.
        None => unreachable!("metadata is an object"),
    }
}

/// The object without metadata and status, to decide whether the generation moves.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

impl ApiServer {
    /// A server over `store`.
    pub fn new(store: Arc<Store>, admission: Admission, faults: Arc<Faults>) -> Self {
        ApiServer {
            store,
            admission,
            faults,
            legacy_initializers: false,
            next_ip: AtomicU32::new(1),
        }
    }

    /// Turns Kubernetes 1.7–1.13 Initializers on: serves `InitializerConfiguration`
    /// (`admissionregistration.k8s.io/v1alpha1`) and keeps `metadata.initializers`.
    pub fn with_legacy_initializers(mut self, on: bool) -> Self {
        self.legacy_initializers = on;
        if on {
            self.store
                .registry_mut()
                .insert(initialization::resource_type());
        }
        self
    }

    /// Whether Kubernetes 1.7–1.13 Initializers are emulated.
    pub fn legacy_initializers(&self) -> bool {
        self.legacy_initializers
    }

    /// The type served at group/version/plural, or 404.
    pub fn resolve(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Result<ResourceType, ApiError> {
        self.store
            .registry()
            .get(group, version, plural)
            .cloned()
            .ok_or_else(ApiError::no_such_resource)
    }

    /// Where objects of `rt` are stored: by group and plural (all versions share storage, and
    /// both Event APIs share the core one).
    pub fn key(rt: &ResourceType) -> ResKey {
        ResKey::new(event::storage_group(&rt.group, &rt.plural), &rt.plural)
    }

    /// An object (stored, or already in some served shape) as served in `rt`'s version.
    pub fn served(rt: &ResourceType, obj: &Value) -> Value {
        let mut v = event::convert_for(rt, obj).unwrap_or_else(|| obj.clone());
        v["apiVersion"] = json!(rt.api_version());
        v["kind"] = json!(rt.kind);
        v
    }

    /// An object served in `rt`'s version in the shape it is stored in.
    fn stored_form(rt: &ResourceType, obj: Value) -> Value {
        if event::is_converted(rt) {
            event::to_core(&obj)
        } else {
            obj
        }
    }

    fn ns_key(rt: &ResourceType, ns: Option<&str>) -> String {
        if rt.namespaced {
            ns.unwrap_or("").to_string()
        } else {
            String::new()
        }
    }

    async fn admit(
        &self,
        rt: &ResourceType,
        sub: &str,
        op: Operation,
        obj: Option<Value>,
        old: Option<Value>,
        how: AdmitHow<'_>,
    ) -> Result<(Option<Value>, Vec<String>), ApiError> {
        let src = obj.as_ref().or(old.as_ref());
        let name = src
            .and_then(|o| meta_str(o, "name"))
            .unwrap_or("")
            .to_string();
        let namespace = if rt.namespaced {
            src.and_then(|o| meta_str(o, "namespace"))
                .map(str::to_string)
        } else {
            None
        };
        let attrs = Attributes {
            group: rt.group.clone(),
            version: rt.version.clone(),
            kind: rt.kind.clone(),
            resource: rt.plural.clone(),
            subresource: sub.to_string(),
            namespace,
            name,
            operation: op,
            object: obj.map(|o| Self::served(rt, &o)),
            old_object: old.map(|o| Self::served(rt, &o)),
            dry_run: how.dry_run,
            user: UserInfo {
                username: "sandbox-admin".into(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            },
        };
        match self.admission.admit_with(self, attrs, how.between).await {
            Outcome::Allowed { object, warnings } => Ok((object, warnings)),
            Outcome::Denied(status) => Err(ApiError::from_status(&status)),
        }
    }

    /// Normalizes `obj` ([`ApiServer::normalize`]) and runs admission on it: the admitted
    /// object, with the pruning warnings before admission's.
    async fn normalize_and_admit(
        &self,
        rt: &ResourceType,
        sub: &str,
        op: Operation,
        mut obj: Value,
        old: Option<&Value>,
        opts: &WriteOptions,
    ) -> Result<(Value, Vec<String>), ApiError> {
        let field_validation = opts.field_validation.as_deref().unwrap_or("Warn");
        let mut warnings = self.normalize(rt, &mut obj, field_validation)?;
        // Legacy mode: the era's Initializers plugin, between the two kinds of webhooks.
        let initializers = |o: &mut Value| -> Result<(), Value> {
            match (op, old) {
                (Operation::Create, _) => self.assign_initializers(rt, o),
                (Operation::Update, Some(current)) if sub.is_empty() => {
                    self.settle_initializers(rt, current, o)
                }
                (Operation::Update, Some(current)) => {
                    self.check_initializers_update(rt, current, o)
                }
                _ => Ok(()),
            }
            .map_err(|e| e.to_status())
        };
        let between: Option<&Between<'_>> = if self.legacy_initializers {
            Some(&initializers)
        } else {
            None
        };
        let (admitted, admission_warnings) = self
            .admit(
                rt,
                sub,
                op,
                Some(obj.clone()),
                old.cloned(),
                AdmitHow {
                    dry_run: opts.dry_run,
                    between,
                },
            )
            .await?;
        warnings.extend(admission_warnings);
        Ok((admitted.unwrap_or(obj), warnings))
    }

    /// Defaults, custom schema work and validation shared by create and update.
    fn normalize(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        field_validation: &str,
    ) -> Result<Vec<String>, ApiError> {
        defaults::apply(&rt.group, &rt.kind, obj);
        let mut warnings = Vec::new();
        if rt.custom
            && let Some(schema) = rt.schema.as_ref()
        {
            // Validation waits until after mutating admission.
            let removed = crd::prune(schema, obj, true);
            match field_validation {
                "Strict" if !removed.is_empty() => {
                    let fields: Vec<String> = removed
                        .iter()
                        .map(|f| format!("unknown field \"{f}\""))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                        fields.join(", "),
                        kind = rt.kind,
                        version = rt.version,
                    )));
                }
                "Ignore" => {}
                _ => warnings.extend(removed.iter().map(|f| format!("unknown field \"{f}\""))),
            }
            crd::apply_defaults(schema, obj);
        }
        kinds::hooks(&rt.group, &rt.kind).normalize(self, rt, obj)?;
        Ok(warnings)
    }

    fn current(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let stored = self
            .store
            .get(&Self::key(rt), &Self::ns_key(rt, ns), name)
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        // Writes work on the version asked for; `stored_form` converts back.
        Ok(if event::is_converted(rt) {
            Arc::new(Self::served(rt, &stored))
        } else {
            stored
        })
    }

    /// A write by the control plane itself (garbage collector, namespace finalizer): no
    /// admission, no managed fields; removes the object if that ends its deletion.
    pub fn system_update(
        &self,
        key: &ResKey,
        obj: Value,
        expected_rv: u64,
    ) -> Result<Arc<Value>, ApiError> {
        let rt = self
            .store
            .registry()
            .storage(&key.group, &key.plural)
            .cloned()
            .ok_or_else(|| ApiError::internal(format!("unknown resource {}", key.plural)))?;
        let stored = self.store.update(key, obj, expected_rv)?;
        Ok(self.finalize_if_done(&rt, stored))
    }

    /// Removes an object being deleted once its finalizers are gone.
    fn finalize_if_done(&self, rt: &ResourceType, obj: Arc<Value>) -> Arc<Value> {
        let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
        let finalizers_empty = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        let hooks = kinds::hooks(&rt.group, &rt.kind);
        if deleting && finalizers_empty && !hooks.holds_removal(&obj) {
            let (ns, name) = crate::store::names(&obj);
            if let Ok(removed) =
                self.store
                    .remove(&Self::key(rt), &ns, &name, Some(object_rv(&obj)))
            {
                hooks.after_remove(self, &removed);
                return removed;
            }
        }
        obj
    }
}

/// How many times a write that lost a race with another writer is tried.
const WRITE_ATTEMPTS: u32 = 5;

/// Whether a write that failed with `e` on its `attempts`-th try is tried again: only a
/// resourceVersion conflict the client did not ask for (`may_retry`), as the real server
/// retries patches and deletes.
fn retries_conflict(e: &ApiError, attempts: u32, may_retry: bool) -> bool {
    may_retry && e.code == 409 && e.reason == "Conflict" && attempts < WRITE_ATTEMPTS
}

fn check_kind(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && !kind.is_empty()
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind of the object ({kind}) does not match the kind on the URL ({})",
            rt.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && split_api_version(av).0 != rt.group
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    Ok(())
}

impl ClusterView for ApiServer {
    fn list(&self, resource: ResourceRef<'_>, namespace: Option<&str>) -> Vec<Value> {
        let Ok(rt) = self.resolve(resource.group, resource.version, resource.resource) else {
            return Vec::new();
        };
        let ns = if rt.namespaced { namespace } else { None };
        self.store
            .list(&Self::key(&rt), ns)
            .0
            .iter()
            .map(|o| Self::served(&rt, o))
            .collect()
    }

    fn get(&self, resource: ResourceRef<'_>, namespace: Option<&str>, name: &str) -> Option<Value> {
        let rt = self
            .resolve(resource.group, resource.version, resource.resource)
            .ok()?;
        ApiServer::get(self, &rt, namespace, name).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unrequested_conflicts_are_retried_and_only_a_few_times() {
        let conflict = ApiError::conflict("", "configmaps", "x");
        assert!(retries_conflict(&conflict, 1, true));
        assert!(!retries_conflict(&conflict, 1, false));
        assert!(!retries_conflict(&conflict, WRITE_ATTEMPTS, true));
        assert!(!retries_conflict(&ApiError::bad_request("no"), 1, true));
    }

    #[test]
    fn dns_subdomain_names_are_checked() {
        assert!(is_dns_subdomain("a-b.c"));
        assert!(!is_dns_subdomain("A"));
        assert!(!is_dns_subdomain("-a"));
    }
}
