//! An account holding the operator's cluster-wide rules, as the bundle's ClusterRole grants them,
//! for tests that act as the operator through impersonation ([`super::TestCluster::client_as`]):
//! only the real control plane authorizes.

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

/// Makes the ServiceAccount `account` in `namespace` (and the namespace) and binds it to a
/// ClusterRole of [`initializer_packaging::rbac::cluster_rules`], named after the namespace;
/// returns the account's user name.
pub async fn operator_account(admin: &Client, namespace: &str, account: &str) -> String {
    let rbac = "rbac.authorization.k8s.io/v1";
    apply(
        &Api::<Namespace>::all(admin.clone()),
        ("Namespace", "v1"),
        json!({"metadata": {"name": namespace}}),
    )
    .await;
    apply(
        &Api::<ServiceAccount>::namespaced(admin.clone(), namespace),
        ("ServiceAccount", "v1"),
        json!({"metadata": {"name": account, "namespace": namespace}}),
    )
    .await;
    let role = format!("{namespace}-operator");
    apply(
        &Api::<ClusterRole>::all(admin.clone()),
        ("ClusterRole", rbac),
        json!({
            "metadata": {"name": role},
            "rules": initializer_packaging::rbac::cluster_rules(),
        }),
    )
    .await;
    apply(
        &Api::<ClusterRoleBinding>::all(admin.clone()),
        ("ClusterRoleBinding", rbac),
        json!({
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }),
    )
    .await;
    initializer_packaging::bounds::service_account_user(namespace, account)
}

/// Applies `body` as a `kind` of `api_version` (server-side, forced, as the test's manager)
/// with `api`, under the name in its metadata.
async fn apply<K>(api: &Api<K>, (kind, api_version): (&str, &str), mut body: serde_json::Value)
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    body["kind"] = json!(kind);
    body["apiVersion"] = json!(api_version);
    let name = body["metadata"]["name"].as_str().unwrap().to_owned();
    let params = PatchParams::apply("operator-test").force();
    api.patch(&name, &params, &Patch::Apply(body))
        .await
        .unwrap();
}
