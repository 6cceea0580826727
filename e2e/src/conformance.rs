//! The runner the two conformance suites share (`tests/conformance/main.rs`, 1.35, and
//! `tests/legacy_conformance.rs`, 1.13): bodies selected like libtest tests, run on a fresh
//! sandbox each and then on one real server, reported as `test NAME (LABEL) ... ok` lines and a
//! libtest-style summary. It lives here so the two suites cannot drift apart in what they print
//! or select; how each starts its servers and prepares its `Target` stays in the suite.
//!
//! The real server needs what a plain `cargo test` does not have (root, servers built from Go),
//! so its results are ignored tests, as libtest's `#[ignore]` would make them: reported
//! `ignored` with what they need and the command that runs them, and run when asked for, with
//! `--ignored` (the real server only) or `--include-ignored` (both), or by naming the real
//! server in the suite's variable (`real`, `both`).

use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, LocalBoxFuture};

use crate::runner::{Args, panic_message};

/// A body: behaviour stated against a suite's target.
pub type Run<T> = for<'a> fn(&'a T) -> BoxFuture<'a, anyhow::Result<()>>;

/// One named body.
pub struct Body<T: 'static> {
    /// The test name (the function's name).
    pub name: &'static str,
    /// The body.
    pub run: Run<T>,
    /// Why the sandbox cannot run it (a difference the sandbox states), when it cannot: it is
    /// reported `ignored` on the sandbox, since it is a difference, not a pass.
    pub real_only: Option<&'static str>,
}

/// `body!(module::function)` or `body!(module::function, real_only = "why")`.
#[macro_export]
macro_rules! body {
    ($module:ident :: $name:ident) => {
        $crate::conformance::Body {
            name: stringify!($name),
            run: |t| ::futures::FutureExt::boxed($module::$name(t)),
            real_only: None,
        }
    };
    ($module:ident :: $name:ident, real_only = $why:literal) => {
        $crate::conformance::Body {
            name: stringify!($name),
            run: |t| ::futures::FutureExt::boxed($module::$name(t)),
            real_only: Some($why),
        }
    };
}

/// The two servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// The embedded sandbox, a fresh one per body.
    Sandbox,
    /// The real server (the suite's), one for the whole run.
    Real,
}

/// What tells one suite from the other in what the runner prints and reads.
pub struct Suite<T: 'static> {
    /// The prefix of the runner's own messages (`conformance`, `legacy conformance`).
    pub name: &'static str,
    /// The variable choosing the servers (`sandbox`, `real` or `both`).
    pub env_var: &'static str,
    /// What follows a test name on the real server (`real`, `1.13`).
    pub real_label: &'static str,
    /// Why the real server's results are ignored unless asked for: what it needs, and the
    /// command that runs it.
    pub real_needs: &'static str,
    /// Every body, in running order.
    pub bodies: &'static [Body<T>],
    /// The longest one body may run.
    pub body_timeout: Duration,
}

impl<T> Suite<T> {
    /// `sandbox` or the real label, as printed after each test name.
    pub fn label(&self, server: Server) -> &'static str {
        match server {
            Server::Sandbox => "sandbox",
            Server::Real => self.real_label,
        }
    }

    /// The servers the suite's variable names (both when unset), each with whether its results
    /// run rather than being reported ignored: the real server's run only when asked for, by
    /// naming it in the variable or with `--ignored` / `--include-ignored`.
    fn servers(&self, args: &Args) -> anyhow::Result<Vec<(Server, bool)>> {
        let asked = args.ignored || args.include_ignored;
        Ok(match std::env::var(self.env_var).as_deref() {
            Err(_) | Ok("") => vec![(Server::Sandbox, true), (Server::Real, asked)],
            Ok("both") => vec![(Server::Sandbox, true), (Server::Real, true)],
            Ok("sandbox") => vec![(Server::Sandbox, true)],
            Ok("real") => vec![(Server::Real, true)],
            Ok(other) => anyhow::bail!("{}={other}: expected sandbox, real or both", self.env_var),
        })
    }

    /// Runs one body against a prepared target: a panic or a timeout is a failure.
    pub async fn run_body(&self, body: &Body<T>, target: &T) -> Result<(), String> {
        let run = AssertUnwindSafe((body.run)(target)).catch_unwind();
        match tokio::time::timeout(self.body_timeout, run).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(err))) => Err(format!("{err:#}")),
            Ok(Err(panic)) => Err(panic_message(panic)),
            Err(_) => Err(format!(
                "the body took over {}s",
                self.body_timeout.as_secs()
            )),
        }
    }
}

