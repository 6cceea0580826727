//! Workloads through the sandbox's API: Deployments get pods that run as processes with their own
//! loopback address, probes drive readiness, EndpointSlices follow, pods can be frozen and
//! killed, unmapped images wait like a real cluster shows.

#![allow(clippy::unwrap_used, clippy::panic)]

mod workload_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use serde_json::json;
use workload_support::{Env, app_service, http, is_ready, pod_ip, wait_for};

const T: Duration = Duration::from_secs(20);

async fn ready_pods(env: &Env, ns: &str, app: &str, n: usize) -> Vec<Pod> {
    let what = format!("{n} ready pods of {app}");
    env.ready_pods(&what, T, ns, app, n).await
}

/// Whether the test app at `ip` answers its health check.
async fn answers(ip: &str) -> bool {
    http("GET", &format!("{ip}:8080"), "/healthz", "")
        .await
        .is_ok()
}

/// Waits until the first container of pod `name` passes `check`, and returns its status.
async fn first_container(
    api: &Api<Pod>,
    what: &str,
    name: &str,
    check: impl Fn(&ContainerStatus) -> bool,
) -> ContainerStatus {
    wait_for(what, T, || async {
        let p = api.get(name).await.ok()?;
        let cs = p.status?.container_statuses?.remove(0);
        check(&cs).then_some(cs)
    })
    .await
}

/// A sandbox running `n` ready pods of Deployment `web` in `apps`, and those pods.
async fn web_app(n: usize) -> (Env, Vec<Pod>) {
    let env = Env::start_in("apps").await;
    env.create_app("apps", "web", i32::try_from(n).unwrap())
        .await;
    let pods = ready_pods(&env, "apps", "web", n).await;
    (env, pods)
}

/// A sandbox running one ready pod of Deployment `web` in `apps`, and that pod.
async fn web_pod() -> (Env, Pod) {
    let (env, mut pods) = web_app(1).await;
    (env, pods.remove(0))
}

/// Creates `pods` in `apps`, in order; returns the API to read them back with.
async fn create_pods(env: &Env, pods: impl IntoIterator<Item = serde_json::Value>) -> Api<Pod> {
    for pod in pods {
        let _: Pod = env.create("apps", pod).await;
    }
    env.api("apps")
}

