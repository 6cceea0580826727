//! What is the operator's and what is not: a managed configuration without its Initializer is
//! removed and an edited one put back, while a configuration, a ConfigMap or a policy of the
//! name the operator would use that someone else made is left alone (a conflict in the status),
//! and uninstall removes the operator's fallbacks only.

use std::time::Duration;

use initializer_crds::Initializer;
use initializer_crds::constants::{INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::TestCluster;
use crate::{
    NS, configuration, create, create_object, create_registered, delete_and_wait_gone, guard,
    start, wait_for_event, wait_last_error, wait_removed,
};

on_backends!(sandbox and real:
    a_managed_configuration_without_an_initializer_is_removed,
    an_edited_configuration_is_put_back_within_a_probe_period,
    a_configuration_of_the_same_name_that_is_not_ours_is_left_alone,
    a_users_config_map_with_the_initializers_name_is_never_taken_over,
);
on_backends! {
    /// The sandbox serves no ValidatingAdmissionPolicy, which a fallback is.
    real only:
        a_policy_with_the_fallbacks_name_that_is_not_ours_is_left_alone,
        uninstall_deregisters_the_operators_fallbacks_and_leaves_other_policies_alone,
}

/// A webhook configuration with `metadata` and no webhooks.
fn without_webhooks(metadata: serde_json::Value) -> MutatingWebhookConfiguration {
    serde_json::from_value(json!({"metadata": metadata, "webhooks": []})).unwrap()
}

/// A ValidatingAdmissionPolicy with `metadata` that admits every ConfigMap create.
fn admitting_policy(
    metadata: serde_json::Value,
) -> k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy {
    serde_json::from_value(json!({
        "metadata": metadata,
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["configmaps"],
            }]},
            "validations": [{"expression": "true"}],
        },
    }))
    .unwrap()
}

/// Waits up to 60 s for the conflict with an object the operator did not create in the status
/// of the Initializer `name`.
async fn wait_for_conflict(api: &Api<Initializer>, name: &str) {
    let (part, what) = ("not created by the operator", "the conflict in the status");
    wait_last_error(api, name, part, what, Duration::from_secs(60)).await;
}

async fn a_managed_configuration_without_an_initializer_is_removed(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let orphan = without_webhooks(json!({
        "name": "initializer-gone",
        "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, INITIALIZER_LABEL: "gone"},
    }));
    let foreign = without_webhooks(json!({"name": "someone-elses"}));
    create_object(&configs, &foreign).await;
    create_object(&configs, &orphan).await;
    wait_removed(
        &client,
        "gone",
        "the orphan to be removed",
        Duration::from_secs(20),
    )
    .await;
    assert!(configuration(&client, "someone-elses").await.is_some());
}

async fn an_edited_configuration_is_put_back_within_a_probe_period(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    create_registered(&client, &guard("edited")).await;
    let wanted = configuration(&client, "initializer-edited").await.unwrap();
    let hook = |c: &MutatingWebhookConfiguration| c.webhooks.clone().unwrap().remove(0);
    // Someone edits the live object as `kubectl edit` would (an update by another manager):
    // fail open, match nothing, and trust another CA.
    let mut edited = wanted.clone();
    let webhook = &mut edited.webhooks.as_mut().unwrap()[0];
    webhook.failure_policy = Some("Ignore".into());
    webhook.object_selector =
        Some(serde_json::from_value(json!({"matchLabels": {"nothing": "matches"}})).unwrap());
    webhook.client_config.ca_bundle = Some(k8s_openapi::ByteString(b"not a CA".to_vec()));
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .replace("initializer-edited", &PostParams::default(), &edited)
        .await
        .unwrap();
    let took = wait_for("the edit to be undone", Duration::from_secs(5), || {
        let c = client.clone();
        let wanted = hook(&wanted);
        async move {
            configuration(&c, "initializer-edited")
                .await
                .is_some_and(|now| {
                    let now = hook(&now);
                    now.failure_policy == wanted.failure_policy
                        && now.object_selector == wanted.object_selector
                        && now.client_config.ca_bundle == wanted.client_config.ca_bundle
                })
        }
    })
    .await;
    println!("the edited configuration was put back {took:?} after the edit");
}

async fn a_configuration_of_the_same_name_that_is_not_ours_is_left_alone(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    // An administrator's own configuration that happens to have the name the operator would use.
    let theirs =
        without_webhooks(json!({"name": "initializer-theirs", "labels": {"team": "platform"}}));
    create_object(&configs, &theirs).await;
    let api = create(&client, &guard("theirs")).await;
    wait_for_conflict(&api, "theirs").await;
    let untouched = |c: &MutatingWebhookConfiguration| {
        c.labels().get("team").map(String::as_str) == Some("platform")
            && !c.labels().contains_key(MANAGED_BY_LABEL)
            && c.webhooks.as_ref().is_none_or(Vec::is_empty)
    };
    assert!(untouched(&configs.get("initializer-theirs").await.unwrap()));
    delete_and_wait_gone(
        &api,
        "theirs",
        "the Initializer to go",
        Duration::from_secs(30),
    )
    .await;
    assert!(untouched(&configs.get("initializer-theirs").await.unwrap()));
}

