//! Admission: calls the matching mutating, then validating, webhooks for a write, over real HTTPS.
//!
//! The API server calls [`Admission::admit`] for every create, update and delete (dry runs
//! included) after defaulting and before validation and storage. What it does, as
//! k8s.io/apiserver's webhook dispatchers do:
//!
//! - Mutating webhooks run in order (configurations sorted by name, webhooks in their listed
//!   order), each seeing the object as earlier ones patched it; then validating webhooks run on
//!   the final object, all at once as in the real API server; the first refusal in
//!   configuration order decides.
//! - A webhook is called when one of its rules matches (see [`rules`]), its `namespaceSelector`
//!   matches the namespace's labels (a Namespace's own labels for Namespace objects; cluster-scoped
//!   objects always match) and its `objectSelector` matches the new or the old object's labels.
//!   `matchConditions` (CEL) are not evaluated: a webhook with conditions is called as if they held.
//! - `reinvocationPolicy: IfNeeded`: when a webhook changed the object after an `IfNeeded` webhook
//!   ran, those earlier webhooks run once more, in order, at the end of the mutating pass.
//! - Failures: a call that fails (no endpoint, refused connection, TLS error, timeout, invalid
//!   response) rejects the request with a 500 `InternalError` under `failurePolicy: Fail` (the
//!   default) and is skipped under `Ignore`. A refusal (`allowed: false`) returns the webhook's
//!   status (code at least 400, message `admission webhook "NAME" denied the request: MSG`).
//! - Dry runs reach only webhooks with `sideEffects: None` or `NoneOnDryRun`; others refuse the
//!   request with 400, as the real server does.

pub mod call;
pub mod review;
pub mod rules;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, RuleWithOperations, ValidatingWebhook, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use crate::json::elements;
use crate::selector;
use crate::view::{ClusterView, ResourceRef};
use rules::MatchPolicy;

/// The operation being admitted, as AdmissionReview spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`
    Create,
    /// `UPDATE`
    Update,
    /// `DELETE`
    Delete,
    /// `CONNECT`
    Connect,
}

/// Who makes the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub username: String,
    /// Groups the user belongs to.
    pub groups: Vec<String>,
}

/// Everything admission needs to know about one write.
#[derive(Clone, Debug)]
pub struct Attributes {
    /// API group of the object's kind; empty for core.
    pub group: String,
    /// API version of the request.
    pub version: String,
    /// Kind of the object.
    pub kind: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource (`status`, `scale`), empty for the main resource.
    pub subresource: String,
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Object name (may be empty on create with `generateName`).
    pub name: String,
    /// Operation.
    pub operation: Operation,
    /// The new object (create, update); `None` on delete.
    pub object: Option<Value>,
    /// The stored object (update, delete).
    pub old_object: Option<Value>,
    /// `dryRun=All` was requested.
    pub dry_run: bool,
    /// The requesting user.
    pub user: UserInfo,
}

/// What admission decided.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Proceed, storing `object` (the input with every mutating webhook's patch applied).
    Allowed {
        /// The possibly mutated object (`None` on delete).
        object: Option<Value>,
        /// Warnings to return to the client in `Warning` headers.
        warnings: Vec<String>,
    },
    /// Refuse with a `metav1.Status` body (code, reason, message as the real API server forms them).
    Denied(Value),
}

/// A step the API server runs between the mutating and the validating webhooks, as
/// kube-apiserver 1.13 ran its built-in `Initializers` plugin there (`AllOrderedPlugins`:
/// `MutatingAdmissionWebhook`, `Initializers`, `ValidatingAdmissionWebhook`). It may change the
/// object; an `Err` is the `metav1.Status` that refuses the request.
pub type Between<'a> = dyn Fn(&mut Value) -> Result<(), Value> + Send + Sync + 'a;

/// The admission chain.
#[derive(Clone, Debug, Default)]
pub struct Admission {}

