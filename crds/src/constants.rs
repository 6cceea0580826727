//! Names, labels and defaults shared by the operator, the initializers and the tests.
//!
//! See `docs/contracts.md` for the seams these names form between the parts.

/// API group of the `Initializer` resource.
pub const GROUP: &str = "initializer.dev";
/// API version of the `Initializer` resource.
pub const VERSION: &str = "v1alpha1";
/// Kind of the `Initializer` resource.
pub const KIND: &str = "Initializer";
/// Plural resource name of the `Initializer` resource.
pub const PLURAL: &str = "initializers";
/// Name of the `Initializer` CustomResourceDefinition.
pub const CRD_NAME: &str = "initializers.initializer.dev";

/// Field manager for every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "initializer-operator";
/// Finalizer that removes the webhook configuration before the workload may go.
pub const FINALIZER: &str = "initializer.dev/cleanup";

/// Label on every pod the operator deploys, marking it as an initializer's own pod. It exempts
/// nothing: anyone may set a label on their object, so managed webhooks exclude the initializer's
/// pods by their namespace, never by this label.
pub const EXCLUDE_LABEL: &str = "initializer.dev/excluded";
/// Value of [`EXCLUDE_LABEL`].
pub const EXCLUDE_LABEL_VALUE: &str = "true";
/// Standard label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] on everything the operator creates.
pub const MANAGED_BY_VALUE: &str = "initializer-operator";
/// Label naming the `Initializer` an object belongs to.
pub const INITIALIZER_LABEL: &str = "initializer.dev/initializer";
/// Label an administrator sets (to [`WORKLOADS_LABEL_VALUE`]) on a namespace, besides the
/// operator's own, where initializers' workloads may run. Whoever may create pods in such a
/// namespace could join an initializer's Service, so only administrators should label one.
pub const WORKLOADS_LABEL: &str = "initializer.dev/workloads";
/// The value of [`WORKLOADS_LABEL`] that allows workloads.
pub const WORKLOADS_LABEL_VALUE: &str = "true";
/// Label the API server sets on every namespace, holding its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Namespaces no initializer may ever intercept, besides the operator's own.
pub const SYSTEM_NAMESPACES: [&str; 2] = ["kube-system", "kube-node-lease"];

/// Port the initializer process listens on (HTTPS).
pub const INITIALIZER_PORT: u16 = 8443;
/// Name of the HTTPS port on the initializer's container and Service.
pub const INITIALIZER_PORT_NAME: &str = "https";
/// Port of the initializer's Service.
pub const SERVICE_PORT: u16 = 443;
/// Path the admission webhook is served on.
pub const WEBHOOK_PATH: &str = "/initialize";
/// Liveness path of every initializer.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Readiness path of every initializer.
pub const READYZ_PATH: &str = "/readyz";
/// Metrics path of every initializer.
pub const METRICS_PATH: &str = "/metrics";

/// Where the serving certificate Secret is mounted in initializer pods.
pub const TLS_DIR: &str = "/etc/initializer/tls";
/// Where the configuration is mounted in initializer pods.
pub const CONFIG_DIR: &str = "/etc/initializer/config";
/// File name of the configuration inside [`CONFIG_DIR`].
pub const CONFIG_FILE: &str = "config.yaml";
/// Env var naming the TLS directory.
pub const TLS_DIR_ENV: &str = "TLS_DIR";
/// Env var naming the configuration directory.
pub const CONFIG_DIR_ENV: &str = "CONFIG_DIR";
/// Env var holding the pod's IP (downward API), used as the listen address.
pub const POD_IP_ENV: &str = "POD_IP";
/// Env var naming the annotation that gates the initializer (`spec.annotation.name`).
pub const ANNOTATION_ENV: &str = "INITIALIZER_ANNOTATION";
/// Env var, `"true"` when objects without the gate annotation must be left alone.
pub const REQUIRE_ANNOTATION_ENV: &str = "INITIALIZER_REQUIRE_ANNOTATION";
/// Env var holding the webhook's `timeoutSeconds`; the SDK answers every review before it.
pub const TIMEOUT_SECONDS_ENV: &str = "INITIALIZER_TIMEOUT_SECONDS";
/// Env var holding the container's memory limit in bytes (the downward API's `limits.memory`):
/// the SDK keeps the request bodies it holds at once to a share of it.
pub const MEMORY_LIMIT_ENV: &str = "INITIALIZER_MEMORY_LIMIT";
/// Env var holding the initializer's log filter (`spec.logLevel`), as the preset and the SDK
/// read it.
pub const LOG_ENV: &str = "RUST_LOG";
/// Env var holding the Initializer's name, for logs and metrics.
pub const INITIALIZER_NAME_ENV: &str = "INITIALIZER_NAME";
/// Env var holding the workload generation: the Initializer's `metadata.generation` when the
/// pod template last changed. The SDK writes it into the mark on every object it changes.
pub const GENERATION_ENV: &str = "INITIALIZER_GENERATION";

