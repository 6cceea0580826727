//! The `Initializer` resource: what to deploy, what it intercepts, and how its health is judged.
//!
//! The schema refuses what it can say on its own (ranges, enums, required fields, and CEL rules
//! for resources and namespaces that must never be intercepted); the operator's validator
//! refuses the rest (for example the operator's own namespace, which only it knows).

// The lint mistakes `type_` repeated across separate `printcolumn(...)` groups for a duplicate.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, MicroTime, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::preset::PresetConfig;
use crate::protected::protected_rule;

/// Default number of initializer pods.
pub const DEFAULT_REPLICAS: i32 = 2;
/// Default webhook timeout, in seconds.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 5;
/// Default probe period, in seconds.
pub const DEFAULT_PERIOD_SECONDS: i32 = 1;
/// Default number of consecutive failed probes before deregistering.
pub const DEFAULT_FAILURE_THRESHOLD: i32 = 2;
/// Default number of consecutive good probes before registering again.
pub const DEFAULT_SUCCESS_THRESHOLD: i32 = 3;
/// Default latency budget of one probe, in milliseconds.
pub const DEFAULT_LATENCY_BUDGET_MILLIS: i32 = 500;

/// The inclusive range a number of the spec must lie in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The least allowed.
    pub min: i32,
    /// The most allowed.
    pub max: i32,
}

impl Limits {
    /// Whether `value` lies in the range.
    pub const fn contains(self, value: i32) -> bool {
        self.min <= value && value <= self.max
    }
}

/// `spec.replicas`. Each range is both the CRD schema's `minimum` and `maximum` and what the
/// operator's validation enforces, so the two cannot differ.
pub const REPLICAS_LIMITS: Limits = Limits { min: 1, max: 10 };
/// `spec.timeoutSeconds`: the API server's own bounds on a webhook's timeout.
pub const TIMEOUT_SECONDS_LIMITS: Limits = Limits { min: 1, max: 30 };
/// `spec.health.periodSeconds`.
pub const PERIOD_SECONDS_LIMITS: Limits = Limits { min: 1, max: 300 };
/// `spec.health.failureThreshold`.
pub const FAILURE_THRESHOLD_LIMITS: Limits = Limits { min: 1, max: 100 };
/// `spec.health.successThreshold`.
pub const SUCCESS_THRESHOLD_LIMITS: Limits = Limits { min: 1, max: 100 };
/// `spec.health.latencyBudgetMillis`.
pub const LATENCY_BUDGET_MILLIS_LIMITS: Limits = Limits {
    min: 10,
    max: 30_000,
};

/// An initializer: code that mutates or rejects objects before Kubernetes creates them.
///
/// The operator deploys `image` (or the built-in preset initializer when only `preset` is given),
/// and registers a MutatingWebhookConfiguration (or, with `backend: InitializerConfiguration`, an
/// InitializerConfiguration) for `rules` only while the initializer is ready and answering; it
/// removes the configuration as soon as the initializer stops answering.
#[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "initializer.dev",
    version = "v1alpha1",
    kind = "Initializer",
    plural = "initializers",
    shortname = "init",
    category = "admission",
    status = "InitializerStatus",
    derive = "PartialEq",
    doc = "An initializer: mutates or rejects objects before Kubernetes creates them, registered only while it is ready and answering.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Registered",
        type_ = "boolean",
        json_path = ".status.registered"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Engine",
        type_ = "string",
        json_path = ".status.engine",
        description = "where the injection runs now: Webhook, or Policy (in the API server)"
    ),
    printcolumn(
        name = "Probe-ms",
        type_ = "integer",
        json_path = ".status.lastProbeLatencyMillis",
        description = "latency of the last probe through the API server, in milliseconds"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("has(self.image) || has(self.preset)").message("spec.image or spec.preset is required"))]
#[x_kube(validation = Rule::new("!has(self.health) || !has(self.health.latencyBudgetMillis) || self.health.latencyBudgetMillis <= self.timeoutSeconds * 1000").message("spec.health.latencyBudgetMillis must not exceed spec.timeoutSeconds"))]
#[x_kube(validation = backend_immutable_rule())]
#[serde(rename_all = "camelCase")]
pub struct InitializerSpec {
    /// Container image of the initializer. When omitted, `preset` is required and the operator
    /// runs the built-in preset initializer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,

