//! The installer's decisions, pure: [`plan`] turns a bundle into the objects to apply (the
//! CRDs, namespace, service accounts, RBAC, Deployments, budgets, Services and monitoring objects
//! that the IO shell applies in that order), [`steps`] says what an uninstall does and in which
//! order, and the label and binding rules say which objects belong to an install.

use std::collections::BTreeMap;

use initializer_crds::constants;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{EnvVar, Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{MANAGED_BY_VALUE, UninstallArgs};
use crate::bundle::csv::{ClusterServiceVersion, StrategyDeploymentPermissions};
use crate::bundle::{self, Bundle, BundleViolation};
use crate::error::Error;
use crate::manifest;

/// One step of an uninstall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UninstallStep {
    /// Delete the operator-managed webhook configurations and fallback policies, so nothing
    /// that can refuse a create outlives the operator's supervision.
    Deregister,
    /// Delete every Initializer and wait while the still-running operator runs the finalizers.
    DeleteInitializers,
    /// Delete the operator's Deployments and wait until their pods have stopped.
    RemoveOperator,
    /// Delete the installer's RBAC and service accounts, and the bounds the operator put on its
    /// account.
    RemovePermissions,
    /// Delete the installer's namespace (never one it did not create).
    RemoveNamespace,
    /// Delete the installer's CustomResourceDefinitions, and the operator's guard policy on
    /// Initializers with them (kept as long as Initializers can be created).
    RemoveCrds,
}

/// What an uninstall does, in order. It deregisters before anything else and again once the
/// operator has stopped (a running operator may register again in between), and it deletes
/// Initializers, the namespace that holds their workloads, and the CRDs only when asked to.
pub fn steps(args: &UninstallArgs) -> Vec<UninstallStep> {
    use UninstallStep::*;
    let mut steps = vec![Deregister];
    if args.delete_initializers {
        steps.push(DeleteInitializers);
    }
    steps.extend([RemoveOperator, Deregister, RemovePermissions]);
    if args.delete_initializers {
        steps.push(RemoveNamespace);
        if !args.keep_crds {
            steps.push(RemoveCrds);
        }
    }
    steps
}

/// True when a ClusterRoleBinding belongs to the install in `namespace`: every subject is a
/// service account of that namespace.
pub fn binds_install(binding: &ClusterRoleBinding, namespace: &str) -> bool {
    let subjects = binding.subjects.as_deref().unwrap_or_default();
    !subjects.is_empty()
        && subjects
            .iter()
            .all(|s| s.kind == "ServiceAccount" && s.namespace.as_deref() == Some(namespace))
}

/// Every object an install applies, in the order it applies them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstallPlan {
    /// The operator's namespace.
    pub namespace: String,
    /// Owned CRDs, from the bundle's manifests.
    pub crds: Vec<CustomResourceDefinition>,
    /// The namespace object (applied only when absent or installed by us).
    pub namespace_object: Namespace,
    /// Service accounts named by the install strategy.
    pub service_accounts: Vec<ServiceAccount>,
    /// One ClusterRole per service account with `clusterPermissions`.
    pub cluster_roles: Vec<ClusterRole>,
    /// Binds each ClusterRole to its service account.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// One Role per service account with `permissions`, in the namespace.
    pub roles: Vec<Role>,
    /// Binds each Role to its service account.
    pub role_bindings: Vec<RoleBinding>,
    /// The install strategy's Deployments, in the namespace.
    pub deployments: Vec<Deployment>,
    /// The bundle's PodDisruptionBudgets, in the namespace.
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
    /// The bundle's own ClusterRoles (`initializer-operator-workloads`), bound by nothing until
    /// an administrator binds one in a namespace labelled for workloads.
    pub bundle_cluster_roles: Vec<ClusterRole>,
    /// The bundle's Services (the operator's metrics Service), in the namespace.
    pub services: Vec<Service>,
    /// The bundle's `PrometheusRule` and `ServiceMonitor` objects, in the namespace: applied
    /// only where the API server serves `monitoring.coreos.com/v1` (see [`monitoring_split`]).
    pub monitoring: Vec<serde_json::Value>,
    /// The guard on Initializers ([`crate::guard`]), applied before the CRDs so that no
    /// Initializer is ever created without it. It carries the operator's label, not the
    /// installer's: the operator keeps it in place, and under OLM it alone applies it.
    pub guard_policy: ValidatingAdmissionPolicy,
    /// The guard's binding.
    pub guard_binding: ValidatingAdmissionPolicyBinding,
}

