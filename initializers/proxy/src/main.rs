//! `proxy-initializer`: inject a proxy sidecar (see the crate docs and README).

use clap::Parser;
use kube_initializer::ServeArgs;

/// Inject a proxy sidecar into pods exposing port 80 or carrying the proxy annotation.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    kube_initializer::run_main(proxy_initializer::initializer().run(args.serve))
}
