//! The cluster a component test runs against, behind one type so that each test has one body:
//! the sandbox (our embedded API server, pods run by the node agent in-process) or the real
//! control plane (etcd, kube-apiserver and kube-controller-manager built from the Go modules, in
//! a network namespace, with the node agent `initializer-node` as the kubelet).
//!
//! [`run`] starts the cluster, runs the body, and shuts the cluster down whether the body passed
//! or panicked, so no control-plane process outlives a failed test. On the real control plane a
//! failing test keeps the state directory (the components' logs are under `logs/`) and says where.
//! `on_backends!` writes a body's tests, one per backend it runs on; those on the real control
//! plane, which needs root, are ignored unless asked for (`make unit-real`).
//!
//! Pods are frozen, thawed and killed on the node in both cases: the sandbox's node agent signals
//! the pod's process groups itself; on the real control plane the node agent reports each
//! container's process group as its id (`process://<pgid>`), and the test signals that group
//! (the namespace separates networks, not processes) with `initializer_controlplane::signal`,
//! as the e2e harness does (a container restarted meanwhile is read again).

pub mod account;
pub mod install;
pub mod operator;
pub mod refusal;

use std::collections::BTreeMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

use anyhow::{Context, bail};
use futures::FutureExt;
use futures::future::BoxFuture;
use initializer_controlplane::signal::{PodSignal, signal_pod};
use initializer_controlplane::{ControlPlane, ControlPlaneConfig};
use initializer_operator::probe::Connector;
use initializer_sandbox::{Sandbox, SandboxConfig, SandboxHandle};
use kube::Client;

/// Which API server and controllers a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Our embedded API server with its built-in controllers (`initializer-sandbox`).
    Sandbox,
    /// The sandbox speaking Kubernetes 1.7–1.13 Initializers (`legacy_initializers`): it
    /// serves `admissionregistration.k8s.io/v1alpha1` `InitializerConfiguration`.
    LegacySandbox,
    /// kube-apiserver and kube-controller-manager from the Go modules (`initializer-controlplane`).
    Real,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sandbox => "sandbox",
            Backend::LegacySandbox => "sandbox in legacy mode",
            Backend::Real => "real control plane",
        })
    }
}

/// A running cluster with a cluster-admin client.
pub struct TestCluster {
    client: Client,
    plane: Plane,
    // Removed after the cluster has stopped, unless a failing test keeps it.
    dir: tempfile::TempDir,
}

enum Plane {
    Sandbox(SandboxHandle),
    Real(ControlPlane),
}

