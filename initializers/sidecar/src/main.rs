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
    let args = Args::parse();
    kube_initializer::run_main(sidecar_initializer::initializer().run(args.serve))
}
