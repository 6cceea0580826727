//! The real backend (`E2E_CLUSTER=real`): etcd, kube-apiserver and kube-controller-manager
//! built from the official Go modules, with our node agent, in a network namespace of their own
//! (`initializer-controlplane`). The test process stays outside and reaches the API server
//! through the control plane's port forward.
//!
//! Pods are frozen, thawed and killed where that is honest: on the node. The node agent runs
//! each container in a process group of its own and reports it as the container's id
//! (`process://<pgid>`); the namespace separates networks, not processes, so the harness signals
//! that group directly, as `docker exec <node> kill` does on kind.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, bail};
use futures::FutureExt;
use futures::future::BoxFuture;
use initializer_controlplane::{ControlPlane, ControlPlaneConfig};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use crate::backend::{Backend, PodAction};
use crate::{images, paths};

/// The node agent's binary name.
pub const NODE_BINARY: &str = "initializer-node";

/// The real control plane, owned by this process.
pub struct RealBackend {
    name: String,
    client: Client,
    kubeconfig: PathBuf,
    plane: Mutex<Option<ControlPlane>>,
    // Removed when the backend is dropped, after the control plane has stopped.
    _state_dir: tempfile::TempDir,
}

impl RealBackend {
    /// Builds the control plane if needed and starts it, with the image map of our binaries.
    pub async fn start() -> anyhow::Result<Self> {
        let state_dir = paths::state_dir("real", "cluster/logs/, cluster/node/")?;
        let image_map = images::write_image_map(state_dir.path())?;
        let mut config = ControlPlaneConfig::new(
            state_dir.path().join("cluster"),
            paths::binary(NODE_BINARY)?,
        );
        config.image_map = Some(image_map);
        config.target_dir = paths::target_dir();
        let plane = ControlPlane::start(config)
            .await
            .context("failed to start the real control plane")?;
        let startup = plane.startup();
        eprintln!(
            "e2e: Kubernetes v{} in network namespace {}: API ready after {:.2}s, node ready after {:.2}s",
            plane.version(),
            plane.netns(),
            startup.api_ready.as_secs_f64(),
            startup.cluster_ready.as_secs_f64()
        );
        Ok(Self {
            name: format!("real (Kubernetes v{})", plane.version()),
            client: plane.client(),
            kubeconfig: plane.kubeconfig_path().to_path_buf(),
            plane: Mutex::new(Some(plane)),
            _state_dir: state_dir,
        })
    }

    async fn signal_pod(
        &self,
        namespace: &str,
        name: &str,
        action: PodAction,
    ) -> anyhow::Result<()> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), namespace);
        // A container the liveness probe is restarting (stopping gracefully, then backing off)
        // has nothing running for a few seconds, as under the kubelet: wait for it to run again.
        let deadline = std::time::Instant::now() + RESTART_WAIT;
        loop {
            let groups = loop {
                let pod = pods
                    .get(name)
                    .await
                    .with_context(|| format!("failed to get pod {namespace}/{name}"))?;
                let groups = process_groups(&pod);
                // Nothing running has nothing frozen: a liveness probe may have restarted a
                // frozen container meanwhile, as the kubelet does.
                if !groups.is_empty() || action == PodAction::Thaw {
                    break groups;
                }
                if std::time::Instant::now() > deadline {
                    bail!(
                        "failed to {} pod {namespace}/{name}: no container is running",
                        action.verb()
                    );
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            };
            let mut gone = false;
            for pgid in groups {
                match signal_group(pgid, action) {
                    Ok(Signalled::Sent) => {}
                    // The container exited between reading the pod and signalling it (the
                    // liveness probe restarting it): read the pod again for the new container.
                    Ok(Signalled::Gone) => gone = true,
                    Err(err) => {
                        return Err(err).with_context(|| {
                            format!("failed to {} pod {namespace}/{name}", action.verb())
                        });
                    }
                }
            }
            // A thaw has nothing left to do for a group that is gone: a new container is not
            // frozen.
            let gone = gone && action != PodAction::Thaw;
            if gone && std::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
            if gone {
                bail!(
                    "failed to {} pod {namespace}/{name}: its containers kept exiting",
                    action.verb()
                );
            }
            return Ok(());
        }
    }
}

/// How long freezing or killing a pod waits for a container that is being restarted.
const RESTART_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

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

fn signal_group(pgid: i32, action: PodAction) -> anyhow::Result<Signalled> {
    use rustix::process::{Pid, Signal, kill_process_group};
    let signal = match action {
        PodAction::Freeze => Signal::STOP,
        PodAction::Thaw => Signal::CONT,
        PodAction::Kill => Signal::KILL,
    };
    let pid = Pid::from_raw(pgid).with_context(|| format!("invalid process group {pgid}"))?;
    match kill_process_group(pid, signal) {
        // A group that exited between reading the pod and signalling it (the liveness probe
        // restarted the frozen container) has nothing left frozen: the thaw is done.
        Ok(()) => Ok(Signalled::Sent),
        Err(rustix::io::Errno::SRCH) => Ok(Signalled::Gone),
        Err(err) => Err(err),
    }
    .with_context(|| {
        format!(
            "failed to send SIG{} to process group {pgid}",
            action.signal()
        )
    })
}

impl Backend for RealBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    fn client(&self) -> Client {
        self.client.clone()
    }

    fn control_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        action: PodAction,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        self.signal_pod(namespace, name, action).boxed()
    }

    fn command_inside(&self, program: &Path) -> Option<std::process::Command> {
        let plane = self.plane.lock().ok()?;
        Some(plane.as_ref()?.command_inside(program))
    }

    fn failure(&self) -> BoxFuture<'_, anyhow::Error> {
        // Polled rather than awaited: the control plane sits behind a mutex (shutdown takes it
        // out), so its exit futures cannot be held across awaits here.
        async move {
            loop {
                let check = self
                    .plane
                    .lock()
                    .ok()
                    .and_then(|plane| plane.as_ref().map(ControlPlane::check));
                if let Some(Err(err)) = check {
                    return anyhow::Error::new(err);
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
        .boxed()
    }

    fn resources(&self) -> Vec<String> {
        let memory = self
            .plane
            .lock()
            .ok()
            .and_then(|plane| plane.as_ref().map(ControlPlane::memory))
            .unwrap_or_default();
        memory
            .into_iter()
            .map(|(name, pid, rss)| match rss {
                Some(kib) => format!(
                    "{name} (pid {pid}): {:.0} MiB resident",
                    kib as f64 / 1024.0
                ),
                None => format!("{name} (pid {pid}): exited"),
            })
            .collect()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        let plane = self.plane.lock().ok().and_then(|mut plane| plane.take());
        async move {
            if let Some(plane) = plane {
                plane.shutdown().await;
            }
        }
        .boxed()
    }
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
        for action in [PodAction::Freeze, PodAction::Thaw, PodAction::Kill] {
            let outcome = signal_group(gone_group(), action).expect("no error for a gone group");
            assert_eq!(outcome, Signalled::Gone, "{action:?}");
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
            signal_group(pgid, PodAction::Kill).unwrap(),
            Signalled::Sent
        );
        child.wait().expect("wait for sleep");
    }
}