impl InstallPlan {
    /// Sets `env` on every container of every Deployment, as OLM sets a Subscription's
    /// `spec.config.env`: a variable of the same name is replaced in place, the others are
    /// appended in the order given.
    pub fn set_env(&mut self, env: &[EnvVar]) {
        let containers = self
            .deployments
            .iter_mut()
            .filter_map(|deployment| deployment.spec.template.spec.as_mut())
            .flat_map(|pod| pod.containers.iter_mut());
        for container in containers {
            let present = container.env.get_or_insert_default();
            for var in env {
                match present.iter_mut().find(|p| p.name == var.name) {
                    Some(same_name) => *same_name = var.clone(),
                    None => present.push(var.clone()),
                }
            }
        }
    }
}

/// Reads `--env`'s `NAME=VALUE` (the value may be empty and may hold `=`).
pub fn parse_env(text: &str) -> Result<EnvVar, String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok(manifest::literal_env(name, value)),
        _ => Err(format!("expected NAME=VALUE, got {text:?}")),
    }
}

/// Splits the plan's monitoring objects into those to apply and the kinds to skip, given the
/// kinds the API server serves in `monitoring.coreos.com/v1` (`None` when it does not serve
/// the group version at all: no prometheus-operator there, so nothing would ever read them).
pub fn monitoring_split<'a>(
    objects: &'a [serde_json::Value],
    served: Option<&[String]>,
) -> (Vec<&'a serde_json::Value>, Vec<String>) {
    let mut apply = Vec::new();
    let mut skipped = Vec::new();
    for object in objects {
        let kind = object
            .get("kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        if served.is_some_and(|kinds| kinds.iter().any(|k| k == kind)) {
            apply.push(object);
        } else {
            skipped.push(kind.to_string());
        }
    }
    (apply, skipped)
}

/// Labels on everything the installer creates.
pub fn installer_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(
        constants::MANAGED_BY_LABEL.to_string(),
        MANAGED_BY_VALUE.to_string(),
    )])
}

/// True when the object carries the installer's label.
pub fn installed_by_us(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|labels| labels.get(constants::MANAGED_BY_LABEL))
        .is_some_and(|value| value == MANAGED_BY_VALUE)
}

fn meta(name: &str, namespace: Option<&str>, extra: &BTreeMap<String, String>) -> ObjectMeta {
    let mut labels = extra.clone();
    labels.extend(installer_labels());
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels),
        ..ObjectMeta::default()
    }
}

