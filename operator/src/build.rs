//! Pure construction of every object an Initializer needs, from a [`Validated`] spec, the TLS
//! material and the operator's settings. Infallible and deterministic: the same inputs always
//! give the same objects, so server-side apply is a no-op when nothing changed.

use std::collections::BTreeMap;

use initializer_crds::constants::{
    ANNOTATION_ENV, CONFIG_DIR, CONFIG_DIR_ENV, CONFIG_FILE, EXCLUDE_LABEL, EXCLUDE_LABEL_VALUE,
    HEALTHZ_PATH, INITIALIZER_LABEL, INITIALIZER_NAME_ENV, INITIALIZER_PORT, INITIALIZER_PORT_NAME,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, POD_IP_ENV, READYZ_PATH, REQUIRE_ANNOTATION_ENV,
    SERVICE_PORT, TIMEOUT_SECONDS_ENV, TLS_DIR, TLS_DIR_ENV, WEBHOOK_PATH,
};
use initializer_crds::{FailurePolicy, ReinvocationPolicy};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    WebhookClientConfig,
};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar,
    EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    Secret, SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec,
    TopologySpreadConstraint, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::selector;
use crate::tls::TlsMaterial;
use crate::validate::{ConfigPlan, Validated};

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
    /// The CA (never mounted).
    pub ca_secret: Secret,
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
        tls_secret: tls_secret(v, tls, owner),
        config_map: config_map(v, owner),
        deployment: deployment(v, settings, owner),
        service: service(v, owner),
        pdb: pdb(v, owner),
        webhook: webhook(v, &tls.ca.cert_pem),
    }
}

/// The CA Secret: `ca.crt` and `ca.key`.
pub fn ca_secret(v: &Validated, tls: &TlsMaterial, owner: Option<&OwnerReference>) -> Secret {
    Secret {
        metadata: meta(v, &v.names.ca_secret, owner),
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

/// The MutatingWebhookConfiguration, registered only while the initializer is healthy.
pub fn webhook(v: &Validated, ca_pem: &str) -> MutatingWebhookConfiguration {
    let spec = &v.spec;
    let rules = spec
        .rules
        .iter()
        .map(|r| RuleWithOperations {
            api_groups: Some(r.api_groups.clone()),
            api_versions: Some(r.api_versions.clone()),
            resources: Some(r.resources.clone()),
            operations: Some(
                r.operations
                    .iter()
                    .map(|o| o.as_str().to_string())
                    .collect(),
            ),
            scope: Some(r.scope.map_or("*", |s| s.as_str()).to_string()),
        })
        .collect();
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
        let obj = hook
            .object_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .clone()
            .unwrap();
        assert_eq!(obj[0].key, EXCLUDE_LABEL);
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
