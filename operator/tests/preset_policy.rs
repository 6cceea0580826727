//! The compiled preset on a real API server (MutatingAdmissionPolicy at v1 on the pinned
//! kube-apiserver, at v1beta1 on 1.35 with the beta on: `make oldest-minor`, each written at the
//! version the API server serves, as the operator writes it),
//! side by side with the preset webhook on the same API server: the preset initializer's own
//! binary, run inside the control plane's network namespace and registered with the operator's
//! webhook configuration (its scope narrowed to two namespaces). The API server accepts the
//! policy (it compiles every expression); for the whole corpus, what it stores after the policy
//! (a server-side dry-run create) is what it stores after the webhook, but for the webhook's
//! signed initialized-by mark; and created again, a policy's output comes back unchanged ("needs
//! injection" is false). With the unit tests, which hold the compiler's interpreter to the
//! webhook's preset code on the same corpus, this is the proof that the CEL text does what the
//! interpreter does.
//!
//! And the operator's proof (`engine::proof::prove`) against a webhook that disagrees: disproved,
//! naming the difference, and nothing left behind.
//!
//! On the real control plane only: the sandbox serves no MutatingAdmissionPolicy.

// Test helpers outside #[test] functions may unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::panic)]

// This file uses the cluster, the build helper and the namespace's creation, nothing else of the
// shared helpers.
#[allow(dead_code)]
#[macro_use]
mod support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use futures::future::BoxFuture;
use initializer_crds::constants::NAMESPACE_NAME_LABEL;
use initializer_crds::{AnnotationGate, InitializerSpec, PresetConfig};
use initializer_operator::build;
use initializer_operator::engine::compare::comparable;
use initializer_operator::engine::proof::{self, PolicyObjects};
use initializer_operator::policy::corpus::{self, CorpusObject};
use initializer_operator::policy::served;
use initializer_operator::policy::{self, BindingScope};
use initializer_operator::tls;
use initializer_operator::validate::{Validated, validate};
use initializer_test_support::api::raw;
use initializer_test_support::wait_until;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::{Backend, TestCluster};

/// Bound, and selected by the preset's `preset-*` pattern: the policy acts here.
const POLICY_NS: &str = "preset-corpus";
/// Bound, but selected by none of the preset's namespace patterns: the policy leaves it alone.
const POLICY_ELSEWHERE_NS: &str = "elsewhere";
/// The webhook's namespaces, one selected by the preset and one not.
const WEBHOOK_NS: &str = "preset-webhook";
const WEBHOOK_ELSEWHERE_NS: &str = "elsewhere-webhook";
/// Where the preset webhook listens, inside the control plane's network namespace.
const WEBHOOK_ADDRESS: &str = "127.0.0.1:18443";
/// The Initializer's opt-out annotation (`spec.annotation`, not required).
const SKIP_ANNOTATION: &str = "preset.example.com/skip";
/// A label the preset injects, which tells that an engine is in force.
const INJECTED_LABEL: &str = "preset.example.com/injected";

on_backends! {
    /// The sandbox serves no MutatingAdmissionPolicy.
    real only: the_compiled_preset_policy_does_what_the_webhook_does,
        a_policy_that_disagrees_with_its_webhook_is_disproved_and_removed,
}

/// Runs one test body on `backend`, with no image mapped: the preset webhook runs as a process
/// of this test, not as a pod.
async fn run<F>(backend: Backend, body: F)
where
    F: for<'a> FnOnce(&'a TestCluster) -> BoxFuture<'a, ()>,
{
    support::run(backend, &[], body).await;
}

fn initializer() -> Validated {
    let spec: InitializerSpec = serde_json::from_value(json!({
        "preset": corpus::representative_preset(),
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
            {"apiGroups": ["apps"], "apiVersions": ["v1"],
             "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"]},
            {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs", "cronjobs"]}
        ],
        "annotation": {"name": SKIP_ANNOTATION, "required": false},
        "reinvocationPolicy": "IfNeeded"
    }))
    .unwrap();
    validate(&spec, "initializer-system", "preset-proof").unwrap()
}

