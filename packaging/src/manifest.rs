//! The operator's own workload: its Namespace, ServiceAccount, Deployment and
//! PodDisruptionBudget, and the ClusterRole an administrator binds in each namespace labelled
//! for initializers' workloads.
//!
//! These definitions are the single source of how the operator runs. The bundle generator puts
//! the Deployment into the ClusterServiceVersion's install strategy; `install --bundle` reads it
//! back from there, so OLM, kind and the sandbox all run exactly this.

use std::collections::BTreeMap;

use initializer_crds::{constants, images, yaml};
use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    Namespace, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext, ServiceAccount,
    WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Name of the operator's Deployment, ServiceAccount and RBAC objects.
pub const OPERATOR_NAME: &str = images::OPERATOR;
/// What the operator does, in one line: the bundle's and the chart's description (the same
/// words as the `initializer-operator` package's own description).
pub const OPERATOR_DESCRIPTION: &str = "Deploys initializers and registers them with the API server only while they are ready and answering.";
/// Name of the guard on Initializers (a ValidatingAdmissionPolicy and its binding) the operator
/// applies at startup and `uninstall` removes.
pub const GUARD_NAME: &str = "initializer-operator-guard";
/// Namespace the operator is installed into unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "initializer-system";
/// Port of the operator's health and metrics listener (plain HTTP).
pub const HTTP_PORT: i32 = 8080;
/// Name of [`HTTP_PORT`] on the operator's container.
pub const HTTP_PORT_NAME: &str = "http";
/// Operator replicas: two, so a rollout or a lost node never stops reconciliation.
pub const REPLICAS: i32 = 2;
/// Env var holding the operator's namespace (downward API `metadata.namespace`).
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";
/// Env var holding the operator pod's name (downward API `metadata.name`), its leader identity.
pub const POD_NAME_ENV: &str = "POD_NAME";
/// Env var naming the operator's service account (downward API `spec.serviceAccountName`).
pub const SERVICE_ACCOUNT_ENV: &str = "SERVICE_ACCOUNT_NAME";
/// Env var holding the operator's health and metrics listen address.
pub const METRICS_ADDR_ENV: &str = "METRICS_ADDR";
/// The standard `app.kubernetes.io/name` label.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// The standard `app.kubernetes.io/component` label.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// The uid of distroless' `nonroot` user, which every image runs as.
pub const NONROOT_UID: i64 = 65532;

/// Labels that select the operator's pods. They never change between versions, because a
/// Deployment's selector is immutable.
pub fn selector_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), OPERATOR_NAME.to_string()),
        (COMPONENT_LABEL.to_string(), "operator".to_string()),
    ])
}

/// Labels on the operator's pods: the selector labels, plus the exclusion label so that no
/// initializer ever intercepts the operator's own pods.
pub fn pod_labels() -> BTreeMap<String, String> {
    let mut labels = selector_labels();
    labels.insert(
        constants::EXCLUDE_LABEL.to_string(),
        constants::EXCLUDE_LABEL_VALUE.to_string(),
    );
    labels
}

