//! The real `kubectl` (1.32 here): server-side apply, conflicts, printer columns, create, get,
//! delete, patch, scale, wait, dry run, discovery.

use initializer_e2e::conformance::Scoped;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::support::{merge_status, widget_resource};
use crate::target::{Target, crd_resource};

/// The Widget CRD as YAML, in the body's group, with a short name of its own.
fn crd_yaml(t: &Target) -> String {
    format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, shortNames: [{short}]}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    additionalPrinterColumns:
    - {{name: Size, type: integer, jsonPath: .spec.size}}
    - {{name: Phase, type: string, jsonPath: .status.phase}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer, default: 3}}
              color: {{type: string}}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#,
        group = t.group(),
        short = short_name(t),
    )
}

fn short_name(t: &Target) -> String {
    t.unique("wd").replace('-', "")
}

fn widget_yaml(t: &Target) -> String {
    format!(
        "apiVersion: {}/v1\nkind: Widget\nmetadata: {{name: w1}}\nspec: {{color: red}}\n",
        t.group()
    )
}

async fn install_crd_with_kubectl(t: &Target) -> anyhow::Result<()> {
    let name = format!("widgets.{}", t.group());
    t.delete_afterwards(crd_resource(), &name);
    t.kubectl_ok(&["apply", "--server-side", "-f", "-"], Some(&crd_yaml(t)))
        .await?;
    t.kubectl_ok(
        &[
            "wait",
            "--for",
            "condition=established",
            &format!("crd/{name}"),
            "--timeout=30s",
        ],
        None,
    )
    .await?;
    Ok(())
}

pub async fn kubectl_applies_server_side_and_gets_crd_printer_columns(
    t: &Target,
) -> anyhow::Result<()> {
    install_crd_with_kubectl(t).await?;
    let out = t
        .kubectl_ns(
            &["apply", "--server-side", "-f", "-"],
            Some(&widget_yaml(t)),
        )
        .await?;
    assert!(
        out.contains(&format!("widget.{}/w1 serverside-applied", t.group())),
        "{out}"
    );
    let api: Api<DynamicObject> = Api::namespaced_with(
        t.client(),
        t.namespace(),
        &widget_resource(&t.group(), "v1"),
    );
    merge_status(&api, "w1", json!({"status": {"phase": "Ready"}})).await?;
    let table = t.kubectl_ns(&["get", &short_name(t)], None).await?;
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], vec!["NAME", "SIZE", "PHASE"], "{table}");
    assert_eq!(&lines[1][..3], &["w1", "3", "Ready"], "{table}");
    Ok(())
}

pub async fn kubectl_server_side_apply_reports_conflicts_and_forces_them(
    t: &Target,
) -> anyhow::Result<()> {
    let cm = |v: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {{k: \"{v}\"}}\n")
    };
    let ns = t.namespace();
    // `kubectl apply --server-side` of stdin as `manager`, forcing conflicts when `force`.
    let apply = |manager: &'static str, force: bool| {
        let mut args = vec![
            "-n",
            ns,
            "apply",
            "--server-side",
            "--field-manager",
            manager,
        ];
        if force {
            args.push("--force-conflicts");
        }
        args.extend(["-f", "-"]);
        args
    };
    t.kubectl_ok(&apply("one", false), Some(&cm("1"))).await?;
    let (success, _, err) = t.kubectl(&apply("two", false), Some(&cm("2"))).await?;
    assert!(!success);
    assert!(
        err.contains("Apply failed with 1 conflict: conflict with \"one\": .data.k"),
        "{err}"
    );
    t.kubectl_ok(&apply("two", true), Some(&cm("2"))).await?;
    assert_eq!(
        t.kubectl_ns(&["get", "cm", "c", "-o", "jsonpath={.data.k}"], None)
            .await?,
        "2"
    );
    Ok(())
}

