//! Sandbox figures: startup time (library and `sandbox up` process), resident memory of the
//! `sandbox up` process at idle and with 1,000 objects, watch event latency, and legacy mode
//! (1.7–1.13 Initializers): create throughput with it on, and the round trip of a create held
//! until an initializer removes its name.
//!
//! Run with `cargo bench -p initializer-sandbox --bench api` (prints a table; asserts nothing);
//! `-- legacy` prints only the legacy-mode figures.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use initializer_sandbox::{Sandbox, SandboxConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "bench", "index": name}},
        "data": {"config.yaml": "x".repeat(512)}
    }))
    .unwrap()
}

/// Creates ConfigMap `name` (about 0.7 KiB) through `cms`.
async fn create_cm(cms: &Api<ConfigMap>, name: &str) {
    cms.create(&PostParams::default(), &cm(name)).await.unwrap();
}

async fn library_startup(runs: usize) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let mut config = SandboxConfig::new(dir.path().join("state"));
        config.workloads = false;
        let t = Instant::now();
        let handle = Sandbox::start(config).await.unwrap();
        // Count until the first request is answered.
        handle.client().apiserver_version().await.unwrap();
        times.push(t.elapsed());
        handle.shutdown().await;
    }
    times.sort();
    times
}

/// Starts `sandbox up`; returns the child, its startup time (spawn to kubeconfig printed and the
/// first request answered) and a client.
async fn spawn_process(dir: &std::path::Path) -> (std::process::Child, Duration, kube::Client) {
    let t = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["up", "--state-dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // Keep draining stdout so the child never writes into a closed pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(p) = line.strip_prefix("kubeconfig: ") {
                let _ = tx.send(p.to_string());
            }
        }
    });
    let kubeconfig = rx.recv_timeout(Duration::from_secs(30)).ok();
    let kc = kube::config::Kubeconfig::read_from(kubeconfig.unwrap()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    client.apiserver_version().await.unwrap();
    (child, t.elapsed(), client)
}

async fn watch_latency(samples: usize) -> Vec<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.workloads = false;
    let handle = Sandbox::start(config).await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(handle.client());
    let rv = cms
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .unwrap()
        .boxed();
    let mut lat = Vec::new();
    for i in 0..samples {
        let t = Instant::now();
        create_cm(&cms, &format!("w{i}")).await;
        loop {
            match stream.try_next().await.unwrap().unwrap() {
                WatchEvent::Added(_) => break,
                WatchEvent::Bookmark(_) => continue,
                other => panic!("unexpected event {other:?}"),
            }
        }
        lat.push(t.elapsed());
    }
    handle.shutdown().await;
    lat.sort();
    lat
}

