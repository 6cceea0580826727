//! `initializer-operator install --bundle DIR` and `uninstall`: the bundle installed without OLM
//! (kind, the sandbox, any cluster), from exactly the files OLM would read.
//!
//! [`plan`] turns a bundle into the objects to apply and [`steps`] says what an uninstall does
//! and in which order; both are pure; [`install`] and [`uninstall`] are the IO shell.
//! Everything the installer creates carries
//! `app.kubernetes.io/managed-by: initializer-operator-installer`, and it never overwrites or
//! deletes an object without that label, nor one of another install's namespace.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::PathBuf;
use std::time::Duration;

use initializer_crds::{Initializer, constants};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::bundle::csv::{ClusterServiceVersion, StrategyDeploymentPermissions};
use crate::bundle::{self, Bundle, BundleViolation};
use crate::error::Error;
use crate::manifest;
use crate::readiness;

/// Field manager of every server-side apply the installer makes.
pub const FIELD_MANAGER: &str = "initializer-operator-installer";
/// Value of `app.kubernetes.io/managed-by` on everything the installer creates.
pub const MANAGED_BY_VALUE: &str = "initializer-operator-installer";
/// How often the installer looks again while it waits.
const POLL: Duration = Duration::from_millis(500);

/// Flags of `initializer-operator install`.
#[derive(Clone, Debug, clap::Args)]
pub struct InstallArgs {
    /// The registry+v1 bundle directory to install.
    #[arg(long, default_value = bundle::BUNDLE_DIR)]
    pub bundle: PathBuf,
    /// Namespace the operator runs in (created when missing).
    #[arg(long, default_value = manifest::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// How long to wait for the CRDs and the operator to become available, in seconds.
    #[arg(long, default_value_t = 180)]
    pub timeout: u64,
}

/// Flags of `initializer-operator uninstall`.
#[derive(Clone, Debug, clap::Args)]
pub struct UninstallArgs {
    /// Namespace the operator was installed in: only that install's objects are removed.
    #[arg(long, default_value = manifest::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Also delete every Initializer (the operator runs their finalizers first), then the
    /// installer's namespace and the CRDs. Without it the Initializers, their workloads, the
    /// namespace and the CRDs stay; only the operator goes, after its webhook configurations.
    #[arg(long)]
    pub delete_initializers: bool,
    /// With `--delete-initializers`, keep the CustomResourceDefinitions.
    #[arg(long)]
    pub keep_crds: bool,
    /// How long to wait for Initializers to be cleaned up and the operator to stop, in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

impl UninstallArgs {
    /// Uninstall the operator in `namespace`, keeping every Initializer and the CRDs.
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            delete_initializers: false,
            keep_crds: false,
            timeout: 120,
        }
    }
}

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
    /// Delete the installer's RBAC and service accounts.
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
        let kind = serde_yaml::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|value| {
                value
                    .get("kind")
                    .and_then(|k| k.as_str())
                    .map(str::to_string)
            })
            .unwrap_or_default();
        let parse_error =
            |err: serde_yaml::Error| Error::InstallPlan(format!("failed to read {path}: {err}"));
        match kind.as_str() {
            "ClusterServiceVersion" => csv = Some(serde_yaml::from_str(text).map_err(parse_error)?),
            "CustomResourceDefinition" => {
                let mut crd: CustomResourceDefinition =
                    serde_yaml::from_str(text).map_err(parse_error)?;
                crd.metadata
                    .labels
                    .get_or_insert_default()
                    .extend(installer_labels());
                crds.push(crd);
            }
            "PodDisruptionBudget" => {
                let mut pdb: PodDisruptionBudget =
                    serde_yaml::from_str(text).map_err(parse_error)?;
                pdb.metadata.namespace = Some(namespace.to_string());
                pdb.metadata
                    .labels
                    .get_or_insert_default()
                    .extend(installer_labels());
                pod_disruption_budgets.push(pdb);
            }
            "ClusterRole" => {
                let mut role: ClusterRole = serde_yaml::from_str(text).map_err(parse_error)?;
                role.metadata
                    .labels
                    .get_or_insert_default()
                    .extend(installer_labels());
                bundle_cluster_roles.push(role);
            }
            "Service" => {
                let mut service: Service = serde_yaml::from_str(text).map_err(parse_error)?;
                service.metadata.namespace = Some(namespace.to_string());
                service
                    .metadata
                    .labels
                    .get_or_insert_default()
                    .extend(installer_labels());
                services.push(service);
            }
            "PrometheusRule" | "ServiceMonitor" => {
                let mut object: serde_json::Value =
                    serde_yaml::from_str(text).map_err(parse_error)?;
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
        api_group: "rbac.authorization.k8s.io".to_string(),
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
            spec: Some(deployment.spec),
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
    })
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

