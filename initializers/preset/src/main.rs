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
    let args = Args::parse();
    kube_initializer::run_main(preset_initializer::initializer().run(args.serve))
}