    /// Arguments passed to the initializer's container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,

    /// Extra environment variables for the initializer's container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// Compute resources of the initializer's container. Defaults to small requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Number of initializer pods.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = REPLICAS_LIMITS.min, max = REPLICAS_LIMITS.max))]
    pub replicas: i32,

    /// Namespace the initializer's workload runs in. Defaults to the operator's namespace.
    /// Another namespace is accepted only when an administrator labelled it
    /// `initializer.dev/workloads: "true"` and bound the ClusterRole
    /// `initializer-operator-workloads` there to the operator's ServiceAccount: whoever may
    /// create pods in the workload namespace could join the initializer's Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,

    /// Configuration mounted into the initializer as `config.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigSource>,

    /// Declarative injection for the built-in preset initializer (used when `image` is omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<PresetConfig>,

    /// Which requests are intercepted, as in admission registration.
    #[schemars(length(min = 1, max = 16))]
    pub rules: Vec<InterceptRule>,

    /// Which namespaces are intercepted. The operator's namespace and the system namespaces are
    /// always excluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<NamespaceScope>,

    /// Label selector on the intercepted objects themselves. Pods the operator deploys are
    /// always excluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_selector: Option<LabelSelector>,

    /// Annotation gate: a matchCondition of the webhook (the API server sends the initializer
    /// only objects it admits), also passed to the initializer (`INITIALIZER_ANNOTATION`,
    /// `INITIALIZER_REQUIRE_ANNOTATION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<AnnotationGate>,

    /// What the API server does when the initializer cannot be reached while registered.
    #[serde(default)]
    pub failure_policy: FailurePolicy,

    /// How long the API server waits for the initializer, in seconds.
    #[serde(default = "default_timeout_seconds")]
    #[schemars(range(min = TIMEOUT_SECONDS_LIMITS.min, max = TIMEOUT_SECONDS_LIMITS.max))]
    pub timeout_seconds: i32,

    /// Whether the initializer is called again when a later webhook changed the object.
    #[serde(default)]
    pub reinvocation_policy: ReinvocationPolicy,

    /// How the initializer's health is judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthPolicy>,

    /// Deregister and stay deregistered while true. The workload keeps running. For a
    /// break-glass that a GitOps sync of this spec does not undo, see the annotation
    /// `initializer.dev/break-glass` (`kubectl initializer suspend`).
    #[serde(default)]
    pub suspend: bool,

    /// Whether the initializer's pods get a Kubernetes API token. Each initializer runs as its
    /// own ServiceAccount (named like the Initializer's workload, in its namespace) with
    /// `automountServiceAccountToken: false`, unless this is true. Granting that account any
    /// rights (a Role and RoleBinding) is the administrator's business.
    #[serde(default)]
    pub api_access: bool,

    /// Validation rules (CEL, as in a ValidatingAdmissionPolicy) that the operator keeps in force
    /// while the initializer is degraded or out of the path, so that what CEL can say stays
    /// enforced during an outage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,

    /// How the initializer is put in the API server's path: a `MutatingWebhookConfiguration`
    /// (`Webhook`, the default), or, on Kubernetes 1.7–1.13 API servers that serve
    /// `admissionregistration.k8s.io/v1alpha1`, an `InitializerConfiguration` with the
    /// initializer running as a controller (`InitializerConfiguration`). Immutable: switching
    /// would leave objects pending on a name nothing serves.
    #[serde(default)]
    pub backend: Backend,

    /// Where a preset Initializer's injection runs: `Auto` (the default) moves it into the API
    /// server, as a MutatingAdmissionPolicy, once the operator has proven that the policy does
    /// what the webhook does (and keeps the webhook, saying why, where it cannot); `Webhook`
    /// keeps the webhook; `Policy` asks for the policy and reports, as a warning, whatever
    /// keeps the webhook in force. An Initializer with an `image` always runs as a webhook.
    #[serde(default)]
    pub engine: Engine,

