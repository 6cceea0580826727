//! `kubectl initializer` against the operator installed from its bundle (the e2e crate's
//! [`Env`]), on the sandbox (`::on_sandbox`) and on the real control plane built from the
//! Kubernetes Go modules (`::on_real`, which needs root: ignored unless asked for, `make
//! unit-real` runs it). One body exercises every subcommand, checks each `why` verdict against
//! what the API server actually did to the same object, and feeds every subcommand bad input. The
//! binaries must be built first (`cargo build --workspace --bins`).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, ensure};
use initializer_crds::Initializer;
use initializer_crds::constants::BREAK_GLASS_ANNOTATION;
use initializer_e2e::env::Env;
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::ops;
use initializer_e2e::scope::Scope;
use initializer_e2e::target::TargetChoice;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const REGISTER_TIMEOUT: Duration = Duration::from_secs(120);

/// The plugin binary cargo built for this test.
fn plugin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kubectl-initializer"))
}

/// Runs the plugin with `KUBECONFIG` pointing at the target (as kubectl users set it).
async fn run(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<Output> {
    tokio::process::Command::new(plugin())
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("HOME")
        .output()
        .await
        .with_context(|| format!("failed to run kubectl-initializer {args:?}"))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs the plugin and requires success; returns stdout.
async fn ok(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = run(kubeconfig, args).await?;
    ensure!(
        output.status.success(),
        "kubectl-initializer {args:?} failed ({}): {}{}",
        output.status,
        stdout(&output),
        stderr(&output)
    );
    Ok(stdout(&output))
}

/// Runs the plugin and requires exit code 1 with `expected` on stderr and nothing on stdout.
async fn refused(kubeconfig: &Path, args: &[&str], expected: &str) -> anyhow::Result<()> {
    let output = run(kubeconfig, args).await?;
    ensure!(
        output.status.code() == Some(1),
        "kubectl-initializer {args:?} should exit 1, got {}: {}{}",
        output.status,
        stdout(&output),
        stderr(&output)
    );
    ensure!(
        stderr(&output).contains(expected),
        "kubectl-initializer {args:?}: stderr should say {expected:?}: {}",
        stderr(&output)
    );
    Ok(())
}

fn json_of(text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).with_context(|| format!("failed to parse the plugin's JSON: {text}"))
}

/// The verdict for Initializer `name` in a `why -o json` report.
fn verdict<'a>(report: &'a Value, name: &str) -> anyhow::Result<&'a Value> {
    report["verdicts"]
        .as_array()
        .and_then(|all| all.iter().find(|v| v["initializer"] == name))
        .with_context(|| format!("no verdict for {name} in {report}"))
}

fn expect_kinds(actual: Vec<String>, expected: &[&str]) -> anyhow::Result<()> {
    ensure!(
        actual == expected,
        "expected reasons {expected:?}, got {actual:?}"
    );
    Ok(())
}

