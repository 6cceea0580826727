//! The sandbox driven by the real `kubectl` binary. Ignored (with the reason) when the build found
//! no `kubectl` on PATH; see `build.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api_support;

use api_support::{TestSandbox, start};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// Runs kubectl against the sandbox with a private discovery cache; returns (success, stdout, stderr).
async fn kubectl(sb: &TestSandbox, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let cache = sb.dir.path().join("kubectl-cache");
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(sb.handle.kubeconfig_path())
        .arg("--cache-dir")
        .arg(&cache)
        .args(args);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .expect("kubectl must be on PATH (build.rs found it there)");
    if let Some(text) = stdin {
        use tokio::io::AsyncWriteExt;
        let mut input = child.stdin.take().unwrap();
        input.write_all(text.as_bytes()).await.unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().await.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn ok(sb: &TestSandbox, args: &[&str], stdin: Option<&str>) -> String {
    let (success, out, err) = kubectl(sb, args, stdin).await;
    assert!(
        success,
        "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    out
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.dev
spec:
  group: example.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, default: 3}
              color: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#;

const WIDGET: &str = r#"
apiVersion: example.dev/v1
kind: Widget
metadata: {name: w1}
spec: {color: red}
"#;

#[tokio::test]
#[cfg_attr(not(has_kubectl), ignore = "kubectl not installed")]
async fn kubectl_applies_server_side_and_gets_crd_printer_columns() {
    let sb = start().await;
    ok(&sb, &["apply", "--server-side", "-f", "-"], Some(CRD)).await;
    ok(
        &sb,
        &[
            "wait",
            "--for",
            "condition=established",
            "crd/widgets.example.dev",
            "--timeout=10s",
        ],
        None,
    )
    .await;
    let out = ok(&sb, &["apply", "--server-side", "-f", "-"], Some(WIDGET)).await;
    assert!(
        out.contains("widget.example.dev/w1 serverside-applied"),
        "{out}"
    );
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        sb.client(),
        "default",
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("example.dev", "v1", "Widget"),
            "widgets",
        ),
    );
    api.patch_status(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Ready"}})),
    )
    .await
    .unwrap();
    let table = ok(&sb, &["get", "wd"], None).await;
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], vec!["NAME", "SIZE", "PHASE", "AGE"], "{table}");
    assert_eq!(&lines[1][..3], &["w1", "3", "Ready"], "{table}");
}

#[tokio::test]
#[cfg_attr(not(has_kubectl), ignore = "kubectl not installed")]
async fn kubectl_server_side_apply_reports_conflicts_and_forces_them() {
    let sb = start().await;
    let cm = |v: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {{k: \"{v}\"}}\n")
    };
    ok(
        &sb,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "one",
            "-f",
            "-",
        ],
        Some(&cm("1")),
    )
    .await;
    let (success, _, err) = kubectl(
        &sb,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "two",
            "-f",
            "-",
        ],
        Some(&cm("2")),
    )
    .await;
    assert!(!success);
    assert!(err.contains("conflict"), "{err}");
    ok(
        &sb,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "two",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&cm("2")),
    )
    .await;
    assert_eq!(
        ok(&sb, &["get", "cm", "c", "-o", "jsonpath={.data.k}"], None).await,
        "2"
    );
}

#[tokio::test]
#[cfg_attr(not(has_kubectl), ignore = "kubectl not installed")]
async fn kubectl_creates_gets_and_deletes() {
    let sb = start().await;
    ok(&sb, &["create", "namespace", "team"], None).await;
    ok(
        &sb,
        &[
            "-n",
            "team",
            "create",
            "configmap",
            "settings",
            "--from-literal=a=b",
        ],
        None,
    )
    .await;
    let table = ok(&sb, &["-n", "team", "get", "configmaps"], None).await;
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["settings", "1", l.split_whitespace().last().unwrap()]),
        "{table}"
    );
    let json_out = ok(
        &sb,
        &["-n", "team", "get", "configmap", "settings", "-o", "json"],
        None,
    )
    .await;
    let v: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(v["data"]["a"], "b");
    ok(
        &sb,
        &["-n", "team", "delete", "configmap", "settings"],
        None,
    )
    .await;
    let (success, _, err) =
        kubectl(&sb, &["-n", "team", "get", "configmap", "settings"], None).await;
    assert!(!success && err.contains("NotFound"), "{err}");
    ok(&sb, &["delete", "namespace", "team", "--timeout=10s"], None).await;
    let (success, _, _) = kubectl(&sb, &["get", "namespace", "team"], None).await;
    assert!(!success);
}