    /// How much the initializer logs: `Info` (the default) leaves its container as it is;
    /// another level sets `RUST_LOG` to it, which the preset and every initializer built with the
    /// SDK read. A `RUST_LOG` in `env` wins over this (it can name modules). Raising it rolls
    /// the initializer's pods, one at a time.
    #[serde(default)]
    pub log_level: LogLevel,
}

/// How much an initializer logs (`spec.logLevel`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// What the initializer's image logs by default.
    #[default]
    Info,
    /// Each request, and why it was changed or left alone.
    Debug,
    /// Everything, the libraries' own lines too.
    Trace,
}

impl LogLevel {
    /// The value as written in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "Error",
            LogLevel::Warn => "Warn",
            LogLevel::Info => "Info",
            LogLevel::Debug => "Debug",
            LogLevel::Trace => "Trace",
        }
    }

    /// The level as `RUST_LOG` names it.
    pub fn filter(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// Where a preset Initializer's injection runs (`spec.engine`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum Engine {
    /// The API server where it serves MutatingAdmissionPolicy and the policy is proven to do
    /// what the webhook does; the webhook otherwise.
    #[default]
    Auto,
    /// The webhook, always.
    Webhook,
    /// The API server; what keeps the webhook in force is a warning.
    Policy,
}

impl Engine {
    /// The value as written in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Auto => "Auto",
            Engine::Webhook => "Webhook",
            Engine::Policy => "Policy",
        }
    }
}

/// The engine an Initializer's injection runs on now (`status.engine`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum EngineInForce {
    /// The initializer's pods, called through its MutatingWebhookConfiguration (or
    /// InitializerConfiguration).
    #[default]
    Webhook,
    /// The API server, through a MutatingAdmissionPolicy and its binding: the webhook is
    /// deregistered and its Deployment scaled to zero (kept, so it can come back).
    Policy,
}

impl EngineInForce {
    /// Both engines.
    pub const ALL: [EngineInForce; 2] = [EngineInForce::Webhook, EngineInForce::Policy];

    /// The value as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineInForce::Webhook => "Webhook",
            EngineInForce::Policy => "Policy",
        }
    }
}

/// How an initializer is put in the API server's path.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum Backend {
    /// A `MutatingWebhookConfiguration` calling the initializer's `/initialize` over HTTPS.
    #[default]
    Webhook,
    /// The original Initializers (Kubernetes 1.7–1.13, alpha): an `InitializerConfiguration`
    /// (`admissionregistration.k8s.io/v1alpha1`) adds the initializer's name to
    /// `metadata.initializers.pending` of new objects, and the initializer, run as a
    /// controller, removes it. Only `CREATE`, no fallback, no reinvocation.
    InitializerConfiguration,
}

impl Backend {
    /// The value as written in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Webhook => "Webhook",
            Backend::InitializerConfiguration => "InitializerConfiguration",
        }
    }

    /// The kind of the configuration this backend registers.
    pub fn configuration_kind(self) -> &'static str {
        match self {
            Backend::Webhook => "MutatingWebhookConfiguration",
            Backend::InitializerConfiguration => "InitializerConfiguration",
        }
    }
}

/// The CEL transition rule keeping `spec.backend` as it was set at creation (an absent value is
/// the default, `Webhook`, so objects stored before the field existed keep the webhook).
pub fn backend_immutable_rule() -> kube::core::Rule {
    let of = |side: &str| format!("(has({side}.backend) ? {side}.backend : 'Webhook')");
    kube::core::Rule::new(format!("{} == {}", of("self"), of("oldSelf"))).message(
        kube::core::Message::Message(
            "spec.backend is immutable: delete the Initializer and create it again to change the backend".into(),
        ),
    )
}

/// A safety net for policies that CEL can state: while the initializer is degraded or
/// deregistered, a ValidatingAdmissionPolicy with these validations and a binding with the
/// Initializer's match scope (rules, namespaces, object selector, annotation gate) are in force.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    /// CEL validations, as in a ValidatingAdmissionPolicy: a request is refused when any
    /// expression evaluates to false (or fails to evaluate).
    #[schemars(length(min = 1, max = 64))]
    pub validations: Vec<FallbackValidation>,
    /// Which requests the fallback checks; defaults to `spec.rules`. The same resources are
    /// protected as in `spec.rules`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub rules: Vec<InterceptRule>,
}

