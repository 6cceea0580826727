//! The controller's decisions, pure: which kinds the rules watch, whether an object is this
//! initializer's to act on (its name first in `metadata.initializers.pending`), whether it is in
//! scope (selectors and annotation gate), and the one object to write back for each outcome of
//! the handler. The IO in `controller/mod.rs` reads objects and writes what these functions say.
//!
//! The object stays untyped JSON here: `metadata.initializers` left the typed `ObjectMeta` with
//! Kubernetes 1.14, so the handler's typed copy never sees it, its patch never touches it, and
//! the name's removal is never counted as the handler's mutation.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::gate::{AnnotationGate, selector_matches};
use crate::review::Response;

/// The label every namespace carries with its own name (kube-apiserver ≥ 1.21 sets it; the
/// controller adds it when absent, so that selectors written for webhooks match the same way).
pub(crate) const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Why `name` cannot be a pending initializer name, in the words of the era's API server, or
/// `None` when it can: a DNS-1123 subdomain with at least three segments
/// (`IsFullyQualifiedName` in `k8s.io/apimachinery/pkg/api/validation`, which validated
/// `metadata.initializers.pending[].name` in 1.7–1.13; 1.7 said "at least two dots").
pub(crate) fn pending_name_error(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("Required value".to_owned());
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Some(format!(
            "Invalid value: {name:?}: a DNS-1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ));
    }
    if name.split('.').count() < 3 {
        return Some(format!(
            "Invalid value: {name:?}: should be a domain with at least two dots"
        ));
    }
    None
}

/// One rule of an `InitializerConfiguration` (`admissionregistration.k8s.io/v1alpha1` `Rule`):
/// which groups, versions and resources it covers, `*` for all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializerRule {
    /// API groups (`""` is the core group), or `*`.
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// API versions, or `*`.
    #[serde(default)]
    pub api_versions: Vec<String>,
    /// Resources (plural, lower case), or `*`.
    #[serde(default)]
    pub resources: Vec<String>,
}

fn covers(values: &[String], value: &str) -> bool {
    values.iter().any(|v| v == "*" || v == value)
}

impl InitializerRule {
    /// Whether the rule covers the resource `plural` of `group`/`version`. A resource entry
    /// with a subresource (`pods/status`) covers only that subresource, never the object;
    /// `*/*` covers every resource.
    pub fn matches(&self, group: &str, version: &str, plural: &str) -> bool {
        covers(&self.api_groups, group)
            && covers(&self.api_versions, version)
            && self
                .resources
                .iter()
                .any(|r| r == "*" || r == "*/*" || r == plural)
    }
}

/// Whether the controller watches a registered kind: every kind without rules, else the kinds
/// some rule covers. The era's API server gave an initializer's name only to resources that
/// every rule of the entry covers (`matchRule` in the `Initializers` admission plugin); watching
/// what any rule covers is a superset, so nothing pending on the name is missed.
pub(crate) fn watched(
    rules: Option<&[InitializerRule]>,
    group: &str,
    version: &str,
    plural: &str,
) -> bool {
    rules.is_none_or(|rules| rules.iter().any(|r| r.matches(group, version, plural)))
}

/// Where an object stands with respect to this initializer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Initialized, or this name is not pending at all.
    NotPending,
    /// This name is pending behind another one: wait until the earlier names are gone.
    Waiting,
    /// A failure result is set: the API server is deleting the object.
    Failed,
    /// This name is first: act now.
    Mine,
}

fn initializers(object: &Value) -> Option<&Value> {
    object.pointer("/metadata/initializers")
}

