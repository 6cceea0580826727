//! `initializer-operator`: the operator's binary. Each subcommand is one enum variant and one
//! match arm; the work lives in the library.

use clap::{Parser, Subcommand};

/// jemalloc rather than the system allocator: glibc's malloc keeps much of what the probes and
/// reconciles free in holes inside its heap, never returned to the system; jemalloc, with the
/// options `.cargo/config.toml` sets, returns it. (mimalloc kept more than glibc. The figures
/// are in `docs/src/design/2026-11-jemalloc.md`.)
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
    /// Apply the guard on Initializers and return once it is in force (the Helm chart's
    /// pre-install hook, run before the CRD exists).
    Guard,
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
        Command::Guard => {
            use initializer_packaging::install::GuardApplied;
            let client = kube::Client::try_default().await?;
            match initializer_packaging::install::run_guard(client).await? {
                GuardApplied::New => println!("the guard on Initializers is applied and in force"),
                GuardApplied::AlreadyThere => {
                    println!("the guard on Initializers was in force; applied again")
                }
                GuardApplied::NotServed => {
                    eprintln!("{}", initializer_packaging::guard::NOT_SERVED_WARNING)
                }
            }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::CommandFactory;

    use super::Cli;

    /// The book's CLI page (`docs/src/reference/cli.md`).
    const PAGE: &str = include_str!("../../docs/src/reference/cli.md");

    /// The flags a subcommand declares, each with its environment variable.
    fn declared(subcommand: &str) -> BTreeMap<String, Option<String>> {
        let cli = Cli::command();
        let command = cli
            .find_subcommand(subcommand)
            .unwrap_or_else(|| panic!("no subcommand {subcommand}"));
        command
            .get_arguments()
            .filter_map(|arg| {
                let long = arg.get_long()?;
                let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
                Some((format!("--{long}"), env))
            })
            .filter(|(long, _)| long != "--help" && long != "--version")
            .collect()
    }

    /// The rows of the table under `heading`: each flag named in a row's first cell (after the
    /// `subcommand` column when the table has one), with the cell after it.
    fn documented(heading: &str, subcommand: Option<&str>) -> BTreeMap<String, String> {
        let section = PAGE
            .split_once(heading)
            .unwrap_or_else(|| panic!("{heading} is not in the page"))
            .1;
        let mut flags = BTreeMap::new();
        for row in section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
        {
            // Between the row's first and last `|`: empty cells keep their place.
            let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
            let mut cells: Vec<&str> = inner.split('|').map(str::trim).collect();
            if let Some(subcommand) = subcommand {
                if cells.first() != Some(&format!("`{subcommand}`").as_str()) {
                    continue;
                }
                cells.remove(0);
            }
            let (Some(first), next) = (cells.first(), cells.get(1)) else {
                continue;
            };
            // What is inside backticks: every other piece.
            let quoted = first.split('`').skip(1).step_by(2);
            for flag in quoted.filter(|s| s.starts_with("--")) {
                let flag = flag.split_whitespace().next().unwrap_or(flag);
                flags.insert(
                    flag.to_string(),
                    next.copied().unwrap_or_default().to_string(),
                );
            }
        }
        flags
    }

    #[test]
    fn the_book_lists_every_flag_of_run_with_its_variable() {
        let declared = declared("run");
        let documented = documented("### `run`", None);
        assert_eq!(
            declared.keys().collect::<Vec<_>>(),
            documented.keys().collect::<Vec<_>>(),
            "docs/src/reference/cli.md, `run`"
        );
        for (flag, env) in declared {
            let cell = &documented[&flag];
            let wanted = env.map(|e| format!("`{e}`")).unwrap_or_default();
            assert_eq!(cell, &wanted, "the variable of {flag}");
        }
    }

    /// The chart's hook Job runs the subcommand by the name the chart generator gives it.
    #[test]
    fn the_charts_hook_runs_the_guard_subcommand() {
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "initializer-operator",
            initializer_packaging::bundle::chart::GUARD_SUBCOMMAND,
        ])
        .unwrap();
        assert!(matches!(cli.command, super::Command::Guard));
    }

    #[test]
    fn the_book_lists_every_flag_of_the_other_subcommands() {
        for (subcommand, heading, column) in [
            ("install", "### `install`", None),
            ("uninstall", "### `uninstall`", None),
            (
                "bundle",
                "### `bundle`, `chart`, `monitoring`",
                Some("bundle"),
            ),
            (
                "chart",
                "### `bundle`, `chart`, `monitoring`",
                Some("chart"),
            ),
            (
                "monitoring",
                "### `bundle`, `chart`, `monitoring`",
                Some("monitoring"),
            ),
        ] {
            assert_eq!(
                declared(subcommand).keys().collect::<Vec<_>>(),
                documented(heading, column).keys().collect::<Vec<_>>(),
                "docs/src/reference/cli.md, `{subcommand}`"
            );
        }
    }
}
