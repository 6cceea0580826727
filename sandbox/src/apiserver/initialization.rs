//! Kubernetes 1.7–1.13 Initializers ("legacy mode"): the decisions, as pure functions.
//!
//! What kube-apiserver did then, read from its sources (versions and files are in the
//! "Kubernetes 1.7–1.13 Initializers (legacy mode)" section of `sandbox/README.md`):
//! `InitializerConfiguration` objects (`admissionregistration.k8s.io/v1alpha1`) name
//! initializers and the resources they apply to; the `Initializers` admission plugin appends
//! their names to `metadata.initializers.pending` of every new object they match; a create
//! waits until the list is empty; list and watch hide objects that still have
//! `metadata.initializers` unless `includeUninitialized` is set; a `result` (a failed `Status`)
//! ends initialization by deleting the object and failing the waiting create with that status.
//!
//! The verbs call these functions through thin hooks (`create`, `update`, `read`, the watch
//! filter); nothing here touches the store.

use std::time::Duration;

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::resource::ResourceType;

/// The group of `InitializerConfiguration`.
pub const GROUP: &str = "admissionregistration.k8s.io";
/// The only version that ever served `InitializerConfiguration`.
pub const VERSION: &str = "v1alpha1";
/// The resource.
pub const PLURAL: &str = "initializerconfigurations";
/// The kind.
pub const KIND: &str = "InitializerConfiguration";

/// How long a create waits for initialization when the request gives no `?timeout=`:
/// `parseTimeout` in `apiserver/pkg/endpoints/handlers/rest.go` (1.7–1.13) returned 30 s.
pub const DEFAULT_CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// One field error: the field path and the message after it (`Invalid value: ...: why`).
pub type Cause = (String, String);

/// The `InitializerConfiguration` resource type: cluster-scoped, no status, served only in
/// legacy mode.
pub fn resource_type() -> ResourceType {
    ResourceType {
        group: GROUP.into(),
        version: VERSION.into(),
        kind: KIND.into(),
        plural: PLURAL.into(),
        singular: "initializerconfiguration".into(),
        namespaced: false,
        status_subresource: false,
        short_names: Vec::new(),
        categories: Vec::new(),
        columns: Vec::new(),
        schema: None,
        storage: true,
        custom: false,
    }
}

/// `metadata.initializers` of an object, unless absent or null.
pub fn initializers_of(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/initializers")
        .filter(|v| !v.is_null())
}

/// Whether an object is initialized: it has no `metadata.initializers` at all. The era's
/// storage filter (`SelectionPredicate.IncludeUninitialized`, fed by `initializers != nil`)
/// hid every object that had the field, pending names or a failure result alike.
pub fn is_initialized(obj: &Value) -> bool {
    initializers_of(obj).is_none()
}

/// The failure `result` an initializer set, if any.
pub fn failure_result(obj: &Value) -> Option<&Value> {
    initializers_of(obj)
        .and_then(|i| i.get("result"))
        .filter(|r| !r.is_null())
}

