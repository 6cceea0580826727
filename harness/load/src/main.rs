//! `initializer-load`: POST AdmissionReviews to any HTTPS URL under load and print req/s and
//! latency percentiles.
//!
//! ```text
//! initializer-load --url https://127.0.0.1:8443/initialize --ca-file ca.crt --rate 1000 --duration 10
//! initializer-load --url https://my-webhook:443/mutate --ca-file ca.crt --concurrency 32 --review review.json
//! ```

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use initializer_load::client::Trust;
use initializer_load::load::{LoadSpec, run};
use kube_initializer::testing::review;
use sidecar_initializer::tutorial;

/// Load an admission endpoint and report throughput and latency.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The endpoint, e.g. https://127.0.0.1:8443/initialize.
    #[arg(long)]
    url: String,
    /// Requests per second over all connections (open loop, latency from the scheduled time).
    #[arg(long, conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// Closed loop: this many requesters, each sending as soon as the last answer arrived.
    #[arg(long)]
    concurrency: Option<usize>,
    /// Connections for the open loop.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Seconds to measure.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds to send before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// PEM file with the CA that signed the server's certificate (for a webhook, its
    /// configuration's caBundle; a self-signed certificate is its own CA). There is no way to
    /// skip verification.
    #[arg(long)]
    ca_file: PathBuf,
    /// AdmissionReview JSON to send [default: a CREATE of the sidecar tutorial's nginx Pod].
    #[arg(long)]
    review: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let trust = Trust::CaPem(std::fs::read(&args.ca_file)?);
    let body = match &args.review {
        Some(path) => std::fs::read(path)?,
        None => review(&tutorial::nginx_pod()).to_bytes(),
    };
    let spec = LoadSpec {
        url: args.url.clone(),
        trust,
        body: Bytes::from(body),
        rate: if args.concurrency.is_some() {
            None
        } else {
            Some(args.rate.unwrap_or(1000.0))
        },
        connections: args.concurrency.unwrap_or(args.connections),
        duration: Duration::from_secs_f64(args.duration),
        warmup: Duration::from_secs_f64(args.warmup),
    };
    let mode = match spec.rate {
        Some(rate) => format!(
            "open loop {rate} req/s over {} connections",
            spec.connections
        ),
        None => format!("closed loop, concurrency {}", spec.connections),
    };
    println!("{} for {:?}: {mode}", args.url, spec.duration);
    let report = run(&spec).await?;
    println!("{}", report.summary());
    if let Some(e) = &report.first_error {
        println!("first error: {e}");
    }
    Ok(())
}
