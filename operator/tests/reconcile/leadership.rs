//! Leader election: a second replica takes over when the leader stops and adopts its healthy
//! registrations, and an old leader frozen past its lease and thawed writes nothing (the one
//! write no check can stop, a registration it had already sent, is removed as it lands).

use std::time::{Duration, Instant};

use initializer_crds::Phase;
use initializer_test_support::wait_until as wait_for;
use kube::{Api, Client};
use serde_json::json;

use crate::outage::land_late_and_wait_for_its_removal;
use crate::support::{self, TestCluster};
use crate::{
    NS, configuration, create, create_registered, guard, install, patch_spec, phase, spawn, start,
    wait_registered, wait_removed_in,
};

on_backends!(sandbox and real:
    a_second_replica_takes_over_when_the_leader_stops,
    an_old_leader_thawed_after_losing_its_lease_writes_nothing,
);

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
    create_registered(&client, &guard("led")).await;
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

/// One operator replica running as its own process, so that it can be frozen (SIGSTOP) past
/// its lease like a paused VM or a stalled node; killed when dropped.
struct ReplicaProcess {
    child: std::process::Child,
}

impl ReplicaProcess {
    fn spawn(cluster: &TestCluster, identity: &str) -> Self {
        let binary = support::built("--bin", "initializer-operator").unwrap();
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
                // As every in-process replica of the suite (`Operator::spawn_with`).
                "--network-policy",
                "off",
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
    let api = create(&client, &guard("stale")).await;
    wait_registered(
        &client,
        "stale",
        "registration by the leader",
        Duration::from_secs(90),
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
    patch_spec(&api, "stale", json!({"suspend": true})).await;
    let what = "the new leader to remove it";
    wait_removed_in(
        &client,
        "stale",
        Phase::Suspended,
        what,
        Duration::from_secs(15),
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
