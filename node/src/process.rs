//! Container processes: spawned in their own process group with a clean environment and their
//! output appended to a log file; signalled as a group (freeze, thaw, kill, terminate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::sync::oneshot;

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
    let mut command = tokio::process::Command::new(&launch.program);
    command
        .args(&launch.args)
        .env_clear()
        .envs(&launch.env)
        .current_dir(&launch.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .process_group(0)
        .kill_on_drop(true);
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

/// The environment every container starts from, before the pod's own variables.
pub fn base_env(pod_name: &str, kubeconfig: &Path) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert(
        "PATH".to_owned(),
        std::env::var("PATH").unwrap_or_else(|_| {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
        }),
    );
    for passthrough in ["HOME", "RUST_LOG", "RUST_BACKTRACE", "TMPDIR", "LANG"] {
        if let Ok(v) = std::env::var(passthrough) {
            env.insert(passthrough.to_owned(), v);
        }
    }
    env.insert("HOSTNAME".to_owned(), pod_name.to_owned());
    env.insert("KUBECONFIG".to_owned(), kubeconfig.display().to_string());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(dir: &Path, script: &str) -> Launch {
        Launch {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: base_env("p", Path::new("/kubeconfig")),
            cwd: dir.to_path_buf(),
            log: dir.join("logs/c.log"),
        }
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