#[tokio::test]
#[cfg_attr(not(has_kubectl), ignore = "kubectl not installed")]
async fn kubectl_patches_with_merge_json_and_strategic_and_scales() {
    let sb = start().await;
    ok(
        &sb,
        &["create", "deployment", "web", "--image=example/web:1"],
        None,
    )
    .await;
    ok(
        &sb,
        &[
            "patch",
            "deployment",
            "web",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"tier":"fe"}}}"#,
        ],
        None,
    )
    .await;
    ok(
        &sb,
        &[
            "patch",
            "deployment",
            "web",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
        ],
        None,
    )
    .await;
    let strategic = r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","env":[{"name":"MODE","value":"x"}]}]}}}}"#;
    ok(
        &sb,
        &[
            "patch",
            "deployment",
            "web",
            "--type=strategic",
            "-p",
            strategic,
        ],
        None,
    )
    .await;
    let out = ok(&sb, &["get", "deployment", "web", "-o", "json"], None).await;
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["metadata"]["labels"]["tier"], "fe");
    assert_eq!(d["spec"]["replicas"], 3);
    let containers = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0]["image"], "example/web:1");
    assert_eq!(containers[0]["env"][0]["name"], "MODE");
    assert_eq!(d["metadata"]["generation"], 3);
    ok(&sb, &["scale", "deployment", "web", "--replicas=5"], None).await;
    let replicas = ok(
        &sb,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        None,
    )
    .await;
    assert_eq!(replicas, "5");
    let table = ok(&sb, &["get", "deployments"], None).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    );
}

#[tokio::test]
#[cfg_attr(not(has_kubectl), ignore = "kubectl not installed")]
async fn kubectl_waits_for_a_condition_set_later() {
    let sb = start().await;
    ok(&sb, &["create", "configmap", "c"], None).await;
    ok(&sb, &["apply", "--server-side", "-f", "-"], Some(CRD)).await;
    ok(
        &sb,
        &[
            "wait",
            "--for",
            "condition=established",
            "crd/widgets.example.dev",
            "--timeout=10s",
        ],
        None,
    )
    .await;
    ok(&sb, &["apply", "--server-side", "-f", "-"], Some(WIDGET)).await;
    let kubeconfig = sb.handle.kubeconfig_path().to_path_buf();
    let cache = sb.dir.path().join("kubectl-cache");
    let waiter = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(&cache)
        .args([
            "wait",
            "--for=condition=Ready",
            "widget/w1",
            "--timeout=20s",
        ])
        .output();
    let setter = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            sb.client(),
            "default",
            &kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk("example.dev", "v1", "Widget"),
                "widgets",
            ),
        );
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Done", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        api.patch_status("w1", &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
    };
    let (out, ()) = tokio::join!(waiter, setter);
    let out = out.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("condition met"));
}

#[tokio::test]
#[cfg_attr(not(has_kubectl), ignore = "kubectl not installed")]
async fn kubectl_create_dry_run_server_stores_nothing() {
    let sb = start().await;
    let out = ok(
        &sb,
        &[
            "create",
            "configmap",
            "dry",
            "--from-literal=a=b",
            "--dry-run=server",
            "-o",
            "json",
        ],
        None,
    )
    .await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"]["a"], "b");
    let cms: Api<ConfigMap> = Api::default_namespaced(sb.client());
    assert!(cms.get_opt("dry").await.unwrap().is_none());
}

#[tokio::test]
#[cfg_attr(not(has_kubectl), ignore = "kubectl not installed")]
async fn kubectl_lists_api_resources_from_discovery() {
    let sb = start().await;
    let out = ok(&sb, &["api-resources"], None).await;
    for name in [
        "deployments",
        "mutatingwebhookconfigurations",
        "customresourcedefinitions",
        "leases",
        "endpointslices",
    ] {
        assert!(out.contains(name), "{name} missing from\n{out}");
    }
    let version = ok(&sb, &["version", "-o", "json"], None).await;
    let v: Value = serde_json::from_str(&version).unwrap();
    assert_eq!(v["serverVersion"]["major"], "1");
}
