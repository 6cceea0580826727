//! Freezing, thawing and killing a pod's processes on the node, as `docker exec <node> kill`
//! does on kind. The node agent runs each container in a process group of its own and reports
//! it as the container's id (`process://<pgid>`); the network namespace separates networks, not
//! processes, so the test process signals that group directly.
//!
//! One implementation for the e2e harness and the operator's component tests. A container the
//! liveness probe is restarting has nothing running for a few seconds and its old group may be
//! gone between reading the pod and signalling it (ESRCH): the pod is read again until
//! [`RESTART_WAIT`] passes, and a thaw of a gone group is done (a new container is not frozen).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

/// What is done to a pod's processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodSignal {
    /// SIGSTOP: the hung initializer (it stays Running and stops answering).
    Freeze,
    /// SIGCONT: recovery from a freeze.
    Thaw,
    /// SIGKILL: the crashed initializer (its restart policy then applies).
    Kill,
}

impl PodSignal {
    /// The verb, as the sandbox's `/sandbox/v1/pods/{ns}/{name}/{verb}` API spells it.
    pub fn verb(self) -> &'static str {
        match self {
            PodSignal::Freeze => "freeze",
            PodSignal::Thaw => "thaw",
            PodSignal::Kill => "kill",
        }
    }

    /// The signal sent, as `kill -SIGNAL` spells it.
    pub fn signal(self) -> &'static str {
        match self {
            PodSignal::Freeze => "STOP",
            PodSignal::Thaw => "CONT",
            PodSignal::Kill => "KILL",
        }
    }
}

/// How long freezing or killing a pod waits for a container that is being restarted.
pub const RESTART_WAIT: Duration = Duration::from_secs(15);

/// How often the pod is read again while its containers restart.
const REREAD: Duration = Duration::from_millis(100);

/// Sends `signal` to every running container of pod `namespace/name`, read through `client`.
pub async fn signal_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    signal: PodSignal,
) -> anyhow::Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + RESTART_WAIT;
    loop {
        let pod = pods
            .get(name)
            .await
            .with_context(|| format!("failed to get pod {namespace}/{name}"))?;
        let groups = process_groups(&pod);
        let mut gone = false;
        for pgid in &groups {
            match signal_group(*pgid, signal) {
                Ok(Signalled::Sent) => {}
                // The container exited between reading the pod and signalling it (the liveness
                // probe restarting it): read the pod again for the new container.
                Ok(Signalled::Gone) => gone = true,
                Err(err) => {
                    return Err(err).with_context(|| {
                        format!("failed to {} pod {namespace}/{name}", signal.verb())
                    });
                }
            }
        }
        match next_step(signal, groups.is_empty(), gone, Instant::now() < deadline) {
            Step::Done => return Ok(()),
            Step::Retry => tokio::time::sleep(REREAD).await,
            Step::Fail(why) => bail!("failed to {} pod {namespace}/{name}: {why}", signal.verb()),
        }
    }
}

/// What [`signal_pod`] does after one pass over the pod's containers.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Done,
    /// Read the pod again: a container is restarting.
    Retry,
    /// Give up, saying why.
    Fail(&'static str),
}

/// The decision after one pass: `none_running` when the pod had no running container, `gone`
/// when a group vanished before its signal, `time_left` while [`RESTART_WAIT`] has not passed.
fn next_step(signal: PodSignal, none_running: bool, gone: bool, time_left: bool) -> Step {
    // Nothing running (or a group gone) has nothing frozen: a thaw is done; a new container is
    // not frozen.
    if signal == PodSignal::Thaw || (!none_running && !gone) {
        return Step::Done;
    }
    if time_left {
        return Step::Retry;
    }
    Step::Fail(if none_running {
        "no container is running"
    } else {
        "its containers kept exiting"
    })
}

/// The process groups of a pod's running containers, from their `process://<pgid>` ids.
pub fn process_groups(pod: &Pod) -> Vec<i32> {
    pod.status
        .iter()
        .flat_map(|status| status.container_statuses.iter().flatten())
        .filter(|status| status.state.as_ref().is_some_and(|s| s.running.is_some()))
        .filter_map(|status| status.container_id.as_deref())
        .filter_map(|id| id.strip_prefix("process://"))
        .filter_map(|pgid| pgid.parse().ok())
        .collect()
}

/// Whether a signal reached its process group.
#[derive(Debug, PartialEq, Eq)]
enum Signalled {
    Sent,
    /// The group no longer exists.
    Gone,
}

fn signal_group(pgid: i32, signal: PodSignal) -> anyhow::Result<Signalled> {
    use rustix::process::{Pid, Signal, kill_process_group};
    let sent = match signal {
        PodSignal::Freeze => Signal::STOP,
        PodSignal::Thaw => Signal::CONT,
        PodSignal::Kill => Signal::KILL,
    };
    let pid = Pid::from_raw(pgid).with_context(|| format!("invalid process group {pgid}"))?;
    match kill_process_group(pid, sent) {
        Ok(()) => Ok(Signalled::Sent),
        Err(rustix::io::Errno::SRCH) => Ok(Signalled::Gone),
        Err(err) => Err(err),
    }
    .with_context(|| {
        format!(
            "failed to send SIG{} to process group {pgid}",
            signal.signal()
        )
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    /// A process group id that existed and is gone: a reaped child's pid.
    fn gone_group() -> i32 {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = i32::try_from(child.id()).expect("pid fits i32");
        child.wait().expect("wait for true");
        pid
    }

    #[test]
    fn signalling_a_group_that_exited_says_it_is_gone() {
        for signal in [PodSignal::Freeze, PodSignal::Thaw, PodSignal::Kill] {
            let outcome = signal_group(gone_group(), signal).expect("no error for a gone group");
            assert_eq!(outcome, Signalled::Gone, "{signal:?}");
        }
    }

    #[test]
    fn signalling_a_running_group_sends() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("spawn sleep");
        let pgid = i32::try_from(child.id()).expect("pid fits i32");
        assert_eq!(
            signal_group(pgid, PodSignal::Kill).expect("kill"),
            Signalled::Sent
        );
        child.wait().expect("wait for sleep");
    }

    #[test]
    fn a_thaw_is_done_whatever_it_found() {
        for (none_running, gone, time_left) in [(true, false, true), (false, true, false)] {
            assert_eq!(
                next_step(PodSignal::Thaw, none_running, gone, time_left),
                Step::Done
            );
        }
    }

    #[test]
    fn freezing_or_killing_a_restarting_pod_reads_it_again_until_the_wait_ends() {
        for signal in [PodSignal::Freeze, PodSignal::Kill] {
            assert_eq!(next_step(signal, false, false, true), Step::Done);
            assert_eq!(next_step(signal, true, false, true), Step::Retry);
            assert_eq!(next_step(signal, false, true, true), Step::Retry);
            assert_eq!(
                next_step(signal, true, false, false),
                Step::Fail("no container is running")
            );
            assert_eq!(
                next_step(signal, false, true, false),
                Step::Fail("its containers kept exiting")
            );
        }
    }

    #[test]
    fn process_groups_come_from_running_containers_only() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                 "containerID": "process://4242", "state": {"running": {}}},
                {"name": "b", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
                 "containerID": "process://17", "state": {"terminated": {"exitCode": 1}}},
                {"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                 "containerID": "containerd://abc", "state": {"running": {}}}
            ]}
        }))
        .expect("pod");
        assert_eq!(process_groups(&pod), vec![4242]);
    }
}
