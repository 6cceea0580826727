//! The committed Helm chart is what the generator produces, and the real `helm` (built from
//! helm.sh/helm/v4 by `tools/helm/build.sh`) renders it, with its defaults, into exactly the
//! objects `install --bundle` applies; and values reach the objects they name. (That kube-apiserver
//! accepts every rendered object is `operator/tests/helm_dry_run.rs`, which has the clusters.)
//!
//! The tests that run helm need Go to build it: a plain `cargo test` lists them as ignored, and
//! `make unit-real` (which builds helm first) runs them.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use initializer_packaging::bundle::{self, chart};
use initializer_packaging::install;
use serde::Serialize;
use serde_json::{Value, json};

mod helm_support;

use helm_support::{NS, chart_dir, template};

const MONITORING_APIS: [&str; 2] = [
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
];

fn with_monitoring(extra: &[&str]) -> Vec<String> {
    MONITORING_APIS
        .iter()
        .flat_map(|api| ["--api-versions".to_string(), api.to_string()])
        .chain(extra.iter().map(|arg| arg.to_string()))
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == json!(kind) && o["metadata"]["name"] == json!(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered chart"))
}

/// The object without the labels that say who manages it (the installer's or Helm's).
fn unmanaged(mut object: Value) -> Value {
    if let Some(labels) = object
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        for key in [
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/version",
            "helm.sh/chart",
        ] {
            labels.remove(key);
        }
    }
    object
}

fn json(object: &impl Serialize) -> Value {
    unmanaged(serde_json::to_value(object).unwrap())
}

/// The value of the environment variable `name` of `container`, if set.
fn env_value(container: &Value, name: &str) -> Option<Value> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|var| var["name"] == json!(name))
        .map(|var| var["value"].clone())
}

fn key(object: &Value) -> (String, String) {
    (
        object["kind"].as_str().unwrap().to_string(),
        object["metadata"]["name"].as_str().unwrap().to_string(),
    )
}

#[test]
fn the_committed_chart_is_what_the_generator_produces() {
    let generated = chart::generate().unwrap();
    for (name, text) in &generated.files {
        let committed = std::fs::read_to_string(chart_dir().join(name)).unwrap_or_default();
        assert!(
            committed == *text,
            "{name} drifted: run `cargo run -p initializer-operator -- chart`"
        );
    }
    // Helm would create a CRD of `crds/` before any hook, ahead of the guard.
    assert!(
        !chart_dir().join("crds").exists(),
        "charts/initializer-operator/crds/ exists: the CRD is a template, created after the guard's hook"
    );
    for dir in chart::GENERATED_DIRS {
        for entry in std::fs::read_dir(chart_dir().join(dir)).unwrap() {
            let name = format!("{dir}/{}", entry.unwrap().file_name().to_string_lossy());
            assert!(
                generated.files.contains_key(&name),
                "{name} is not generated"
            );
        }
    }
}

