//! Where workloads run and with what rights: an Initializer's workload runs only in a namespace
//! labelled for it, as its own account, without the CA's key (a planted CA beside it is
//! removed); the operator's own rights reach such a namespace only once the workloads role is
//! bound there; and a workload that cannot be deployed is reported in the status.

use std::time::Duration;

use initializer_crds::Initializer;
use initializer_crds::Phase;
use initializer_crds::constants::{
    INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, WORKLOADS_LABEL, WORKLOADS_LABEL_VALUE,
};
use initializer_packaging::rbac::WORKLOADS_CLUSTER_ROLE;
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::support::TestCluster;
use crate::support::install::create_namespace;
use crate::{
    NS, OPERATOR_ACCOUNT, configuration, create, create_object, guard, install, patch_spec, phase,
    spawn_as, start, wait_for_event, wait_initializer, wait_last_error, wait_registered,
};

on_backends!(sandbox and real:
    a_workload_that_cannot_be_deployed_is_reported_in_the_status,
    a_workload_runs_only_in_a_labelled_namespace_as_its_own_account_without_the_ca_key,
);
on_backends! {
    /// The operator runs with the bundle's RBAC only (its ServiceAccount, impersonated), which the
    /// sandbox does not enforce: it authorizes every request (sandbox/README.md).
    real only: the_operators_own_rights_reach_a_labelled_namespace_only_once_bound,
}

/// Waits for a failed deployment of `name` to show in its status (`details.lastError`).
async fn wait_for_deploy_error(api: &Api<Initializer>, name: &str, what: &str) {
    wait_last_error(api, name, "failed to", what, Duration::from_secs(20)).await;
}

async fn a_workload_that_cannot_be_deployed_is_reported_in_the_status(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    // An allowed namespace that refuses new content (it is being deleted).
    terminating_namespace(&client, "closing").await;
    let mut lost = guard("lost");
    lost.spec.namespace = Some("closing".into());
    let api = create(&client, &lost).await;
    wait_for_deploy_error(&api, "lost", "the error in the status").await;
    assert!(configuration(&client, "initializer-lost").await.is_none());
    // Moved to a namespace that takes it, the workload deploys and the error goes.
    allowed_namespace(&client, "open").await;
    patch_spec(&api, "lost", json!({"namespace": "open"})).await;
    let what = "the error to clear";
    wait_initializer(&api, "lost", what, Duration::from_secs(30), |lost| {
        lost.status
            .as_ref()
            .is_some_and(|s| !s.details.contains_key("lastError"))
    })
    .await;
    // Moved back while supervised: the failure after that edit reaches the status too (the
    // supervisor writes onto the version the failing reconcile read, not the one before the
    // edit, which the API server would refuse).
    patch_spec(&api, "lost", json!({"namespace": "closing"})).await;
    wait_for_deploy_error(&api, "lost", "the error in the status again").await;
}

/// Creates namespace `name` labelled for initializers' workloads (as an administrator would).
async fn labelled_namespace(client: &Client, name: &str) {
    create_labelled(client, json!({"name": name})).await;
}

/// Creates the namespace of `metadata` with the label for initializers' workloads added.
async fn create_labelled(client: &Client, mut metadata: serde_json::Value) {
    metadata["labels"] = json!({WORKLOADS_LABEL: WORKLOADS_LABEL_VALUE});
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": metadata })).unwrap(),
        )
        .await
        .unwrap();
}

/// Binds the operator's workloads ClusterRole (applied first if absent) in `namespace` to the
/// operator's service account, as `docs/src/install/permissions.md` tells an administrator to.
async fn bind_workloads_role(client: &Client, namespace: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
    let roles = Api::<ClusterRole>::all(client.clone());
    if roles
        .get_opt(WORKLOADS_CLUSTER_ROLE)
        .await
        .unwrap()
        .is_none()
    {
        create_object(
            &roles,
            &initializer_packaging::manifest::workloads_cluster_role(),
        )
        .await;
    }
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "initializer-operator-workloads"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WORKLOADS_CLUSTER_ROLE},
                "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_ACCOUNT, "namespace": NS}],
            }))
            .unwrap(),
        )
        .await
        .unwrap();
}

/// A labelled namespace with the workloads ClusterRole bound there.
async fn allowed_namespace(client: &Client, name: &str) {
    labelled_namespace(client, name).await;
    bind_workloads_role(client, name).await;
}

