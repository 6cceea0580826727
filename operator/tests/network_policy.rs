//! The NetworkPolicy of `--network-policy=on`, as the API server stores it: written with the
//! workload, this Initializer's (labels and owner), put back when deleted, and removed when the
//! operator runs with the setting off. On the real control plane only: the sandbox serves no
//! `networking.k8s.io`. (Our node agent enforces no policy, so what the policy keeps out is
//! proven by the builder's unit tests; the SDK's server is what the attack scenario proves.)

// Test helpers outside #[test] functions may unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::panic)]

// This file uses a few of the shared helpers only.
#[allow(dead_code)]
#[macro_use]
mod support;

use std::time::Duration;

use initializer_crds::Initializer;
use initializer_crds::constants::{INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::TestCluster;
// `on_backends!` runs each body through `crate::run`.
use support::operator::{GUARD_IMAGE as IMAGE, Operator, run};

const NS: &str = "initializer-system";
/// The real control plane's API server address (`e2e/controlplane`).
const API_SERVER_CIDR: &str = "10.200.0.1/32";

on_backends! {
    /// The sandbox serves no `networking.k8s.io`.
    real only: network_policy_is_written_put_back_and_removed_when_switched_off,
}

fn spawn(cluster: &TestCluster, pod_name: &str, flags: &[&str]) -> Operator {
    let mut all = vec!["--no-leader-election"];
    all.extend_from_slice(flags);
    Operator::spawn_with(cluster, cluster.client(), NS, pod_name, &all)
}

async fn policy(client: &Client) -> Option<NetworkPolicy> {
    Api::<NetworkPolicy>::namespaced(client.clone(), NS)
        .get_opt("guard")
        .await
        .unwrap()
}

async fn network_policy_is_written_put_back_and_removed_when_switched_off(cluster: &TestCluster) {
    let client = cluster.client();
    support::install::install_crd_and_namespace(&client, NS).await;
    let on = spawn(
        cluster,
        "operator-test-0",
        &[
            "--network-policy",
            "on",
            "--api-server-cidrs",
            API_SERVER_CIDR,
        ],
    );
    let guard = support::initializer(
        "guard",
        json!({
            "image": IMAGE,
            "replicas": 1,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
        }),
    );
    let initializers: Api<Initializer> = Api::all(client.clone());
    let created = initializers
        .create(&PostParams::default(), &guard)
        .await
        .unwrap();

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
    let _off = spawn(cluster, "operator-test-1", &[]);
    let took = wait_for("the NetworkPolicy removed", Duration::from_secs(60), || {
        let c = client.clone();
        async move { policy(&c).await.is_none() }
    })
    .await;
    println!("NetworkPolicy removed {took:?} after the operator restarted with it off");
}
