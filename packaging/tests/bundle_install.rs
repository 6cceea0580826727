//! `install --bundle` and `uninstall` against the embedded sandbox: what is applied, what is
//! refused, and that uninstall removes exactly what the installer created.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use initializer_crds::{Initializer, constants, images};
use initializer_packaging::bundle::{self, Bundle};
use initializer_packaging::error::Error;
use initializer_packaging::install::{self, InstallPlan, UninstallArgs, installed_by_us};
use initializer_sandbox::{Sandbox, SandboxConfig, SandboxHandle};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{Condition, conditions};
use kube::{Api, Client};
use serde_json::json;
use tokio::time::Instant;

const NAMESPACE: &str = "initializer-system";
const OPERATOR: &str = "initializer-operator";

fn committed_plan() -> InstallPlan {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(bundle::BUNDLE_DIR);
    install::plan(&Bundle::read(&dir).unwrap(), NAMESPACE).unwrap()
}

/// A sandbox without workload controllers: objects are stored, nothing runs.
async fn control_plane_only() -> (tempfile::TempDir, SandboxHandle) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.workloads = false;
    (dir, Sandbox::start(config).await.unwrap())
}

async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_some()
}

/// A control-plane-only sandbox with the committed bundle installed.
async fn installed() -> (tempfile::TempDir, SandboxHandle, Client) {
    let (dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    install_bundle(&client).await;
    (dir, sandbox, client)
}

/// Installs the committed bundle.
async fn install_bundle(client: &Client) {
    install::apply_plan(client, &committed_plan(), deadline())
        .await
        .unwrap();
}

/// Uninstalls everything ([`uninstall_args`]).
async fn uninstall_all(client: &Client) {
    install::uninstall(client.clone(), &uninstall_args())
        .await
        .unwrap();
}

async fn create<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), object).await.unwrap();
}

async fn get<K>(api: &Api<K>, name: &str) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get(name).await.unwrap()
}

/// Checks that namespace `name` is there and not being deleted.
async fn assert_namespace_stays(client: &Client, name: &str) {
    let namespace = get(&Api::<Namespace>::all(client.clone()), name).await;
    assert!(
        namespace.metadata.deletion_timestamp.is_none(),
        "{name} is being deleted"
    );
}

/// A ClusterRole with `metadata` and no rules.
fn cluster_role(metadata: serde_json::Value) -> ClusterRole {
    object(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata,
        "rules": [],
    }))
}

/// `value` as an object of its kind.
fn object<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).unwrap()
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

/// Uninstall everything, Initializers included.
fn uninstall_args() -> UninstallArgs {
    let mut args = UninstallArgs::new(NAMESPACE);
    args.delete_initializers = true;
    args.timeout = 30;
    args
}

#[tokio::test]
async fn install_applies_every_object_of_the_bundle_with_the_installer_label() {
    let (_dir, sandbox, client) = installed().await;

    let crd = get(
        &Api::<CustomResourceDefinition>::all(client.clone()),
        constants::CRD_NAME,
    )
    .await;
    assert!(conditions::is_crd_established().matches_object(Some(&crd)));
    assert!(installed_by_us(&crd.metadata));
    let namespace = get(&Api::<Namespace>::all(client.clone()), NAMESPACE).await;
    assert!(installed_by_us(&namespace.metadata));
    let account = get(
        &Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE),
        OPERATOR,
    )
    .await;
    assert!(installed_by_us(&account.metadata));
    let role = get(&Api::<ClusterRole>::all(client.clone()), OPERATOR).await;
    assert_eq!(
        role.rules,
        committed_plan().cluster_roles[0].rules,
        "ClusterRole rules are the CSV's clusterPermissions"
    );
    // The workloads ClusterRole from the bundle's manifests, for administrators to bind in the
    // namespaces they allow: the Role's rules without the Lease.
    let workloads = get(
        &Api::<ClusterRole>::all(client.clone()),
        initializer_packaging::rbac::WORKLOADS_CLUSTER_ROLE,
    )
    .await;
    assert!(installed_by_us(&workloads.metadata));
    assert_eq!(
        workloads.rules,
        Some(initializer_packaging::rbac::workload_rules())
    );
    let binding = get(&Api::<ClusterRoleBinding>::all(client.clone()), OPERATOR).await;
    assert_eq!(
        binding.subjects.unwrap()[0].namespace.as_deref(),
        Some(NAMESPACE)
    );
    assert!(
        exists(
            &Api::<Role>::namespaced(client.clone(), NAMESPACE),
            OPERATOR
        )
        .await
    );
    assert!(
        exists(
            &Api::<RoleBinding>::namespaced(client.clone(), NAMESPACE),
            OPERATOR
        )
        .await
    );
    let deployment = get(
        &Api::<Deployment>::namespaced(client.clone(), NAMESPACE),
        OPERATOR,
    )
    .await;
    assert!(installed_by_us(&deployment.metadata));
    let container = &deployment.spec.template.spec.unwrap().containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some(images::image(images::OPERATOR).as_str())
    );
    let pdb = get(
        &Api::<PodDisruptionBudget>::namespaced(client.clone(), NAMESPACE),
        OPERATOR,
    )
    .await;
    assert!(installed_by_us(&pdb.metadata));
    assert_eq!(
        pdb.spec.unwrap().max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    sandbox.shutdown().await;
}

