//! Pure construction of every object an Initializer needs, from a [`Validated`] spec, the TLS
//! material and the operator's settings. Infallible and deterministic: the same inputs always
//! give the same objects, so server-side apply is a no-op when nothing changed.

use std::collections::BTreeMap;

use initializer_crds::constants::{
    ANNOTATION_ENV, CONFIG_DIR, CONFIG_DIR_ENV, CONFIG_FILE, DEGRADED_ANNOTATION,
    DEGRADED_TIMEOUT_SECONDS, EXCLUDE_LABEL, EXCLUDE_LABEL_VALUE, GENERATION_ENV, HEALTHZ_PATH,
    INITIALIZER_LABEL, INITIALIZER_NAME_ENV, INITIALIZER_PORT, INITIALIZER_PORT_NAME, LOG_ENV,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, MEMORY_LIMIT_ENV, POD_IP_ENV, READYZ_PATH,
    REQUIRE_ANNOTATION_ENV, SERVICE_PORT, TEMPLATE_HASH_ANNOTATION, TIMEOUT_SECONDS_ENV, TLS_DIR,
    TLS_DIR_ENV, WEBHOOK_PATH, WORKLOAD_GENERATION_ANNOTATION,
};
use initializer_crds::{AnnotationGate, InterceptRule, LogLevel};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, MutatingWebhook, MutatingWebhookConfiguration,
    NamedRuleWithOperations, RuleWithOperations, ServiceReference, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, WebhookClientConfig,
};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar,
    EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceFieldSelector,
    ResourceRequirements, SeccompProfile, Secret, SecretVolumeSource, SecurityContext, Service,
    ServiceAccount, ServicePort, ServiceSpec, TopologySpreadConstraint, Volume, VolumeMount,
    WeightedPodAffinityTerm,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::selector::InterceptScope;
use crate::tls::TlsMaterial;
use crate::validate::{self, ConfigPlan, Validated};

/// Name of the initializer's container.
pub const CONTAINER_NAME: &str = "initializer";
/// Non-root user the initializer runs as (the distroless `nonroot` user).
pub const RUN_AS_USER: i64 = 65532;

/// What the operator knows that the spec does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Image of the built-in preset initializer, used when a spec gives only `preset`.
    pub preset_image: String,
    /// The NetworkPolicy in front of every initializer's pods (`--network-policy=on`); `None`
    /// (the default): none, and one written before is removed.
    pub network_policy: Option<network_policy::NetworkPolicySettings>,
}

/// Every object one Initializer needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// The CA (never mounted), in the operator's namespace ([`validate::ca_namespace`]).
    pub ca_secret: Secret,
    /// The ServiceAccount the initializer's pods run as.
    pub service_account: ServiceAccount,
    /// The serving certificate, mounted at [`TLS_DIR`].
    pub tls_secret: Secret,
    /// The operator-written `config.yaml`; `None` when the spec references a ConfigMap.
    pub config_map: Option<ConfigMap>,
    /// The initializer's Deployment.
    pub deployment: Deployment,
    /// The Service in front of it (port 443 → `https`).
    pub service: Service,
    /// Keeps initializer pods from all being evicted at once.
    pub pdb: PodDisruptionBudget,
    /// Ingress to the pods from the operator and the API server only (`None` when off).
    pub network_policy: Option<NetworkPolicy>,
    /// The configuration registered only while the initializer is healthy.
    pub webhook: MutatingWebhookConfiguration,
    /// The fallback policy and its binding, in force only while the initializer is degraded or
    /// out of the path (`None` without `spec.fallback`).
    pub fallback: Option<FallbackPolicy>,
    /// With `backend: InitializerConfiguration`, the configuration registered instead of
    /// [`Desired::webhook`] and the RBAC of the initializer's controller.
    pub legacy: Option<legacy::LegacyDesired>,
}

/// A ValidatingAdmissionPolicy and the binding that puts it in force.
#[derive(Clone, Debug, PartialEq)]
pub struct FallbackPolicy {
    /// The policy: the fallback's validations, the Initializer's match scope.
    pub policy: ValidatingAdmissionPolicy,
    /// The binding: `validationActions: [Deny]`.
    pub binding: ValidatingAdmissionPolicyBinding,
}

