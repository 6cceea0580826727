//! What is the operator's and what is not: a managed configuration without its Initializer is
//! removed and an edited one put back, while a configuration, a ConfigMap or a policy of the
//! name the operator would use that someone else made is left alone (a conflict in the status),
//! and uninstall removes the operator's fallbacks only.

use std::time::Duration;

use initializer_crds::Initializer;
use initializer_crds::constants::{INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::TestCluster;
use crate::{NS, configuration, guard, start, wait_for_event, wait_registered, wait_removed};

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

async fn a_managed_configuration_without_an_initializer_is_removed(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let orphan: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {
            "name": "initializer-gone",
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, INITIALIZER_LABEL: "gone"},
        },
        "webhooks": [],
    }))
    .unwrap();
    let foreign: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "someone-elses"},
        "webhooks": [],
    }))
    .unwrap();
    configs
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    configs
        .create(&PostParams::default(), &orphan)
        .await
        .unwrap();
    wait_removed(
        &client,
        "initializer-gone",
        "the orphan to be removed",
        Duration::from_secs(20),
    )
    .await;
    assert!(configuration(&client, "someone-elses").await.is_some());
}

async fn an_edited_configuration_is_put_back_within_a_probe_period(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    Api::<Initializer>::all(client.clone())
        .create(&PostParams::default(), &guard("edited"))
        .await
        .unwrap();
    wait_registered(
        &client,
        "initializer-edited",
        "registration",
        Duration::from_secs(90),
    )
    .await;
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
    let theirs: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "initializer-theirs", "labels": {"team": "platform"}},
        "webhooks": [],
    }))
    .unwrap();
    configs
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &guard("theirs"))
        .await
        .unwrap();
    wait_for(
        "the conflict in the status",
        Duration::from_secs(60),
        || {
            let a = api.clone();
            async move {
                a.get("theirs").await.unwrap().status.is_some_and(|s| {
                    s.details
                        .get("lastError")
                        .is_some_and(|e| e.contains("not created by the operator"))
                })
            }
        },
    )
    .await;
    let untouched = |c: &MutatingWebhookConfiguration| {
        c.labels().get("team").map(String::as_str) == Some("platform")
            && !c.labels().contains_key(MANAGED_BY_LABEL)
            && c.webhooks.as_ref().is_none_or(Vec::is_empty)
    };
    assert!(untouched(&configs.get("initializer-theirs").await.unwrap()));
    api.delete("theirs", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the Initializer to go", Duration::from_secs(30), || {
        let a = api.clone();
        async move { a.get_opt("theirs").await.unwrap().is_none() }
    })
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
    config_maps
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
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
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &guard("borrowed"))
        .await
        .unwrap();
    wait_for(
        "the conflict in the status",
        Duration::from_secs(60),
        || {
            let a = api.clone();
            async move {
                a.get("borrowed").await.unwrap().status.is_some_and(|s| {
                    s.details
                        .get("lastError")
                        .is_some_and(|e| e.contains("not created by the operator"))
                })
            }
        },
    )
    .await;
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

    api.delete("borrowed", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the Initializer to go", Duration::from_secs(30), || {
        let a = api.clone();
        async move { a.get_opt("borrowed").await.unwrap().is_none() }
    })
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
    let theirs: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"team": "platform"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["configmaps"],
            }]},
            "validations": [{"expression": "true"}],
        },
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
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
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &fenced).await.unwrap();
    wait_registered(
        &client,
        "initializer-fenced",
        "registration",
        Duration::from_secs(90),
    )
    .await;
    assert!(untouched(&policies.get(&name).await.unwrap()));

    api.delete("fenced", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the Initializer to go", Duration::from_secs(30), || {
        let a = api.clone();
        async move { a.get_opt("fenced").await.unwrap().is_none() }
    })
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
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["configmaps"],
                }]},
                "validations": [{"expression": "true"}],
            },
        }))
        .unwrap();
        policies
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }))
        .unwrap();
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "webhooks": [],
        }))
        .unwrap();
        configs
            .create(&PostParams::default(), &config)
            .await
            .unwrap();
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
    policies
        .create(
            &PostParams::default(),
            &initializer_operator::guard::policy(),
        )
        .await
        .unwrap();
    bindings
        .create(
            &PostParams::default(),
            &initializer_operator::guard::binding(),
        )
        .await
        .unwrap();
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
