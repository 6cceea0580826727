//! The real control plane's bad input and faults: each fails at once and says why.
//!
//! - a Kubernetes version whose module the Go proxy refuses fails the build naming the module;
//! - without the right to create a network namespace, the backend fails with the reason;
//! - a component that dies is reported with its last log lines, not left to a timeout.
//!
//! Each needs Go or its build: the first runs the build script, the last two start real
//! processes, which need the binaries `cargo build --workspace --bins` makes and the control
//! plane `make controlplane` builds (and, for the dead component, root). A plain `cargo test`
//! lists them as ignored; `make unit-real` runs them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use initializer_controlplane::{ControlPlane, ControlPlaneConfig, Error};
use initializer_e2e::paths;

#[test]
#[ignore = "needs Go (the control plane's build script): make unit-real, or cargo test -p initializer-e2e --test controlplane_faults -- --ignored"]
fn a_version_the_module_proxy_refuses_fails_the_build_naming_the_module() {
    let cache = tempfile::tempdir().unwrap();
    let script = paths::workspace_root().join("tools/controlplane/build.sh");
    // GOPROXY=off refuses every module not already downloaded, as a proxy without it would.
    let output = Command::new(script)
        .env("K8S_VERSION", "1.34.999")
        .env("GOPROXY", "off")
        .env("CONTROLPLANE_CACHE", cache.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("k8s.io/kubernetes@v1.34.999"),
        "the error must name the module: {stderr}"
    );
}

#[test]
#[ignore = "needs the control plane built from Go (make controlplane): make unit-real, or cargo test -p initializer-e2e --test controlplane_faults -- --ignored"]
fn without_the_right_to_make_a_network_namespace_the_backend_says_why() {
    let cluster = paths::binary("cluster").unwrap();
    // As root, drop to nobody to lose CAP_SYS_ADMIN; as anyone else, we already lack it.
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let mut command = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&cluster);
        c
    } else {
        Command::new(&cluster)
    };
    let output = command
        .current_dir(std::env::temp_dir())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("failed to create the control plane's network namespace")
            && stderr.contains("needs root (CAP_SYS_ADMIN)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real control plane: make unit-real, or cargo test -p initializer-e2e --test controlplane_faults -- --ignored"]
async fn a_dead_api_server_is_reported_with_its_last_log_lines() {
    let dir = tempfile::tempdir().unwrap();
    let config = ControlPlaneConfig::new(dir.path(), paths::binary("initializer-node").unwrap());
    let plane = ControlPlane::start(config).await.unwrap();
    plane.check().unwrap();
    let (_, pid, _) = plane
        .memory()
        .into_iter()
        .find(|(name, _, _)| *name == "kube-apiserver")
        .unwrap();
    Command::new("kill")
        .arg("-KILL")
        .arg(pid.to_string())
        .status()
        .unwrap();
    let started = std::time::Instant::now();
    let died = loop {
        if let Err(err) = plane.check() {
            break err;
        }
        assert!(started.elapsed().as_secs() < 10, "the death went unnoticed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    plane.shutdown().await;
    let Error::Died {
        component,
        last_lines,
        ..
    } = died
    else {
        panic!("expected a death report, got {died}");
    };
    assert_eq!(component, "kube-apiserver");
    assert!(!last_lines.trim().is_empty(), "no log lines quoted");
}
