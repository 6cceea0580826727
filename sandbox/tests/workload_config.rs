//! Workloads' configuration through the sandbox's API: volumes materialized with mount paths
//! rewritten (and refreshed when the Secret changes), rolling updates, and the service proxy
//! forwarding to pods over HTTP and HTTPS.

#![allow(clippy::unwrap_used, clippy::panic)]

mod workload_support;

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine as _;
use initializer_test_support::pki::self_signed;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use workload_support::{Env, IMAGE, app_deployment, app_service, http, is_ready, pod_ip, wait_for};

const T: Duration = Duration::from_secs(20);

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn ready_pod(env: &Env, ns: &str, name: &str) -> Pod {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), ns);
    wait_for(&format!("pod {name} ready"), T, || async {
        let p = api.get(name).await.ok()?;
        is_ready(&p).then_some(p)
    })
    .await
}

#[tokio::test]
async fn volumes_are_materialized_with_items_projection_downward_api_and_empty_dir() {
    let env = Env::start().await;
    env.namespace("apps").await;
    let _: Secret = env
        .create("apps", json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"}, "data": {"tls.crt": b64("cert-1"), "tls.key": b64("key-1")}}))
        .await;
    let _: ConfigMap = env
        .create("apps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"config.yaml": "a: 1\n", "ignored.yaml": "b: 2\n"}}))
        .await;
    let _: Pod = env
        .create(
            "apps",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "p", "tier": "x"}},
                "spec": {
                    "containers": [{
                        "name": "app", "image": IMAGE,
                        "args": ["--tls-dir", "/etc/app/tls", "--config=/etc/app/config"],
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "PORT", "value": "8080"},
                            {"name": "CONFIG_FILE", "value": "/etc/app/config/conf/main.yaml"},
                            {"name": "NOT_A_MOUNT", "value": "/etc/application"},
                            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tls", "key": "tls.key"}}},
                        ],
                        "volumeMounts": [
                            {"name": "tls", "mountPath": "/etc/app/tls", "readOnly": true},
                            {"name": "config", "mountPath": "/etc/app/config"},
                            {"name": "info", "mountPath": "/etc/podinfo"},
                            {"name": "scratch", "mountPath": "/scratch"},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080, "scheme": "HTTPS"}, "periodSeconds": 1},
                    }],
                    "volumes": [
                        {"name": "tls", "secret": {"secretName": "tls"}},
                        {"name": "config", "configMap": {"name": "cfg", "items": [{"key": "config.yaml", "path": "conf/main.yaml"}]}},
                        {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}, {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                        {"name": "scratch", "emptyDir": {}},
                    ],
                }}),
        )
        .await;
    // The TLS files are placeholders (the app never becomes ready): check the files themselves.
    let state = env.sandbox.state_dir().to_path_buf();
    let volumes = state.join("pods/apps_p/volumes");
    wait_for("volumes to be written", T, || async {
        volumes.join("tls/tls.crt").exists().then_some(())
    })
    .await;
    for (file, want) in [
        ("tls/tls.crt", "cert-1"),
        ("config/conf/main.yaml", "a: 1\n"),
        ("info/labels", "app=\"p\"\ntier=\"x\"\n"),
        ("info/name", "p"),
    ] {
        let got = std::fs::read_to_string(volumes.join(file)).unwrap();
        assert_eq!(got, want, "{file}");
    }
    assert!(
        !volumes.join("config/ignored.yaml").exists(),
        "items project only the listed keys"
    );
    assert!(volumes.join("scratch").is_dir());
    let api: Api<Pod> = Api::namespaced(env.client.clone(), "apps");
    let ip = wait_for("the pod to get an address", T, || async {
        let p = api.get("p").await.ok()?;
        Some(pod_ip(&p)).filter(|ip| !ip.is_empty())
    })
    .await;
    assert!(ip.starts_with("127.1."), "{ip}");
    env.stop().await;
}

