//! Reconcile benchmark: prints the time per reconcile of one Initializer against the sandbox
//! (steady state: every object already applied, so each reconcile is reads plus no-op
//! server-side applies), and the time of the pure validate + build step.
//!
//! Run with `cargo bench -p initializer-operator --bench reconcile`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

// The tests' installer alone: the rest of their support starts clusters the benchmark does
// not use.
#[path = "../tests/support/install.rs"]
mod install;

use std::sync::Arc;
use std::time::{Duration, Instant};

use initializer_crds::Initializer;
use initializer_operator::build::{Settings, build};
use initializer_operator::controller::{Context, reconcile};
use initializer_operator::metrics::Metrics;
use initializer_operator::supervisor::Supervisor;
use initializer_operator::{tls, validate};
use initializer_sandbox::{Sandbox, SandboxConfig};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::json;

const NS: &str = "initializer-system";

fn sidecar() -> Initializer {
    serde_json::from_value(json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {"name": "sidecar"},
        "spec": {
            "image": "ghcr.io/initializer-dev/sidecar-initializer:0.1.0",
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}],
            "annotation": {"name": "initializer.kubernetes.io/sidecar", "required": true},
            "config": {"inline": "containers:\n  - name: sidecar-nginx\n    image: nginx:1.25\n"},
        }
    }))
    .unwrap()
}

fn summary(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let n = samples.len();
    let mean = samples.iter().sum::<Duration>() / u32::try_from(n).unwrap();
    println!(
        "{name}: n={n} mean={:.3} ms p50={:.3} ms p95={:.3} ms max={:.3} ms",
        mean.as_secs_f64() * 1e3,
        samples[n / 2].as_secs_f64() * 1e3,
        samples[n * 95 / 100].as_secs_f64() * 1e3,
        samples[n - 1].as_secs_f64() * 1e3,
    );
}

fn pure() {
    let init = sidecar();
    let material = tls::ensure(
        None,
        None,
        &tls::dns_names("sidecar", NS),
        jiff::Timestamp::now(),
    )
    .unwrap();
    let settings = Settings {
        preset_image: "ghcr.io/initializer-dev/preset-initializer:0.1.0".into(),
        network_policy: None,
    };
    let mut samples = Vec::new();
    for _ in 0..2000 {
        let started = Instant::now();
        let v = validate::validate(&init.spec, NS, "sidecar").unwrap();
        let desired = build(&v, &material, &settings, None);
        std::hint::black_box(desired);
        samples.push(started.elapsed());
    }
    summary("validate+build (pure)", samples);
    let mut samples = Vec::new();
    let names = tls::dns_names("sidecar", NS);
    for _ in 0..200 {
        let started = Instant::now();
        let kept = tls::needs_rotation(&material, jiff::Timestamp::now(), &names);
        std::hint::black_box(kept);
        samples.push(started.elapsed());
    }
    summary("tls rotation check (parse two certificates)", samples);
}

async fn against_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::new(dir.path().join("state"));
    // No pods: the benchmark measures the reconcile, not process start-up.
    config.workloads = false;
    let sandbox = Sandbox::start(config).await.unwrap();
    let client = sandbox.client();
    install::install_crd_and_namespace(&client, NS).await;
    let api: Api<Initializer> = Api::all(client.clone());
    api.create(&PostParams::default(), &sidecar())
        .await
        .unwrap();
    let metrics = Metrics::shared();
    let recorder = Recorder::new(client.clone(), Reporter::from("initializer-operator-bench"));
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: recorder.clone(),
        metrics: metrics.clone(),
        settings: Settings {
            preset_image: "ghcr.io/initializer-dev/preset-initializer:0.1.0".into(),
            network_policy: None,
        },
        operator_namespace: NS.into(),
        supervisor: Supervisor::new(
            client.clone(),
            recorder,
            metrics,
            "bench".into(),
            initializer_operator::leader::Leadership::unconditional(),
        ),
        memory: Default::default(),
        guard: tokio::sync::watch::channel(initializer_operator::guard::GuardState::NotServed).1,
        policy_canary: None,
        policy_api: Default::default(),
        seen_ranges: Default::default(),
    });
    // First reconciles: add the finalizer, create every object, make the certificates.
    for _ in 0..3 {
        let obj = api.get("sidecar").await.unwrap();
        let started = Instant::now();
        reconcile(Arc::new(obj), ctx.clone()).await.unwrap();
        println!(
            "warm-up reconcile: {:.3} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    let mut samples = Vec::new();
    for _ in 0..100 {
        let obj = api.get("sidecar").await.unwrap();
        let started = Instant::now();
        reconcile(Arc::new(obj), ctx.clone()).await.unwrap();
        samples.push(started.elapsed());
    }
    summary(
        "reconcile of one Initializer against the sandbox (steady state)",
        samples,
    );
    ctx.supervisor.stop_all();
    sandbox.shutdown().await;
}

fn main() {
    // `cargo test --benches` passes --bench-less flags; only measure when benchmarking.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    pure();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(against_sandbox());
}
