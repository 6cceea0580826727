//! The suite's test runner: one process, one target, scenarios in order, cleanup after each,
//! and the timings table at the end.
//!
//! It understands the part of libtest's command line that `cargo test` and `cargo nextest` use:
//! name filters, `--exact`, `--skip`, `--ignored`, `--include-ignored` and
//! `--list --format terse`. Under nextest each scenario runs in its own process (and its own
//! sandbox); `make e2e` runs them all in one. Each scenario runs in its turn of the suite's lock
//! (`sharing.rs`): beside another run's scenarios, or alone when it says so.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::env::Env;
use crate::scope::Scope;
use crate::sharing::{self, Share};
use crate::target::TargetChoice;
use crate::timings::{self, Row, RowHandle};

/// What a scenario gets: the shared environment, its own scope and its row of timings.
#[derive(Clone)]
pub struct Ctx {
    /// The target with the operator installed.
    pub env: Arc<Env>,
    /// The scenario's namespaces and Initializers.
    pub scope: Arc<Scope>,
    /// The scenario's timings.
    pub row: RowHandle,
}

impl Ctx {
    /// A client with cluster-admin rights.
    pub fn client(&self) -> kube::Client {
        self.env.client()
    }
}

/// A scenario's body.
pub type Body = fn(Ctx) -> BoxFuture<'static, anyhow::Result<()>>;

/// Where a scenario runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// The target `E2E_CLUSTER` / `E2E_KUBECONTEXT` choose.
    ChosenTarget,
    /// The sandbox in legacy mode (Kubernetes 1.7–1.13 Initializers), started by the runner
    /// after the chosen target's scenarios (the chosen target is stopped first, so the two
    /// never share the machine).
    LegacySandbox,
}

/// One named scenario.
#[derive(Clone, Copy)]
pub struct Scenario {
    /// Its name, a sentence in snake case.
    pub name: &'static str,
    /// Why it is ignored, when it cannot pass yet.
    pub ignore: Option<&'static str>,
    /// What it does.
    pub body: Body,
    /// Where it runs.
    pub needs: Needs,
    /// Whether it may share the machine with another run's scenarios.
    pub share: Share,
}

impl Scenario {
    /// A scenario that runs on the chosen target.
    pub const fn new(name: &'static str, body: Body) -> Self {
        Self {
            name,
            ignore: None,
            body,
            needs: Needs::ChosenTarget,
            share: Share::Shared,
        }
    }

    /// A scenario that is ignored unless asked for, and why.
    pub const fn ignored(name: &'static str, reason: &'static str, body: Body) -> Self {
        Self {
            name,
            ignore: Some(reason),
            body,
            needs: Needs::ChosenTarget,
            share: Share::Shared,
        }
    }

    /// The same scenario, run while no other run of the suites runs one: it loads the machine
    /// on purpose, or another run's load would spoil what it shows.
    pub const fn alone(self) -> Self {
        Self {
            share: Share::Alone,
            ..self
        }
    }

    /// The same scenario, run on the sandbox in legacy mode.
    pub const fn on_legacy_sandbox(self) -> Self {
        Self {
            needs: Needs::LegacySandbox,
            ..self
        }
    }
}

/// The longest one scenario may run before it is failed.
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(600);

/// The command line, as libtest would read it.
#[derive(Debug, Default, PartialEq)]
pub struct Args {
    /// `--list`.
    pub list: bool,
    /// `--ignored`: only ignored scenarios.
    pub ignored: bool,
    /// `--include-ignored`: ignored ones too.
    pub include_ignored: bool,
    /// `--exact`: filters match whole names.
    pub exact: bool,
    /// Name filters.
    pub filters: Vec<String>,
    /// `--skip` filters.
    pub skip: Vec<String>,
}