async fn info(addr: &str) -> Value {
    let (status, body) = http("GET", addr, "/info", "").await.unwrap();
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test]
async fn container_sees_rewritten_args_and_env_and_refreshed_secret_files() {
    let env = Env::start().await;
    env.namespace("apps").await;
    let _: Secret = env
        .create("apps", json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "data": {"token": b64("t-1")}}))
        .await;
    let _: ConfigMap = env
        .create("apps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"config.yaml": "a: 1\n"}}))
        .await;
    let _: Pod = env
        .create(
            "apps",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "p"}},
                "spec": {
                    "containers": [{
                        "name": "app", "image": IMAGE,
                        "command": ["/bin/testapp", "serve"],
                        "args": ["--creds", "/etc/app/creds", "--config=/etc/app/config", "$(POD_NAME)"],
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "PORT", "value": "8080"},
                            {"name": "CONFIG_FILE", "value": "/etc/app/config/config.yaml"},
                            {"name": "NOT_A_MOUNT", "value": "/etc/app/configuration"},
                            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                            {"name": "SETTING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "config.yaml"}}},
                        ],
                        "volumeMounts": [
                            {"name": "creds", "mountPath": "/etc/app/creds"},
                            {"name": "config", "mountPath": "/etc/app/config"},
                        ],
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                    }],
                    "volumes": [
                        {"name": "creds", "secret": {"secretName": "creds"}},
                        {"name": "config", "configMap": {"name": "cfg"}},
                    ],
                }}),
        )
        .await;
    let pod = ready_pod(&env, "apps", "p").await;
    let addr = format!("{}:8080", pod_ip(&pod));
    let volumes = env.sandbox.state_dir().join("pods/apps_p/volumes");
    let info = info(&addr).await;
    let creds_dir = volumes.join("creds").display().to_string();
    let config_dir = volumes.join("config").display().to_string();
    assert_eq!(
        info["args"],
        json!([
            "serve",
            "--creds",
            creds_dir,
            "--config=/etc/app/config",
            "p"
        ])
    );
    assert_eq!(
        info["env"]["CONFIG_FILE"],
        format!("{config_dir}/config.yaml")
    );
    assert_eq!(info["env"]["NOT_A_MOUNT"], "/etc/app/configuration");
    assert_eq!(info["env"]["TOKEN"], "t-1");
    assert_eq!(info["env"]["SETTING"], "a: 1\n");
    assert_eq!(info["env"]["POD_NAMESPACE"], "apps");
    // The pod's kubeconfig: the sandbox's cluster and credentials, its own namespace.
    let kubeconfig = std::path::PathBuf::from(info["env"]["KUBECONFIG"].as_str().unwrap());
    assert_ne!(kubeconfig, env.sandbox.kubeconfig_path());
    let config: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    assert_eq!(config["contexts"][0]["context"]["namespace"], "apps");
    let shared: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(env.sandbox.kubeconfig_path()).unwrap())
            .unwrap();
    assert_eq!(config["clusters"], shared["clusters"]);
    let pod_client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(pod_client.default_namespace(), "apps");
    let own: Api<Pod> = Api::default_namespaced(pod_client);
    assert_eq!(
        own.get("p").await.unwrap().metadata.name.as_deref(),
        Some("p")
    );
    let (_, token) = http("GET", &addr, &format!("/read?{creds_dir}/token"), "")
        .await
        .unwrap();
    assert_eq!(token, "t-1");
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "apps");
    secrets
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"token": b64("t-2")}})),
        )
        .await
        .unwrap();
    wait_for("the secret's new value in the mounted file", T, || async {
        let (_, token) = http("GET", &addr, &format!("/read?{creds_dir}/token"), "")
            .await
            .ok()?;
        (token == "t-2").then_some(())
    })
    .await;
    let log = std::fs::read_to_string(env.sandbox.state_dir().join("logs/apps_p/app.log")).unwrap();
    assert!(log.contains("listening on"), "{log}");
    env.stop().await;
}

