//! A pod's status as the kubelet reports it (phase, conditions, container states), rendered
//! from what its worker observed. Nothing here runs a process or reads the clock: the worker
//! passes in the time, and these functions decide what the API shows.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::process::Exit;

/// A container's state as `containerStatuses[].state` shows it.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum State {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started_at: String,
    },
    Terminated {
        exit: Exit,
        reason: String,
        started_at: String,
        finished_at: String,
    },
}

impl State {
    /// Waiting for its first start, or for its volumes (`message` says why, if anything).
    pub(super) fn creating(message: impl Into<String>) -> Self {
        Self::waiting("ContainerCreating", message)
    }

    /// Its image maps to no executable; the `failures`th time in a row (first `ErrImagePull`,
    /// then `ImagePullBackOff`, as the kubelet).
    pub(super) fn image_missing(image: &str, why: &str, failures: u32) -> Self {
        if failures <= 1 {
            Self::waiting(
                "ErrImagePull",
                format!("Failed to pull image {image:?}: {why}"),
            )
        } else {
            Self::waiting(
                "ImagePullBackOff",
                format!("Back-off pulling image {image:?}: {why}"),
            )
        }
    }

    /// Its environment could not be built (a missing Secret or ConfigMap key).
    pub(super) fn config_error(message: impl Into<String>) -> Self {
        Self::waiting("CreateContainerConfigError", message)
    }

    /// Its executable `program` could not be started.
    pub(super) fn start_failed(container: &str, program: &Path, error: &str) -> Self {
        Self::waiting(
            "RunContainerError",
            format!(
                "failed to start container {container:?}: {}: {error}",
                program.display()
            ),
        )
    }

    /// It exited and starts again after `delay`, with the kubelet's message naming the
    /// container and the pod.
    pub(super) fn crash_loop(
        delay: Duration,
        container: &str,
        pod: &str,
        namespace: &str,
        uid: &str,
    ) -> Self {
        Self::waiting(
            "CrashLoopBackOff",
            format!(
                "back-off {}s restarting failed container={container} pod={pod}_{namespace}({uid})",
                delay.as_secs()
            ),
        )
    }

    /// It ended with `exit`: `Completed` on code 0, `Error` otherwise.
    pub(super) fn terminated(exit: Exit, started_at: String, finished_at: String) -> Self {
        let reason = if exit.code == 0 { "Completed" } else { "Error" };
        Self::Terminated {
            exit,
            reason: reason.into(),
            started_at,
            finished_at,
        }
    }

    fn waiting(reason: &str, message: impl Into<String>) -> Self {
        Self::Waiting {
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn succeeded(&self) -> bool {
        matches!(self, Self::Terminated { exit, .. } if exit.code == 0)
    }

    fn to_json(&self) -> Value {
        match self {
            Self::Waiting { reason, message } if message.is_empty() => {
                json!({"waiting": {"reason": reason}})
            }
            Self::Waiting { reason, message } => {
                json!({"waiting": {"reason": reason, "message": message}})
            }
            Self::Running { started_at } => json!({"running": {"startedAt": started_at}}),
            Self::Terminated {
                exit,
                reason,
                started_at,
                finished_at,
            } => {
                let mut t = json!({"exitCode": exit.code, "reason": reason, "startedAt": started_at, "finishedAt": finished_at});
                if let Some(sig) = exit.signal {
                    t["signal"] = json!(sig);
                }
                json!({"terminated": t})
            }
        }
    }
}

/// What the worker knows of one container.
#[derive(Clone, Debug)]
pub(super) struct ContainerView<'a> {
    pub name: &'a str,
    pub image: &'a str,
    /// The executable its image mapped to, once it has started.
    pub program: Option<&'a Path>,
    pub ready: bool,
    /// Running and past its startup probe.
    pub started: bool,
    pub restart_count: i32,
    pub state: &'a State,
    pub last_state: Option<&'a State>,
    /// The process group of its running process.
    pub pgid: Option<i32>,
    /// It will not run again (its restart policy says so, or the pod is ending).
    pub done: bool,
    /// It was started at least once.
    pub ever_started: bool,
}

/// What the worker knows of the pod.
#[derive(Clone, Debug)]
pub(super) struct PodView<'a> {
    pub host_ip: &'a str,
    pub pod_ip: &'a str,
    pub start_time: &'a str,
    pub containers: Vec<ContainerView<'a>>,
}

