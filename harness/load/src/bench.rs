//! `initializer-bench`: the SDK's hot path against a hand-written baseline, in one run.
//!
//! Starts each server as its own process on loopback with the same certificate: the
//! hand-written baseline (`initializer-baseline`: axum + rustls, one label by a hand-made
//! patch, no SDK), `preset-initializer` configured to add the same label, and
//! `sidecar-initializer` with the tutorial's configuration, and the baseline's no-work floor
//! (`initializer-baseline --floor`: the same server answering with a canned answer, so what it
//! measures is the stack, the kernel and this load generator). Then, round after round with the
//! servers taking turns in rotated order, loads each with the tutorial's nginx Pod review:
//! closed loop over 16 connections (saturation, with the server's CPU time per review) and
//! open loop at 1,000 req/s (latency percentiles). Reads each server's resident memory when
//! ready and after all rounds, and prints the comparison table with ratios to the baseline.
//!
//! ```text
//! cargo build --release -p initializer-load -p preset-initializer -p sidecar-initializer
//! target/release/initializer-bench --rounds 3 --seconds 5
//! ```

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use clap::Parser;
use initializer_load::client::{Connection, Trust, connector};
use initializer_load::load::{LoadSpec, Report, run};
use initializer_load::report::{Measure, Results, turn_order};
use initializer_load::{baseline, proc};
use kube_initializer::testing::review;
use sidecar_initializer::tutorial;

/// The servers this benchmark knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Server {
    /// The hand-written baseline.
    Baseline,
    /// preset-initializer adding one label.
    Preset,
    /// sidecar-initializer injecting the tutorial's container.
    Sidecar,
    /// The baseline with the review's work taken out: the floor of every measure.
    Floor,
}

impl Server {
    fn title(self) -> &'static str {
        match self {
            Server::Baseline => "hand-written baseline",
            Server::Preset => "preset (same work: one label)",
            Server::Sidecar => "sidecar (injects a container)",
            Server::Floor => "no-work floor (baseline, canned answer)",
        }
    }

    fn binary(self) -> &'static str {
        match self {
            Server::Baseline | Server::Floor => "initializer-baseline",
            Server::Preset => "preset-initializer",
            Server::Sidecar => "sidecar-initializer",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Server::Baseline | Server::Floor => baseline::PATH,
            Server::Preset | Server::Sidecar => kube_initializer::advanced::INITIALIZE_PATH,
        }
    }

    /// The link-order list of an SDK initializer, in its package (see `initializer-link-order`).
    fn link_order_list(self) -> Option<PathBuf> {
        let package = match self {
            Server::Baseline | Server::Floor => return None,
            Server::Preset => "preset",
            Server::Sidecar => "sidecar",
        };
        Some(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../initializers")
                .join(package)
                .join("link-order.txt"),
        )
    }

    /// The server's name in the output and its files.
    fn name(self) -> &'static str {
        match self {
            Server::Floor => "no-work-floor",
            _ => self.binary(),
        }
    }

    /// The flags that make the binary this server.
    fn flags(self) -> &'static [&'static str] {
        match self {
            Server::Floor => &["--floor"],
            _ => &[],
        }
    }

    /// `config.yaml` for the SDK's initializers.
    fn config(self) -> Option<String> {
        match self {
            Server::Baseline | Server::Floor => None,
            Server::Preset => Some(format!(
                "inject:\n  labels:\n    {}: {}\n",
                baseline::LABEL,
                baseline::VALUE
            )),
            Server::Sidecar => Some(tutorial::SIDECAR_CONFIG.to_owned()),
        }
    }
}

/// Compare the SDK's initializers with the hand-written baseline.
#[derive(Debug, Parser)]
struct Args {
    /// Servers to compare; the first is the yardstick of the ratios.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "baseline,preset,sidecar,floor"
    )]
    servers: Vec<Server>,
    /// Rounds; each server gets one saturation and one open-loop run per round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Seconds of load before each measured run.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Connections, for both the closed and the open loop.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Open-loop rate, req/s.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Directory holding the server binaries [default: this binary's directory].
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Instead of the comparison: run this one server under valgrind's callgrind, count the
    /// instructions it spends on the reviews of one closed-loop run (`--seconds`, 4
    /// connections, after a warm-up) and write the annotated profile next to the output.
    #[arg(long, value_enum)]
    profile: Option<Server>,
    /// Where `--profile` writes callgrind.out and its annotation.
    #[arg(long, default_value = "target/callgrind")]
    profile_dir: PathBuf,
    /// Instead of the comparison: run this one server under callgrind from its start through a
    /// warm-up and one closed-loop run, and write the functions of its binary that ran, the
    /// busiest first, to `--link-order-file` (read by `initializer-link-order` at release link).
    #[arg(long, value_enum, requires = "link_order_file")]
    link_order: Option<Server>,
    /// Where `--link-order` writes the list.
    #[arg(long)]
    link_order_file: Option<PathBuf>,
}

