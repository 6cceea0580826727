//! Reconcile tests: the real operator (`run_with`: controller, supervisor, leader election)
//! deploying a real SDK-built initializer (examples/test_initializer.rs) as local processes, and
//! registering, deregistering and cleaning up for real. Each test has one body and runs twice:
//! on the sandbox (`<test>::on_sandbox`) and on the real control plane, kube-apiserver and
//! kube-controller-manager from the Go modules (`<test>::on_real`; see `support`).

// Test helpers outside #[test] functions may unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use initializer_crds::constants::{
    EXCLUDE_LABEL, INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, TIMEOUT_SECONDS_ENV,
    WORKLOADS_LABEL, WORKLOADS_LABEL_VALUE,
};
use initializer_crds::{Initializer, Phase};
use initializer_packaging::rbac::WORKLOADS_CLUSTER_ROLE;
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::operator::{self, Operator};
use support::{Backend, TestCluster, refusal};

const NS: &str = "initializer-system";
/// The operator's service account, as the bundle names it.
const OPERATOR_ACCOUNT: &str = initializer_packaging::manifest::OPERATOR_NAME;
const IMAGE_REPOSITORY: &str = "ghcr.io/initializer-dev/secret-guard-initializer";
const IMAGE: &str = "ghcr.io/initializer-dev/secret-guard-initializer:test";

/// Generates, for each test body `async fn name(cluster: &TestCluster)`, the tests
/// `name::on_sandbox` and `name::on_real`.
macro_rules! on_both_backends {
    ($($test:ident),+ $(,)?) => {$(
        mod $test {
            use super::{Backend, run};

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_sandbox() {
                run(Backend::Sandbox, |cluster| Box::pin(super::$test(cluster))).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_real() {
                run(Backend::Real, |cluster| Box::pin(super::$test(cluster))).await;
            }
        }
    )+};
}

on_both_backends!(
    an_initializer_is_registered_when_answering_removed_when_frozen_and_cleaned_up_on_delete,
    a_refused_spec_is_marked_invalid_and_never_registered,
    a_managed_configuration_without_an_initializer_is_removed,
    losing_every_ready_endpoint_deregisters_without_waiting_for_probes,
    a_second_replica_takes_over_when_the_leader_stops,
    a_workload_that_cannot_be_deployed_is_reported_in_the_status,
    a_secret_labelled_excluded_in_a_user_namespace_is_still_refused,
    rules_the_api_server_would_refuse_are_marked_invalid_and_protected_ones_never_stored,
    suspend_removes_the_configuration_even_when_the_workload_cannot_be_applied,
    an_edited_configuration_is_put_back_within_a_probe_period,
    a_configuration_of_the_same_name_that_is_not_ours_is_left_alone,
    an_old_leader_thawed_after_losing_its_lease_writes_nothing,
    a_registration_landing_during_an_outage_is_removed_at_once,
    a_users_config_map_with_the_initializers_name_is_never_taken_over,
    a_certificate_the_api_server_would_reject_is_never_registered,
    a_handler_that_panics_under_a_fail_closed_policy_is_never_registered,
    one_hung_pod_of_two_is_caught_within_a_probe_period,
    a_replaced_ca_stays_trusted_until_every_pod_serves_the_new_one,
    a_workload_runs_only_in_a_labelled_namespace_as_its_own_account_without_the_ca_key,
);

/// Runs one test body on `backend`, with the test initializer as the guard's image.
async fn run<F>(backend: Backend, body: F)
where
    F: for<'a> FnOnce(&'a TestCluster) -> BoxFuture<'a, ()>,
{
    operator::run_with_test_initializer(backend, IMAGE_REPOSITORY, body).await;
}

/// A replica with leader election and the default 15 s lease, as pod `pod_name`, making its
/// API calls with `client`. (A shorter lease makes a loaded machine's slow renewals cost the
/// leader its right to write, by design.)
fn spawn_as(cluster: &TestCluster, client: Client, pod_name: &str) -> Operator {
    let flags = ["--leader-election", "--lease-duration-seconds", "15"];
    Operator::spawn_with(cluster, client, NS, pod_name, &flags)
}

/// A replica as [`spawn_as`] starts one, with the cluster's client.
fn spawn(cluster: &TestCluster, pod_name: &str) -> Operator {
    spawn_as(cluster, cluster.client(), pod_name)
}

/// Installs the CRD and the operator's namespace, and starts one operator replica.
async fn start(cluster: &TestCluster) -> (Client, Operator) {
    let client = install(cluster).await;
    let operator = spawn(cluster, "operator-test-0");
    (client, operator)
}

/// Installs the CRD and the operator's namespace.
async fn install(cluster: &TestCluster) -> Client {
    let client = cluster.client();
    support::install::install_crd_and_namespace(&client, NS).await;
    client
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

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|status| status.conditions.iter().flatten())
        .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

fn guard(name: &str) -> Initializer {
    serde_json::from_value(json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {"name": name},
        "spec": {
            "image": IMAGE,
            "replicas": 1,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
            "health": {"periodSeconds": 1, "failureThreshold": 2, "successThreshold": 2, "latencyBudgetMillis": 500},
        }
    }))
    .unwrap()
}

async fn configuration(client: &Client, name: &str) -> Option<MutatingWebhookConfiguration> {
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

async fn phase(client: &Client, name: &str) -> Option<Phase> {
    Api::<Initializer>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|i| i.status)
        .and_then(|s| s.phase)
}