/// An allowed namespace that refuses new content: deleted, and held in `Terminating` by a
/// finalizer of ours.
pub(crate) async fn terminating_namespace(client: &Client, name: &str) {
    create_labelled(
        client,
        json!({"name": name, "finalizers": ["test.initializer.dev/hold"]}),
    )
    .await;
    Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

fn valid_condition(init: &Initializer) -> Option<(String, String)> {
    init.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Valid")
        .map(|c| (c.status.clone(), c.message.clone()))
}

async fn a_workload_runs_only_in_a_labelled_namespace_as_its_own_account_without_the_ca_key(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    // Not labelled: refused, nothing deployed, and the message says how to allow it.
    create_namespace(&client, "team-hooks").await;
    let mut hooked = guard("hooked");
    hooked.spec.namespace = Some("team-hooks".into());
    let api = create(&client, &hooked).await;
    wait_initializer(
        &api,
        "hooked",
        "Valid=False",
        Duration::from_secs(20),
        |hooked| valid_condition(hooked).is_some_and(|(status, _)| status == "False"),
    )
    .await;
    let (_, message) = valid_condition(&api.get("hooked").await.unwrap()).unwrap();
    for part in [
        "is not labelled",
        "kubectl label namespace team-hooks initializer.dev/workloads=true",
        "--clusterrole=initializer-operator-workloads",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert_eq!(phase(&client, "hooked").await, Some(Phase::Invalid));
    wait_for_event(&client, "Refused", "is not labelled").await;
    let deployments =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), "team-hooks");
    assert!(deployments.get_opt("hooked").await.unwrap().is_none());
    assert!(configuration(&client, "initializer-hooked").await.is_none());

    // Labelled (and the workloads ClusterRole bound there): deployed and registered at the
    // next resync, with no change to the Initializer.
    Api::<Namespace>::all(client.clone())
        .patch(
            "team-hooks",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {WORKLOADS_LABEL: WORKLOADS_LABEL_VALUE}}}),
            ),
        )
        .await
        .unwrap();
    bind_workloads_role(&client, "team-hooks").await;
    let took = wait_registered(&client, "hooked", "registration", Duration::from_secs(120)).await;
    println!("registered {took:?} after the namespace was labelled");

    // The pods run as the initializer's own account, with no API token.
    let account =
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), "team-hooks")
            .get("hooked")
            .await
            .unwrap();
    assert_eq!(account.automount_service_account_token, Some(false));
    assert_eq!(account.labels()[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
    let pods = Api::<Pod>::namespaced(client.clone(), "team-hooks")
        .list(&ListParams::default().labels(&format!("{INITIALIZER_LABEL}=hooked")))
        .await
        .unwrap()
        .items;
    assert!(!pods.is_empty());
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("hooked"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let mounts: Vec<&str> = spec
            .containers
            .iter()
            .flat_map(|c| c.volume_mounts.iter().flatten())
            .map(|m| m.mount_path.as_str())
            .collect();
        assert!(
            !mounts.iter().any(|m| m.contains("serviceaccount")),
            "no token mounted: {mounts:?}"
        );
        let secrets: Vec<String> = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        assert_eq!(
            secrets,
            ["hooked-tls"],
            "the pods mount the serving Secret only"
        );
    }

    // The CA Secret (with its key) is in the operator's namespace only.
    let in_workload = Api::<Secret>::namespaced(client.clone(), "team-hooks");
    let in_operator = Api::<Secret>::namespaced(client.clone(), NS);
    let ca = in_operator.get("hooked-ca").await.unwrap();
    assert!(ca.data.as_ref().unwrap().contains_key("ca.key"));
    assert!(in_workload.get_opt("hooked-ca").await.unwrap().is_none());
    let serving = in_workload.get("hooked-tls").await.unwrap();
    assert!(!serving.data.as_ref().unwrap().contains_key("ca.key"));

    // A CA Secret planted beside the workload, with the operator's labels and the Initializer's
    // owner reference copied (what that namespace's administrators can write), while the real
    // one is gone: it is removed and never used; the operator makes a CA of its own.
    let mut planted = ca.clone();
    planted.metadata = kube::api::ObjectMeta {
        name: Some("hooked-ca".into()),
        namespace: Some("team-hooks".into()),
        labels: ca.metadata.labels.clone(),
        owner_references: ca.metadata.owner_references.clone(),
        ..Default::default()
    };
    let planted_ca = "-----BEGIN CERTIFICATE-----\nplanted\n-----END CERTIFICATE-----\n";
    planted.data = Some(std::collections::BTreeMap::from([
        (
            "ca.crt".to_string(),
            k8s_openapi::ByteString(planted_ca.into()),
        ),
        (
            "ca.key".to_string(),
            k8s_openapi::ByteString(b"planted key".to_vec()),
        ),
    ]));
    in_operator
        .delete("hooked-ca", &DeleteParams::default())
        .await
        .unwrap();
    create_object(&in_workload, &planted).await;
    let took = wait_for("the planted CA removed", Duration::from_secs(60), || {
        let (w, o) = (in_workload.clone(), in_operator.clone());
        async move {
            w.get_opt("hooked-ca").await.unwrap().is_none()
                && o.get_opt("hooked-ca").await.unwrap().is_some()
        }
    })
    .await;
    println!("the planted CA was removed {took:?} after it appeared");
    let current = in_operator.get("hooked-ca").await.unwrap();
    assert_ne!(current.data, planted.data, "the planted CA is never used");
    // The new CA's first pods may not serve its certificate yet, so the configuration can be
    // out of the path for a moment: judge the one registered, as read when it was (a second
    // read may find it out of the path again).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let registered = loop {
        if let Some(found) = configuration(&client, "initializer-hooked").await {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the configuration was never registered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let trusted = registered
        .webhooks
        .and_then(|w| w.first()?.client_config.ca_bundle.clone());
    assert!(
        trusted.is_some_and(|b| !String::from_utf8_lossy(&b.0).contains("planted")),
        "the API server never trusts the planted CA"
    );
}

/// Creates each of `objects` with `api`, in order.
async fn create_each<K>(api: &Api<K>, objects: &[K])
where
    K: Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    for object in objects {
        api.create(&PostParams::default(), object).await.unwrap();
    }
}

/// A client that makes every call of `admin` as `user` (impersonation).
fn impersonating(admin: &Client, user: &str) -> Client {
    let user: http::HeaderValue = user.parse().unwrap();
    let admin = admin.clone();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let (admin, user) = (admin.clone(), user.clone());
        async move {
            request.headers_mut().insert("Impersonate-User", user);
            admin.send(request).await
        }
    });
    Client::new(service, "default")
}

