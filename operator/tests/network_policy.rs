//! The NetworkPolicy of `--network-policy=on`, as the API server stores it: written with the
//! workload, this Initializer's (labels and owner), put back when deleted, and removed when the
//! operator runs with the setting off; a policy changed under a registration that fails closed
//! is written only once the configuration fails open, which it does until the route is proven
//! again; and `auto` admits the API server's own address, follows a new one at once without a
//! route change, and keeps one that leaves. On the real control plane, but for
//! `auto` where no NetworkPolicy API is served: the sandbox serves no `networking.k8s.io`.
//! (Our node agent enforces no policy, so what the policy keeps out is proven on kind, by
//! `e2e/tests/e2e/network.rs`; here, the order of the writes.)

// Test helpers outside #[test] functions may unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::panic)]

// This file uses a few of the shared helpers only.
#[allow(dead_code)]
#[macro_use]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use initializer_crds::Initializer;
use initializer_crds::constants::{INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use initializer_operator::build::network_policy::admitted_ranges;
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::TestCluster;
use support::account::operator_account;
// `on_backends!` runs each body through `crate::run`.
use support::operator::{GUARD_IMAGE as IMAGE, Operator, run};

const NS: &str = "initializer-system";
/// The real control plane's API server address (`e2e/controlplane`).
const API_SERVER_CIDR: &str = "10.200.0.1/32";

on_backends! {
    /// The sandbox serves no `networking.k8s.io`.
    real only: network_policy_is_written_put_back_and_removed_when_switched_off,
        a_changed_policy_waits_for_the_configuration_to_fail_open_and_the_route_is_proven_again,
        auto_admits_the_api_servers_own_address,
        an_api_server_address_added_is_admitted_at_once_and_kept_after_it_leaves,
        the_operators_account_watches_the_api_servers_slice_and_reads_no_other,
}

on_backends! {
    /// Only the sandbox serves no `networking.k8s.io`, as a cluster without the API would.
    sandbox only: auto_writes_nothing_where_no_network_policy_api_is_served,
}

fn spawn(cluster: &TestCluster, pod_name: &str, flags: &[&str]) -> Operator {
    let mut all = vec!["--no-leader-election"];
    all.extend_from_slice(flags);
    Operator::spawn_with(cluster, cluster.client(), NS, pod_name, &all)
}

/// An operator writing NetworkPolicies that admit the API server from `range`.
fn policy_on(cluster: &TestCluster, pod_name: &str, range: &str) -> Operator {
    spawn(
        cluster,
        pod_name,
        &["--network-policy", "on", "--api-server-cidrs", range],
    )
}

async fn policy(client: &Client) -> Option<NetworkPolicy> {
    Api::<NetworkPolicy>::namespaced(client.clone(), NS)
        .get_opt("guard")
        .await
        .unwrap()
}

/// Creates the Initializer `guard`: secrets, one replica, failing closed.
async fn create_guard(client: &Client) -> Initializer {
    let guard = support::initializer(
        "guard",
        json!({
            "image": IMAGE,
            "replicas": 1,
            "failurePolicy": "Fail",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
        }),
    );
    Api::<Initializer>::all(client.clone())
        .create(&PostParams::default(), &guard)
        .await
        .unwrap()
}

async fn network_policy_is_written_put_back_and_removed_when_switched_off(cluster: &TestCluster) {
    let client = cluster.client();
    support::install::install_crd_and_namespace(&client, NS).await;
    let on = policy_on(cluster, "operator-test-0", API_SERVER_CIDR);
    let created = create_guard(&client).await;

    // Written with the workload, and the initializer still registers behind it.
    wait_for("the configuration", Duration::from_secs(90), || {
        let c = client.clone();
        async move {
            Api::<MutatingWebhookConfiguration>::all(c)
                .get_opt("initializer-guard")
                .await
                .unwrap()
                .is_some()
        }
    })
    .await;
    let Some(written) = policy(&client).await else {
        panic!("no NetworkPolicy was written");
    };
    assert_eq!(written.labels()[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
    assert_eq!(written.labels()[INITIALIZER_LABEL], "guard");
    let owner = &written.owner_references()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (created.uid().unwrap().as_str(), Some(true))
    );
    let spec = written.spec.clone().unwrap();
    let from = spec.ingress.unwrap()[0].from.clone().unwrap();
    assert_eq!(
        from[0]
            .namespace_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["kubernetes.io/metadata.name"],
        NS
    );
    assert_eq!(from[1].ip_block.as_ref().unwrap().cidr, API_SERVER_CIDR);

    // Deleted: put back at once (the operator watches its workload objects).
    Api::<NetworkPolicy>::namespaced(client.clone(), NS)
        .delete("guard", &DeleteParams::default())
        .await
        .unwrap();
    let took = wait_for(
        "the NetworkPolicy put back",
        Duration::from_secs(20),
        || {
            let c = client.clone();
            let uid = written.uid();
            async move { policy(&c).await.is_some_and(|p| p.uid() != uid) }
        },
    )
    .await;
    println!("NetworkPolicy put back {took:?} after its deletion");

    // The operator restarted with the setting off: the policy goes.
    on.stop();
    drop(on);
    let _off = spawn(cluster, "operator-test-1", &["--network-policy", "off"]);
    let took = wait_for("the NetworkPolicy removed", Duration::from_secs(60), || {
        let c = client.clone();
        async move { policy(&c).await.is_none() }
    })
    .await;
    println!("NetworkPolicy removed {took:?} after the operator restarted with it off");
}

/// `--network-policy=auto` where the API server serves no NetworkPolicy API is off: even with
/// ranges given, the Initializer registers (a write of a policy there would fail every
/// reconcile).
async fn auto_writes_nothing_where_no_network_policy_api_is_served(cluster: &TestCluster) {
    guard_registered_under(cluster, &["--api-server-cidrs", API_SERVER_CIDR]).await;
}

/// An operator under `--network-policy=auto` and `flags`, and the guard created and registered
/// with the spec's failurePolicy; the operator, and how long the registration took.
async fn guard_registered_under(cluster: &TestCluster, flags: &[&str]) -> (Operator, Duration) {
    let client = cluster.client();
    support::install::install_crd_and_namespace(&client, NS).await;
    let auto = spawn(
        cluster,
        "operator-test-0",
        &[&["--network-policy", "auto"], flags].concat(),
    );
    create_guard(&client).await;
    let took = registered_failing_closed(
        &client,
        "registered with the spec's failurePolicy",
        Duration::from_secs(90),
    )
    .await;
    (auto, took)
}

/// `--network-policy=auto` without ranges reads the API server's address from the
/// `kubernetes` Service's EndpointSlice (which the API server writes), through the rule that
/// names that slice alone, and the initializer registers behind the policy.
async fn auto_admits_the_api_servers_own_address(cluster: &TestCluster) {
    let client = cluster.client();
    let (_auto, took) = guard_registered_under(cluster, &[]).await;
    println!("registered behind the policy {took:?} after the create");
    let Some(written) = policy(&client).await else {
        panic!("no NetworkPolicy was written");
    };
    assert_eq!(admitted_ranges(&written), [API_SERVER_CIDR]);
}

/// Under `auto`, an address the API server's EndpointSlice gains (a replica joining) is admitted
/// within seconds (the slice is watched; the resync is 30 s) and without a route change (the
/// registration fails closed throughout); once the slice lists it no more (a replica
/// restarting), a reconcile keeps admitting it.
async fn an_api_server_address_added_is_admitted_at_once_and_kept_after_it_leaves(
    cluster: &TestCluster,
) {
    const JOINING: &str = "10.200.0.9";
    let client = cluster.client();
    let (_auto, _) = guard_registered_under(cluster, &[]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let sampled = tokio::spawn(failure_policies_other_than_fail(
        client.clone(),
        stop.clone(),
    ));
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let both = vec![API_SERVER_CIDR.to_string(), format!("{JOINING}/32")];

    // The API server rewrites its own slice: the address goes in again whenever it is gone.
    // Well within the 30 s resync: the watch, not a reconcile that came anyway (one follows
    // every status write too, so a longer bound would prove less).
    let took = wait_for(
        "the joining address admitted",
        Duration::from_secs(3),
        || {
            let (c, slices, both) = (client.clone(), slices.clone(), both.clone());
            async move {
                set_address(&slices, JOINING, true).await;
                policy(&c).await.map(|p| sorted(admitted_ranges(&p))) == Some(both)
            }
        },
    )
    .await;
    println!("an address the API server listed admitted {took:?} after it was added");

    wait_for(
        "the address gone from the slice",
        Duration::from_secs(30),
        || {
            let slices = slices.clone();
            async move { !set_address(&slices, JOINING, false).await }
        },
    )
    .await;
    // A reconcile after the slice changed: a spec change, seen once observed.
    let patched = Api::<Initializer>::all(client.clone())
        .patch(
            "guard",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"timeoutSeconds": 7}})),
        )
        .await
        .unwrap();
    wait_for("the spec change observed", Duration::from_secs(30), || {
        let c = client.clone();
        let generation = patched.metadata.generation;
        async move {
            let guard = Api::<Initializer>::all(c).get("guard").await.unwrap();
            guard.status.and_then(|s| s.observed_generation) == generation
        }
    })
    .await;
    let kept = policy(&client).await.map(|p| sorted(admitted_ranges(&p)));
    assert_eq!(kept, Some(both), "the address that left is still admitted");
    stop.store(true, Ordering::Relaxed);
    let others = sampled.await.unwrap();
    assert!(
        others.is_empty(),
        "the configuration left failurePolicy Fail: {others:?}"
    );
}

