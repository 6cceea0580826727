//! `preset-initializer`: the built-in initializer driven only by config.yaml (a PresetConfig).

use clap::Parser;
use kube_initializer::ServeArgs;

/// Inject containers, volumes, env, labels and annotations as config.yaml says.
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
    kube_initializer::block_on(preset_initializer::initializer().run(args.serve))??;
    Ok(())
}