const MUTATING: ResourceRef<'static> =
    ResourceRef::new(ADMISSION_GROUP, "v1", "mutatingwebhookconfigurations");
const VALIDATING: ResourceRef<'static> =
    ResourceRef::new(ADMISSION_GROUP, "v1", "validatingwebhookconfigurations");
const NAMESPACES: ResourceRef<'static> = ResourceRef::new("", "v1", "namespaces");
const ADMISSION_GROUP: &str = "admissionregistration.k8s.io";

/// Default `timeoutSeconds` in admissionregistration/v1.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One webhook, from either kind of configuration, with defaults applied.
#[derive(Clone, Debug)]
struct Hook {
    name: String,
    rules: Vec<RuleWithOperations>,
    namespace_selector: LabelSelector,
    object_selector: LabelSelector,
    match_policy: MatchPolicy,
    fail_open: bool,
    side_effects: String,
    timeout: Duration,
    reinvoke_if_needed: bool,
    client: WebhookClientConfig,
}

fn timeout_of(seconds: Option<i32>) -> Duration {
    seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs)
}

impl From<MutatingWebhook> for Hook {
    fn from(w: MutatingWebhook) -> Self {
        Self {
            match_policy: MatchPolicy::parse(w.match_policy.as_deref()),
            fail_open: w.failure_policy.as_deref() == Some("Ignore"),
            timeout: timeout_of(w.timeout_seconds),
            reinvoke_if_needed: w.reinvocation_policy.as_deref() == Some("IfNeeded"),
            name: w.name,
            rules: w.rules.unwrap_or_default(),
            namespace_selector: w.namespace_selector.unwrap_or_default(),
            object_selector: w.object_selector.unwrap_or_default(),
            side_effects: w.side_effects,
            client: w.client_config,
        }
    }
}

impl From<ValidatingWebhook> for Hook {
    fn from(w: ValidatingWebhook) -> Self {
        Self {
            match_policy: MatchPolicy::parse(w.match_policy.as_deref()),
            fail_open: w.failure_policy.as_deref() == Some("Ignore"),
            timeout: timeout_of(w.timeout_seconds),
            reinvoke_if_needed: false,
            name: w.name,
            rules: w.rules.unwrap_or_default(),
            namespace_selector: w.namespace_selector.unwrap_or_default(),
            object_selector: w.object_selector.unwrap_or_default(),
            side_effects: w.side_effects,
            client: w.client_config,
        }
    }
}

/// The webhooks of every configuration of one kind, configurations sorted by name.
fn load_hooks<W>(view: &dyn ClusterView, resource: ResourceRef<'_>) -> Vec<Hook>
where
    W: serde::de::DeserializeOwned + Into<Hook>,
{
    let mut configs = view.list(resource, None);
    configs.sort_by_cached_key(|c| crate::store::names(c).1);
    let mut hooks = Vec::new();
    for config in configs {
        let config_name = config
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        for webhook in elements(config.get("webhooks")) {
            match serde_json::from_value::<W>(webhook.clone()) {
                Ok(w) => hooks.push(w.into()),
                Err(e) => tracing::warn!(
                    configuration = config_name,
                    error = %e,
                    "skipping a webhook the sandbox cannot read"
                ),
            }
        }
    }
    hooks
}

/// Why a webhook was not simply allowed.
enum Stop {
    /// Reject the request with this status.
    Deny(Value),
}

impl Admission {
    /// Runs mutating then validating webhooks that match `attrs`.
    pub async fn admit(&self, view: &dyn ClusterView, attrs: Attributes) -> Outcome {
        self.admit_with(view, attrs, None).await
    }

    /// [`Admission::admit`], running `between` on the object after the mutating webhooks and
    /// before the validating ones (also when no webhook applies).
    pub async fn admit_with(
        &self,
        view: &dyn ClusterView,
        attrs: Attributes,
        between: Option<&Between<'_>>,
    ) -> Outcome {
        let mutating = load_hooks::<MutatingWebhook>(view, MUTATING);
        let validating = load_hooks::<ValidatingWebhook>(view, VALIDATING);
        if rules::is_exempt(&attrs) || (mutating.is_empty() && validating.is_empty()) {
            let mut object = attrs.object;
            if let (Some(step), Some(obj)) = (between, object.as_mut())
                && let Err(status) = step(obj)
            {
                return Outcome::Denied(status);
            }
            return Outcome::Allowed {
                object,
                warnings: Vec::new(),
            };
        }
        let uid = crate::ids::new_uid();
        let mut run = Run {
            view,
            attrs: &attrs,
            uid: &uid,
            object: attrs.object.clone(),
            warnings: Vec::new(),
        };
        match run.all(&mutating, between, &validating).await {
            Ok(()) => Outcome::Allowed {
                object: run.object,
                warnings: run.warnings,
            },
            Err(Stop::Deny(status)) => Outcome::Denied(status),
        }
    }
}

/// One admission run: the object as patched so far and the warnings collected.
struct Run<'a> {
    view: &'a dyn ClusterView,
    attrs: &'a Attributes,
    uid: &'a str,
    object: Option<Value>,
    warnings: Vec<String>,
}