async fn status_of(client: &Client, name: &str) -> initializer_crds::InitializerStatus {
    Api::<Initializer>::all(client.clone())
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// Waits for an Event with `reason` whose note contains `note_part`. Events are written after
/// the change they report, so a test that sees the change may still have to wait for them.
async fn wait_for_event(client: &Client, reason: &str, note_part: &str) {
    let events = Api::<Event>::namespaced(client.clone(), "default");
    wait_for(
        &format!("a {reason} event mentioning {note_part:?}"),
        Duration::from_secs(10),
        || {
            let events = events.clone();
            async move {
                events
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .any(|e| {
                        e.reason.as_deref() == Some(reason)
                            && e.note.as_deref().is_some_and(|n| n.contains(note_part))
                    })
            }
        },
    )
    .await;
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
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &guard("guard"))
        .await
        .unwrap();

    // Registered only once the Deployment is available and the probes answer.
    let took = wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-guard").await.is_some() }
    })
    .await;
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
    wait_for("phase Registered", Duration::from_secs(10), || {
        let c = client.clone();
        async move { phase(&c, "guard").await == Some(Phase::Registered) }
    })
    .await;
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
    assert!(
        status.conditions.iter().all(|c| c.status == "True"),
        "{:?}",
        status.conditions
    );
    wait_for_event(&client, "Registered", "").await;

    // A spec change reaches the registered configuration.
    api.patch(
        "guard",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"timeoutSeconds": 7}})),
    )
    .await
    .unwrap();
    wait_for(
        "the new timeout in the configuration",
        Duration::from_secs(10),
        || {
            let c = client.clone();
            async move {
                configuration(&c, "initializer-guard")
                    .await
                    .and_then(|c| c.webhooks)
                    .is_some_and(|w| w[0].timeout_seconds == Some(7))
            }
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
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = format!("{INITIALIZER_LABEL}=guard");
    wait_for(
        "the rollout of the new timeout to the initializer",
        Duration::from_secs(30),
        || {
            let p = pods.clone();
            let selector = selector.clone();
            async move {
                let items = p
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .unwrap()
                    .items;
                items.len() == 1 && has_timeout_env(&items[0], "7") && is_ready(&items[0])
            }
        },
    )
    .await;

    // Freeze the initializer: the configuration goes (fail open) and creates pass again.
    let pod = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .remove(0);
    cluster.freeze(NS, &pod.name_any()).await.unwrap();
    let took = wait_for(
        "deregistration after a freeze",
        Duration::from_secs(20),
        || {
            let c = client.clone();
            async move { configuration(&c, "initializer-guard").await.is_none() }
        },
    )
    .await;
    println!("deregistered {took:?} after the freeze");
    wait_for("phase Unresponsive", Duration::from_secs(10), || {
        let c = client.clone();
        async move { phase(&c, "guard").await == Some(Phase::Unresponsive) }
    })
    .await;
    secrets
        .create(
            &PostParams::default(),
            &short_secret("passes-while-deregistered"),
        )
        .await
        .unwrap();
    wait_for_event(&client, "Deregistered", "").await;

    // Thaw: registered again after enough good probes.
    cluster.thaw(NS, &pod.name_any()).await.unwrap();
    wait_for(
        "registration after the thaw",
        Duration::from_secs(60),
        || {
            let c = client.clone();
            async move { configuration(&c, "initializer-guard").await.is_some() }
        },
    )
    .await;

    // Suspend: removed and stays removed, the workload keeps running.
    api.patch(
        "guard",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .unwrap();
    wait_for("deregistration on suspend", Duration::from_secs(10), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-guard").await.is_none() }
    })
    .await;
    wait_for("phase Suspended", Duration::from_secs(10), || {
        let c = client.clone();
        async move { phase(&c, "guard").await == Some(Phase::Suspended) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        configuration(&client, "initializer-guard").await.is_none(),
        "re-registered while suspended"
    );
    assert_eq!(
        pods.list(&ListParams::default().labels(&format!("{INITIALIZER_LABEL}=guard")))
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Delete: the finalizer removes the configuration, then lets the Initializer go.
    api.patch(
        "guard",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .unwrap();
    wait_for(
        "registration after resuming",
        Duration::from_secs(60),
        || {
            let c = client.clone();
            async move { configuration(&c, "initializer-guard").await.is_some() }
        },
    )
    .await;
    api.delete("guard", &DeleteParams::default()).await.unwrap();
    wait_for(
        "the Initializer to be gone",
        Duration::from_secs(20),
        || {
            let a = api.clone();
            async move { a.get_opt("guard").await.unwrap().is_none() }
        },
    )
    .await;
    assert!(configuration(&client, "initializer-guard").await.is_none());
}

async fn a_refused_spec_is_marked_invalid_and_never_registered(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let mut bad = guard("bad");
    bad.spec.namespaces = Some(initializer_crds::NamespaceScope {
        include: vec![NS.to_string()],
        ..Default::default()
    });
    let (valid, message) = refusal::create_and_wait_invalid(&client, &bad).await;
    assert_eq!(valid, "False");
    assert!(message.contains("operator's namespace"), "{message}");
    wait_for_event(&client, "Refused", "").await;
    assert!(configuration(&client, "initializer-bad").await.is_none());
    assert!(
        refusal::nothing_deployed(&client, NS, "bad").await,
        "nothing is deployed for a refused spec"
    );
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
    wait_for("the orphan to be removed", Duration::from_secs(20), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-gone").await.is_none() }
    })
    .await;
    assert!(configuration(&client, "someone-elses").await.is_some());
}

async fn losing_every_ready_endpoint_deregisters_without_waiting_for_probes(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let api: Api<Initializer> = Api::all(client.clone());
    let mut fast = guard("fast");
    // Probes every 10 s with two failures needed: only the endpoints can remove it within 5 s.
    fast.spec.health = Some(initializer_crds::HealthPolicy {
        period_seconds: 10,
        failure_threshold: 2,
        success_threshold: 1,
        latency_budget_millis: 1000,
    });
    api.create(&PostParams::default(), &fast).await.unwrap();
    wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-fast").await.is_some() }
    })
    .await;
    // Registration needs one ready endpoint, not a finished rollout: wait until the only pod
    // left is the ready one, so that killing it leaves no endpoint behind.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels(&format!("{INITIALIZER_LABEL}=fast"));
    wait_for(
        "one ready pod and no other",
        Duration::from_secs(30),
        || {
            let (pods, selector) = (pods.clone(), selector.clone());
            async move {
                let items = pods.list(&selector).await.unwrap().items;
                items.len() == 1 && is_ready(&items[0])
            }
        },
    )
    .await;
    let pod = pods.list(&selector).await.unwrap().items.remove(0);
    cluster.kill(NS, &pod.name_any()).await.unwrap();
    let took = wait_for(
        "deregistration after the kill",
        Duration::from_secs(5),
        || {
            let c = client.clone();
            async move { configuration(&c, "initializer-fast").await.is_none() }
        },
    )
    .await;
    println!("deregistered {took:?} after the last ready endpoint was killed");
    wait_for_event(&client, "Deregistered", "ready endpoint").await;
}

async fn a_second_replica_takes_over_when_the_leader_stops(cluster: &TestCluster) {
    let (client, first_replica) = start(cluster).await;
    let second_replica = spawn(cluster, "operator-test-1");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), NS);
    let holder = || {
        let leases = leases.clone();
        async move {
            leases
                .get_opt("initializer-operator")
                .await
                .unwrap()
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
        }
    };
    wait_for("a leader", Duration::from_secs(10), || {
        let h = holder();
        async move { h.await.is_some() }
    })
    .await;
    let first = holder().await.unwrap();
    // Only the leader reconciles: an Initializer created now is handled exactly once.
    Api::<Initializer>::all(client.clone())
        .create(&PostParams::default(), &guard("led"))
        .await
        .unwrap();
    wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-led").await.is_some() }
    })
    .await;
    if first == "operator-test-0" {
        first_replica.stop();
    } else {
        second_replica.stop();
    }
    let took = wait_for("the other replica to lead", Duration::from_secs(15), || {
        let h = holder();
        let first = first.clone();
        async move { h.await.is_some_and(|now| now != first) }
    })
    .await;
    println!("leadership moved {took:?} after the leader stopped");
    // The new leader adopts the registration instead of removing a healthy initializer.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(configuration(&client, "initializer-led").await.is_some());
}

/// Waits for a failed deployment of `name` to show in its status (`details.lastError`).
async fn wait_for_deploy_error(api: &Api<Initializer>, name: &str, what: &str) {
    wait_for(what, Duration::from_secs(20), || {
        let a = api.clone();
        async move {
            a.get(name).await.unwrap().status.is_some_and(|s| {
                s.details
                    .get("lastError")
                    .is_some_and(|e| e.contains("failed to"))
            })
        }
    })
    .await;
}

async fn a_workload_that_cannot_be_deployed_is_reported_in_the_status(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let api: Api<Initializer> = Api::all(client.clone());
    // An allowed namespace that refuses new content (it is being deleted).
    terminating_namespace(&client, "closing").await;
    let mut lost = guard("lost");
    lost.spec.namespace = Some("closing".into());
    api.create(&PostParams::default(), &lost).await.unwrap();
    wait_for_deploy_error(&api, "lost", "the error in the status").await;
    assert!(configuration(&client, "initializer-lost").await.is_none());
    // Moved to a namespace that takes it, the workload deploys and the error goes.
    allowed_namespace(&client, "open").await;
    api.patch(
        "lost",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"namespace": "open"}})),
    )
    .await
    .unwrap();
    wait_for("the error to clear", Duration::from_secs(30), || {
        let a = api.clone();
        async move {
            a.get("lost")
                .await
                .unwrap()
                .status
                .is_some_and(|s| !s.details.contains_key("lastError"))
        }
    })
    .await;
    // Moved back while supervised: the failure after that edit reaches the status too (the
    // supervisor writes onto the version the failing reconcile read, not the one before the
    // edit, which the API server would refuse).
    api.patch(
        "lost",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"namespace": "closing"}})),
    )
    .await
    .unwrap();
    wait_for_deploy_error(&api, "lost", "the error in the status again").await;
}

