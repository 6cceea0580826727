//! `sandbox`: run the embedded control plane in the foreground, or talk to a running one.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use initializer_sandbox::{Sandbox, SandboxConfig};

#[derive(Parser, Debug)]
#[command(
    name = "sandbox",
    about = "An embedded Kubernetes control plane for one machine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the API (and run pods) until SIGINT or SIGTERM.
    Up {
        /// State directory: CA, kubeconfig, pods' files and logs.
        #[arg(long, default_value = ".sandbox")]
        state_dir: PathBuf,
        /// Image map: YAML mapping image references to local executables.
        #[arg(long)]
        images: Option<PathBuf>,
        /// Port on 127.0.0.1 (0: any free port).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Load this snapshot at start.
        #[arg(long)]
        restore: Option<PathBuf>,
        /// Write a snapshot here on shutdown.
        #[arg(long)]
        snapshot: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Up {
            state_dir,
            images,
            port,
            restore,
            snapshot,
        } => {
            let started = Instant::now();
            let mut config = SandboxConfig::new(state_dir);
            config.image_map = images;
            config.port = port;
            config.restore = restore;
            let handle = Sandbox::start(config)
                .await
                .context("failed to start the sandbox")?;
            println!("sandbox serving at {}", handle.url());
            println!("kubeconfig: {}", handle.kubeconfig_path().display());
            println!("pod logs: {}", handle.pod_log_dir().display());
            println!("started in {} ms", started.elapsed().as_millis());
            println!(
                "use: export KUBECONFIG={}",
                handle.kubeconfig_path().display()
            );
            wait_for_signal().await?;
            eprintln!("shutting down");
            if let Some(path) = snapshot {
                handle
                    .snapshot_to(&path)
                    .context("failed to write the snapshot")?;
            }
            handle.shutdown().await;
            Ok(())
        }
    }
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("failed to watch SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("failed to watch SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