/// Labels on every object derived from this Initializer.
pub fn labels(v: &Validated) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
        (INITIALIZER_LABEL.to_string(), v.names.label.clone()),
        ("app.kubernetes.io/name".to_string(), v.names.base.clone()),
        (
            "app.kubernetes.io/component".to_string(),
            "initializer".to_string(),
        ),
    ])
}

/// Labels that select this Initializer's pods.
pub fn selector_labels(v: &Validated) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
        (INITIALIZER_LABEL.to_string(), v.names.label.clone()),
    ])
}

fn meta(v: &Validated, name: &str, owner: Option<&OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(v.namespace.clone()),
        labels: Some(labels(v)),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..Default::default()
    }
}

/// Builds every desired object. `owner` is the Initializer's controller reference, set on the
/// namespaced objects so they go when it goes; the webhook configuration is never owned (the
/// finalizer deletes it first, explicitly).
pub fn build(
    v: &Validated,
    tls: &TlsMaterial,
    settings: &Settings,
    owner: Option<&OwnerReference>,
) -> Desired {
    Desired {
        ca_secret: ca_secret(v, tls, owner),
        service_account: service_account(v, owner),
        tls_secret: tls_secret(v, tls, owner),
        config_map: config_map(v, owner),
        deployment: deployment(v, settings, owner),
        service: service(v, owner),
        pdb: pdb(v, owner),
        network_policy: settings
            .network_policy
            .as_ref()
            .map(|s| network_policy::network_policy(v, s, owner)),
        webhook: webhook(v, &tls.ca.cert_pem),
        fallback: fallback(v),
        legacy: legacy::legacy(v, owner),
    }
}

/// The CA Secret: `ca.crt` and `ca.key`, in the operator's namespace whatever the workload's
/// (a namespaced object may have a cluster-scoped owner, so it still goes with the Initializer);
/// also the mark key of the serving key last replaced, while marks it made are accepted
/// ([`crate::tls::retire`]).
pub fn ca_secret(v: &Validated, tls: &TlsMaterial, owner: Option<&OwnerReference>) -> Secret {
    let mut metadata = meta(v, &v.names.ca_secret, owner);
    metadata.namespace = Some(validate::ca_namespace(v).to_string());
    let mut data = BTreeMap::from([
        (
            "ca.crt".to_string(),
            ByteString(tls.ca.cert_pem.clone().into_bytes()),
        ),
        (
            "ca.key".to_string(),
            ByteString(tls.ca.key_pem.clone().into_bytes()),
        ),
    ]);
    if let Some(retired) = &tls.retired_mark_key {
        data.extend(crate::tls::retired_entries(retired));
    }
    Secret {
        metadata,
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// The initializer's own ServiceAccount (named like its Deployment). It mounts no token unless
/// `spec.apiAccess`; what it may do is for the administrator to grant.
pub fn service_account(v: &Validated, owner: Option<&OwnerReference>) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(v, &v.names.base, owner),
        automount_service_account_token: Some(validate::automount_token(&v.spec)),
        ..Default::default()
    }
}

/// The serving Secret (`kubernetes.io/tls`): `tls.crt`, `tls.key` and `ca.crt`.
pub fn tls_secret(v: &Validated, tls: &TlsMaterial, owner: Option<&OwnerReference>) -> Secret {
    Secret {
        metadata: meta(v, &v.names.tls_secret, owner),
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_string(),
                ByteString(tls.cert_pem.clone().into_bytes()),
            ),
            (
                "tls.key".to_string(),
                ByteString(tls.key_pem.clone().into_bytes()),
            ),
            (
                "ca.crt".to_string(),
                ByteString(tls.ca.cert_pem.clone().into_bytes()),
            ),
        ])),
        ..Default::default()
    }
}

