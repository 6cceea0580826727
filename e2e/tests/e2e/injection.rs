//! Injection as a user sees it: the tutorial's sidecar, and the classic examples.

use std::time::Instant;

use anyhow::{Context, bail, ensure};
use initializer_crds::constants::{CONFIG_FILE, INITIALIZER_LABEL};
use initializer_crds::images;
use initializer_e2e::fixtures::{self, Health, SIDECAR_CONTAINER};
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::wait::{self, Check};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT};

/// The tutorial: the nginx Deployment gets the sidecar in a selected namespace when annotated;
/// without the annotation, or outside the selected namespaces, it is untouched.
pub async fn tutorial_sidecar_is_injected_only_where_asked(ctx: Ctx) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "sidecar", Health::default()).await?;
    let outside = ctx.scope.outside_namespace("elsewhere").await?;

    let annotated = common::create_nginx(&ctx, &sidecar.target_ns, "nginx", true).await?;
    ensure!(
        fixtures::has_sidecar(&annotated),
        "the annotated nginx Deployment in {} was not injected: containers {:?}",
        sidecar.target_ns,
        fixtures::template_containers(&annotated)
    );
    ensure!(
        fixtures::template_containers(&annotated) == ["nginx", SIDECAR_CONTAINER],
        "the injected Deployment should have nginx then {SIDECAR_CONTAINER}: {:?}",
        fixtures::template_containers(&annotated)
    );

    // What `kubectl get pods` shows: the nginx pod runs with two containers.
    let client = ctx.client();
    let namespace = sidecar.target_ns.clone();
    let pod = wait::until(
        "a pod of the injected nginx Deployment",
        STEP_TIMEOUT,
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), &namespace)
                .list(&ListParams::default().labels("app=nginx"))
                .await?;
            Ok(match pods.items.into_iter().next() {
                Some(pod) => Check::Done(pod),
                None => Check::Pending("no pod yet".to_string()),
            })
        },
    )
    .await?;
    let containers = fixtures::container_names(pod.spec.as_ref());
    ensure!(
        containers.iter().any(|c| c == SIDECAR_CONTAINER),
        "pod {} of the injected Deployment lacks the sidecar: {containers:?}",
        pod.name_any()
    );

    let plain = common::create_nginx(&ctx, &sidecar.target_ns, "nginx-plain", false).await?;
    ensure!(
        fixtures::template_containers(&plain) == ["nginx"],
        "a Deployment without the annotation was touched although the annotation is required: {:?}",
        fixtures::template_containers(&plain)
    );

    let elsewhere = common::create_nginx(&ctx, &outside, "nginx", true).await?;
    ensure!(
        fixtures::template_containers(&elsewhere) == ["nginx"],
        "a Deployment in {outside}, outside the selected namespaces, was touched: {:?}",
        fixtures::template_containers(&elsewhere)
    );
    Ok(())
}

/// The sum of the API server's `metric` series (counters) whose labels include `name="webhook"`,
/// read from its own `/metrics`.
pub async fn webhook_counter(ctx: &Ctx, metric: &str, webhook: &str) -> anyhow::Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = ctx
        .client()
        .request_text(request)
        .await
        .context("failed to read the API server's /metrics")?;
    Ok(
        initializer_e2e::scale::metric_by_label(&text, metric, "name")
            .get(webhook)
            .copied()
            .unwrap_or(0.0),
    )
}