async fn a_secret_labelled_excluded_in_a_user_namespace_is_still_refused(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap(),
        )
        .await
        .unwrap();
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &guard("guard"))
        .await
        .unwrap();
    wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-guard").await.is_some() }
    })
    .await;
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
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &guard("brake"))
        .await
        .unwrap();
    wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-brake").await.is_some() }
    })
    .await;
    // The same change moves the workload to an allowed namespace that refuses new content:
    // applying it fails, and the break-glass switch must still take the initializer out of
    // the path.
    terminating_namespace(&client, "closing").await;
    api.patch(
        "brake",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true, "namespace": "closing"}})),
    )
    .await
    .unwrap();
    let took = wait_for("the suspend to remove it", Duration::from_secs(10), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-brake").await.is_none() }
    })
    .await;
    println!("suspended {took:?} after the change, with the workload failing to apply");
    wait_for("phase Suspended", Duration::from_secs(10), || {
        let c = client.clone();
        async move { phase(&c, "brake").await == Some(Phase::Suspended) }
    })
    .await;
    wait_for_event(&client, "Suspended", "spec.suspend").await;
    // It stays removed across resyncs and failures.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(configuration(&client, "initializer-brake").await.is_none());
}

async fn an_edited_configuration_is_put_back_within_a_probe_period(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    Api::<Initializer>::all(client.clone())
        .create(&PostParams::default(), &guard("edited"))
        .await
        .unwrap();
    wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-edited").await.is_some() }
    })
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

/// Failing the API server's deletes on purpose needs the sandbox's fault table.
mod a_removal_the_api_server_refuses_is_retried_until_it_is_confirmed {
    use super::{Backend, run};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_sandbox() {
        run(Backend::Sandbox, |cluster| {
            Box::pin(
                super::a_removal_the_api_server_refuses_is_retried_until_it_is_confirmed(cluster),
            )
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "kube-apiserver has no fault injection, and admission cannot refuse deleting a webhook configuration"]
    async fn on_real() {
        run(Backend::Real, |cluster| {
            Box::pin(
                super::a_removal_the_api_server_refuses_is_retried_until_it_is_confirmed(cluster),
            )
        })
        .await;
    }
}

async fn a_removal_the_api_server_refuses_is_retried_until_it_is_confirmed(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    Api::<Initializer>::all(client.clone())
        .create(&PostParams::default(), &guard("stubborn"))
        .await
        .unwrap();
    wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-stubborn").await.is_some() }
    })
    .await;
    // The next eight deletes of the configuration fail with a 500: more than any fixed number of
    // quick retries absorbs.
    cluster
        .inject(
            (
                "delete",
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "initializer-stubborn",
            ),
            initializer_sandbox::FaultAction::Error {
                code: 500,
                message: Some("injected by the test".into()),
            },
            8,
        )
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = pods
        .list(&ListParams::default().labels(&format!("{INITIALIZER_LABEL}=stubborn")))
        .await
        .unwrap()
        .items
        .remove(0);
    cluster.freeze(NS, &pod.name_any()).await.unwrap();
    let took = wait_for(
        "the removal to get through",
        Duration::from_secs(30),
        || {
            let c = client.clone();
            async move { configuration(&c, "initializer-stubborn").await.is_none() }
        },
    )
    .await;
    println!("removed {took:?} after the freeze, through eight refused deletes");
    wait_for_event(&client, "Deregistered", "").await;
}

/// Holding a registration in flight needs the sandbox's fault table.
mod deleting_an_initializer_waits_out_a_registration_in_flight_and_leaves_nothing {
    use super::{Backend, run};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_sandbox() {
        run(Backend::Sandbox, |cluster| {
            Box::pin(
                super::deleting_an_initializer_waits_out_a_registration_in_flight_and_leaves_nothing(
                    cluster,
                ),
            )
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "kube-apiserver has no fault injection to hold a registration in flight"]
    async fn on_real() {
        run(Backend::Real, |cluster| {
            Box::pin(
                super::deleting_an_initializer_waits_out_a_registration_in_flight_and_leaves_nothing(
                    cluster,
                ),
            )
        })
        .await;
    }
}

async fn deleting_an_initializer_waits_out_a_registration_in_flight_and_leaves_nothing(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    // The registration (a server-side apply: a patch) takes 3 s to be answered.
    cluster
        .inject(
            (
                "patch",
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "initializer-inflight",
            ),
            initializer_sandbox::FaultAction::Delay { millis: 3000 },
            1,
        )
        .unwrap();
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &guard("inflight"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels(&format!("{INITIALIZER_LABEL}=inflight"));
    wait_for("a ready pod", Duration::from_secs(60), || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            pods.list(&selector)
                .await
                .unwrap()
                .items
                .iter()
                .any(is_ready)
        }
    })
    .await;
    // Two good probes 100 ms apart start the registration; delete while it is held.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        configuration(&client, "initializer-inflight")
            .await
            .is_none()
    );
    api.delete("inflight", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the Initializer to go", Duration::from_secs(30), || {
        let a = api.clone();
        async move { a.get_opt("inflight").await.unwrap().is_none() }
    })
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

/// One operator replica running as its own process, so that it can be frozen (SIGSTOP) past
/// its lease like a paused VM or a stalled node; killed when dropped.
struct ReplicaProcess {
    child: std::process::Child,
}

impl ReplicaProcess {
    fn spawn(cluster: &TestCluster, identity: &str) -> Self {
        let binary =
            support::built("initializer-operator", "--bin", "initializer-operator").unwrap();
        let child = cluster
            .command(&binary)
            .args([
                "run",
                "--namespace",
                NS,
                "--metrics-addr",
                "127.0.0.1:0",
                "--leader-election",
                "--lease-duration-seconds",
                "3",
                "--pod-name",
                identity,
            ])
            .env("RUST_LOG", "info")
            .spawn()
            .unwrap();
        Self { child }
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} failed");
    }
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        self.signal("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn lease_holder(client: &Client) -> Option<String> {
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), NS)
        .get_opt("initializer-operator")
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

async fn an_old_leader_thawed_after_losing_its_lease_writes_nothing(cluster: &TestCluster) {
    let client = install(cluster).await;
    let old = ReplicaProcess::spawn(cluster, "replica-old");
    wait_for("the first replica to lead", Duration::from_secs(20), || {
        let c = client.clone();
        async move { lease_holder(&c).await.as_deref() == Some("replica-old") }
    })
    .await;
    let _new = ReplicaProcess::spawn(cluster, "replica-new");
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &guard("stale"))
        .await
        .unwrap();
    wait_for(
        "registration by the leader",
        Duration::from_secs(90),
        || {
            let c = client.clone();
            async move { configuration(&c, "initializer-stale").await.is_some() }
        },
    )
    .await;
    let registered = configuration(&client, "initializer-stale").await.unwrap();
    // Frozen past its 3 s lease: the other replica takes over and suspends the initializer,
    // which removes the configuration the frozen one still believes registered.
    old.signal("-STOP");
    wait_for("the other replica to lead", Duration::from_secs(15), || {
        let c = client.clone();
        async move { lease_holder(&c).await.as_deref() == Some("replica-new") }
    })
    .await;
    api.patch(
        "stale",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .unwrap();
    wait_for(
        "the new leader to remove it",
        Duration::from_secs(15),
        || {
            let c = client.clone();
            async move {
                configuration(&c, "initializer-stale").await.is_none()
                    && phase(&c, "stale").await == Some(Phase::Suspended)
            }
        },
    )
    .await;
    old.signal("-CONT");
    // Its probes and timers fire at once on waking, with the view from before the freeze (the
    // configuration registered, not suspended): it must write neither the configuration nor
    // the Initializer.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(4) {
        assert!(
            configuration(&client, "initializer-stale").await.is_none(),
            "the thawed replica registered the configuration again"
        );
        assert_eq!(
            phase(&client, "stale").await,
            Some(Phase::Suspended),
            "the thawed replica wrote its stale status"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lease_holder(&client).await.as_deref(), Some("replica-new"));
    // The one write no check can stop: a registration the old replica had already sent when it
    // froze, landing now. The leader removes it as soon as it appears (well within the 30 s
    // resync), because the Initializer is suspended.
    let took = land_late_and_wait_for_its_removal(&client, registered).await;
    println!("a registration landing after the suspend was removed {took:?} after it appeared");
}