/// Reads the bundle in `args.bundle` and installs it; returns once the operator is available.
pub async fn run_install(client: Client, args: &InstallArgs) -> Result<(), Error> {
    let bundle = Bundle::read(&args.bundle)?;
    let plan = plan(&bundle, &args.namespace)?;
    install(client, &plan, Duration::from_secs(args.timeout)).await
}

/// Applies `plan`: CRDs (then waits until they are established), namespace, service accounts,
/// RBAC, Deployments (then waits until they are available).
pub async fn install(client: Client, plan: &InstallPlan, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    apply_plan(&client, plan, deadline).await?;
    wait_available(&client, plan, deadline).await
}

/// Applies every object of `plan`, waiting for the CRDs to be established before anything else.
pub async fn apply_plan(
    client: &Client,
    plan: &InstallPlan,
    deadline: Instant,
) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in &plan.crds {
        apply(&crds, crd, "CustomResourceDefinition").await?;
    }
    for crd in &plan.crds {
        let name = crd.name_any();
        await_until(
            &crds,
            &name,
            conditions::is_crd_established(),
            deadline,
            &format!("CustomResourceDefinition {name} to be established"),
        )
        .await?;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces
        .get_opt(&plan.namespace)
        .await
        .map_err(|source| Error::Get {
            kind: "Namespace",
            name: plan.namespace.clone(),
            source: Box::new(source),
        })? {
        // A namespace made by someone else is used as it is, and never deleted by uninstall.
        Some(existing) if !installed_by_us(&existing.metadata) => {}
        _ => apply(&namespaces, &plan.namespace_object, "Namespace").await?,
    }
    let service_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &plan.namespace);
    for account in &plan.service_accounts {
        apply(&service_accounts, account, "ServiceAccount").await?;
    }
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    for role in plan.cluster_roles.iter().chain(&plan.bundle_cluster_roles) {
        apply(&cluster_roles, role, "ClusterRole").await?;
    }
    let cluster_role_bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    for binding in &plan.cluster_role_bindings {
        apply(&cluster_role_bindings, binding, "ClusterRoleBinding").await?;
    }
    let roles: Api<Role> = Api::namespaced(client.clone(), &plan.namespace);
    for role in &plan.roles {
        apply(&roles, role, "Role").await?;
    }
    let role_bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &plan.namespace);
    for binding in &plan.role_bindings {
        apply(&role_bindings, binding, "RoleBinding").await?;
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &plan.namespace);
    for deployment in &plan.deployments {
        apply(&deployments, deployment, "Deployment").await?;
    }
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &plan.namespace);
    for pdb in &plan.pod_disruption_budgets {
        apply(&budgets, pdb, "PodDisruptionBudget").await?;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &plan.namespace);
    for service in &plan.services {
        apply(&services, service, "Service").await?;
    }
    let served = monitoring_kinds(client).await?;
    let (to_apply, skipped) = monitoring_split(&plan.monitoring, served.as_deref());
    if !skipped.is_empty() {
        tracing::info!(
            kinds = %skipped.join(", "),
            "skipped: the API server does not serve {}",
            crate::monitoring::MONITORING_API_VERSION
        );
    }
    for object in to_apply {
        let object: DynamicObject = serde_json::from_value(object.clone()).map_err(|err| {
            Error::InstallPlan(format!("failed to read a monitoring object: {err}"))
        })?;
        let kind = object
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
            crate::monitoring::MONITORING_GROUP,
            "v1",
            &kind,
        ));
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &plan.namespace, &resource);
        let kind: &'static str = if kind == "PrometheusRule" {
            "PrometheusRule"
        } else {
            "ServiceMonitor"
        };
        apply(&api, &object, kind).await?;
    }
    Ok(())
}

