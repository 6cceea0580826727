//! A real SDK-built initializer (the secret guard) for the operator's reconcile tests: the
//! sandbox maps the test image to this executable and runs it as the Initializer's pods.

use clap::Parser;
use kube_initializer::ServeArgs;
use secret_guard_initializer::SecretGuard;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let guard = SecretGuard {
        min_length: 20,
        types: vec!["Opaque".into()],
    };
    secret_guard_initializer::initializer(guard)
        .run(args.serve)
        .await?;
    Ok(())
}