/// The corpus, and an object the Initializer's annotation gate turns away.
fn objects() -> Vec<CorpusObject> {
    let mut objects = corpus::corpus();
    objects.push(CorpusObject {
        name: "pod-opted-out-by-annotation",
        object: json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pod-opted-out-by-annotation",
                         "annotations": {SKIP_ANNOTATION: "false"}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0"}]}
        }),
    });
    objects
}

fn collection(object: &Value, namespace: &str) -> String {
    let api_version = object["apiVersion"].as_str().unwrap();
    let plural = format!("{}s", object["kind"].as_str().unwrap().to_lowercase());
    let root = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    format!("{root}/namespaces/{namespace}/{plural}")
}

/// What the API server would store for a create of `object` in `namespace`, or its refusal.
async fn try_dry_run_create(
    client: &Client,
    namespace: &str,
    object: &Value,
) -> Result<Value, String> {
    let uri = format!("{}?dryRun=All", collection(object, namespace));
    let (code, body) = raw(
        client,
        "POST",
        &uri,
        None,
        Some("application/json"),
        Some(object.clone()),
    )
    .await
    .map_err(|e| e.to_string())?;
    match code {
        200 | 201 => Ok(body),
        _ => Err(format!("{code} {body}")),
    }
}

async fn dry_run_create(client: &Client, namespace: &str, object: &Value) -> Value {
    try_dry_run_create(client, namespace, object)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "dry-run create of {} in {namespace}: {e}",
                object["metadata"]["name"]
            )
        })
}

/// The object to create again: what the API server fills in on a create removed (a Job's
/// generated selector and the labels that carry it, which a create refuses unless manual).
fn recreatable(stored: &Value) -> Value {
    let mut object = stored.clone();
    let metadata = object["metadata"].as_object_mut().unwrap();
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        metadata.remove(field);
    }
    object.as_object_mut().unwrap().remove("status");
    if object["kind"] == "Job" {
        // A Job created without labels gets its template's, generated ones included, when the
        // API server decodes what it stores: leave them out to have them copied again.
        if object["metadata"]["labels"] == object["spec"]["template"]["metadata"]["labels"] {
            object["metadata"].as_object_mut().unwrap().remove("labels");
        }
        object["spec"].as_object_mut().unwrap().remove("selector");
        let generated = |labels: Option<&mut Value>| {
            if let Some(labels) = labels.and_then(Value::as_object_mut) {
                labels.retain(|k, _| !k.contains("controller-uid") && !k.contains("job-name"));
            }
        };
        generated(object.pointer_mut("/metadata/labels"));
        generated(object.pointer_mut("/spec/template/metadata/labels"));
    }
    object
}

/// The preset initializer's binary, serving inside the control plane's network namespace;
/// killed when dropped.
struct PresetWebhook(Child);

