//! The API server's semantics, independent of HTTP: get, list, create, update, patch, apply and
//! delete over the store, with defaulting, generation, managed fields, status subresources,
//! custom resource schemas, admission and dry run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use crate::admission::{Admission, Attributes, Operation, Outcome, UserInfo};
use crate::clock::now_rfc3339 as now;
use crate::crd;
use crate::decode;
use crate::defaults;
use crate::error::ApiError;
use crate::event;
use crate::faults::Faults;
use crate::fields::{self, ApplyRequest, Scope, Shape};
use crate::ids::{name_suffix, new_uid};
use crate::patch::{self, PatchKind};
use crate::resource::{ResourceType, split_api_version};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{ResKey, Store, object_rv};
use crate::view::{ClusterView, ResourceRef};

/// Options common to writes.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// The client's User-Agent, whose first word names the manager when none is given.
    pub user_agent: String,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `force=true` (apply).
    pub force: bool,
    /// `fieldValidation`: `Strict`, `Warn` (default) or `Ignore`; applies to custom resources.
    pub field_validation: Option<String>,
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

/// List options.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Parsed label selector.
    pub labels: LabelSelector,
    /// Parsed field selector.
    pub fields: FieldSelector,
    /// Page size (0: all).
    pub limit: usize,
    /// Continue token.
    pub continue_token: Option<String>,
}

/// The result of a write.
#[derive(Clone, Debug)]
pub struct Written {
    /// The object as served.
    pub object: Value,
    /// Admission warnings.
    pub warnings: Vec<String>,
    /// Whether the write created the object (201).
    pub created: bool,
}

