//! Sandbox figures: startup time (library and `sandbox up` process), resident memory of the
//! `sandbox up` process at idle and with 1,000 objects, and watch event latency.
//!
//! Run with `cargo bench -p initializer-sandbox --bench api` (prints a table; asserts nothing).

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
        cms.create(&PostParams::default(), &cm(&format!("w{i}")))
            .await
            .unwrap();
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

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
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
        cms.create(&PostParams::default(), &cm(&format!("c{i}")))
            .await
            .unwrap();
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
        "watch event latency (create sent to ADDED received), 300 samples: p50 {}, p95 {}, p99 {}, max {}",
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.95)),
        ms(percentile(&lat, 0.99)),
        ms(lat[lat.len() - 1])
    );
}