fn pending_names(object: &Value) -> Vec<&str> {
    initializers(object)
        .and_then(|i| i.get("pending"))
        .and_then(Value::as_array)
        .map(|pending| {
            pending
                .iter()
                .map(|p| p.get("name").and_then(Value::as_str).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// The object's turn for `pending_name`: first in `metadata.initializers.pending`, as the 1.7
/// initializers looked for it (`pending[0].name`).
pub(crate) fn turn(object: &Value, pending_name: &str) -> Turn {
    let pending = pending_names(object);
    if !pending.contains(&pending_name) {
        return Turn::NotPending;
    }
    if initializers(object)
        .and_then(|i| i.get("result"))
        .is_some_and(|r| !r.is_null())
    {
        return Turn::Failed;
    }
    match pending.first() {
        Some(first) if *first == pending_name => Turn::Mine,
        _ => Turn::Waiting,
    }
}

/// What decides whether an object is in this initializer's scope: the selectors of the
/// configuration (as a `MutatingWebhookConfiguration` has them) and the annotation gate.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    pub(crate) namespace_selector: Option<LabelSelector>,
    pub(crate) object_selector: Option<LabelSelector>,
    pub(crate) gate: Option<AnnotationGate>,
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The namespace's labels as a namespace selector sees them: its own plus
/// [`NAMESPACE_NAME_LABEL`].
pub(crate) fn namespace_labels(namespace: &Value) -> BTreeMap<String, String> {
    let mut labels = string_map(namespace.pointer("/metadata/labels"));
    if let Some(name) = namespace.pointer("/metadata/name").and_then(Value::as_str) {
        labels
            .entry(NAMESPACE_NAME_LABEL.to_owned())
            .or_insert_with(|| name.to_owned());
    }
    labels
}

/// The labels of a namespace known only by name (it could not be read).
pub(crate) fn labels_of_unknown_namespace(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), name.to_owned())])
}

impl Scope {
    /// Whether the object is in scope. `namespace_labels` are the labels of the object's
    /// namespace (`None` for a cluster-scoped object). As for a webhook, the namespace selector
    /// of a cluster-scoped object is matched against the object itself when it is a Namespace,
    /// and never excludes other cluster-scoped objects.
    pub(crate) fn admits(
        &self,
        object: &Value,
        labels_of_namespace: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let labels = string_map(object.pointer("/metadata/labels"));
        if let Some(selector) = &self.namespace_selector {
            let is_namespace = object.get("kind").and_then(Value::as_str) == Some("Namespace");
            let matched = match labels_of_namespace {
                Some(ns) => selector_matches(selector, Some(ns)),
                None if is_namespace => selector_matches(selector, Some(&namespace_labels(object))),
                None => true,
            };
            if !matched {
                return false;
            }
        }
        if let Some(selector) = &self.object_selector
            && !selector_matches(selector, Some(&labels))
        {
            return false;
        }
        match &self.gate {
            Some(gate) => gate.admits_json(object),
            None => true,
        }
    }
}

/// What to do with an object seen by the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Not this initializer's turn, or already handled: leave it alone.
    Leave,
    /// Out of scope (selectors or gate): remove the name without running the handler.
    Release,
    /// Run the handler, then write its outcome.
    Run,
}

/// The plan for `object`. `seen` is true when this uid and resourceVersion were acted on
/// already (an event delivered twice, a relist). The initialized-by mark is no reason to skip
/// the handler: the object's author can write it, so an object that arrives with it is handled
/// like any other (handlers are idempotent, so one the webhook backend did handle is unchanged).
pub(crate) fn plan(
    object: &Value,
    pending_name: &str,
    seen: bool,
    scope: &Scope,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Plan {
    if seen || turn(object, pending_name) != Turn::Mine {
        return Plan::Leave;
    }
    if !scope.admits(object, namespace_labels) {
        return Plan::Release;
    }
    Plan::Run
}

/// What the one update does, for logs and the `initializer_controller_updates` metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// The handler changed the object; the change and the name's removal in one update.
    Mutated,
    /// The handler changed nothing; the name removed.
    Unchanged,
    /// Out of scope; the name removed, the handler not run.
    Released,
    /// The handler refused the object; a failure result written.
    Denied,
    /// The handler failed (panic, budget, undecodable object) under `FailurePolicy::Deny`: a
    /// failure result written.
    Failed,
    /// The handler failed under `FailurePolicy::Allow`: the name removed, the object unchanged.
    FailedOpen,
}

impl Written {
    /// The label value in metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Written::Mutated => "mutated",
            Written::Unchanged => "unchanged",
            Written::Released => "released",
            Written::Denied => "denied",
            Written::Failed => "failed",
            Written::FailedOpen => "failed_open",
        }
    }
}

