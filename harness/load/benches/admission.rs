//! Benchmarks of the sidecar initializer on the tutorial's nginx Pod (prints figures; no
//! assertions): the in-process path step by step, then the full server over HTTPS on loopback
//! under load.
//!
//! `cargo bench -p initializer-load --bench admission` (set `BENCH_SECONDS` to change the
//! length of each load run, default 10).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use initializer_load::client::Trust;
use initializer_load::load::{LoadSpec, run};
use k8s_openapi::api::core::v1::Pod;
use kube_initializer::ServeArgs;
use kube_initializer::advanced::{Response, Tuning};
use kube_initializer::mutate::{self, PodSpecHolder};
use kube_initializer::testing::{Tester, review};
use serde_json::Value;
use sidecar_initializer::tutorial;
use sidecar_initializer::{SidecarConfig, initializer};

fn per_op(label: &str, iterations: u32, mut f: impl FnMut()) {
    for _ in 0..iterations / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(iterations);
    println!("  {label:<58} {ns:>9.0} ns/op");
}

fn config() -> SidecarConfig {
    serde_saphyr::from_str(tutorial::SIDECAR_CONFIG).unwrap()
}

fn in_process(runtime: &tokio::runtime::Runtime) {
    let body = review(&tutorial::nginx_pod()).to_bytes();
    let config = config();
    println!(
        "in-process, the tutorial's nginx Pod ({} byte review) with the sidecar initializer:",
        body.len()
    );
    let n = 20_000;

    #[derive(serde::Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        request: Request<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        object: &'a serde_json::value::RawValue,
    }
    per_op(
        "parse the review, object kept as raw JSON text (what the SDK does)",
        n,
        || {
            let envelope = serde_json::from_slice::<Envelope>(black_box(&body)).unwrap();
            black_box(envelope.request.object.get().len());
        },
    );
    let doc: Value = serde_json::from_slice(&body).unwrap();
    let object = doc["request"]["object"].clone();
    let object_text = serde_json::to_string(&object).unwrap();
    per_op(
        "deserialize Pod from the raw JSON text (what the SDK does)",
        n,
        || {
            black_box(serde_json::from_str::<Pod>(black_box(&object_text)).unwrap());
        },
    );
    per_op(
        "(replaced) parse the whole review into serde_json::Value",
        n,
        || {
            black_box(serde_json::from_slice::<Value>(black_box(&body)).unwrap());
        },
    );
    per_op(
        "(replaced) deserialize Pod from a Value (incl. its clone)",
        n,
        || {
            black_box(serde_json::from_value::<Pod>(object.clone()).unwrap());
        },
    );
    let pod: Pod = serde_json::from_value(object.clone()).unwrap();
    per_op(
        "serialize Pod to JSON text (what the SDK does, before and after)",
        n,
        || {
            black_box(serde_json::to_string(black_box(&pod)).unwrap());
        },
    );
    per_op(
        "(replaced) serialize Pod to a Value (was done three times)",
        n,
        || {
            black_box(serde_json::to_value(black_box(&pod)).unwrap());
        },
    );
    per_op("run the handler (add_container) on a cloned Pod", n, || {
        let mut p = pod.clone();
        mutate::add_container(p.pod_spec_mut().unwrap(), &config.containers[0]);
        black_box(p);
    });
    let before = serde_json::to_value(&pod).unwrap();
    let mut patched = pod.clone();
    mutate::add_container(patched.pod_spec_mut().unwrap(), &config.containers[0]);
    let after = serde_json::to_value(&patched).unwrap();
    per_op(
        "(replaced) json_patch::diff(before, after), was done twice",
        n,
        || {
            black_box(json_patch::diff(black_box(&before), black_box(&after)));
        },
    );
    let mut response = Response::allow("00000000-0000-0000-0000-000000000001");
    response.patch = Some(json_patch::diff(&before, &after));
    per_op(
        "serialize the response (patch JSON + base64 + review)",
        n,
        || {
            black_box(response.to_json());
        },
    );
    per_op("tokio spawn_blocking round trip (empty closure)", n, || {
        runtime.block_on(async { tokio::task::spawn_blocking(|| 1).await.unwrap() });
    });
    let init = initializer().fixed_config(config.clone());
    per_op(
        "review_json, whole path, called from outside the workers (2 hand-offs)",
        n,
        || {
            black_box(runtime.block_on(init.review_json(&body)).unwrap());
        },
    );
    let inline = initializer()
        .fixed_config(config.clone())
        .inline_handlers(true);
    per_op("the whole path with inline_handlers(true)", n, || {
        black_box(runtime.block_on(inline.review_json(&body)).unwrap());
    });
    per_op(
        "runtime.block_on of a ready future (bench overhead)",
        n,
        || {
            black_box(runtime.block_on(async { 1 }));
        },
    );
    let tester = Tester::new(initializer().fixed_config(config.clone()));
    per_op("through the axum router (Tester, no socket)", n, || {
        black_box(
            runtime
                .block_on(tester.send("POST", "/initialize", body.clone()))
                .unwrap(),
        );
    });
}

fn over_https(seconds: f64, inline: bool) {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), cert.signing_key.serialize_pem()).unwrap();
    std::fs::write(dir.path().join("config.yaml"), tutorial::SIDECAR_CONFIG).unwrap();

    // The server gets its own runtime (as its own process would), the load generator another.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let args = ServeArgs::new(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        dir.path(),
        dir.path(),
    );
    let server = server_rt
        .block_on(initializer().inline_handlers(inline).bind(&args))
        .unwrap();
    let url = format!(
        "https://127.0.0.1:{}/initialize",
        server.local_addr().port()
    );
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = Bytes::from(review(&tutorial::nginx_pod()).to_bytes());

    let mode = if inline {
        "inline handlers"
    } else {
        "handlers as tasks on the async workers (default)"
    };
    println!("\nfull server over HTTPS on loopback ({url}), {mode}, {seconds} s per run:");
    let runs: [(&str, Option<f64>, usize); 4] = [
        ("open loop 1000 req/s, 16 connections", Some(1000.0), 16),
        ("open loop 1000 req/s, 2 connections", Some(1000.0), 2),
        ("open loop 3000 req/s, 16 connections", Some(3000.0), 16),
        ("closed loop, 32 concurrent", None, 32),
    ];
    for (label, rate, connections) in runs {
        let spec = LoadSpec {
            url: url.clone(),
            // The self-signed serving certificate is its own trust anchor.
            trust: Trust::CaPem(cert.cert.pem().into_bytes()),
            body: body.clone(),
            rate,
            connections,
            duration: Duration::from_secs_f64(seconds),
            warmup: Duration::from_secs(1),
        };
        let report = client_rt.block_on(run(&spec)).unwrap();
        println!("  {label:<40} {}", report.summary());
        if let Some(e) = report.first_error {
            println!("    first error: {e}");
        }
    }
    server_rt.block_on(server.shutdown());
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing and wants it quick.
    let benching = std::env::args().any(|a| a == "--bench");
    if !benching {
        println!("run with `cargo bench` for figures");
        return;
    }
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    in_process(&runtime);
    drop(runtime);
    over_https(seconds, false);
    over_https(seconds, true);
}