#[tokio::test]
async fn rolling_update_replaces_every_pod_without_losing_availability() {
    let env = Env::start().await;
    env.namespace("apps").await;
    let _: Deployment = env
        .create("apps", app_deployment("web", 2, json!([]), json!([])))
        .await;
    let before: BTreeSet<String> = wait_for("two ready pods", T, || async {
        let pods = env.pods("apps", "app=web").await;
        (pods.len() == 2 && pods.iter().all(is_ready)).then(|| {
            pods.iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect()
        })
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "apps");
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": IMAGE, "env": [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PORT", "value": "8080"},
        {"name": "VERSION", "value": "2"},
    ]}]}}}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    let min_ready = std::sync::atomic::AtomicUsize::new(usize::MAX);
    let max_total = std::sync::atomic::AtomicUsize::new(0);
    let after: BTreeSet<String> =
        wait_for("the rollout to finish", Duration::from_secs(30), || {
            let env = &env;
            let deployments = &deployments;
            let before = &before;
            let (min_ready, max_total) = (&min_ready, &max_total);
            async move {
                let pods = env.pods("apps", "app=web").await;
                max_total.fetch_max(pods.len(), std::sync::atomic::Ordering::SeqCst);
                min_ready.fetch_min(
                    pods.iter().filter(|p| is_ready(p)).count(),
                    std::sync::atomic::Ordering::SeqCst,
                );
                let d = deployments.get("web").await.ok()?;
                let s = d.status.clone()?;
                let names: BTreeSet<String> = pods
                    .iter()
                    .map(|p| p.metadata.name.clone().unwrap())
                    .collect();
                let done = s.observed_generation == d.metadata.generation
                    && s.updated_replicas == Some(2)
                    && s.available_replicas == Some(2)
                    && s.replicas == Some(2)
                    && names.is_disjoint(before)
                    && pods.len() == 2
                    && pods.iter().all(is_ready);
                done.then_some(names)
            }
        })
        .await;
    let (min_ready, max_total) = (min_ready.into_inner(), max_total.into_inner());
    println!("rollout done; fewest ready pods seen: {min_ready}, most pods seen: {max_total}");
    assert!(
        max_total <= 3,
        "maxSurge 1 was not honoured: {max_total} pods at one point"
    );
    assert!(
        min_ready >= 2,
        "maxUnavailable 0 was not honoured: {min_ready} ready at one point"
    );
    let pods = env.pods("apps", "app=web").await;
    for p in &pods {
        let info = info(&format!("{}:8080", pod_ip(p))).await;
        assert_eq!(info["env"]["VERSION"], "2");
    }
    assert_eq!(after.len(), 2);
    env.stop().await;
}

#[tokio::test]
async fn service_proxy_forwards_a_post_over_http_and_https() {
    let env = Env::start().await;
    env.namespace("apps").await;
    let (crt, key) = self_signed(&["secure.apps.svc"]);
    let _: Secret = env
        .create("apps", json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"}, "type": "kubernetes.io/tls", "data": {"tls.crt": b64(&crt), "tls.key": b64(&key)}}))
        .await;
    let _: Deployment = env
        .create("apps", app_deployment("plain", 1, json!([]), json!([])))
        .await;
    let _: Service = env.create("apps", app_service("plain")).await;
    let mut secure = app_deployment("secure", 1, json!([]), json!(["--tls-dir", "/etc/tls"]));
    let container = &mut secure["spec"]["template"]["spec"]["containers"][0];
    container["readinessProbe"]["httpGet"]["scheme"] = json!("HTTPS");
    container["livenessProbe"]["httpGet"]["scheme"] = json!("HTTPS");
    container["volumeMounts"] = json!([{"name": "tls", "mountPath": "/etc/tls"}]);
    secure["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "tls", "secret": {"secretName": "tls"}}]);
    let _: Deployment = env.create("apps", secure).await;
    let _: Service = env
        .create(
            "apps",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "secure"},
                "spec": {"selector": {"app": "secure"}, "ports": [{"name": "https", "port": 443, "targetPort": 8080}]}}),
        )
        .await;
    for (service_ref, app) in [
        ("plain:80", "plain"),
        ("plain:http", "plain"),
        ("https:secure:443", "secure"),
        ("https:secure:https", "secure"),
    ] {
        let body = r#"{"kind":"AdmissionReview"}"#;
        let path = format!("/api/v1/namespaces/apps/services/{service_ref}/proxy/initialize?dry=1");
        let answer = wait_for(&format!("{app} to answer through the proxy"), T, || async {
            let request = http::Request::post(path.as_str())
                .header("content-type", "application/json")
                .body(body.as_bytes().to_vec())
                .unwrap();
            env.client.request_text(request).await.ok()
        })
        .await;
        let echo: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(echo["method"], "POST", "{service_ref}");
        assert_eq!(echo["path"], "/initialize", "{service_ref}");
        assert_eq!(echo["query"], "dry=1", "{service_ref}");
        assert_eq!(echo["contentType"], "application/json", "{service_ref}");
        assert_eq!(echo["body"], body, "{service_ref}");
    }
    env.stop().await;
}

#[tokio::test]
async fn service_proxy_answers_503_without_ready_endpoints() {
    let env = Env::start().await;
    env.namespace("apps").await;
    let _: Service = env.create("apps", app_service("nobody")).await;
    let request = http::Request::post("/api/v1/namespaces/apps/services/nobody:80/proxy/x")
        .body(Vec::new())
        .unwrap();
    match env.client.request_text(request).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 503);
            assert!(
                s.message
                    .contains("no endpoints available for service \"nobody\""),
                "{}",
                s.message
            );
        }
        other => panic!("expected 503, got {other:?}"),
    }
    env.stop().await;
}