/// One CEL validation of a [`Fallback`].
#[derive(KubeSchema, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[x_kube(validation = Rule::new("self.expression.matches('\\\\S')").message("expression must not be blank"))]
#[x_kube(validation = Rule::new("!has(self.message) || !self.message.contains('\\n')").message("message must not contain line breaks"))]
#[serde(rename_all = "camelCase")]
pub struct FallbackValidation {
    /// A CEL expression over `object`, `oldObject`, `request`, `namespaceObject` and
    /// `authorizer`; false refuses the request.
    #[schemars(length(min = 1, max = 5000))]
    pub expression: String,
    /// What the client sees when the expression is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
    /// A CEL expression producing the message (a string), instead of `message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 5000))]
    pub message_expression: Option<String>,
    /// The HTTP reason of the refusal; defaults to Invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<FallbackReason>,
}

/// The reason of a fallback refusal, as in a ValidatingAdmissionPolicy.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum FallbackReason {
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 422.
    Invalid,
    /// 413.
    RequestEntityTooLarge,
}

impl FallbackReason {
    /// The name admission registration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackReason::Unauthorized => "Unauthorized",
            FallbackReason::Forbidden => "Forbidden",
            FallbackReason::Invalid => "Invalid",
            FallbackReason::RequestEntityTooLarge => "RequestEntityTooLarge",
        }
    }
}

/// Where the initializer's `config.yaml` comes from. Exactly one of the fields is set.
#[derive(KubeSchema, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[x_kube(validation = Rule::new("has(self.inline) != has(self.configMapRef)").message("exactly one of inline and configMapRef is required"))]
#[serde(rename_all = "camelCase")]
pub struct ConfigSource {
    /// The configuration itself (usually YAML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// A key of a ConfigMap in the initializer's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKey>,
}

/// A key of a ConfigMap.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKey {
    /// Name of the ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the ConfigMap; defaults to `config.yaml`.
    #[serde(default = "default_config_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// One admission rule: which operations on which resources are intercepted.
#[derive(KubeSchema, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[x_kube(validation = protected_rule())]
#[serde(rename_all = "camelCase")]
pub struct InterceptRule {
    /// API groups; `""` is the core group.
    #[schemars(length(min = 1, max = 16), inner(length(max = 253)))]
    pub api_groups: Vec<String>,
    /// API versions.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 63)))]
    pub api_versions: Vec<String>,
    /// Resources (plural, lowercase), optionally with a subresource (`pods/status`).
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 253)))]
    pub resources: Vec<String>,
    /// Operations; defaults to CREATE.
    #[serde(default = "default_operations")]
    #[schemars(length(min = 1, max = 5))]
    pub operations: Vec<Operation>,
    /// Whether cluster-scoped, namespaced or all objects are intercepted; defaults to
    /// `Namespaced`.
    #[serde(default = "default_scope", skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

impl InterceptRule {
    /// The scope in force: the rule's, or `Namespaced`.
    pub fn effective_scope(&self) -> Scope {
        self.scope.unwrap_or(Scope::Namespaced)
    }
}

/// An admission operation.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum Operation {
    /// Object creation.
    #[serde(rename = "CREATE")]
    Create,
    /// Object update.
    #[serde(rename = "UPDATE")]
    Update,
    /// Object deletion.
    #[serde(rename = "DELETE")]
    Delete,
    /// Connect requests (exec, proxy, port-forward).
    #[serde(rename = "CONNECT")]
    Connect,
    /// Every operation.
    #[serde(rename = "*")]
    All,
}

impl Operation {
    /// The name admission registration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
            Operation::All => "*",
        }
    }
}

/// Scope of an admission rule.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-scoped objects only.
    Cluster,
    /// Namespaced objects only.
    Namespaced,
    /// Both.
    #[serde(rename = "*")]
    All,
}

