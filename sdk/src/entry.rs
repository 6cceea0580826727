//! The entry point of an initializer binary: log setup plus [`block_on`], so an author's `main`
//! is "parse the arguments, build the initializer, [`run_main`]".

use std::future::Future;

use crate::error::Error;
use crate::server::block_on;

/// Log to stderr through `tracing-subscriber`'s formatter, filtered by `RUST_LOG` (default
/// `info`). Does nothing if a global subscriber is already installed. [`run_main`] calls it;
/// call it yourself only when you drive the runtime with [`block_on`].
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // An already installed subscriber (a test harness, the caller's own) wins.
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
}

/// Everything an initializer binary's `main` does after parsing its arguments: [`init_tracing`],
/// then run `future` (typically [`Initializer::run`](crate::Initializer::run), HTTPS until
/// SIGTERM, then drain) with [`block_on`], which does not wait at exit for a handler thread
/// stuck past its budget. Errors of the runtime and of `future` come back as `E` (the SDK's
/// [`Error`], or e.g. `anyhow::Error`).
///
/// ```no_run
/// # use clap::Parser;
/// # use kube_initializer::{Initializer, ServeArgs};
/// # #[derive(Parser)] struct Args { #[command(flatten)] serve: ServeArgs }
/// fn main() -> Result<(), kube_initializer::Error> {
///     let args = Args::parse();
///     kube_initializer::run_main(Initializer::new("noop").run(args.serve))
/// }
/// ```
pub fn run_main<T, E, FE, F>(future: F) -> Result<T, E>
where
    F: Future<Output = Result<T, FE>>,
    E: From<Error> + From<FE>,
{
    init_tracing();
    Ok(block_on(future)??)
}