/// Creates `registered` again, as a registration sent before a freeze lands after it, and waits
/// (at most 5 s, far below the 30 s resync) until the operator removes it; returns how long
/// that took.
async fn land_late_and_wait_for_its_removal(
    client: &Client,
    registered: MutatingWebhookConfiguration,
) -> Duration {
    let name = registered.name_any();
    let mut late = registered;
    late.metadata.resource_version = None;
    late.metadata.uid = None;
    late.metadata.creation_timestamp = None;
    late.metadata.managed_fields = None;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &late)
        .await
        .unwrap();
    wait_for(
        "the late registration to go",
        Duration::from_secs(5),
        || {
            let c = client.clone();
            let name = name.clone();
            async move { configuration(&c, &name).await.is_none() }
        },
    )
    .await
}

/// Waits until the Initializer `name` and its Deployment have not changed for `quiet`, the
/// Deployment showing no available replica.
async fn wait_until_unchanged_for(client: &Client, name: &str, quiet: Duration) {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), NS);
    let initializers: Api<Initializer> = Api::all(client.clone());
    let versions = || async {
        let deployment = deployments.get(name).await.unwrap();
        let available = deployment
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0);
        let initializer = initializers.get(name).await.unwrap();
        (
            available,
            deployment.resource_version(),
            initializer.resource_version(),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = versions().await;
    let mut since = Instant::now();
    while last.0 > 0 || since.elapsed() < quiet {
        assert!(
            Instant::now() < deadline,
            "{name} and its Deployment kept changing (or available) for 60 s: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = versions().await;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
}

async fn a_registration_landing_during_an_outage_is_removed_at_once(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &guard("outage"))
        .await
        .unwrap();
    wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-outage").await.is_some() }
    })
    .await;
    let registered = configuration(&client, "initializer-outage").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels(&format!("{INITIALIZER_LABEL}=outage"));
    let frozen_at = Instant::now();
    for pod in pods.list(&selector).await.unwrap().items {
        cluster.freeze(NS, &pod.name_any()).await.unwrap();
    }
    wait_for(
        "deregistration after the freeze",
        Duration::from_secs(20),
        || {
            let c = client.clone();
            async move {
                configuration(&c, "initializer-outage").await.is_none()
                    && phase(&c, "outage").await == Some(Phase::Unresponsive)
            }
        },
    )
    .await;
    // Once what the outage changes has settled (the pod unready, the Deployment unavailable,
    // the status written), nothing else makes the operator look again for a while: the
    // resync is 30 s away and the status refresh 25 s after the last write, which is at most
    // `settled` and a poll before the landing. (The frozen pod's liveness probe restarts it
    // about 30 s after the freeze.)
    let settled = Duration::from_secs(2);
    wait_until_unchanged_for(&client, "outage", settled).await;
    println!(
        "the outage settled {:?} after the freeze",
        frozen_at.elapsed()
    );
    let first_removal = removal_record(&client).await;
    assert!(
        first_removal
            .as_ref()
            .is_some_and(|(_, _, deregistered)| !deregistered.is_empty()),
        "the outage's first removal is recorded: {first_removal:?}"
    );
    // The probes of a deregistered initializer look at its pods, not at the configuration: only
    // the watch on the configurations sees this one, which would fail every matching create.
    let took = land_late_and_wait_for_its_removal(&client, registered).await;
    println!("a registration landing during the outage was removed {took:?} after it appeared");
    wait_for_event(
        &client,
        "StrayConfigurationRemoved",
        "appeared while the initializer is out of the path",
    )
    .await;
    // The Event goes out before the status write that follows the removal: watch the status
    // for a while rather than read it once.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(2) {
        assert_eq!(
            removal_record(&client).await,
            first_removal,
            "the outage's record is the first removal's"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// When the outage of Initializer `outage` started, degraded and deregistered it (not when it
/// ended: the frozen pod's liveness probe restarts it about 30 s after the freeze).
async fn removal_record(client: &Client) -> Option<(String, String, String)> {
    let outage = status_of(client, "outage").await.last_outage?;
    let at = |t: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
        t.map(|t| t.0.to_string()).unwrap_or_default()
    };
    Some((
        at(outage.started_at),
        at(outage.degraded_at),
        at(outage.deregistered_at),
    ))
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

async fn rules_the_api_server_would_refuse_are_marked_invalid_and_protected_ones_never_stored(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    let api: Api<Initializer> = Api::all(client.clone());

    // The CRD's CEL rule refuses a wildcard reaching serviceaccounts/token at the API server.
    let mut token = guard("token");
    token.spec.rules[0].resources = vec!["serviceaccounts/*".into()];
    match api.create(&PostParams::default(), &token).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains("must not intercept"), "{status:?}");
        }
        other => panic!("a rule reaching serviceaccounts/token was stored: {other:?}"),
    }
    // The API server's CEL evaluation of the generated rule agrees with the table the validator
    // reads (dry runs: nothing is stored).
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    for (group, resource) in [
        ("", "*/*"),
        ("", "*"),
        ("", "nodes/status"),
        ("", "pods/*"),
        ("", "serviceaccounts"),
        ("*", "clusterroles"),
        ("*", "*/token"),
        ("*", "pods"),
        ("*", "deployments/scale"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("flowcontrol.apiserver.k8s.io", "anything"),
        ("apps", "*/*"),
    ] {
        let mut case = guard("case");
        case.spec.rules[0].api_groups = vec![group.into()];
        case.spec.rules[0].resources = vec![resource.into()];
        let protected = !initializer_crds::protected_reached(&[group.into()], resource).is_empty();
        match api.create(&dry_run, &case).await {
            Err(kube::Error::Api(status)) if protected && status.code == 422 => {
                assert!(status.message.contains("must not intercept"), "{status:?}")
            }
            Ok(_) if !protected => {}
            other => panic!("{group:?} {resource}: protected {protected}, got {other:?}"),
        }
    }

    // `*` beside another version passes the schema, but a webhook configuration with it would
    // be refused with a 422: the operator refuses the spec first.
    let mut versions = guard("versions");
    versions.spec.rules[0].api_versions = vec!["*".into(), "v1".into()];
    let (valid, message) = refusal::create_and_wait_invalid(&client, &versions).await;
    assert_eq!(valid, "False");
    assert!(message.contains("spec.rules[0].apiVersions"), "{message}");
    assert!(
        configuration(&client, "initializer-versions")
            .await
            .is_none()
    );
    assert!(
        refusal::nothing_deployed(&client, NS, "versions").await,
        "nothing is deployed for a refused spec"
    );
}

/// The certificate and key the test initializer serves instead of the mounted ones.
const CERT_ENV: &str = "TEST_INITIALIZER_CERT_PEM";
const KEY_ENV: &str = "TEST_INITIALIZER_KEY_PEM";

/// The guard `name` with `env` set on its pods (the test initializer's switches).
fn guard_with_env(name: &str, env: &[(&str, &str)]) -> Initializer {
    let mut init = guard(name);
    init.spec.env = env
        .iter()
        .map(|(name, value)| k8s_openapi::api::core::v1::EnvVar {
            name: name.to_string(),
            value: Some(value.to_string()),
            ..Default::default()
        })
        .collect();
    init
}

/// The `Responding` condition's reason and the last probe error of Initializer `name`.
async fn responding(client: &Client, name: &str) -> Option<(String, String)> {
    let status = Api::<Initializer>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()?
        .status?;
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Responding")?
        .reason
        .clone();
    let error = status
        .details
        .get("lastProbeError")
        .cloned()
        .unwrap_or_default();
    Some((reason, error))
}