impl Drop for PresetWebhook {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the preset initializer as the operator would configure it (its `config.yaml`, name
/// and annotation gate; a serving certificate for [`WEBHOOK_ADDRESS`]), and returns it with the
/// CA that signed its certificate.
fn start_webhook(
    cluster: &TestCluster,
    dir: &Path,
    v: &Validated,
    preset: &PresetConfig,
    gate: &AnnotationGate,
) -> (PresetWebhook, String) {
    let now = jiff::Timestamp::now();
    let ca = tls::new_ca(now).unwrap();
    let host = WEBHOOK_ADDRESS.split(':').next().unwrap().to_owned();
    let serving = tls::issue(&ca, &[host], now).unwrap();
    let (tls_dir, config_dir) = (dir.join("tls"), dir.join("config"));
    std::fs::create_dir_all(&tls_dir).unwrap();
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(tls_dir.join("tls.crt"), &serving.cert_pem).unwrap();
    std::fs::write(tls_dir.join("tls.key"), &serving.key_pem).unwrap();
    std::fs::write(
        config_dir.join("config.yaml"),
        serde_saphyr::to_string(preset).unwrap(),
    )
    .unwrap();
    let binary = support::built("--bin", "preset-initializer").unwrap();
    let log = std::fs::File::create(dir.join("preset-initializer.log")).unwrap();
    let child = cluster
        .command(&binary)
        .arg("--listen")
        .arg(WEBHOOK_ADDRESS)
        .env("TLS_DIR", &tls_dir)
        .env("CONFIG_DIR", &config_dir)
        .env("INITIALIZER_NAME", &v.names.initializer)
        .env("INITIALIZER_ANNOTATION", &gate.name)
        .env("INITIALIZER_REQUIRE_ANNOTATION", gate.required.to_string())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    (PresetWebhook(child), ca.cert_pem)
}

/// The operator's webhook configuration for `v`, calling [`WEBHOOK_ADDRESS`] instead of the
/// Service and narrowed to `namespaces`.
fn webhook_configuration(v: &Validated, ca_pem: &str, namespaces: &[&str]) -> Value {
    let mut configuration: MutatingWebhookConfiguration = build::webhook(v, ca_pem);
    for hook in configuration.webhooks.iter_mut().flatten() {
        hook.client_config.service = None;
        hook.client_config.url = Some(format!("https://{WEBHOOK_ADDRESS}/initialize"));
        let selector = hook.namespace_selector.get_or_insert_with(Default::default);
        selector
            .match_expressions
            .get_or_insert_with(Vec::new)
            .push(LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.to_owned(),
                operator: "In".to_owned(),
                values: Some(namespaces.iter().map(|n| n.to_string()).collect()),
            });
    }
    let mut value = serde_json::to_value(configuration).unwrap();
    value["apiVersion"] = json!("admissionregistration.k8s.io/v1");
    value["kind"] = json!("MutatingWebhookConfiguration");
    value
}

/// Creates the namespace `name` and waits until its default ServiceAccount is there.
async fn create_namespace(client: &Client, name: &str) {
    support::install::create_namespace(client, name).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait_until(
        &format!("the default ServiceAccount of {name}"),
        Duration::from_secs(30),
        || async { matches!(accounts.get_opt("default").await, Ok(Some(_))) },
    )
    .await;
}

/// How long until a create in `namespace` comes back injected.
async fn in_force(client: &Client, namespace: &str, what: &str) -> Duration {
    let probe = corpus::corpus().into_iter().next().unwrap().object;
    wait_until(what, Duration::from_secs(60), || async {
        try_dry_run_create(client, namespace, &probe)
            .await
            .is_ok_and(|stored| stored["metadata"]["labels"][INJECTED_LABEL] == "true")
    })
    .await
}

/// The version the API server serves MutatingAdmissionPolicy at, as the operator finds it.
async fn served_version(client: &Client) -> &'static str {
    proof::served_version(client).await.unwrap().unwrap()
}

