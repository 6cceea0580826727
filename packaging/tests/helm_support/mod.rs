//! Running the real `helm` on the committed chart: shared by this crate's chart tests and the
//! operator's dry run of the rendered chart on kube-apiserver (`operator/tests/helm_dry_run.rs`
//! includes this file).

use std::path::{Path, PathBuf};
use std::process::Command;

use initializer_packaging::bundle::chart;
use serde_json::Value;

/// The namespace every rendering installs into.
pub const NS: &str = "initializer-system";

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The committed chart.
pub fn chart_dir() -> PathBuf {
    workspace().join(chart::CHART_DIR)
}

/// The helm binary: `tools/helm/build.sh` prints it (instant once built).
pub fn helm() -> PathBuf {
    let output = Command::new(workspace().join("tools/helm/build.sh"))
        .output()
        .expect("failed to run tools/helm/build.sh");
    assert!(
        output.status.success(),
        "tools/helm/build.sh failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// `helm template` of the committed chart with `args`; Ok(objects) or Err(stderr).
pub fn template(args: &[&str]) -> Result<Vec<Value>, String> {
    let output = Command::new(helm())
        .args(["template", "initializer-operator"])
        .arg(chart_dir())
        .args(["--namespace", NS])
        .args(args)
        .output()
        .unwrap();
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = String::from_utf8(output.stdout).unwrap();
    // A template that renders nothing gives an empty document, which is skipped.
    Ok(serde_saphyr::from_multiple(&text).unwrap())
}