/// A server process under test.
struct Running {
    server: Server,
    child: Child,
    url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

fn start(
    server: Server,
    bin_dir: &Path,
    work: &Path,
    wrapper: &[String],
) -> anyhow::Result<Running> {
    let port = free_port()?;
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, port)).to_string();
    let binary = bin_dir.join(server.binary());
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(&binary);
            c
        }
        None => Command::new(&binary),
    };
    command
        .args(["--listen", &listen, "--tls-dir"])
        .arg(work)
        .args(server.flags())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if let Some(config) = server.config() {
        let dir = work.join(server.binary());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("config.yaml"), config)?;
        command.arg("--config-dir").arg(&dir);
    }
    let log = std::fs::File::create(work.join(format!("{}.log", server.name())))?;
    command.stderr(log);
    let child = command
        .spawn()
        .with_context(|| format!("failed to start {}", binary.display()))?;
    Ok(Running {
        server,
        child,
        url: format!("https://{listen}{}", server.path()),
    })
}

/// Wait until the server answers a review with HTTP 200.
async fn ready(running: &Running, trust: &Trust, body: &Bytes) -> anyhow::Result<()> {
    let tls = connector(trust)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(mut conn) = Connection::open(&running.url, &tls).await
            && let Ok(reply) = conn.post(body.clone()).await
        {
            if reply.status == 200 {
                return Ok(());
            }
            bail!(
                "failed to get a review answered by {}: HTTP {} {}",
                running.server.name(),
                reply.status,
                String::from_utf8_lossy(&reply.body)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "failed to reach {} at {} within 120 s",
                running.server.name(),
                running.url
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.servers.is_empty() || args.rounds == 0 {
        bail!("failed to plan the benchmark: give at least one server and one round");
    }
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("failed to find the directory of this binary")?
            .to_path_buf(),
    };
    let work = tempfile::tempdir()?;
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])?;
    std::fs::write(work.path().join("tls.crt"), cert.cert.pem())?;
    std::fs::write(
        work.path().join("tls.key"),
        cert.signing_key.serialize_pem(),
    )?;
    // The self-signed serving certificate is its own trust anchor.
    let trust = Trust::CaPem(cert.cert.pem().into_bytes());
    let body = Bytes::from(review(&tutorial::nginx_pod()).to_bytes());

    println!(
        "initializer-bench: {} round(s), {} s per run after {} s warm-up, {} connections, open loop {} req/s; review {} bytes (the tutorial's nginx Pod); load average {}",
        args.rounds,
        args.seconds,
        args.warmup,
        args.connections,
        args.rate,
        body.len(),
        load_average()
    );
    let setup = Setup {
        args: &args,
        bin_dir: &bin_dir,
        work: work.path(),
        trust: &trust,
        body: &body,
    };
    if let Some(server) = args.profile {
        return profile(server, &setup).await;
    }
    if args.link_order == Some(Server::Floor) {
        bail!(
            "failed to plan the link order: the floor is the baseline's binary, which has no list"
        );
    }
    if let (Some(server), Some(file)) = (args.link_order, &args.link_order_file) {
        return link_order(server, &setup, file).await;
    }
    let mut results = Results::new(args.servers.iter().map(|s| s.title().to_owned()).collect());
    let mut running = Vec::new();
    for &server in &args.servers {
        let r = start(server, &bin_dir, work.path(), &[])?;
        ready(&r, &trust, &body).await?;
        running.push(r);
    }
    // Let start-up work (first reload poll, lazy statics) settle before reading idle memory.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (i, r) in running.iter().enumerate() {
        let s = proc::sample(r.child.id())?;
        results.record(i, Measure::RssIdle, mib(s.rss_kib));
        println!(
            "  {:<22} idle: RSS {:.1} MiB, {} threads",
            r.server.name(),
            mib(s.rss_kib),
            s.threads
        );
    }

    for r in &running {
        if let Some(line) = link_order_coverage(r.server, &bin_dir) {
            println!("  {:<22} {line}", r.server.name());
        }
    }

    let spec = |url: &str, rate: Option<f64>, seconds: f64| LoadSpec {
        url: url.to_owned(),
        trust: trust.clone(),
        body: body.clone(),
        rate,
        connections: args.connections,
        duration: Duration::from_secs_f64(seconds),
        warmup: Duration::ZERO,
    };
    for round in 0..args.rounds {
        let order = turn_order(running.len(), round);
        for &i in &order {
            let r = &running[i];
            run(&spec(&r.url, None, args.warmup)).await?;
            let before = proc::sample(r.child.id())?;
            let report = run(&spec(&r.url, None, args.seconds)).await?;
            let after = proc::sample(r.child.id())?;
            let cpu_us = after.cpu_since(&before).as_secs_f64() * 1e6 / report.ok.max(1) as f64;
            results.record(i, Measure::Saturation, report.throughput());
            results.record(i, Measure::CpuPerReview, cpu_us);
            println!(
                "  round {} {:<22} saturation: {:.0} req/s, {cpu_us:.0} µs CPU/review, {} errors{}",
                round + 1,
                r.server.name(),
                report.throughput(),
                report.errors,
                report
                    .first_error
                    .as_deref()
                    .map(|e| format!(" (first: {e})"))
                    .unwrap_or_default()
            );
        }
        for &i in &order {
            let r = &running[i];
            let mut open = spec(&r.url, Some(args.rate), args.seconds);
            open.warmup = Duration::from_secs_f64(args.warmup);
            let report = run(&open).await?;
            let ms = |q: f64| report.quantile(q).as_secs_f64() * 1e3;
            results.record(i, Measure::P50, ms(0.5));
            results.record(i, Measure::P99, ms(0.99));
            results.record(i, Measure::P999, ms(0.999));
            println!(
                "  round {} {:<22} open loop: {}",
                round + 1,
                r.server.name(),
                report.summary()
            );
        }
    }
    for (i, r) in running.iter().enumerate() {
        let s = proc::sample(r.child.id())?;
        results.record(i, Measure::RssLoaded, mib(s.rss_kib));
        results.record(i, Measure::RssPeak, mib(s.peak_rss_kib));
        results.record(i, Measure::Threads, s.threads as f64);
    }
    println!(
        "\nload average at the end: {} (2 cores shared with other work: absolute figures move between runs, ratios much less)\n",
        load_average()
    );
    println!("{}", results.table(args.connections, args.rate));
    drop(running);
    Ok(())
}

