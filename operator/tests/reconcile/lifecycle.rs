//! One Initializer's life on the cluster: registered once its pods answer, out of the path when
//! they stop, back when they recover, out and staying out while suspended (even when its workload
//! cannot be applied), and on deletion its configuration removed before it goes, through refused
//! deletes and past a registration still in flight; and a registered configuration the API
//! server really calls, which no label on the object can get past.

use std::time::{Duration, Instant};

use initializer_crds::Phase;
use initializer_crds::constants::{
    EXCLUDE_LABEL, INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, TIMEOUT_SECONDS_ENV,
};
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::namespaces::terminating_namespace;
use crate::support::TestCluster;
use crate::support::install::create_namespace;
use crate::{
    NS, configuration, create, create_object, create_registered, delete_and_wait_gone, guard,
    is_ready, patch_spec, pods_of, start, wait_configuration_where, wait_for_event, wait_phase,
    wait_pods, wait_ready_pod, wait_registered, wait_removed,
};

on_backends!(sandbox and real:
    an_initializer_is_registered_when_answering_removed_when_frozen_and_cleaned_up_on_delete,
    a_secret_labelled_excluded_in_a_user_namespace_is_still_refused,
    suspend_removes_the_configuration_even_when_the_workload_cannot_be_applied,
);
on_backends! {
    /// Failing the API server's deletes on purpose needs the sandbox's fault table: kube-apiserver
    /// has no fault injection, and admission cannot refuse deleting a webhook configuration.
    sandbox only: a_removal_the_api_server_refuses_is_retried_until_it_is_confirmed,
}
on_backends! {
    /// Holding a registration in flight needs the sandbox's fault table: kube-apiserver has no
    /// fault injection.
    sandbox only: deleting_an_initializer_waits_out_a_registration_in_flight_and_leaves_nothing,
}

fn has_timeout_env(pod: &Pod, value: &str) -> bool {
    pod.spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .any(|container| {
            container
                .env
                .iter()
                .flatten()
                .any(|env| env.name == TIMEOUT_SECONDS_ENV && env.value.as_deref() == Some(value))
        })
}

/// Makes the next `times` requests of `verb` on the webhook configuration `name` suffer `action`
/// (the sandbox's fault table).
fn inject_on_configuration(
    cluster: &TestCluster,
    verb: &str,
    name: &str,
    action: initializer_sandbox::FaultAction,
    times: u32,
) {
    let resource = "mutatingwebhookconfigurations";
    let target = (verb, "admissionregistration.k8s.io", resource, name);
    cluster.inject(target, action, times).unwrap();
}

fn short_secret(name: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "type": "Opaque",
        "stringData": {"password": "short"},
    }))
    .unwrap()
}