#[tokio::test]
async fn installing_twice_is_a_no_op_that_succeeds() {
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    let plan = committed_plan();
    install::apply_plan(&client, &plan, deadline())
        .await
        .unwrap();
    install::apply_plan(&client, &plan, deadline())
        .await
        .unwrap();
    sandbox.shutdown().await;
}

#[tokio::test]
async fn install_refuses_to_take_over_a_cluster_role_it_did_not_create() {
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    let foreign = cluster_role(json!({"name": OPERATOR}));
    create(&Api::<ClusterRole>::all(client.clone()), &foreign).await;
    let err = install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NotInstalledByUs { kind: "ClusterRole", ref name } if name == OPERATOR),
        "{err}"
    );
    let untouched = get(&Api::<ClusterRole>::all(client.clone()), OPERATOR).await;
    assert!(!installed_by_us(&untouched.metadata));
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_removes_what_install_created_and_nothing_else() {
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    // Someone else's ClusterRole with a managed-by label of another tool.
    let bystander =
        cluster_role(json!({"name": "bystander", "labels": {constants::MANAGED_BY_LABEL: "helm"}}));
    create(&Api::<ClusterRole>::all(client.clone()), &bystander).await;
    install_bundle(&client).await;

    uninstall_all(&client).await;

    assert!(exists(&Api::<ClusterRole>::all(client.clone()), "bystander").await);
    assert!(!exists(&Api::<ClusterRole>::all(client.clone()), OPERATOR).await);
    // The bundle's own ClusterRoles, bound by no binding of the install: the last install takes
    // them with it (a Helm install after this one would find them and refuse).
    for shared in [
        initializer_packaging::rbac::WORKLOADS_CLUSTER_ROLE,
        initializer_packaging::rbac::POLICY_CANARY_CLUSTER_ROLE,
    ] {
        assert!(
            !exists(&Api::<ClusterRole>::all(client.clone()), shared).await,
            "{shared} outlived the uninstall"
        );
    }
    assert!(!exists(&Api::<ClusterRoleBinding>::all(client.clone()), OPERATOR).await);
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE);
    assert!(!exists(&deployments, OPERATOR).await);
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE);
    assert!(!exists(&accounts, OPERATOR).await);
    let budgets = Api::<PodDisruptionBudget>::namespaced(client.clone(), NAMESPACE);
    assert!(!exists(&budgets, OPERATOR).await);
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    assert!(!exists(&crds, constants::CRD_NAME).await);
    let namespace = Api::<Namespace>::all(client.clone())
        .get_opt(NAMESPACE)
        .await
        .unwrap();
    assert!(
        namespace.is_none(),
        "uninstall returns once the installer's namespace is gone"
    );
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_keeps_a_namespace_the_installer_did_not_create() {
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    let namespace: Namespace = object(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE},
    }));
    create(&Api::<Namespace>::all(client.clone()), &namespace).await;
    install_bundle(&client).await;
    let kept = get(&Api::<Namespace>::all(client.clone()), NAMESPACE).await;
    assert!(
        !installed_by_us(&kept.metadata),
        "install leaves it unlabelled"
    );

    uninstall_all(&client).await;

    assert_namespace_stays(&client, NAMESPACE).await;
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_deletes_managed_webhook_configurations_and_keeps_crds_when_asked() {
    let (_dir, sandbox, client) = installed().await;
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    for (name, manager) in [
        ("managed", constants::MANAGED_BY_VALUE),
        ("foreign", "someone-else"),
    ] {
        let config = managed_configuration(name, manager);
        webhooks
            .patch(
                name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&config),
            )
            .await
            .unwrap();
    }

    let mut args = uninstall_args();
    args.keep_crds = true;
    install::uninstall(client.clone(), &args).await.unwrap();

    assert!(!exists(&webhooks, "managed").await);
    assert!(exists(&webhooks, "foreign").await);
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    assert!(exists(&crds, constants::CRD_NAME).await);
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_stops_and_names_initializers_whose_finalizers_never_run() {
    let (_dir, sandbox, client) = installed().await;
    let mut sidecar: Initializer =
        serde_saphyr::from_str(bundle::generate::SIDECAR_EXAMPLE).unwrap();
    sidecar.metadata.finalizers = Some(vec![constants::FINALIZER.to_string()]);
    create(&Api::<Initializer>::all(client.clone()), &sidecar).await;

    let mut args = uninstall_args();
    args.timeout = 2;
    let err = install::uninstall(client.clone(), &args).await.unwrap_err();

    assert!(
        matches!(err, Error::Wait { ref reason, .. } if reason.contains("still present: sidecar")),
        "{err}"
    );
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE);
    assert!(
        exists(&deployments, OPERATOR).await,
        "the operator stays while its finalizers are pending"
    );
    sandbox.shutdown().await;
}