/// The ConfigMap holding `config.yaml`, unless the spec references its own ConfigMap.
pub fn config_map(v: &Validated, owner: Option<&OwnerReference>) -> Option<ConfigMap> {
    let text = match &v.config {
        ConfigPlan::Empty => String::new(),
        ConfigPlan::Text(text) => text.clone(),
        ConfigPlan::ConfigMapRef { .. } => return None,
    };
    Some(ConfigMap {
        metadata: meta(v, &v.names.config_map, owner),
        data: Some(BTreeMap::from([(CONFIG_FILE.to_string(), text)])),
        ..Default::default()
    })
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The container's environment: the process contract first, then the user's variables (a user
/// variable never replaces a contract variable; a repeated user variable keeps its last value).
pub fn container_env(v: &Validated) -> Vec<EnvVar> {
    let mut vars = vec![
        EnvVar {
            name: POD_IP_ENV.to_string(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: Some("v1".into()),
                    field_path: "status.podIP".into(),
                }),
                ..Default::default()
            }),
        },
        env(TLS_DIR_ENV, TLS_DIR),
        env(CONFIG_DIR_ENV, CONFIG_DIR),
        env(INITIALIZER_NAME_ENV, v.names.initializer.clone()),
        env(TIMEOUT_SECONDS_ENV, v.spec.timeout_seconds.to_string()),
        EnvVar {
            name: MEMORY_LIMIT_ENV.to_string(),
            value: None,
            value_from: Some(EnvVarSource {
                resource_field_ref: Some(ResourceFieldSelector {
                    container_name: Some(CONTAINER_NAME.to_string()),
                    resource: "limits.memory".into(),
                    divisor: None,
                }),
                ..Default::default()
            }),
        },
    ];
    if let Some(gate) = &v.spec.annotation {
        vars.push(env(ANNOTATION_ENV, gate.name.clone()));
        vars.push(env(REQUIRE_ANNOTATION_ENV, gate.required.to_string()));
    }
    let reserved: Vec<String> = vars.iter().map(|e| e.name.clone()).collect();
    // The default level is the image's own: an Initializer that leaves it adds nothing to its
    // pods, so a new field's default rolls none of them.
    if v.spec.log_level != LogLevel::default() {
        vars.push(env(LOG_ENV, v.spec.log_level.filter()));
    }
    for user in &v.spec.env {
        if reserved.contains(&user.name) {
            continue;
        }
        vars.retain(|e| e.name != user.name);
        vars.push(user.clone());
    }
    vars
}

/// The container's arguments: with the `InitializerConfiguration` backend, the controller mode's
/// ([`legacy::controller_args`]) first; then the spec's. `None` when there are none.
pub fn container_args(v: &Validated) -> Option<Vec<String>> {
    let mut args = v
        .pending_name
        .as_deref()
        .map(|pending| legacy::controller_args(v, pending))
        .unwrap_or_default();
    args.extend(v.spec.args.iter().cloned());
    (!args.is_empty()).then_some(args)
}

/// The container's resources: the spec's, or small requests when the spec gives none.
pub fn resources(v: &Validated) -> ResourceRequirements {
    match &v.spec.resources {
        Some(r)
            if r.requests.as_ref().is_some_and(|m| !m.is_empty())
                || r.limits.as_ref().is_some_and(|m| !m.is_empty()) =>
        {
            r.clone()
        }
        _ => ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("50m".into())),
                ("memory".to_string(), Quantity("64Mi".into())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity("256Mi".into()),
            )])),
            ..Default::default()
        },
    }
}

/// The kubelet's readiness probe: as quick to judge as the API server's calls are (an
/// initializer that cannot answer `/readyz` within a second cannot answer a review in time).
const READINESS_TIMEOUT_SECONDS: i32 = 1;

/// The kubelet's liveness probe waits longer: a restart is for a wedged process, which never
/// answers, not for a busy one on a saturated node, which answers late (issue 29: saturation must
/// not become churn). Readiness already takes a slow pod out of the path meanwhile.
const LIVENESS_TIMEOUT_SECONDS: i32 = 5;

fn https_probe(path: &str, period: i32, failures: i32, timeout: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String(INITIALIZER_PORT_NAME.to_string()),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(timeout),
        ..Default::default()
    }
}