/// The operator's namespace.
pub fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The operator's ServiceAccount in `namespace`.
pub fn service_account(namespace: &str) -> ServiceAccount {
    ServiceAccount {
        metadata: ObjectMeta {
            name: Some(OPERATOR_NAME.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    }
}

/// The arguments the operator container runs with.
pub fn operator_args() -> Vec<String> {
    vec![
        "run".to_string(),
        "--preset-image".to_string(),
        images::image(images::PRESET_INITIALIZER),
    ]
}

/// The operator's container: the `run` command, health and metrics on [`HTTP_PORT`], small
/// requests, a read-only root filesystem and no privileges at all.
pub fn operator_container() -> Container {
    Container {
        name: OPERATOR_NAME.to_string(),
        image: Some(images::image(images::OPERATOR)),
        image_pull_policy: Some("IfNotPresent".to_string()),
        args: Some(operator_args()),
        env: Some(vec![
            downward_env(POD_NAMESPACE_ENV, "metadata.namespace"),
            downward_env(POD_NAME_ENV, "metadata.name"),
            downward_env(constants::POD_IP_ENV, "status.podIP"),
            downward_env(SERVICE_ACCOUNT_ENV, "spec.serviceAccountName"),
            // Each replica listens on its own pod IP: on the sandbox all pods share one host.
            literal_env(
                METRICS_ADDR_ENV,
                format!("$({}):{HTTP_PORT}", constants::POD_IP_ENV),
            ),
            literal_env("RUST_LOG", "info"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some(HTTP_PORT_NAME.to_string()),
            container_port: HTTP_PORT,
            protocol: Some("TCP".to_string()),
            ..ContainerPort::default()
        }]),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(5),
            period_seconds: Some(10),
            timeout_seconds: Some(2),
            failure_threshold: Some(3),
            ..http_probe(constants::HEALTHZ_PATH)
        }),
        readiness_probe: Some(Probe {
            period_seconds: Some(5),
            timeout_seconds: Some(2),
            failure_threshold: Some(2),
            ..http_probe(constants::READYZ_PATH)
        }),
        resources: Some(ResourceRequirements {
            requests: Some(quantities([("cpu", "50m"), ("memory", "64Mi")])),
            limits: Some(quantities([("cpu", "500m"), ("memory", "256Mi")])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(NONROOT_UID),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

/// An env var the kubelet fills from the pod's own `field_path` (the downward API).
fn downward_env(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_string(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// An env var with a literal value.
pub(crate) fn literal_env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

/// A plain-HTTP GET of `path` on the [`HTTP_PORT_NAME`] port, with the API server's defaults
/// for everything a caller does not set.
fn http_probe(path: &str) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String(HTTP_PORT_NAME.to_string()),
            scheme: Some("HTTP".to_string()),
            ..HTTPGetAction::default()
        }),
        ..Probe::default()
    }
}

/// Resource quantities by resource name.
fn quantities<const N: usize>(amounts: [(&str, &str); N]) -> BTreeMap<String, Quantity> {
    amounts
        .into_iter()
        .map(|(resource, amount)| (resource.to_string(), Quantity(amount.to_string())))
        .collect()
}

/// A selector of exactly [`selector_labels`].
fn operator_selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some(selector_labels()),
        ..LabelSelector::default()
    }
}

/// The operator's pod: non-root with the runtime's default seccomp profile, spread across nodes
/// when it can be.
pub fn operator_pod_spec() -> PodSpec {
    PodSpec {
        containers: vec![operator_container()],
        service_account_name: Some(OPERATOR_NAME.to_string()),
        termination_grace_period_seconds: Some(10),
        affinity: Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    WeightedPodAffinityTerm {
                        weight: 100,
                        pod_affinity_term: PodAffinityTerm {
                            label_selector: Some(operator_selector()),
                            topology_key: "kubernetes.io/hostname".to_string(),
                            ..PodAffinityTerm::default()
                        },
                    },
                ]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        }),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(NONROOT_UID),
            run_as_group: Some(NONROOT_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_string(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        ..PodSpec::default()
    }
}

/// The operator's Deployment spec, as it goes into the ClusterServiceVersion.
pub fn deployment_spec() -> DeploymentSpec {
    DeploymentSpec {
        replicas: Some(REPLICAS),
        revision_history_limit: Some(3),
        selector: operator_selector(),
        strategy: Some(DeploymentStrategy {
            type_: Some("RollingUpdate".to_string()),
            rolling_update: Some(RollingUpdateDeployment {
                max_unavailable: Some(IntOrString::Int(1)),
                max_surge: Some(IntOrString::Int(1)),
            }),
        }),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(pod_labels()),
                ..ObjectMeta::default()
            }),
            spec: Some(operator_pod_spec()),
        },
        ..DeploymentSpec::default()
    }
}

/// The ClusterRole `initializer-operator-workloads`, a manifest of the bundle: the operator's
/// rights in a namespace where initializers' workloads run ([`crate::rbac::workload_rules`]).
/// It grants nothing until an administrator binds it in a namespace labelled
/// `initializer.dev/workloads: "true"` with a RoleBinding to the operator's ServiceAccount.
pub fn workloads_cluster_role() -> ClusterRole {
    labelled_cluster_role(
        crate::rbac::WORKLOADS_CLUSTER_ROLE,
        crate::rbac::workload_rules(),
    )
}

/// The ClusterRole `initializer-operator-policy-canary`, a manifest of the bundle: the
/// dry-run creates with which a preset's policy is proven against its webhook
/// ([`crate::rbac::policy_canary_rules`]). It grants nothing until an administrator binds it
/// with a RoleBinding to the operator's ServiceAccount in the namespace named by
/// `--policy-canary-namespace`.
pub fn policy_canary_cluster_role() -> ClusterRole {
    labelled_cluster_role(
        crate::rbac::POLICY_CANARY_CLUSTER_ROLE,
        crate::rbac::policy_canary_rules(),
    )
}

/// The ClusterRoles `initializer-operator-legacy-initializers` and
/// `initializer-operator-legacy-canary`: the rights of `backend: InitializerConfiguration`
/// ([`crate::rbac::legacy_rules`], [`crate::rbac::legacy_canary_rules`]). They reach every
/// resource (`*/*`), so no bundle or chart ships them: `initializer-operator legacy-rbac` prints
/// them ([`legacy_rbac_yaml`]) for the administrator of a 1.7–1.13 cluster to apply and bind,
/// the first with a ClusterRoleBinding, the second with a RoleBinding in the operator's namespace.
pub fn legacy_cluster_roles() -> [ClusterRole; 2] {
    [
        labelled_cluster_role(
            crate::rbac::LEGACY_CLUSTER_ROLE,
            crate::rbac::legacy_rules(),
        ),
        labelled_cluster_role(
            crate::rbac::LEGACY_CANARY_CLUSTER_ROLE,
            crate::rbac::legacy_canary_rules(),
        ),
    ]
}

