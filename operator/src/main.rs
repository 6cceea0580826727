//! `initializer-operator`: the operator's binary. Each subcommand is one enum variant and one
//! match arm; the work lives in the library.

use clap::{Parser, Subcommand};

/// jemalloc rather than the system allocator: glibc's malloc keeps much of what the probes and
/// reconciles free in holes inside its heap, never returned to the system (at 100 Initializers on
/// the sandbox, 81 MiB resident against 66 with jemalloc, 54 with its options set in
/// `.cargo/config.toml`; `docs/src/design/2026-11-jemalloc.md`). mimalloc, tried too, kept more
/// than glibc (113 MiB).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Deploys initializers and registers them only while they are ready and answering.
#[derive(Parser, Debug)]
#[command(name = "initializer-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator (reconcile Initializers, probe them, register and deregister).
    Run(initializer_operator::run::RunArgs),
    /// Print the Initializer CustomResourceDefinition as YAML.
    Crd,
    /// Install a registry+v1 bundle without OLM into the current cluster.
    Install(initializer_packaging::install::InstallArgs),
    /// Remove what `install` created (webhook configurations and Initializers first).
    Uninstall(initializer_packaging::install::UninstallArgs),
    /// Write the generated OLM bundle (or check it with --check) and validate it.
    Bundle(initializer_packaging::bundle::BundleArgs),
    /// Write the Helm chart generated from the bundle.
    Chart(initializer_packaging::bundle::chart::ChartArgs),
    /// Write the Prometheus rules file and the alerts' runbook (or check them with --check).
    Monitoring(initializer_packaging::monitoring::MonitoringArgs),
    /// Print the ClusterRoles `backend: InitializerConfiguration` needs (Kubernetes 1.7–1.13),
    /// which no bundle ships: they reach every resource. Apply and bind them yourself.
    LegacyRbac,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => initializer_operator::run::run(args).await?,
        Command::Crd => print!("{}", initializer_crds::crd_yaml()?),
        Command::Install(args) => {
            let client = kube::Client::try_default().await?;
            initializer_packaging::install::run_install(client, &args).await?;
            println!(
                "installed {} into namespace {}",
                args.bundle.display(),
                args.namespace
            );
        }
        Command::Uninstall(args) => {
            let client = kube::Client::try_default().await?;
            initializer_packaging::install::uninstall(client, &args).await?;
            println!("uninstalled");
        }
        Command::Bundle(args) => {
            initializer_packaging::bundle::run(&args)?;
            println!("bundle {} is valid", args.out.display());
        }
        Command::Chart(args) => {
            initializer_packaging::bundle::chart::run(&args)?;
            println!("chart written to {}", args.out.display());
        }
        Command::LegacyRbac => print!("{}", initializer_packaging::manifest::legacy_rbac_yaml()?),
        Command::Monitoring(args) => {
            initializer_packaging::monitoring::run(&args)?;
            println!("monitoring files in {} are up to date", args.out.display());
        }
    }
    Ok(())
}
