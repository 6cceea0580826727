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
        /// Emulate Kubernetes 1.7–1.13 Initializers (InitializerConfiguration,
        /// metadata.initializers, creates held until initialized).
        #[arg(long, env = "SANDBOX_LEGACY_INITIALIZERS", value_parser = clap::builder::FalseyValueParser::new())]
        legacy_initializers: bool,
    },
    /// Program API faults of a running sandbox.
    Fault {
        /// Kubeconfig of the running sandbox (default: $KUBECONFIG, else .sandbox/kubeconfig).
        #[arg(long, global = true)]
        kubeconfig: Option<PathBuf>,
        #[command(subcommand)]
        action: FaultCommand,
    },
    /// Freeze (SIGSTOP), thaw (SIGCONT) or kill a pod's processes in a running sandbox.
    Pod {
        /// Kubeconfig of the running sandbox (default: $KUBECONFIG, else .sandbox/kubeconfig).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// `freeze`, `thaw` or `kill`.
        action: String,
        /// Namespace.
        namespace: String,
        /// Pod name.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
enum FaultCommand {
    /// Add a rule: matching requests fail with --error CODE or wait --delay-ms MS.
    Add {
        /// Verb: get, list, watch, create, update, patch, delete, deletecollection.
        #[arg(long)]
        verb: Option<String>,
        /// API group ("" for core).
        #[arg(long)]
        group: Option<String>,
        /// Plural resource name.
        #[arg(long)]
        resource: Option<String>,
        /// Namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Object name.
        #[arg(long)]
        name: Option<String>,
        /// Answer with this HTTP status code.
        #[arg(long, conflicts_with = "delay_ms")]
        error: Option<u16>,
        /// Status message for --error.
        #[arg(long)]
        message: Option<String>,
        /// Delay matching requests by this many milliseconds.
        #[arg(long)]
        delay_ms: Option<u64>,
        /// Hit only this many requests (default: until removed).
        #[arg(long)]
        times: Option<u32>,
    },
    /// List the rules.
    List,
    /// Remove one rule by id.
    Remove {
        /// Rule id, as `add` printed it.
        id: u64,
    },
    /// Remove every rule.
    Clear,
    /// End every open watch stream.
    DropWatches,
}

fn kubeconfig_path(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("KUBECONFIG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(".sandbox/kubeconfig"))
}

async fn control(
    kubeconfig: Option<PathBuf>,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> anyhow::Result<String> {
    let path_buf = kubeconfig_path(kubeconfig);
    let kc = kube::config::Kubeconfig::read_from(&path_buf)
        .with_context(|| format!("failed to read kubeconfig {}", path_buf.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .context("failed to load kubeconfig")?;
    let client = kube::Client::try_from(config).context("failed to build client")?;
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(bytes)
        .context("failed to build request")?;
    client
        .request_text(req)
        .await
        .context("sandbox control request failed")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    initializer_telemetry::Logging::new().stderr().init();
    let cli = Cli::parse();
    match cli.command {
        Command::Up {
            state_dir,
            images,
            port,
            restore,
            snapshot,
            legacy_initializers,
        } => {
            let started = Instant::now();
            let mut config = SandboxConfig::new(state_dir);
            config.image_map = images;
            config.port = port;
            config.restore = restore;
            config.legacy_initializers = legacy_initializers;
            let handle = Sandbox::start(config)
                .await
                .context("failed to start the sandbox")?;
            say(format!("sandbox serving at {}", handle.url()));
            say(format!(
                "kubeconfig: {}",
                handle.kubeconfig_path().display()
            ));
            say(format!("pod logs: {}", handle.pod_log_dir().display()));
            if legacy_initializers {
                say("legacy mode: Kubernetes 1.7-1.13 Initializers".to_string());
            }
            say(format!("started in {} ms", started.elapsed().as_millis()));
            say(format!(
                "use: export KUBECONFIG={}",
                handle.kubeconfig_path().display()
            ));
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
        Command::Fault { kubeconfig, action } => {
            let out = match action {
                FaultCommand::Add {
                    verb,
                    group,
                    resource,
                    namespace,
                    name,
                    error,
                    message,
                    delay_ms,
                    times,
                } => {
                    let action = match (error, delay_ms) {
                        (Some(code), _) => {
                            serde_json::json!({"type": "error", "code": code, "message": message})
                        }
                        (None, Some(ms)) => serde_json::json!({"type": "delay", "millis": ms}),
                        (None, None) => anyhow::bail!("give --error CODE or --delay-ms MS"),
                    };
                    let rule = serde_json::json!({
                        "verb": verb, "group": group, "resource": resource, "namespace": namespace,
                        "name": name, "action": action, "times": times,
                    });
                    control(kubeconfig, "POST", "/sandbox/v1/faults", Some(rule)).await?
                }
                FaultCommand::List => {
                    control(kubeconfig, "GET", "/sandbox/v1/faults", None).await?
                }
                FaultCommand::Remove { id } => {
                    control(
                        kubeconfig,
                        "DELETE",
                        &format!("/sandbox/v1/faults/{id}"),
                        None,
                    )
                    .await?
                }
                FaultCommand::Clear => {
                    control(kubeconfig, "DELETE", "/sandbox/v1/faults", None).await?
                }
                FaultCommand::DropWatches => {
                    control(kubeconfig, "POST", "/sandbox/v1/watches/drop", None).await?
                }
            };
            println!("{out}");
            Ok(())
        }
        Command::Pod {
            kubeconfig,
            action,
            namespace,
            name,
        } => {
            let path = format!("/sandbox/v1/pods/{namespace}/{name}/{action}");
            println!("{}", control(kubeconfig, "POST", &path, None).await?);
            Ok(())
        }
    }
}

/// Prints a line; a closed stdout (the reader went away) must not stop the server.
fn say(line: String) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
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