#[test]
#[ignore = "needs helm built from its Go module (make helm): make unit-real, or cargo test -p initializer-packaging --test helm -- --ignored"]
fn helm_renders_the_defaults_into_the_objects_install_bundle_applies() {
    let plan = install::plan(&bundle::generate().unwrap(), NS).unwrap();
    let mut expected: Vec<Value> = Vec::new();
    expected.extend(plan.crds.iter().map(json).map(|mut crd| {
        crd["metadata"]["annotations"] = json!({chart::RESOURCE_POLICY_ANNOTATION: "keep"});
        crd
    }));
    expected.extend(plan.service_accounts.iter().map(json));
    expected.extend(plan.cluster_roles.iter().map(json));
    expected.extend(plan.cluster_role_bindings.iter().map(json));
    expected.extend(plan.roles.iter().map(json));
    expected.extend(plan.role_bindings.iter().map(json));
    expected.extend(plan.bundle_cluster_roles.iter().map(json));
    expected.extend(plan.deployments.iter().map(json));
    expected.extend(plan.pod_disruption_budgets.iter().map(json));
    expected.extend(plan.services.iter().map(json));
    expected.extend(plan.monitoring.iter().cloned().map(unmanaged));
    expected.sort_by_key(key);
    let args = with_monitoring(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The guard's pre-install hook is no object of the plan: the installer applies the guard
    // itself before the CRD.
    let mut rendered: Vec<Value> = template(&args)
        .unwrap()
        .into_iter()
        .filter(|object| object["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .map(unmanaged)
        .collect();
    rendered.sort_by_key(key);
    assert_eq!(rendered.len(), expected.len());
    for (rendered, expected) in rendered.iter().zip(&expected) {
        assert_eq!(rendered, expected, "{:?}", key(expected));
    }
}

#[test]
#[ignore = "needs helm built from its Go module (make helm): make unit-real, or cargo test -p initializer-packaging --test helm -- --ignored"]
fn every_object_carries_helms_labels_and_only_the_guard_hook_is_a_hook() {
    let objects = template(&[]).unwrap();
    let hooks: Vec<(String, String)> = objects
        .iter()
        .filter(|object| !object["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .map(key)
        .collect();
    let hook = |kind: &str| (kind.to_string(), chart::GUARD_HOOK_NAME.to_string());
    assert_eq!(
        hooks,
        [
            hook("ServiceAccount"),
            hook("ClusterRole"),
            hook("ClusterRoleBinding"),
            hook("Job")
        ]
    );
    for object in &objects {
        let labels = &object["metadata"]["labels"];
        assert_eq!(
            labels["app.kubernetes.io/managed-by"],
            json!("Helm"),
            "{object}"
        );
        assert_eq!(
            labels["app.kubernetes.io/instance"],
            json!("initializer-operator")
        );
    }
}

#[test]
#[ignore = "needs helm built from its Go module (make helm): make unit-real, or cargo test -p initializer-packaging --test helm -- --ignored"]
fn monitoring_objects_are_rendered_only_where_the_api_is_served_and_enabled() {
    let kinds = |objects: Vec<Value>| -> Vec<String> {
        objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap().to_string())
            .filter(|kind| kind == "ServiceMonitor" || kind == "PrometheusRule")
            .collect()
    };
    assert!(kinds(template(&[]).unwrap()).is_empty());
    let args = with_monitoring(&["--set", "metrics.serviceMonitor.enabled=false"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(kinds(template(&args).unwrap()), vec!["PrometheusRule"]);
}

#[test]
#[ignore = "needs helm built from its Go module (make helm): make unit-real, or cargo test -p initializer-packaging --test helm -- --ignored"]
fn a_digest_names_the_image_whatever_the_tag() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let args = [
        "--set".to_string(),
        format!(
            "image.tag=dev,image.digest={digest},presetImage.repository=r/p,presetImage.digest={digest}"
        ),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let objects = template(&args).unwrap();
    let deployment = find(&objects, "Deployment", "initializer-operator");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        json!(format!(
            "ghcr.io/initializer-dev/initializer-operator@{digest}"
        ))
    );
    assert_eq!(container["args"][2], json!(format!("r/p@{digest}")));
}

#[test]
#[ignore = "needs helm built from its Go module (make helm): make unit-real, or cargo test -p initializer-packaging --test helm -- --ignored"]
fn values_reach_the_objects_they_name() {
    let args = with_monitoring(&[
        "--set",
        "replicas=3,image.tag=dev,image.pullPolicy=Always,presetImage.repository=r/p,logFormat=json,logLevel=debug,metrics.port=9090,namespaceOverride=ops",
        "--set",
        "nodeSelector.disk=ssd,imagePullSecrets[0].name=regcred",
        "--set",
        "metrics.serviceMonitor.interval=1m,metrics.serviceMonitor.labels.release=prom",
        "--set",
        "metrics.prometheusRule.deregisteredFor=3m,metrics.prometheusRule.latencyBudgetRatio=0.5,metrics.prometheusRule.expiryWarningDays=7,metrics.prometheusRule.labels.team=hooks",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let objects = template(&args).unwrap();
    let deployment = find(&objects, "Deployment", "initializer-operator");
    assert_eq!(deployment["metadata"]["namespace"], json!("ops"));
    assert_eq!(deployment["spec"]["replicas"], json!(3));
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"disk": "ssd"}));
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "regcred"}]));
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        json!("ghcr.io/initializer-dev/initializer-operator:dev")
    );
    assert_eq!(container["imagePullPolicy"], json!("Always"));
    assert_eq!(
        container["args"][2],
        json!(format!("r/p:{}", chart::APP_VERSION))
    );
    assert_eq!(container["ports"][0]["containerPort"], json!(9090));
    let env = |name: &str| env_value(container, name);
    assert_eq!(env("LOG_JSON"), Some(json!("true")));
    assert_eq!(env("RUST_LOG"), Some(json!("debug")));
    assert_eq!(env("METRICS_ADDR"), Some(json!("$(POD_IP):9090")));
    let binding = find(&objects, "ClusterRoleBinding", "initializer-operator");
    assert_eq!(binding["subjects"][0]["namespace"], json!("ops"));
    let monitor = find(&objects, "ServiceMonitor", "initializer-operator-metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["interval"], json!("1m"));
    assert_eq!(monitor["metadata"]["labels"]["release"], json!("prom"));
    let rule = find(&objects, "PrometheusRule", "initializer-operator");
    assert_eq!(rule["metadata"]["labels"]["team"], json!("hooks"));
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let alert = |name: &str| {
        rules
            .iter()
            .find(|r| r["alert"] == json!(name))
            .unwrap()
            .clone()
    };
    let text =
        |alert: &Value, pointer: &str| alert.pointer(pointer).unwrap().as_str().unwrap().to_owned();
    let deregistered = alert("InitializerDeregistered");
    assert_eq!(deregistered["for"], json!("3m"));
    assert!(text(&deregistered, "/annotations/summary").ends_with("for more than 3m"));
    let latency = alert("InitializerProbeLatencyNearBudget");
    assert!(text(&latency, "/expr").contains("(0.5 * max"));
    assert!(text(&latency, "/annotations/summary").contains("more than 50% of"));
    let expiry = alert("InitializerCertificateExpiringSoon");
    assert!(text(&expiry, "/expr").ends_with("< 604800"));
    // The alerts' own templates reach Prometheus untouched.
    assert!(text(&expiry, "/annotations/description").contains(
        "{{ $labels.initializer }} expires in {{ $value | humanizeDuration }}, less than 7d"
    ));
}

