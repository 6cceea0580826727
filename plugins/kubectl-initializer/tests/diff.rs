//! `kubectl initializer diff` as a user runs it: the built binary on files in a temporary
//! directory, with no kubeconfig anywhere (it must not need one), checked for its output, its
//! exit status and its errors.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::Context as _;

const INITIALIZER: &str = r#"
apiVersion: initializer.dev/v1alpha1
kind: Initializer
metadata:
  name: sidecar
spec:
  rules:
    - apiGroups: ["", "apps"]
      apiVersions: ["v1"]
      resources: ["pods", "deployments"]
  annotation:
    name: initializer.kubernetes.io/sidecar
    required: true
  preset:
    inject:
      containers:
        - name: proxy
          image: registry.example/proxy:1.0
      volumes:
        - name: shared
          emptyDir: {}
      volumeMounts:
        - name: shared
          mountPath: /shared
"#;

const CUSTOM: &str = r#"
apiVersion: initializer.dev/v1alpha1
kind: Initializer
metadata:
  name: custom
spec:
  image: registry.example/custom:1.0
  rules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      resources: ["deployments"]
"#;

const APP: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: apps
  annotations:
    initializer.kubernetes.io/sidecar: "true"
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: app
          image: registry.example/app:1.0
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: plain
  namespace: apps
spec:
  selector:
    matchLabels: {app: plain}
  template:
    metadata:
      labels: {app: plain}
    spec:
      containers:
        - name: app
          image: registry.example/app:1.0
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  ports:
    - port: 80
"#;

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kubectl-initializer"))
}

/// Runs the plugin in `dir` with no kubeconfig reachable, feeding `stdin`.
fn run(dir: &Path, args: &[&str], stdin: &str) -> anyhow::Result<Output> {
    let mut child = Command::new(binary())
        .args(args)
        .current_dir(dir)
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .env("HOME", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("failed to run kubectl-initializer {args:?}"))?;
    child
        .stdin
        .take()
        .context("stdin is not piped")?
        .write_all(stdin.as_bytes())
        .context("failed to write stdin")?;
    child
        .wait_with_output()
        .context("failed to wait for kubectl-initializer")
}

fn show(output: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Checks that `stream` (the stdout or stderr of `output`) says `expected`.
fn assert_says(stream: &[u8], expected: &str, output: &Output) {
    assert!(
        String::from_utf8_lossy(stream).contains(expected),
        "missing {expected:?}\n{}",
        show(output)
    );
}

fn files() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (name, text) in [
        ("initializer.yaml", INITIALIZER),
        ("custom.yaml", CUSTOM),
        ("app.yaml", APP),
    ] {
        std::fs::write(dir.path().join(name), text)?;
    }
    std::fs::write(
        dir.path().join("all.yaml"),
        format!("{INITIALIZER}\n---\n{APP}"),
    )?;
    Ok(dir)
}

#[test]
fn diff_prints_the_change_offline_as_a_unified_diff() {
    let dir = files().unwrap();
    let out = run(
        dir.path(),
        &["diff", "-f", "initializer.yaml", "-f", "app.yaml"],
        "",
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "assumed: the operator runs in namespace initializer-system (--operator-namespace to change)\n",
        "assumed: namespace apps has the labels {kubernetes.io/metadata.name=apps}",
        "Initializer sidecar, computed by: webhook (the preset initializer's own code, in-process); policy initializer-sidecar-preset",
        "\nDeployment/apps/web: changed\n--- Deployment/apps/web\n+++ Deployment/apps/web (after Initializer sidecar)\n@@ ",
        "\nDeployment/apps/plain: not matched\n  initializer-annotation-gate: spec.annotation requires the annotation initializer.kubernetes.io/sidecar",
        "\nService/default/web: not matched\n  Rule: no rule matches CREATE v1 services",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?}\n{}",
            show(&out)
        );
    }
    let added: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .collect();
    for expected in [
        "image: registry.example/proxy:1.0",
        "mountPath: /shared",
        "emptyDir: {}",
    ] {
        assert!(
            added.iter().any(|l| l.contains(expected)),
            "no added line has {expected:?}\n{}",
            show(&out)
        );
    }
    assert!(out.stderr.is_empty(), "{}", show(&out));
}

#[test]
fn diff_reads_one_file_or_stdin_and_writes_json() {
    let dir = files().unwrap();
    let out = run(
        dir.path(),
        &["diff", "all.yaml", "-o", "json", "-n", "shop"],
        "",
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let objects = &report["initializers"][0]["objects"];
    let outcomes: Vec<&str> = objects
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["outcome"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(outcomes, ["Changed", "NotMatched", "NotMatched"]);
    assert_eq!(objects[0]["patch"][0]["op"], "add");
    assert_eq!(
        objects[2]["object"], "Service/shop/web",
        "-n sets the namespace"
    );

    let piped = run(
        dir.path(),
        &[
            "diff",
            "-f",
            "initializer.yaml",
            "-f",
            "-",
            "--namespace-labels",
            "team=web",
        ],
        APP,
    )
    .unwrap();
    assert_eq!(piped.status.code(), Some(0), "{}", show(&piped));
    assert_says(&piped.stdout, "Deployment/apps/web: changed", &piped);
    assert_says(
        &piped.stdout,
        "namespace apps has the labels {kubernetes.io/metadata.name=apps, team=web}",
        &piped,
    );
}

#[test]
fn diff_of_custom_code_exits_3_and_bad_input_exits_1_or_2() {
    let dir = files().unwrap();
    let custom = run(dir.path(), &["diff", "custom.yaml", "app.yaml"], "").unwrap();
    assert_eq!(custom.status.code(), Some(3), "{}", show(&custom));
    assert_says(
        &custom.stdout,
        "Deployment/apps/web: matched; the change cannot be known offline",
        &custom,
    );
    assert_says(&custom.stdout, "Service/default/web: not matched", &custom);
    let stderr = String::from_utf8_lossy(&custom.stderr);
    assert!(
        stderr.starts_with("error: failed to know the change to 2 object(s) offline"),
        "{}",
        show(&custom)
    );

    let no_initializer = run(dir.path(), &["diff", "app.yaml"], "").unwrap();
    assert_eq!(
        no_initializer.status.code(),
        Some(1),
        "{}",
        show(&no_initializer)
    );
    assert_says(&no_initializer.stderr, "no Initializer", &no_initializer);
    let missing = run(
        dir.path(),
        &["diff", "initializer.yaml", "nowhere.yaml"],
        "",
    )
    .unwrap();
    assert_eq!(missing.status.code(), Some(1), "{}", show(&missing));
    assert_says(&missing.stderr, "nowhere.yaml", &missing);
    let malformed = run(dir.path(), &["diff"], "").unwrap();
    assert_eq!(malformed.status.code(), Some(2), "{}", show(&malformed));
}