/// Turns a bundle into the objects to apply in `namespace`. Refuses a bundle that breaks any
/// registry+v1 rule; a CRD that differs from this binary's `crdgen` output is accepted, so an
/// older or newer bundle can still be installed.
pub fn plan(bundle: &Bundle, namespace: &str) -> Result<InstallPlan, Error> {
    let violations: Vec<BundleViolation> = bundle::check(bundle)
        .into_iter()
        .filter(|violation| !matches!(violation, BundleViolation::CrdDrift { .. }))
        .collect();
    if !violations.is_empty() {
        return Err(Error::BundleInvalid(bundle::violation::summary(
            &violations,
        )));
    }
    let mut csv: Option<ClusterServiceVersion> = None;
    let mut crds = Vec::new();
    let mut pod_disruption_budgets = Vec::new();
    let mut bundle_cluster_roles = Vec::new();
    let mut services = Vec::new();
    let mut monitoring = Vec::new();
    for (path, text) in bundle.manifests() {
        let kind = serde_saphyr::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|value| {
                value
                    .get("kind")
                    .and_then(|k| k.as_str())
                    .map(str::to_string)
            })
            .unwrap_or_default();
        match kind.as_str() {
            "ClusterServiceVersion" => csv = Some(read_manifest(path, text)?),
            "CustomResourceDefinition" => crds.push(installer_manifest(path, text, None)?),
            "PodDisruptionBudget" => {
                pod_disruption_budgets.push(installer_manifest(path, text, Some(namespace))?)
            }
            "ClusterRole" => bundle_cluster_roles.push(installer_manifest(path, text, None)?),
            "Service" => services.push(installer_manifest(path, text, Some(namespace))?),
            "PrometheusRule" | "ServiceMonitor" => {
                let mut object: serde_json::Value = read_manifest(path, text)?;
                object["metadata"]["namespace"] = serde_json::json!(namespace);
                for (key, value) in installer_labels() {
                    object["metadata"]["labels"][key] = serde_json::json!(value);
                }
                monitoring.push(object);
            }
            other => {
                return Err(Error::InstallPlan(format!(
                    "failed to install {path}: kind {other} is not installed without OLM"
                )));
            }
        }
    }
    let csv = csv.ok_or_else(|| Error::InstallPlan("failed to find the CSV".to_string()))?;
    let strategy = csv.spec.install.spec;
    let no_labels = BTreeMap::new();

    let mut accounts: Vec<String> = strategy
        .deployments
        .iter()
        .filter_map(|deployment| {
            deployment
                .spec
                .template
                .spec
                .as_ref()
                .and_then(|pod| pod.service_account_name.clone())
        })
        .chain(
            strategy
                .permissions
                .iter()
                .chain(&strategy.cluster_permissions)
                .map(|permission| permission.service_account_name.clone()),
        )
        .collect();
    accounts.sort();
    accounts.dedup();
    let service_accounts = accounts
        .iter()
        .map(|name| ServiceAccount {
            metadata: meta(name, Some(namespace), &no_labels),
            ..ServiceAccount::default()
        })
        .collect();

    let subject = |account: &str| Subject {
        kind: "ServiceAccount".to_string(),
        name: account.to_string(),
        namespace: Some(namespace.to_string()),
        ..Subject::default()
    };
    let role_ref = |kind: &str, name: &str| RoleRef {
        api_group: Some("rbac.authorization.k8s.io".to_string()),
        kind: kind.to_string(),
        name: name.to_string(),
    };
    let mut cluster_roles = Vec::new();
    let mut cluster_role_bindings = Vec::new();
    for (account, rules) in rules_by_account(&strategy.cluster_permissions) {
        cluster_roles.push(ClusterRole {
            metadata: meta(&account, None, &no_labels),
            rules: Some(rules),
            ..ClusterRole::default()
        });
        cluster_role_bindings.push(ClusterRoleBinding {
            metadata: meta(&account, None, &no_labels),
            role_ref: role_ref("ClusterRole", &account),
            subjects: Some(vec![subject(&account)]),
        });
    }
    let mut roles = Vec::new();
    let mut role_bindings = Vec::new();
    for (account, rules) in rules_by_account(&strategy.permissions) {
        roles.push(Role {
            metadata: meta(&account, Some(namespace), &no_labels),
            rules: Some(rules),
        });
        role_bindings.push(RoleBinding {
            metadata: meta(&account, Some(namespace), &no_labels),
            role_ref: role_ref("Role", &account),
            subjects: Some(vec![subject(&account)]),
        });
    }
    let deployments = strategy
        .deployments
        .into_iter()
        .map(|deployment| Deployment {
            metadata: meta(&deployment.name, Some(namespace), &deployment.label),
            spec: deployment.spec,
            status: None,
        })
        .collect();
    Ok(InstallPlan {
        namespace: namespace.to_string(),
        crds,
        namespace_object: Namespace {
            metadata: meta(namespace, None, &no_labels),
            ..Namespace::default()
        },
        service_accounts,
        cluster_roles,
        cluster_role_bindings,
        roles,
        role_bindings,
        deployments,
        pod_disruption_budgets,
        bundle_cluster_roles,
        services,
        monitoring,
        guard_policy: crate::guard::policy(),
        guard_binding: crate::guard::binding(),
    })
}

/// A manifest of the bundle as the installer applies it: labelled as the installer's, and put in
/// `namespace` when one is given (a namespaced kind).
fn installer_manifest<K>(path: &str, text: &str, namespace: Option<&str>) -> Result<K, Error>
where
    K: k8s_openapi::Metadata<Ty = ObjectMeta> + serde::de::DeserializeOwned,
{
    let mut object: K = read_manifest(path, text)?;
    let metadata = object.metadata_mut();
    if let Some(namespace) = namespace {
        metadata.namespace = Some(namespace.to_string());
    }
    metadata
        .labels
        .get_or_insert_default()
        .extend(installer_labels());
    Ok(object)
}