/// The ClusterRole's rule that names the `kubernetes` EndpointSlice lets the operator's account
/// (impersonated) watch it as the operator does (by a `metadata.name` field selector), and read
/// no other slice of `default`, one by one or all at once. (A slice named `kubernetes` in
/// another namespace is named by the rule too: a ClusterRole cannot name one namespace's.)
async fn the_operators_account_watches_the_api_servers_slice_and_reads_no_other(
    cluster: &TestCluster,
) {
    use futures::StreamExt;
    use initializer_operator::apply::network_policy::api_server_range_changes;
    let admin = cluster.client();
    let user = operator_account(&admin, "slice-test", "initializer-operator").await;
    let operator = cluster.client_as(&user).await.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(operator.clone(), "default");
    wait_for(
        "the account's rules in force",
        Duration::from_secs(10),
        || {
            let slices = slices.clone();
            async move { slices.get("kubernetes").await.is_ok() }
        },
    )
    .await;
    let mut changes = std::pin::pin!(api_server_range_changes(operator.clone()));
    let first = tokio::time::timeout(Duration::from_secs(10), changes.next()).await;
    assert!(
        matches!(first, Ok(Some(()))),
        "the watch by name yields the first reading: {first:?}"
    );
    let forbidden = |result: Result<_, kube::Error>| matches!(result, Err(kube::Error::Api(status)) if status.code == 403);
    assert!(
        forbidden(slices.list(&ListParams::default()).await.map(drop)),
        "every slice of default"
    );
    assert!(
        forbidden(slices.get("other").await.map(drop)),
        "another slice of default"
    );
}

