//! Pure construction of every object an Initializer needs, from a [`Validated`] spec, the TLS
//! material and the operator's settings. Infallible and deterministic: the same inputs always
//! give the same objects, so server-side apply is a no-op when nothing changed.

use std::collections::BTreeMap;

use initializer_crds::constants::{
    ANNOTATION_ENV, CONFIG_DIR, CONFIG_DIR_ENV, CONFIG_FILE, DEGRADED_ANNOTATION,
    DEGRADED_TIMEOUT_SECONDS, EXCLUDE_LABEL, EXCLUDE_LABEL_VALUE, GENERATION_ENV, HEALTHZ_PATH,
    INITIALIZER_LABEL, INITIALIZER_NAME_ENV, INITIALIZER_PORT, INITIALIZER_PORT_NAME,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, POD_IP_ENV, READYZ_PATH, REQUIRE_ANNOTATION_ENV,
    SERVICE_PORT, TEMPLATE_HASH_ANNOTATION, TIMEOUT_SECONDS_ENV, TLS_DIR, TLS_DIR_ENV,
    WEBHOOK_PATH, WORKLOAD_GENERATION_ANNOTATION,
};
use initializer_crds::{AnnotationGate, FailurePolicy, InterceptRule, ReinvocationPolicy};
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
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    Secret, SecretVolumeSource, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec,
    TopologySpreadConstraint, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::selector;
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
    /// The configuration registered only while the initializer is healthy.
    pub webhook: MutatingWebhookConfiguration,
    /// The fallback policy and its binding, in force only while the initializer is degraded or
    /// out of the path (`None` without `spec.fallback`).
    pub fallback: Option<FallbackPolicy>,
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
        webhook: webhook(v, &tls.ca.cert_pem),
        fallback: fallback(v),
    }
}

/// The CA Secret: `ca.crt` and `ca.key`, in the operator's namespace whatever the workload's
/// (a namespaced object may have a cluster-scoped owner, so it still goes with the Initializer).
pub fn ca_secret(v: &Validated, tls: &TlsMaterial, owner: Option<&OwnerReference>) -> Secret {
    let mut metadata = meta(v, &v.names.ca_secret, owner);
    metadata.namespace = Some(validate::ca_namespace(v).to_string());
    Secret {
        metadata,
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            (
                "ca.crt".to_string(),
                ByteString(tls.ca.cert_pem.clone().into_bytes()),
            ),
            (
                "ca.key".to_string(),
                ByteString(tls.ca.key_pem.clone().into_bytes()),
            ),
        ])),
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
    ];
    if let Some(gate) = &v.spec.annotation {
        vars.push(env(ANNOTATION_ENV, gate.name.clone()));
        vars.push(env(REQUIRE_ANNOTATION_ENV, gate.required.to_string()));
    }
    let reserved: Vec<String> = vars.iter().map(|e| e.name.clone()).collect();
    for user in &v.spec.env {
        if reserved.contains(&user.name) {
            continue;
        }
        vars.retain(|e| e.name != user.name);
        vars.push(user.clone());
    }
    vars
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