fn pending_of(initializers: &Value) -> Vec<&Value> {
    initializers
        .get("pending")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// The pending names of an object, in order.
pub fn pending_names(obj: &Value) -> Vec<String> {
    initializers_of(obj)
        .map(pending_of)
        .unwrap_or_default()
        .into_iter()
        .map(|p| p["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Whether an `initializers` value says nothing: no pending name and no result. The plugin
/// turned such a value into no `initializers` at all, on create (the creator's self-excluding
/// `pending: []`) and on update (the last name removed).
fn is_empty(initializers: &Value) -> bool {
    pending_of(initializers).is_empty() && initializers.get("result").is_none_or(Value::is_null)
}

/// What `metadata.initializers` becomes.
#[derive(Clone, Debug, PartialEq)]
pub enum Assignment {
    /// Left as the request has it.
    Unchanged,
    /// Removed: the object is (or stays) initialized.
    Remove,
    /// Set to this value.
    Set(Value),
}

/// `metadata.initializers` of a new object, as the `Initializers` admission plugin decided
/// (`plugin/pkg/admission/initialization/initialization.go`, `Admit`, `admission.Create`):
/// a creator that set the field keeps it (an empty one is removed: the object starts
/// initialized); otherwise the names of every matching initializer are assigned; mirror pods
/// (annotation `kubernetes.io/config.mirror`) are exempt.
pub fn assign_on_create(obj: &Value, matching: Vec<String>) -> Assignment {
    if let Some(given) = initializers_of(obj) {
        return if is_empty(given) {
            Assignment::Remove
        } else {
            Assignment::Unchanged
        };
    }
    if obj
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some()
        || matching.is_empty()
    {
        return Assignment::Unchanged;
    }
    let pending: Vec<Value> = matching.into_iter().map(|n| json!({"name": n})).collect();
    Assignment::Set(json!({"pending": pending}))
}

/// `metadata.initializers` after an update: an empty value (the last pending name removed,
/// no result) becomes none, as the plugin's `admission.Update` branch did.
pub fn settle_update(obj: &Value) -> Assignment {
    match initializers_of(obj) {
        Some(i) if is_empty(i) => Assignment::Remove,
        _ => Assignment::Unchanged,
    }
}

/// Applies an [`Assignment`] to an object.
pub fn apply(obj: &mut Value, assignment: Assignment) {
    let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    match assignment {
        Assignment::Unchanged => {}
        Assignment::Remove => {
            md.remove("initializers");
        }
        Assignment::Set(v) => {
            md.insert("initializers".into(), v);
        }
    }
}

/// `metadata.initializers` as 1.13 stored it: `result` is a `metav1.Status` kept in etcd as
/// protobuf, whose message has no `kind`/`apiVersion` (they are dropped) and whose `metadata`
/// Go always encodes, as `{}` when empty (both observed on kube-apiserver v1.13.0 by
/// `e2e/tests/legacy_conformance`; custom resources, stored as JSON, would have kept the two).
pub fn encode_result_as_go(obj: &mut Value) {
    if let Some(result) = obj
        .pointer_mut("/metadata/initializers/result")
        .and_then(Value::as_object_mut)
    {
        result.remove("kind");
        result.remove("apiVersion");
        result.entry("metadata").or_insert_with(|| json!({}));
    }
}

/// Removes `metadata.initializers`: what a server without the feature does (kube-apiserver
/// 1.14 dropped the field from every request).
pub fn strip(obj: &mut Value) {
    apply(obj, Assignment::Remove);
}

/// The names of the initializers that apply to a new object of `group/version/resource`,
/// given every stored `InitializerConfiguration`: configurations sorted by name, their
/// initializers concatenated (`mergeInitializerConfigurations` in
/// `pkg/kubeapiserver/admission/configuration/initializer_manager.go`), then those whose rules
/// match (`findInitializers`). Duplicates across configurations are kept, as they were.
pub fn matching_initializers(
    configurations: &[&Value],
    group: &str,
    version: &str,
    resource: &str,
) -> Vec<String> {
    let mut sorted: Vec<&Value> = configurations.to_vec();
    sorted.sort_by_cached_key(|c| crate::store::names(c).1);
    sorted
        .iter()
        .flat_map(|c| c["initializers"].as_array().cloned().unwrap_or_default())
        .filter(|i| {
            let rules = i["rules"].as_array().cloned().unwrap_or_default();
            rules_match(&rules, group, version, resource)
        })
        .filter_map(|i| i["name"].as_str().map(str::to_string))
        .collect()
}

/// `matchRule` of the era's plugin: true only when there is at least one rule and EVERY rule
/// matches (the loop returns false on the first rule that does not). A configuration with two
/// rules for two different resources therefore matched neither; the sandbox keeps that.
/// Wildcards count only in the first position (`groups[0] == "*"`), and `resources` entries
/// with a `/` (subresources) never match.
fn rules_match(rules: &[Value], group: &str, version: &str, resource: &str) -> bool {
    let strings = |rule: &Value, field: &str| -> Vec<String> {
        rule[field]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let has = |list: &[String], wanted: &str, wildcards: &[&str]| -> bool {
        match list.first() {
            None => false,
            Some(first) if wildcards.contains(&first.as_str()) => true,
            Some(_) => list.iter().any(|x| !x.contains('/') && x == wanted),
        }
    };
    !rules.is_empty()
        && rules.iter().all(|rule| {
            has(&strings(rule, "apiGroups"), group, &["*"])
                && has(&strings(rule, "apiVersions"), version, &["*"])
                && has(&strings(rule, "resources"), resource, &["*", "*/*"])
        })
}

/// A string as Go's `%q` prints it in `Invalid value: "..."`.
fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// 1.13's DNS-1123 subdomain check (`IsDNS1123Subdomain`), with its messages.
fn dns1123_subdomain_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !name.split('.').all(label_ok) {
        errs.push("a DNS-1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string());
    }
    errs
}

/// A fully qualified initializer name (`IsFullyQualifiedName`, used by 1.13 both for a
/// configuration's initializer names and for pending names): required, then a DNS-1123
/// subdomain, then at least three segments; only the first failing check is reported. 1.7 said
/// "should be a domain with at least two dots" and reported every failing check; 1.13's words
/// and behaviour were observed on a real 1.13 server (`tools/legacy-apiserver/README.md`, and
/// the sandbox's own comparison in its README).
fn fully_qualified_name_errors(field: &str, name: &str) -> Vec<Cause> {
    if name.is_empty() {
        return vec![(field.to_string(), "Required value".to_string())];
    }
    let dns = dns1123_subdomain_errors(name);
    if !dns.is_empty() {
        return vec![(
            field.to_string(),
            format!("Invalid value: {}: {}", quoted(name), dns.join(",")),
        )];
    }
    if name.split('.').count() < 3 {
        return vec![(
            field.to_string(),
            format!(
                "Invalid value: {}: should be a domain with at least three segments separated by dots",
                quoted(name)
            ),
        )];
    }
    Vec::new()
}

/// Validates an `InitializerConfiguration` (`ValidateInitializerConfiguration`): each
/// initializer's name is fully qualified and each rule names groups, versions and resources,
/// `*` alone when present, no subresources.
pub fn validate_configuration(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let initializers = obj["initializers"].as_array().cloned().unwrap_or_default();
    for (i, init) in initializers.iter().enumerate() {
        let path = format!("initializers[{i}]");
        let name = init["name"].as_str().unwrap_or_default();
        out.extend(fully_qualified_name_errors(&format!("{path}.name"), name));
        for (j, rule) in init["rules"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            out.extend(validate_rule(rule, &format!("{path}.rules[{j}]")));
        }
    }
    out
}

/// `validateRule` as 1.13 answered it: each list required; `*` alone when present; versions
/// and resources not empty; resources without `/` (1.13 added "must not specify
/// subresources" for initializers, whose `matchRule` never matched them).
fn validate_rule(rule: &Value, path: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    for (field, what) in [
        ("apiGroups", "API groups"),
        ("apiVersions", "API versions"),
        ("resources", "resources"),
    ] {
        let list: Vec<String> = rule[field]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default();
        if list.is_empty() {
            out.push((format!("{path}.{field}"), "Required value".to_string()));
        }
        if list.len() > 1 && list.iter().any(|x| x == "*") {
            let shown_list: Vec<String> = list.iter().map(|s| quoted(s)).collect();
            out.push((
                format!("{path}.{field}"),
                format!(
                    "Invalid value: []string{{{}}}: if '*' is present, must not specify other {what}",
                    shown_list.join(", ")
                ),
            ));
        }
        if field == "apiGroups" {
            continue;
        }
        for (k, x) in list.iter().enumerate() {
            if x.is_empty() {
                out.push((format!("{path}.{field}[{k}]"), "Required value".to_string()));
            } else if field == "resources" && x.contains('/') {
                out.push((
                    format!("{path}.{field}[{k}]"),
                    format!(
                        "Invalid value: {}: must not specify subresources",
                        quoted(x)
                    ),
                ));
            }
        }
    }
    out
}

/// Validates `metadata.initializers` (`ValidateInitializers` in apimachinery's
/// `api/validation/objectmeta.go`): every pending name fully qualified (the first failing
/// check only, as `IsFullyQualifiedName` returned early), and a result, when set, with
/// `status: Failure`. Duplicate names were not checked.
pub fn validate_initializers(obj: &Value) -> Vec<Cause> {
    let Some(init) = initializers_of(obj) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, p) in pending_of(init).iter().enumerate() {
        let name = p["name"].as_str().unwrap_or_default();
        out.extend(fully_qualified_name_errors(
            &format!("metadata.initializers.pending[{i}].name"),
            name,
        ));
    }
    out.extend(validate_result(init.get("result")));
    out
}

fn validate_result(result: Option<&Value>) -> Vec<Cause> {
    match result.filter(|r| !r.is_null()) {
        None => Vec::new(),
        Some(r) if r["status"] == "Failure" => Vec::new(),
        Some(r) => vec![(
            "metadata.initializers.result.status".to_string(),
            format!(
                "Invalid value: {}: must be 'Failure'",
                quoted(r["status"].as_str().unwrap_or_default())
            ),
        )],
    }
}

/// Validates the change of `metadata.initializers` from `old` to `new`
/// (`ValidateInitializersUpdate`): an initialized object may not get initializers back; a
/// result, once set, may not change.
pub fn validate_initializers_update(new: &Value, old: &Value) -> Vec<Cause> {
    match (initializers_of(new), initializers_of(old)) {
        (Some(_), None) => vec![(
            "metadata.initializers".to_string(),
            "Invalid value: \"null\": field is immutable once initialization has completed"
                .to_string(),
        )],
        (Some(n), Some(o)) => {
            let new_result = n.get("result").filter(|r| !r.is_null());
            let old_result = o.get("result").filter(|r| !r.is_null());
            match (new_result, old_result) {
                (Some(_), Some(or)) if new_result != Some(or) => vec![(
                    "metadata.initializers.result".to_string(),
                    format!(
                        "Invalid value: {}: field is immutable",
                        new_result.cloned().unwrap_or(Value::Null)
                    ),
                )],
                (None, Some(_)) => vec![(
                    "metadata.initializers.result".to_string(),
                    "Invalid value: \"null\": field is immutable".to_string(),
                )],
                _ => Vec::new(),
            }
        }
        _ => Vec::new(),
    }
}

/// What a waiting create learns from one change of its object.
#[derive(Clone, Debug, PartialEq)]
pub enum WaitStep {
    /// Still pending.
    Waiting,
    /// Initialized: the create answers with this object.
    Initialized(Value),
    /// An initializer set a failure result: the create answers with this status.
    Failed(Value),
    /// Deleted without a result.
    Deleted,
}

impl WaitStep {
    /// The waiting create's answer at this step; `None` while the object is pending.
    pub fn answer(self) -> Option<Result<Value, ApiError>> {
        match self {
            WaitStep::Waiting => None,
            WaitStep::Initialized(obj) => Some(Ok(obj)),
            WaitStep::Failed(status) => Some(Err(result_error(&status))),
            WaitStep::Deleted => Some(Err(deleted_while_waiting())),
        }
    }
}

/// One step of `Store.WaitForInitialized` (`apiserver/pkg/registry/generic/registry/store.go`):
/// a modification without `initializers` ends the wait with the object, one with a `result`
/// ends it with that status; a deletion ends it with the result if the deleted object carried
/// one, else with "object deleted while waiting for creation".
pub fn wait_step(deleted: bool, obj: &Value) -> WaitStep {
    if let Some(result) = failure_result(obj) {
        return WaitStep::Failed(result.clone());
    }
    if deleted {
        return WaitStep::Deleted;
    }
    if is_initialized(obj) {
        WaitStep::Initialized(obj.clone())
    } else {
        WaitStep::Waiting
    }
}

/// The error of a create whose object an initializer failed: the `result` Status as it is
/// (`errors.FromObject`); a status without a code answers 500, as `ErrorToAPIStatus` did for
/// a failure.
pub fn result_error(status: &Value) -> ApiError {
    let mut e = ApiError::from_status(status);
    if e.code == 0 {
        e.code = 500;
    }
    e
}

/// The create's answer when its object is deleted while it waits without a result.
pub fn deleted_while_waiting() -> ApiError {
    let mut e =
        ApiError::internal("Internal error occurred: object deleted while waiting for creation");
    e.details = Some(json!({"causes": [{"message": "object deleted while waiting for creation"}]}));
    e
}

/// The create's answer when initialization outlasts the request's timeout: `finishRequest`'s
/// `errors.NewTimeoutError(...)`, a 504 `Timeout` whose message names the timeout as Go prints
/// a duration (`... within requested timeout 30s`, observed on a real 1.13 server; 1.7–1.10
/// said "within allowed duration"). The object stays, uninitialized.
pub fn timeout_error(timeout: Duration) -> ApiError {
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!(
            "Timeout: request did not complete within requested timeout {}",
            go_duration(timeout)
        ),
    );
    e.details = Some(json!({}));
    e
}

/// A duration as Go's `time.Duration.String` prints it: `30s`, `1m30s`, `1.5s`, `500ms`,
/// `1h0m0s`.
fn go_duration(d: Duration) -> String {
    fn trimmed(whole: u128, fraction: u128, digits: usize) -> String {
        let mut out = whole.to_string();
        if fraction > 0 {
            let f = format!("{fraction:0digits$}");
            out.push('.');
            out.push_str(f.trim_end_matches('0'));
        }
        out
    }
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trimmed(nanos / 1_000, nanos % 1_000, 3));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trimmed(nanos / 1_000_000, nanos % 1_000_000, 6));
    }
    let secs = nanos / 1_000_000_000;
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let s = format!("{}s", trimmed(s, nanos % 1_000_000_000, 9));
    match (h, m) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}

