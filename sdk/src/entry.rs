//! The entry point of an initializer binary: [`Initializer::main`] when the standard flags are
//! all it takes, or [`run_main`] (log setup plus [`block_on`]) after parsing its own flags.

use std::future::Future;

use clap::{CommandFactory, FromArgMatches, Parser};
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::initializer::Initializer;
use crate::serve::server::{ServeArgs, block_on};

/// The command line of an initializer with only the standard flags.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "Serve an initializer (a mutating admission webhook) over HTTPS."
)]
struct StandardArgs {
    #[command(flatten)]
    serve: ServeArgs,
}

impl<C: DeserializeOwned + Send + Sync + 'static> Initializer<C> {
    /// The whole `main` of an initializer binary whose flags are the standard ones
    /// ([`ServeArgs`]): parse them (exiting with usage on bad flags or `--help`), then
    /// [`run_main`] with [`Initializer::run`].
    ///
    /// ```no_run
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kube_initializer::{Denial, Initializer, Review};
    ///
    /// fn no_host_network(pod: &mut Pod, _: &Review) -> Result<(), Denial> {
    ///     match pod.spec.as_ref().and_then(|s| s.host_network) {
    ///         Some(true) => Err("hostNetwork is not allowed".into()),
    ///         _ => Ok(()),
    ///     }
    /// }
    ///
    /// fn main() -> Result<(), kube_initializer::Error> {
    ///     Initializer::new("no-host-network").handle(no_host_network).main()
    /// }
    /// ```
    pub fn main(self) -> Result<(), Error> {
        let args = parse_standard_args(std::env::args_os());
        run_main(self.run(args.serve))
    }
}

/// The standard flags from `argv`, `--help` and `--version` naming the binary (`argv[0]`)
/// rather than the SDK.
fn parse_standard_args(argv: impl IntoIterator<Item = std::ffi::OsString>) -> StandardArgs {
    let argv: Vec<_> = argv.into_iter().collect();
    let binary = binary_name(argv.first().map(std::ffi::OsString::as_os_str));
    // clap takes a `&'static str` name; this runs once per process, so leaking it is fine.
    let command = StandardArgs::command().name(&*binary.leak());
    let matches = command.get_matches_from(argv);
    StandardArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Log text lines to stdout, filtered by `RUST_LOG` (default `info`), through the workspace's
/// one tracing setup (`initializer-telemetry`). Does nothing if a global subscriber is already
/// installed (a test harness, the caller's own). [`run_main`] calls it; call it yourself only
/// when you drive the runtime with [`block_on`].
pub fn init_tracing() {
    initializer_telemetry::init_tracing(false);
}

/// Everything an initializer binary's `main` does after parsing its arguments: [`init_tracing`],
/// then run `future` (typically [`Initializer::run`](crate::Initializer::run), HTTPS until
/// SIGTERM, then drain) with [`block_on`], which does not wait at exit for a handler thread
/// stuck past its budget. Errors of the runtime and of `future` come back as `E` (the SDK's
/// [`Error`], or e.g. `anyhow::Error`).
///
/// ```no_run
/// # use clap::{CommandFactory, FromArgMatches, Parser};
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

/// The file name of `argv[0]`, or `initializer` when there is none.
fn binary_name(argv0: Option<&std::ffi::OsStr>) -> String {
    argv0
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "initializer".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_args_parse_the_serve_flags_and_name_the_binary() {
        let argv = ["/usr/bin/my-initializer", "--tls-dir", "/certs"];
        let args = parse_standard_args(argv.iter().map(Into::into));
        assert_eq!(args.serve.tls_dir, std::path::Path::new("/certs"));
        assert_eq!(
            binary_name(Some("/usr/bin/my-initializer".as_ref())),
            "my-initializer"
        );
        assert_eq!(binary_name(None), "initializer");
    }
}