/// A ClusterRole `name` granting `rules`, labelled as the operator's (no aggregation).
fn labelled_cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(selector_labels()),
            ..ObjectMeta::default()
        },
        rules: Some(rules),
        aggregation_rule: None,
    }
}

/// [`legacy_cluster_roles`] as one YAML stream, for `kubectl apply -f -`.
pub fn legacy_rbac_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let documents = legacy_cluster_roles()
        .iter()
        .map(yaml::to_string)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(documents.join("---\n"))
}

/// The operator's PodDisruptionBudget, a manifest of the bundle (OLM creates it in the
/// install namespace): `maxUnavailable: 1`, so a drain keeps one of the two replicas running
/// while it evicts the other, and never blocks on a single replica (`minAvailable: 1` would).
pub fn pod_disruption_budget() -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(OPERATOR_NAME.to_string()),
            labels: Some(selector_labels()),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(operator_selector()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_rbac_prints_both_cluster_roles_ready_to_apply() {
        let text = legacy_rbac_yaml().unwrap();
        let roles: Vec<ClusterRole> = text
            .split("---\n")
            .map(|doc| {
                let value: serde_json::Value = serde_saphyr::from_str(doc).unwrap();
                assert_eq!(value["apiVersion"], "rbac.authorization.k8s.io/v1");
                assert_eq!(value["kind"], "ClusterRole");
                serde_json::from_value(value).unwrap()
            })
            .collect();
        assert_eq!(roles, legacy_cluster_roles());
    }

    #[test]
    fn the_description_is_the_operator_packages_own() {
        let manifest = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/Cargo.toml"),
        )
        .unwrap();
        assert!(
            manifest.contains(&format!("description = \"{OPERATOR_DESCRIPTION}\"")),
            "operator/Cargo.toml's description differs from OPERATOR_DESCRIPTION"
        );
    }

    #[test]
    fn the_disruption_budget_selects_the_operator_and_never_blocks_a_drain() {
        let spec = pod_disruption_budget().spec.unwrap();
        assert_eq!(
            spec.selector.as_ref().unwrap().match_labels,
            deployment_spec().selector.match_labels
        );
        for replicas in 1..=REPLICAS {
            assert!(
                crate::bundle::validate::disruptions_allowed(&spec, replicas) >= 1,
                "{replicas} replica(s)"
            );
        }
    }

    #[test]
    fn operator_pods_are_selected_by_the_deployment_and_excluded_from_interception() {
        let spec = deployment_spec();
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        for (key, value) in spec.selector.match_labels.unwrap() {
            assert_eq!(pod_labels.get(&key), Some(&value), "selector label {key}");
        }
        assert_eq!(
            pod_labels.get(constants::EXCLUDE_LABEL).map(String::as_str),
            Some(constants::EXCLUDE_LABEL_VALUE)
        );
    }

    #[test]
    fn operator_container_runs_unprivileged_with_requests_and_probes() {
        let container = operator_container();
        let security = container.security_context.unwrap();
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(security.allow_privilege_escalation, Some(false));
        let requests = container.resources.unwrap().requests.unwrap();
        assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
        let liveness = container.liveness_probe.unwrap().http_get.unwrap();
        assert_eq!(liveness.path.as_deref(), Some(constants::HEALTHZ_PATH));
        let readiness = container.readiness_probe.unwrap().http_get.unwrap();
        assert_eq!(readiness.path.as_deref(), Some(constants::READYZ_PATH));
    }

    #[test]
    fn operator_reads_its_namespace_and_name_from_the_downward_api() {
        let env = operator_container().env.unwrap();
        for (name, path) in [
            (POD_NAMESPACE_ENV, "metadata.namespace"),
            (POD_NAME_ENV, "metadata.name"),
        ] {
            let var = env.iter().find(|var| var.name == name).unwrap();
            let field = var.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
            assert_eq!(field.field_path, path);
        }
    }

    #[test]
    fn operator_listens_on_its_own_pod_ip_defined_before_it_is_referenced() {
        let env = operator_container().env.unwrap();
        let position = |name: &str| env.iter().position(|var| var.name == name).unwrap();
        let addr = &env[position(METRICS_ADDR_ENV)];
        assert_eq!(addr.value.as_deref(), Some("$(POD_IP):8080"));
        assert!(position(constants::POD_IP_ENV) < position(METRICS_ADDR_ENV));
    }

    #[test]
    fn operator_runs_two_replicas_under_its_service_account() {
        let spec = deployment_spec();
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(
            spec.template.spec.unwrap().service_account_name.as_deref(),
            Some(OPERATOR_NAME)
        );
        assert_eq!(
            service_account("ns").metadata.namespace.as_deref(),
            Some("ns")
        );
    }
}