/// The object with `pending_name` removed from the front of its pending list; with nothing
/// left pending and no result, `metadata.initializers` goes (the object is initialized), as the
/// 1.7 initializers wrote it (`Initializers = nil` once their name was the last).
pub(crate) fn without_name(mut object: Value, pending_name: &str) -> Value {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return object;
    };
    let mut emptied = false;
    if let Some(initializers) = meta.get_mut("initializers").and_then(Value::as_object_mut) {
        if let Some(pending) = initializers
            .get_mut("pending")
            .and_then(Value::as_array_mut)
            && let Some(at) = pending
                .iter()
                .position(|p| p.get("name").and_then(Value::as_str) == Some(pending_name))
        {
            pending.remove(at);
        }
        let pending_empty = initializers
            .get("pending")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        let no_result = initializers.get("result").is_none_or(Value::is_null);
        emptied = pending_empty && no_result;
    }
    if emptied {
        meta.remove("initializers");
    }
    object
}

/// The reason of a meta/v1 Status for an HTTP code, as the API server names them.
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        504 => "Timeout",
        _ if code >= 500 => "InternalError",
        _ => "BadRequest",
    }
}

/// The object with a failure `result` (pending unchanged): the API server then deletes it and
/// answers the waiting create with this status.
pub(crate) fn with_failure(mut object: Value, code: u16, message: &str) -> Value {
    let result = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason_for(code),
        "message": message,
    });
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let initializers = meta
            .entry("initializers")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(initializers) = initializers.as_object_mut() {
            initializers.insert("result".to_owned(), result);
        }
    }
    object
}

/// The one object to write after the handler answered `response` for `object`: the handler's
/// patch applied to the object as read (so fields the typed object does not know, such as
/// `metadata.initializers`, are kept) and the name removed; or a failure result for a refusal
/// (a denial, or a failure under `FailurePolicy::Deny`). A patch that does not apply to the
/// object as read counts as a handler failure, decided by `fail_closed`.
pub(crate) fn write_for(
    object: &Value,
    pending_name: &str,
    response: &Response,
    fail_closed: bool,
) -> (Value, Written) {
    use crate::review::Verdict;
    if !response.allowed {
        let (code, message) = response
            .status
            .as_ref()
            .map(|s| (s.code, s.message.as_str()))
            .unwrap_or((403, "refused by the initializer"));
        let written = if response.verdict == Verdict::Denied {
            Written::Denied
        } else {
            Written::Failed
        };
        return (with_failure(object.clone(), code, message), written);
    }
    let Some(patch) = &response.patch else {
        let written = if response.verdict == Verdict::Error {
            Written::FailedOpen
        } else {
            Written::Unchanged
        };
        return (without_name(object.clone(), pending_name), written);
    };
    let mut patched = object.clone();
    match json_patch::patch(&mut patched, patch) {
        Ok(()) => (without_name(patched, pending_name), Written::Mutated),
        Err(e) if fail_closed => (
            with_failure(
                object.clone(),
                500,
                &format!("initializer failed: its patch does not apply to the object: {e}"),
            ),
            Written::Failed,
        ),
        Err(_) => (
            without_name(object.clone(), pending_name),
            Written::FailedOpen,
        ),
    }
}

/// How many times one object is re-read and redone after a conflict (409) or a failed write
/// before the controller leaves it for the next relist.
pub(crate) const MAX_ATTEMPTS: u32 = 8;

/// What to do after a write answered `code`: redo from a fresh read (409, or a transient
/// failure), stop because the object is gone (404), or give up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterWrite {
    /// Read the object again and decide again, after the given backoff in milliseconds.
    Redo { backoff_ms: u64 },
    /// The object was deleted meanwhile.
    Gone,
    /// Stop trying; a later relist may pick the object up again.
    GiveUp,
}

/// The next step after a failed write of attempt `attempt` (1-based) that answered `code`
/// (`None`: no answer, a transport error). Conflicts are redone at once: another writer (the
/// object's owner, another replica, another initializer) changed the object and the fresh read
/// carries it.
pub(crate) fn after_failed_write(code: Option<u16>, attempt: u32) -> AfterWrite {
    if attempt >= MAX_ATTEMPTS {
        return AfterWrite::GiveUp;
    }
    match code {
        Some(404) => AfterWrite::Gone,
        Some(409) => AfterWrite::Redo { backoff_ms: 0 },
        Some(code) if code == 429 || code >= 500 => AfterWrite::Redo {
            backoff_ms: backoff_ms(attempt),
        },
        None => AfterWrite::Redo {
            backoff_ms: backoff_ms(attempt),
        },
        Some(_) => AfterWrite::GiveUp,
    }
}