#[tokio::test]
async fn install_times_out_with_a_clear_error_when_the_operator_never_becomes_available() {
    let (_dir, sandbox) = control_plane_only().await;
    let client: Client = sandbox.client();
    let err = install::install(client, &committed_plan(), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("failed to wait for Deployment initializer-operator to be available"),
        "{err}"
    );
    sandbox.shutdown().await;
}

fn managed_configuration(name: &str, manager: &str) -> MutatingWebhookConfiguration {
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {constants::MANAGED_BY_LABEL: manager}},
        "webhooks": [],
    }))
    .unwrap()
}

#[tokio::test]
async fn uninstall_keeps_initializers_the_crd_and_the_namespace_unless_asked() {
    let (_dir, sandbox, client) = installed().await;
    let initializers = Api::<Initializer>::all(client.clone());
    let sidecar: Initializer = serde_saphyr::from_str(bundle::generate::SIDECAR_EXAMPLE).unwrap();
    create(&initializers, &sidecar).await;
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    create(
        &webhooks,
        &managed_configuration("initializer-sidecar", constants::MANAGED_BY_VALUE),
    )
    .await;

    let mut args = UninstallArgs::new(NAMESPACE);
    args.timeout = 30;
    install::uninstall(client.clone(), &args).await.unwrap();

    assert!(exists(&initializers, "sidecar").await);
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    assert!(exists(&crds, constants::CRD_NAME).await);
    assert_namespace_stays(&client, NAMESPACE).await;
    // The operator and its registrations are gone all the same.
    assert!(!exists(&webhooks, "initializer-sidecar").await);
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE);
    assert!(!exists(&deployments, OPERATOR).await);
    assert!(!exists(&Api::<ClusterRole>::all(client.clone()), OPERATOR).await);
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_leaves_the_objects_of_an_install_in_another_namespace_alone() {
    let (_dir, sandbox, client) = installed().await;
    // Another install's objects, with the installer's label, in namespace "elsewhere".
    let installer = json!({constants::MANAGED_BY_LABEL: install::MANAGED_BY_VALUE});
    create(
        &Api::<Namespace>::all(client.clone()),
        &object(json!({"metadata": {"name": "elsewhere", "labels": installer}})),
    )
    .await;
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), "elsewhere");
    let other_operator = json!({"name": "other-operator", "labels": installer});
    create(&accounts, &object(json!({"metadata": other_operator}))).await;
    let cluster_roles = Api::<ClusterRole>::all(client.clone());
    create(&cluster_roles, &cluster_role(other_operator.clone())).await;
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    let binding = object(json!({
        "metadata": other_operator,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "other-operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "other-operator", "namespace": "elsewhere"}],
    }));
    create(&bindings, &binding).await;

    uninstall_all(&client).await;

    assert!(!exists(&cluster_roles, OPERATOR).await);
    assert!(exists(&cluster_roles, "other-operator").await);
    // The bundle's ClusterRoles are shared: they stay while another install remains.
    for shared in [
        initializer_packaging::rbac::WORKLOADS_CLUSTER_ROLE,
        initializer_packaging::rbac::POLICY_CANARY_CLUSTER_ROLE,
    ] {
        assert!(exists(&cluster_roles, shared).await, "{shared}");
    }
    assert!(exists(&bindings, "other-operator").await);
    assert!(exists(&accounts, "other-operator").await);
    assert_namespace_stays(&client, "elsewhere").await;
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_deletes_the_managed_configurations_before_the_operator() {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{WatchEvent, WatchParams};
    let (_dir, sandbox, client) = installed().await;
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    create(
        &webhooks,
        &managed_configuration("initializer-guard", constants::MANAGED_BY_VALUE),
    )
    .await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE);

    // The resourceVersion of each deletion: the API server orders every write by it.
    async fn deleted_at<K>(api: Api<K>, name: &'static str, from: String) -> u64
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let mut events = api
            .watch(&WatchParams::default(), &from)
            .await
            .unwrap()
            .boxed();
        while let Some(event) = events.try_next().await.unwrap() {
            if let WatchEvent::Deleted(object) = event
                && object.meta().name.as_deref() == Some(name)
            {
                return object
                    .meta()
                    .resource_version
                    .clone()
                    .unwrap()
                    .parse()
                    .unwrap();
            }
        }
        panic!("the watch of {name} ended before its deletion");
    }
    // Where a watch from now on begins.
    async fn list_version<K>(api: &Api<K>) -> String
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let list = api.list_metadata(&ListParams::default()).await.unwrap();
        list.metadata.resource_version.unwrap()
    }
    let configuration_rv = list_version(&webhooks).await;
    let operator_rv = list_version(&deployments).await;
    let configuration = tokio::spawn(deleted_at(
        webhooks.clone(),
        "initializer-guard",
        configuration_rv,
    ));
    let operator = tokio::spawn(deleted_at(deployments.clone(), OPERATOR, operator_rv));

    install::uninstall(client.clone(), &UninstallArgs::new(NAMESPACE))
        .await
        .unwrap();

    let within = Duration::from_secs(10);
    let configuration = tokio::time::timeout(within, configuration)
        .await
        .unwrap()
        .unwrap();
    let operator = tokio::time::timeout(within, operator)
        .await
        .unwrap()
        .unwrap();
    assert!(
        configuration < operator,
        "configuration deleted at {configuration}, operator at {operator}"
    );
    sandbox.shutdown().await;
}