/// Annotation that suspends an Initializer, like `spec.suspend`, while it is present (whatever
/// its value, which says why). It is the break-glass switch `kubectl initializer suspend` sets
/// with its own field manager, so that a GitOps sync of the spec (client-side or server-side
/// apply, with force) leaves it in place. The guard on Initializers judges setting, changing
/// and removing it as it judges the spec.
pub const BREAK_GLASS_ANNOTATION: &str = "initializer.dev/break-glass";

/// Annotation the SDK puts on every object an initializer changed: comma-separated
/// `<initializer>/<generation>` entries (a bare `<initializer>` from older SDKs). After a
/// fail-open window the operator counts the objects in scope that lack its entry.
pub const INITIALIZED_BY_ANNOTATION: &str = "initializer.dev/initialized-by";

/// Annotation on a webhook configuration the operator degraded (`failurePolicy: Ignore`, short
/// timeout) because its initializer stopped answering.
pub const DEGRADED_ANNOTATION: &str = "initializer.dev/degraded";
/// `timeoutSeconds` of a degraded configuration (never more than the spec's).
pub const DEGRADED_TIMEOUT_SECONDS: i32 = 1;
/// Prefix of the name of the route check's webhook (before the Initializer's webhook name),
/// which only the configuration registered while the route is being proven holds.
pub const ROUTE_CHECK_WEBHOOK_PREFIX: &str = "route-check.";
/// Label on the dry-run ConfigMap of the route check (valued with the Initializer's label),
/// which the route check's webhook selects.
pub const ROUTE_CHECK_LABEL: &str = "initializer.dev/route-check";

/// Annotation on the initializer's Deployment: digest of its pod template.
pub const TEMPLATE_HASH_ANNOTATION: &str = "initializer.dev/template-hash";
/// Annotation on the initializer's Deployment: the workload generation its pods were given.
pub const WORKLOAD_GENERATION_ANNOTATION: &str = "initializer.dev/workload-generation";

/// Domain every pending name of the `InitializerConfiguration` backend ends in: the Initializer
/// `NAME` whose workload runs in `NS` is pending as `NAME.NS.initializer-operator.io`.
pub const PENDING_NAME_DOMAIN: &str = "initializer-operator.io";
/// Label on the canary objects the operator creates to probe an initializer of the
/// `InitializerConfiguration` backend end to end; its value is the Initializer's label.
pub const CANARY_LABEL: &str = "initializer-operator.io/canary";
/// Group and version of the original Initializers' configuration (Kubernetes 1.7–1.13).
pub const LEGACY_GROUP_VERSION: &str = "admissionregistration.k8s.io/v1alpha1";
/// Plural resource of the original Initializers' configuration.
pub const LEGACY_PLURAL: &str = "initializerconfigurations";
/// Kind of the original Initializers' configuration.
pub const LEGACY_KIND: &str = "InitializerConfiguration";

/// The API resource of `InitializerConfiguration` (cluster-scoped), for the operator that
/// registers them and the uninstall that removes them.
pub fn legacy_configuration_resource() -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: LEGACY_GROUP_VERSION.into(),
        kind: LEGACY_KIND.into(),
        plural: LEGACY_PLURAL.into(),
    }
}
/// Key of the Initializer's `status.details` holding how many objects still pending on its
/// name were released when its `InitializerConfiguration` was last removed.
pub const RELEASED_OBJECTS_DETAIL: &str = "releasedObjects";
