//! The operator as the component tests run it: replicas in the test's own process, and the
//! SDK-built test initializer (examples/test_initializer.rs) as the image their Initializers
//! deploy.

use std::path::PathBuf;

use clap::Parser;
use futures::future::BoxFuture;
use initializer_operator::run::{RunArgs, run_with};
use kube::Client;
use tokio_util::sync::CancellationToken;

use super::{Backend, TestCluster};

/// The SDK-built initializer the tests' Initializers run.
pub fn test_initializer() -> PathBuf {
    super::built("--example", "test_initializer").unwrap()
}

/// The secret guard's image repository, which the tests' guards run as the test initializer.
const GUARD_IMAGE_REPOSITORY: &str = "ghcr.io/initializer-dev/secret-guard-initializer";

/// The image of the tests' guards (the test initializer).
pub const GUARD_IMAGE: &str = "ghcr.io/initializer-dev/secret-guard-initializer:test";

/// Runs one test body on `backend`, with the test initializer as the guard's image and the
/// preset initializer's binary as the preset image (what a preset Initializer deploys).
pub async fn run<F>(backend: Backend, body: F)
where
    F: for<'a> FnOnce(&'a TestCluster) -> BoxFuture<'a, ()>,
{
    initializer_operator::run::init_tracing(false);
    let preset_image =
        initializer_crds::images::image(initializer_crds::images::PRESET_INITIALIZER);
    let preset_repository = preset_image
        .rsplit_once(':')
        .map_or(preset_image.as_str(), |(repository, _)| repository);
    let preset = super::built("--bin", "preset-initializer").unwrap();
    let images = [
        (GUARD_IMAGE_REPOSITORY, test_initializer()),
        (preset_repository, preset),
    ];
    super::run(backend, &images, body).await;
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

/// One operator replica running in this process; stopped when dropped, so a failing test stops
/// it before its cluster goes.
pub struct Operator {
    stop: CancellationToken,
}

impl Operator {
    /// Starts a replica of `namespace` as pod `pod_name` with the further flags `flags`, making
    /// its API calls with `client` and probing the pods from inside the cluster's network.
    /// Without a `--network-policy` in `flags` it writes none: the tests of the NetworkPolicy
    /// (`network_policy.rs`) ask for it, and the others test what a policy would stand in front
    /// of, whose timings a route change per registration would blur.
    pub fn spawn_with(
        cluster: &TestCluster,
        client: Client,
        namespace: &str,
        pod_name: &str,
        flags: &[&str],
    ) -> Self {
        let stop = CancellationToken::new();
        let mut argv = vec![
            "run",
            "--namespace",
            namespace,
            "--metrics-addr",
            "127.0.0.1:0",
            "--pod-name",
            pod_name,
        ];
        if !flags.contains(&"--network-policy") {
            argv.extend_from_slice(&["--network-policy", "off"]);
        }
        argv.extend_from_slice(flags);
        let mut args = Cli::parse_from(argv).run;
        args.probe_connector = cluster.probe_connector();
        tokio::spawn(run_with(client, args, stop.clone()));
        Self { stop }
    }

    /// Stops the replica now.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