async fn slice_ready(env: &Env, ns: &str, svc: &str) -> Vec<(String, bool)> {
    let api: Api<EndpointSlice> = Api::namespaced(env.client.clone(), ns);
    let slices = api
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={svc}")))
        .await
        .unwrap()
        .items;
    let mut out: Vec<(String, bool)> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .map(|e| {
            (
                e.addresses[0].clone(),
                e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn deployment_gets_ready_pods_with_distinct_loopback_addresses_and_status() {
    let (env, pods) = web_app(2).await;
    let ips: BTreeSet<String> = pods.iter().map(pod_ip).collect();
    assert_eq!(ips.len(), 2, "{ips:?}");
    for ip in &ips {
        assert!(ip.starts_with("127.1."), "{ip}");
        let (status, body) = http("GET", &format!("{ip}:8080"), "/healthz", "")
            .await
            .unwrap();
        assert_eq!((status, body.as_str()), (200, "ok"));
    }
    let pod = &pods[0];
    let status = pod.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let cs = &status.container_statuses.unwrap()[0];
    assert!(cs.ready && cs.state.as_ref().unwrap().running.is_some());
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Deployment", "web", Some(true))
    );
    let deployments: Api<Deployment> = env.api("apps");
    let d = wait_for("deployment status to settle", T, || async {
        let d = deployments.get("web").await.unwrap();
        (d.status.as_ref().and_then(|s| s.available_replicas) == Some(2)).then_some(d)
    })
    .await;
    let s = d.status.unwrap();
    assert_eq!(
        (s.replicas, s.updated_replicas, s.ready_replicas),
        (Some(2), Some(2), Some(2))
    );
    assert_eq!(s.observed_generation, d.metadata.generation);
    let conditions = s.conditions.unwrap();
    let available = conditions
        .iter()
        .find(|c| c.type_.as_deref() == Some("Available"))
        .unwrap();
    assert_eq!(
        (available.status.as_deref(), available.reason.as_deref()),
        (Some("True"), Some("MinimumReplicasAvailable"))
    );
    let progressing = conditions
        .iter()
        .find(|c| c.type_.as_deref() == Some("Progressing"))
        .unwrap();
    assert_eq!(
        progressing.reason.as_deref(),
        Some("NewReplicaSetAvailable")
    );
    env.stop().await;
}

#[tokio::test]
async fn endpoint_slices_follow_readiness_through_freeze_and_thaw() {
    let env = Env::start_in("apps").await;
    env.create_app("apps", "web", 2).await;
    let _: Service = env.create("apps", app_service("web")).await;
    let pods = ready_pods(&env, "apps", "web", 2).await;
    wait_for("two ready endpoints", T, || async {
        let eps = slice_ready(&env, "apps", "web").await;
        (eps.len() == 2 && eps.iter().all(|e| e.1)).then_some(())
    })
    .await;
    let endpoints: Api<k8s_openapi::api::core::v1::Endpoints> =
        Api::namespaced(env.client.clone(), "apps");
    let e = wait_for("the v1 Endpoints", T, || async {
        endpoints.get("web").await.ok()
    })
    .await;
    assert_eq!(
        e.subsets.unwrap()[0].addresses.as_ref().map(Vec::len),
        Some(2)
    );
    let frozen = &pods[0];
    let frozen_name = frozen.metadata.name.clone().unwrap();
    let frozen_ip = pod_ip(frozen);
    let handle = env.sandbox.workloads().unwrap();
    handle.freeze("apps", &frozen_name).await.unwrap();
    let frozen_at = Instant::now();
    let pod_api: Api<Pod> = env.api("apps");
    wait_for("the frozen pod to turn unready", T, || async {
        let p = pod_api.get(&frozen_name).await.unwrap();
        (!is_ready(&p)).then_some(())
    })
    .await;
    let pod_unready_after = frozen_at.elapsed();
    let unready_seen = Instant::now();
    wait_for("the frozen pod's endpoint to turn unready", T, || async {
        let eps = slice_ready(&env, "apps", "web").await;
        eps.iter()
            .any(|(ip, ready)| *ip == frozen_ip && !ready)
            .then_some(())
    })
    .await;
    println!(
        "freeze → pod unready: {pod_unready_after:?}; pod unready → endpoint unready (incl. 50 ms polling): {:?}",
        unready_seen.elapsed()
    );
    // Frozen, it still counts as Running: it is hung, not dead.
    let p = pod_api.get(&frozen_name).await.unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    assert!(!answers(&frozen_ip).await);
    handle.thaw("apps", &frozen_name).await.unwrap();
    wait_for("the thawed pod's endpoint to be ready again", T, || async {
        let eps = slice_ready(&env, "apps", "web").await;
        (eps.len() == 2 && eps.iter().all(|e| e.1)).then_some(())
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn killed_container_is_restarted_and_counted() {
    let (env, pod) = web_pod().await;
    let name = pod.metadata.name.clone().unwrap();
    let before = env
        .sandbox
        .workloads()
        .unwrap()
        .process_groups("apps", &name);
    env.sandbox
        .workloads()
        .unwrap()
        .kill("apps", &name)
        .await
        .unwrap();
    let pod_api: Api<Pod> = env.api("apps");
    let restarted = wait_for("a restart", T, || async {
        let p = pod_api.get(&name).await.unwrap();
        let cs = p.status.as_ref()?.container_statuses.as_ref()?[0].clone();
        (cs.restart_count == 1 && cs.ready).then_some(cs)
    })
    .await;
    let last = restarted.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 137);
    assert_eq!(last.signal, Some(9));
    let after = env
        .sandbox
        .workloads()
        .unwrap()
        .process_groups("apps", &name);
    assert_ne!(before, after, "a new process runs");
    env.stop().await;
}

#[tokio::test]
async fn image_missing_from_the_map_waits_with_err_image_pull() {
    let env = Env::start_in("apps").await;
    let lost = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lost"},
        "spec": {"containers": [{"name": "c", "image": "registry.example.com/not-mapped:2.0"}]}});
    let pod_api = create_pods(&env, [lost]).await;
    let waiting = wait_for("an image pull failure", T, || async {
        let p = pod_api.get("lost").await.unwrap();
        let status = p.status?;
        let w = status.container_statuses?[0].state.clone()?.waiting?;
        Some((status.phase, w))
    })
    .await;
    assert_eq!(waiting.0.as_deref(), Some("Pending"));
    let reason = waiting.1.reason.unwrap();
    assert!(
        reason == "ErrImagePull" || reason == "ImagePullBackOff",
        "{reason}"
    );
    assert!(
        waiting
            .1
            .message
            .unwrap()
            .contains("\"registry.example.com/not-mapped:2.0\"")
    );
    env.stop().await;
}

#[tokio::test]
async fn deleted_pod_is_terminated_removed_and_replaced() {
    let (env, pod) = web_pod().await;
    let name = pod.metadata.name.clone().unwrap();
    let ip = pod_ip(&pod);
    let pod_api: Api<Pod> = env.api("apps");
    pod_api.delete(&name, &Default::default()).await.unwrap();
    wait_for("the old process to stop answering", T, || async {
        (!answers(&ip).await).then_some(())
    })
    .await;
    let files = env.sandbox.state_dir().join(format!("pods/apps_{name}"));
    wait_for("the old pod's files to be removed", T, || async {
        (!files.exists()).then_some(())
    })
    .await;
    assert!(
        env.sandbox
            .state_dir()
            .join(format!("logs/apps_{name}/app.log"))
            .exists(),
        "logs stay"
    );
    let replacement = ready_pods(&env, "apps", "web", 1).await.remove(0);
    assert_ne!(replacement.metadata.name.unwrap(), name);
    wait_for("the old pod object to be gone", T, || async {
        matches!(pod_api.get(&name).await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn shutdown_ends_every_pod_process() {
    let (env, pods) = web_app(2).await;
    let ips: Vec<String> = pods.iter().map(pod_ip).collect();
    let started = Instant::now();
    env.stop().await;
    println!("shutdown with 2 pods took {:?}", started.elapsed());
    for ip in ips {
        assert!(!answers(&ip).await, "{ip} still answers");
    }
}

fn one_shot(name: &str, image: &str, policy: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": image}]}})
}

#[tokio::test]
async fn restart_policy_decides_between_completion_and_crash_loop() {
    let env = Env::start_in("apps").await;
    let api = create_pods(
        &env,
        [
            one_shot("ok", "example.com/true", "Never"),
            one_shot("bad", "example.com/false", "OnFailure"),
            one_shot("fails-once", "example.com/false", "Never"),
        ],
    )
    .await;
    let phase = |name: &'static str, want: &'static str| {
        let api = api.clone();
        async move {
            wait_for(&format!("{name} to reach {want}"), T, || async {
                let p = api.get(name).await.ok()?;
                (p.status?.phase.as_deref() == Some(want)).then_some(())
            })
            .await
        }
    };
    phase("ok", "Succeeded").await;
    phase("fails-once", "Failed").await;
    let crash = first_container(&api, "a crash loop", "bad", |cs| cs.restart_count >= 2).await;
    assert_eq!(crash.last_state.unwrap().terminated.unwrap().exit_code, 1);
    let p = api.get("bad").await.unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    env.stop().await;
}

#[tokio::test]
async fn failing_liveness_probe_restarts_the_container() {
    let env = Env::start_in("apps").await;
    let sick = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sick"},
    "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
        "name": "app", "image": workload_support::IMAGE,
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "livenessProbe": {"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2},
    }]}});
    let api = create_pods(&env, [sick]).await;
    let cs = first_container(&api, "a liveness restart", "sick", |cs| {
        cs.restart_count >= 1
    })
    .await;
    let last = cs.last_state.unwrap().terminated.unwrap();
    // SIGTERM ends the app: 128 + 15.
    assert_eq!((last.exit_code, last.signal), (143, Some(15)));
    env.stop().await;
}

#[test]
fn dropping_the_sandbox_without_shutdown_leaves_no_process_behind() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ips: Vec<String> = runtime.block_on(async {
        let (_env, pods) = web_app(2).await;
        // No shutdown: the handle goes out of scope here, and dropping the runtime below drops
        // every task, as a panicking sandbox would.
        pods.iter().map(pod_ip).collect()
    });
    drop(runtime);
    let deadline = Instant::now() + Duration::from_secs(5);
    for ip in ips {
        let addr: std::net::SocketAddr = format!("{ip}:8080").parse().unwrap();
        loop {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Err(_) => break,
                Ok(_) if Instant::now() > deadline => {
                    panic!("{addr} still answers after the sandbox was dropped")
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

#[tokio::test]
async fn deleting_a_deployment_removes_its_pods_and_their_processes() {
    let (env, pods) = web_app(2).await;
    let deployments: Api<Deployment> = env.api("apps");
    deployments
        .delete("web", &Default::default())
        .await
        .unwrap();
    wait_for("the pods to be collected", T, || async {
        env.pods("apps", "app=web").await.is_empty().then_some(())
    })
    .await;
    for ip in pods.iter().map(pod_ip) {
        wait_for(&format!("{ip} to stop answering"), T, || async {
            (!answers(&ip).await).then_some(())
        })
        .await;
    }
    env.stop().await;
}

#[tokio::test]
async fn startup_probe_gates_readiness_and_restarts_a_container_that_never_starts() {
    let env = Env::start_in("apps").await;
    let pod = |name: &str, startup_port: i32| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "app", "image": workload_support::IMAGE,
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "startupProbe": {"tcpSocket": {"port": startup_port}, "periodSeconds": 1, "failureThreshold": 2},
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
        }]}})
    };
    let api = create_pods(&env, [pod("starts", 8080), pod("never", 9)]).await;
    let cs = first_container(&api, "the started pod to be ready", "starts", |cs| cs.ready).await;
    assert_eq!(cs.started, Some(true));
    let cs = first_container(&api, "a startup restart", "never", |cs| {
        cs.restart_count >= 1
    })
    .await;
    assert!(!cs.ready);
    assert_eq!(cs.last_state.unwrap().terminated.unwrap().exit_code, 143);
    env.stop().await;
}

#[tokio::test]
async fn mapped_executable_that_cannot_start_waits_with_run_container_error() {
    let env = Env::start_in("apps").await;
    let api = create_pods(&env, [one_shot("gone", "example.com/gone:1", "Always")]).await;
    let waiting = wait_for("a start failure", T, || async {
        let p = api.get("gone").await.ok()?;
        p.status?.container_statuses?[0].state.clone()?.waiting
    })
    .await;
    assert_eq!(waiting.reason.as_deref(), Some("RunContainerError"));
    assert!(waiting.message.unwrap().contains("/nonexistent/bin/gone"));
    env.stop().await;
}
