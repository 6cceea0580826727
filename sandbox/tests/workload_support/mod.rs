//! Test helpers for workloads: a sandbox whose image map runs `sandbox-testapp`, waiting, and
//! plain HTTP requests to pods.

#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::time::Duration;

use initializer_sandbox::{Sandbox, SandboxConfig, SandboxHandle};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

pub use initializer_test_support::wait_for;

/// The image the test app is mapped from.
pub const IMAGE: &str = "example.com/testapp:1.0";

/// A sandbox with the test app in its image map; the temp dir lives as long as it does.
pub struct Env {
    pub sandbox: SandboxHandle,
    pub client: kube::Client,
    pub dir: tempfile::TempDir,
}

impl Env {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// [`Env::start`] after `tweak` adjusts the configuration (legacy mode, ...).
    pub async fn start_with(tweak: impl FnOnce(&mut SandboxConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let map = dir.path().join("images.yaml");
        std::fs::write(
            &map,
            format!(
                "example.com/testapp: {}\nexample.com/true: /bin/true\nexample.com/false: /bin/false\nexample.com/gone: /nonexistent/bin/gone\n",
                env!("CARGO_BIN_EXE_sandbox-testapp")
            ),
        )
        .unwrap();
        let mut config = SandboxConfig::new(dir.path().join("state"));
        config.image_map = Some(map);
        tweak(&mut config);
        let sandbox = Sandbox::start(config).await.unwrap();
        let client = sandbox.client();
        Self {
            sandbox,
            client,
            dir,
        }
    }

    /// [`Env::start`], then namespace `ns`.
    pub async fn start_in(ns: &str) -> Self {
        let env = Self::start().await;
        env.namespace(ns).await;
        env
    }

    /// Creates [`app_deployment`] `name` in `ns` with `replicas`, no extra env and no args.
    pub async fn create_app(&self, ns: &str, name: &str, replicas: i32) -> Deployment {
        self.create(ns, app_deployment(name, replicas, json!([]), json!([])))
            .await
    }

    pub async fn namespace(&self, name: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("failed to create namespace {name}: {e}"),
        }
    }

    pub async fn create<K>(&self, ns: &str, object: Value) -> K
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let obj: K = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap()
    }

    pub async fn pods(&self, ns: &str, selector: &str) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        api.list(&kube::api::ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
    }

    /// Waits up to `timeout` until `app` in `ns` runs exactly `n` pods, all ready; `what` names
    /// the wait in the timeout's panic.
    pub async fn ready_pods(
        &self,
        what: &str,
        timeout: Duration,
        ns: &str,
        app: &str,
        n: usize,
    ) -> Vec<Pod> {
        let selector = format!("app={app}");
        wait_for(what, timeout, || async {
            let pods = self.pods(ns, &selector).await;
            (pods.len() == n && pods.iter().all(is_ready)).then_some(pods)
        })
        .await
    }

    /// An API for kind `K` in namespace `ns`.
    pub fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), ns)
    }

    pub async fn stop(self) {
        self.sandbox.shutdown().await;
    }
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn pod_ip(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

/// A plain HTTP/1.0 request; returns status and body.
pub async fn http(
    method: &str,
    addr: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), tcp.read_to_end(&mut out))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out"))??;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// A Deployment of the test app listening on 8080, readiness on `/readyz` every second.
pub fn app_deployment(name: &str, replicas: i32, extra_env: Value, args: Value) -> Value {
    let mut env = vec![
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "PORT", "value": "8080"}),
    ];
    env.extend(extra_env.as_array().cloned().unwrap_or_default());
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{
                        "name": "app",
                        "image": IMAGE,
                        "args": args,
                        "env": env,
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 1},
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 30},
                    }],
                },
            },
        },
    })
}

/// A Service selecting `app: NAME`, port 80 → `http`.
pub fn app_service(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    })
}