/// What the sidecar initializer would leave alone, the API server does not send it: the
/// webhook's `matchConditions` carry the Initializer's annotation gate. Twenty Deployments
/// without the annotation make no call (`apiserver_admission_webhook_request_total` of its
/// webhook does not move, and the match-condition exclusions count twenty), and one with it
/// makes a call and is injected.
pub async fn webhook_is_not_called_for_what_the_gate_leaves_alone(ctx: Ctx) -> anyhow::Result<()> {
    const PLAIN: usize = 20;
    const CALLS: &str = "apiserver_admission_webhook_request_total";
    const EXCLUSIONS: &str = "apiserver_admission_match_condition_exclusions_total";
    let sidecar = common::registered_sidecar(&ctx, "gated", Health::default()).await?;
    let hook = ops::registered_webhook(&ctx.client(), &sidecar.name).await?;
    let conditions: Vec<&str> = hook
        .match_conditions
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    ensure!(
        conditions == ["initializer-annotation-gate"],
        "the webhook's matchConditions: {conditions:?}"
    );
    let webhook = hook.name.clone();
    let calls_before = webhook_counter(&ctx, CALLS, &webhook).await?;
    let excluded_before = webhook_counter(&ctx, EXCLUSIONS, &webhook).await?;
    for i in 0..PLAIN {
        let plain =
            common::create_nginx(&ctx, &sidecar.target_ns, &format!("plain-{i}"), false).await?;
        ensure!(
            fixtures::template_containers(&plain) == ["nginx"],
            "a Deployment without the annotation was changed: {:?}",
            fixtures::template_containers(&plain)
        );
    }
    let calls = webhook_counter(&ctx, CALLS, &webhook).await? - calls_before;
    let excluded = webhook_counter(&ctx, EXCLUSIONS, &webhook).await? - excluded_before;
    ensure!(
        calls == 0.0,
        "the API server called the webhook {calls} times for {PLAIN} Deployments its gate leaves alone"
    );
    ensure!(
        excluded >= PLAIN as f64,
        "the API server counted {excluded} match-condition exclusions for {PLAIN} Deployments"
    );
    let annotated = common::create_nginx(&ctx, &sidecar.target_ns, "annotated", true).await?;
    ensure!(
        fixtures::has_sidecar(&annotated),
        "the annotated Deployment was not injected: {:?}",
        fixtures::template_containers(&annotated)
    );
    let called = webhook_counter(&ctx, CALLS, &webhook).await? - calls_before;
    ensure!(
        called >= 1.0,
        "the annotated Deployment was injected without a call the API server counted ({called})"
    );
    eprintln!(
        "{}: {PLAIN} Deployments outside the gate: 0 calls, {excluded} exclusions; the annotated one: {called} call(s)",
        sidecar.name
    );
    Ok(())
}

/// Applies an example initializer (by binary name) for `rules` in the scope's target
/// namespaces and waits until it is registered.
async fn registered_example(
    ctx: &Ctx,
    role: &str,
    binary: &str,
    rules: Value,
    extra: Value,
) -> anyhow::Result<String> {
    let workload_ns = common::workload_namespace(ctx, &format!("{role}-init")).await?;
    let name = ctx.scope.name(role);
    let mut spec = json!({
        "image": images::image(binary),
        "namespace": workload_ns,
        "rules": rules,
        "namespaces": fixtures::target_namespaces(&ctx.scope.target_selector()),
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let initializer = fixtures::initializer(&name, spec)?;
    let applied = Instant::now();
    ctx.scope.create_initializer(&initializer).await?;
    let (_, registered) = ops::wait_registered(&ctx.client(), &name, REGISTER_TIMEOUT)
        .await
        .with_context(|| format!("the {binary} example never registered"))?;
    ctx.row
        .update(|row| row.to_registered = Some(registered - applied));
    Ok(name)
}

fn pod_rules() -> Value {
    json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}])
}

async fn create_pod(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    port: Option<i32>,
) -> anyhow::Result<Pod> {
    let mut container = json!({"name": "app", "image": "nginx:1.8.1"});
    if let Some(port) = port {
        container["ports"] = json!([{"containerPort": port}]);
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container]},
    }))?;
    Api::<Pod>::namespaced(ctx.client(), namespace)
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("failed to create pod {namespace}/{name}"))
}