pub async fn kubectl_creates_gets_and_deletes(t: &Target) -> anyhow::Result<()> {
    let team = t.unique("team");
    t.delete_afterwards(crate::target::namespace_resource(), &team);
    t.kubectl_ok(&["create", "namespace", &team], None).await?;
    t.kubectl_ok(
        &[
            "-n",
            &team,
            "create",
            "configmap",
            "settings",
            "--from-literal=a=b",
        ],
        None,
    )
    .await?;
    let table = t
        .kubectl_ok(&["-n", &team, "get", "configmaps"], None)
        .await?;
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.lines().any(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.len() == 3 && cells[0] == "settings" && cells[1] == "1"
        }),
        "{table}"
    );
    let json_out = t
        .kubectl_ok(
            &["-n", &team, "get", "configmap", "settings", "-o", "json"],
            None,
        )
        .await?;
    let v: Value = serde_json::from_str(&json_out)?;
    assert_eq!(v["data"]["a"], "b");
    t.kubectl_ok(&["-n", &team, "delete", "configmap", "settings"], None)
        .await?;
    let (success, _, err) = t
        .kubectl(&["-n", &team, "get", "configmap", "settings"], None)
        .await?;
    assert!(!success && err.contains("NotFound"), "{err}");
    t.kubectl_ok(&["delete", "namespace", &team, "--timeout=60s"], None)
        .await?;
    let (success, _, _) = t.kubectl(&["get", "namespace", &team], None).await?;
    assert!(!success);
    Ok(())
}

pub async fn kubectl_patches_with_merge_json_and_strategic_and_scales(
    t: &Target,
) -> anyhow::Result<()> {
    t.kubectl_ns(
        &["create", "deployment", "web", "--image=example/web:1"],
        None,
    )
    .await?;
    let strategic = r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","env":[{"name":"MODE","value":"x"}]}]}}}}"#;
    for (patch_type, patch) in [
        ("--type=merge", r#"{"metadata":{"labels":{"tier":"fe"}}}"#),
        (
            "--type=json",
            r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
        ),
        ("--type=strategic", strategic),
    ] {
        t.kubectl_ns(
            &["patch", "deployment", "web", patch_type, "-p", patch],
            None,
        )
        .await?;
    }
    let out = t
        .kubectl_ns(&["get", "deployment", "web", "-o", "json"], None)
        .await?;
    let d: Value = serde_json::from_str(&out)?;
    assert_eq!(d["metadata"]["labels"]["tier"], "fe");
    assert_eq!(d["spec"]["replicas"], 3);
    let containers = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0]["image"], "example/web:1");
    assert_eq!(containers[0]["env"][0]["name"], "MODE");
    assert_eq!(d["metadata"]["generation"], 3);
    t.kubectl_ns(&["scale", "deployment", "web", "--replicas=0"], None)
        .await?;
    let replicas = t
        .kubectl_ns(
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
            None,
        )
        .await?;
    assert_eq!(replicas, "0");
    let table = t.kubectl_ns(&["get", "deployments"], None).await?;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    );
    Ok(())
}

pub async fn kubectl_waits_for_a_condition_set_later(t: &Target) -> anyhow::Result<()> {
    install_crd_with_kubectl(t).await?;
    t.kubectl_ns(
        &["apply", "--server-side", "-f", "-"],
        Some(&widget_yaml(t)),
    )
    .await?;
    let resource = format!("widgets.{}/w1", t.group());
    let args = ["wait", "--for=condition=Ready", &resource, "--timeout=30s"];
    let waiter = t.kubectl_ns(&args, None);
    let setter = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let api: Api<DynamicObject> = Api::namespaced_with(
            t.client(),
            t.namespace(),
            &widget_resource(&t.group(), "v1"),
        );
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Done", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        merge_status(&api, "w1", status).await
    };
    let (out, set) = tokio::join!(waiter, setter);
    set?;
    assert!(out?.contains("condition met"));
    Ok(())
}

pub async fn kubectl_create_dry_run_server_stores_nothing(t: &Target) -> anyhow::Result<()> {
    let out = t
        .kubectl_ns(
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
        .await?;
    let v: Value = serde_json::from_str(&out)?;
    assert_eq!(v["data"]["a"], "b");
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), t.namespace());
    assert!(cms.get_opt("dry").await?.is_none());
    Ok(())
}

pub async fn kubectl_lists_api_resources_from_discovery(t: &Target) -> anyhow::Result<()> {
    let out = t.kubectl_ok(&["api-resources"], None).await?;
    for name in [
        "deployments",
        "mutatingwebhookconfigurations",
        "customresourcedefinitions",
        "leases",
        "endpointslices",
        "events",
    ] {
        assert!(out.contains(name), "{name} missing from\n{out}");
    }
    let version = t.kubectl_ok(&["version", "-o", "json"], None).await?;
    let v: Value = serde_json::from_str(&version)?;
    assert_eq!(v["serverVersion"]["major"], "1");
    Ok(())
}