impl TestCluster {
    /// Starts `backend` with an image map of `images` (image repository → executable).
    pub async fn start(backend: Backend, images: &[(&str, PathBuf)]) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("initializer-operator-test")
            .tempdir()
            .context("failed to create the cluster's state directory")?;
        let map = dir.path().join("images.yaml");
        let body: String = images
            .iter()
            .map(|(image, path)| format!("{image}: {}\n", path.display()))
            .collect();
        std::fs::write(&map, body).with_context(|| format!("failed to write {}", map.display()))?;
        let state = dir.path().join("state");
        let plane = match backend {
            Backend::Sandbox | Backend::LegacySandbox => {
                let mut config = SandboxConfig::new(state);
                config.image_map = Some(map);
                config.legacy_initializers = backend == Backend::LegacySandbox;
                let sandbox = Sandbox::start(config)
                    .await
                    .context("failed to start the sandbox")?;
                Plane::Sandbox(sandbox)
            }
            Backend::Real => {
                let mut config = ControlPlaneConfig::new(state, node_binary()?);
                config.image_map = Some(map);
                let plane = ControlPlane::start(config)
                    .await
                    .context("failed to start the real control plane")?;
                let startup = plane.startup();
                eprintln!(
                    "Kubernetes v{} in network namespace {}: node ready after {:.2}s",
                    plane.version(),
                    plane.netns(),
                    startup.cluster_ready.as_secs_f64()
                );
                Plane::Real(plane)
            }
        };
        let client = match &plane {
            Plane::Sandbox(sandbox) => sandbox.client(),
            Plane::Real(plane) => plane.client(),
        };
        Ok(Self { client, plane, dir })
    }

    /// Whether this is the real control plane (kube-apiserver), not the sandbox.
    pub fn is_real(&self) -> bool {
        matches!(self.plane, Plane::Real(_))
    }

    /// A cluster-admin client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A client acting as `user` on every request (the cluster admin impersonating it): only
    /// the real control plane authorizes, so only there does it mean anything.
    pub async fn client_as(&self, user: &str) -> anyhow::Result<Client> {
        let Plane::Real(plane) = &self.plane else {
            bail!("impersonation needs the real control plane");
        };
        let kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig_path())?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        config.auth_info.impersonate = Some(user.to_string());
        Ok(Client::try_from(config)?)
    }

    /// Makes the next `times` requests of `verb` on `resource` (in `group`) named `name` suffer
    /// `action` (an error, or a delay). Only the sandbox can: kube-apiserver has no fault
    /// injection.
    pub fn inject(
        &self,
        (verb, group, resource, name): (&str, &str, &str, &str),
        action: initializer_sandbox::FaultAction,
        times: u32,
    ) -> anyhow::Result<()> {
        match &self.plane {
            Plane::Sandbox(sandbox) => {
                sandbox.add_fault(initializer_sandbox::FaultRule {
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    name: Some(name.into()),
                    action: Some(action),
                    times: Some(times),
                    ..Default::default()
                });
                Ok(())
            }
            Plane::Real(_) => bail!("kube-apiserver has no fault injection"),
        }
    }

    /// Restarts kube-apiserver with `extra` flags after its own, and returns once it is ready.
    /// Only the real control plane has one.
    pub async fn restart_apiserver(&self, extra: &[&str]) -> anyhow::Result<()> {
        let Plane::Real(plane) = &self.plane else {
            bail!("the sandbox has no kube-apiserver to restart");
        };
        Ok(plane.restart_apiserver(extra).await?)
    }

    /// A command running `program` where a process of the cluster runs, with a cluster-admin
    /// `KUBECONFIG`: on the host for the sandbox, inside the network namespace for the real
    /// control plane (so that it reaches pod IPs, as an operator in a pod does).
    pub fn command(&self, program: &Path) -> Command {
        match &self.plane {
            Plane::Sandbox(sandbox) => {
                let mut command = Command::new(program);
                command.env("KUBECONFIG", sandbox.kubeconfig_path());
                command
            }
            Plane::Real(plane) => plane.command_inside(program),
        }
    }

    /// How an operator running in this test process reaches the pods: directly on the sandbox
    /// (its pods listen on 127.x addresses), and from inside the network namespace on the real
    /// control plane, as an operator running as a pod would.
    pub fn probe_connector(&self) -> Connector {
        match &self.plane {
            Plane::Sandbox(_) => Connector::direct(),
            Plane::Real(plane) => {
                let connect = plane.connector();
                Connector::new(move |addr| {
                    let connect = connect.clone();
                    async move {
                        let stream = tokio::task::spawn_blocking(move || connect(addr))
                            .await
                            .map_err(std::io::Error::other)??;
                        stream.set_nonblocking(true)?;
                        tokio::net::TcpStream::from_std(stream)
                    }
                })
            }
        }
    }

    /// Stops every process of the pod (SIGSTOP): it stays Running and stops answering.
    pub async fn freeze(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        self.signal(namespace, name, PodSignal::Freeze).await
    }

    /// Resumes a frozen pod (SIGCONT).
    pub async fn thaw(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        self.signal(namespace, name, PodSignal::Thaw).await
    }

    /// Kills the pod's processes (SIGKILL); its restart policy then applies.
    pub async fn kill(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        self.signal(namespace, name, PodSignal::Kill).await
    }

    async fn signal(&self, namespace: &str, name: &str, signal: PodSignal) -> anyhow::Result<()> {
        match &self.plane {
            Plane::Sandbox(sandbox) => {
                let workloads = sandbox
                    .workloads()
                    .context("the sandbox runs no workloads (no image map)")?;
                match signal {
                    PodSignal::Freeze => workloads.freeze(namespace, name).await,
                    PodSignal::Thaw => workloads.thaw(namespace, name).await,
                    PodSignal::Kill => workloads.kill(namespace, name).await,
                }
            }
            Plane::Real(_) => signal_pod(&self.client, namespace, name, signal).await,
        }
    }

    /// Stops the cluster and every pod. `keep_state` keeps the state directory (logs, pods'
    /// files) of the real control plane for a failing test, and prints where it is.
    pub async fn shutdown(self, keep_state: bool) {
        match self.plane {
            Plane::Sandbox(sandbox) => sandbox.shutdown().await,
            Plane::Real(plane) => {
                plane.shutdown().await;
                if keep_state {
                    let kept = self.dir.keep();
                    eprintln!(
                        "kept the real control plane's state directory {} (logs/, node/)",
                        kept.join("state").display()
                    );
                }
            }
        }
    }
}

