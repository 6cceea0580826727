//! Container processes: spawned in their own process group with a clean environment, as the
//! pod's user, and their output appended to a log file; signalled as a group (freeze, thaw,
//! kill, terminate). Each dies with the thread that started it (util-linux's `setpriv
//! --pdeathsig`): a node killed by a signal, or a test embedding one, leaves no container behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::sync::oneshot;

use crate::user::RunAs;

/// The `PATH` every container gets: the usual system directories, never the node's own `PATH`
/// (a developer's `~/bin` or `./target` has no business in a pod).
pub const SAFE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Runs the rest of its command line with the parent-death signal SIGKILL: the kernel kills the
/// container when the thread that spawned it exits. The node spawns from its runtime's threads,
/// which live as long as the runtime and so as long as the container's supervisor.
const DIE_WITH_PARENT: [&str; 3] = ["--pdeathsig", "KILL", "--"];

/// Signals the node sends to a pod's process groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupSignal {
    /// SIGSTOP: freeze.
    Stop,
    /// SIGCONT: thaw.
    Continue,
    /// SIGTERM: ask to end.
    Terminate,
    /// SIGKILL: end now.
    Kill,
}

/// Sends `signal` to the process group `pgid`.
pub fn signal_group(pgid: i32, signal: GroupSignal) -> std::io::Result<()> {
    let Some(pid) = Pid::from_raw(pgid) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "invalid process group",
        ));
    };
    let sig = match signal {
        GroupSignal::Stop => Signal::STOP,
        GroupSignal::Continue => Signal::CONT,
        GroupSignal::Terminate => Signal::TERM,
        GroupSignal::Kill => Signal::KILL,
    };
    kill_process_group(pid, sig).map_err(std::io::Error::from)
}

/// Kills the process group when dropped, so that no child outlives a supervisor that is
/// aborted or a process embedding the node that panics.
#[derive(Debug)]
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            let _ = signal_group(pgid, GroupSignal::Kill);
        }
    }
}

/// A container's process as the node starts it: in its own process group, with nothing of
/// the node's environment but what `env` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub program: PathBuf,
    /// Arguments after the program (`argv[1..]`).
    pub args: Vec<String>,
    /// The whole environment (the node's own is cleared).
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Log file (stdout and stderr, appended).
    pub log: PathBuf,
    /// The user and group it runs as (no supplementary groups); `None`: the node's own.
    pub user: Option<RunAs>,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Exit code as the kubelet reports it (128 + signal for a signal).
    pub code: i32,
    /// The signal that ended it, if any.
    pub signal: Option<i32>,
}

impl From<ExitStatus> for Exit {
    fn from(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt as _;
        match (status.code(), status.signal()) {
            (Some(code), _) => Self { code, signal: None },
            (None, Some(sig)) => Self {
                code: 128 + sig,
                signal: Some(sig),
            },
            (None, None) => Self {
                code: 1,
                signal: None,
            },
        }
    }
}

/// A running process and the task that supervises it.
#[derive(Debug)]
pub struct Running {
    /// The process id, which is also its process group id.
    pub pgid: i32,
    stop: Option<oneshot::Sender<Duration>>,
}

impl Running {
    /// Asks the process to stop: SIGTERM to its group, SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(grace);
        }
    }
}

/// Starts `launch`; `on_exit` is called once with how it ended.
pub fn spawn<F>(launch: &Launch, on_exit: F) -> std::io::Result<Running>
where
    F: FnOnce(Exit) + Send + 'static,
{
    if let Some(dir) = launch.log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&launch.log)?;
    // A program that is missing or not executable fails the start here, as its exec did before
    // `setpriv` stood in front of it (the kubelet's RunContainerError), rather than exiting.
    if launch.program.is_absolute() {
        executable(&launch.program)?;
    }
    let mut command = tokio::process::Command::new(setpriv()?);
    command
        .args(DIE_WITH_PARENT)
        .arg(&launch.program)
        .args(&launch.args)
        .env_clear()
        .envs(&launch.env)
        .current_dir(&launch.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .process_group(0)
        .kill_on_drop(true);
    if let Some(user) = launch.user {
        // Dropping from root, std clears the supplementary groups too (setgroups(0)).
        command.uid(user.uid).gid(user.gid);
    }
    let mut child = command.spawn()?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .ok_or_else(|| std::io::Error::other("spawned process has no id"))?;
    let (stop_tx, stop_rx) = oneshot::channel::<Duration>();
    let guard = GroupGuard(Some(pgid));
    tokio::spawn(async move {
        let guard = guard;
        let status = tokio::select! {
            status = child.wait() => status,
            Ok(grace) = stop_rx => {
                let _ = signal_group(pgid, GroupSignal::Terminate);
                // A frozen process only sees SIGTERM once it runs again.
                let _ = signal_group(pgid, GroupSignal::Continue);
                match tokio::time::timeout(grace, child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        let _ = signal_group(pgid, GroupSignal::Kill);
                        child.wait().await
                    }
                }
            }
        };
        // Whatever the main process left behind in its group goes with it.
        drop(guard);
        let exit = status.map(Exit::from).unwrap_or(Exit {
            code: 1,
            signal: None,
        });
        on_exit(exit);
    });
    Ok(Running {
        pgid,
        stop: Some(stop_tx),
    })
}

/// util-linux's `setpriv`, from the system directories of [`SAFE_PATH`] (the container's own
/// `PATH` may name others).
fn setpriv() -> std::io::Result<&'static Path> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            SAFE_PATH
                .split(':')
                .map(|dir| Path::new(dir).join("setpriv"))
                .find(|path| path.is_file())
        })
        .as_deref()
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("setpriv (util-linux) is in none of {SAFE_PATH}"),
            )
        })
}