/// The operator with the bundle's RBAC only (its ServiceAccount, impersonated): it cannot
/// deploy in a labelled namespace until the workloads ClusterRole is bound there.
async fn the_operators_own_rights_reach_a_labelled_namespace_only_once_bound(
    cluster: &TestCluster,
) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let admin = install(cluster).await;
    // The bundle's RBAC, as `install` applies it (not its Deployment: the operator runs here).
    let plan = initializer_packaging::install::plan(
        &initializer_packaging::bundle::generate().unwrap(),
        NS,
    )
    .unwrap();
    create_each(&Api::namespaced(admin.clone(), NS), &plan.service_accounts).await;
    let cluster_roles = Api::<ClusterRole>::all(admin.clone());
    create_each(&cluster_roles, &plan.cluster_roles).await;
    create_each(&cluster_roles, &plan.bundle_cluster_roles).await;
    create_each(
        &Api::<ClusterRoleBinding>::all(admin.clone()),
        &plan.cluster_role_bindings,
    )
    .await;
    create_each(&Api::<Role>::namespaced(admin.clone(), NS), &plan.roles).await;
    create_each(
        &Api::<RoleBinding>::namespaced(admin.clone(), NS),
        &plan.role_bindings,
    )
    .await;
    let operator = impersonating(
        &admin,
        &format!("system:serviceaccount:{NS}:{OPERATOR_ACCOUNT}"),
    );
    let _operator = spawn_as(cluster, operator.clone(), "operator-test-0");

    // In its own namespace it deploys and registers with the Role alone.
    let api = create(&admin, &guard("home")).await;
    wait_registered(
        &admin,
        "home",
        "registration at home",
        Duration::from_secs(120),
    )
    .await;

    // Labelled but not bound: the API server refuses the operator, and the status says so.
    labelled_namespace(&admin, "team-hooks").await;
    let mut away = guard("away");
    away.spec.namespace = Some("team-hooks".into());
    create_object(&api, &away).await;
    let refusal = "the refusal in the status";
    wait_last_error(&api, "away", "forbidden", refusal, Duration::from_secs(30)).await;
    let error = api.get("away").await.unwrap().status.unwrap().details["lastError"].clone();
    println!("before the RoleBinding: {error}");
    assert!(configuration(&admin, "initializer-away").await.is_none());
    // Nothing of the operator's reaches there, and it cannot read that namespace's Secrets.
    let secrets: Api<Secret> = Api::namespaced(operator.clone(), "team-hooks");
    assert!(matches!(
        secrets.list(&ListParams::default()).await,
        Err(kube::Error::Api(status)) if status.code == 403
    ));
    let everywhere: Api<Secret> = Api::all(operator.clone());
    assert!(matches!(
        everywhere.list(&ListParams::default()).await,
        Err(kube::Error::Api(status)) if status.code == 403
    ));

    // Bound: deployed and registered, with the bundle's rights only.
    bind_workloads_role(&admin, "team-hooks").await;
    let took = wait_registered(
        &admin,
        "away",
        "registration away",
        Duration::from_secs(120),
    )
    .await;
    println!("registered {took:?} after the RoleBinding");
    assert!(secrets.get_opt("away-tls").await.unwrap().is_some());
}