/// Waits up to `timeout` until the probes of `name` fail with `reason` and an error containing
/// `part`, checking all along that the configuration never appears.
async fn wait_for_probe_failure(
    client: &Client,
    name: &str,
    reason: &str,
    part: &str,
    timeout: Duration,
) {
    let configuration_name = format!("initializer-{name}");
    let took = wait_for(
        &format!("probes of {name} failing with {reason} ({part:?})"),
        timeout,
        || {
            let (c, configuration_name) = (client.clone(), configuration_name.clone());
            async move {
                assert!(
                    configuration(&c, &configuration_name).await.is_none(),
                    "{configuration_name} was registered although every call to it would fail"
                );
                responding(&c, name)
                    .await
                    .is_some_and(|(r, error)| r == reason && error.contains(part))
            }
        },
    )
    .await;
    let (_, error) = responding(client, name).await.unwrap();
    println!("{name}: {reason} after {took:?}: {error}");
}

/// Patches the env of the guard `name`'s pods.
async fn set_guard_env(client: &Client, name: &str, env: &[(&str, &str)]) {
    let env: Vec<_> = env
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    Api::<Initializer>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"env": env}})),
        )
        .await
        .unwrap();
}

async fn a_certificate_the_api_server_would_reject_is_never_registered(cluster: &TestCluster) {
    use initializer_operator::{naming, tls};
    let (client, _operator) = start(cluster).await;
    let names = naming::names("pinned");
    let dns = tls::dns_names(&names.base, NS);
    let now = jiff::Timestamp::now();
    // Signed by a CA the configuration's caBundle does not carry.
    let stranger = tls::issue(&tls::new_ca(now).unwrap(), &dns, now).unwrap();
    Api::<Initializer>::all(client.clone())
        .create(
            &PostParams::default(),
            &guard_with_env(
                "pinned",
                &[(CERT_ENV, &stranger.cert_pem), (KEY_ENV, &stranger.key_pem)],
            ),
        )
        .await
        .unwrap();
    wait_for_probe_failure(
        &client,
        "pinned",
        "CertificateRejected",
        "UnknownIssuer",
        Duration::from_secs(90),
    )
    .await;
    // The path the probe used to take verifies nothing: through the API server's service
    // proxy the same pod answers well, which is how a wrong caBundle used to pass.
    assert!(answers_through_the_service_proxy(&client, "pinned").await);

    // The operator's CA, but a certificate for another name, then an expired one.
    let secret = Api::<Secret>::namespaced(client.clone(), NS)
        .get(&names.ca_secret)
        .await
        .unwrap();
    let data = secret.data.unwrap();
    let text = |key: &str| String::from_utf8(data[key].0.clone()).unwrap();
    let ca = tls::Ca {
        cert_pem: text("ca.crt"),
        key_pem: text("ca.key"),
    };
    let other_name = tls::issue(&ca, &tls::dns_names("someone-else", NS), now).unwrap();
    set_guard_env(
        &client,
        "pinned",
        &[
            (CERT_ENV, &other_name.cert_pem),
            (KEY_ENV, &other_name.key_pem),
        ],
    )
    .await;
    wait_for_probe_failure(
        &client,
        "pinned",
        "CertificateRejected",
        "not valid for name",
        Duration::from_secs(90),
    )
    .await;
    let long_ago = now - jiff::SignedDuration::from_hours(24 * 400);
    let expired = tls::issue(&ca, &dns, long_ago).unwrap();
    set_guard_env(
        &client,
        "pinned",
        &[(CERT_ENV, &expired.cert_pem), (KEY_ENV, &expired.key_pem)],
    )
    .await;
    wait_for_probe_failure(
        &client,
        "pinned",
        "CertificateRejected",
        "expired",
        Duration::from_secs(90),
    )
    .await;
    assert!(answers_through_the_service_proxy(&client, "pinned").await);

    // Serving the operator's own certificate again, it is registered.
    set_guard_env(&client, "pinned", &[]).await;
    wait_for(
        "registration with the operator's certificate",
        Duration::from_secs(90),
        || {
            let c = client.clone();
            async move { configuration(&c, "initializer-pinned").await.is_some() }
        },
    )
    .await;
}

async fn a_handler_that_panics_under_a_fail_closed_policy_is_never_registered(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    Api::<Initializer>::all(client.clone())
        .create(
            &PostParams::default(),
            &guard_with_env("panicky", &[("TEST_INITIALIZER_MODE", "panic")]),
        )
        .await
        .unwrap();
    // The SDK denies with code 500 for a handler that panics under the guard's fail-closed
    // policy: registered, it would refuse every Secret in the cluster. The status says so
    // within a few probes of the pod being ready, whatever the earlier probes said (no ready
    // endpoint yet).
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels(&format!("{INITIALIZER_LABEL}=panicky"));
    wait_for("a ready pod", Duration::from_secs(60), || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            pods.list(&selector)
                .await
                .unwrap()
                .items
                .iter()
                .any(is_ready)
        }
    })
    .await;
    wait_for_probe_failure(
        &client,
        "panicky",
        "InternalError",
        "panic",
        Duration::from_secs(10),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        configuration(&client, "initializer-panicky")
            .await
            .is_none()
    );
}

async fn one_hung_pod_of_two_is_caught_within_a_probe_period(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let mut pair = guard("pair");
    pair.spec.replicas = 2;
    Api::<Initializer>::all(client.clone())
        .create(&PostParams::default(), &pair)
        .await
        .unwrap();
    wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-pair").await.is_some() }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels(&format!("{INITIALIZER_LABEL}=pair"));
    wait_for("two ready pods", Duration::from_secs(60), || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let items = pods.list(&selector).await.unwrap().items;
            items.len() == 2 && items.iter().all(is_ready)
        }
    })
    .await;
    // Both pods answered: the probe's latency with every endpoint dialled.
    wait_for("a good probe of both pods", Duration::from_secs(10), || {
        let c = client.clone();
        async move {
            responding(&c, "pair")
                .await
                .is_some_and(|(reason, _)| reason == "ProbeSucceeded")
        }
    })
    .await;
    measure_probe_latency(cluster, &client, "pair").await;

    let hung = pods.list(&selector).await.unwrap().items.remove(1);
    let ip = hung.status.as_ref().unwrap().pod_ip.clone().unwrap();
    cluster.freeze(NS, &hung.name_any()).await.unwrap();
    // The next probe round dials both and fails: the configuration steps out of the path
    // (degraded, then removed) within a probe period and the latency budget, not by chance.
    let took = wait_for(
        "the configuration out of the path",
        Duration::from_secs(3),
        || {
            let c = client.clone();
            async move {
                configuration(&c, "initializer-pair")
                    .await
                    .is_none_or(|c| initializer_operator::build::is_degraded(&c))
            }
        },
    )
    .await;
    println!(
        "one hung pod of two took the configuration out of the path {took:?} after the freeze"
    );
    // The status follows the configuration's change (it is written after it), naming the pod.
    let endpoint = format!("{ip}:");
    wait_for(
        "the status to name the hung endpoint",
        Duration::from_secs(5),
        || {
            let (c, endpoint) = (client.clone(), endpoint.clone());
            async move {
                responding(&c, "pair").await.is_some_and(|(reason, error)| {
                    reason == "ProbeTimedOut" && error.contains(&endpoint)
                })
            }
        },
    )
    .await;
    cluster.thaw(NS, &hung.name_any()).await.unwrap();
}

