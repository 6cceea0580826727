//! The runner the two conformance suites share (`tests/conformance/main.rs`, 1.35, and
//! `tests/legacy_conformance.rs`, 1.13): bodies selected like libtest tests, run on a fresh
//! sandbox each and then on one real server, reported as `test NAME (LABEL) ... ok` lines and a
//! libtest-style summary. It lives here so the two suites cannot drift apart in what they print
//! or select; how each starts its real server and prepares its `Target` stays in the suite.
//! What both suites' bodies use lives here too: the [`BodyScope`] each target holds (client,
//! namespace, unique names) and raw requests ([`get`], [`post`], ...).
//!
//! The real server needs what a plain `cargo test` does not have (root, servers built from Go),
//! so its results are ignored tests, as libtest's `#[ignore]` would make them: reported
//! `ignored` with what they need and the command that runs them, and run when asked for, with
//! `--ignored` (the real server only) or `--include-ignored` (both), or by naming the real
//! server in the suite's variable (`real`, `both`).

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::FutureExt;
use futures::future::BoxFuture;
use initializer_sandbox::{Sandbox, SandboxConfig, SandboxHandle};
use initializer_test_support::api;
use serde_json::Value;

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
    /// The prefix of each sandbox's state directory under the temporary directory.
    pub sandbox_prefix: &'static str,
    /// Whether the sandbox serves the Initializers of Kubernetes 1.7–1.13.
    pub legacy_initializers: bool,
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

    /// Runs one body on the target prepared for it (a failed preparation is the body's
    /// failure), then cleans up whatever happened, printing what could not be cleaned up.
    pub async fn run_prepared(
        &self,
        body: &Body<T>,
        prepared: anyhow::Result<T>,
    ) -> Result<(), String>
    where
        T: Cleanup,
    {
        let target = prepared.map_err(|e| format!("{e:#}"))?;
        let result = self.run_body(body, &target).await;
        for warning in target.cleanup().await {
            eprintln!("{}: cleanup after {}: {warning}", self.name, body.name);
        }
        result
    }

    /// A fresh state directory for the real server (`prefix...` under the temporary directory),
    /// removed when dropped unless `E2E_KEEP_STATE=1` asks to keep it for a post-mortem; `what`
    /// names it when it cannot be created, `kept` when it is kept.
    pub fn real_state_dir(
        &self,
        prefix: &str,
        what: &str,
        kept: &str,
    ) -> anyhow::Result<tempfile::TempDir> {
        crate::paths::post_mortem_dir(prefix, what, |path| {
            format!("{}: keeping {kept} {}", self.name, path.display())
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

/// What a suite's target does after its body, whatever the outcome.
pub trait Cleanup {
    /// Deletes what the body left; returns what could not be deleted.
    fn cleanup(&self) -> impl Future<Output = Vec<String>>;
}

/// Starts a fresh sandbox as the suite asks, without workload controllers (neither real server
/// runs them), runs one body there with `on_sandbox` and stops it; the outer error is the
/// sandbox's.
async fn on_fresh_sandbox<T>(
    suite: &Suite<T>,
    body: &'static Body<T>,
    on_sandbox: &impl AsyncFn(&'static Body<T>, &SandboxHandle) -> Result<(), String>,
) -> anyhow::Result<Result<(), String>> {
    let dir = tempfile::Builder::new()
        .prefix(suite.sandbox_prefix)
        .tempdir()
        .context("failed to create the sandbox's state directory")?;
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.workloads = false;
    config.legacy_initializers = suite.legacy_initializers;
    let handle = Sandbox::start(config)
        .await
        .context(if suite.legacy_initializers {
            "failed to start the sandbox in legacy mode"
        } else {
            "failed to start the sandbox"
        })?;
    let result = on_sandbox(body, &handle).await;
    handle.shutdown().await;
    Ok(result)
}

/// The suite's `main`: parses libtest's arguments, lists or runs the selected bodies on each
/// chosen server, then prints the summary. Each body gets a sandbox of its own (they start in
/// milliseconds), where `on_sandbox` runs it, and is reported `ignored` there when it is
/// real-only; on the real server, whose results are reported `ignored` unless asked for,
/// `run_on_real` starts one server and runs every selected body there, reporting into the
/// outcomes.
pub fn main<T>(
    suite: &Suite<T>,
    on_sandbox: impl AsyncFn(&'static Body<T>, &SandboxHandle) -> Result<(), String>,
    run_on_real: impl AsyncFn(&[&'static Body<T>], &mut Outcomes),
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
                        let result = on_fresh_sandbox(suite, body, &on_sandbox)
                            .await
                            .map_err(|e| format!("{e:#}"));
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

    /// Reports every body as failed on the real server with `message` (why it did not start).
    pub fn fail_all<T>(&mut self, suite: &Suite<T>, bodies: &[&'static Body<T>], message: &str) {
        for body in bodies {
            self.report(suite, body, Server::Real, Err(message.to_owned()));
        }
    }

    /// Runs each body on the real server and reports it: `run` runs one, unless `check` finds
    /// the server down, which fails the body with `down` and why.
    pub async fn run_each_on_real<T, E: std::fmt::Display>(
        &mut self,
        suite: &Suite<T>,
        bodies: &[&'static Body<T>],
        down: &str,
        check: impl Fn() -> Result<(), E>,
        run: impl AsyncFn(&'static Body<T>) -> Result<(), String>,
    ) {
        for body in bodies {
            let result = match check() {
                Err(err) => Err(format!("{down}: {err}")),
                Ok(()) => run(body).await,
            };
            self.report(suite, body, Server::Real, result);
        }
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

// Raw requests, for bodies that check the API server's answers byte for byte: the code and the
// body as JSON (`initializer_test_support::api::raw`).

/// The content type of JSON bodies.
const JSON: Option<&str> = Some("application/json");

/// `GET uri` through `client`: the code and the body.
pub async fn get(client: &kube::Client, uri: &str) -> anyhow::Result<(u16, Value)> {
    api::raw(client, "GET", uri, None, None, None).await
}

/// `DELETE uri` through `client`.
pub async fn delete(client: &kube::Client, uri: &str) -> anyhow::Result<(u16, Value)> {
    api::raw(client, "DELETE", uri, None, None, None).await
}

/// `POST uri` of the JSON `body` through `client`.
pub async fn post(client: &kube::Client, uri: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    api::raw(client, "POST", uri, None, JSON, Some(body)).await
}

/// `PUT uri` of the JSON `body` through `client`.
pub async fn put(client: &kube::Client, uri: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    api::raw(client, "PUT", uri, None, JSON, Some(body)).await
}

/// `PATCH uri` with `body` of `content_type` through `client`.
pub async fn patch(
    client: &kube::Client,
    uri: &str,
    content_type: &str,
    body: Value,
) -> anyhow::Result<(u16, Value)> {
    api::raw(client, "PATCH", uri, None, Some(content_type), Some(body)).await
}

/// What every body gets on either server, whatever the suite: an admin client, a kubeconfig
/// for child processes, a namespace of its own, a suffix for unique names and a scratch
/// directory. Each suite's target holds one and adds what only that suite needs.
pub struct BodyScope {
    client: kube::Client,
    kubeconfig: PathBuf,
    namespace: String,
    suffix: String,
    scratch: tempfile::TempDir,
}

impl BodyScope {
    /// The scope of a body whose namespace `namespace` (named with `suffix`, see
    /// [`namespace_for`]) the suite has created.
    pub fn new(
        client: kube::Client,
        kubeconfig: &Path,
        namespace: String,
        suffix: String,
        scratch: tempfile::TempDir,
    ) -> Self {
        Self {
            client,
            kubeconfig: kubeconfig.to_path_buf(),
            namespace,
            suffix,
            scratch,
        }
    }
}

/// What a body reaches through its target, whichever suite it is in: the [`BodyScope`]'s
/// client, kubeconfig, namespace and names.
pub trait Scoped {
    /// The body's scope.
    fn scope(&self) -> &BodyScope;

    /// An admin client.
    fn client(&self) -> kube::Client {
        self.scope().client.clone()
    }

    /// An admin kubeconfig reaching the same API server, for kubectl and other child processes.
    fn kubeconfig(&self) -> &Path {
        &self.scope().kubeconfig
    }

    /// The body's own namespace, created before it runs and deleted after.
    fn namespace(&self) -> &str {
        &self.scope().namespace
    }

    /// `base` made unique to this body, for cluster-scoped names.
    fn unique(&self, base: &str) -> String {
        format!("{base}-{}", self.scope().suffix)
    }

    /// The body's suffix (to make names unique).
    fn suffix(&self) -> &str {
        &self.scope().suffix
    }

    /// A directory of the body's own (kubectl's discovery cache, logs, files).
    fn scratch(&self) -> &Path {
        self.scope().scratch.path()
    }
}

impl Scoped for BodyScope {
    fn scope(&self) -> &BodyScope {
        self
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