/// When each pod condition last changed, so `lastTransitionTime` moves only when its status does.
#[derive(Debug, Default)]
pub(super) struct Transitions(HashMap<&'static str, (bool, String)>);

impl Transitions {
    /// The transition time of condition `kind` now that its status is `status`: `now` if it is
    /// new or has flipped, the time kept from before otherwise.
    pub(super) fn observe(&mut self, kind: &'static str, status: bool, now: &str) -> String {
        let entry = self.0.entry(kind).or_insert_with(|| (status, now.into()));
        if entry.0 != status {
            *entry = (status, now.into());
        }
        entry.1.clone()
    }
}

/// The pod's phase: `Succeeded` or `Failed` once every container is done (`Succeeded` only if
/// each ended with code 0), `Running` once one was started, `Pending` before.
pub(super) fn phase(containers: &[ContainerView<'_>]) -> &'static str {
    let all_done = !containers.is_empty() && containers.iter().all(|c| c.done);
    if all_done {
        if containers.iter().all(|c| c.state.succeeded()) {
            "Succeeded"
        } else {
            "Failed"
        }
    } else if containers.iter().any(|c| c.ever_started) {
        "Running"
    } else {
        "Pending"
    }
}

/// The pod's `status` at `now`, recording condition flips in `transitions`.
pub(super) fn render(pod: &PodView<'_>, transitions: &mut Transitions, now: &str) -> Value {
    let containers = &pod.containers;
    let all_ready = !containers.is_empty() && containers.iter().all(|c| c.ready);
    let all_done = !containers.is_empty() && containers.iter().all(|c| c.done);
    let unready: Vec<&str> = containers
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name)
        .collect();
    let unready_message = format!("containers with unready status: [{}]", unready.join(" "));
    let mut condition = |kind: &'static str, status: bool| {
        let time = transitions.observe(kind, status, now);
        let mut c = json!({"type": kind, "status": if status { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": time});
        if !status {
            c["reason"] = json!(if all_done {
                "PodCompleted"
            } else {
                "ContainersNotReady"
            });
            c["message"] = json!(unready_message);
        }
        c
    };
    let conditions = [
        condition("PodReadyToStartContainers", true),
        condition("Initialized", true),
        condition("Ready", all_ready),
        condition("ContainersReady", all_ready),
        condition("PodScheduled", true),
    ];
    let statuses: Vec<Value> = containers.iter().map(container_status).collect();
    json!({
        "phase": phase(containers),
        "conditions": conditions,
        "hostIP": pod.host_ip,
        "hostIPs": [{"ip": pod.host_ip}],
        "podIP": pod.pod_ip,
        "podIPs": [{"ip": pod.pod_ip}],
        "startTime": pod.start_time,
        "containerStatuses": statuses,
    })
}

/// One entry of `containerStatuses`.
fn container_status(c: &ContainerView<'_>) -> Value {
    let mut status = json!({
        "name": c.name,
        "image": c.image,
        "imageID": c.program.map(|p| format!("process://{}", p.display())).unwrap_or_default(),
        "ready": c.ready,
        "started": c.started,
        "restartCount": c.restart_count,
        "state": c.state.to_json(),
        "lastState": c.last_state.map_or(json!({}), State::to_json),
    });
    if let Some(pgid) = c.pgid {
        status["containerID"] = json!(format!("process://{pgid}"));
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXIT_0: Exit = Exit {
        code: 0,
        signal: None,
    };
    const KILLED: Exit = Exit {
        code: 137,
        signal: Some(9),
    };

    fn running() -> State {
        State::Running {
            started_at: "t0".into(),
        }
    }

    fn container<'a>(name: &'a str, state: &'a State) -> ContainerView<'a> {
        ContainerView {
            name,
            image: "example/app:1",
            program: None,
            ready: false,
            started: false,
            restart_count: 0,
            state,
            last_state: None,
            pgid: None,
            done: false,
            ever_started: false,
        }
    }

    fn pod<'a>(containers: Vec<ContainerView<'a>>) -> PodView<'a> {
        PodView {
            host_ip: "10.0.0.1",
            pod_ip: "127.1.0.2",
            start_time: "t0",
            containers,
        }
    }

    fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()
    }

    #[test]
    fn a_waiting_state_without_a_message_shows_only_its_reason() {
        assert_eq!(
            State::creating("").to_json(),
            json!({"waiting": {"reason": "ContainerCreating"}})
        );
        assert_eq!(
            State::creating("volume not ready").to_json(),
            json!({"waiting": {"reason": "ContainerCreating", "message": "volume not ready"}})
        );
    }

    #[test]
    fn a_terminated_state_shows_its_signal_only_when_one_ended_it() {
        let by_signal = State::terminated(KILLED, "t0".into(), "t1".into());
        assert_eq!(
            by_signal.to_json(),
            json!({"terminated": {"exitCode": 137, "signal": 9, "reason": "Error", "startedAt": "t0", "finishedAt": "t1"}})
        );
        let clean = State::terminated(EXIT_0, "t0".into(), "t1".into());
        assert_eq!(
            clean.to_json(),
            json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "t0", "finishedAt": "t1"}})
        );
        assert_eq!(running().to_json(), json!({"running": {"startedAt": "t0"}}));
    }

    #[test]
    fn a_missing_image_is_err_image_pull_once_then_image_pull_back_off() {
        assert_eq!(
            State::image_missing("app:1", "not mapped", 1),
            State::Waiting {
                reason: "ErrImagePull".into(),
                message: "Failed to pull image \"app:1\": not mapped".into()
            }
        );
        assert_eq!(
            State::image_missing("app:1", "not mapped", 2),
            State::Waiting {
                reason: "ImagePullBackOff".into(),
                message: "Back-off pulling image \"app:1\": not mapped".into()
            }
        );
    }

    #[test]
    fn waiting_reasons_say_what_blocks_the_container() {
        assert_eq!(
            State::crash_loop(Duration::from_secs(4), "app", "web", "prod", "u-1"),
            State::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 4s restarting failed container=app pod=web_prod(u-1)".into()
            }
        );
        assert_eq!(
            State::start_failed("app", Path::new("/bin/app"), "permission denied"),
            State::Waiting {
                reason: "RunContainerError".into(),
                message: "failed to start container \"app\": /bin/app: permission denied".into()
            }
        );
        assert_eq!(
            State::config_error("secret \"s\" not found"),
            State::Waiting {
                reason: "CreateContainerConfigError".into(),
                message: "secret \"s\" not found".into()
            }
        );
    }

    #[test]
    fn phase_follows_the_containers() {
        let waiting = State::creating("");
        let ok = State::terminated(EXIT_0, "t0".into(), "t1".into());
        let failed = State::terminated(KILLED, "t0".into(), "t1".into());
        let run = running();
        assert_eq!(phase(&[]), "Pending");
        assert_eq!(phase(&[container("a", &waiting)]), "Pending");
        let started = ContainerView {
            ever_started: true,
            ..container("a", &run)
        };
        assert_eq!(phase(&[started, container("b", &waiting)]), "Running");
        let done = |state| ContainerView {
            done: true,
            ever_started: true,
            ..container("a", state)
        };
        assert_eq!(phase(&[done(&ok), done(&ok)]), "Succeeded");
        assert_eq!(phase(&[done(&ok), done(&failed)]), "Failed");
        // Done without having ended (the pod is being stopped before it ran): not a success.
        assert_eq!(phase(&[done(&waiting)]), "Failed");
    }

    #[test]
    fn a_transition_time_moves_only_when_the_status_flips() {
        let mut t = Transitions::default();
        assert_eq!(t.observe("Ready", false, "t0"), "t0");
        assert_eq!(t.observe("Ready", false, "t1"), "t0");
        assert_eq!(t.observe("Ready", true, "t2"), "t2");
        assert_eq!(t.observe("Ready", true, "t3"), "t2");
        assert_eq!(t.observe("Initialized", true, "t3"), "t3");
    }

    #[test]
    fn a_ready_running_pod_renders_in_full() {
        let run = running();
        let app = ContainerView {
            program: Some(Path::new("/bin/app")),
            ready: true,
            started: true,
            restart_count: 2,
            pgid: Some(4242),
            ever_started: true,
            ..container("app", &run)
        };
        let status = render(&pod(vec![app]), &mut Transitions::default(), "t5");
        let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": "t5"});
        assert_eq!(
            status,
            json!({
                "phase": "Running",
                "conditions": [
                    condition("PodReadyToStartContainers"),
                    condition("Initialized"),
                    condition("Ready"),
                    condition("ContainersReady"),
                    condition("PodScheduled"),
                ],
                "hostIP": "10.0.0.1",
                "hostIPs": [{"ip": "10.0.0.1"}],
                "podIP": "127.1.0.2",
                "podIPs": [{"ip": "127.1.0.2"}],
                "startTime": "t0",
                "containerStatuses": [{
                    "name": "app",
                    "image": "example/app:1",
                    "imageID": "process:///bin/app",
                    "containerID": "process://4242",
                    "ready": true,
                    "started": true,
                    "restartCount": 2,
                    "state": {"running": {"startedAt": "t0"}},
                    "lastState": {},
                }],
            })
        );
    }

    #[test]
    fn unready_containers_are_named_in_the_ready_conditions() {
        let run = running();
        let waiting = State::creating("");
        let ready = ContainerView {
            ready: true,
            ..container("a", &run)
        };
        let status = render(
            &pod(vec![ready, container("b", &waiting), container("c", &run)]),
            &mut Transitions::default(),
            "t0",
        );
        for kind in ["Ready", "ContainersReady"] {
            let c = condition(&status, kind);
            assert_eq!(c["status"], "False");
            assert_eq!(c["reason"], "ContainersNotReady");
            assert_eq!(c["message"], "containers with unready status: [b c]");
        }
        assert_eq!(condition(&status, "PodScheduled")["status"], "True");
        assert!(condition(&status, "PodScheduled").get("reason").is_none());
        let b = &status["containerStatuses"][1];
        assert_eq!(b["imageID"], "");
        assert!(b.get("containerID").is_none());
    }

    #[test]
    fn a_finished_pod_is_not_ready_because_it_completed() {
        let ended = State::terminated(EXIT_0, "t0".into(), "t1".into());
        let before = running();
        let app = ContainerView {
            done: true,
            ever_started: true,
            last_state: Some(&before),
            ..container("app", &ended)
        };
        let status = render(&pod(vec![app]), &mut Transitions::default(), "t1");
        assert_eq!(status["phase"], "Succeeded");
        assert_eq!(condition(&status, "Ready")["reason"], "PodCompleted");
        assert_eq!(
            status["containerStatuses"][0]["lastState"],
            json!({"running": {"startedAt": "t0"}})
        );
    }

    #[test]
    fn ready_keeps_its_transition_time_across_reports_until_it_flips() {
        let run = running();
        let mut transitions = Transitions::default();
        let unready = pod(vec![container("app", &run)]);
        render(&unready, &mut transitions, "t0");
        let again = render(&unready, &mut transitions, "t1");
        assert_eq!(condition(&again, "Ready")["lastTransitionTime"], "t0");
        assert_eq!(
            condition(&again, "PodScheduled")["lastTransitionTime"],
            "t0"
        );
        let ready = pod(vec![ContainerView {
            ready: true,
            ..container("app", &run)
        }]);
        let flipped = render(&ready, &mut transitions, "t2");
        assert_eq!(condition(&flipped, "Ready")["lastTransitionTime"], "t2");
        assert_eq!(
            condition(&flipped, "PodScheduled")["lastTransitionTime"],
            "t0"
        );
    }
}