/// How many of the functions a server's link-order list names its binary defines: the list goes
/// stale as the code changes, and the RSS figures with it. `None` without a list or without `nm`
/// (binutils).
fn link_order_coverage(server: Server, bin_dir: &Path) -> Option<String> {
    let list = std::fs::read_to_string(server.link_order_list()?).ok()?;
    let symbols = Command::new("nm")
        .arg("--defined-only")
        .arg(bin_dir.join(server.binary()))
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    let (found, listed) = listed_and_defined(&list, &String::from_utf8_lossy(&symbols.stdout));
    let stale = if found * 10 < listed * 9 {
        " (stale: re-record it with `make link-order`)"
    } else {
        ""
    };
    Some(format!(
        "link order: {found} of the {listed} functions listed are in the binary{stale}"
    ))
}

/// Of the names in `list` (one per line), how many `nm` output defines, and how many there are.
fn listed_and_defined(list: &str, nm: &str) -> (usize, usize) {
    let defined: HashSet<&str> = nm.lines().filter_map(|l| l.splitn(3, ' ').nth(2)).collect();
    let listed: Vec<&str> = list.lines().filter(|l| !l.is_empty()).collect();
    let found = listed.iter().filter(|name| defined.contains(*name)).count();
    (found, listed.len())
}

/// The `totals:` (or `summary:`) line of a callgrind output file: instructions counted.
fn callgrind_total(out: &str) -> Option<u64> {
    out.lines().find_map(|line| {
        let rest = line
            .strip_prefix("totals:")
            .or_else(|| line.strip_prefix("summary:"))?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

fn callgrind_control(args: &[&str], pid: u32) -> anyhow::Result<()> {
    let status = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .status()
        .context("failed to run callgrind_control (Debian package valgrind)")?;
    if !status.success() {
        bail!("failed to run callgrind_control {args:?}: {status}");
    }
    Ok(())
}

/// The newest callgrind dump in `dir` whose name starts with `prefix` (a dump is numbered after
/// the output file's name).
fn newest_dump(dir: &Path, prefix: &str) -> anyhow::Result<PathBuf> {
    std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .context("failed to find the callgrind dump")
}

/// The functions of `object` (a file name) that ran, by their own instruction count, the
/// busiest first: from a callgrind dump written with `--compress-strings=no`.
fn functions_run(dump: &str, object: &str) -> Vec<String> {
    let mut own: HashMap<&str, u64> = HashMap::new();
    let mut in_object = false;
    let mut function: Option<&str> = None;
    // The cost line after `calls=` is the callee's inclusive cost, not the caller's own.
    let mut after_call = false;
    for line in dump.lines() {
        if let Some(path) = line.strip_prefix("ob=") {
            in_object = Path::new(path).file_name().and_then(|n| n.to_str()) == Some(object);
        } else if let Some(name) = line.strip_prefix("fn=") {
            // `name'2` is a recursion level of `name`; `0x…` and `(below main)` are no symbols.
            let symbol = name.split_once('\'').map_or(name, |(symbol, _)| symbol);
            let real = !symbol.starts_with("0x") && !symbol.contains(' ');
            function = (in_object && real).then_some(symbol);
        } else if line.starts_with("calls=") {
            after_call = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            let callee_cost = std::mem::take(&mut after_call);
            let cost = line
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse::<u64>().ok());
            if let (false, Some(name), Some(cost)) = (callee_cost, function, cost) {
                *own.entry(name).or_default() += cost;
            }
        }
    }
    let mut ran: Vec<(&str, u64)> = own.into_iter().filter(|(_, cost)| *cost > 0).collect();
    ran.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ran.into_iter().map(|(name, _)| name.to_owned()).collect()
}

/// What the callgrind modes start and load their server with.
struct Setup<'a> {
    args: &'a Args,
    bin_dir: &'a Path,
    work: &'a Path,
    trust: &'a Trust,
    body: &'a Bytes,
}

/// Which instructions a callgrind run counts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// Those of the measured run only.
    MeasuredRun,
    /// All, from the server's start.
    FromStart,
}

