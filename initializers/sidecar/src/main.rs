//! `sidecar-initializer`: serve the sidecar initializer (see the crate docs and README).

use clap::Parser;
use kube_initializer::ServeArgs;

/// Inject the sidecars of config.yaml into Deployments and Pods.
///
/// `--annotation NAME --require-annotation` touches only objects carrying the annotation.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    // The SDK's block_on does not wait for handler threads stuck past their budget.
    kube_initializer::block_on(sidecar_initializer::initializer().run(args.serve))??;
    Ok(())
}