async fn a_users_config_map_with_the_initializers_name_is_never_taken_over(cluster: &TestCluster) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let (client, _operator) = start(cluster).await;
    let name = initializer_operator::naming::names("borrowed").config_map;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    // A user's ConfigMap that happens to have the name the operator would give its own.
    let theirs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "labels": {"team": "platform"}},
        "data": {"config.yaml": "theirs: true\n"},
    }))
    .unwrap();
    create_object(&config_maps, &theirs).await;
    let untouched = |c: &ConfigMap| {
        c.data
            .as_ref()
            .and_then(|d| d.get("config.yaml"))
            .map(String::as_str)
            == Some("theirs: true\n")
            && c.owner_references().is_empty()
            && c.labels().get("team").map(String::as_str) == Some("platform")
            && !c.labels().contains_key(MANAGED_BY_LABEL)
    };
    let api = create(&client, &guard("borrowed")).await;
    wait_for_conflict(&api, "borrowed").await;
    let status = api.get("borrowed").await.unwrap().status.unwrap();
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Conflict" && c.status == "True" && c.message.contains(&name)),
        "{:?}",
        status.conditions
    );
    wait_for_event(&client, "Conflict", &name).await;
    assert!(untouched(&config_maps.get(&name).await.unwrap()));
    // Nothing of the workload was written either: the conflict is found before any apply.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), NS);
    let base = initializer_operator::naming::names("borrowed").base;
    assert!(deployments.get_opt(&base).await.unwrap().is_none());
    assert!(
        configuration(&client, "initializer-borrowed")
            .await
            .is_none()
    );

    delete_and_wait_gone(
        &api,
        "borrowed",
        "the Initializer to go",
        Duration::from_secs(30),
    )
    .await;
    // Long enough for garbage collection to have deleted it, had it been adopted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(untouched(&config_maps.get(&name).await.unwrap()));
}

async fn a_policy_with_the_fallbacks_name_that_is_not_ours_is_left_alone(cluster: &TestCluster) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
    let (client, _operator) = start(cluster).await;
    let name = initializer_operator::naming::names("fenced").fallback;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    // An administrator's own policy that happens to have the name of the fallback.
    let theirs = admitting_policy(json!({"name": name, "labels": {"team": "platform"}}));
    create_object(&policies, &theirs).await;
    let untouched = |p: &ValidatingAdmissionPolicy| {
        p.labels().get("team").map(String::as_str) == Some("platform")
            && !p.labels().contains_key(MANAGED_BY_LABEL)
            && p.spec
                .as_ref()
                .and_then(|s| s.validations.as_ref())
                .is_some_and(|v| v.len() == 1 && v[0].expression == "true")
    };
    let mut fenced = guard("fenced");
    fenced.spec.fallback = Some(
        serde_json::from_value(
            json!({"validations": [{"expression": "object.metadata.name != 'forbidden'"}]}),
        )
        .unwrap(),
    );
    let api = create_registered(&client, &fenced).await;
    assert!(untouched(&policies.get(&name).await.unwrap()));

    delete_and_wait_gone(
        &api,
        "fenced",
        "the Initializer to go",
        Duration::from_secs(30),
    )
    .await;
    let kept = policies.get_opt(&name).await.unwrap();
    assert!(
        kept.as_ref().is_some_and(untouched),
        "the administrator's policy was deleted or changed: {kept:?}"
    );
}

async fn uninstall_deregisters_the_operators_fallbacks_and_leaves_other_policies_alone(
    cluster: &TestCluster,
) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let client = cluster.client();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let ours = json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE, INITIALIZER_LABEL: "guard"});
    let theirs = json!({"team": "platform"});
    for (name, labels) in [("ours", &ours), ("theirs", &theirs)] {
        let policy = admitting_policy(json!({"name": name, "labels": labels}));
        create_object(&policies, &policy).await;
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }))
        .unwrap();
        create_object(&bindings, &binding).await;
        create_object(
            &configs,
            &without_webhooks(json!({"name": name, "labels": labels})),
        )
        .await;
    }

    initializer_packaging::install::deregister(&client)
        .await
        .unwrap();

    assert!(policies.get_opt("ours").await.unwrap().is_none());
    assert!(bindings.get_opt("ours").await.unwrap().is_none());
    assert!(configs.get_opt("ours").await.unwrap().is_none());
    assert!(policies.get_opt("theirs").await.unwrap().is_some());
    assert!(bindings.get_opt("theirs").await.unwrap().is_some());
    assert!(configs.get_opt("theirs").await.unwrap().is_some());

    // The guard on Initializers (no Initializer label) outlives deregistration, and goes with
    // the CRDs.
    let guard = initializer_operator::guard::GUARD_NAME;
    create_object(&policies, &initializer_operator::guard::policy()).await;
    create_object(&bindings, &initializer_operator::guard::binding()).await;
    initializer_packaging::install::deregister(&client)
        .await
        .unwrap();
    assert!(policies.get_opt(guard).await.unwrap().is_some());
    assert!(bindings.get_opt(guard).await.unwrap().is_some());
    initializer_packaging::install::remove_guard(&client)
        .await
        .unwrap();
    assert!(policies.get_opt(guard).await.unwrap().is_none());
    assert!(bindings.get_opt(guard).await.unwrap().is_none());
}
