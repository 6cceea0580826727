//! One control-plane process (etcd, kube-apiserver, kube-controller-manager, the node agent):
//! started inside the namespace with its output in a log file, watched for an early exit, and
//! stopped with SIGTERM, then SIGKILL. It also dies with the thread that started it (util-linux's
//! `setpriv --pdeathsig`): a test killed by a signal, which runs no destructor, leaves no API
//! server behind.
//!
//! A component that exits while the control plane is meant to be up is a failure of whatever
//! test runs at that moment; [`Component::exit`] reports it with the last lines of its log, so
//! the test fails with the reason instead of a timeout.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::watch;

use crate::Error;

/// How many log lines a failure report quotes.
pub const LAST_LINES: usize = 25;
/// How long a component may take to stop after SIGTERM before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Runs the rest of its command line with the parent-death signal SIGKILL: the kernel kills the
/// process when the thread that spawned it exits. Async code spawns from a runtime's thread,
/// which lives as long as the runtime and so as long as the component's watcher.
const DIE_WITH_PARENT: [&str; 4] = ["setpriv", "--pdeathsig", "KILL", "--"];

/// A running component.
#[derive(Debug)]
pub struct Component {
    name: &'static str,
    pid: u32,
    log: PathBuf,
    exit: watch::Receiver<Option<ExitStatus>>,
}

impl Component {
    /// Starts `program args` behind `prefix` (the namespace's `ip netns exec NAME`), appending
    /// its stdout and stderr to `log`; the process dies with the calling thread (`setpriv
    /// --pdeathsig KILL`).
    pub fn start(
        name: &'static str,
        prefix: &[String],
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Self, Error> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io(log, e))?;
        let err = out.try_clone().map_err(|e| Error::io(log, e))?;
        let [launcher, launcher_args @ ..] = DIE_WITH_PARENT;
        let mut child = Command::new(launcher)
            .args(launcher_args)
            .args(prefix)
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| Error::Start {
                component: name,
                program: program.to_path_buf(),
                source: if source.kind() == std::io::ErrorKind::NotFound {
                    std::io::Error::new(
                        source.kind(),
                        format!("{launcher} (util-linux) is not on PATH: {source}"),
                    )
                } else {
                    source
                },
            })?;
        let pid = child.id().unwrap_or_default();
        let (tx, exit) = watch::channel(None);
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = tx.send(status.ok());
        });
        tracing::debug!(component = name, pid, log = %log.display(), "started");
        Ok(Self {
            name,
            pid,
            log: log.to_path_buf(),
            exit,
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The process id (`setpriv` and `ip netns exec` replace themselves with the program, so
    /// this is the program's own).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// `Err(Error::Died { .. })` when the process has exited.
    pub fn check(&self) -> Result<(), Error> {
        match *self.exit.borrow() {
            None => Ok(()),
            Some(status) => Err(self.died(status)),
        }
    }

    /// Resolves when the process exits, with the report of its death.
    pub async fn exit(&self) -> Error {
        let mut exit = self.exit.clone();
        loop {
            if let Some(status) = *exit.borrow_and_update() {
                return self.died(status);
            }
            if exit.changed().await.is_err() {
                return Error::Died {
                    component: self.name,
                    status: "unknown".into(),
                    last_lines: last_lines(&self.log, LAST_LINES),
                };
            }
        }
    }

    fn died(&self, status: ExitStatus) -> Error {
        Error::Died {
            component: self.name,
            status: status.to_string(),
            last_lines: last_lines(&self.log, LAST_LINES),
        }
    }

    /// Resident memory, in KiB, from `/proc/PID/status` (`None` once it has exited).
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        parse_rss_kib(&status)
    }

    /// SIGTERM, then SIGKILL after a grace period; returns once the process is gone.
    pub async fn stop(&self) {
        if self.exit.borrow().is_some() {
            return;
        }
        let Some(pid) = rustix::process::Pid::from_raw(self.pid.cast_signed()) else {
            return;
        };
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let mut exit = self.exit.clone();
        let exited = tokio::time::timeout(STOP_GRACE, exit.wait_for(Option::is_some))
            .await
            .is_ok();
        if !exited {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            let _ = exit.wait_for(Option::is_some).await;
        }
    }
}

/// The `VmRSS` of a `/proc/PID/status` text, in KiB.
pub fn parse_rss_kib(status: &str) -> Option<u64> {
    status_kib(status, "VmRSS")
}

/// A field given in kB (`VmRSS`, `VmHWM`, …) of a `/proc/PID/status` text, in KiB.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The last `n` lines of a log file (empty when it cannot be read).
pub fn last_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    tail(&String::from_utf8_lossy(&text), n)
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }

    #[test]
    fn rss_is_read_from_proc_status() {
        let status = "Name:\tetcd\nVmPeak:\t  100 kB\nVmRSS:\t   51234 kB\n";
        assert_eq!(parse_rss_kib(status), Some(51234));
        assert_eq!(parse_rss_kib("Name:\tx\n"), None);
    }

    #[tokio::test]
    async fn a_process_that_dies_is_reported_with_its_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        let component = Component::start(
            "shell",
            &[],
            Path::new("/bin/sh"),
            &[
                "-c".into(),
                "echo starting; echo 'fatal: no etcd' >&2; exit 3".into(),
            ],
            &log,
        )
        .unwrap();
        let Error::Died {
            component,
            status,
            last_lines,
        } = component.exit().await
        else {
            panic!("expected a death report");
        };
        assert_eq!(component, "shell");
        assert!(status.contains('3'), "{status}");
        assert!(last_lines.contains("fatal: no etcd"), "{last_lines}");
    }

    #[test]
    fn a_component_dies_with_the_thread_that_started_it() {
        use initializer_test_support::process::{reap_within, wait_for_program};
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("orphan.log");
        let starter = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let sleeper = ["600".to_owned()];
            let component = runtime
                .block_on(async {
                    Component::start("orphan", &[], Path::new("/bin/sleep"), &sleeper, &log)
                })
                .unwrap();
            let pid = component.pid();
            wait_for_program(pid, "sleep");
            // Leaked, as a test killed by a signal leaves them: no destructor kills the child,
            // only the kernel when this thread ends.
            std::mem::forget(component);
            std::mem::forget(runtime);
            pid
        });
        let pid = starter.join().unwrap();
        let signal = reap_within(pid, Duration::from_secs(10));
        assert_eq!(signal, Some(rustix::process::Signal::KILL.as_raw()));
    }

    #[tokio::test]
    async fn stop_ends_a_running_process() {
        let dir = tempfile::tempdir().unwrap();
        let component = Component::start(
            "sleeper",
            &[],
            Path::new("/bin/sleep"),
            &["600".into()],
            &dir.path().join("s.log"),
        )
        .unwrap();
        assert!(component.check().is_ok());
        component.stop().await;
        assert!(component.check().is_err());
    }
}
