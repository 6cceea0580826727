//! The krew manifest (`krew/initializer.yaml`), checked with krew's own tools built from its
//! official Go module (`tools/krew/build.sh`): `validate-krew-manifest`, the validator krew-index CI
//! runs, accepts it (and refuses a broken copy); and `kubectl krew install --manifest --archive`
//! installs the plugin from it, packaged by `krew/package.sh` for this machine, after which
//! kubectl runs `kubectl initializer`. Needs Go and the module proxy (or Go's module cache): a
//! plain `cargo test` lists it as ignored, and `make unit-real` runs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::Context as _;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn manifest() -> PathBuf {
    crate_dir().join("krew").join("initializer.yaml")
}

fn show(output: &Output) -> String {
    format!(
        "{}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The directory holding `kubectl-krew` and `validate-krew-manifest`, built if needed.
fn krew_tools() -> anyhow::Result<PathBuf> {
    let output = Command::new(crate_dir().join("../../tools/krew/build.sh"))
        .output()
        .context("failed to run tools/krew/build.sh")?;
    anyhow::ensure!(
        output.status.success(),
        "building krew failed: {}",
        show(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout
        .lines()
        .last()
        .context("build.sh printed no directory")?;
    Ok(PathBuf::from(dir.trim()))
}

fn validate(tools: &Path, manifest: &Path) -> anyhow::Result<Output> {
    Command::new(tools.join("validate-krew-manifest"))
        .args(["-manifest"])
        .arg(manifest)
        .arg("-skip-install")
        .output()
        .context("failed to run validate-krew-manifest")
}

/// krew's name of this machine's architecture, when the manifest has one for it.
fn krew_arch() -> Option<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => Some("amd64"),
        "aarch64" => Some("arm64"),
        _ => None,
    }
}

#[test]
#[ignore = "needs Go and krew's module (tools/krew/build.sh): make unit-real, or cargo test -p kubectl-initializer --test krew -- --ignored"]
fn krew_validates_the_manifest_and_installs_the_plugin_from_it() {
    let tools = krew_tools().unwrap();
    let arch = krew_arch().expect("the manifest has a platform for this architecture");
    let checked = validate(&tools, &manifest()).unwrap();
    assert!(
        checked.status.success(),
        "validate-krew-manifest refused krew/initializer.yaml: {}",
        show(&checked)
    );

    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(manifest()).unwrap();
    let mut plugin: serde_json::Value = serde_saphyr::from_str(&text).unwrap();

    // A broken copy (no `bin`) is refused: the validator is not a rubber stamp.
    let mut broken = plugin.clone();
    broken["spec"]["platforms"][0]
        .as_object_mut()
        .unwrap()
        .remove("bin");
    let broken_path = dir.path().join("broken").join("initializer.yaml");
    std::fs::create_dir_all(broken_path.parent().unwrap()).unwrap();
    std::fs::write(&broken_path, serde_saphyr::to_string(&broken).unwrap()).unwrap();
    let refused = validate(&tools, &broken_path).unwrap();
    assert!(!refused.status.success(), "a manifest without bin passed");
    assert!(
        show(&refused).contains("`bin` has to be set"),
        "{}",
        show(&refused)
    );

    // Package the built plugin for this machine and point the manifest's platform at it.
    let archives = dir.path().join("archives");
    let packaged = Command::new(crate_dir().join("krew/package.sh"))
        .arg(env!("CARGO_BIN_EXE_kubectl-initializer"))
        .args(["linux", arch])
        .arg(&archives)
        .output()
        .expect("package.sh runs");
    assert!(packaged.status.success(), "package.sh: {}", show(&packaged));
    let lines = String::from_utf8_lossy(&packaged.stdout).into_owned();
    let sha = lines
        .lines()
        .find_map(|l| l.trim().strip_prefix("sha256: "))
        .map(|s| s.trim_matches('"').to_string())
        .expect("package.sh prints the sha256");
    let archive = std::fs::read_dir(&archives)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(
        lines.contains(archive.file_name().unwrap().to_str().unwrap()),
        "the printed uri names the archive: {lines}"
    );
    let platforms = plugin["spec"]["platforms"].as_array_mut().unwrap();
    let ours = platforms
        .iter_mut()
        .find(|p| {
            p["selector"]["matchLabels"]["os"] == "linux"
                && p["selector"]["matchLabels"]["arch"] == arch
        })
        .expect("the manifest has this machine's platform");
    ours["sha256"] = serde_json::Value::String(sha);
    let release = dir.path().join("initializer.yaml");
    std::fs::write(&release, serde_saphyr::to_string(&plugin).unwrap()).unwrap();
    let checked = validate(&tools, &release).unwrap();
    assert!(checked.status.success(), "{}", show(&checked));

    // krew installs it into its own root; kubectl then finds and runs it.
    let root = dir.path().join("krew-root");
    let path = format!(
        "{}:{}:{}",
        root.join("bin").display(),
        tools.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let install = Command::new("kubectl")
        .args(["krew", "install"])
        .arg(format!("--manifest={}", release.display()))
        .arg(format!("--archive={}", archive.display()))
        .env("KREW_ROOT", &root)
        .env("PATH", &path)
        .output()
        .expect("kubectl krew runs");
    assert!(install.status.success(), "krew install: {}", show(&install));
    // `krew list` needs the git index; krew's receipt and its bin link say the same offline.
    let receipt = std::fs::read_to_string(root.join("receipts").join("initializer.yaml"))
        .expect("krew wrote a receipt for the plugin");
    assert!(receipt.contains("name: initializer"), "{receipt}");
    assert!(root.join("bin").join("kubectl-initializer").exists());
    let help = Command::new("kubectl")
        .args(["initializer", "why", "--help"])
        .env("PATH", &path)
        .output()
        .expect("kubectl runs");
    assert!(help.status.success(), "{}", show(&help));
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("Usage: kubectl initializer why"),
        "{}",
        show(&help)
    );
}