/// The kinds the API server serves in `monitoring.coreos.com/v1`, or `None` when it does not
/// serve that group version.
async fn monitoring_kinds(client: &Client) -> Result<Option<Vec<String>>, Error> {
    match client
        .list_api_group_resources(crate::monitoring::MONITORING_API_VERSION)
        .await
    {
        Ok(list) => Ok(Some(
            list.resources
                .into_iter()
                .filter(|r| !r.name.contains('/'))
                .map(|r| r.kind)
                .collect(),
        )),
        Err(err) if crate::error::is_not_found(&err) => Ok(None),
        Err(source) => Err(Error::List {
            kind: "APIResourceList",
            source: Box::new(source),
        }),
    }
}

/// Waits until every Deployment of `plan` has rolled out the spec just applied and is
/// available ([`readiness::rollout_complete`]): an upgrade waits for its new pods, not for the
/// old ones that are still serving.
pub async fn wait_available(
    client: &Client,
    plan: &InstallPlan,
    deadline: Instant,
) -> Result<(), Error> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &plan.namespace);
    for deployment in &plan.deployments {
        let name = deployment.name_any();
        await_until(
            &deployments,
            &name,
            readiness::rollout_complete(),
            deadline,
            &format!("Deployment {name} to be available"),
        )
        .await?;
    }
    Ok(())
}

/// Removes what [`install`] created in `args.namespace`, in the order [`steps`] gives:
/// webhook configurations and fallback policies first, Initializers only when asked.
pub async fn uninstall(client: Client, args: &UninstallArgs) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    for step in steps(args) {
        tracing::info!(?step, "uninstall");
        match step {
            UninstallStep::Deregister => deregister(&client).await?,
            UninstallStep::DeleteInitializers => delete_initializers(&client, deadline).await?,
            UninstallStep::RemoveOperator => {
                remove_operator(&client, &args.namespace, deadline).await?
            }
            UninstallStep::RemovePermissions => {
                remove_permissions(&client, &args.namespace).await?
            }
            UninstallStep::RemoveNamespace => {
                let namespaces: Api<Namespace> = Api::all(client.clone());
                if let Some(ns) = get_opt(&namespaces, &args.namespace, "Namespace").await?
                    && installed_by_us(&ns.metadata)
                {
                    delete(&namespaces, &args.namespace, "Namespace").await?;
                }
            }
            UninstallStep::RemoveCrds => {
                delete_labelled::<CustomResourceDefinition>(
                    &client,
                    |_: &str| Api::all(client.clone()),
                    &installer_selector(),
                    "CustomResourceDefinition",
                )
                .await?;
                remove_guard(&client).await?
            }
        }
    }
    Ok(())
}

fn installer_selector() -> ListParams {
    ListParams::default().labels(&format!(
        "{}={MANAGED_BY_VALUE}",
        constants::MANAGED_BY_LABEL
    ))
}

/// Deletes every Initializer and waits until the operator has run their finalizers.
async fn delete_initializers(client: &Client, deadline: Instant) -> Result<(), Error> {
    if !crd_exists(client).await? {
        return Ok(());
    }
    let initializers: Api<Initializer> = Api::all(client.clone());
    for initializer in list(&initializers, &ListParams::default(), "Initializer").await? {
        delete(&initializers, &initializer.name_any(), "Initializer").await?;
    }
    let waited = wait_until(deadline, "every Initializer's finalizer to finish", || {
        let initializers = initializers.clone();
        async move {
            Ok(list(&initializers, &ListParams::default(), "Initializer")
                .await?
                .is_empty())
        }
    })
    .await;
    if let Err(Error::Wait { what, .. }) = waited {
        let left: Vec<String> = list(&initializers, &ListParams::default(), "Initializer")
            .await?
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        return Err(Error::Wait {
            what,
            reason: format!(
                "still present: {}; the operator runs their finalizers, so it must be running (see `kubectl -n <namespace> get deployment initializer-operator`)",
                left.join(", ")
            ),
        });
    }
    waited
}