impl Args {
    /// Parses libtest-style arguments (unknown flags are ignored, flags with values skip them).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Self {
        let mut parsed = Args::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--list" => parsed.list = true,
                "--ignored" => parsed.ignored = true,
                "--include-ignored" => parsed.include_ignored = true,
                "--exact" => parsed.exact = true,
                "--skip" => parsed.skip.extend(args.next()),
                "--format" | "--color" | "--test-threads" | "-Z" | "--logfile"
                | "--shuffle-seed" => {
                    args.next();
                }
                flag if flag.starts_with('-') => {}
                filter => parsed.filters.push(filter.to_string()),
            }
        }
        parsed
    }

    /// Whether `name` passes the filters, `--exact` and `--skip`.
    pub(crate) fn matches_name(&self, name: &str) -> bool {
        let hit = |filter: &String| {
            if self.exact {
                name == filter
            } else {
                name.contains(filter.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(hit))
            && !self.skip.iter().any(|skip| {
                if self.exact {
                    name == skip
                } else {
                    name.contains(skip.as_str())
                }
            })
    }

    /// Whether `scenario` is listed or run.
    pub fn selects(&self, scenario: &Scenario) -> bool {
        let by_ignore = if self.ignored {
            scenario.ignore.is_some()
        } else {
            true
        };
        by_ignore && self.matches_name(scenario.name)
    }

    /// Whether a selected `scenario` actually runs (rather than being reported ignored).
    pub fn runs(&self, scenario: &Scenario) -> bool {
        scenario.ignore.is_none() || self.ignored || self.include_ignored
    }
}

/// Runs the suite with the process's arguments; the test binary's `main`.
pub fn main(scenarios: &[Scenario]) -> ExitCode {
    let args = Args::parse(std::env::args().skip(1));
    let selected: Vec<&Scenario> = scenarios.iter().filter(|s| args.selects(s)).collect();
    if args.list {
        for scenario in &selected {
            println!("{}: test", scenario.name);
        }
        return ExitCode::SUCCESS;
    }
    initializer_test_support::init_test_tracing("E2E_LOG");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("e2e: failed to start the tokio runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(&args, &selected))
}

async fn run(args: &Args, selected: &[&Scenario]) -> ExitCode {
    let started = Instant::now();
    println!(
        "\nrunning {} test{}",
        selected.len(),
        if selected.len() == 1 { "" } else { "s" }
    );
    let mut envs = Envs::default();
    let mut tables: Vec<(String, Vec<Row>)> = Vec::new();
    let mut failures: Vec<(String, String)> = Vec::new();
    let mut ignored = 0;
    for scenario in selected {
        let label = table_label(scenario.needs);
        let row = if args.runs(scenario) {
            let (row, result) = match envs.get(scenario.needs).await {
                Ok(env) => run_one(env, scenario).await,
                Err(message) => {
                    let row = Row {
                        scenario: scenario.name.to_string(),
                        outcome: "FAILED".to_string(),
                        ..Row::default()
                    };
                    (
                        row,
                        Err(format!("the environment did not start: {message}")),
                    )
                }
            };
            match result {
                Ok(()) => println!("test {} ... ok", scenario.name),
                Err(message) => {
                    println!("test {} ... FAILED", scenario.name);
                    eprintln!("---- {} ----\n{message}\n", scenario.name);
                    failures.push((scenario.name.to_string(), message));
                }
            }
            row
        } else {
            ignored += 1;
            println!(
                "test {} ... ignored, {}",
                scenario.name,
                scenario.ignore.unwrap_or_default()
            );
            Row {
                scenario: scenario.name.to_string(),
                outcome: "ignored".to_string(),
                ..Row::default()
            }
        };
        match tables.iter_mut().find(|(l, _)| *l == label) {
            Some((_, rows)) => rows.push(row),
            None => tables.push((label, vec![row])),
        }
    }
    envs.shutdown().await;
    for (label, rows) in &tables {
        if rows.iter().any(|row| row.outcome != "ignored") {
            println!("\ntimings ({label}):\n{}", timings::render(rows));
        }
    }
    if !failures.is_empty() {
        println!("failures:");
        for (name, message) in &failures {
            println!("\n---- {name} ----\n{message}");
        }
        println!("\nfailures:");
        for (name, _) in &failures {
            println!("    {name}");
        }
    }
    let passed = selected.len() - ignored - failures.len();
    println!(
        "\ntest result: {}. {passed} passed; {} failed; {ignored} ignored; 0 measured; 0 filtered out; finished in {:.2}s\n",
        if failures.is_empty() { "ok" } else { "FAILED" },
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}

/// The one environment up at a time: started when the first scenario needing it runs, stopped
/// when a scenario needs another one (scenarios are ordered so that this happens once).
#[derive(Default)]
struct Envs {
    current: Option<(Needs, Arc<Env>)>,
    // An environment that failed to start is not started again for every scenario.
    failed: Vec<(Needs, String)>,
}

impl Envs {
    async fn get(&mut self, needs: Needs) -> Result<Arc<Env>, String> {
        if let Some((_, message)) = self.failed.iter().find(|(n, _)| *n == needs) {
            return Err(message.clone());
        }
        if let Some((current, env)) = &self.current
            && *current == needs
        {
            return Ok(env.clone());
        }
        self.shutdown().await;
        let choice = match needs {
            Needs::ChosenTarget => TargetChoice::from_env(),
            Needs::LegacySandbox => Ok(TargetChoice::LegacySandbox),
        };
        let started = match choice {
            Ok(choice) => Env::start_with(choice).await,
            Err(err) => Err(err),
        };
        match started {
            Ok(env) => {
                let env = Arc::new(env);
                self.current = Some((needs, env.clone()));
                Ok(env)
            }
            Err(err) => {
                let message = format!("{err:#}");
                self.failed.push((needs, message.clone()));
                Err(message)
            }
        }
    }

    async fn shutdown(&mut self) {
        if let Some((_, env)) = self.current.take() {
            let resources = env.target.resources();
            if !resources.is_empty() {
                println!("\n{} at the end of its scenarios:", env.target.name());
                for line in resources {
                    println!("  {line}");
                }
            }
            env.shutdown().await;
        }
    }
}

/// The label of the timings table of the scenarios that need `needs`.
fn table_label(needs: Needs) -> String {
    match needs {
        Needs::ChosenTarget => target_label(),
        Needs::LegacySandbox => format!(
            "{}: the sandbox serving the Kubernetes 1.7 Initializers",
            crate::sandbox::LEGACY_NAME
        ),
    }
}

fn target_label() -> String {
    match std::env::var("E2E_CLUSTER") {
        Ok(cluster) if !cluster.is_empty() => cluster,
        _ => std::env::var("E2E_KUBECONTEXT").unwrap_or_else(|_| "sandbox".to_string()),
    }
}

/// Runs one scenario in its own task (so a panic is a failure, not the end of the run), then
/// cleans its scope up whatever happened.
async fn run_one(env: Arc<Env>, scenario: &Scenario) -> (Row, Result<(), String>) {
    let row = RowHandle::new(scenario.name);
    let _turn = match sharing::take_async(scenario.share, scenario.name).await {
        Ok(turn) => turn,
        Err(err) => {
            row.update(|row| row.outcome = "FAILED".to_string());
            return (row.snapshot(), Err(format!("{err:#}")));
        }
    };
    let scope = Arc::new(Scope::new(env.client(), scenario.name));
    let ctx = Ctx {
        env,
        scope: scope.clone(),
        row: row.clone(),
    };
    let target = ctx.env.target.clone();
    let task = tokio::spawn((scenario.body)(ctx));
    let abort = task.abort_handle();
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(SCENARIO_TIMEOUT, task) => outcome,
        failure = target.failure() => {
            abort.abort();
            Ok(Ok(Err(failure.context("the target failed during the scenario"))))
        }
    };
    let result = match outcome {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(err))) => Err(format!("{err:#}")),
        Ok(Err(join)) if join.is_panic() => Err(panic_message(join.into_panic())),
        Ok(Err(join)) => Err(format!("the scenario's task ended: {join}")),
        Err(_) => {
            abort.abort();
            Err(format!(
                "the scenario took over {}s",
                SCENARIO_TIMEOUT.as_secs()
            ))
        }
    };
    let warnings = scope.cleanup().await;
    for warning in &warnings {
        eprintln!("e2e: cleanup after {}: {warning}", scenario.name);
    }
    row.update(|row| row.outcome = if result.is_ok() { "ok" } else { "FAILED" }.to_string());
    (row.snapshot(), result)
}

pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        format!("panicked: {message}")
    } else if let Some(message) = payload.downcast_ref::<String>() {
        format!("panicked: {message}")
    } else {
        "panicked".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn scenario(name: &'static str, ignore: Option<&'static str>) -> Scenario {
        Scenario {
            name,
            ignore,
            body: |_| async { Ok(()) }.boxed(),
            needs: Needs::ChosenTarget,
            share: Share::Shared,
        }
    }

    fn args(line: &str) -> Args {
        Args::parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn nextest_listing_arguments_are_understood() {
        let parsed = args("--list --format terse --ignored");
        assert!(parsed.list && parsed.ignored);
        assert!(parsed.filters.is_empty());
    }

    #[test]
    fn filters_select_by_substring_or_exactly() {
        let hung = scenario("hung_initializer_is_deregistered", None);
        assert!(args("hung").selects(&hung));
        assert!(!args("hung --exact").selects(&hung));
        assert!(args("--exact hung_initializer_is_deregistered --nocapture").selects(&hung));
        assert!(!args("--skip hung").selects(&hung));
    }

    #[test]
    fn ignored_scenarios_are_listed_but_run_only_when_asked() {
        let blocked = scenario("blocked", Some("needs x"));
        let plain = scenario("plain", None);
        let default = args("");
        assert!(default.selects(&blocked) && !default.runs(&blocked));
        let only_ignored = args("--ignored");
        assert!(only_ignored.selects(&blocked) && only_ignored.runs(&blocked));
        assert!(!only_ignored.selects(&plain));
        assert!(args("--include-ignored").runs(&blocked));
    }
}