async fn an_initializer_is_registered_when_answering_removed_when_frozen_and_cleaned_up_on_delete(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    let api = create(&client, &guard("guard")).await;

    // Registered only once the Deployment is available and the probes answer.
    let took = wait_registered(&client, "guard", "registration", Duration::from_secs(90)).await;
    println!("registered {took:?} after creation");
    let config = configuration(&client, "initializer-guard").await.unwrap();
    assert_eq!(config.labels()[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
    assert_eq!(config.labels()[INITIALIZER_LABEL], "guard");
    let hook = &config.webhooks.as_ref().unwrap()[0];
    assert!(hook.client_config.ca_bundle.is_some());
    assert!(
        hook.object_selector
            .iter()
            .flat_map(|s| s.match_expressions.iter().flatten())
            .all(|r| r.key != EXCLUDE_LABEL),
        "no label exempts an object"
    );
    wait_phase(&client, "guard", Phase::Registered).await;
    let init = api.get("guard").await.unwrap();
    assert!(
        init.finalizers()
            .contains(&"initializer.dev/cleanup".to_string())
    );
    let status = init.status.unwrap();
    assert_eq!(status.registered, Some(true));
    assert!(status.certificate_not_after.is_some());
    println!(
        "last probe through the API server: {:?} ms",
        status.last_probe_latency_millis
    );
    assert!(status.last_probe_latency_millis.is_some());
    // Every condition holds, but the two that say it does not stand ready.
    let abnormal = [
        initializer_crds::conditions::RECONCILING,
        initializer_crds::conditions::STALLED,
    ];
    assert!(
        status.conditions.iter().all(|c| c.status
            == if abnormal.contains(&c.type_.as_str()) {
                "False"
            } else {
                "True"
            }),
        "{:?}",
        status.conditions
    );
    wait_for_event(&client, "Registered", "").await;

    // A spec change reaches the registered configuration.
    patch_spec(&api, "guard", json!({"timeoutSeconds": 7})).await;
    let what = "the new timeout in the configuration";
    wait_configuration_where(
        &client,
        "initializer-guard",
        what,
        Duration::from_secs(10),
        |c| {
            c.and_then(|c| c.webhooks)
                .is_some_and(|w| w[0].timeout_seconds == Some(7))
        },
    )
    .await;

    // The registration is real: the API server calls the initializer, which refuses short secrets.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let refused = secrets
        .create(&PostParams::default(), &short_secret("too-short"))
        .await;
    assert!(refused.is_err(), "the guard should refuse a short secret");

    // The new timeout reaches the initializer too (INITIALIZER_TIMEOUT_SECONDS), which rolls
    // the Deployment: wait until the one pod left is the updated, ready one before freezing it.
    let what = "the rollout of the new timeout to the initializer";
    wait_pods(&client, "guard", what, Duration::from_secs(30), |items| {
        items.len() == 1 && has_timeout_env(&items[0], "7") && is_ready(&items[0])
    })
    .await;

    // Freeze the initializer: the configuration goes (fail open) and creates pass again.
    let pod = pods_of(&client, "guard").await.remove(0);
    cluster.freeze(NS, &pod.name_any()).await.unwrap();
    let took = wait_removed(
        &client,
        "guard",
        "deregistration after a freeze",
        Duration::from_secs(20),
    )
    .await;
    println!("deregistered {took:?} after the freeze");
    wait_phase(&client, "guard", Phase::Unresponsive).await;
    create_object(&secrets, &short_secret("passes-while-deregistered")).await;
    wait_for_event(&client, "Deregistered", "").await;

    // Thaw: registered again after enough good probes.
    cluster.thaw(NS, &pod.name_any()).await.unwrap();
    wait_registered(
        &client,
        "guard",
        "registration after the thaw",
        Duration::from_secs(60),
    )
    .await;

    // Suspend: removed and stays removed, the workload keeps running.
    patch_spec(&api, "guard", json!({"suspend": true})).await;
    wait_removed(
        &client,
        "guard",
        "deregistration on suspend",
        Duration::from_secs(10),
    )
    .await;
    wait_phase(&client, "guard", Phase::Suspended).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        configuration(&client, "initializer-guard").await.is_none(),
        "re-registered while suspended"
    );
    assert_eq!(pods_of(&client, "guard").await.len(), 1);

    // Delete: the finalizer removes the configuration, then lets the Initializer go.
    patch_spec(&api, "guard", json!({"suspend": false})).await;
    wait_registered(
        &client,
        "guard",
        "registration after resuming",
        Duration::from_secs(60),
    )
    .await;
    let gone = "the Initializer to be gone";
    delete_and_wait_gone(&api, "guard", gone, Duration::from_secs(20)).await;
    assert!(configuration(&client, "initializer-guard").await.is_none());
}

async fn a_secret_labelled_excluded_in_a_user_namespace_is_still_refused(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    create_namespace(&client, "team-a").await;
    create_registered(&client, &guard("guard")).await;
    let hook = &configuration(&client, "initializer-guard")
        .await
        .unwrap()
        .webhooks
        .unwrap()[0];
    let rule = &hook.rules.as_ref().unwrap()[0];
    assert_eq!(
        rule.scope.as_deref(),
        Some("Namespaced"),
        "the default scope"
    );
    // Any author may set the label; it must not take the Secret past the guard. The API server
    // loads a new configuration within moments, so a create that passes is deleted and retried.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "team-a");
    let mut labelled = short_secret("labelled");
    labelled.metadata.namespace = Some("team-a".into());
    labelled.metadata.labels = Some([(EXCLUDE_LABEL.to_string(), "x".to_string())].into());
    wait_for(
        "the guard to refuse a short Secret labelled excluded",
        Duration::from_secs(20),
        || {
            let secrets = secrets.clone();
            let labelled = labelled.clone();
            async move {
                match secrets.create(&PostParams::default(), &labelled).await {
                    Err(kube::Error::Api(status)) => {
                        assert!(
                            status.message.contains("at least 20 characters"),
                            "{status:?}"
                        );
                        true
                    }
                    Err(e) => panic!("failed to create the labelled Secret: {e}"),
                    Ok(_) => {
                        secrets
                            .delete("labelled", &DeleteParams::default())
                            .await
                            .unwrap();
                        false
                    }
                }
            }
        },
    )
    .await;
}

async fn suspend_removes_the_configuration_even_when_the_workload_cannot_be_applied(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    let api = create_registered(&client, &guard("brake")).await;
    // The same change moves the workload to an allowed namespace that refuses new content:
    // applying it fails, and the break-glass switch must still take the initializer out of
    // the path.
    terminating_namespace(&client, "closing").await;
    patch_spec(
        &api,
        "brake",
        json!({"suspend": true, "namespace": "closing"}),
    )
    .await;
    let took = wait_removed(
        &client,
        "brake",
        "the suspend to remove it",
        Duration::from_secs(10),
    )
    .await;
    println!("suspended {took:?} after the change, with the workload failing to apply");
    wait_phase(&client, "brake", Phase::Suspended).await;
    wait_for_event(&client, "Suspended", "spec.suspend").await;
    // It stays removed across resyncs and failures.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(configuration(&client, "initializer-brake").await.is_none());
}

async fn a_removal_the_api_server_refuses_is_retried_until_it_is_confirmed(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    create_registered(&client, &guard("stubborn")).await;
    // The next eight deletes of the configuration fail with a 500: more than any fixed number of
    // quick retries absorbs.
    let refused = initializer_sandbox::FaultAction::Error {
        code: 500,
        message: Some("injected by the test".into()),
    };
    inject_on_configuration(cluster, "delete", "initializer-stubborn", refused, 8);
    let pod = pods_of(&client, "stubborn").await.remove(0);
    cluster.freeze(NS, &pod.name_any()).await.unwrap();
    let took = wait_removed(
        &client,
        "stubborn",
        "the removal to get through",
        Duration::from_secs(30),
    )
    .await;
    println!("removed {took:?} after the freeze, through eight refused deletes");
    wait_for_event(&client, "Deregistered", "").await;
}

async fn deleting_an_initializer_waits_out_a_registration_in_flight_and_leaves_nothing(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    // The registration (a server-side apply: a patch) takes 3 s to be answered.
    let held = initializer_sandbox::FaultAction::Delay { millis: 3000 };
    inject_on_configuration(cluster, "patch", "initializer-inflight", held, 1);
    let api = create(&client, &guard("inflight")).await;
    wait_ready_pod(&client, "inflight").await;
    // Two good probes 100 ms apart start the registration; delete while it is held.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        configuration(&client, "initializer-inflight")
            .await
            .is_none()
    );
    delete_and_wait_gone(
        &api,
        "inflight",
        "the Initializer to go",
        Duration::from_secs(30),
    )
    .await;
    // The registration that was in flight landed before the cleanup removed it: nothing is left,
    // not even for a moment after the Initializer is gone.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(4) {
        assert!(
            configuration(&client, "initializer-inflight")
                .await
                .is_none(),
            "a registration in flight outlived its Initializer"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