/// The bundle manifest `text` at `path` as `T`; the error is one line naming `path`.
fn read_manifest<T: serde::de::DeserializeOwned>(path: &str, text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, serde_saphyr::options! { with_snippet: false })
        .map_err(|err| Error::InstallPlan(format!("failed to read {path}: {err}")))
}

/// The rules of every permission entry, merged per service account, in name order.
fn rules_by_account(
    permissions: &[StrategyDeploymentPermissions],
) -> BTreeMap<String, Vec<PolicyRule>> {
    let mut merged: BTreeMap<String, Vec<PolicyRule>> = BTreeMap::new();
    for permission in permissions {
        merged
            .entry(permission.service_account_name.clone())
            .or_default()
            .extend(permission.rules.iter().cloned());
    }
    merged
}

#[cfg(test)]
mod tests {
    use kube::ResourceExt;

    use super::*;

    fn generated_plan() -> InstallPlan {
        plan(&bundle::generate().unwrap(), "initializer-system").unwrap()
    }

    fn env_of(plan: &InstallPlan) -> Vec<(String, Option<String>)> {
        let pod = plan.deployments[0].spec.template.spec.as_ref();
        pod.unwrap().containers[0]
            .env
            .iter()
            .flatten()
            .map(|var| (var.name.clone(), var.value.clone()))
            .collect()
    }

    #[test]
    fn env_is_set_on_the_operator_as_a_subscription_sets_it() {
        let mut plan = generated_plan();
        let before = env_of(&plan);
        let existing = before[0].0.clone();
        let env = [
            parse_env("POLICY_CANARY_NAMESPACE=canary").unwrap(),
            parse_env(&format!("{existing}=replaced")).unwrap(),
            parse_env("EMPTY=").unwrap(),
        ];
        plan.set_env(&env);
        let after = env_of(&plan);
        assert_eq!(after.len(), before.len() + 2, "{after:?}");
        assert_eq!(after[0], (existing, Some("replaced".to_string())));
        assert_eq!(after[1..before.len()], before[1..]);
        assert_eq!(
            after[before.len()..],
            [
                (
                    "POLICY_CANARY_NAMESPACE".to_string(),
                    Some("canary".to_string())
                ),
                ("EMPTY".to_string(), Some(String::new())),
            ]
        );
        plan.set_env(&env);
        assert_eq!(env_of(&plan), after, "setting it again changes nothing");
    }

    #[test]
    fn env_without_a_name_or_an_equals_sign_is_refused() {
        assert_eq!(parse_env("A=b=c").unwrap().value.as_deref(), Some("b=c"));
        for bad in ["=value", "NAME", ""] {
            let err = parse_env(bad).unwrap_err();
            assert!(err.contains("expected NAME=VALUE"), "{bad}: {err}");
        }
    }