async fn a_replaced_ca_stays_trusted_until_every_pod_serves_the_new_one(cluster: &TestCluster) {
    use base64::Engine as _;
    use initializer_operator::{naming, tls};
    let (client, _operator) = start(cluster).await;
    let names = naming::names("rotating");
    let dns = tls::dns_names(&names.base, NS);
    let now = jiff::Timestamp::now();
    // A CA seven years into its ten (due for replacement), and pods serving its certificate.
    let aged = tls::new_ca(now - jiff::SignedDuration::from_hours(24 * 365 * 7)).unwrap();
    let served = tls::issue(&aged, &dns, now).unwrap();
    Api::<Initializer>::all(client.clone())
        .create(
            &PostParams::default(),
            &guard_with_env(
                "rotating",
                &[(CERT_ENV, &served.cert_pem), (KEY_ENV, &served.key_pem)],
            ),
        )
        .await
        .unwrap();
    wait_for_probe_failure(
        &client,
        "rotating",
        "CertificateRejected",
        "UnknownIssuer",
        Duration::from_secs(90),
    )
    .await;
    // The operator finds the aged CA in its Secret, as after seven years of use: it replaces
    // it, and the pods still serving the aged CA's certificate must keep working.
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let aged_data = json!({"data": {
        "ca.crt": b64(&aged.cert_pem),
        "ca.key": b64(&aged.key_pem),
    }});
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let bundle = |c: MutatingWebhookConfiguration| {
        let hook = c.webhooks.unwrap().remove(0);
        String::from_utf8(hook.client_config.ca_bundle.unwrap().0).unwrap()
    };
    let took = wait_for(
        "registration with the aged CA's certificate",
        Duration::from_secs(60),
        || {
            let (c, secrets, aged_data) = (client.clone(), secrets.clone(), aged_data.clone());
            let (ca_secret, aged_pem) = (names.ca_secret.clone(), aged.cert_pem.clone());
            async move {
                if configuration(&c, "initializer-rotating").await.is_some() {
                    return true;
                }
                // A reconcile that read the Secret before the patch writes it back as it was:
                // patch again until the operator has seen the aged CA.
                let seen = secrets
                    .get(&ca_secret)
                    .await
                    .unwrap()
                    .data
                    .is_some_and(|d| {
                        d.get("ca.crt")
                            .is_some_and(|b| String::from_utf8_lossy(&b.0).contains(&aged_pem))
                    });
                if !seen {
                    secrets
                        .patch(
                            &ca_secret,
                            &PatchParams::default(),
                            &Patch::Merge(&aged_data),
                        )
                        .await
                        .unwrap();
                }
                false
            }
        },
    )
    .await;
    let rotated = bundle(
        configuration(&client, "initializer-rotating")
            .await
            .unwrap(),
    );
    let blocks = tls::certificate_blocks(&rotated);
    assert_eq!(blocks.len(), 2, "the new CA and the aged one: {rotated}");
    assert_eq!(format!("{}\n", blocks[1]), aged.cert_pem);
    let new_ca = format!("{}\n", blocks[0]);
    println!("registered {took:?} after the CA was replaced, trusting both CAs");
    // The pods move to the operator's certificate (signed by the new CA): once the probe sees
    // every ready pod serving it, the aged CA leaves the bundle.
    set_guard_env(&client, "rotating", &[]).await;
    let took = wait_for(
        "the aged CA to leave the bundle",
        Duration::from_secs(90),
        || {
            let (c, new_ca) = (client.clone(), new_ca.clone());
            async move {
                configuration(&c, "initializer-rotating")
                    .await
                    .is_some_and(|config| bundle(config) == new_ca)
            }
        },
    )
    .await;
    println!("the aged CA left the bundle {took:?} after the pods moved to the new certificate");
}

/// Whether the initializer `name` answers a probe review well when it is POSTed through the
/// API server's service proxy (the probe's former path), with the test's client.
async fn answers_through_the_service_proxy(client: &Client, name: &str) -> bool {
    use initializer_operator::probe;
    let target = probe::target_for(&guard(name).spec.rules);
    let body = serde_json::to_vec(&probe::review(&target, "through-the-proxy", "test")).unwrap();
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{NS}/services/https:{name}:443/proxy/initialize"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(body)
    .unwrap();
    match client.request_text(request).await {
        Ok(text) => probe::check_answer(text.as_bytes(), "through-the-proxy").is_ok(),
        Err(e) => {
            println!("the service proxy failed: {e}");
            false
        }
    }
}