impl Scope {
    /// The name admission registration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Cluster => "Cluster",
            Scope::Namespaced => "Namespaced",
            Scope::All => "*",
        }
    }
}

/// Which namespaces are intercepted. All present fields must match.
#[derive(KubeSchema, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[x_kube(validation = Rule::new("!has(self.include) || !self.include.exists(n, n in ['kube-system', 'kube-node-lease'])").message("namespaces.include must not name kube-system or kube-node-lease"))]
#[serde(rename_all = "camelCase")]
pub struct NamespaceScope {
    /// Label selector on the namespace's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Only these namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63)))]
    pub include: Vec<String>,
    /// Never these namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63)))]
    pub exclude: Vec<String>,
}

/// Annotation gate, as in the sidecar tutorial.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationGate {
    /// The annotation's name.
    #[schemars(length(min = 1, max = 317))]
    pub name: String,
    /// When true, only objects carrying the annotation are touched; when false, objects whose
    /// annotation is `"false"` are left alone and all others are touched.
    #[serde(default)]
    pub required: bool,
}

/// What the API server does when the initializer cannot be reached while registered.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Reject the request (until the operator deregisters the initializer).
    #[default]
    Fail,
    /// Let the request through unchanged.
    Ignore,
}

impl FailurePolicy {
    /// The value of a webhook's or policy's `failurePolicy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "Fail",
            Self::Ignore => "Ignore",
        }
    }
}

/// Whether the initializer is called again when a later webhook changed the object.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ReinvocationPolicy {
    /// Call once.
    #[default]
    Never,
    /// Call again if a later webhook changed the object.
    IfNeeded,
}

impl ReinvocationPolicy {
    /// The value of a webhook's or policy's `reinvocationPolicy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "Never",
            Self::IfNeeded => "IfNeeded",
        }
    }
}

/// How the operator judges the initializer's health.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthPolicy {
    /// Seconds between active probes.
    #[serde(default = "default_period_seconds")]
    #[schemars(range(min = PERIOD_SECONDS_LIMITS.min, max = PERIOD_SECONDS_LIMITS.max))]
    pub period_seconds: i32,
    /// Consecutive failed probes before the configuration is removed.
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = FAILURE_THRESHOLD_LIMITS.min, max = FAILURE_THRESHOLD_LIMITS.max))]
    pub failure_threshold: i32,
    /// Consecutive good probes before the configuration is registered again.
    #[serde(default = "default_success_threshold")]
    #[schemars(range(min = SUCCESS_THRESHOLD_LIMITS.min, max = SUCCESS_THRESHOLD_LIMITS.max))]
    pub success_threshold: i32,
    /// A probe slower than this counts as failed, in milliseconds.
    #[serde(default = "default_latency_budget_millis")]
    #[schemars(range(
        min = LATENCY_BUDGET_MILLIS_LIMITS.min,
        max = LATENCY_BUDGET_MILLIS_LIMITS.max
    ))]
    pub latency_budget_millis: i32,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            period_seconds: DEFAULT_PERIOD_SECONDS,
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            success_threshold: DEFAULT_SUCCESS_THRESHOLD,
            latency_budget_millis: DEFAULT_LATENCY_BUDGET_MILLIS,
        }
    }
}

/// Why an Initializer is out of the admission path on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suspension {
    /// `spec.suspend` is true: declared with the rest of the spec.
    Spec,
    /// The break-glass annotation is present ([`crate::constants::BREAK_GLASS_ANNOTATION`]):
    /// set on the live object, so a sync of the spec does not undo it.
    BreakGlass,
}

impl Suspension {
    /// Which switch is on, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Suspension::Spec => "spec.suspend is true",
            Suspension::BreakGlass => {
                "the break-glass annotation initializer.dev/break-glass is set"
            }
        }
    }
}

impl Initializer {
    /// Whether, and by which switch, the Initializer is suspended. The break-glass annotation
    /// is named first when both are on: it is the one a sync of the spec does not clear.
    pub fn suspension(&self) -> Option<Suspension> {
        let break_glass = self
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(crate::constants::BREAK_GLASS_ANNOTATION));
        if break_glass {
            Some(Suspension::BreakGlass)
        } else if self.spec.suspend {
            Some(Suspension::Spec)
        } else {
            None
        }
    }

    /// Whether either switch suspends the Initializer.
    pub fn is_suspended(&self) -> bool {
        self.suspension().is_some()
    }
}