#[test]
#[ignore = "needs helm built from its Go module (make helm): make unit-real, or cargo test -p initializer-packaging --test helm -- --ignored"]
fn the_network_policy_is_the_operators_default_on_with_ranges_and_off_when_disabled() {
    let env = |args: &[&str]| {
        let objects = template(args).unwrap();
        let deployment = find(&objects, "Deployment", "initializer-operator");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        (
            env_value(container, "NETWORK_POLICY"),
            env_value(container, "API_SERVER_CIDRS"),
        )
    };
    assert_eq!(
        env(&[]),
        (None, None),
        "enabled without ranges by default: the operator's own default, auto, reads them"
    );
    assert_eq!(
        env(&[
            "--set",
            "networkPolicy.apiServerCIDRs={10.0.0.0/24,fd00::/64}"
        ]),
        (Some(json!("on")), Some(json!("10.0.0.0/24,fd00::/64"))),
        "with ranges: those"
    );
    for disabled in [
        "networkPolicy.enabled=false",
        "networkPolicy.enabled=false,networkPolicy.apiServerCIDRs={10.0.0.0/24}",
    ] {
        assert_eq!(
            env(&["--set", disabled]),
            (Some(json!("off")), None),
            "{disabled}: off, the ranges unused"
        );
    }
}