/// The legacy backend's registrations go with the webhook configurations: an
/// `InitializerConfiguration` labelled by the operator for an Initializer left behind would keep
/// every matching create pending on a name nobody removes. One without both labels is someone
/// else's and stays.
#[tokio::test]
async fn deregistration_removes_the_operators_initializer_configurations_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.workloads = false;
    config.legacy_initializers = true;
    let sandbox = Sandbox::start(config).await.unwrap();
    let client = sandbox.client();
    let legacy: Api<kube::api::DynamicObject> =
        Api::all_with(client.clone(), &constants::legacy_configuration_resource());
    let configuration = |name: &str, labels: serde_json::Value| {
        serde_json::from_value::<kube::api::DynamicObject>(json!({
            "apiVersion": constants::LEGACY_GROUP_VERSION,
            "kind": constants::LEGACY_KIND,
            "metadata": {"name": name, "labels": labels},
            "initializers": [{"name": format!("{name}.ops.initializer-operator.io"),
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]}],
        }))
        .unwrap()
    };
    let ours = json!({constants::MANAGED_BY_LABEL: constants::MANAGED_BY_VALUE, constants::INITIALIZER_LABEL: "sidecar"});
    let managed_only = json!({constants::MANAGED_BY_LABEL: constants::MANAGED_BY_VALUE});
    for (name, labels) in [
        ("initializer-sidecar", ours),
        ("theirs", json!({})),
        ("labelled-by-anyone", managed_only),
    ] {
        create(&legacy, &configuration(name, labels)).await;
    }

    install::deregister(&client).await.unwrap();

    assert!(!exists(&legacy, "initializer-sidecar").await);
    assert!(exists(&legacy, "theirs").await);
    assert!(exists(&legacy, "labelled-by-anyone").await);
    sandbox.shutdown().await;
}