/// Adds `address` to the API server's EndpointSlice (`present`) or takes it out, unless it is
/// already so; returns whether the slice lists it as read before any write. A conflicting
/// write is left for the next call.
async fn set_address(slices: &Api<EndpointSlice>, address: &str, present: bool) -> bool {
    let mut slice = slices.get("kubernetes").await.unwrap();
    let lists = |endpoint: &Endpoint| endpoint.addresses.iter().any(|a| a == address);
    let endpoints = slice.endpoints.get_or_insert_with(Vec::new);
    let listed = endpoints.iter().any(lists);
    if listed != present {
        if present {
            endpoints.push(Endpoint {
                addresses: vec![address.to_string()],
                ..Endpoint::default()
            });
        } else {
            endpoints.retain(|endpoint| !lists(endpoint));
        }
        let _ = slices
            .replace("kubernetes", &PostParams::default(), &slice)
            .await;
    }
    listed
}

/// Every failure policy list of the guard's configuration other than `["Fail"]` seen every
/// 100 ms until `stop`.
async fn failure_policies_other_than_fail(
    client: Client,
    stop: Arc<AtomicBool>,
) -> Vec<Vec<String>> {
    let mut others = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let now = failure_policies(&client).await;
        if now != ["Fail"] {
            others.push(now);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    others
}

fn sorted(mut ranges: Vec<String>) -> Vec<String> {
    ranges.sort();
    ranges
}

/// The failure policies of the live configuration's webhooks.
async fn failure_policies(client: &Client) -> Vec<String> {
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt("initializer-guard")
        .await
        .unwrap()
        .and_then(|c| c.webhooks)
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.failure_policy.unwrap_or_default())
        .collect()
}