/// The secret-guard example refuses a Secret with a value shorter than 20 characters, and the
/// client sees its message naming the key; a long value is accepted.
pub async fn secret_guard_denial_reaches_the_client(ctx: Ctx) -> anyhow::Result<()> {
    registered_example(
        &ctx,
        "guard",
        "secret-guard-initializer",
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}]),
        json!({}),
    )
    .await?;
    let target = ctx.scope.target_namespace("apps").await?;
    let secrets = Api::<Secret>::namespaced(ctx.client(), &target);
    let short = fixtures::secret("weak", "password", "hunter2");
    match secrets.create(&PostParams::default(), &short).await {
        Ok(_) => bail!("a Secret whose value `password` has 7 characters was accepted"),
        Err(kube::Error::Api(status)) => {
            ensure!(
                status.message.contains("password"),
                "the denial should name the key `password`; the client saw: {} ({} {})",
                status.message,
                status.code,
                status.reason
            );
            ensure!(
                (400..500).contains(&status.code),
                "a denial should be a 4xx, got {}",
                status.code
            );
        }
        Err(err) => bail!("creating a weak Secret failed in an unexpected way: {err}"),
    }
    let strong = fixtures::secret("strong", "password", "correct-horse-battery-staple");
    secrets
        .create(&PostParams::default(), &strong)
        .await
        .context("a Secret whose values are all 20 characters or more was refused")?;
    Ok(())
}

/// The proxy example injects a proxy sidecar into pods exposing container port 80, and leaves
/// other pods alone.
pub async fn proxy_sidecar_goes_to_pods_exposing_port_80(ctx: Ctx) -> anyhow::Result<()> {
    registered_example(&ctx, "proxy", "proxy-initializer", pod_rules(), json!({})).await?;
    let target = ctx.scope.target_namespace("apps").await?;
    let web = create_pod(&ctx, &target, "web", Some(80)).await?;
    let web_containers = fixtures::container_names(web.spec.as_ref());
    ensure!(
        web_containers.len() == 2,
        "a pod exposing port 80 should get a proxy sidecar: {web_containers:?}"
    );
    let worker = create_pod(&ctx, &target, "worker", Some(9000)).await?;
    let worker_containers = fixtures::container_names(worker.spec.as_ref());
    ensure!(
        worker_containers == ["app"],
        "a pod without port 80 was touched: {worker_containers:?}"
    );
    Ok(())
}

/// The test-certs example mounts test certificates into pods in test namespaces (by name:
/// `test`, `test-*`, `*-test`) and leaves pods in other namespaces alone.
pub async fn test_certificates_go_to_pods_in_test_namespaces(ctx: Ctx) -> anyhow::Result<()> {
    registered_example(
        &ctx,
        "certs",
        "test-certs-initializer",
        pod_rules(),
        json!({}),
    )
    .await?;
    let (label, id) = ctx.scope.target_selector();
    let test_ns = ctx
        .scope
        .namespace_named(
            &format!("{}-test", ctx.scope.name("apps")),
            &[(&label, &id)],
        )
        .await?;
    let other_ns = ctx.scope.target_namespace("apps").await?;
    let pod = create_pod(&ctx, &test_ns, "app", None).await?;
    let spec = pod.spec.clone().unwrap_or_default();
    let volumes: Vec<String> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.clone())
        .collect();
    ensure!(
        volumes.iter().any(|v| v == "test-certs"),
        "a pod in the test namespace {test_ns} got no test-certs volume: volumes {volumes:?}"
    );
    let mounts: Vec<String> = spec.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.clone())
        .collect();
    ensure!(
        mounts.iter().any(|m| m == "/etc/test-certs"),
        "the container in {test_ns} does not mount the certificates at /etc/test-certs: {mounts:?}"
    );
    let other = create_pod(&ctx, &other_ns, "app", None).await?;
    // Only the initializer's volume counts: kube-apiserver's ServiceAccount admission adds a
    // `kube-api-access-*` volume to every pod.
    let other_volumes: Vec<String> = other
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .map(|v| v.name.clone())
        .collect();
    ensure!(
        !other_volumes.iter().any(|v| v == "test-certs"),
        "a pod in {other_ns}, not a test namespace, got the test-certs volume: volumes {other_volumes:?}"
    );
    Ok(())
}

/// A container restart rule (`restartPolicyRules`, Kubernetes 1.34, on by default from 1.35):
/// newer than the oldest Pod types the SDK builds against (1.33).
fn restart_rules() -> Value {
    json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}])
}

