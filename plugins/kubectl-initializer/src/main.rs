//! The `kubectl-initializer` binary: kubectl finds it on PATH and runs it for
//! `kubectl initializer ...`.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;
use kubectl_initializer::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(kubectl_initializer::commands::run(cli)) {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth reporting.
            let _ = stdout.write_all(out.as_bytes());
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Err(e) => {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(e.stdout().as_bytes());
            let _ = stdout.flush();
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