/// Waits until the live configuration fails closed (`failurePolicy: Fail`, the spec's): the
/// route is proven. Returns how long it took.
async fn registered_failing_closed(client: &Client, what: &str, timeout: Duration) -> Duration {
    wait_for(what, timeout, || {
        let c = client.clone();
        async move { failure_policies(&c).await == ["Fail"] }
    })
    .await
}

/// The `Registered` condition's status and reason.
async fn registered(client: &Client) -> (String, String) {
    let guard = Api::<Initializer>::all(client.clone())
        .get("guard")
        .await
        .unwrap();
    guard
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Registered")
        .map(|c| (c.status, c.reason))
        .unwrap_or_default()
}

/// A registration made under one range is not proven under another. Restarted with another
/// range, the operator must not write it while the configuration fails closed (on a network that
/// enforces policies, a wrong range would then fail every matching create while the operator's
/// own probes, which the policy admits, still pass). It degrades the configuration to the
/// proving one first, writes the policy, and restores the spec's `failurePolicy: Fail` only once
/// a call of the API server is seen reaching the initializer again.
async fn a_changed_policy_waits_for_the_configuration_to_fail_open_and_the_route_is_proven_again(
    cluster: &TestCluster,
) {
    const WIDER: &str = "10.200.0.0/24";
    let client = cluster.client();
    support::install::install_crd_and_namespace(&client, NS).await;
    let first = policy_on(cluster, "operator-test-0", API_SERVER_CIDR);
    create_guard(&client).await;
    registered_failing_closed(
        &client,
        "registered, failing closed",
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        admitted_ranges(&policy(&client).await.unwrap()),
        [API_SERVER_CIDR]
    );

    first.stop();
    drop(first);
    let _second = policy_on(cluster, "operator-test-1", WIDER);
    // The policy first, then the configuration: the proven route lasts five seconds at least
    // after the write, so the configuration read just after it is the one it was written under.
    let took = wait_for("the changed range written", Duration::from_secs(60), || {
        let c = client.clone();
        async move {
            let Some(written) = policy(&c).await else {
                return false;
            };
            if admitted_ranges(&written) != [WIDER] {
                return false;
            }
            let under = failure_policies(&c).await;
            assert!(
                under.iter().all(|p| p == "Ignore") && !under.is_empty(),
                "the changed NetworkPolicy was written while the configuration failed closed: {under:?}"
            );
            true
        }
    })
    .await;
    println!(
        "the changed range written {took:?} after the restart, under a configuration failing open"
    );

    let took =
        registered_failing_closed(&client, "the route proven again", Duration::from_secs(60)).await;
    println!("failing closed again {took:?} later, the route proven");
    wait_for("the status registered", Duration::from_secs(10), || {
        let c = client.clone();
        async move { registered(&c).await == ("True".to_string(), "Registered".to_string()) }
    })
    .await;
    // Failing open in place is an outage's window: degraded, never removed, restored.
    let guard = Api::<Initializer>::all(client.clone())
        .get("guard")
        .await
        .unwrap();
    let outage = guard.status.unwrap().last_outage.unwrap();
    assert!(
        outage.degraded_at.is_some() && outage.restored_at.is_some(),
        "{outage:?}"
    );
    assert!(outage.deregistered_at.is_none(), "{outage:?}");
    wait_for(
        "the RouteChanged and Restored Events",
        Duration::from_secs(10),
        || {
            let c = client.clone();
            async move {
                let reasons: Vec<String> = Api::<Event>::namespaced(c, "default")
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .filter_map(|e| e.reason)
                    .collect();
                ["RouteChanged", "Restored"]
                    .iter()
                    .all(|reason| reasons.iter().any(|r| r == reason))
            }
        },
    )
    .await;
}