impl InitializerSpec {
    /// The health policy in force: the spec's, or the defaults.
    pub fn health_policy(&self) -> HealthPolicy {
        self.health.clone().unwrap_or_default()
    }

    /// Every bounded number of the spec (health defaults filled in): its path, its value and the
    /// limits its schema attribute names. The one list the validation and the schema's test walk.
    pub fn bounded_numbers(&self) -> [(&'static str, i32, Limits); 6] {
        let health = self.health_policy();
        [
            ("spec.replicas", self.replicas, REPLICAS_LIMITS),
            (
                "spec.timeoutSeconds",
                self.timeout_seconds,
                TIMEOUT_SECONDS_LIMITS,
            ),
            (
                "spec.health.periodSeconds",
                health.period_seconds,
                PERIOD_SECONDS_LIMITS,
            ),
            (
                "spec.health.failureThreshold",
                health.failure_threshold,
                FAILURE_THRESHOLD_LIMITS,
            ),
            (
                "spec.health.successThreshold",
                health.success_threshold,
                SUCCESS_THRESHOLD_LIMITS,
            ),
            (
                "spec.health.latencyBudgetMillis",
                health.latency_budget_millis,
                LATENCY_BUDGET_MILLIS_LIMITS,
            ),
        ]
    }
}

/// The lifecycle phase, as shown by `kubectl get initializers`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum Phase {
    /// Accepted, nothing deployed yet.
    #[default]
    Pending,
    /// The workload is deployed and not yet ready and answering.
    Deploying,
    /// The configuration is registered: the initializer intercepts requests.
    Registered,
    /// A probe failed: the configuration is registered with `failurePolicy: Ignore` and a short
    /// timeout (and the fallback, if any, is in force) until the initializer answers again or is
    /// removed.
    Degraded,
    /// The initializer stopped answering; the configuration is removed (fail open).
    Unresponsive,
    /// `spec.suspend` is true or the break-glass annotation is present; the configuration is
    /// removed.
    Suspended,
    /// The preset runs in the API server as a MutatingAdmissionPolicy, proven to do what the
    /// webhook does; the webhook is deregistered and its Deployment scaled to zero.
    InApiServer,
    /// The spec was refused; nothing is registered.
    Invalid,
}

impl Phase {
    /// Every phase, in lifecycle order.
    pub const ALL: [Phase; 8] = [
        Phase::Pending,
        Phase::Deploying,
        Phase::Registered,
        Phase::Degraded,
        Phase::Unresponsive,
        Phase::Suspended,
        Phase::InApiServer,
        Phase::Invalid,
    ];

    /// The value as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Deploying => "Deploying",
            Phase::Registered => "Registered",
            Phase::Degraded => "Degraded",
            Phase::Unresponsive => "Unresponsive",
            Phase::Suspended => "Suspended",
            Phase::InApiServer => "InApiServer",
            Phase::Invalid => "Invalid",
        }
    }
}