/// Starts a fresh sandbox, runs one body there and stops it; the outer error is the sandbox's.
pub type OnFreshSandbox<T> =
    fn(&'static Body<T>) -> LocalBoxFuture<'static, anyhow::Result<Result<(), String>>>;

/// Starts the real server once, runs the selected bodies there, reporting into the outcomes.
pub type RunOnReal<T> =
    for<'a> fn(&'a [&'static Body<T>], &'a mut Outcomes) -> LocalBoxFuture<'a, ()>;

/// The suite's `main`: parses libtest's arguments, lists or runs the selected bodies on each
/// chosen server, then prints the summary. Each body gets a sandbox of its own (they start in
/// milliseconds) and is reported `ignored` there when it is real-only; on the real server, whose
/// results are reported `ignored` unless asked for, every selected body runs on one server.
pub fn main<T>(
    suite: &Suite<T>,
    on_fresh_sandbox: OnFreshSandbox<T>,
    run_on_real: RunOnReal<T>,
) -> ExitCode {
    let args = Args::parse(std::env::args().skip(1));
    let selected: Vec<&'static Body<T>> = suite
        .bodies
        .iter()
        // By name only: whether a result is ignored depends on its server, below.
        .filter(|body| args.matches_name(body.name))
        .collect();
    let named = match suite.servers(&args) {
        Ok(b) => b,
        Err(err) => {
            eprintln!("{}: {err}", suite.name);
            return ExitCode::FAILURE;
        }
    };
    // `--ignored` asks for the ignored results only: the real server's.
    let servers: Vec<(Server, bool)> = named
        .iter()
        .copied()
        .filter(|&(server, _)| !(args.ignored && server == Server::Sandbox))
        .collect();
    if args.list {
        for body in &selected {
            println!("{}: test", body.name);
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
            eprintln!("{}: failed to start the tokio runtime: {err}", suite.name);
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let started = Instant::now();
        let total = selected.len() * servers.len();
        println!(
            "\nrunning {total} test{}",
            if total == 1 { "" } else { "s" }
        );
        let mut outcomes = Outcomes::default();
        for &(server, runs) in &servers {
            if selected.is_empty() {
                break;
            }
            match server {
                Server::Real if !runs => {
                    for body in &selected {
                        outcomes.ignore(suite, body, Server::Real, suite.real_needs);
                    }
                }
                Server::Sandbox => {
                    for body in &selected {
                        if outcomes.skip_on_sandbox(suite, body) {
                            continue;
                        }
                        let result = on_fresh_sandbox(body).await.map_err(|e| format!("{e:#}"));
                        outcomes.report(suite, body, Server::Sandbox, result.and_then(|r| r));
                    }
                }
                Server::Real => run_on_real(&selected, &mut outcomes).await,
            }
        }
        // Filtered out: every result the variable names but neither the filters nor
        // `--ignored` select, as libtest counts them.
        outcomes.summary(
            started,
            suite.bodies.len() * named.len() - selected.len() * servers.len(),
        )
    })
}

/// One result line's outcome.
enum Outcome {
    Passed,
    Failed(String),
    Ignored,
}

/// The result lines so far, for the summary.
#[derive(Default)]
pub struct Outcomes(Vec<(String, Outcome)>);

impl Outcomes {
    /// Prints `test NAME (LABEL) ... ok` or `... FAILED` (the message to stderr at once, and
    /// again in the summary).
    pub fn report<T>(
        &mut self,
        suite: &Suite<T>,
        body: &Body<T>,
        server: Server,
        result: Result<(), String>,
    ) {
        let name = format!("{} ({})", body.name, suite.label(server));
        let outcome = match result {
            Ok(()) => {
                println!("test {name} ... ok");
                Outcome::Passed
            }
            Err(message) => {
                println!("test {name} ... FAILED");
                eprintln!("---- {name} ----\n{message}\n");
                Outcome::Failed(message)
            }
        };
        self.0.push((name, outcome));
    }

    /// Reports a real-only body as ignored on the sandbox, with why; true when it was.
    fn skip_on_sandbox<T>(&mut self, suite: &Suite<T>, body: &Body<T>) -> bool {
        let Some(why) = body.real_only else {
            return false;
        };
        self.ignore(suite, body, Server::Sandbox, why);
        true
    }

    /// Reports `body` as ignored on `server`, with why, as libtest prints an ignored test.
    fn ignore<T>(&mut self, suite: &Suite<T>, body: &Body<T>, server: Server, why: &str) {
        let name = format!("{} ({})", body.name, suite.label(server));
        println!("test {name} ... ignored, {why}");
        self.0.push((name, Outcome::Ignored));
    }

    fn summary(&self, started: Instant, filtered_out: usize) -> ExitCode {
        let failed: Vec<(&String, &String)> = self
            .0
            .iter()
            .filter_map(|(name, o)| match o {
                Outcome::Failed(message) => Some((name, message)),
                _ => None,
            })
            .collect();
        let ignored = self
            .0
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Ignored))
            .count();
        if !failed.is_empty() {
            println!("\nfailures:");
            for (name, message) in &failed {
                println!("\n---- {name} ----\n{message}");
            }
            println!("\nfailures:");
            for (name, _) in &failed {
                println!("    {name}");
            }
        }
        let passed = self.0.len() - failed.len() - ignored;
        println!(
            "\ntest result: {}. {passed} passed; {} failed; {ignored} ignored; 0 measured; {filtered_out} filtered out; finished in {:.2}s\n",
            if failed.is_empty() { "ok" } else { "FAILED" },
            failed.len(),
            started.elapsed().as_secs_f64()
        );
        if failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(101)
        }
    }
}

/// A short random suffix of lowercase letters and digits, for unique names.
pub fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz0123456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// A namespace name made from a body's name: at most 63 characters, DNS-label safe.
pub fn namespace_for(body: &str, suffix: &str) -> String {
    let mut base: String = body.replace('_', "-").chars().take(50).collect();
    while base.ends_with('-') {
        base.pop();
    }
    format!("{base}-{suffix}")
}