/// Run one server under callgrind (with `flags` too, writing `<--profile-dir>/<name>`) through a
/// warm-up and one closed loop of 4 connections for `--seconds`, then have it dump: the measured
/// run's report and the dump's path.
async fn under_callgrind(
    server: Server,
    setup: &Setup<'_>,
    name: &str,
    flags: &[&str],
    counted: Counted,
) -> anyhow::Result<(Report, PathBuf)> {
    let args = setup.args;
    std::fs::create_dir_all(&args.profile_dir)?;
    let out = std::path::absolute(args.profile_dir.join(name))?;
    let _ = std::fs::remove_file(&out);
    let mut wrapper = vec!["valgrind".to_owned(), "--tool=callgrind".to_owned()];
    if counted == Counted::MeasuredRun {
        wrapper.push("--instr-atstart=no".to_owned());
    }
    wrapper.extend(flags.iter().map(|flag| (*flag).to_owned()));
    wrapper.push(format!("--callgrind-out-file={}", out.display()));
    let running = start(server, setup.bin_dir, setup.work, &wrapper)?;
    ready(&running, setup.trust, setup.body).await?;
    let pid = running.child.id();
    let spec = |seconds: f64| LoadSpec {
        url: running.url.clone(),
        trust: setup.trust.clone(),
        body: setup.body.clone(),
        rate: None,
        connections: 4,
        duration: Duration::from_secs_f64(seconds),
        warmup: Duration::ZERO,
    };
    run(&spec(args.warmup.max(2.0))).await?;
    if counted == Counted::MeasuredRun {
        callgrind_control(&["--instr=on"], pid)?;
    }
    let report = run(&spec(args.seconds)).await?;
    callgrind_control(&["--dump"], pid)?;
    if counted == Counted::MeasuredRun {
        callgrind_control(&["--instr=off"], pid)?;
    }
    drop(running);
    Ok((report, newest_dump(&args.profile_dir, name)?))
}