/// Observed state of an `Initializer`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InitializerStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// `Ready`, `Reconciling` and `Stalled` (exactly one `True`), `Valid`, `Available`,
    /// `Responding`, `Registered`, and `Degraded` (after the first outage) and
    /// `FallbackInForce` (with `spec.fallback`); one of each type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready initializer pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Where the injection runs now (see the `InApiServer` condition for why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineInForce>,
    /// Whether the configuration (webhook or `InitializerConfiguration`) is registered now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered: Option<bool>,
    /// Name of the registered MutatingWebhookConfiguration (or InitializerConfiguration, with
    /// `backend: InitializerConfiguration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration_name: Option<String>,
    /// When the last active probe ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    /// Latency of the last active probe, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_latency_millis: Option<i64>,
    /// Expiry of the serving certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_not_after: Option<Time>,
    /// Extra detail by key, for humans (for example the last probe error). With
    /// `backend: InitializerConfiguration`, `releasedObjects` is how many objects still pending
    /// on the initializer's name had it removed when its configuration was last removed (so
    /// their creates do not stay stuck; the operator's own canaries are released too and not
    /// counted), and `pendingName` is the name it is pending as.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<String, String>,
    /// The last time the initializer left the path, step by step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_outage: Option<Outage>,
    /// Objects created while the initializer was out of the path that it never saw: counted
    /// after each fail-open window, so they can be recreated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_initializations: Option<MissedInitializations>,
    /// What the operator could show about the guard on Initializers for this one: written by
    /// the operator alone (the guard refuses status writes from anyone who may not create
    /// mutatingwebhookconfigurations), under a field manager of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardWitness>,
    /// The NetworkPolicy the operator took away under `--network-policy=auto` because the API
    /// server's calls were not seen passing it: it is not written again while the API server's
    /// ranges are these or fewer of them. Written by the operator alone, under a field manager
    /// of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawn_network_policy: Option<WithdrawnNetworkPolicy>,
}

/// A NetworkPolicy withdrawn under `--network-policy=auto`: the route checks went unanswered
/// for the route deadline while it stood in front of the initializer's pods.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WithdrawnNetworkPolicy {
    /// The ranges it admitted the API server from, in CIDR notation.
    pub api_server_cidrs: Vec<String>,
    /// When it was withdrawn.
    pub withdrawn_at: Time,
    /// What the last route check saw.
    pub last_route_check: String,
}

/// Whether this Initializer's spec is shown to have passed the guard on Initializers: it was
/// created after the guard's binding was in force, or its spec changed after the operator held
/// it back, or it was proven under an earlier binding and its spec has not changed since.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GuardWitness {
    /// The UID of the guard's binding in force when the operator wrote this.
    pub binding_uid: String,
    /// The Initializer's generation when the operator wrote this.
    pub generation: i64,
    /// True while nothing shows that the spec at `generation` passed the guard (the
    /// Initializer was created before the guard was in force): it is not deployed until its
    /// spec changes (every change after this was written passed the guard).
    #[serde(default)]
    pub held: bool,
}

/// The steps of one outage, each with its time.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Outage {
    /// The first failed probe (or the endpoints going to zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<MicroTime>,
    /// The configuration was degraded to `failurePolicy: Ignore` and a short timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_at: Option<MicroTime>,
    /// The fallback policy and binding were created (in force once the API server has loaded
    /// them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_installed_at: Option<MicroTime>,
    /// The configuration was removed (fail open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deregistered_at: Option<MicroTime>,
    /// The configuration was registered again with the spec's values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_at: Option<MicroTime>,
}

/// What slipped through one fail-open window.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MissedInitializations {
    /// Objects in scope created in the window without the initializer's mark.
    pub count: i64,
    /// A few of them, as `namespace/name` (or `name`), with their resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// The window: from the first create that could pass unseen...
    pub from: Time,
    /// ...to the registration with the spec's values (plus the webhook timeout).
    pub to: Time,
    /// True when the scan stopped at its bound: the count is a lower bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Resources that could not be counted, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unchecked: Vec<String>,
}

fn default_replicas() -> i32 {
    DEFAULT_REPLICAS
}
fn default_timeout_seconds() -> i32 {
    DEFAULT_TIMEOUT_SECONDS
}
fn default_period_seconds() -> i32 {
    DEFAULT_PERIOD_SECONDS
}
fn default_failure_threshold() -> i32 {
    DEFAULT_FAILURE_THRESHOLD
}
fn default_success_threshold() -> i32 {
    DEFAULT_SUCCESS_THRESHOLD
}
fn default_latency_budget_millis() -> i32 {
    DEFAULT_LATENCY_BUDGET_MILLIS
}
fn default_config_key() -> String {
    crate::constants::CONFIG_FILE.to_string()
}
fn default_scope() -> Option<Scope> {
    Some(Scope::Namespaced)
}
fn default_operations() -> Vec<Operation> {
    vec![Operation::Create]
}

#[cfg(test)]
mod tests;