fn https_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String(INITIALIZER_PORT_NAME.to_string()),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(1),
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
        args: (!v.spec.args.is_empty()).then(|| v.spec.args.clone()),
        env: Some(container_env(v)),
        ports: Some(vec![ContainerPort {
            name: Some(INITIALIZER_PORT_NAME.to_string()),
            container_port: i32::from(INITIALIZER_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(https_probe(READYZ_PATH, 2, 2)),
        liveness_probe: Some(https_probe(HEALTHZ_PATH, 10, 3)),
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
        spec: Some(DeploymentSpec {
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
        }),
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

/// The MutatingWebhookConfiguration, registered only while the initializer is healthy.
pub fn webhook(v: &Validated, ca_pem: &str) -> MutatingWebhookConfiguration {
    let spec = &v.spec;
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
            failure_policy: Some(
                match spec.failure_policy {
                    FailurePolicy::Fail => "Fail",
                    FailurePolicy::Ignore => "Ignore",
                }
                .into(),
            ),
            match_policy: Some("Equivalent".into()),
            namespace_selector: Some(selector::namespace_selector(
                spec.namespaces.as_ref(),
                &v.operator_namespace,
                &v.namespace,
            )),
            object_selector: Some(selector::object_selector(spec.object_selector.as_ref())),
            reinvocation_policy: Some(
                match spec.reinvocation_policy {
                    ReinvocationPolicy::Never => "Never",
                    ReinvocationPolicy::IfNeeded => "IfNeeded",
                }
                .into(),
            ),
            rules: Some(rules),
            side_effects: "None".into(),
            timeout_seconds: Some(spec.timeout_seconds),
            ..Default::default()
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
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(selector::namespace_selector(
                    spec.namespaces.as_ref(),
                    &v.operator_namespace,
                    &v.namespace,
                )),
                object_selector: Some(selector::object_selector(spec.object_selector.as_ref())),
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
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(v.names.fallback.clone()),
            validation_actions: Some(vec!["Deny".into()]),
            match_resources: None,
            param_ref: None,
        }),
    };
    Some(FallbackPolicy { policy, binding })
}

/// A stable digest of the pod template (FNV-1a of its JSON), to tell whether a new build
/// changes what the pods run.
pub fn template_hash(deployment: &Deployment) -> String {
    let template = deployment
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_vec(&s.template).ok())
        .unwrap_or_default();
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
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
        .map(|p| p.containers.iter_mut());
    for container in containers.into_iter().flatten() {
        let vars = container.env.get_or_insert_with(Vec::new);
        vars.retain(|e| e.name != GENERATION_ENV);
        vars.push(env(GENERATION_ENV, generation.to_string()));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tls;
    use crate::validate::{tests::sidecar, validate};
    use initializer_crds::{ConfigMapKey, ConfigSource, PresetConfig};
    use std::sync::LazyLock;

    pub(crate) static TLS: LazyLock<TlsMaterial> = LazyLock::new(|| {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        tls::ensure(
            None,
            None,
            &tls::dns_names("sidecar", "initializer-system"),
            now,
        )
        .unwrap()
    });

    pub(crate) fn settings() -> Settings {
        Settings {
            preset_image: "ghcr.io/initializer-dev/preset-initializer:0.1.0".into(),
        }
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "initializer.dev/v1alpha1".into(),
            kind: "Initializer".into(),
            name: "sidecar".into(),
            uid: "uid-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn validated() -> Validated {
        validate(&sidecar().spec, "initializer-system", "sidecar").unwrap()
    }

    fn desired() -> Desired {
        build(&validated(), &TLS, &settings(), Some(&owner()))
    }

    fn pod_spec(d: &Deployment) -> &PodSpec {
        d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
    }

    #[test]
    fn building_twice_gives_identical_objects() {
        assert_eq!(desired(), desired());
    }

    #[test]
    fn namespaced_objects_are_owned_and_the_configuration_is_not() {
        let d = desired();
        for m in [
            &d.ca_secret.metadata,
            &d.service_account.metadata,
            &d.tls_secret.metadata,
            &d.config_map.as_ref().unwrap().metadata,
            &d.deployment.metadata,
            &d.service.metadata,
            &d.pdb.metadata,
        ] {
            assert_eq!(m.owner_references.as_ref().unwrap()[0].uid, "uid-1");
            assert_eq!(m.namespace.as_deref(), Some("initializer-system"));
            assert_eq!(
                m.labels.as_ref().unwrap()[MANAGED_BY_LABEL],
                MANAGED_BY_VALUE
            );
            assert_eq!(m.labels.as_ref().unwrap()[INITIALIZER_LABEL], "sidecar");
        }
        assert!(d.webhook.metadata.owner_references.is_none());
        assert!(d.webhook.metadata.namespace.is_none());
        assert_eq!(
            d.webhook.metadata.labels.as_ref().unwrap()[MANAGED_BY_LABEL],
            MANAGED_BY_VALUE
        );
    }

    #[test]
    fn pods_run_as_their_own_service_account_with_no_token_unless_asked() {
        let d = desired();
        assert_eq!(d.service_account.metadata.name.as_deref(), Some("sidecar"));
        assert_eq!(
            d.service_account
                .metadata
                .owner_references
                .as_ref()
                .unwrap()[0]
                .uid,
            "uid-1"
        );
        assert_eq!(
            d.service_account.automount_service_account_token,
            Some(false)
        );
        let pod = pod_spec(&d.deployment);
        assert_eq!(pod.service_account_name.as_deref(), Some("sidecar"));
        assert_eq!(pod.automount_service_account_token, Some(false));

        let mut v = validated();
        v.spec.api_access = true;
        let d = build(&v, &TLS, &settings(), Some(&owner()));
        assert_eq!(
            d.service_account.automount_service_account_token,
            Some(true)
        );
        assert_eq!(
            pod_spec(&d.deployment).automount_service_account_token,
            Some(true)
        );
    }

    #[test]
    fn the_ca_stays_in_the_operator_namespace_and_is_never_mounted() {
        let mut v = validated();
        v.namespace = "team-hooks".into();
        let d = build(&v, &TLS, &settings(), Some(&owner()));
        assert_eq!(
            d.ca_secret.metadata.namespace.as_deref(),
            Some("initializer-system")
        );
        for m in [
            &d.tls_secret.metadata,
            &d.service_account.metadata,
            &d.deployment.metadata,
        ] {
            assert_eq!(m.namespace.as_deref(), Some("team-hooks"));
        }
        let mounted: Vec<_> = pod_spec(&d.deployment)
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        assert_eq!(mounted, ["sidecar-tls"]);
        assert!(!d.tls_secret.data.as_ref().unwrap().contains_key("ca.key"));
    }

    #[test]
    fn secrets_hold_the_ca_and_the_serving_certificate() {
        let d = desired();
        assert_eq!(d.tls_secret.type_.as_deref(), Some("kubernetes.io/tls"));
        let data = d.tls_secret.data.as_ref().unwrap();
        assert_eq!(data["tls.crt"].0, TLS.cert_pem.as_bytes());
        assert_eq!(data["tls.key"].0, TLS.key_pem.as_bytes());
        assert_eq!(data["ca.crt"].0, TLS.ca.cert_pem.as_bytes());
        let ca = d.ca_secret.data.as_ref().unwrap();
        assert_eq!(ca["ca.key"].0, TLS.ca.key_pem.as_bytes());
        assert!(
            !data.contains_key("ca.key"),
            "the CA key must never be mounted"
        );
    }

    #[test]
    fn the_config_map_holds_inline_config_or_the_preset() {
        let d = desired();
        let cm = d.config_map.unwrap();
        assert!(cm.data.unwrap()[CONFIG_FILE].contains("sidecar-nginx"));
        let mut spec = sidecar().spec;
        spec.image = None;
        spec.config = None;
        spec.preset = Some(PresetConfig::default());
        let v = validate(&spec, "initializer-system", "sidecar").unwrap();
        let d = build(&v, &TLS, &settings(), None);
        let text = d.config_map.unwrap().data.unwrap()[CONFIG_FILE].clone();
        assert_eq!(
            serde_yaml::from_str::<PresetConfig>(&text).unwrap(),
            PresetConfig::default()
        );
        let c = &pod_spec(&d.deployment).containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some("ghcr.io/initializer-dev/preset-initializer:0.1.0")
        );
    }

    #[test]
    fn a_config_map_reference_is_projected_as_config_yaml() {
        let mut spec = sidecar().spec;
        spec.config = Some(ConfigSource {
            inline: None,
            config_map_ref: Some(ConfigMapKey {
                name: "mine".into(),
                key: "sidecar.yaml".into(),
            }),
        });
        let v = validate(&spec, "initializer-system", "sidecar").unwrap();
        let d = build(&v, &TLS, &settings(), None);
        assert!(d.config_map.is_none());
        let vols = pod_spec(&d.deployment).volumes.clone().unwrap();
        let cm = vols
            .iter()
            .find(|v| v.name == "config")
            .unwrap()
            .config_map
            .clone()
            .unwrap();
        assert_eq!(cm.name, "mine");
        let items = cm.items.unwrap();
        assert_eq!(
            (items[0].key.as_str(), items[0].path.as_str()),
            ("sidecar.yaml", CONFIG_FILE)
        );
    }

    #[test]
    fn initializer_pods_carry_the_exclusion_label_and_the_contract_env() {
        let d = desired();
        let template = &d.deployment.spec.as_ref().unwrap().template;
        let labels = template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(labels[EXCLUDE_LABEL], EXCLUDE_LABEL_VALUE);
        let c = &pod_spec(&d.deployment).containers[0];
        let env = c.env.as_ref().unwrap();
        let get = |n: &str| env.iter().find(|e| e.name == n).unwrap();
        assert_eq!(
            get(POD_IP_ENV)
                .value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "status.podIP"
        );
        assert_eq!(get(TLS_DIR_ENV).value.as_deref(), Some(TLS_DIR));
        assert_eq!(get(CONFIG_DIR_ENV).value.as_deref(), Some(CONFIG_DIR));
        assert_eq!(get(INITIALIZER_NAME_ENV).value.as_deref(), Some("sidecar"));
        assert_eq!(get(TIMEOUT_SECONDS_ENV).value.as_deref(), Some("5"));
        assert_eq!(
            get(ANNOTATION_ENV).value.as_deref(),
            Some("initializer.kubernetes.io/sidecar")
        );
        assert_eq!(get(REQUIRE_ANNOTATION_ENV).value.as_deref(), Some("true"));
        assert_eq!(c.args.as_ref().unwrap()[0], "--annotation");
    }

    #[test]
    fn user_env_never_replaces_the_contract_and_keeps_its_last_value() {
        let mut spec = sidecar().spec;
        spec.env = vec![
            env("TLS_DIR", "/elsewhere"),
            env("LOG", "debug"),
            env("LOG", "info"),
        ];
        let v = validate(&spec, "initializer-system", "sidecar").unwrap();
        let vars = container_env(&v);
        let tls: Vec<_> = vars.iter().filter(|e| e.name == "TLS_DIR").collect();
        assert_eq!(tls.len(), 1);
        assert_eq!(tls[0].value.as_deref(), Some(TLS_DIR));
        let log: Vec<_> = vars.iter().filter(|e| e.name == "LOG").collect();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].value.as_deref(), Some("info"));
    }

    #[test]
    fn the_deployment_is_hardened_spread_and_never_drops_below_ready() {
        let d = desired();
        let spec = d.deployment.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(2));
        let ru = spec
            .strategy
            .as_ref()
            .unwrap()
            .rolling_update
            .as_ref()
            .unwrap();
        assert_eq!(ru.max_unavailable, Some(IntOrString::Int(0)));
        assert_eq!(ru.max_surge, Some(IntOrString::Int(1)));
        let pod = pod_spec(&d.deployment);
        let c = &pod.containers[0];
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        let requests = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
        let spread = &pod.topology_spread_constraints.as_ref().unwrap()[0];
        assert_eq!(spread.topology_key, "kubernetes.io/hostname");
        assert_eq!(spread.when_unsatisfiable, "ScheduleAnyway");
        assert!(pod.affinity.as_ref().unwrap().pod_anti_affinity.is_some());
        let ready = c
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(
            (ready.path.as_deref(), ready.scheme.as_deref()),
            (Some(READYZ_PATH), Some("HTTPS"))
        );
        let live = c
            .liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(live.path.as_deref(), Some(HEALTHZ_PATH));
        let port = &c.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.container_port),
            (Some("https"), 8443)
        );
        let mounts: Vec<_> = c
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(mounts, [TLS_DIR, CONFIG_DIR]);
    }

    #[test]
    fn user_resources_replace_the_defaults() {
        let mut spec = sidecar().spec;
        spec.resources = Some(ResourceRequirements {
            requests: Some(BTreeMap::from([("cpu".to_string(), Quantity("1".into()))])),
            ..Default::default()
        });
        let v = validate(&spec, "initializer-system", "sidecar").unwrap();
        assert_eq!(resources(&v).requests.unwrap()["cpu"].0, "1");
        spec.resources = Some(ResourceRequirements::default());
        let v = validate(&spec, "initializer-system", "sidecar").unwrap();
        assert_eq!(resources(&v).requests.unwrap()["cpu"].0, "50m");
    }

    #[test]
    fn while_the_ca_rotates_the_bundle_carries_the_old_and_the_new_ca() {
        let later = jiff::Timestamp::from_second(1_800_000_000).unwrap()
            + jiff::SignedDuration::from_hours(24 * 365 * 7);
        let rotated = tls::ensure(
            Some(TLS.ca.clone()),
            Some((TLS.cert_pem.clone(), TLS.key_pem.clone())),
            &tls::dns_names("sidecar", "initializer-system"),
            later,
        )
        .unwrap();
        let d = build(&validated(), &rotated, &settings(), None);
        let hook = &d.webhook.webhooks.as_ref().unwrap()[0];
        let bundle = String::from_utf8(hook.client_config.ca_bundle.clone().unwrap().0).unwrap();
        let blocks = tls::certificate_blocks(&bundle);
        assert_eq!(blocks.len(), 2, "{bundle}");
        assert_eq!(format!("{}\n", blocks[0]), rotated.ca.current_pem());
        assert_eq!(format!("{}\n", blocks[1]), TLS.ca.current_pem());
        // The CA Secret keeps both, so that the next reconcile reads the rotation back.
        let ca = d.ca_secret.data.as_ref().unwrap();
        assert_eq!(ca["ca.crt"].0, bundle.as_bytes());
        // Retired, the bundle is the new CA alone.
        let retired = TlsMaterial {
            ca: rotated.ca.retire_previous(),
            ..rotated.clone()
        };
        let d = build(&validated(), &retired, &settings(), None);
        let hook = &d.webhook.webhooks.as_ref().unwrap()[0];
        assert_eq!(
            hook.client_config.ca_bundle.as_ref().unwrap().0,
            rotated.ca.current_pem().as_bytes()
        );
    }

    #[test]
    fn service_and_pdb_select_the_initializer_pods() {
        let d = desired();
        let svc = d.service.spec.as_ref().unwrap();
        let port = &svc.ports.as_ref().unwrap()[0];
        assert_eq!(port.port, 443);
        assert_eq!(port.target_port, Some(IntOrString::String("https".into())));
        let pod_labels = d
            .deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .clone()
            .unwrap();
        for (k, v) in svc.selector.as_ref().unwrap() {
            assert_eq!(pod_labels.get(k), Some(v));
        }
        let pdb = d.pdb.spec.as_ref().unwrap();
        assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(pdb.selector.as_ref().unwrap().match_labels, svc.selector);
    }

    #[test]
    fn the_webhook_points_at_the_service_with_the_merged_selectors() {
        let d = desired();
        assert_eq!(
            d.webhook.metadata.name.as_deref(),
            Some("initializer-sidecar")
        );
        let hook = &d.webhook.webhooks.as_ref().unwrap()[0];
        assert_eq!(hook.name, "sidecar.initializers.initializer.dev");
        assert_eq!(hook.side_effects, "None");
        assert_eq!(hook.admission_review_versions, ["v1"]);
        assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(hook.reinvocation_policy.as_deref(), Some("Never"));
        assert_eq!(hook.timeout_seconds, Some(5));
        let svc = hook.client_config.service.as_ref().unwrap();
        assert_eq!(
            (svc.name.as_str(), svc.namespace.as_str()),
            ("sidecar", "initializer-system")
        );
        assert_eq!(
            (svc.path.as_deref(), svc.port),
            (Some(WEBHOOK_PATH), Some(443))
        );
        assert_eq!(
            hook.client_config.ca_bundle.as_ref().unwrap().0,
            TLS.ca.cert_pem.as_bytes()
        );
        let rule = &hook.rules.as_ref().unwrap()[0];
        assert_eq!(
            rule.resources.as_deref(),
            Some(&["deployments".to_string()][..])
        );
        assert_eq!(
            rule.operations.as_deref(),
            Some(&["CREATE".to_string()][..])
        );
        let ns = hook
            .namespace_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .clone()
            .unwrap();
        assert!(
            ns[0]
                .values
                .as_ref()
                .unwrap()
                .contains(&"initializer-system".to_string())
        );
        let obj = hook.object_selector.as_ref().unwrap();
        assert!(
            obj.match_expressions
                .iter()
                .flatten()
                .all(|r| r.key != EXCLUDE_LABEL)
        );
    }

    #[test]
    fn the_degraded_configuration_fails_open_within_a_second_and_says_so() {
        let d = desired();
        assert!(!is_degraded(&d.webhook));
        let degraded = degraded(&d.webhook);
        assert!(is_degraded(&degraded));
        let hook = &degraded.webhooks.as_ref().unwrap()[0];
        assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
        assert_eq!(hook.timeout_seconds, Some(1));
        let normal = &d.webhook.webhooks.as_ref().unwrap()[0];
        assert_eq!(hook.rules, normal.rules);
        assert_eq!(hook.namespace_selector, normal.namespace_selector);
        assert_eq!(degraded.metadata.name, d.webhook.metadata.name);
    }

    #[test]
    fn the_fallback_matches_what_the_webhook_matches_and_denies() {
        assert!(desired().fallback.is_none());
        let example: initializer_crds::Initializer =
            serde_yaml::from_str(include_str!("../../examples/secret-guard-initializer.yaml"))
                .unwrap();
        let mut spec = example.spec;
        spec.annotation = Some(AnnotationGate {
            name: "guard.example/check".into(),
            required: true,
        });
        let v = validate(&spec, "initializer-system", "secret-guard").unwrap();
        let d = build(&v, &TLS, &settings(), None);
        let fallback = d.fallback.unwrap();
        let policy = fallback.policy.spec.unwrap();
        assert_eq!(
            fallback.policy.metadata.name.as_deref(),
            Some("initializer-secret-guard-fallback")
        );
        assert!(fallback.policy.metadata.namespace.is_none());
        assert_eq!(policy.failure_policy.as_deref(), Some("Fail"));
        let hook = &d.webhook.webhooks.as_ref().unwrap()[0];
        let constraints = policy.match_constraints.unwrap();
        assert_eq!(constraints.namespace_selector, hook.namespace_selector);
        assert_eq!(constraints.object_selector, hook.object_selector);
        let rule = &constraints.resource_rules.unwrap()[0];
        assert_eq!(
            rule.resources.as_deref(),
            Some(&["secrets".to_string()][..])
        );
        assert_eq!(
            rule.operations.as_deref(),
            Some(&["CREATE".to_string(), "UPDATE".to_string()][..])
        );
        let gate = &policy.match_conditions.unwrap()[0];
        assert!(
            gate.expression
                .contains("'guard.example/check' in object.metadata.annotations")
        );
        let validation = &policy.validations.unwrap()[0];
        assert!(validation.expression.contains(">= 27"));
        assert_eq!(validation.reason.as_deref(), Some("Invalid"));
        let binding = fallback.binding.spec.unwrap();
        assert_eq!(
            binding.policy_name.as_deref(),
            Some("initializer-secret-guard-fallback")
        );
        assert_eq!(
            binding.validation_actions.as_deref(),
            Some(&["Deny".to_string()][..])
        );
    }

    #[test]
    fn the_workload_generation_changes_only_with_the_pod_template() {
        let mut first = desired().deployment;
        let hash = template_hash(&first);
        assert_eq!(workload_generation(None, &hash, 1), 1);
        stamp_generation(&mut first, &hash, 1);
        // A later generation with the same template keeps the pods' generation.
        assert_eq!(workload_generation(Some(&first), &hash, 4), 1);
        let mut spec = sidecar().spec;
        spec.args.push("--verbose".into());
        let v = validate(&spec, "initializer-system", "sidecar").unwrap();
        let changed = build(&v, &TLS, &settings(), None).deployment;
        let new_hash = template_hash(&changed);
        assert_ne!(new_hash, hash);
        assert_eq!(workload_generation(Some(&first), &new_hash, 5), 5);
        let env = pod_spec(&first).containers[0].env.clone().unwrap();
        let generation = env.iter().find(|e| e.name == GENERATION_ENV).unwrap();
        assert_eq!(generation.value.as_deref(), Some("1"));
    }

    #[test]
    fn the_serving_certificate_names_the_service() {
        let d = desired();
        let info = tls::inspect(&TLS.cert_pem).unwrap();
        let svc = d.service.metadata.name.unwrap();
        let ns = d.service.metadata.namespace.unwrap();
        assert!(info.dns_names.contains(&format!("{svc}.{ns}.svc")));
    }
}