/// Record which functions of one server run, from its start through a load, for the link order.
async fn link_order(server: Server, setup: &Setup<'_>, file: &Path) -> anyhow::Result<()> {
    let name = format!("{}.order.callgrind", server.name());
    // Raw symbol names, each written out in full: what the linker's list needs.
    let flags = ["--demangle=no", "--compress-strings=no"];
    let (report, dumped) =
        under_callgrind(server, setup, &name, &flags, Counted::FromStart).await?;
    let text = std::fs::read_to_string(dumped)?;
    let functions = functions_run(&text, server.binary());
    if functions.is_empty() {
        bail!(
            "failed to find a function of {} in the callgrind dump",
            server.name()
        );
    }
    std::fs::write(file, functions.join("\n") + "\n")?;
    println!(
        "{}: {} functions ran over {} reviews ({} errors); written to {}",
        server.name(),
        functions.len(),
        report.ok,
        report.errors,
        file.display()
    );
    Ok(())
}

/// Count one server's instructions per review under callgrind.
async fn profile(server: Server, setup: &Setup<'_>) -> anyhow::Result<()> {
    let args = setup.args;
    let name = format!("{}.callgrind", server.name());
    let (report, dumped) = under_callgrind(server, setup, &name, &[], Counted::MeasuredRun).await?;
    let text = std::fs::read_to_string(&dumped)?;
    let total = callgrind_total(&text).context("failed to read the dump's totals")?;
    let reviews = report.ok + report.errors;
    println!(
        "{}: {} reviews answered under callgrind ({} errors), {} instructions, {:.0} instructions per review",
        server.name(),
        report.ok,
        report.errors,
        total,
        total as f64 / reviews.max(1) as f64
    );
    let annotated = Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=99"])
        .arg(&dumped)
        .output()
        .context("failed to run callgrind_annotate")?;
    let annotation = args
        .profile_dir
        .join(format!("{}.annotated.txt", server.name()));
    std::fs::write(&annotation, &annotated.stdout)?;
    println!(
        "profile: {} (inclusive costs: {})",
        dumped.display(),
        annotation.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_functions_run_are_the_objects_own_the_busiest_first() {
        let dump = "events: Ir\n\
            ob=/usr/lib/libc.so.6\nfn=memcpy\n0 900\n\
            ob=/bin/preset-initializer\nfn=_RNvCs1_4main\n0 10\n\
            cob=/usr/lib/libc.so.6\ncfn=memcpy\ncalls=3 0\n0 5000\n0 2\n\
            fn=_ZN5serde2de4read17h0E\n0 40\n+1 5\n\
            fn=_ZN4cold17h1E\n0 0\n\
            fn=_RNvCs1_4main'2\n0 40\nfn=0x00000000002e88e0\n0 99\nfn=(below main)\n0 99\n";
        assert_eq!(
            functions_run(dump, "preset-initializer"),
            // main: 10 + 2 (after the call's inclusive 5000) + 40 in its recursion = 52 > 45.
            ["_RNvCs1_4main", "_ZN5serde2de4read17h0E"]
        );
        assert!(functions_run(dump, "sidecar-initializer").is_empty());
    }

    #[test]
    fn the_link_order_coverage_counts_the_listed_names_the_binary_defines() {
        let nm = "0000000000001000 T _RNvCs1_4main\n0000000000002000 t _ZN4cold17h1E\n";
        assert_eq!(
            listed_and_defined("_RNvCs1_4main\n_ZN4gone17h2E\n\n", nm),
            (1, 2)
        );
        assert_eq!(listed_and_defined("", nm), (0, 0));
    }

    #[test]
    fn the_callgrind_total_is_read_from_either_line() {
        assert_eq!(
            callgrind_total("events: Ir\nsummary: 123456\n"),
            Some(123456)
        );
        assert_eq!(callgrind_total("fl=x\ntotals: 42\n"), Some(42));
        assert_eq!(callgrind_total("events: Ir\n"), None);
    }
}
