//! Out of the path at once when an outage says so: at zero ready endpoints without waiting for
//! the probes, and a registration that lands while the initializer is out (one sent before the
//! outage) removed as soon as it appears, with the outage's record left as it was.

use std::time::{Duration, Instant};

use initializer_crds::Initializer;
use initializer_crds::Phase;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};

use crate::support::TestCluster;
use crate::{
    NS, configuration, create_registered, guard, is_ready, pods_of, start, status_of,
    wait_configuration, wait_for_event, wait_pods, wait_removed, wait_removed_in,
};

on_backends!(sandbox and real:
    losing_every_ready_endpoint_deregisters_without_waiting_for_probes,
    a_registration_landing_during_an_outage_is_removed_at_once,
);

async fn losing_every_ready_endpoint_deregisters_without_waiting_for_probes(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let mut fast = guard("fast");
    // Probes every 10 s with two failures needed: only the endpoints can remove it within 5 s.
    fast.spec.health = Some(initializer_crds::HealthPolicy {
        period_seconds: 10,
        failure_threshold: 2,
        success_threshold: 1,
        latency_budget_millis: 1000,
    });
    create_registered(&client, &fast).await;
    // Registration needs one ready endpoint, not a finished rollout: wait until the only pod
    // left is the ready one, so that killing it leaves no endpoint behind.
    let what = "one ready pod and no other";
    wait_pods(&client, "fast", what, Duration::from_secs(30), |items| {
        items.len() == 1 && is_ready(&items[0])
    })
    .await;
    let pod = pods_of(&client, "fast").await.remove(0);
    cluster.kill(NS, &pod.name_any()).await.unwrap();
    let took = wait_removed(
        &client,
        "fast",
        "deregistration after the kill",
        Duration::from_secs(5),
    )
    .await;
    println!("deregistered {took:?} after the last ready endpoint was killed");
    wait_for_event(&client, "Deregistered", "ready endpoint").await;
}

/// Creates `registered` again, as a registration sent before a freeze lands after it, and waits
/// (at most 5 s, far below the 30 s resync) until the operator removes it; returns how long
/// that took.
pub(crate) async fn land_late_and_wait_for_its_removal(
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
    wait_configuration(
        client,
        &name,
        false,
        "the late registration to go",
        Duration::from_secs(5),
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
    create_registered(&client, &guard("outage")).await;
    let registered = configuration(&client, "initializer-outage").await.unwrap();
    let frozen_at = Instant::now();
    for pod in pods_of(&client, "outage").await {
        cluster.freeze(NS, &pod.name_any()).await.unwrap();
    }
    let what = "deregistration after the freeze";
    wait_removed_in(
        &client,
        "outage",
        Phase::Unresponsive,
        what,
        Duration::from_secs(20),
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