/// Deletes the installer's Deployments in `namespace` and waits until their pods have stopped
/// (a terminating operator pod could still register a configuration), then their
/// PodDisruptionBudgets.
async fn remove_operator(client: &Client, namespace: &str, deadline: Instant) -> Result<(), Error> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    for deployment in list(&deployments, &installer_selector(), "Deployment").await? {
        if !installed_by_us(&deployment.metadata) {
            continue;
        }
        delete(&deployments, &deployment.name_any(), "Deployment").await?;
        let Some(selector) = pod_selector(&deployment) else {
            continue;
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let params = ListParams::default().labels(&selector);
        wait_until(
            deadline,
            &format!("the pods of Deployment {} to stop", deployment.name_any()),
            || {
                let pods = pods.clone();
                let params = params.clone();
                async move { Ok(list(&pods, &params, "Pod").await?.is_empty()) }
            },
        )
        .await?;
    }
    delete_in_namespace::<PodDisruptionBudget>(client, namespace, "PodDisruptionBudget").await?;
    delete_in_namespace::<Service>(client, namespace, "Service").await?;
    if let Some(kinds) = monitoring_kinds(client).await? {
        for kind in kinds
            .iter()
            .filter(|k| ["PrometheusRule", "ServiceMonitor"].contains(&k.as_str()))
        {
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
                crate::monitoring::MONITORING_GROUP,
                "v1",
                kind,
            ));
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            for object in list(&api, &installer_selector(), "monitoring object").await? {
                if installed_by_us(&object.metadata) {
                    delete(&api, &object.name_any(), "monitoring object").await?;
                }
            }
        }
    }
    Ok(())
}

/// Deletes the installer's RBAC and service accounts of the install in `namespace`: the
/// ClusterRoleBindings whose subjects are all of that namespace and the ClusterRoles they
/// bind, the bundle's workloads ClusterRole unless another install remains, and the Roles,
/// RoleBindings and ServiceAccounts in it.
async fn remove_permissions(client: &Client, namespace: &str) -> Result<(), Error> {
    let by_us = installer_selector();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let mut bound_roles = Vec::new();
    for binding in list(&bindings, &by_us, "ClusterRoleBinding").await? {
        if installed_by_us(&binding.metadata) && binds_install(&binding, namespace) {
            delete(&bindings, &binding.name_any(), "ClusterRoleBinding").await?;
            bound_roles.push(binding.role_ref.name.clone());
        }
    }
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for name in bound_roles {
        if let Some(role) = get_opt(&roles, &name, "ClusterRole").await?
            && installed_by_us(&role.metadata)
        {
            delete(&roles, &name, "ClusterRole").await?;
        }
    }
    // The workloads ClusterRole is shared by every install (it names no namespace): it goes
    // with the last one. The RoleBindings administrators made to it are theirs to remove.
    let others = list(&bindings, &by_us, "ClusterRoleBinding").await?;
    if others.iter().all(|b| !installed_by_us(&b.metadata)) {
        let name = crate::rbac::WORKLOADS_CLUSTER_ROLE;
        if let Some(role) = get_opt(&roles, name, "ClusterRole").await?
            && installed_by_us(&role.metadata)
        {
            delete(&roles, name, "ClusterRole").await?;
        }
    }
    delete_in_namespace::<RoleBinding>(client, namespace, "RoleBinding").await?;
    delete_in_namespace::<Role>(client, namespace, "Role").await?;
    delete_in_namespace::<ServiceAccount>(client, namespace, "ServiceAccount").await
}

async fn delete_in_namespace<K>(
    client: &Client,
    namespace: &str,
    kind: &'static str,
) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    for object in list(&api, &installer_selector(), kind).await? {
        if installed_by_us(object.meta()) {
            delete(&api, &object.name_any(), kind).await?;
        }
    }
    Ok(())
}