/// `Ok` when `program` is a file with an execute bit; else the error exec(2) gives.
fn executable(program: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(program)?;
    if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
        Ok(())
    } else {
        Err(rustix::io::Errno::ACCESS.into())
    }
}

/// The environment every container starts from, before the pod's own variables: only what the
/// node promises ([`SAFE_PATH`], `HOME` = the pod's directory, `HOSTNAME` = the pod's name,
/// `KUBECONFIG` = the pod's own kubeconfig), nothing of the node's own environment (its `HOME`
/// leads to its owner's `~/.kube/config`, its `KUBECONFIG` to its credentials).
pub fn base_env(pod_name: &str, kubeconfig: &Path, home: &Path) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("PATH".to_owned(), SAFE_PATH.to_owned()),
        ("HOME".to_owned(), home.display().to_string()),
        ("HOSTNAME".to_owned(), pod_name.to_owned()),
        ("KUBECONFIG".to_owned(), kubeconfig.display().to_string()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(dir: &Path, script: &str) -> Launch {
        Launch {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: base_env("p", Path::new("/kubeconfig"), dir),
            cwd: dir.to_path_buf(),
            log: dir.join("logs/c.log"),
            user: None,
        }
    }

    #[test]
    fn a_container_gets_nothing_of_the_nodes_own_environment() {
        let env = base_env("p", Path::new("/kubeconfig"), Path::new("/pods/ns_p"));
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(keys, ["HOME", "HOSTNAME", "KUBECONFIG", "PATH"]);
        assert_eq!(env["PATH"], SAFE_PATH);
        // The node's HOME holds its owner's credentials (~/.kube/config).
        assert_ne!(env.get("HOME"), std::env::var("HOME").ok().as_ref());
        assert_eq!(env["HOME"], "/pods/ns_p");
    }

    #[tokio::test]
    async fn a_process_runs_as_the_user_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let nobody = RunAs {
            uid: crate::user::NONROOT,
            gid: crate::user::NONROOT,
        };
        let mut to_run = launch(dir.path(), "echo $(id -u):$(id -g):$(id -G)");
        // The log is the node's; the working directory must be the user's to enter.
        to_run.cwd = PathBuf::from("/");
        to_run.user = Some(nobody);
        let (tx, rx) = oneshot::channel();
        let spawned = spawn(&to_run, move |e| {
            let _ = tx.send(e);
        });
        if crate::user::node_is_root() {
            spawned.unwrap();
            assert_eq!(rx.await.unwrap().code, 0);
            let log = std::fs::read_to_string(dir.path().join("logs/c.log")).unwrap();
            assert_eq!(log, "65532:65532:65532\n", "no supplementary group is kept");
        } else {
            // Only root may switch users: the start fails instead of running as the node.
            assert_eq!(
                spawned.unwrap_err().kind(),
                std::io::ErrorKind::PermissionDenied
            );
        }
    }

    #[test]
    fn a_container_dies_with_the_thread_that_started_it() {
        use initializer_test_support::process::{reap_within, wait_for_program};
        let dir = tempfile::tempdir().unwrap();
        let mut to_run = launch(dir.path(), "");
        to_run.program = PathBuf::from("/bin/sleep");
        to_run.args = vec!["600".into()];
        let starter = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let running = runtime.block_on(async { spawn(&to_run, |_| {}) }).unwrap();
            let pid = running.pgid.cast_unsigned();
            wait_for_program(pid, "sleep");
            // Leaked, as a node killed by a signal leaves it: the supervisor never kills the
            // group, only the kernel does when this thread ends.
            std::mem::forget(runtime);
            pid
        });
        let pid = starter.join().unwrap();
        let signal = reap_within(pid, Duration::from_secs(10));
        assert_eq!(signal, Some(Signal::KILL.as_raw()));
    }

    #[tokio::test]
    async fn a_missing_program_fails_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut to_run = launch(dir.path(), "");
        to_run.program = dir.path().join("absent");
        let missing = spawn(&to_run, |_| {}).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound, "{missing}");
        to_run.program = dir.path().to_path_buf();
        let directory = spawn(&to_run, |_| {}).unwrap_err();
        assert_eq!(
            directory.kind(),
            std::io::ErrorKind::PermissionDenied,
            "{directory}"
        );
    }

    #[tokio::test]
    async fn exit_code_and_output_are_captured() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = oneshot::channel();
        spawn(
            &launch(dir.path(), "echo hello $HOSTNAME $KUBECONFIG; exit 3"),
            move |e| {
                let _ = tx.send(e);
            },
        )
        .unwrap();
        let exit = rx.await.unwrap();
        assert_eq!(
            exit,
            Exit {
                code: 3,
                signal: None
            }
        );
        let log = std::fs::read_to_string(dir.path().join("logs/c.log")).unwrap();
        assert_eq!(log, "hello p /kubeconfig\n");
    }

    #[tokio::test]
    async fn stop_terminates_then_kills_a_process_that_ignores_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = oneshot::channel();
        let mut running = spawn(
            &launch(dir.path(), "trap '' TERM; while true; do sleep 0.05; done"),
            move |e| {
                let _ = tx.send(e);
            },
        )
        .unwrap();
        // Let the shell install its trap.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        running.stop(Duration::from_millis(300));
        let exit = rx.await.unwrap();
        assert_eq!(exit.signal, Some(9));
        assert_eq!(exit.code, 137);
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn frozen_group_is_killed_by_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = oneshot::channel();
        let running = spawn(&launch(dir.path(), "sleep 30"), move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
        signal_group(running.pgid, GroupSignal::Stop).unwrap();
        signal_group(running.pgid, GroupSignal::Kill).unwrap();
        let exit = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(exit.signal, Some(9));
    }
}