async fn the_compiled_preset_policy_does_what_the_webhook_does(cluster: &TestCluster) {
    let client = cluster.client();
    let version = served_version(&client).await;
    for name in [
        POLICY_NS,
        POLICY_ELSEWHERE_NS,
        WEBHOOK_NS,
        WEBHOOK_ELSEWHERE_NS,
    ] {
        create_namespace(&client, name).await;
    }

    let v = initializer();
    let preset = v.spec.preset.clone().unwrap();
    let gate = v.spec.annotation.clone().unwrap();
    let apply = PatchParams::apply("preset-policy-test").force();

    // The policy, bound to its two namespaces. Creating it is the API server's compile check:
    // a CEL error is a 422 here.
    let compiled = policy::compile(&v).unwrap();
    let binding = policy::binding(
        &v,
        &BindingScope::Namespaces(vec![POLICY_NS.to_owned(), POLICY_ELSEWHERE_NS.to_owned()]),
    );
    PolicyObjects::new(&v, version)
        .apply(&client, &compiled.policy, &binding)
        .await
        .unwrap();
    let policy_in_force = in_force(&client, POLICY_NS, "the policy in force").await;

    // The webhook, in its two namespaces.
    let dir = tempfile::tempdir().unwrap();
    let (_webhook, ca_pem) = start_webhook(cluster, dir.path(), &v, &preset, &gate);
    let configuration = webhook_configuration(&v, &ca_pem, &[WEBHOOK_NS, WEBHOOK_ELSEWHERE_NS]);
    let configuration_name = configuration["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&configuration_name, &apply, &Patch::Apply(&configuration))
        .await
        .unwrap();
    let webhook_in_force = in_force(&client, WEBHOOK_NS, "the webhook in force").await;
    eprintln!(
        "in force: the policy {:.2}s after its apply, the webhook {:.2}s after its registration",
        policy_in_force.as_secs_f64(),
        webhook_in_force.as_secs_f64()
    );

    let objects = objects();
    let (mut compared, mut changed, mut unchanged_again) = (0, 0, 0);
    for CorpusObject { name, object } in &objects {
        for (policy_ns, webhook_ns) in [
            (POLICY_NS, WEBHOOK_NS),
            (POLICY_ELSEWHERE_NS, WEBHOOK_ELSEWHERE_NS),
        ] {
            let by_policy = comparable(&dry_run_create(&client, policy_ns, object).await);
            let by_webhook = comparable(&dry_run_create(&client, webhook_ns, object).await);
            assert_eq!(
                by_policy, by_webhook,
                "{name}: the policy in {policy_ns} (left) and the webhook in {webhook_ns} (right) disagree"
            );
            compared += 1;
            if by_policy["metadata"]["labels"][INJECTED_LABEL] == "true" {
                changed += 1;
            }
            let stored = dry_run_create(&client, policy_ns, object).await;
            let again = dry_run_create(&client, policy_ns, &recreatable(&stored)).await;
            assert_eq!(
                comparable(&again),
                by_policy,
                "{name} in {policy_ns}: the policy changed its own output"
            );
            unchanged_again += 1;
        }
    }
    eprintln!(
        "{compared}/{compared} corpus creates agree (policy = webhook, {} objects in two pairs of \
         namespaces), {changed} of them injected; {unchanged_again}/{compared} policy outputs \
         created again unchanged",
        objects.len()
    );
    // Everything the preset selects is injected: every corpus object in the selected
    // namespaces but the two opted out (by label, by annotation); nothing elsewhere.
    assert_eq!(changed, objects.len() - 2, "{changed} injected");
}

/// The operator's proof (`engine::proof::prove`) against a webhook that injects something else
/// than the policy: here the webhook runs the representative preset and the policy is compiled
/// from the same preset with one env var's value changed, as a compiler bug would make it. The
/// proof must say where they differ, and leave no policy or binding behind.
async fn a_policy_that_disagrees_with_its_webhook_is_disproved_and_removed(cluster: &TestCluster) {
    use initializer_operator::engine::proof::Unproven;

    let client = cluster.client();
    create_namespace(&client, POLICY_NS).await;
    let webhook_v = initializer();
    let preset = webhook_v.spec.preset.clone().unwrap();
    let gate = webhook_v.spec.annotation.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_webhook, ca_pem) = start_webhook(cluster, dir.path(), &webhook_v, &preset, &gate);
    let configuration = webhook_configuration(&webhook_v, &ca_pem, &[POLICY_NS]);
    let configuration_name = configuration["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let apply = PatchParams::apply("preset-policy-test").force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&configuration_name, &apply, &Patch::Apply(&configuration))
        .await
        .unwrap();
    in_force(&client, POLICY_NS, "the webhook in force").await;

    // The same Initializer, but its policy sets the injected env var to another value.
    let mut policy_v = webhook_v.clone();
    let env = &mut policy_v.spec.preset.as_mut().unwrap().inject.env;
    // The representative preset injects env.
    let first = env.first_mut().unwrap();
    first.value = Some("not what the webhook injects".to_owned());
    let compiled = policy::compile(&policy_v).unwrap();
    let version = served_version(&client).await;
    let objects = PolicyObjects::new(&policy_v, version);
    let outcome = proof::prove(&client, &objects, &policy_v, &compiled, POLICY_NS).await;
    let diff = match outcome {
        Err(Unproven::Disproved(diff)) => diff,
        Err(Unproven::Failed(why)) => panic!("the proof failed instead of disproving: {why}"),
        Err(Unproven::Conflict(err)) => panic!("the proof met someone else's policy: {err}"),
        Ok(proven) => panic!("a disagreeing policy was proven: {proven:?}"),
    };
    println!("disproved: {diff}");
    assert!(
        diff.contains("/env/") && diff.contains("not what the webhook injects"),
        "the difference names the env var and both values: {diff}"
    );
    let name = policy::policy_name(&policy_v);
    for plural in [
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
    ] {
        let uri = format!("/apis/{}/{version}/{plural}/{name}", served::GROUP);
        let (code, _) = raw(&client, "GET", &uri, None, None, None).await.unwrap();
        assert_eq!(
            code, 404,
            "a disproved policy and its binding are removed: {uri}"
        );
    }
}