/// Deletes the operator's guard on Initializers (its ValidatingAdmissionPolicy and binding), if
/// it is there and carries the operator's label. An API server that does not serve
/// ValidatingAdmissionPolicy has none.
pub async fn remove_guard(client: &Client) -> Result<(), Error> {
    let name = crate::manifest::GUARD_NAME;
    let operator_made = |meta: &ObjectMeta| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(constants::MANAGED_BY_LABEL))
            .is_some_and(|v| v == constants::MANAGED_BY_VALUE)
    };
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    if get_opt(&bindings, name, "ValidatingAdmissionPolicyBinding")
        .await?
        .is_some_and(|b| operator_made(&b.metadata))
    {
        delete(&bindings, name, "ValidatingAdmissionPolicyBinding").await?;
    }
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    if get_opt(&policies, name, "ValidatingAdmissionPolicy")
        .await?
        .is_some_and(|p| operator_made(&p.metadata))
    {
        delete(&policies, name, "ValidatingAdmissionPolicy").await?;
    }
    Ok(())
}

/// Deletes every webhook configuration the operator manages and every fallback policy and
/// binding it put in force (labelled by the operator for an Initializer). An API server that
/// does not serve ValidatingAdmissionPolicy has no fallbacks.
pub async fn deregister(client: &Client) -> Result<(), Error> {
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    delete_webhook_configurations(&webhooks).await?;
    let fallbacks = ListParams::default().labels(&format!(
        "{}={},{}",
        constants::MANAGED_BY_LABEL,
        constants::MANAGED_BY_VALUE,
        constants::INITIALIZER_LABEL,
    ));
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    for binding in list_if_served(&bindings, &fallbacks, "ValidatingAdmissionPolicyBinding").await?
    {
        delete(
            &bindings,
            &binding.name_any(),
            "ValidatingAdmissionPolicyBinding",
        )
        .await?;
    }
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    for policy in list_if_served(&policies, &fallbacks, "ValidatingAdmissionPolicy").await? {
        delete(&policies, &policy.name_any(), "ValidatingAdmissionPolicy").await?;
    }
    Ok(())
}

/// The Deployment's `matchLabels` as a label selector string, if it has any.
fn pod_selector(deployment: &Deployment) -> Option<String> {
    let labels = deployment.spec.as_ref()?.selector.match_labels.as_ref()?;
    (!labels.is_empty()).then(|| {
        labels
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}

async fn crd_exists(client: &Client) -> Result<bool, Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.get_opt(constants::CRD_NAME)
        .await
        .map(|crd| crd.is_some())
        .map_err(|source| Error::Get {
            kind: "CustomResourceDefinition",
            name: constants::CRD_NAME.to_string(),
            source: Box::new(source),
        })
}

/// Deletes every webhook configuration the operator manages (labelled by the operator).
async fn delete_webhook_configurations(
    webhooks: &Api<MutatingWebhookConfiguration>,
) -> Result<(), Error> {
    let managed = ListParams::default().labels(&format!(
        "{}={}",
        constants::MANAGED_BY_LABEL,
        constants::MANAGED_BY_VALUE
    ));
    for webhook in list(webhooks, &managed, "MutatingWebhookConfiguration").await? {
        delete(
            webhooks,
            &webhook.name_any(),
            "MutatingWebhookConfiguration",
        )
        .await?;
    }
    Ok(())
}

/// Deletes every object of kind `K` carrying the installer's label, in any namespace;
/// `api_for(namespace)` gives the Api to delete through (namespace `""` for cluster scope).
async fn delete_labelled<K>(
    client: &Client,
    api_for: impl Fn(&str) -> Api<K>,
    by_us: &ListParams,
    kind: &'static str,
) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let all: Api<K> = Api::all_with(client.clone(), &K::DynamicType::default());
    for object in list(&all, by_us, kind).await? {
        // The label selector already chose these; checking again guards against a server
        // that ignores selectors.
        if !installed_by_us(object.meta()) {
            continue;
        }
        let api = api_for(object.meta().namespace.as_deref().unwrap_or(""));
        delete(&api, &object.name_any(), kind).await?;
    }
    Ok(())
}