    #[test]
    fn plan_installs_the_crd_rbac_and_the_operator_deployment_from_the_bundle() {
        let plan = generated_plan();
        assert_eq!(plan.crds.len(), 1);
        assert_eq!(plan.crds[0].name_any(), constants::CRD_NAME);
        assert_eq!(plan.service_accounts.len(), 1);
        assert_eq!(plan.service_accounts[0].name_any(), manifest::OPERATOR_NAME);
        assert_eq!(plan.cluster_roles.len(), 1);
        assert_eq!(plan.roles.len(), 1);
        let mut granted: Vec<PolicyRule> = plan.roles[0].rules.clone().unwrap();
        granted.extend(plan.cluster_roles[0].rules.clone().unwrap());
        let mut expected = crate::rbac::cluster_rules();
        expected.extend(crate::rbac::namespace_rules());
        let key = |rule: &PolicyRule| format!("{rule:?}");
        granted.sort_by_key(key);
        expected.sort_by_key(key);
        assert_eq!(granted, expected);
        assert_eq!(
            plan.roles[0].rules.as_ref().unwrap(),
            &crate::rbac::namespace_rules()
        );
        let bundle_roles: Vec<(String, Vec<PolicyRule>)> = plan
            .bundle_cluster_roles
            .iter()
            .map(|r| (r.name_any(), r.rules.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            bundle_roles,
            [
                (
                    crate::rbac::POLICY_CANARY_CLUSTER_ROLE.to_string(),
                    crate::rbac::policy_canary_rules()
                ),
                (
                    crate::rbac::WORKLOADS_CLUSTER_ROLE.to_string(),
                    crate::rbac::workload_rules()
                )
            ]
        );
        assert_eq!(plan.deployments.len(), 1);
        assert_eq!(plan.deployments[0].spec, manifest::deployment_spec());
        assert_eq!(plan.pod_disruption_budgets.len(), 1);
        assert_eq!(
            plan.pod_disruption_budgets[0].spec,
            manifest::pod_disruption_budget().spec
        );
    }

    #[test]
    fn plan_carries_the_metrics_service_and_the_monitoring_objects_in_the_namespace() {
        let plan = generated_plan();
        assert_eq!(plan.services.len(), 1);
        let service = &plan.services[0];
        assert_eq!(service.name_any(), crate::monitoring::METRICS_SERVICE_NAME);
        assert_eq!(service.namespace().as_deref(), Some("initializer-system"));
        assert!(installed_by_us(&service.metadata));
        let mut kinds: Vec<&str> = plan
            .monitoring
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        kinds.sort();
        assert_eq!(kinds, ["PrometheusRule", "ServiceMonitor"]);
        for object in &plan.monitoring {
            assert_eq!(object["metadata"]["namespace"], "initializer-system");
            assert_eq!(
                object["metadata"]["labels"][constants::MANAGED_BY_LABEL],
                MANAGED_BY_VALUE
            );
            // The operator's own labels stay: the ServiceMonitor's selector relies on them.
            assert_eq!(
                object["metadata"]["labels"][manifest::NAME_LABEL],
                manifest::OPERATOR_NAME
            );
        }
    }

    #[test]
    fn monitoring_objects_are_skipped_where_prometheus_operator_is_not_installed() {
        let plan = generated_plan();
        let (apply, skipped) = monitoring_split(&plan.monitoring, None);
        assert!(apply.is_empty());
        skipped
            .iter()
            .for_each(|k| assert!(["PrometheusRule", "ServiceMonitor"].contains(&k.as_str())));
        assert_eq!(skipped.len(), 2);
        let only_monitors = ["ServiceMonitor".to_string(), "PodMonitor".to_string()];
        let (apply, skipped) = monitoring_split(&plan.monitoring, Some(&only_monitors));
        assert_eq!(apply.len(), 1);
        assert_eq!(apply[0]["kind"], "ServiceMonitor");
        assert_eq!(skipped, ["PrometheusRule"]);
        let both = ["PrometheusRule".to_string(), "ServiceMonitor".to_string()];
        let (apply, skipped) = monitoring_split(&plan.monitoring, Some(&both));
        assert_eq!(apply.len(), 2);
        assert!(skipped.is_empty());
    }

    #[test]
    fn every_planned_object_carries_the_installer_label() {
        let plan = generated_plan();
        let metas = plan
            .crds
            .iter()
            .map(|o| &o.metadata)
            .chain(std::iter::once(&plan.namespace_object.metadata))
            .chain(plan.service_accounts.iter().map(|o| &o.metadata))
            .chain(plan.cluster_roles.iter().map(|o| &o.metadata))
            .chain(plan.bundle_cluster_roles.iter().map(|o| &o.metadata))
            .chain(plan.cluster_role_bindings.iter().map(|o| &o.metadata))
            .chain(plan.roles.iter().map(|o| &o.metadata))
            .chain(plan.role_bindings.iter().map(|o| &o.metadata))
            .chain(plan.deployments.iter().map(|o| &o.metadata))
            .chain(plan.pod_disruption_budgets.iter().map(|o| &o.metadata))
            .chain(plan.services.iter().map(|o| &o.metadata));
        for meta in metas {
            assert!(installed_by_us(meta), "{:?} is not labelled", meta.name);
        }
    }

    #[test]
    fn namespaced_objects_go_into_the_requested_namespace_and_bindings_name_it() {
        let plan = plan(&bundle::generate().unwrap(), "elsewhere").unwrap();
        assert_eq!(plan.namespace_object.name_any(), "elsewhere");
        for account in &plan.service_accounts {
            assert_eq!(account.namespace().as_deref(), Some("elsewhere"));
        }
        for deployment in &plan.deployments {
            assert_eq!(deployment.namespace().as_deref(), Some("elsewhere"));
        }
        for pdb in &plan.pod_disruption_budgets {
            assert_eq!(pdb.namespace().as_deref(), Some("elsewhere"));
        }
        for binding in &plan.cluster_role_bindings {
            let subject = &binding.subjects.as_ref().unwrap()[0];
            assert_eq!(subject.namespace.as_deref(), Some("elsewhere"));
            assert_eq!(binding.role_ref.name, binding.name_any());
        }
    }

    #[test]
    fn deployment_labels_come_from_the_csv_and_pod_labels_stay_untouched() {
        let plan = generated_plan();
        let deployment = &plan.deployments[0];
        let labels = deployment.labels();
        for (key, value) in manifest::selector_labels() {
            assert_eq!(labels.get(&key), Some(&value));
        }
        let pod_labels = deployment
            .spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert!(!pod_labels.contains_key(constants::MANAGED_BY_LABEL));
    }

    #[test]
    fn plan_refuses_an_invalid_bundle() {
        let mut bundle = bundle::generate().unwrap();
        bundle.files.remove(bundle::ANNOTATIONS_FILE);
        let err = plan(&bundle, "ns").unwrap_err();
        assert!(matches!(err, Error::BundleInvalid(ref text) if text.contains("annotations")));
    }

    #[test]
    fn plan_accepts_a_crd_that_differs_from_this_binarys_crdgen() {
        let mut bundle = bundle::generate().unwrap();
        let crd = bundle.files.get_mut(bundle::CRD_FILE).unwrap();
        crd.push_str("# from another version\n");
        assert!(plan(&bundle, "ns").is_ok());
    }

    #[test]
    fn uninstall_keeps_initializers_their_namespace_and_the_crds_by_default() {
        use UninstallStep::*;
        assert_eq!(
            steps(&UninstallArgs::new("ns")),
            vec![Deregister, RemoveOperator, Deregister, RemovePermissions]
        );
    }

    #[test]
    fn initializers_namespace_and_crds_go_only_when_asked() {
        use UninstallStep::*;
        let mut args = UninstallArgs::new("ns");
        args.delete_initializers = true;
        assert_eq!(
            steps(&args),
            vec![
                Deregister,
                DeleteInitializers,
                RemoveOperator,
                Deregister,
                RemovePermissions,
                RemoveNamespace,
                RemoveCrds
            ]
        );
        args.keep_crds = true;
        assert!(!steps(&args).contains(&RemoveCrds));
        args.delete_initializers = false;
        assert!(!steps(&args).contains(&DeleteInitializers));
        assert!(!steps(&args).contains(&RemoveNamespace));
    }

    #[test]
    fn every_uninstall_deregisters_before_it_touches_the_operator_or_an_initializer() {
        for delete_initializers in [false, true] {
            let mut args = UninstallArgs::new("ns");
            args.delete_initializers = delete_initializers;
            let steps = steps(&args);
            assert_eq!(steps[0], UninstallStep::Deregister);
            // And again after the operator has stopped, as the last word on registrations.
            let stopped = steps
                .iter()
                .position(|s| *s == UninstallStep::RemoveOperator)
                .unwrap();
            assert_eq!(steps[stopped + 1], UninstallStep::Deregister);
        }
    }

    #[test]
    fn a_cluster_role_binding_belongs_to_the_install_whose_namespace_holds_every_subject() {
        let binding = |subjects: serde_json::Value| -> ClusterRoleBinding {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "initializer-operator"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "initializer-operator"},
                "subjects": subjects,
            }))
            .unwrap()
        };
        let sa = |ns: &str| serde_json::json!({"kind": "ServiceAccount", "name": "initializer-operator", "namespace": ns});
        assert!(binds_install(&binding(serde_json::json!([sa("a")])), "a"));
        assert!(!binds_install(&binding(serde_json::json!([sa("b")])), "a"));
        assert!(!binds_install(
            &binding(serde_json::json!([sa("a"), sa("b")])),
            "a"
        ));
        assert!(!binds_install(&binding(serde_json::json!([])), "a"));
        let group = serde_json::json!([{"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}]);
        assert!(!binds_install(&binding(group), "a"));
    }
}