/// The initializer's Deployment.
pub fn deployment(
    v: &Validated,
    settings: &Settings,
    owner: Option<&OwnerReference>,
) -> Deployment {
    let selector = selector_labels(v);
    let mut pod_labels = labels(v);
    pod_labels.insert(EXCLUDE_LABEL.to_string(), EXCLUDE_LABEL_VALUE.to_string());
    let label_selector = LabelSelector {
        match_labels: Some(selector.clone()),
        match_expressions: None,
    };
    let config_volume = match &v.config {
        ConfigPlan::ConfigMapRef { name, key } => ConfigMapVolumeSource {
            name: name.clone(),
            items: Some(vec![KeyToPath {
                key: key.clone(),
                path: CONFIG_FILE.to_string(),
                mode: None,
                ..Default::default()
            }]),
            ..Default::default()
        },
        _ => ConfigMapVolumeSource {
            name: v.names.config_map.clone(),
            ..Default::default()
        },
    };
    let container = Container {
        name: CONTAINER_NAME.to_string(),
        image: Some(
            v.image
                .clone()
                .unwrap_or_else(|| settings.preset_image.clone()),
        ),
        image_pull_policy: Some("IfNotPresent".into()),
        args: container_args(v),
        env: Some(container_env(v)),
        ports: Some(vec![ContainerPort {
            name: Some(INITIALIZER_PORT_NAME.to_string()),
            container_port: i32::from(INITIALIZER_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(https_probe(READYZ_PATH, 2, 2, READINESS_TIMEOUT_SECONDS)),
        liveness_probe: Some(https_probe(HEALTHZ_PATH, 10, 3, LIVENESS_TIMEOUT_SECONDS)),
        resources: Some(resources(v)),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS_USER),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "tls".into(),
                mount_path: TLS_DIR.to_string(),
                read_only: Some(true),
                ..Default::default()
            },
            VolumeMount {
                name: "config".into(),
                mount_path: CONFIG_DIR.to_string(),
                read_only: Some(true),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    Deployment {
        metadata: meta(v, &v.names.base, owner),
        spec: DeploymentSpec {
            replicas: Some(v.spec.replicas),
            revision_history_limit: Some(3),
            selector: label_selector.clone(),
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                // Never drop below the ready count during a rollout: surge one new pod first.
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    service_account_name: Some(v.names.base.clone()),
                    automount_service_account_token: Some(validate::automount_token(&v.spec)),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    termination_grace_period_seconds: Some(10),
                    topology_spread_constraints: Some(vec![TopologySpreadConstraint {
                        max_skew: 1,
                        topology_key: "kubernetes.io/hostname".into(),
                        when_unsatisfiable: "ScheduleAnyway".into(),
                        label_selector: Some(label_selector.clone()),
                        ..Default::default()
                    }]),
                    affinity: Some(Affinity {
                        pod_anti_affinity: Some(PodAntiAffinity {
                            preferred_during_scheduling_ignored_during_execution: Some(vec![
                                WeightedPodAffinityTerm {
                                    weight: 100,
                                    pod_affinity_term: PodAffinityTerm {
                                        label_selector: Some(label_selector),
                                        topology_key: "kubernetes.io/hostname".into(),
                                        ..Default::default()
                                    },
                                },
                            ]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    volumes: Some(vec![
                        Volume {
                            name: "tls".into(),
                            secret: Some(SecretVolumeSource {
                                secret_name: Some(v.names.tls_secret.clone()),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        Volume {
                            name: "config".into(),
                            config_map: Some(config_volume),
                            ..Default::default()
                        },
                    ]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The Service: port 443 named `https` → the container port named `https`.
pub fn service(v: &Validated, owner: Option<&OwnerReference>) -> Service {
    Service {
        metadata: meta(v, &v.names.base, owner),
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(v)),
            ports: Some(vec![ServicePort {
                name: Some(INITIALIZER_PORT_NAME.to_string()),
                port: i32::from(SERVICE_PORT),
                target_port: Some(IntOrString::String(INITIALIZER_PORT_NAME.to_string())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The PodDisruptionBudget: `maxUnavailable: 1`. With several replicas a drain evicts one pod
/// at a time and the rest keep answering. With one replica, `minAvailable: 1` would block every
/// node drain forever; allowing the eviction is safe because the endpoints fast path removes
/// the configuration the moment no pod is ready (fail open).
pub fn pdb(v: &Validated, owner: Option<&OwnerReference>) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(v, &v.names.base, owner),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(v)),
                match_expressions: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn admission_rule(r: &InterceptRule) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(r.api_groups.clone()),
        api_versions: Some(r.api_versions.clone()),
        resources: Some(r.resources.clone()),
        operations: Some(
            r.operations
                .iter()
                .map(|o| o.as_str().to_string())
                .collect(),
        ),
        scope: Some(r.effective_scope().as_str().to_string()),
    }
}

/// Name of the webhook's matchCondition that leaves out requests without an object (DELETE,
/// CONNECT), which the preset initializer admits unchanged.
pub const HAS_OBJECT: &str = "initializer-has-object";

/// The webhook's `matchConditions`: what the initializer would leave alone, checked by the API
/// server so that it does not call the initializer at all for such an object. The annotation
/// gate ([`gate_condition`]), for any initializer: the SDK applies the same gate, and the
/// Initializer declares it as what is touched. For the preset initializer (a preset without an
/// image), its whole selection as the policy compiler renders it (the gate, the kinds, labels,
/// annotation and namespaces of `spec.preset.selector`), after a condition that leaves out
/// requests without an object, on which those would fail to evaluate. A selection that does not
/// compile keeps the gate alone: the preset initializer still checks it. The missed-count
/// scope (the operator's `missed` module) has the same gate, so an object the API server did
/// not send is not counted as missed.
pub fn webhook_conditions(v: &Validated) -> Option<Vec<MatchCondition>> {
    let spec = &v.spec;
    let gate = spec.annotation.as_ref();
    let preset_selection = spec
        .preset
        .as_ref()
        .filter(|_| spec.image.is_none())
        .and_then(|preset| crate::policy::program(preset, gate).ok())
        .and_then(|program| crate::policy::compile::selection_conditions(&program).ok());
    match preset_selection {
        Some(selection) if !selection.is_empty() => {
            let mut conditions = vec![MatchCondition {
                name: HAS_OBJECT.into(),
                expression: "object != null".into(),
            }];
            conditions.extend(selection);
            Some(conditions)
        }
        _ => gate.map(|g| vec![gate_condition(g)]),
    }
}

/// The MutatingWebhookConfiguration, registered only while the initializer is healthy.
pub fn webhook(v: &Validated, ca_pem: &str) -> MutatingWebhookConfiguration {
    let spec = &v.spec;
    let scope = InterceptScope::of(v);
    let rules = spec.rules.iter().map(admission_rule).collect();
    let mut metadata = meta(v, &v.names.configuration, None);
    metadata.namespace = None;
    MutatingWebhookConfiguration {
        metadata,
        webhooks: Some(vec![MutatingWebhook {
            name: v.names.webhook.clone(),
            admission_review_versions: vec!["v1".into()],
            client_config: WebhookClientConfig {
                ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
                service: Some(ServiceReference {
                    name: v.names.base.clone(),
                    namespace: v.namespace.clone(),
                    path: Some(WEBHOOK_PATH.to_string()),
                    port: Some(i32::from(SERVICE_PORT)),
                }),
                url: None,
            },
            failure_policy: Some(spec.failure_policy.as_str().into()),
            match_policy: Some(InterceptScope::MATCH_POLICY.into()),
            namespace_selector: Some(scope.namespace_selector),
            object_selector: Some(scope.object_selector),
            reinvocation_policy: Some(spec.reinvocation_policy.as_str().into()),
            rules: Some(rules),
            side_effects: "None".into(),
            timeout_seconds: Some(spec.timeout_seconds),
            match_conditions: webhook_conditions(v),
        }]),
    }
}

/// The configuration degraded to fail open quickly while the initializer is in trouble:
/// `failurePolicy: Ignore` and a one-second timeout (never more than the spec's), marked with
/// [`DEGRADED_ANNOTATION`] so that a restarted operator knows what it found.
pub fn degraded(webhook: &MutatingWebhookConfiguration) -> MutatingWebhookConfiguration {
    let mut degraded = webhook.clone();
    degraded
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DEGRADED_ANNOTATION.to_string(), "true".to_string());
    for hook in degraded.webhooks.iter_mut().flatten() {
        hook.failure_policy = Some("Ignore".into());
        hook.timeout_seconds = Some(
            hook.timeout_seconds
                .unwrap_or(DEGRADED_TIMEOUT_SECONDS)
                .min(DEGRADED_TIMEOUT_SECONDS),
        );
    }
    degraded
}

/// Whether a configuration found in the cluster is a degraded one.
pub fn is_degraded(configuration: &MutatingWebhookConfiguration) -> bool {
    configuration
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(DEGRADED_ANNOTATION))
}

/// A CEL string literal (annotation names hold no quotes or backslashes, but be safe).
fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The annotation gate as a match condition, so the fallback checks what the initializer
/// would have checked: with `required`, objects carrying the annotation (not `"false"`);
/// otherwise, objects whose annotation is not `"false"`.
pub fn gate_condition(gate: &AnnotationGate) -> MatchCondition {
    let name = cel_string(&gate.name);
    let has = format!("has(object.metadata.annotations) && {name} in object.metadata.annotations");
    let not_false = format!("object.metadata.annotations[{name}].trim() != 'false'");
    let expression = if gate.required {
        format!("object != null && {has} && {not_false}")
    } else {
        format!("object == null || !({has}) || {not_false}")
    };
    MatchCondition {
        name: "initializer-annotation-gate".into(),
        expression,
    }
}

/// The fallback policy and binding: the spec's validations, matching what the webhook matches
/// (the fallback's own rules or the spec's, the merged namespace and object selectors, the
/// annotation gate). `failurePolicy: Fail`: a validation that cannot be evaluated refuses.
pub fn fallback(v: &Validated) -> Option<FallbackPolicy> {
    let spec = &v.spec;
    let fallback = spec.fallback.as_ref()?;
    let scope = InterceptScope::of(v);
    let rules = if fallback.rules.is_empty() {
        &spec.rules
    } else {
        &fallback.rules
    };
    let resource_rules = rules
        .iter()
        .map(|r| {
            let rule = admission_rule(r);
            NamedRuleWithOperations {
                api_groups: rule.api_groups,
                api_versions: rule.api_versions,
                resources: rule.resources,
                operations: rule.operations,
                scope: rule.scope,
                resource_names: None,
            }
        })
        .collect();
    let validations = fallback
        .validations
        .iter()
        .map(|f| Validation {
            expression: f.expression.clone(),
            message: f.message.clone(),
            message_expression: f.message_expression.clone(),
            reason: f.reason.map(|r| r.as_str().to_string()),
        })
        .collect();
    let mut metadata = meta(v, &v.names.fallback, None);
    metadata.namespace = None;
    let policy = ValidatingAdmissionPolicy {
        metadata: metadata.clone(),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            match_constraints: Some(MatchResources {
                match_policy: Some(InterceptScope::MATCH_POLICY.into()),
                namespace_selector: Some(scope.namespace_selector),
                object_selector: Some(scope.object_selector),
                resource_rules: Some(resource_rules),
                exclude_resource_rules: None,
            }),
            match_conditions: spec.annotation.as_ref().map(|g| vec![gate_condition(g)]),
            validations: Some(validations),
            ..Default::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata,
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: v.names.fallback.clone(),
            validation_actions: vec!["Deny".into()],
            match_resources: None,
            param_ref: None,
        },
    };
    Some(FallbackPolicy { policy, binding })
}

/// A stable digest of the pod template (FNV-1a of its JSON), to tell whether a new build
/// changes what the pods run.
pub fn template_hash(deployment: &Deployment) -> String {
    let template = serde_json::to_vec(&deployment.spec.template).unwrap_or_default();
    let hash = template.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// The generation the initializer's pods are told (and mark objects with): the Initializer's
/// generation when the pod template last changed. A spec change that leaves the template alone
/// (suspend, health, rules) keeps the running pods' generation, so it rolls nothing.
pub fn workload_generation(existing: Option<&Deployment>, hash: &str, generation: i64) -> i64 {
    let annotations = existing.and_then(|d| d.metadata.annotations.as_ref());
    let same = annotations
        .and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION))
        .is_some_and(|h| h == hash);
    let stamped = annotations
        .and_then(|a| a.get(WORKLOAD_GENERATION_ANNOTATION))
        .and_then(|g| g.parse().ok());
    match stamped {
        Some(previous) if same => previous,
        _ => generation,
    }
}

/// Stamps the Deployment with the workload generation: `INITIALIZER_GENERATION` in the
/// container, and the template hash (computed without it) and the generation as annotations
/// of the Deployment (not of its pods).
pub fn stamp_generation(deployment: &mut Deployment, hash: &str, generation: i64) {
    let annotations = deployment
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(TEMPLATE_HASH_ANNOTATION.to_string(), hash.to_string());
    annotations.insert(
        WORKLOAD_GENERATION_ANNOTATION.to_string(),
        generation.to_string(),
    );
    let containers = deployment
        .spec
        .template
        .spec
        .as_mut()
        .map(|p| p.containers.iter_mut());
    for container in containers.into_iter().flatten() {
        let vars = container.env.get_or_insert_with(Vec::new);
        vars.retain(|e| e.name != GENERATION_ENV);
        vars.push(env(GENERATION_ENV, generation.to_string()));
    }
}

pub mod legacy;
pub mod network_policy;

#[cfg(test)]
pub(crate) mod tests;