impl Run<'_> {
    async fn all(
        &mut self,
        mutating: &[Hook],
        between: Option<&Between<'_>>,
        validating: &[Hook],
    ) -> Result<(), Stop> {
        // Indices of IfNeeded webhooks invoked since the last change, and of those to reinvoke.
        let mut invoked_reinvocable: Vec<usize> = Vec::new();
        let mut reinvoke: BTreeSet<usize> = BTreeSet::new();
        for (i, hook) in mutating.iter().enumerate() {
            if !self.matches(hook)? {
                continue;
            }
            if self.call(hook).await? {
                reinvoke.extend(invoked_reinvocable.drain(..));
            }
            if hook.reinvoke_if_needed {
                invoked_reinvocable.push(i);
            }
        }
        for i in reinvoke {
            let hook = &mutating[i];
            if self.matches(hook)? {
                self.call(hook).await?;
            }
        }
        if let (Some(step), Some(obj)) = (between, self.object.as_mut()) {
            step(obj).map_err(Stop::Deny)?;
        }
        // Validating webhooks see the final object and run in parallel, as in the real server;
        // the first refusal in configuration order decides.
        let mut matching = Vec::new();
        for hook in validating {
            if self.matches(hook)? {
                matching.push(hook);
            }
        }
        let verdicts = futures::future::join_all(matching.iter().map(|h| self.invoke(h))).await;
        for (hook, verdict) in matching.into_iter().zip(verdicts) {
            if let Some(verdict) = verdict? {
                self.apply(hook, verdict, false)?;
            }
        }
        Ok(())
    }

    fn matches(&self, hook: &Hook) -> Result<bool, Stop> {
        let attrs = self.attrs;
        if !rules::any_rule_matches(&hook.rules, hook.match_policy, attrs) {
            return Ok(false);
        }
        let selector_error =
            |e: selector::InvalidSelector| Stop::Deny(review::internal_error(&e.to_string()));
        if let Some(labels) = self.namespace_labels()
            && !selector::selects(&hook.namespace_selector, &labels).map_err(selector_error)?
        {
            return Ok(false);
        }
        let object_matches = |obj: Option<&Value>| -> Result<bool, Stop> {
            match obj {
                Some(o) => selector::selects(&hook.object_selector, &selector::labels_of(o))
                    .map_err(selector_error),
                None => Ok(false),
            }
        };
        let empty = hook
            .object_selector
            .match_labels
            .as_ref()
            .is_none_or(|m| m.is_empty())
            && hook
                .object_selector
                .match_expressions
                .as_ref()
                .is_none_or(|m| m.is_empty());
        if !empty
            && !object_matches(self.object.as_ref())?
            && !object_matches(attrs.old_object.as_ref())?
        {
            return Ok(false);
        }
        Ok(true)
    }

    /// The labels the `namespaceSelector` is matched against; `None` when it does not apply
    /// (cluster-scoped objects other than Namespaces).
    fn namespace_labels(&self) -> Option<std::collections::BTreeMap<String, String>> {
        let attrs = self.attrs;
        let is_namespace = attrs.group.is_empty() && attrs.resource == "namespaces";
        if is_namespace
            && attrs.subresource.is_empty()
            && matches!(attrs.operation, Operation::Create | Operation::Update)
        {
            return Some(
                self.object
                    .as_ref()
                    .map(selector::labels_of)
                    .unwrap_or_default(),
            );
        }
        let name = match attrs.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(ns) => ns,
            None if is_namespace => attrs.name.as_str(),
            None => return None,
        };
        Some(
            self.view
                .get(NAMESPACES, None, name)
                .as_ref()
                .map(selector::labels_of)
                .unwrap_or_default(),
        )
    }

    /// Calls one mutating webhook and applies its answer; returns whether it changed the object.
    async fn call(&mut self, hook: &Hook) -> Result<bool, Stop> {
        match self.invoke(hook).await? {
            Some(verdict) => self.apply(hook, verdict, true),
            None => Ok(false),
        }
    }

    /// Calls one webhook; `None` when the call failed and `failurePolicy: Ignore` skips it.
    async fn invoke(&self, hook: &Hook) -> Result<Option<review::Verdict>, Stop> {
        if self.attrs.dry_run && !matches!(hook.side_effects.as_str(), "None" | "NoneOnDryRun") {
            return Err(Stop::Deny(review::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                hook.name
            ))));
        }
        let body = review::request(self.uid, self.attrs, self.object.as_ref());
        let started = std::time::Instant::now();
        let verdict = call::post(
            self.view,
            &hook.client,
            hook.timeout,
            body.to_string().into_bytes(),
        )
        .await
        .and_then(|bytes| {
            review::parse_response(self.uid, &bytes).map_err(|e| call::CallFailure(e.to_string()))
        });
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match verdict {
            Ok(Ok(v)) => {
                tracing::debug!(webhook = %hook.name, allowed = v.allowed, elapsed_ms, "webhook answered");
                Ok(Some(v))
            }
            Ok(Err(bad_patch)) => Err(Stop::Deny(review::internal_error(&bad_patch.to_string()))),
            Err(failure) => {
                let message = format!("failed calling webhook {:?}: {failure}", hook.name);
                if hook.fail_open {
                    tracing::warn!(webhook = %hook.name, elapsed_ms, "{message}; failurePolicy Ignore, continuing");
                    return Ok(None);
                }
                tracing::warn!(webhook = %hook.name, elapsed_ms, "{message}; failurePolicy Fail, rejecting");
                Err(Stop::Deny(review::internal_error(&message)))
            }
        }
    }

    /// Applies a webhook's answer: warnings, refusal, and (for mutating webhooks) the patch.
    /// Returns whether the object changed.
    fn apply(
        &mut self,
        hook: &Hook,
        verdict: review::Verdict,
        mutating: bool,
    ) -> Result<bool, Stop> {
        self.warnings.extend(verdict.warnings);
        if !verdict.allowed {
            return Err(Stop::Deny(review::denial(
                &hook.name,
                verdict.status.as_ref(),
            )));
        }
        let (Some(patch), true, Some(object)) = (verdict.patch, mutating, self.object.as_ref())
        else {
            return Ok(false);
        };
        let mut patched = object.clone();
        if let Err(e) = json_patch::patch(&mut patched, &patch) {
            return Err(Stop::Deny(review::internal_error(&format!(
                "failed calling webhook {:?}: failed to apply patch: {e}",
                hook.name
            ))));
        }
        let changed = Some(&patched) != self.object.as_ref();
        self.object = Some(patched);
        Ok(changed)
    }
}
