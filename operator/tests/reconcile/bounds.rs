//! The operator's bounds: its account may change and delete only the webhook configurations it
//! made. RBAC grants the operator `patch` and `delete` on every webhook configuration; the bounds
//! (a ValidatingAdmissionPolicy the operator creates at startup for the account it runs as) take
//! back what is not its own. The attacks are run as the operator's account (impersonated by the
//! admin). Kubernetes applies no admission policy to admission policies, so the same account can
//! still delete the bounds: the last step shows that limit, which the security model states.

use std::time::Duration;

use initializer_crds::constants::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use initializer_operator::bounds::{self, Outcome};
use initializer_packaging::bounds::{BOUNDS_MESSAGE, name};
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::create_object;
use crate::support::TestCluster;
use crate::support::account::operator_account;

on_backends! {
    /// Impersonation and ValidatingAdmissionPolicy are the real API server's; the sandbox
    /// authorizes nothing (sandbox/README.md).
    real only:
        the_operators_account_may_not_touch_admission_configuration_it_did_not_make,
}

const NAMESPACE: &str = "bounds-test";
const ACCOUNT: &str = "operator";
/// The webhook configuration someone else made.
const FOREIGN: &str = "someone-elses-webhook";

/// A webhook configuration without webhooks, labelled as the operator's when `ours`.
fn webhook_configuration(name: &str, ours: bool) -> MutatingWebhookConfiguration {
    let labels = if ours {
        json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": labels},
    }))
    .unwrap()
}

/// Whether `result` is the bounds' refusal (not RBAC's, not anything else).
fn refused_by_bounds<T: std::fmt::Debug>(result: &Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(status)) if status.code == 403 && status.message.contains(BOUNDS_MESSAGE))
}

async fn the_operators_account_may_not_touch_admission_configuration_it_did_not_make(
    cluster: &TestCluster,
) {
    let admin = cluster.client();
    let user = operator_account(&admin, NAMESPACE, ACCOUNT).await;
    let operator = cluster.client_as(&user).await.unwrap();
    let bounds_name = name(&user).unwrap();

    // Run as an administrator, the operator bounds nobody; run as its account, it bounds that.
    assert!(matches!(
        bounds::put_in_place(&admin).await.unwrap(),
        Outcome::NotAnAccount(_)
    ));
    assert_eq!(
        bounds::put_in_place(&operator).await.unwrap(),
        Outcome::InPlace(bounds_name.clone())
    );
    assert_eq!(
        bounds::put_in_place(&operator).await.unwrap(),
        Outcome::InPlace(bounds_name.clone()),
        "a restart finds the bounds as it makes them"
    );

    let admin_webhooks: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(operator.clone());
    create_object(&admin_webhooks, &webhook_configuration(FOREIGN, false)).await;
    // The API server loads a new policy within moments: until then a dry run passes.
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    wait_for("the bounds in force", Duration::from_secs(20), || {
        let (webhooks, dry_delete) = (webhooks.clone(), dry_delete.clone());
        async move { refused_by_bounds(&webhooks.delete(FOREIGN, &dry_delete).await) }
    })
    .await;

    // Someone else's webhook configuration: not deleted, not changed, not taken over.
    let attacks = [
        (
            "delete",
            webhooks
                .delete(FOREIGN, &DeleteParams::default())
                .await
                .map(|_| ()),
        ),
        (
            "annotate",
            webhooks
                .patch(
                    FOREIGN,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"x": "y"}}})),
                )
                .await
                .map(|_| ()),
        ),
        (
            "label as the operator's",
            webhooks
                .patch(
                    FOREIGN,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}}}),
                    ),
                )
                .await
                .map(|_| ()),
        ),
        (
            "create one unlabelled",
            webhooks
                .create(
                    &PostParams::default(),
                    &webhook_configuration("unlabelled", false),
                )
                .await
                .map(|_| ()),
        ),
    ];
    for (attack, result) in &attacks {
        assert!(refused_by_bounds(result), "{attack}: {result:?}");
    }
    let foreign = admin_webhooks.get(FOREIGN).await.unwrap();
    assert!(foreign.metadata.labels.unwrap_or_default().is_empty());
    assert!(foreign.metadata.annotations.is_none());

    // Its own: created, changed and deleted as before.
    create_object(&webhooks, &webhook_configuration("its-own", true)).await;
    webhooks
        .patch(
            "its-own",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"x": "y"}}})),
        )
        .await
        .unwrap();
    webhooks
        .delete("its-own", &DeleteParams::default())
        .await
        .unwrap();

    // An administrator is not bounded; bounds an administrator changed are reported, not undone.
    let loosen = Patch::Merge(json!({"spec": {"failurePolicy": "Ignore"}}));
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .patch(&bounds_name, &PatchParams::default(), &loosen)
        .await
        .unwrap();
    assert_eq!(
        bounds::put_in_place(&operator).await.unwrap(),
        Outcome::Differ(bounds_name.clone())
    );
    admin_webhooks
        .delete(FOREIGN, &DeleteParams::default())
        .await
        .unwrap();

    // The limit: the API server applies no admission policy to requests on admission policies,
    // so the account's RBAC alone decides, and it may delete the bounds (docs/src/security).
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(operator.clone());
    bindings
        .delete(&bounds_name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| {
            panic!("the API server refused the bounds' deletion ({e}): the security model's limit no longer holds, say so there")
        });
}