/// Starts a cluster on `backend` with `images`, runs `body` on it, and shuts it down whether
/// the body passed or panicked; then passes the panic on. A cluster that cannot start fails the
/// test with the cluster's error: the real control plane is never skipped.
pub async fn run<F>(backend: Backend, images: &[(&str, PathBuf)], body: F)
where
    F: for<'a> FnOnce(&'a TestCluster) -> BoxFuture<'a, ()>,
{
    let started = std::time::Instant::now();
    let cluster = match TestCluster::start(backend, images).await {
        Ok(cluster) => cluster,
        Err(err) => panic!("{err:#}"),
    };
    let outcome = AssertUnwindSafe(body(&cluster)).catch_unwind().await;
    cluster.shutdown(outcome.is_err()).await;
    // The harness names the thread after the test: `--nocapture` then gives per-test durations.
    eprintln!(
        "{}: {:.1}s on the {backend}",
        std::thread::current().name().unwrap_or("test"),
        started.elapsed().as_secs_f64()
    );
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// An Initializer `name` with `spec`, as the tests write them.
pub fn initializer(name: &str, spec: serde_json::Value) -> initializer_crds::Initializer {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// The tests of test bodies: for each body `async fn name(cluster: &TestCluster)` of the invoking
/// module, a module `name` with a test per backend the body runs on, `on_sandbox` and
/// `on_real`, each running the body through the test binary's own `crate::run(backend, body)`
/// (which starts the cluster with the images that binary's tests deploy).
///
/// ```text
/// on_backends!(sandbox and real: a_body, another_body);
/// on_backends! {
///     /// Why the real control plane cannot run it (the generated module's documentation).
///     sandbox only: a_third_body,
/// }
/// on_backends! {
///     /// Why the sandbox cannot run it.
///     real only: a_fourth_body,
/// }
/// ```
///
/// A body one backend cannot run has no test there, rather than one always ignored (`make
/// unit-real` runs every ignored test of these binaries), and says why in its module's
/// documentation. `on_real` is ignored unless asked for, so that a plain `cargo test` needs
/// neither root nor the control plane built from Go; its reason names the commands that run it.
// Not every test binary that includes this file generates its tests with it.
#[allow(unused_macros)]
macro_rules! on_backends {
    (@test on_sandbox $body:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn on_sandbox() {
            crate::run(crate::support::Backend::Sandbox, |cluster| {
                Box::pin(super::$body(cluster))
            })
            .await;
        }
    };
    (@test on_real $body:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs root and the real control plane: make unit-real, or cargo test -p initializer-operator --tests -- --ignored"]
        async fn on_real() {
            crate::run(crate::support::Backend::Real, |cluster| {
                Box::pin(super::$body(cluster))
            })
            .await;
        }
    };
    (@module [$(#[$attr:meta])*] [$($variant:ident)+] $body:ident) => {
        $(#[$attr])*
        mod $body {
            $(on_backends!(@test $variant $body);)+
        }
    };
    (@modules $attrs:tt $variants:tt: $($body:ident),+ $(,)?) => {
        $(on_backends!(@module $attrs $variants $body);)+
    };
    (sandbox and real: $($body:ident),+ $(,)?) => {
        on_backends!(@modules [] [on_sandbox on_real]: $($body),+);
    };
    ($(#[$why:meta])+ sandbox only: $($body:ident),+ $(,)?) => {
        on_backends!(@modules [$(#[$why])+] [on_sandbox]: $($body),+);
    };
    ($(#[$why:meta])+ real only: $($body:ident),+ $(,)?) => {
        on_backends!(@modules [$(#[$why])+] [on_real]: $($body),+);
    };
}

/// The node agent, `target/<profile>/initializer-node`.
fn node_binary() -> anyhow::Result<PathBuf> {
    built("--bin", "initializer-node")
}

/// The features the Makefile's `WORKSPACE` builds the workspace with, beside `--workspace`.
const WORKSPACE_FEATURES: &str = "initializer-crds/generate";

/// The executable of the workspace's target `name` (`--bin` or `--example`), built into the
/// target directory and profile this test was built with, once per test process.
///
/// `cargo test --test <name>` builds neither examples nor other packages' binaries, and a binary
/// left from an earlier `cargo build` may be stale; building here (a no-op when up to date) makes
/// every test run what the sources say. The build lock is free while tests run, so this does not
/// wait on the `cargo test` that started us. It selects the packages and features `make build`
/// and `make unit` build with (`--workspace`, [`WORKSPACE_FEATURES`]): a build of one package
/// resolves the features of that package alone, and would compile every crate under it again.
pub fn built(kind: &str, name: &str) -> anyhow::Result<PathBuf> {
    static BUILT: Mutex<BTreeMap<String, Result<PathBuf, String>>> = Mutex::new(BTreeMap::new());
    let key = format!("{kind} {name}");
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    let result = built
        .entry(key)
        .or_insert_with(|| cargo_build(kind, name).map_err(|e| format!("{e:#}")));
    result.clone().map_err(anyhow::Error::msg)
}

fn cargo_build(kind: &str, name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("failed to find the test executable")?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("the test executable is not under target/<profile>/deps")?;
    let target_dir = profile_dir
        .parent()
        .context("the test executable is not under target/<profile>/deps")?;
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(other) => other,
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the operator's manifest has no parent directory")?;
    let mut command = Command::new(&cargo);
    command
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--features",
            WORKSPACE_FEATURES,
            kind,
            name,
            "--profile",
            profile,
        ])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(workspace);
    // Cargo gives the test the variables it sets for the operator's crate (CARGO_MANIFEST_DIR,
    // CARGO_PKG_*, ...). Passed on, they change the fingerprints of build scripts that read them
    // (ring's reads CARGO_MANIFEST_DIR), and every build here and in the shell would rebuild
    // those dependencies again.
    for (var, _) in std::env::vars_os() {
        if var.to_str().is_some_and(set_by_cargo_for_the_test) {
            command.env_remove(var);
        }
    }
    let output = command
        .output()
        .with_context(|| format!("failed to run {}", Path::new(&cargo).display()))?;
    if !output.status.success() {
        bail!(
            "failed to build {kind} {name} ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let path = match kind {
        "--example" => profile_dir.join("examples").join(name),
        _ => profile_dir.join(name),
    };
    if !path.is_file() {
        bail!(
            "cargo built {kind} {name} but {} is missing",
            path.display()
        );
    }
    Ok(path)
}

/// Whether cargo sets `var` for the crate under test (rather than the user for cargo).
fn set_by_cargo_for_the_test(var: &str) -> bool {
    var.starts_with("CARGO_PKG_")
        || var.starts_with("CARGO_BIN_")
        || matches!(
            var,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}
