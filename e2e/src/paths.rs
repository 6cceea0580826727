//! Where the workspace, the cargo target directory and our built binaries are.
//!
//! The suite runs the binaries `cargo build --workspace --bins` produced (`make e2e` builds them
//! first), found under `$CARGO_TARGET_DIR/debug` or `<workspace>/target/debug`.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use initializer_crds::images;

/// The workspace root: the parent of this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The cargo target directory: `$CARGO_TARGET_DIR` (relative paths resolved against the
/// workspace root), else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        _ => workspace_root().join("target"),
    }
}

/// Directory holding the debug binaries: `$CARGO_TARGET_DIR/debug` when set; else the
/// directory of the running executable (or its parent, for test binaries under `deps/`) when it
/// holds the operator; else `<workspace>/target/debug`.
pub fn bin_dir() -> PathBuf {
    if std::env::var_os("CARGO_TARGET_DIR").is_some_and(|dir| !dir.is_empty()) {
        return target_dir().join("debug");
    }
    let beside_us = std::env::current_exe().ok().and_then(|exe| {
        let dir = exe.parent()?.to_path_buf();
        [dir.clone(), dir.parent()?.to_path_buf()]
            .into_iter()
            .find(|candidate| candidate.join(images::OPERATOR).is_file())
    });
    beside_us.unwrap_or_else(|| target_dir().join("debug"))
}

/// Every binary the suite runs: the operator and each initializer.
pub fn shipped_binaries() -> Vec<&'static str> {
    let mut binaries = vec![images::OPERATOR, images::PRESET_INITIALIZER];
    binaries.extend(images::EXAMPLE_INITIALIZERS);
    binaries
}

/// Path of one built binary, or a clear error naming the command that builds it.
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir().join(name);
    if !path.is_file() {
        bail!(
            "failed to find the binary {name} at {}: build every binary first with \
             `cargo build --workspace --bins` (`make e2e` does it), with the same CARGO_TARGET_DIR",
            path.display()
        );
    }
    Ok(path)
}

/// Checks that every shipped binary is built, naming all that are missing at once.
pub fn require_binaries() -> anyhow::Result<()> {
    let missing: Vec<&str> = shipped_binaries()
        .into_iter()
        .filter(|name| !bin_dir().join(name).is_file())
        .collect();
    if !missing.is_empty() {
        bail!(
            "failed to find the binaries {} in {}: build every binary first with \
             `cargo build --workspace --bins` (`make e2e` does it), with the same CARGO_TARGET_DIR",
            missing.join(", "),
            bin_dir().display()
        );
    }
    Ok(())
}

/// The operator's bundle directory.
pub fn bundle_dir() -> PathBuf {
    workspace_root()
        .join("bundles")
        .join("initializer-operator")
}

/// Env var naming a release directory (`target/release/<version>`, what `make release` writes):
/// the suite then installs that release, every image by its digest, instead of the committed
/// bundle and chart.
pub const RELEASE_ENV: &str = "E2E_RELEASE";

/// The release `E2E_RELEASE` names, if any.
pub fn release_dir() -> Option<PathBuf> {
    std::env::var_os(RELEASE_ENV)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
}

/// The bundle the suite installs: the release's, when `E2E_RELEASE` names one, else the
/// committed bundle.
pub fn install_bundle_dir() -> PathBuf {
    release_dir().map_or_else(bundle_dir, |release| release.join("bundle"))
}

/// Reads a file under the workspace root, with the path in the error.
pub fn read_workspace_file(relative: &str) -> anyhow::Result<String> {
    let path = workspace_root().join(relative);
    std::fs::read_to_string(&path).with_context(|| format!("failed to read {}", path.display()))
}

/// A fresh state directory for a target (`initializer-e2e-<name>...` under the temporary
/// directory), removed when dropped unless `E2E_KEEP_STATE=1` asks to keep it for a
/// post-mortem (pod and component logs live there); `what` says what is in it.
pub fn state_dir(name: &str, what: &str) -> anyhow::Result<tempfile::TempDir> {
    post_mortem_dir(
        &format!("initializer-e2e-{name}"),
        &format!("the {name} target's state directory"),
        |path| {
            format!(
                "e2e: keeping the {name} target's state directory {} ({what})",
                path.display()
            )
        },
    )
}

/// A fresh directory `prefix...` under the temporary directory (`what` names it when it cannot
/// be created), removed when dropped unless `E2E_KEEP_STATE=1` asks to keep it for a
/// post-mortem; then `kept` says so, given its path.
pub fn post_mortem_dir(
    prefix: &str,
    what: &str,
    kept: impl FnOnce(&Path) -> String,
) -> anyhow::Result<tempfile::TempDir> {
    let mut dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .with_context(|| format!("failed to create {what}"))?;
    if std::env::var_os("E2E_KEEP_STATE").is_some_and(|v| v == "1") {
        dir.disable_cleanup(true);
        eprintln!("{}", kept(dir.path()));
    }
    Ok(dir)
}

/// Runs a build script of the workspace (`tools/helm/build.sh`, `tools/olm/build.sh`: instant
/// once built) and returns the path it prints, what it built; a failure carries the script's
/// stderr, under `what` ("helm", "OLM and opm").
pub async fn built_by_script(script: &str, what: &str) -> anyhow::Result<PathBuf> {
    let script = workspace_root().join(script);
    let output = tokio::process::Command::new(&script)
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("failed to run {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "failed to build {what} with {}:\n{}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}
