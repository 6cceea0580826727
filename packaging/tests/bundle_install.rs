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
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap();

    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(constants::CRD_NAME)
        .await
        .unwrap();
    assert!(conditions::is_crd_established().matches_object(Some(&crd)));
    assert!(installed_by_us(&crd.metadata));
    let namespace = Api::<Namespace>::all(client.clone())
        .get(NAMESPACE)
        .await
        .unwrap();
    assert!(installed_by_us(&namespace.metadata));
    let account = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .get(OPERATOR)
        .await
        .unwrap();
    assert!(installed_by_us(&account.metadata));
    let role = Api::<ClusterRole>::all(client.clone())
        .get(OPERATOR)
        .await
        .unwrap();
    assert_eq!(
        role.rules,
        committed_plan().cluster_roles[0].rules,
        "ClusterRole rules are the CSV's clusterPermissions"
    );
    // The workloads ClusterRole from the bundle's manifests, for administrators to bind in the
    // namespaces they allow: the Role's rules without the Lease.
    let workloads = Api::<ClusterRole>::all(client.clone())
        .get(initializer_packaging::rbac::WORKLOADS_CLUSTER_ROLE)
        .await
        .unwrap();
    assert!(installed_by_us(&workloads.metadata));
    assert_eq!(
        workloads.rules,
        Some(initializer_packaging::rbac::workload_rules())
    );
    let binding = Api::<ClusterRoleBinding>::all(client.clone())
        .get(OPERATOR)
        .await
        .unwrap();
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
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get(OPERATOR)
        .await
        .unwrap();
    assert!(installed_by_us(&deployment.metadata));
    let container = &deployment.spec.template.spec.unwrap().containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some(images::image(images::OPERATOR).as_str())
    );
    let pdb = Api::<PodDisruptionBudget>::namespaced(client.clone(), NAMESPACE)
        .get(OPERATOR)
        .await
        .unwrap();
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
    let foreign: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": OPERATOR},
        "rules": [],
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let err = install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NotInstalledByUs { kind: "ClusterRole", ref name } if name == OPERATOR),
        "{err}"
    );
    let untouched = Api::<ClusterRole>::all(client.clone())
        .get(OPERATOR)
        .await
        .unwrap();
    assert!(!installed_by_us(&untouched.metadata));
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_removes_what_install_created_and_nothing_else() {
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    // Someone else's ClusterRole with a managed-by label of another tool.
    let bystander: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "bystander", "labels": {constants::MANAGED_BY_LABEL: "helm"}},
        "rules": [],
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &bystander)
        .await
        .unwrap();
    install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap();

    install::uninstall(client.clone(), &uninstall_args())
        .await
        .unwrap();

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
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE},
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap();
    let kept = Api::<Namespace>::all(client.clone())
        .get(NAMESPACE)
        .await
        .unwrap();
    assert!(
        !installed_by_us(&kept.metadata),
        "install leaves it unlabelled"
    );

    install::uninstall(client.clone(), &uninstall_args())
        .await
        .unwrap();

    let kept = Api::<Namespace>::all(client.clone())
        .get(NAMESPACE)
        .await
        .unwrap();
    assert!(kept.metadata.deletion_timestamp.is_none());
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_deletes_managed_webhook_configurations_and_keeps_crds_when_asked() {
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap();
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    for (name, manager) in [
        ("managed", constants::MANAGED_BY_VALUE),
        ("foreign", "someone-else"),
    ] {
        let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name, "labels": {constants::MANAGED_BY_LABEL: manager}},
            "webhooks": [],
        }))
        .unwrap();
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
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap();
    let mut sidecar: Initializer =
        serde_saphyr::from_str(bundle::generate::SIDECAR_EXAMPLE).unwrap();
    sidecar.metadata.finalizers = Some(vec![constants::FINALIZER.to_string()]);
    Api::<Initializer>::all(client.clone())
        .create(&PostParams::default(), &sidecar)
        .await
        .unwrap();

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
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap();
    let initializers = Api::<Initializer>::all(client.clone());
    let sidecar: Initializer = serde_saphyr::from_str(bundle::generate::SIDECAR_EXAMPLE).unwrap();
    initializers
        .create(&PostParams::default(), &sidecar)
        .await
        .unwrap();
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    webhooks
        .create(
            &PostParams::default(),
            &managed_configuration("initializer-sidecar", constants::MANAGED_BY_VALUE),
        )
        .await
        .unwrap();

    let mut args = UninstallArgs::new(NAMESPACE);
    args.timeout = 30;
    install::uninstall(client.clone(), &args).await.unwrap();

    assert!(exists(&initializers, "sidecar").await);
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    assert!(exists(&crds, constants::CRD_NAME).await);
    let namespace = Api::<Namespace>::all(client.clone())
        .get(NAMESPACE)
        .await
        .unwrap();
    assert!(namespace.metadata.deletion_timestamp.is_none());
    // The operator and its registrations are gone all the same.
    assert!(!exists(&webhooks, "initializer-sidecar").await);
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE);
    assert!(!exists(&deployments, OPERATOR).await);
    assert!(!exists(&Api::<ClusterRole>::all(client.clone()), OPERATOR).await);
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_leaves_the_objects_of_an_install_in_another_namespace_alone() {
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap();
    // Another install's objects, with the installer's label, in namespace "elsewhere".
    let installer = json!({constants::MANAGED_BY_LABEL: install::MANAGED_BY_VALUE});
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "elsewhere", "labels": installer}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), "elsewhere");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "other-operator", "labels": installer}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let cluster_roles = Api::<ClusterRole>::all(client.clone());
    cluster_roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "other-operator", "labels": installer}, "rules": []}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "other-operator", "labels": installer},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "other-operator"},
                "subjects": [{"kind": "ServiceAccount", "name": "other-operator", "namespace": "elsewhere"}],
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    install::uninstall(client.clone(), &uninstall_args())
        .await
        .unwrap();

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
    let elsewhere = Api::<Namespace>::all(client.clone())
        .get("elsewhere")
        .await
        .unwrap();
    assert!(elsewhere.metadata.deletion_timestamp.is_none());
    sandbox.shutdown().await;
}

#[tokio::test]
async fn uninstall_deletes_the_managed_configurations_before_the_operator() {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{WatchEvent, WatchParams};
    let (_dir, sandbox) = control_plane_only().await;
    let client = sandbox.client();
    install::apply_plan(&client, &committed_plan(), deadline())
        .await
        .unwrap();
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    webhooks
        .create(
            &PostParams::default(),
            &managed_configuration("initializer-guard", constants::MANAGED_BY_VALUE),
        )
        .await
        .unwrap();
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
    let configuration_rv = webhooks
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let operator_rv = deployments
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
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
        legacy
            .create(&PostParams::default(), &configuration(name, labels))
            .await
            .unwrap();
    }

    install::deregister(&client).await.unwrap();

    assert!(!exists(&legacy, "initializer-sidecar").await);
    assert!(exists(&legacy, "theirs").await);
    assert!(exists(&legacy, "labelled-by-anyone").await);
    sandbox.shutdown().await;
}
