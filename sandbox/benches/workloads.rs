//! Workload and admission figures: time from a Deployment's creation to a ready pod, time from a
//! pod turning unready to its EndpointSlice endpoint turning unready, and the cost of one
//! admission webhook call on a create, and a 100-replica Deployment's time to all ready with the
//! CPU the sandbox spent on it and on 10 s of probing afterwards.
//!
//! Run with `cargo bench -p initializer-sandbox --bench workloads` (prints figures; asserts
//! nothing).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use base64::Engine as _;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use initializer_sandbox::{Sandbox, SandboxConfig};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn summary(mut v: Vec<Duration>) -> String {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "p50 {} · p90 {} · max {} (n={})",
        ms(p(0.5)),
        ms(p(0.9)),
        ms(p(1.0)),
        v.len()
    )
}

fn obj<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn deployment(name: &str, not_ready_file: &str) -> Deployment {
    obj(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "app", "image": "example.com/testapp:1",
                    "args": ["--not-ready-file", not_ready_file],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 1, "failureThreshold": 1},
                }]},
            },
        },
    }))
}

/// A minimal HTTPS webhook that allows everything.
async fn webhook(names: &[&str]) -> (std::net::SocketAddr, String) {
    let (cert, key) = initializer_test_support::pki::self_signed(names);
    let acceptor = initializer_test_support::pki::tls_acceptor(&cert, &key);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let review: Value = serde_json::from_slice(&body).unwrap();
                        let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": review["request"]["uid"], "allowed": true}});
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(answer.to_string())),
                        ))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (
        addr,
        base64::engine::general_purpose::STANDARD.encode(&cert),
    )
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("images.yaml");
    std::fs::write(
        &map,
        format!(
            "example.com/testapp: {}\n",
            env!("CARGO_BIN_EXE_sandbox-testapp")
        ),
    )
    .unwrap();
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.image_map = Some(map);
    let sandbox = Sandbox::start(config).await.unwrap();
    let client = sandbox.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "bench"}})),
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "bench");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "bench");

    // 1. Deployment created → its pod Ready (process start + first readiness probe).
    let mut start = Vec::new();
    for i in 0..8 {
        let name = format!("start-{i}");
        let flag = dir.path().join(format!("{name}.unready"));
        let t = Instant::now();
        deployments
            .create(
                &PostParams::default(),
                &deployment(&name, &flag.display().to_string()),
            )
            .await
            .unwrap();
        loop {
            let list = pods
                .list(&ListParams::default().labels(&format!("app={name}")))
                .await
                .unwrap();
            if list.items.iter().any(ready) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        start.push(t.elapsed());
    }
    println!("deployment created → pod ready: {}", summary(start));

    // 2. Pod turns unready → its endpoint turns unready (the EndpointSlice controller's lag).
    let services: Api<Service> = Api::namespaced(client.clone(), "bench");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "bench");
    let mut lag = Vec::new();
    for i in 0..8 {
        let name = format!("start-{i}");
        services
            .create(&PostParams::default(), &obj(json!({"metadata": {"name": name}, "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": "http"}]}})))
            .await
            .unwrap();
        let slice_ready = |want: bool| {
            let slices = slices.clone();
            let name = name.clone();
            async move {
                let list = slices
                    .list(
                        &ListParams::default()
                            .labels(&format!("kubernetes.io/service-name={name}")),
                    )
                    .await
                    .unwrap();
                list.items
                    .iter()
                    .flat_map(|s| s.endpoints.iter().flatten())
                    .any(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(want))
            }
        };
        while !slice_ready(true).await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        std::fs::write(dir.path().join(format!("{name}.unready")), b"").unwrap();
        let unready_at = loop {
            let list = pods
                .list(&ListParams::default().labels(&format!("app={name}")))
                .await
                .unwrap();
            if list.items.iter().all(|p| !ready(p)) {
                break Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        while !slice_ready(false).await {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        lag.push(unready_at.elapsed());
    }
    println!(
        "pod unready observed → endpoint unready observed: {}",
        summary(lag)
    );

    // 3. One allow-all webhook on ConfigMap creates versus none.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "bench");
    let create_many = |prefix: &'static str| {
        let config_maps = config_maps.clone();
        async move {
            let mut v = Vec::new();
            for i in 0..100 {
                let t = Instant::now();
                config_maps
                    .create(
                        &PostParams::default(),
                        &obj(json!({"metadata": {"name": format!("{prefix}-{i}")}})),
                    )
                    .await
                    .unwrap();
                v.push(t.elapsed());
            }
            v
        }
    };
    let plain = create_many("plain").await;
    let (addr, bundle) = webhook(&["hook.bench.svc"]).await;
    services
        .create(&PostParams::default(), &obj(json!({"metadata": {"name": "hook"}, "spec": {"ports": [{"name": "https", "port": 443}]}})))
        .await
        .unwrap();
    slices
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "hook-x", "labels": {"kubernetes.io/service-name": "hook"}}, "addressType": "IPv4",
                "ports": [{"name": "https", "port": addr.port()}], "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]})),
        )
        .await
        .unwrap();
    let hooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    hooks
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "hook"}, "webhooks": [{"name": "hook.bench.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "clientConfig": {"service": {"name": "hook", "namespace": "bench"}, "caBundle": bundle},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE"]}]}]})),
        )
        .await
        .unwrap();
    let hooked = create_many("hooked").await;
    println!("ConfigMap create, no webhook: {}", summary(plain));
    println!(
        "ConfigMap create, one webhook (new TLS connection per call): {}",
        summary(hooked)
    );

    // 4. A 100-replica Deployment: time to all ready, CPU for that, CPU for 10 s of probing.
    let cpu = cpu_seconds();
    let t = Instant::now();
    let mut big = deployment("big", "/nonexistent");
    big.spec.replicas = Some(100);
    deployments
        .create(&PostParams::default(), &big)
        .await
        .unwrap();
    loop {
        let list = pods
            .list(&ListParams::default().labels("app=big"))
            .await
            .unwrap();
        if list.items.len() == 100 && list.items.iter().all(ready) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "100-replica deployment → all ready: {} (sandbox CPU {:.2} s, polling included)",
        ms(t.elapsed()),
        cpu_seconds() - cpu
    );
    let cpu = cpu_seconds();
    tokio::time::sleep(Duration::from_secs(10)).await;
    println!(
        "100 pods idle for 10 s, readiness probe every 1 s: sandbox CPU {:.2} s",
        cpu_seconds() - cpu
    );

    sandbox.shutdown().await;
}