/// The API server.
pub struct ApiServer {
    /// Object storage.
    pub store: Arc<Store>,
    /// The admission chain.
    pub admission: Admission,
    /// Injected faults.
    pub faults: Arc<Faults>,
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
            next_ip: AtomicU32::new(1),
        }
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
            .ok_or_else(|| {
                ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )
            })
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

    /// GET one object.
    pub fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let obj = self
            .store
            .get(&Self::key(rt), &Self::ns_key(rt, ns), name)
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        Ok(Self::served(rt, &obj))
    }

    /// LIST: the list object with items, filtered and paged.
    pub fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<Value, ApiError> {
        let ns = if rt.namespaced { ns } else { None };
        let (items, rv) = self.store.list(&Self::key(rt), ns);
        let mut out = Vec::new();
        let start_after = match &opts.continue_token {
            Some(t) => Some(decode_continue(t)?),
            None => None,
        };
        let mut more = false;
        for obj in items {
            let (ons, oname) = crate::store::names(&obj);
            if let Some((sns, sname)) = &start_after
                && (ons.as_str(), oname.as_str()) <= (sns.as_str(), sname.as_str())
            {
                continue;
            }
            // Field selectors name the fields of the version asked for.
            let served;
            let fields_of = if event::is_converted(rt) {
                served = Self::served(rt, &obj);
                &served
            } else {
                &*obj
            };
            if !opts.labels.matches(obj.pointer("/metadata/labels"))
                || !opts.fields.matches(fields_of)
            {
                continue;
            }
            if opts.limit > 0 && out.len() == opts.limit {
                more = true;
                break;
            }
            out.push(Self::served(rt, &obj));
        }
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if more && let Some(last) = out.last() {
            let (lns, lname) = crate::store::names(last);
            metadata["continue"] = json!(encode_continue(&lns, &lname));
        }
        Ok(json!({
            "kind": format!("{}List", rt.kind),
            "apiVersion": rt.api_version(),
            "metadata": metadata,
            "items": out,
        }))
    }

    async fn admit(
        &self,
        rt: &ResourceType,
        sub: &str,
        op: Operation,
        obj: Option<Value>,
        old: Option<Value>,
        dry_run: bool,
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
            dry_run,
            user: UserInfo {
                username: "sandbox-admin".into(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            },
        };
        match self.admission.admit(self, attrs).await {
            Outcome::Allowed { object, warnings } => Ok((object, warnings)),
            Outcome::Denied(status) => Err(ApiError::from_status(&status)),
        }
    }

    /// Defaults, custom schema work and validation shared by create and update.
    fn normalize(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        field_validation: &str,
    ) -> Result<Vec<String>, ApiError> {
        defaults::apply(&rt.group, &rt.kind, obj);
        let name = meta_str(obj, "name").unwrap_or("").to_string();
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
        if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
            let types = crd::resource_types(obj);
            if types.is_empty() {
                return Err(ApiError::invalid(&rt.group, &rt.kind, &name, vec![("spec".into(), "Invalid value: a CRD needs group, names.plural, names.kind and a served version".into())]));
            }
            let expected = format!("{}.{}", types[0].plural, types[0].group);
            if name != expected {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    &name,
                    vec![(
                        "metadata.name".into(),
                        format!(
                            "Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                        ),
                    )],
                ));
            }
        }
        if rt.kind == "Service" && rt.group.is_empty() {
            let ty = obj
                .pointer("/spec/type")
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP")
                .to_string();
            if ty != "ExternalName"
                && obj
                    .pointer("/spec/clusterIP")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
                let ip = format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff);
                if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.insert("clusterIP".into(), json!(ip));
                    spec.insert("clusterIPs".into(), json!([ip]));
                }
            }
        }
        Ok(warnings)
    }

    /// CREATE.
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
    async fn create_inner(
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
        if !is_dns_subdomain(&name)
            && rt.kind != "ClusterRole"
            && rt.kind != "ClusterRoleBinding"
            && rt.kind != "Role"
            && rt.kind != "RoleBinding"
        {
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
        if rt.group.is_empty() && rt.kind == "Namespace" {
            let labels = md.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
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
        if rt.group.is_empty() && rt.kind == "Namespace" {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
        }
        let prune_warnings = self.normalize(
            rt,
            &mut obj,
            opts.field_validation.as_deref().unwrap_or("Warn"),
        )?;
        let (admitted, mut warnings) = self
            .admit(
                rt,
                "",
                Operation::Create,
                Some(obj.clone()),
                None,
                opts.dry_run,
            )
            .await?;
        warnings.splice(0..0, prune_warnings);
        let mut obj = admitted.unwrap_or(obj);
        obj["apiVersion"] = json!(rt.api_version());
        if rt.custom {
            let causes = crd::process(rt.schema.as_ref(), &mut obj, None);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes));
            }
        }
        if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
            obj["status"] = crd::established_status(&obj, &now());
        }
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
        if opts.dry_run {
            return Ok(Written {
                object: Self::served(rt, &obj),
                warnings,
                created: true,
            });
        }
        let stored = self
            .store
            .create(&Self::key(rt), Self::stored_form(rt, obj))?;
        self.after_write(rt, &stored);
        if rt.group.is_empty() && rt.kind == "Namespace" {
            self.create_default_service_account(&name);
        }
        Ok(Written {
            object: Self::served(rt, &stored),
            warnings,
            created: true,
        })
    }

    /// Every namespace gets a `default` ServiceAccount, as the service account controller does.
    fn create_default_service_account(&self, namespace: &str) {
        let sa = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": namespace, "uid": new_uid(), "creationTimestamp": now()},
        });
        // Already there is fine.
        let _ = self.store.create(&ResKey::new("", "serviceaccounts"), sa);
    }

    /// Side effects of a stored write (CRD registration).
    fn after_write(&self, rt: &ResourceType, obj: &Value) {
        if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
            let types = crd::resource_types(obj);
            let mut reg = self.store.registry_mut();
            if let Some(first) = types.first() {
                reg.remove_custom(&first.group, &first.plural);
            }
            for t in types {
                reg.insert(t);
            }
        }
    }

    /// The object to store for an update of `current` to `new` through `sub`.
    fn prepare_update(
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
            let added: Vec<String> = md
                .get("finalizers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
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
        if rt.group.is_empty() && rt.kind == "Namespace" {
            let name = cur_md.get("name").cloned().unwrap_or(Value::Null);
            let labels = md.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), name);
            }
        }
        Ok(result)
    }

    async fn finish_update(
        &self,
        rt: &ResourceType,
        sub: &str,
        current: &Value,
        mut obj: Value,
        opts: &WriteOptions,
        record_manager: bool,
    ) -> Result<Written, ApiError> {
        let prune_warnings = self.normalize(
            rt,
            &mut obj,
            opts.field_validation.as_deref().unwrap_or("Warn"),
        )?;
        let (admitted, mut warnings) = self
            .admit(
                rt,
                sub,
                Operation::Update,
                Some(obj.clone()),
                Some(current.clone()),
                opts.dry_run,
            )
            .await?;
        warnings.splice(0..0, prune_warnings);
        let mut obj = admitted.unwrap_or(obj);
        if rt.custom {
            let name = meta_str(&obj, "name").unwrap_or("").to_string();
            let old = Self::served(rt, current);
            let causes = crd::process(rt.schema.as_ref(), &mut obj, Some(&old));
            if !causes.is_empty() {
                return Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes));
            }
        }
        if rt.group == "apiextensions.k8s.io"
            && rt.kind == "CustomResourceDefinition"
            && sub.is_empty()
        {
            let conditions = current.get("status").cloned();
            obj["status"] = conditions.unwrap_or_else(|| crd::established_status(&obj, &now()));
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
        self.after_write(rt, &stored);
        let stored = self.finalize_if_done(rt, stored);
        Ok(Written {
            object: Self::served(rt, &stored),
            warnings,
            created: false,
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
        let ns_pending = rt.kind == "Namespace"
            && rt.group.is_empty()
            && obj
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty());
        if deleting && finalizers_empty && !ns_pending {
            let (ns, name) = crate::store::names(&obj);
            if let Ok(removed) =
                self.store
                    .remove(&Self::key(rt), &ns, &name, Some(object_rv(&obj)))
            {
                self.after_remove(rt, &removed);
                return removed;
            }
        }
        obj
    }

    fn after_remove(&self, rt: &ResourceType, obj: &Value) {
        if rt.group == "apiextensions.k8s.io"
            && rt.kind == "CustomResourceDefinition"
            && let Some(first) = crd::resource_types(obj).first()
        {
            {
                let key = ResKey::new(&first.group, &first.plural);
                for o in self.store.list(&key, None).0 {
                    let (ns, name) = crate::store::names(&o);
                    let _ = self.store.remove(&key, &ns, &name, None);
                }
                self.store
                    .registry_mut()
                    .remove_custom(&first.group, &first.plural);
            }
        }
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
        if let Some(rv) = meta_str(&body, "resourceVersion").filter(|s| !s.is_empty())
            && rv.parse::<u64>().ok() != Some(object_rv(&current))
        {
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
        let obj = self.prepare_update(rt, sub, &current, body)?;
        self.finish_update(rt, sub, &current, obj, opts, true).await
    }

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
            return Err(ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
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
                Err(e)
                    if e.code == 409
                        && e.reason == "Conflict"
                        && attempts < 5
                        && !patch_has_rv(kind, &body) =>
                {
                    continue;
                }
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
                if let Some(rv) = meta_str(&patched, "resourceVersion").filter(|s| !s.is_empty())
                    && rv.parse::<u64>().ok() != Some(object_rv(current))
                {
                    return Err(ApiError::conflict(&rt.group, &rt.plural, name));
                }
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
        let mut written = self
            .create_with_managed(rt, ns, merged, opts, managed)
            .await?;
        written.created = true;
        Ok(written)
    }

    async fn create_with_managed(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
        managed: Option<Value>,
    ) -> Result<Written, ApiError> {
        self.create_inner(rt, ns, obj, opts, managed).await
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
                Err(e)
                    if e.code == 409
                        && e.reason == "Conflict"
                        && attempts < 5
                        && opts.resource_version.is_none() =>
                {
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
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    rt.qualified(),
                    meta_str(&current, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && rv.parse::<u64>().ok() != Some(object_rv(&current))
        {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    rt.qualified(),
                    object_rv(&current)
                ),
            ));
        }
        self.admit(
            rt,
            "",
            Operation::Delete,
            None,
            Some((*current).clone()),
            opts.dry_run,
        )
        .await?;
        if opts.dry_run {
            return Ok(Self::served(rt, &current));
        }
        let mut obj = (*current).clone();
        let is_namespace = rt.group.is_empty() && rt.kind == "Namespace";
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
        if finalizers.is_empty() && !is_namespace {
            let removed = self.store.remove(
                &Self::key(rt),
                &crate::store::names(&current).0,
                name,
                Some(object_rv(&current)),
            )?;
            self.after_remove(rt, &removed);
            if rt.group.is_empty() && rt.kind == "Pod" {
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
        if is_namespace {
            obj["status"] = json!({"phase": "Terminating"});
        }
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

fn patch_has_rv(kind: PatchKind, body: &Value) -> bool {
    match kind {
        PatchKind::Json => body
            .as_array()
            .is_some_and(|ops| ops.iter().any(|o| o["path"] == "/metadata/resourceVersion")),
        _ => body.pointer("/metadata/resourceVersion").is_some(),
    }
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

fn encode_continue(ns: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([ns, name]).to_string())
}

fn decode_continue(token: &str) -> Result<(String, String), ApiError> {
    use base64::Engine;
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Vec<String> = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    match v.as_slice() {
        [ns, name] => Ok((ns.clone(), name.clone())),
        _ => Err(bad()),
    }
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
    fn continue_tokens_round_trip() {
        assert_eq!(
            decode_continue(&encode_continue("ns", "n")).unwrap(),
            ("ns".into(), "n".into())
        );
        assert_eq!(decode_continue("!!").unwrap_err().code, 400);
    }

    #[test]
    fn dns_subdomain_names_are_checked() {
        assert!(is_dns_subdomain("a-b.c"));
        assert!(!is_dns_subdomain("A"));
        assert!(!is_dns_subdomain("-a"));
    }
}