/// The create's wait: `?timeout=` parsed as Go's `time.ParseDuration` did, else 30 s (a value
/// that does not parse is logged and ignored by the era's `parseTimeout`; so here).
pub fn create_timeout(param: Option<&str>) -> Duration {
    param
        .filter(|s| !s.is_empty())
        .and_then(parse_go_duration)
        .unwrap_or(DEFAULT_CREATE_TIMEOUT)
}

/// Go's `time.ParseDuration` for non-negative values: `300ms`, `1.5s`, `1m30s`, `0`.
fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let number: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds_per_unit;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// `includeUninitialized` on a create. 1.7–1.10's create handler compared the parameter with
/// `"1"` only (`handlers/create.go`); from 1.11 it was a field of `CreateOptions`, decoded as
/// every boolean query parameter ([`include_uninitialized_on_list`]), so `true` works too. The
/// sandbox follows 1.13.
pub fn include_uninitialized_on_create(param: Option<&str>) -> bool {
    include_uninitialized_on_list(param)
}

/// `includeUninitialized` on list and watch, decoded as every boolean query parameter was
/// (`Convert_Slice_string_To_bool`): absent, `0` and `false` (any case) are false, anything
/// else, the empty string included, is true.
pub fn include_uninitialized_on_list(param: Option<&str>) -> bool {
    match param {
        None => false,
        Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
    }
}

#[cfg(test)]
mod tests;