/// An environment variable read from a file (`fileKeyRef`, Kubernetes 1.34, on by default from
/// 1.35), in an emptyDir the preset injects too.
fn file_key_ref() -> Value {
    json!({"path": "current.env", "volumeName": "current-env", "key": "CURRENT", "optional": true})
}

/// The container called `name` in `containers` (a JSON array), or `Null`.
fn named<'a>(containers: Option<&'a Value>, name: &str) -> &'a Value {
    containers
        .and_then(Value::as_array)
        .and_then(|all| all.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

/// What of the two new fields `containers` (the injected container) and `env` (the injected
/// variable) hold, as `(restartPolicyRules, fileKeyRef)`.
fn new_fields<'a>(containers: Option<&'a Value>, env: Option<&'a Value>) -> (&'a Value, &'a Value) {
    let variable = env
        .and_then(Value::as_array)
        .and_then(|all| all.iter().find(|v| v["name"] == "CURRENT_FROM_FILE"))
        .unwrap_or(&Value::Null);
    (
        &named(containers, "current-sidecar")["restartPolicyRules"],
        &variable["valueFrom"]["fileKeyRef"],
    )
}

/// Pod fields newer than 1.33 in a preset lose nothing on their way: not in the Initializer the
/// API server stores (the CRD's schema embeds current Pod types, nothing is pruned), not in the
/// preset's configuration the operator writes, and not in the pod the preset injects.
pub async fn preset_keeps_pod_fields_newer_than_1_33(ctx: Ctx) -> anyhow::Result<()> {
    let client = ctx.client();
    let workload_ns = common::workload_namespace(&ctx, "current-init").await?;
    let name = ctx.scope.name("current");
    let initializer = fixtures::initializer(
        &name,
        json!({
            "preset": {"inject": {
                "containers": [{"name": "current-sidecar", "image": "busybox:1.36",
                                "command": ["sleep", "3600"], "restartPolicy": "Never",
                                "restartPolicyRules": restart_rules()}],
                "env": [{"name": "CURRENT_FROM_FILE", "valueFrom": {"fileKeyRef": file_key_ref()}}],
                "volumes": [{"name": "current-env", "emptyDir": {}}],
            }},
            "namespace": workload_ns,
            "rules": pod_rules(),
            "namespaces": fixtures::target_namespaces(&ctx.scope.target_selector()),
            "replicas": 1,
        }),
    )?;
    common::apply_until_registered(&ctx, &initializer).await?;
    let expected = (&restart_rules(), &file_key_ref());

    let stored = serde_json::to_value(ops::initializer(&client, &name).await?)?;
    let inject = &stored["spec"]["preset"]["inject"];
    let found = new_fields(inject.get("containers"), inject.get("env"));
    ensure!(
        found == expected,
        "the stored Initializer lost new Pod fields: {found:?}, applied {expected:?}"
    );

    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &workload_ns)
        .list(&ListParams::default().labels(&format!("{INITIALIZER_LABEL}={name}")))
        .await
        .context("failed to list the preset's ConfigMaps")?;
    let config: Value = config_maps
        .items
        .iter()
        .find_map(|map| map.data.as_ref()?.get(CONFIG_FILE))
        .map(|text| serde_saphyr::from_str(text))
        .transpose()
        .context("failed to read the preset's configuration")?
        .with_context(|| format!("no ConfigMap in {workload_ns} holds {CONFIG_FILE} of {name}"))?;
    let inject = &config["inject"];
    let found = new_fields(inject.get("containers"), inject.get("env"));
    ensure!(
        found == expected,
        "the preset's configuration lost new Pod fields: {found:?}, applied {expected:?}"
    );

    let target_ns = ctx.scope.target_namespace("apps").await?;
    let pod = serde_json::to_value(create_pod(&ctx, &target_ns, "app", None).await?)?;
    let containers = pod.pointer("/spec/containers");
    let found = new_fields(containers, named(containers, "app").get("env"));
    ensure!(
        found == expected,
        "the injected pod lost new Pod fields: {found:?}, applied {expected:?}"
    );
    Ok(())
}