fn backoff_ms(attempt: u32) -> u64 {
    (100u64 << attempt.min(6)).min(5_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::INITIALIZED_BY_ANNOTATION;
    use crate::review::{Status, Verdict};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    const ME: &str = "sidecar.initializer.kubernetes.io";

    fn deployment(pending: &[&str]) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "nginx",
                "namespace": "default",
                "uid": "u1",
                "resourceVersion": "7",
                "labels": {"app": "nginx"},
                "initializers": {"pending": pending.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()},
                "unknownToTheTypes": "kept"
            },
            "spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.8.1"}]}}}
        })
    }

    fn selector(key: &str, value: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
            match_expressions: None,
        }
    }

    #[test]
    fn pending_names_must_be_fully_qualified() {
        assert_eq!(pending_name_error(ME), None);
        assert_eq!(pending_name_error("a.b.c"), None);
        assert_eq!(
            pending_name_error("sidecar.example").as_deref(),
            Some(r#"Invalid value: "sidecar.example": should be a domain with at least two dots"#)
        );
        assert!(
            pending_name_error("Sidecar.Example.com")
                .unwrap()
                .contains("DNS-1123 subdomain")
        );
        assert!(
            pending_name_error("a..b.c")
                .unwrap()
                .contains("DNS-1123 subdomain")
        );
        assert!(pending_name_error(&format!("{}.b.c", "a".repeat(250))).is_some());
        assert_eq!(pending_name_error("").as_deref(), Some("Required value"));
    }

    #[test]
    fn it_is_my_turn_only_when_my_name_is_first() {
        assert_eq!(turn(&deployment(&[ME]), ME), Turn::Mine);
        assert_eq!(turn(&deployment(&["a.b.c", ME]), ME), Turn::Waiting);
        assert_eq!(turn(&deployment(&["a.b.c"]), ME), Turn::NotPending);
        assert_eq!(turn(&deployment(&[]), ME), Turn::NotPending);
        assert_eq!(
            turn(&json!({"metadata": {"name": "x"}}), ME),
            Turn::NotPending
        );
        let failed = with_failure(deployment(&[ME]), 403, "no");
        assert_eq!(turn(&failed, ME), Turn::Failed);
    }

    #[test]
    fn rules_cover_groups_versions_and_resources_with_wildcards() {
        let rule = InitializerRule {
            api_groups: vec!["*".into()],
            api_versions: vec!["*".into()],
            resources: vec!["deployments".into()],
        };
        assert!(rule.matches("apps", "v1", "deployments"));
        assert!(!rule.matches("", "v1", "pods"));
        let core = InitializerRule {
            api_groups: vec!["".into()],
            api_versions: vec!["v1".into()],
            resources: vec!["pods/status".into()],
        };
        assert!(
            !core.matches("", "v1", "pods"),
            "a subresource rule never covers the object"
        );
        let all = InitializerRule {
            api_groups: vec!["*".into()],
            api_versions: vec!["*".into()],
            resources: vec!["*/*".into()],
        };
        assert!(all.matches("batch", "v1", "jobs"));
        assert!(watched(None, "batch", "v1", "jobs"));
        assert!(!watched(
            Some(std::slice::from_ref(&rule)),
            "batch",
            "v1",
            "jobs"
        ));
        assert!(!watched(Some(&[]), "apps", "v1", "deployments"));
    }

    #[test]
    fn rules_parse_from_the_configuration_json() {
        let rules: Vec<InitializerRule> = serde_json::from_str(
            r#"[{"apiGroups":["*"],"apiVersions":["*"],"resources":["deployments"]}]"#,
        )
        .unwrap();
        assert_eq!(rules[0].resources, vec!["deployments"]);
    }

    #[test]
    fn scope_follows_the_selectors_as_a_webhook_does() {
        let object = deployment(&[ME]);
        let team_a = BTreeMap::from([
            ("team".to_owned(), "a".to_owned()),
            (NAMESPACE_NAME_LABEL.to_owned(), "default".to_owned()),
        ]);
        let mut scope = Scope::default();
        assert!(scope.admits(&object, Some(&team_a)));

        scope.namespace_selector = Some(selector("team", "a"));
        assert!(scope.admits(&object, Some(&team_a)));
        assert!(!scope.admits(&object, Some(&labels_of_unknown_namespace("default"))));
        assert!(
            scope.admits(&object, None),
            "cluster-scoped objects are not excluded"
        );

        scope.namespace_selector = Some(LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.into(),
                operator: "NotIn".into(),
                values: Some(vec!["kube-system".into()]),
            }]),
        });
        assert!(scope.admits(&object, Some(&labels_of_unknown_namespace("default"))));
        assert!(!scope.admits(&object, Some(&labels_of_unknown_namespace("kube-system"))));

        scope.object_selector = Some(selector("app", "web"));
        assert!(!scope.admits(&object, Some(&team_a)));
        scope.object_selector = Some(selector("app", "nginx"));
        assert!(scope.admits(&object, Some(&team_a)));
    }

    #[test]
    fn a_namespace_is_matched_by_its_own_labels() {
        let scope = Scope {
            namespace_selector: Some(selector(NAMESPACE_NAME_LABEL, "team-a")),
            ..Scope::default()
        };
        let ns = json!({"kind": "Namespace", "metadata": {"name": "team-a"}});
        assert!(scope.admits(&ns, None));
        let other = json!({"kind": "Namespace", "metadata": {"name": "team-b"}});
        assert!(!scope.admits(&other, None));
        assert_eq!(
            namespace_labels(&ns)
                .get(NAMESPACE_NAME_LABEL)
                .map(String::as_str),
            Some("team-a")
        );
    }

    #[test]
    fn the_annotation_gate_puts_objects_out_of_scope() {
        let scope = Scope {
            gate: Some(AnnotationGate::new(
                "initializer.kubernetes.io/sidecar",
                true,
            )),
            ..Scope::default()
        };
        let object = deployment(&[ME]);
        assert_eq!(plan(&object, ME, false, &scope, None), Plan::Release);
        let mut annotated = object.clone();
        annotated["metadata"]["annotations"] = json!({"initializer.kubernetes.io/sidecar": "true"});
        assert_eq!(plan(&annotated, ME, false, &scope, None), Plan::Run);
    }

    #[test]
    fn the_plan_leaves_what_is_not_mine_or_already_done() {
        let scope = Scope::default();
        assert_eq!(plan(&deployment(&[ME]), ME, false, &scope, None), Plan::Run);
        assert_eq!(
            plan(&deployment(&[ME]), ME, true, &scope, None),
            Plan::Leave
        );
        assert_eq!(
            plan(&deployment(&["a.b.c", ME]), ME, false, &scope, None),
            Plan::Leave
        );
        let failed = with_failure(deployment(&[ME]), 403, "no");
        assert_eq!(plan(&failed, ME, false, &scope, None), Plan::Leave);
        // A mark the object's author wrote (or copied) skips nothing.
        let mut marked = deployment(&[ME]);
        marked["metadata"]["annotations"] =
            json!({INITIALIZED_BY_ANNOTATION: "other/1, sidecar/3"});
        assert_eq!(plan(&marked, ME, false, &scope, None), Plan::Run);
    }

    #[test]
    fn removing_the_last_name_initializes_the_object() {
        let object = without_name(deployment(&[ME]), ME);
        assert!(object.pointer("/metadata/initializers").is_none());
        assert_eq!(object["metadata"]["unknownToTheTypes"], "kept");
        let object = without_name(deployment(&[ME, "b.c.d"]), ME);
        assert_eq!(
            object["metadata"]["initializers"],
            json!({"pending": [{"name": "b.c.d"}]})
        );
    }

    fn response(allowed: bool, verdict: Verdict) -> Response {
        let mut response = Response::allow("uid");
        response.allowed = allowed;
        response.verdict = verdict;
        response
    }

    /// A refusal with `code` and `message`.
    fn refusal(verdict: Verdict, code: u16, message: &str) -> Response {
        let mut refusal = response(false, verdict);
        refusal.status = Some(Status {
            code,
            message: message.into(),
        });
        refusal
    }

    #[test]
    fn a_mutation_and_the_name_removal_are_one_write() {
        let object = deployment(&[ME, "b.c.d"]);
        let mut answer = response(true, Verdict::Patched);
        answer.patch = Some(
            serde_json::from_value(json!([
                {"op": "add", "path": "/spec/template/spec/containers/1", "value": {"name": "sidecar-nginx"}},
                {"op": "add", "path": "/metadata/annotations", "value": {INITIALIZED_BY_ANNOTATION: "sidecar"}}
            ]))
            .unwrap(),
        );
        let (written, what) = write_for(&object, ME, &answer, false);
        assert_eq!(what, Written::Mutated);
        assert_eq!(
            written["spec"]["template"]["spec"]["containers"][1]["name"],
            "sidecar-nginx"
        );
        assert_eq!(
            written["metadata"]["initializers"],
            json!({"pending": [{"name": "b.c.d"}]})
        );
        assert_eq!(written["metadata"]["unknownToTheTypes"], "kept");
        assert_eq!(
            written["metadata"]["resourceVersion"], "7",
            "the write is conditional"
        );
    }

    #[test]
    fn an_unchanged_object_only_loses_the_name() {
        let (written, what) = write_for(
            &deployment(&[ME]),
            ME,
            &response(true, Verdict::Allowed),
            false,
        );
        assert_eq!(what, Written::Unchanged);
        assert!(written.pointer("/metadata/initializers").is_none());
        assert_eq!(written["spec"], deployment(&[ME])["spec"]);
    }

    #[test]
    fn a_denial_writes_a_forbidden_result_and_keeps_pending() {
        let denied = refusal(Verdict::Denied, 403, "image nginx:latest is not allowed");
        let (written, what) = write_for(&deployment(&[ME]), ME, &denied, false);
        assert_eq!(what, Written::Denied);
        let result = &written["metadata"]["initializers"]["result"];
        assert_eq!(result["status"], "Failure");
        assert_eq!(result["code"], 403);
        assert_eq!(result["reason"], "Forbidden");
        assert_eq!(result["message"], "image nginx:latest is not allowed");
        assert_eq!(
            written["metadata"]["initializers"]["pending"],
            json!([{"name": ME}])
        );
    }

    #[test]
    fn a_failed_handler_follows_the_failure_policy() {
        // FailurePolicy::Deny: the server's answer is a refusal with code 500.
        let closed = refusal(
            Verdict::Error,
            500,
            "initializer sidecar failed: its handler did not answer within 300ms",
        );
        let (written, what) = write_for(&deployment(&[ME]), ME, &closed, true);
        assert_eq!(what, Written::Failed);
        let result = &written["metadata"]["initializers"]["result"];
        assert_eq!(result["reason"], "InternalError");
        assert!(
            result["message"]
                .as_str()
                .unwrap()
                .contains("did not answer")
        );

        // FailurePolicy::Allow: admitted unchanged with a warning.
        let mut open = response(true, Verdict::Error);
        open.warnings = vec!["initializer sidecar failed: its handler panicked: boom".into()];
        let (written, what) = write_for(&deployment(&[ME]), ME, &open, false);
        assert_eq!(what, Written::FailedOpen);
        assert!(written.pointer("/metadata/initializers").is_none());
    }

    #[test]
    fn a_patch_that_does_not_apply_is_a_handler_failure() {
        let mut answer = response(true, Verdict::Patched);
        answer.patch = Some(
            serde_json::from_value(json!([{"op": "remove", "path": "/spec/nothing/here"}]))
                .unwrap(),
        );
        let (written, what) = write_for(&deployment(&[ME]), ME, &answer, true);
        assert_eq!(what, Written::Failed);
        assert_eq!(written["metadata"]["initializers"]["result"]["code"], 500);
        let (written, what) = write_for(&deployment(&[ME]), ME, &answer, false);
        assert_eq!(what, Written::FailedOpen);
        assert!(written.pointer("/metadata/initializers").is_none());
    }

    #[test]
    fn conflicts_are_redone_at_once_and_other_failures_backed_off_or_dropped() {
        assert_eq!(
            after_failed_write(Some(409), 1),
            AfterWrite::Redo { backoff_ms: 0 }
        );
        assert_eq!(after_failed_write(Some(404), 1), AfterWrite::Gone);
        assert!(matches!(
            after_failed_write(Some(503), 2),
            AfterWrite::Redo { backoff_ms } if backoff_ms > 0
        ));
        assert!(matches!(
            after_failed_write(None, 1),
            AfterWrite::Redo { .. }
        ));
        assert_eq!(after_failed_write(Some(422), 1), AfterWrite::GiveUp);
        assert_eq!(
            after_failed_write(Some(409), MAX_ATTEMPTS),
            AfterWrite::GiveUp
        );
        assert_eq!(backoff_ms(20), 5_000);
    }

    #[test]
    fn status_reasons_follow_the_code() {
        assert_eq!(reason_for(403), "Forbidden");
        assert_eq!(reason_for(400), "BadRequest");
        assert_eq!(reason_for(422), "Invalid");
        assert_eq!(reason_for(500), "InternalError");
    }
}