fn reason_kinds(verdict: &Value) -> Vec<String> {
    verdict["reasons"]
        .as_array()
        .map(|reasons| {
            reasons
                .iter()
                .filter_map(|r| r["kind"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

async fn create_nginx(
    env: &Env,
    namespace: &str,
    name: &str,
    annotated: bool,
) -> anyhow::Result<Deployment> {
    let deployment = fixtures::nginx_deployment(name, annotated, 1)?;
    Api::<Deployment>::namespaced(env.client(), namespace)
        .create(&PostParams::default(), &deployment)
        .await
        .with_context(|| format!("failed to create Deployment {namespace}/{name}"))
}

/// `why deployment/NAME -n NS -o json` for `initializer`, checked against what the API server
/// did to the same object: intercepted exactly when the sidecar was injected.
async fn why_agrees(
    kubeconfig: &Path,
    deployment: &Deployment,
    initializer: &str,
) -> anyhow::Result<Vec<String>> {
    let namespace = deployment.namespace().unwrap_or_default();
    let target = format!("deployment/{}", deployment.name_any());
    let report = json_of(
        &ok(
            kubeconfig,
            &["why", &target, "-n", &namespace, "-o", "json"],
        )
        .await?,
    )?;
    let verdict = verdict(&report, initializer)?;
    let injected = fixtures::has_sidecar(deployment);
    ensure!(
        verdict["intercepted"] == injected,
        "why says intercepted={} for {namespace}/{target}, but the API server {} it: {verdict}",
        verdict["intercepted"],
        if injected {
            "injected"
        } else {
            "did not inject"
        }
    );
    Ok(reason_kinds(verdict))
}

/// Every subcommand, as a user runs it against a registered sidecar initializer.
async fn every_subcommand(env: &Env, scope: &Scope) -> anyhow::Result<()> {
    let kubeconfig = env.kubeconfig_path().to_path_buf();
    let kc = kubeconfig.as_path();
    let client = env.client();
    let workload = scope
        .workload_namespace("work", &env.operator_namespace)
        .await?;
    let target = scope.target_namespace("apps").await?;
    let outside = scope.outside_namespace("other").await?;
    let name = scope.name("sidecar");
    let sidecar = fixtures::sidecar_initializer(
        &name,
        &workload,
        &scope.target_selector(),
        Health::default(),
    )?;
    scope.create_initializer(&sidecar).await?;
    ops::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;

    // status: the table and JSON, from the status the operator wrote.
    let table = ok(kc, &["status"]).await?;
    let line = table
        .lines()
        .find(|l| l.starts_with(&name))
        .with_context(|| format!("no row for {name}: {table}"))?;
    ensure!(table.starts_with("NAME "), "{table}");
    for cell in ["Registered", "true", "Responding", " in "] {
        ensure!(line.contains(cell), "status row lacks {cell:?}: {table}");
    }
    let status = json_of(&ok(kc, &["status", &name, "-o", "json"]).await?)?;
    let row = &status["items"][0];
    ensure!(
        row["name"] == name.as_str() && row["registered"] == true,
        "{status}"
    );
    ensure!(row["certificateNotAfter"].is_string(), "{status}");
    ensure!(row["configuration"].is_string(), "{status}");
    let yaml = ok(kc, &["status", &name, "-o", "yaml"]).await?;
    ensure!(yaml.contains(&format!("name: {name}")), "{yaml}");

    // probe: one answer now, through the API server's service proxy.
    let probe = ok(kc, &["probe", &name]).await?;
    eprintln!("$ kubectl initializer status\n{table}$ kubectl initializer probe {name}\n{probe}");
    ensure!(
        probe.contains(&format!("probe {name}: answered in ")),
        "{probe}"
    );
    ensure!(probe.contains("/proxy/initialize"), "{probe}");
    let probe = json_of(&ok(kc, &["probe", &name, "-o", "json"]).await?)?;
    ensure!(probe["ok"] == true && probe["allowed"] == true, "{probe}");
    ensure!(probe["latencyMillis"].is_u64(), "{probe}");
    ensure!(probe["target"]["namespace"] == workload.as_str(), "{probe}");

    // why: each verdict agrees with what the API server did to the same Deployment.
    let injected = create_nginx(env, &target, "injected", true).await?;
    ensure!(
        fixtures::has_sidecar(&injected),
        "the annotated Deployment was not injected"
    );
    expect_kinds(why_agrees(kc, &injected, &name).await?, &[])?;
    let plain = create_nginx(env, &target, "plain", false).await?;
    expect_kinds(why_agrees(kc, &plain, &name).await?, &["AnnotationGate"])?;
    let elsewhere = create_nginx(env, &outside, "elsewhere", true).await?;
    expect_kinds(
        why_agrees(kc, &elsewhere, &name).await?,
        &["NamespaceSelector"],
    )?;
    // The workload namespace matches the user's selector too: only the mandatory exclusion keeps
    // the initializer from intercepting its own namespace.
    let (key, value) = scope.target_selector();
    Api::<Namespace>::all(client.clone())
        .patch(
            &workload,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
        )
        .await
        .context("failed to label the workload namespace as a target")?;
    let own = create_nginx(env, &workload, "own", true).await?;
    expect_kinds(why_agrees(kc, &own, &name).await?, &["MandatoryExclusion"])?;
    let text = ok(kc, &["why", "deploy/plain", "-n", &target]).await?;
    ensure!(text.contains(&format!("{name}: NOT INTERCEPTED")), "{text}");
    ensure!(text.contains("AnnotationGate: "), "{text}");

    // why -f: objects as they would be created, without creating them.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("objects.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: s, namespace: {target}}}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  labels: {{app: x}}\n  \
             annotations: {{{}: \"true\"}}\nspec: {{selector: {{matchLabels: {{app: x}}}}, template: \
             {{metadata: {{labels: {{app: x}}}}, spec: {{containers: [{{name: c, image: x}}]}}}}}}\n",
            fixtures::SIDECAR_ANNOTATION
        ),
    )?;
    let file_arg = file.display().to_string();
    let reports = json_of(&ok(kc, &["why", "-f", &file_arg, "-n", &target, "-o", "json"]).await?)?;
    let secret = verdict(&reports[0], &name)?;
    ensure!(reason_kinds(secret) == ["Rule"], "{reports}");
    let deployment = verdict(&reports[1], &name)?;
    ensure!(deployment["intercepted"] == true, "{reports}");
    let delete = json_of(
        &ok(
            kc,
            &[
                "why",
                "-f",
                &file_arg,
                "-n",
                &target,
                "--operation",
                "DELETE",
                "-o",
                "json",
            ],
        )
        .await?,
    )?;
    ensure!(
        reason_kinds(verdict(&delete[1], &name)?) == ["Rule"],
        "{delete}"
    );

    // suspend: the break-glass annotation, applied with a field manager of its own.
    let suspended = ok(kc, &["suspend", &name, "--wait", "--reason", "drill"]).await?;
    ensure!(
        suspended.contains(&format!("initializer.initializer.dev/{name} suspended")),
        "{suspended}"
    );
    ensure!(
        ops::configurations_of(&client, &name).await?.is_empty(),
        "still registered after suspend"
    );
    let initializers = Api::<Initializer>::all(client.clone());
    let live = initializers.get(&name).await?;
    ensure!(
        live.annotations()
            .get(BREAK_GLASS_ANNOTATION)
            .map(String::as_str)
            == Some("drill"),
        "the break-glass annotation was not set: {:?}",
        live.annotations()
    );
    ensure!(!live.spec.suspend, "spec.suspend was set");
    ensure!(
        live.managed_fields().iter().any(|f| {
            f.manager.as_deref() == Some("kubectl-initializer")
                && f.operation.as_deref() == Some("Apply")
        }),
        "no applied managedFields entry for kubectl-initializer: {:?}",
        live.managed_fields()
    );
    // A GitOps tool syncs the manifest from Git, which states `suspend: false`, by server-side
    // apply with force: the break-glass is not its field, so it stays, and so does the suspension.
    let mut manifest = serde_json::to_value(&sidecar)?;
    manifest["spec"]["suspend"] = json!(false);
    initializers
        .patch(
            &name,
            &PatchParams::apply("gitops-sync").force(),
            &Patch::Apply(&manifest),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let live = initializers.get(&name).await?;
    ensure!(
        live.annotations().contains_key(BREAK_GLASS_ANNOTATION),
        "a forced apply of the manifest removed the break-glass annotation: {:?}",
        live.annotations()
    );
    ensure!(
        ops::configurations_of(&client, &name).await?.is_empty(),
        "registered again after a forced apply of the manifest"
    );
    let status = json_of(&ok(kc, &["status", &name, "-o", "json"]).await?)?;
    ensure!(status["items"][0]["phase"] == "Suspended", "{status}");
    let report = json_of(
        &ok(
            kc,
            &["why", "deployment/injected", "-n", &target, "-o", "json"],
        )
        .await?,
    )?;
    let unregistered = verdict(&report, &name)?;
    ensure!(reason_kinds(unregistered) == ["NotRegistered"], "{report}");
    ensure!(unregistered["onceRegistered"] == true, "{report}");
    let text = ok(kc, &["why", "deployment/injected", "-n", &target]).await?;
    ensure!(text.contains("would be once registered again"), "{text}");
    ensure!(
        text.contains("the break-glass annotation initializer.dev/break-glass is set"),
        "{text}"
    );
    // Suspended, the workload still runs: probe finds the Service the operator deploys.
    let probe = json_of(&ok(kc, &["probe", &name, "-o", "json"]).await?)?;
    ensure!(probe["ok"] == true, "probe while suspended: {probe}");
    ensure!(probe["target"]["namespace"] == workload.as_str(), "{probe}");
    let again = ok(kc, &["suspend", &name]).await?;
    ensure!(again.contains("unchanged"), "{again}");

    // resume: registered again once it answers.
    let resumed = ok(kc, &["resume", &name, "--wait", "--timeout", "120s"]).await?;
    ensure!(resumed.contains("resumed"), "{resumed}");
    ensure!(
        !ops::configurations_of(&client, &name).await?.is_empty(),
        "not registered after resume"
    );

    // Bad input: unknown Initializers and objects say so and exit 1.
    let unknown = "no-such-initializer";
    let missing = format!("failed to find Initializer {unknown:?}");
    refused(kc, &["status", unknown], &missing).await?;
    refused(kc, &["probe", unknown], &missing).await?;
    refused(kc, &["suspend", unknown], &missing).await?;
    refused(kc, &["resume", unknown], &missing).await?;
    refused(
        kc,
        &["why", "deployment/absent", "-n", &target],
        "failed to find deployments \"absent\"",
    )
    .await?;
    refused(
        kc,
        &["why", "widgets/x"],
        "failed to find a resource type \"widgets\"",
    )
    .await?;
    refused(kc, &["why", "nginx"], "is not KIND/NAME").await?;
    refused(kc, &["why"], "give the object as KIND/NAME or with -f FILE").await?;
    let widget = dir.path().join("widget.yaml");
    std::fs::write(
        &widget,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
    )?;
    refused(
        kc,
        &["why", "-f", &widget.display().to_string()],
        "failed to find a resource type",
    )
    .await?;
    refused(
        kc,
        &["why", "-f", "/nonexistent.yaml"],
        "failed to read the input",
    )
    .await?;
    let elsewhere_ns = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "no-such-namespace"}});
    let cm = dir.path().join("cm.json");
    std::fs::write(&cm, elsewhere_ns.to_string())?;
    refused(
        kc,
        &["why", "-f", &cm.display().to_string()],
        "failed to find namespace \"no-such-namespace\"",
    )
    .await?;
    refused(
        kc,
        &["status", "--context", "no-such-context"],
        "failed to load the kubeconfig",
    )
    .await?;

    // kubectl finds the plugin on PATH and runs it for `kubectl initializer`.
    let bin_dir = plugin()
        .parent()
        .map(Path::to_path_buf)
        .context("the plugin binary has no directory")?;
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = tokio::process::Command::new("kubectl")
        .args(["initializer", "status", &name, "--kubeconfig"])
        .arg(kc)
        .env("PATH", &path)
        .output()
        .await
        .context("failed to run kubectl (kubectl 1.32 is expected on PATH)")?;
    ensure!(
        output.status.success() && stdout(&output).contains(&name),
        "kubectl initializer status failed ({}): {}{}",
        output.status,
        stdout(&output),
        stderr(&output)
    );
    // The transcript for the book (`docs/src/guides/kubectl-plugin.md`): through kubectl, an
    // object that was not injected.
    for (object, namespace) in [
        ("deployment/plain", &target),
        ("deployment/elsewhere", &outside),
    ] {
        let output = tokio::process::Command::new("kubectl")
            .args([
                "initializer",
                "why",
                object,
                "-n",
                namespace,
                "--kubeconfig",
            ])
            .arg(kc)
            .env("PATH", &path)
            .output()
            .await
            .context("failed to run kubectl")?;
        ensure!(
            output.status.success(),
            "kubectl initializer why: {}",
            stderr(&output)
        );
        ensure!(
            stdout(&output).contains("NOT INTERCEPTED"),
            "{}",
            stdout(&output)
        );
        eprintln!(
            "$ kubectl initializer why {object} -n {namespace}\n{}",
            stdout(&output)
        );
    }
    preset_verdicts(env, scope, &workload, &target).await
}

/// The injected container of the preset Initializer of [`preset_verdicts`].
const PRESET_CONTAINER: &str = "preset-nginx";

/// A preset Initializer in the cluster: `why -f` explains its compiled policy's match, and
/// `diff` predicts offline what the API server then does to the same objects (the preset
/// webhook is the engine): each object's policy verdict and diff outcome agree with whether
/// creating it injected the preset's container.
async fn preset_verdicts(
    env: &Env,
    scope: &Scope,
    workload: &str,
    target: &str,
) -> anyhow::Result<()> {
    let kc = env.kubeconfig_path();
    let client = env.client();
    let name = scope.name("preset");
    let mut value = serde_json::to_value(fixtures::sidecar_initializer(
        &name,
        workload,
        &scope.target_selector(),
        Health::default(),
    )?)?;
    let spec = value["spec"]
        .as_object_mut()
        .context("the fixture has no spec")?;
    spec.remove("image");
    spec.remove("config");
    spec.insert(
        "preset".to_string(),
        json!({
            "selector": {"labels": {"matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["batch"]}
            ]}},
            "inject": {"containers": [
                {"name": PRESET_CONTAINER, "image": "nginx:1.8.1", "imagePullPolicy": "IfNotPresent"}
            ]}
        }),
    );
    let preset: Initializer = serde_json::from_value(value)?;
    scope.create_initializer(&preset).await?;
    ops::wait_registered(&client, &name, REGISTER_TIMEOUT).await?;

    let deployment = |object: &str, labels: Value, annotated: bool| {
        let annotations = if annotated {
            json!({fixtures::SIDECAR_ANNOTATION: "true"})
        } else {
            json!({})
        };
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": object, "namespace": target, "labels": labels, "annotations": annotations},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": object}},
                "template": {"metadata": {"labels": {"app": object}},
                             "spec": {"containers": [{"name": "app", "image": "nginx:1.8.1"}]}}
            }
        })
    };
    // Each object with the matchCondition that fails for it, if any.
    let cases = [
        (deployment("preset-on", json!({"app": "on"}), true), None),
        (
            deployment("preset-batch", json!({"tier": "batch"}), true),
            Some("preset-labels"),
        ),
        (
            deployment("preset-plain", json!({"app": "plain"}), false),
            Some("initializer-annotation-gate"),
        ),
    ];
    let dir = tempfile::tempdir()?;
    let objects = dir.path().join("objects.json");
    let list = json!({"apiVersion": "v1", "kind": "List",
                      "items": cases.iter().map(|(o, _)| o.clone()).collect::<Vec<_>>()});
    std::fs::write(&objects, list.to_string())?;
    let objects_arg = objects.display().to_string();
    let initializer_file = dir.path().join("initializer.yaml");
    std::fs::write(&initializer_file, serde_saphyr::to_string(&preset)?)?;
    let initializer_arg = initializer_file.display().to_string();

    let reports = json_of(&ok(kc, &["why", "-f", &objects_arg, "-o", "json"]).await?)?;
    let (key, label) = scope.target_selector();
    let offline = json_of(
        &ok(
            kc,
            &[
                "diff",
                "-f",
                &initializer_arg,
                "-f",
                &objects_arg,
                "--operator-namespace",
                &env.operator_namespace,
                "--namespace-labels",
                &format!("{key}={label}"),
                "-o",
                "json",
            ],
        )
        .await?,
    )?;
    for (i, (object, failing)) in cases.iter().enumerate() {
        let object_name = object["metadata"]["name"].as_str().unwrap_or_default();
        let policy = &verdict(&reports[i], &name)?["policy"]["compiled"];
        let false_conditions: Vec<&str> = policy["conditions"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter(|c| c["holds"] == false)
                    .filter_map(|c| c["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        ensure!(
            false_conditions == failing.iter().copied().collect::<Vec<_>>(),
            "why -f {object_name}: false matchConditions {false_conditions:?}, expected {failing:?}: {policy}"
        );
        let outcome = &offline["initializers"][0]["objects"][i]["outcome"];
        let created = Api::<Deployment>::namespaced(client.clone(), target)
            .create(
                &PostParams::default(),
                &serde_json::from_value(object.clone())?,
            )
            .await
            .with_context(|| format!("failed to create Deployment {target}/{object_name}"))?;
        let injected = fixtures::template_containers(&created)
            .iter()
            .any(|c| c == PRESET_CONTAINER);
        ensure!(
            policy["mutates"] == injected,
            "why -f says the policy mutates={} {object_name}, but the webhook {} it: {policy}",
            policy["mutates"],
            if injected { "injected" } else { "left" }
        );
        ensure!(
            *outcome == if injected { "Changed" } else { "NotMatched" },
            "diff says {outcome} for {object_name}, but the webhook injected={injected}: {offline}"
        );
    }
    let text = ok(kc, &["why", "-f", &objects_arg]).await?;
    ensure!(
        text.contains(&format!(
            "compiled policy initializer-{name}-preset (MutatingAdmissionPolicy from spec.preset): WOULD MUTATE"
        )),
        "{text}"
    );
    ensure!(
        text.contains("matchCondition preset-labels is false: spec.preset.selector.labels requires tier notin (batch)"),
        "{text}"
    );
    eprintln!("$ kubectl initializer why -f objects.json\n{text}");
    Ok(())
}

/// Starts the target with the operator installed, runs the body, cleans up whatever happened.
async fn on(choice: TargetChoice) -> anyhow::Result<()> {
    let env = Env::start_with(choice).await?;
    let scope = Scope::new(env.client(), "plugin");
    let result = every_subcommand(&env, &scope).await;
    let warnings = scope.cleanup().await;
    env.shutdown().await;
    result?;
    ensure!(warnings.is_empty(), "cleanup: {warnings:?}");
    Ok(())
}

mod every_subcommand_answers_as_the_cluster_behaves {
    use super::on;
    use initializer_e2e::target::TargetChoice;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_sandbox() -> anyhow::Result<()> {
        on(TargetChoice::Sandbox).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs root and the real control plane: make unit-real, or cargo test -p kubectl-initializer --test targets -- --ignored"]
    async fn on_real() -> anyhow::Result<()> {
        on(TargetChoice::Real).await
    }
}

/// kubectl discovers the plugin on PATH (no cluster needed).
#[test]
fn kubectl_lists_and_runs_the_plugin_from_path() {
    let bin_dir = plugin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let list = std::process::Command::new("kubectl")
        .args(["plugin", "list", "--name-only"])
        .env("PATH", &path)
        .output()
        .expect("kubectl runs");
    let names = String::from_utf8_lossy(&list.stdout);
    assert!(
        names.lines().any(|l| l.trim() == "kubectl-initializer"),
        "kubectl plugin list: {names}{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let help = std::process::Command::new("kubectl")
        .args(["initializer", "probe", "--help"])
        .env("PATH", &path)
        .output()
        .expect("kubectl runs");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Usage: kubectl initializer probe"), "{help}");
    assert!(help.contains("service proxy"), "{help}");
}
