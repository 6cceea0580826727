//! `initializer-operator install --bundle DIR` and `uninstall`: the bundle installed without OLM
//! (kind, the sandbox, any cluster), from exactly the files OLM would read.
//!
//! [`plan`] turns a bundle into the objects to apply and [`steps`] says what an uninstall does
//! and in which order; both are pure and live in `plan.rs` with their tests; this file holds
//! the flags and the IO shell, [`install`] and [`uninstall`].
//! Everything the installer creates carries
//! `app.kubernetes.io/managed-by: initializer-operator-installer`, and it never overwrites or
//! deletes an object without that label, nor one of another install's namespace.

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::time::Duration;

use initializer_crds::{Initializer, constants};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{EnvVar, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
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

use crate::bundle::{self, Bundle};
use crate::error::Error;
use crate::manifest;
use crate::readiness;

mod plan;

pub use plan::{
    InstallPlan, UninstallStep, binds_install, installed_by_us, installer_labels, monitoring_split,
    parse_env, plan, steps,
};

/// Field manager of every server-side apply the installer makes.
pub const FIELD_MANAGER: &str = "initializer-operator-installer";
/// Value of `app.kubernetes.io/managed-by` on everything the installer creates.
pub const MANAGED_BY_VALUE: &str = "initializer-operator-installer";
/// How often the installer looks again while it waits.
const POLL: Duration = Duration::from_millis(500);

/// Flags of `initializer-operator install`.
#[derive(Clone, Debug, clap::Args)]
pub struct InstallArgs {
    /// The registry+v1 bundle directory to install, or a release's directory (what `make
    /// release` writes: its `bundle/`, every image named by digest).
    #[arg(long, default_value = bundle::BUNDLE_DIR)]
    pub bundle: PathBuf,
    /// Namespace the operator runs in (created when missing).
    #[arg(long, default_value = manifest::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// How long to wait for the CRDs and the operator to become available, in seconds.
    #[arg(long, default_value_t = 180)]
    pub timeout: u64,
    /// A variable set on every container of the operator's Deployments, as OLM's Subscription
    /// `spec.config.env` sets it (replacing one of the same name); repeatable. E.g.
    /// `--env POLICY_CANARY_NAMESPACE=initializer-canary`.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    pub env: Vec<EnvVar>,
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

/// The bundle `--bundle` names: `dir` itself, or a release directory's `bundle/` (a release holds
/// its bundle beside its chart, catalog and SBOMs).
pub fn bundle_dir(dir: &Path) -> PathBuf {
    let release_bundle = dir.join("bundle");
    if !dir.join("manifests").is_dir() && release_bundle.join("manifests").is_dir() {
        release_bundle
    } else {
        dir.to_path_buf()
    }
}

/// Reads the bundle in `args.bundle` and installs it; returns once the operator is available.
pub async fn run_install(client: Client, args: &InstallArgs) -> Result<(), Error> {
    let bundle = Bundle::read(&bundle_dir(&args.bundle))?;
    let mut plan = plan(&bundle, &args.namespace)?;
    plan.set_env(&args.env);
    install(client, &plan, Duration::from_secs(args.timeout)).await
}

/// Applies `plan`: CRDs (then waits until they are established), namespace, service accounts,
/// RBAC, Deployments (then waits until they are available).
pub async fn install(client: Client, plan: &InstallPlan, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    apply_plan(&client, plan, deadline).await?;
    wait_available(&client, plan, deadline).await
}

/// Applies every object of `plan`: the guard on Initializers first, then, once a new guard is in
/// force, the CRDs (waiting until they are established), then the rest.
pub async fn apply_plan(
    client: &Client,
    plan: &InstallPlan,
    deadline: Instant,
) -> Result<(), Error> {
    // The operator holds back an Initializer created before a new guard was in force: the CRD,
    // without which none can be created, waits until it is.
    put_guard_in_force(client, &plan.guard_policy, &plan.guard_binding).await?;
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
                    // As `kubectl delete` does: wait until the namespace is gone, so an install
                    // that follows (the installer again, or OLM) does not meet a terminating one.
                    wait_until(deadline, "the namespace to be removed", || {
                        let namespaces = namespaces.clone();
                        let name = args.namespace.clone();
                        async move { Ok(get_opt(&namespaces, &name, "Namespace").await?.is_none()) }
                    })
                    .await?;
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
/// bind, the bundle's shared ClusterRoles (workloads, policy canary) unless another install
/// remains, and the Roles,
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
    // The bundle's own ClusterRoles (the workloads' and the policy canary's) are shared by every
    // install (they name no namespace): they go with the last one. The RoleBindings
    // administrators made to them are theirs to remove.
    let others = list(&bindings, &by_us, "ClusterRoleBinding").await?;
    if others.iter().all(|b| !installed_by_us(&b.metadata)) {
        for name in [
            crate::rbac::WORKLOADS_CLUSTER_ROLE,
            crate::rbac::POLICY_CANARY_CLUSTER_ROLE,
        ] {
            if let Some(role) = get_opt(&roles, name, "ClusterRole").await?
                && installed_by_us(&role.metadata)
            {
                delete(&roles, name, "ClusterRole").await?;
            }
        }
    }
    delete_in_namespace::<RoleBinding>(client, namespace, "RoleBinding").await?;
    delete_in_namespace::<Role>(client, namespace, "Role").await?;
    delete_in_namespace::<ServiceAccount>(client, namespace, "ServiceAccount").await?;
    remove_bounds(client, namespace).await
}

/// Deletes the bounds the operator put on its own account in `namespace`
/// ([`crate::bounds`]), if they are there and carry the operator's label. The operator itself
/// may not: its bounds refuse that.
async fn remove_bounds(client: &Client, namespace: &str) -> Result<(), Error> {
    let user = crate::bounds::service_account_user(namespace, crate::manifest::OPERATOR_NAME);
    match crate::bounds::name(&user) {
        Some(name) => remove_operator_policy(client, &name).await,
        None => Ok(()),
    }
}

/// Deletes the ValidatingAdmissionPolicy binding and policy `name`, each only if it carries the
/// operator's label (binding first, so no binding names a missing policy).
async fn remove_operator_policy(client: &Client, name: &str) -> Result<(), Error> {
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

/// Whether the object carries the operator's own label (the guard does, whoever applied it).
fn operator_made(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(constants::MANAGED_BY_LABEL))
        .is_some_and(|v| v == constants::MANAGED_BY_VALUE)
}

/// What applying the guard on Initializers found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardApplied {
    /// Its policy or binding was missing: both are applied, and the binding is new.
    New,
    /// Both were there: applied again over them, the binding kept.
    AlreadyThere,
    /// The API server does not serve ValidatingAdmissionPolicy: nothing is applied.
    NotServed,
}

/// `initializer-operator guard`, the Helm chart's hook: applies the guard on Initializers
/// ([`crate::guard`]) and returns once it is in force, so that Helm creates the CRD only after
/// it; says what it found.
pub async fn run_guard(client: Client) -> Result<GuardApplied, Error> {
    put_guard_in_force(&client, &crate::guard::policy(), &crate::guard::binding()).await
}

/// Applies the guard on Initializers ([`apply_guard`]) and returns once it is in force: at once
/// when its binding was there, [`crate::guard::IN_FORCE_AFTER`] later when it is new.
async fn put_guard_in_force(
    client: &Client,
    policy: &ValidatingAdmissionPolicy,
    binding: &ValidatingAdmissionPolicyBinding,
) -> Result<GuardApplied, Error> {
    let applied = apply_guard(client, policy, binding).await?;
    if applied == GuardApplied::New {
        tokio::time::sleep(crate::guard::IN_FORCE_AFTER).await;
    }
    Ok(applied)
}

/// Applies the guard on Initializers, policy before binding, before any CRD exists, so that no
/// Initializer is created unguarded, and says whether the binding is new. An object of that
/// name without the operator's label is someone else's and is left alone (the install fails);
/// an API server that does not serve ValidatingAdmissionPolicy (before Kubernetes 1.30) leaves
/// Initializers to RBAC alone.
async fn apply_guard(
    client: &Client,
    policy: &ValidatingAdmissionPolicy,
    binding: &ValidatingAdmissionPolicyBinding,
) -> Result<GuardApplied, Error> {
    let name = crate::manifest::GUARD_NAME;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let existing = get_opt(&policies, name, "ValidatingAdmissionPolicy").await?;
    let existing_binding = get_opt(&bindings, name, "ValidatingAdmissionPolicyBinding").await?;
    // A new policy under an old binding is new to the API server too.
    let found = if existing.is_none() || existing_binding.is_none() {
        GuardApplied::New
    } else {
        GuardApplied::AlreadyThere
    };
    for (kind, meta) in [
        ("ValidatingAdmissionPolicy", existing.map(|p| p.metadata)),
        (
            "ValidatingAdmissionPolicyBinding",
            existing_binding.map(|b| b.metadata),
        ),
    ] {
        if meta.is_some_and(|meta| !operator_made(&meta)) {
            return Err(Error::NotInstalledByUs {
                kind,
                name: name.to_string(),
            });
        }
    }
    let applied = async {
        policies
            .patch(name, &params, &Patch::Apply(policy))
            .await
            .map_err(|source| ("ValidatingAdmissionPolicy", source))?;
        bindings
            .patch(name, &params, &Patch::Apply(binding))
            .await
            .map_err(|source| ("ValidatingAdmissionPolicyBinding", source))
    };
    match applied.await {
        Ok(_) => {
            tracing::info!(name, "applied the guard on Initializers");
            Ok(found)
        }
        // A get of a kind that is not served looks like a missing object; the apply says which.
        Err((_, err)) if crate::error::is_not_found(&err) => {
            tracing::warn!("{}", crate::guard::NOT_SERVED_WARNING);
            Ok(GuardApplied::NotServed)
        }
        Err((kind, source)) => Err(Error::Apply {
            kind,
            name: name.to_string(),
            source: Box::new(source),
        }),
    }
}

/// Deletes the operator's guard on Initializers (its ValidatingAdmissionPolicy and binding), if
/// it is there and carries the operator's label. An API server that does not serve
/// ValidatingAdmissionPolicy has none.
pub async fn remove_guard(client: &Client) -> Result<(), Error> {
    remove_operator_policy(client, crate::manifest::GUARD_NAME).await
}

/// The versions the operator writes a preset's MutatingAdmissionPolicy at, where served.
const PRESET_POLICY_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Deletes every webhook configuration the operator manages, every fallback policy and binding
/// it put in force, and every preset policy and binding it moved into the API server (each
/// labelled by the operator for an Initializer). An API server that does not serve an API has
/// none of its objects.
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
    // The presets the operator moved into the API server (MutatingAdmissionPolicy, v1 from
    // Kubernetes 1.36, v1beta1 before): left behind, they would go on injecting with no
    // operator to take them out. Bindings first; a version not served lists none.
    for version in PRESET_POLICY_VERSIONS {
        for (kind, plural) in [
            (
                "MutatingAdmissionPolicyBinding",
                "mutatingadmissionpolicybindings",
            ),
            ("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
        ] {
            let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", version, kind);
            let api: Api<DynamicObject> = Api::all_with(
                client.clone(),
                &ApiResource::from_gvk_with_plural(&gvk, plural),
            );
            for object in list_if_served(&api, &fallbacks, kind).await? {
                delete(&api, &object.name_any(), kind).await?;
            }
        }
    }
    // The legacy backend's registrations (Kubernetes 1.7–1.13, the sandbox's legacy mode): a
    // configuration outliving the operator leaves every matching create pending on a name no
    // one removes. Served nowhere else, where the list finds none.
    let legacy: Api<DynamicObject> =
        Api::all_with(client.clone(), &constants::legacy_configuration_resource());
    for configuration in list_if_served(&legacy, &fallbacks, "InitializerConfiguration").await? {
        delete(
            &legacy,
            &configuration.name_any(),
            "InitializerConfiguration",
        )
        .await?;
    }
    Ok(())
}

/// The Deployment's `matchLabels` as a label selector string, if it has any.
fn pod_selector(deployment: &Deployment) -> Option<String> {
    let labels = deployment.spec.selector.match_labels.as_ref()?;
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

    #[test]
    fn a_release_directory_names_its_bundle_and_a_bundle_itself() {
        let release = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(release.path().join("bundle/manifests")).unwrap();
        assert_eq!(bundle_dir(release.path()), release.path().join("bundle"));
        let bundle = release.path().join("bundle");
        assert_eq!(bundle_dir(&bundle), bundle);
        // Neither: the path as given, for Bundle::read's error to name.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(bundle_dir(empty.path()), empty.path());
    }
}