/// Sequential creates per second through one client, legacy mode on or off (no configuration:
/// what every create pays for looking configurations up).
async fn create_rate(legacy: bool, n: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.workloads = false;
    config.legacy_initializers = legacy;
    let handle = Sandbox::start(config).await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(handle.client());
    let t = Instant::now();
    for i in 0..n {
        create_cm(&cms, &format!("r{i}")).await;
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    handle.shutdown().await;
    rate
}

/// Legacy mode: a create held by one initializer (a task that watches with
/// `includeUninitialized=true` and removes its name with one PUT), from sending the create to
/// its 201.
async fn initialization_round_trip(samples: usize) -> Vec<Duration> {
    const NAME: &str = "bench.initializer.example.com";
    let dir = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.workloads = false;
    config.legacy_initializers = true;
    let handle = Sandbox::start(config).await.unwrap();
    let client = handle.client();
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1", "kind": "InitializerConfiguration",
        "metadata": {"name": "bench"},
        "initializers": [{"name": NAME, "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}],
    });
    let request = http::Request::builder()
        .method("POST")
        .uri("/apis/admissionregistration.k8s.io/v1alpha1/initializerconfigurations")
        .header("content-type", "application/json")
        .body(configuration.to_string().into_bytes())
        .unwrap();
    client.request::<serde_json::Value>(request).await.unwrap();
    let watch = http::Request::builder()
        .uri("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0&includeUninitialized=true")
        .body(Vec::new())
        .unwrap();
    let mut events = client
        .request_events::<serde_json::Value>(watch)
        .await
        .unwrap()
        .boxed();
    let initializer_client = client.clone();
    let initializer = tokio::spawn(async move {
        while let Some(Ok(event)) = events.next().await {
            let WatchEvent::Added(mut obj) = event else {
                continue;
            };
            if obj.pointer("/metadata/initializers/pending/0/name") != Some(&json!(NAME)) {
                continue;
            }
            if let Some(pending) = obj
                .pointer_mut("/metadata/initializers/pending")
                .and_then(|p| p.as_array_mut())
            {
                pending.remove(0);
            }
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            let put = http::Request::builder()
                .method("PUT")
                .uri(format!("/api/v1/namespaces/default/configmaps/{name}"))
                .header("content-type", "application/json")
                .body(obj.to_string().into_bytes())
                .unwrap();
            initializer_client
                .request::<serde_json::Value>(put)
                .await
                .unwrap();
        }
    });
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let mut lat = Vec::new();
    for i in 0..samples {
        let t = Instant::now();
        create_cm(&cms, &format!("held{i}")).await;
        lat.push(t.elapsed());
    }
    initializer.abort();
    handle.shutdown().await;
    lat.sort();
    lat
}

async fn legacy_figures() {
    let plain = create_rate(false, 1000).await;
    let legacy = create_rate(true, 1000).await;
    println!(
        "create throughput, sequential, legacy mode off / on without configuration: {plain:.0} / {legacy:.0} objects/s"
    );
    let lat = initialization_round_trip(300).await;
    println!(
        "legacy create held by one initializer (create sent to 201), 300 samples: {}",
        spread(&lat)
    );
}

/// `p50 …, p95 …, p99 …, max …` of sorted samples.
fn spread(sorted: &[Duration]) -> String {
    format!(
        "p50 {}, p95 {}, p99 {}, max {}",
        ms(percentile(sorted, 0.5)),
        ms(percentile(sorted, 0.95)),
        ms(percentile(sorted, 0.99)),
        ms(sorted[sorted.len() - 1])
    )
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; `legacy` asks for the legacy-mode figures alone.
    if std::env::args().any(|a| a == "legacy") {
        legacy_figures().await;
        return;
    }
    let lib = library_startup(10).await;
    println!(
        "startup, library (Sandbox::start to first answer), 10 runs: median {}, max {}",
        ms(percentile(&lib, 0.5)),
        ms(lib[lib.len() - 1])
    );

    let dir = tempfile::tempdir().unwrap();
    let (mut child, startup, client) = spawn_process(&dir.path().join("state")).await;
    println!(
        "startup, process (`sandbox up` spawn to first answer): {}",
        ms(startup)
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = child.id();
    println!("memory, idle `sandbox up` (RSS): {} KiB", rss_kib(pid));
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let t = Instant::now();
    for i in 0..1000 {
        create_cm(&cms, &format!("c{i}")).await;
    }
    let create_time = t.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "memory, `sandbox up` with 1,000 ConfigMaps of ~0.7 KiB (RSS): {} KiB",
        rss_kib(pid)
    );
    println!(
        "create throughput, sequential, one client: {:.0} objects/s",
        1000.0 / create_time.as_secs_f64()
    );
    let t = Instant::now();
    let n = cms.list(&Default::default()).await.unwrap().items.len();
    println!("list of {n} ConfigMaps: {}", ms(t.elapsed()));
    let _ = child.kill();
    let _ = child.wait();

    let lat = watch_latency(300).await;
    println!(
        "watch event latency (create sent to ADDED received), 300 samples: {}",
        spread(&lat)
    );
    legacy_figures().await;
}
