//! The `sandbox` binary: `sandbox up` prints where things are, serves, and exits cleanly on
//! SIGTERM; `sandbox fault` programs a running sandbox.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test]
async fn sandbox_up_serves_faults_from_the_cli_and_exits_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["up", "--state-dir"])
        .arg(dir.path().join("state"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut kubeconfig = None;
    let mut logs = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(p) = line.strip_prefix("kubeconfig: ") {
            kubeconfig = Some(p.to_string());
        }
        if let Some(p) = line.strip_prefix("pod logs: ") {
            logs = Some(p.to_string());
        }
        if kubeconfig.is_some() && logs.is_some() {
            break;
        }
    }
    let kubeconfig = kubeconfig.unwrap();
    assert!(kubeconfig.ends_with("/state/kubeconfig"), "{kubeconfig}");
    assert!(std::path::Path::new(&logs.unwrap()).is_dir());

    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    // The injected 503 must reach the test, not be retried away by kube.
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::default_namespaced(client);
    assert!(cms.list(&Default::default()).await.is_ok());

    let added = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args([
            "fault",
            "add",
            "--verb",
            "list",
            "--resource",
            "configmaps",
            "--error",
            "503",
            "--times",
            "1",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let err = cms.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 503),
        "{err:?}"
    );
    assert!(cms.list(&Default::default()).await.is_ok());

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "sandbox did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