/// Server-side applies `object`, refusing to take over one the installer did not create.
async fn apply<K>(api: &Api<K>, object: &K, kind: &'static str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = object.name_any();
    let existing = api.get_opt(&name).await.map_err(|source| Error::Get {
        kind,
        name: name.clone(),
        source: Box::new(source),
    })?;
    if existing.is_some_and(|existing| !installed_by_us(existing.meta())) {
        return Err(Error::NotInstalledByUs { kind, name });
    }
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(|source| Error::Apply {
        kind,
        name: name.clone(),
        source: Box::new(source),
    })?;
    tracing::info!(kind, name, "applied");
    Ok(())
}

/// Lists like [`list`]; a kind the API server does not serve (404) has no objects.
async fn list_if_served<K>(
    api: &Api<K>,
    params: &ListParams,
    kind: &'static str,
) -> Result<Vec<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.list(params).await {
        Ok(list) => Ok(list.items),
        Err(err) if crate::error::is_not_found(&err) => Ok(Vec::new()),
        Err(source) => Err(Error::List {
            kind,
            source: Box::new(source),
        }),
    }
}

async fn get_opt<K>(api: &Api<K>, name: &str, kind: &'static str) -> Result<Option<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.get_opt(name).await.map_err(|source| Error::Get {
        kind,
        name: name.to_string(),
        source: Box::new(source),
    })
}

async fn list<K>(api: &Api<K>, params: &ListParams, kind: &'static str) -> Result<Vec<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.list(params)
        .await
        .map(|list| list.items)
        .map_err(|source| Error::List {
            kind,
            source: Box::new(source),
        })
}

/// Deletes `name`; an object already gone is fine.
async fn delete<K>(api: &Api<K>, name: &str, kind: &'static str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {
            tracing::info!(kind, name, "deleted");
            Ok(())
        }
        Err(err) if crate::error::is_not_found(&err) => Ok(()),
        Err(source) => Err(Error::Delete {
            kind,
            name: name.to_string(),
            source: Box::new(source),
        }),
    }
}

/// Watches the object `name` of `api` until `condition` holds (kube-runtime's
/// [`await_condition`]) or `deadline` passes. A watch that fails (a dropped connection, an API
/// server restarting) is started again until the deadline; its error is the reason reported.
async fn await_until<K>(
    api: &Api<K>,
    name: &str,
    condition: impl Condition<K>,
    deadline: Instant,
    what: &str,
) -> Result<(), Error>
where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
{
    let mut last_error = None;
    loop {
        let watched = await_condition(api.clone(), name, |object: Option<&K>| {
            condition.matches_object(object)
        });
        match tokio::time::timeout_at(deadline, watched).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(err)) => last_error = Some(err.to_string()),
            Err(_elapsed) => break,
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    Err(Error::Wait {
        what: what.to_string(),
        reason: last_error.unwrap_or_else(|| "timed out".to_string()),
    })
}

/// Polls `done` until it says true or `deadline` passes: for waits on a whole list (every
/// Initializer gone, every pod of a Deployment stopped), which no object condition expresses.
async fn wait_until<F, Fut>(deadline: Instant, what: &str, mut done: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, Error>>,
{
    loop {
        let last_error = match done().await {
            Ok(true) => return Ok(()),
            Ok(false) => None,
            // Transient API errors while waiting are retried until the deadline.
            Err(err) => Some(err.to_string()),
        };
        if Instant::now() >= deadline {
            return Err(Error::Wait {
                what: what.to_string(),
                reason: last_error.unwrap_or_else(|| "timed out".to_string()),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated_plan() -> InstallPlan {
        plan(&bundle::generate().unwrap(), "initializer-system").unwrap()
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
        assert_eq!(plan.bundle_cluster_roles.len(), 1);
        assert_eq!(
            plan.bundle_cluster_roles[0].name_any(),
            crate::rbac::WORKLOADS_CLUSTER_ROLE
        );
        assert_eq!(
            plan.bundle_cluster_roles[0].rules.as_ref().unwrap(),
            &crate::rbac::workload_rules()
        );
        assert_eq!(plan.deployments.len(), 1);
        assert_eq!(
            plan.deployments[0].spec.as_ref().unwrap(),
            &manifest::deployment_spec()
        );
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
            .as_ref()
            .unwrap()
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
