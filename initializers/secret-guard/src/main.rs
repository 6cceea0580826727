//! `secret-guard-initializer`: refuse Secrets with short values (see the crate docs and README).

use clap::Parser;
use kube_initializer::ServeArgs;
use secret_guard_initializer::{DEFAULT_MIN_LENGTH, SecretGuard};

/// Refuse Secrets with any value shorter than --min-length characters.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Minimum length of every value.
    #[arg(long, env = "SECRET_GUARD_MIN_LENGTH", default_value_t = DEFAULT_MIN_LENGTH)]
    min_length: usize,
    /// Secret types to check (repeat for several); an absent type counts as Opaque.
    #[arg(long = "type", default_value = "Opaque")]
    types: Vec<String>,
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> Result<(), kube_initializer::Error> {
    let args = Args::parse();
    let guard = SecretGuard {
        min_length: args.min_length,
        types: args.types,
    };
    kube_initializer::run_main(secret_guard_initializer::initializer(guard).run(args.serve))
}