/// Prints the latency of the operator's probe (every ready endpoint dialled directly, TLS
/// verified against the caBundle; the same code and connector the operator runs) next to that
/// of the probe it replaced (a POST through the API server's service proxy), on the same
/// cluster and pods.
async fn measure_probe_latency(cluster: &TestCluster, client: &Client, name: &str) {
    use initializer_operator::probe;
    let slices =
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(client.clone(), NS)
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
            .await
            .unwrap()
            .items;
    let endpoints: Vec<_> = slices.iter().flat_map(probe::ready_addresses).collect();
    let config = configuration(client, &format!("initializer-{name}"))
        .await
        .unwrap();
    let bundle = config.webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .clone()
        .unwrap()
        .0;
    let target = probe::target_for(&guard(name).spec.rules);
    let connector = cluster.probe_connector();
    let mut direct = Vec::new();
    for _ in 0..10 {
        let outcome = probe::probe(
            &connector,
            &probe::Round {
                service: name,
                namespace: NS,
                ca_bundle: &bundle,
                endpoints: &endpoints,
                target: &target,
                user: "test",
                budget: Duration::from_secs(2),
            },
        )
        .await;
        assert!(outcome.ok, "{outcome:?}");
        direct.push(outcome.latency.as_millis());
    }
    let path = format!("/api/v1/namespaces/{NS}/services/https:{name}:443/proxy/initialize");
    let mut proxied = Vec::new();
    for i in 0..10 {
        let body = serde_json::to_vec(&probe::review(&target, &format!("m{i}"), "test")).unwrap();
        let request = http::Request::post(&path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .unwrap();
        let started = Instant::now();
        client.request_text(request).await.unwrap();
        proxied.push(started.elapsed().as_millis());
    }
    direct.sort_unstable();
    proxied.sort_unstable();
    println!(
        "probe latency (ms), sorted: direct to all {} endpoints {direct:?}; one endpoint through the API server's service proxy (before) {proxied:?}",
        endpoints.len()
    );
}

/// The guard on Initializers needs a ValidatingAdmissionPolicy with the `authorizer` variable and
/// an API server that authorizes; the sandbox has neither (sandbox/README.md).
mod only_those_who_may_create_webhook_configurations_may_create_initializers {
    use super::{Backend, run};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the sandbox serves no ValidatingAdmissionPolicy and enforces no authorization (sandbox/README.md)"]
    async fn on_sandbox() {
        run(Backend::Sandbox, |cluster| {
            Box::pin(
                super::only_those_who_may_create_webhook_configurations_may_create_initializers(
                    cluster,
                ),
            )
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_real() {
        run(Backend::Real, |cluster| {
            Box::pin(
                super::only_those_who_may_create_webhook_configurations_may_create_initializers(
                    cluster,
                ),
            )
        })
        .await;
    }
}

/// Creates `initializer` as `user` (impersonated by the admin client).
async fn create_as(
    client: &Client,
    user: &str,
    initializer: &Initializer,
) -> Result<Initializer, kube::Error> {
    let request = kube::core::Request::new("/apis/initializer.dev/v1alpha1/initializers");
    let mut request = request
        .create(
            &PostParams::default(),
            serde_json::to_vec(initializer).unwrap(),
        )
        .unwrap();
    request
        .headers_mut()
        .insert("Impersonate-User", user.parse().unwrap());
    client.request::<Initializer>(request).await
}

async fn only_those_who_may_create_webhook_configurations_may_create_initializers(
    cluster: &TestCluster,
) {
    use initializer_operator::guard::{GUARD_MESSAGE, GUARD_NAME};
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

    let (client, _operator) = start(cluster).await;
    // The operator applies the guard at startup, labelled as managed.
    wait_for(
        "the guard policy and binding",
        Duration::from_secs(20),
        || {
            let c = client.clone();
            async move {
                let policy = Api::<ValidatingAdmissionPolicy>::all(c.clone())
                    .get_opt(GUARD_NAME)
                    .await
                    .unwrap();
                let binding = Api::<ValidatingAdmissionPolicyBinding>::all(c)
                    .get_opt(GUARD_NAME)
                    .await
                    .unwrap();
                policy.is_some_and(|p| p.labels()[MANAGED_BY_LABEL] == MANAGED_BY_VALUE)
                    && binding.is_some()
            }
        },
    )
    .await;

    // An editor of Initializers (what OLM aggregates into `edit` and `admin`) who may not create
    // webhook configurations.
    Api::<ClusterRole>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "initializer-editor"},
                "rules": [{
                    "apiGroups": ["initializer.dev"],
                    "resources": ["initializers", "initializers/status"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                }],
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "initializer-editor-alice"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "initializer-editor"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    // Refused by the guard (not by RBAC: the message is the policy's). The API server loads a
    // new policy within moments, so a create that passes is deleted and retried.
    let api: Api<Initializer> = Api::all(client.clone());
    wait_for(
        "the guard to refuse the editor",
        Duration::from_secs(20),
        || {
            let (client, api) = (client.clone(), api.clone());
            async move {
                match create_as(&client, "alice", &guard("by-alice")).await {
                    Err(kube::Error::Api(_)) => true,
                    Err(e) => panic!("failed to create as alice: {e}"),
                    Ok(_) => {
                        api.delete("by-alice", &DeleteParams::default())
                            .await
                            .unwrap();
                        false
                    }
                }
            }
        },
    )
    .await;
    match create_as(&client, "alice", &guard("by-alice")).await {
        Err(kube::Error::Api(status)) => {
            println!("refused: {} {}", status.code, status.message);
            assert_eq!(status.code, 403, "{status:?}");
            assert!(status.message.contains(GUARD_MESSAGE), "{status:?}");
        }
        other => panic!("the editor created an Initializer: {other:?}"),
    }

    // An admin is admitted; the editor may not change its spec either.
    api.create(&PostParams::default(), &guard("by-admin"))
        .await
        .unwrap();
    // A merge patch carries no resourceVersion: the operator's own writes (its finalizer)
    // cannot turn the refusal into a conflict.
    let mut request = kube::core::Request::new("/apis/initializer.dev/v1alpha1/initializers")
        .patch(
            "by-admin",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .unwrap();
    request
        .headers_mut()
        .insert("Impersonate-User", "alice".parse().unwrap());
    match client.request::<Initializer>(request).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(status.message.contains(GUARD_MESSAGE), "{status:?}");
        }
        other => panic!("the editor changed an Initializer's spec: {other:?}"),
    }
    // Nor write its status (the operator adopts it after a restart), nor delete it (which
    // switches a security initializer off).
    let as_alice = |mut request: http::Request<Vec<u8>>| {
        request
            .headers_mut()
            .insert("Impersonate-User", "alice".parse().unwrap());
        request
    };
    let status_request = kube::core::Request::new("/apis/initializer.dev/v1alpha1/initializers")
        .patch_subresource(
            "status",
            "by-admin",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Unresponsive"}})),
        )
        .unwrap();
    let delete_request = kube::core::Request::new("/apis/initializer.dev/v1alpha1/initializers")
        .delete("by-admin", &DeleteParams::default())
        .unwrap();
    for (what, request) in [("status", status_request), ("deletion", delete_request)] {
        match client.request::<serde_json::Value>(as_alice(request)).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 403, "{what}: {status:?}");
                assert!(status.message.contains(GUARD_MESSAGE), "{what}: {status:?}");
            }
            other => panic!("the editor's {what} went through: {other:?}"),
        }
    }
    assert!(api.get_opt("by-admin").await.unwrap().is_some());
    // Metadata-only updates pass: the editor's label, and the operator's finalizer.
    let label_request = kube::core::Request::new("/apis/initializer.dev/v1alpha1/initializers")
        .patch(
            "by-admin",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .unwrap();
    client
        .request::<serde_json::Value>(as_alice(label_request))
        .await
        .unwrap_or_else(|e| panic!("a metadata-only update needs no webhook rights: {e}"));
    wait_for(
        "the operator's finalizer on by-admin",
        Duration::from_secs(20),
        || {
            let api = api.clone();
            async move {
                api.get("by-admin")
                    .await
                    .unwrap()
                    .finalizers()
                    .iter()
                    .any(|f| f.starts_with("initializer.dev/"))
            }
        },
    )
    .await;

    // Deleting the guard's binding does not switch it off: the operator puts it back.
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(GUARD_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let took = wait_for("the guard's binding back", Duration::from_secs(10), || {
        let c = client.clone();
        async move {
            Api::<ValidatingAdmissionPolicyBinding>::all(c)
                .get_opt(GUARD_NAME)
                .await
                .unwrap()
                .is_some()
        }
    })
    .await;
    println!("guard binding restored {took:?} after its deletion");
}

/// Runs on the real control plane only: the sandbox serves no ValidatingAdmissionPolicy.
mod a_policy_with_the_fallbacks_name_that_is_not_ours_is_left_alone {
    use super::{Backend, run};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the sandbox serves no ValidatingAdmissionPolicy"]
    async fn on_sandbox() {
        run(Backend::Sandbox, |cluster| {
            Box::pin(
                super::a_policy_with_the_fallbacks_name_that_is_not_ours_is_left_alone(cluster),
            )
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_real() {
        run(Backend::Real, |cluster| {
            Box::pin(
                super::a_policy_with_the_fallbacks_name_that_is_not_ours_is_left_alone(cluster),
            )
        })
        .await;
    }
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
    wait_for("registration", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-fenced").await.is_some() }
    })
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

/// Runs on the real control plane only: the sandbox serves no ValidatingAdmissionPolicy.
mod uninstall_deregisters_the_operators_fallbacks_and_leaves_other_policies_alone {
    use super::{Backend, run};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the sandbox serves no ValidatingAdmissionPolicy"]
    async fn on_sandbox() {
        run(Backend::Sandbox, |cluster| {
            Box::pin(super::uninstall_deregisters_the_operators_fallbacks_and_leaves_other_policies_alone(cluster))
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_real() {
        run(Backend::Real, |cluster| {
            Box::pin(super::uninstall_deregisters_the_operators_fallbacks_and_leaves_other_policies_alone(cluster))
        })
        .await;
    }
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

/// Creates namespace `name` labelled for initializers' workloads (as an administrator would).
async fn labelled_namespace(client: &Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {
                "name": name,
                "labels": {WORKLOADS_LABEL: WORKLOADS_LABEL_VALUE},
            }}))
            .unwrap(),
        )
        .await
        .unwrap();
}

/// Binds the operator's workloads ClusterRole (applied first if absent) in `namespace` to the
/// operator's service account, as the README tells an administrator to.
async fn bind_workloads_role(client: &Client, namespace: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
    let roles = Api::<ClusterRole>::all(client.clone());
    if roles
        .get_opt(WORKLOADS_CLUSTER_ROLE)
        .await
        .unwrap()
        .is_none()
    {
        roles
            .create(
                &PostParams::default(),
                &initializer_packaging::manifest::workloads_cluster_role(),
            )
            .await
            .unwrap();
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
async fn terminating_namespace(client: &Client, name: &str) {
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {
                "name": name,
                "labels": {WORKLOADS_LABEL: WORKLOADS_LABEL_VALUE},
                "finalizers": ["test.initializer.dev/hold"],
            }}))
            .unwrap(),
        )
        .await
        .unwrap();
    namespaces
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
    let api: Api<Initializer> = Api::all(client.clone());
    // Not labelled: refused, nothing deployed, and the message says how to allow it.
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-hooks"}})).unwrap(),
        )
        .await
        .unwrap();
    let mut hooked = guard("hooked");
    hooked.spec.namespace = Some("team-hooks".into());
    api.create(&PostParams::default(), &hooked).await.unwrap();
    wait_for("Valid=False", Duration::from_secs(20), || {
        let a = api.clone();
        async move {
            valid_condition(&a.get("hooked").await.unwrap())
                .is_some_and(|(status, _)| status == "False")
        }
    })
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
    let took = wait_for("registration", Duration::from_secs(120), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-hooked").await.is_some() }
    })
    .await;
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
    in_workload
        .create(&PostParams::default(), &planted)
        .await
        .unwrap();
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
    let trusted = configuration(&client, "initializer-hooked")
        .await
        .and_then(|c| c.webhooks?.first()?.client_config.ca_bundle.clone());
    assert!(
        trusted.is_some_and(|b| !String::from_utf8_lossy(&b.0).contains("planted")),
        "the API server never trusts the planted CA"
    );
}

/// The operator with the bundle's RBAC only (its ServiceAccount, impersonated): it cannot
/// deploy in a labelled namespace until the workloads ClusterRole is bound there. The sandbox
/// enforces no authorization (sandbox/README.md).
mod the_operators_own_rights_reach_a_labelled_namespace_only_once_bound {
    use super::{Backend, run};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the sandbox enforces no authorization (sandbox/README.md)"]
    async fn on_sandbox() {
        run(Backend::Sandbox, |cluster| {
            Box::pin(
                super::the_operators_own_rights_reach_a_labelled_namespace_only_once_bound(cluster),
            )
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_real() {
        run(Backend::Real, |cluster| {
            Box::pin(
                super::the_operators_own_rights_reach_a_labelled_namespace_only_once_bound(cluster),
            )
        })
        .await;
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
    let post = PostParams::default();
    for account in &plan.service_accounts {
        Api::namespaced(admin.clone(), NS)
            .create(&post, account)
            .await
            .unwrap();
    }
    for role in plan.cluster_roles.iter().chain(&plan.bundle_cluster_roles) {
        Api::<ClusterRole>::all(admin.clone())
            .create(&post, role)
            .await
            .unwrap();
    }
    for binding in &plan.cluster_role_bindings {
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&post, binding)
            .await
            .unwrap();
    }
    for role in &plan.roles {
        Api::<Role>::namespaced(admin.clone(), NS)
            .create(&post, role)
            .await
            .unwrap();
    }
    for binding in &plan.role_bindings {
        Api::<RoleBinding>::namespaced(admin.clone(), NS)
            .create(&post, binding)
            .await
            .unwrap();
    }
    let operator = impersonating(
        &admin,
        &format!("system:serviceaccount:{NS}:{OPERATOR_ACCOUNT}"),
    );
    let _operator = spawn_as(cluster, operator.clone(), "operator-test-0");
    let api: Api<Initializer> = Api::all(admin.clone());

    // In its own namespace it deploys and registers with the Role alone.
    api.create(&post, &guard("home")).await.unwrap();
    wait_for("registration at home", Duration::from_secs(120), || {
        let c = admin.clone();
        async move { configuration(&c, "initializer-home").await.is_some() }
    })
    .await;

    // Labelled but not bound: the API server refuses the operator, and the status says so.
    labelled_namespace(&admin, "team-hooks").await;
    let mut away = guard("away");
    away.spec.namespace = Some("team-hooks".into());
    api.create(&post, &away).await.unwrap();
    wait_for("the refusal in the status", Duration::from_secs(30), || {
        let a = api.clone();
        async move {
            a.get("away").await.unwrap().status.is_some_and(|s| {
                s.details
                    .get("lastError")
                    .is_some_and(|e| e.contains("forbidden"))
            })
        }
    })
    .await;
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
    let took = wait_for("registration away", Duration::from_secs(120), || {
        let c = admin.clone();
        async move { configuration(&c, "initializer-away").await.is_some() }
    })
    .await;
    println!("registered {took:?} after the RoleBinding");
    assert!(secrets.get_opt("away-tls").await.unwrap().is_some());
}

/// The guard on Initializers is in force only where the API server serves ValidatingAdmission
/// Policy and authorizes; the sandbox does neither (sandbox/README.md).
mod an_initializer_created_before_the_guard_is_held_until_its_spec_changes {
    use super::{Backend, run};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "the sandbox serves no ValidatingAdmissionPolicy and enforces no authorization (sandbox/README.md)"]
    async fn on_sandbox() {
        run(Backend::Sandbox, |cluster| {
            Box::pin(
                super::an_initializer_created_before_the_guard_is_held_until_its_spec_changes(
                    cluster,
                ),
            )
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_real() {
        run(Backend::Real, |cluster| {
            Box::pin(
                super::an_initializer_created_before_the_guard_is_held_until_its_spec_changes(
                    cluster,
                ),
            )
        })
        .await;
    }
}

/// What an install by OLM leaves until the operator's first start: the CRD without the guard.
/// Whoever may create Initializers then (OLM's `edit`) creates one and writes a status that
/// claims it passed the guard. The operator, once started, holds it back (`Valid=False`, not
/// deployed); one created after the guard is deployed; a spec change by an administrator (which
/// passes the guard) releases the first. Deleting the guard's binding (put back at once) keeps
/// both deployed: what was proven and unchanged carries over to the new binding.
async fn an_initializer_created_before_the_guard_is_held_until_its_spec_changes(
    cluster: &TestCluster,
) {
    use initializer_operator::guard::{EARLIER_BINDINGS_ANNOTATION, GUARD_NAME};
    use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;

    let client = cluster.client();
    support::install::install_crd_and_namespace_unguarded(&client, NS).await;
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &guard("early"))
        .await
        .unwrap();
    api.patch_status(
        "early",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"guard": {"bindingUid": "made-up", "generation": 1, "held": false}}}),
        ),
    )
    .await
    .unwrap();

    let _operator = spawn(cluster, "operator-test-0");
    wait_for("early held back", Duration::from_secs(30), || {
        let c = client.clone();
        async move {
            let status = status_of(&c, "early").await;
            status
                .guard
                .as_ref()
                .is_some_and(|w| w.held && w.binding_uid != "made-up")
                && status.phase == Some(Phase::Invalid)
        }
    })
    .await;
    let held = status_of(&client, "early").await;
    let valid = held.conditions.iter().find(|c| c.type_ == "Valid").unwrap();
    assert_eq!(valid.status, "False");
    assert!(valid.message.contains("held back"), "{valid:?}");
    wait_for_event(&client, "Refused", "held back").await;

    // The guard is in force once the operator is ready: an Initializer created now is deployed.
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let first = bindings.get(GUARD_NAME).await.unwrap();
    support::install::until_in_force(&first).await;
    api.create(&PostParams::default(), &guard("late"))
        .await
        .unwrap();
    wait_for("late registered", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-late").await.is_some() }
    })
    .await;
    assert!(configuration(&client, "initializer-early").await.is_none());

    // An administrator changes early's spec: it passed the guard, so early is deployed.
    api.patch(
        "early",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"timeoutSeconds": 4}})),
    )
    .await
    .unwrap();
    wait_for("early registered", Duration::from_secs(90), || {
        let c = client.clone();
        async move { configuration(&c, "initializer-early").await.is_some() }
    })
    .await;
    let proven = status_of(&client, "early").await.guard.unwrap();
    assert!(!proven.held, "{proven:?}");
    assert_eq!(proven.binding_uid, first.metadata.uid.clone().unwrap());

    // The binding deleted and put back: a new binding that lists the old one, and neither
    // Initializer is held.
    bindings
        .delete(GUARD_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let old_uid = first.metadata.uid.clone().unwrap();
    wait_for("the binding put back", Duration::from_secs(20), || {
        let b = bindings.clone();
        let old = old_uid.clone();
        async move {
            b.get_opt(GUARD_NAME).await.unwrap().is_some_and(|b| {
                b.metadata.uid.as_deref() != Some(old.as_str())
                    && b.annotations().get(EARLIER_BINDINGS_ANNOTATION) == Some(&old)
            })
        }
    })
    .await;
    let renewed = bindings
        .get(GUARD_NAME)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    for name in ["early", "late"] {
        wait_for(
            &format!("{name}'s witness under the new binding"),
            Duration::from_secs(30),
            || {
                let (c, renewed) = (client.clone(), renewed.clone());
                async move {
                    status_of(&c, name)
                        .await
                        .guard
                        .is_some_and(|w| w.binding_uid == renewed && !w.held)
                }
            },
        )
        .await;
        assert!(
            configuration(&client, &format!("initializer-{name}"))
                .await
                .is_some(),
            "{name} stays registered"
        );
    }
}
