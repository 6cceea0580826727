//! What a body runs against: a client, a kubeconfig for kubectl, a fresh namespace and unique
//! names, on either server. Bodies never ask which server they run on, with one exception the
//! two servers genuinely do differently: forgetting watch history
//! ([`Target::forget_history`]).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use initializer_e2e::conformance::{BodyScope, Cleanup, Scoped, namespace_for, random_suffix};
use initializer_sandbox::apiserver::ApiServer;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// How the server forgets its change history.
#[derive(Clone)]
pub enum History {
    /// The sandbox's store (`Store::compact`).
    Sandbox(Arc<ApiServer>),
    /// etcd inside the control plane's network namespace, compacted through its HTTP gateway.
    Real {
        /// The network namespace's name.
        netns: String,
    },
}

/// One body's view of a server.
pub struct Target {
    scope: BodyScope,
    history: History,
    cluster_objects: Mutex<Vec<(ApiResource, String)>>,
}

impl Scoped for Target {
    fn scope(&self) -> &BodyScope {
        &self.scope
    }
}

/// The CustomResourceDefinition resource.
pub fn crd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    )
}

/// The Namespace resource.
pub fn namespace_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Namespace"), "namespaces")
}

impl Target {
    /// Creates the body's namespace and returns its target.
    pub async fn prepare(
        client: kube::Client,
        kubeconfig: &Path,
        history: History,
        body: &str,
    ) -> anyhow::Result<Self> {
        let suffix = random_suffix();
        let namespace = namespace_for(body, &suffix);
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("failed to create the test namespace {namespace}"))?;
        let scratch = tempfile::Builder::new()
            .prefix("initializer-conformance")
            .tempdir()
            .context("failed to create a scratch directory")?;
        Ok(Self {
            scope: BodyScope::new(client, kubeconfig, namespace, suffix, scratch),
            history,
            cluster_objects: Mutex::new(Vec::new()),
        })
    }

    /// An API group unique to this body, for CustomResourceDefinitions.
    pub fn group(&self) -> String {
        format!("c{}.example.dev", self.suffix())
    }

    /// Deletes a cluster-scoped object after the body, whatever its outcome.
    pub fn delete_afterwards(&self, resource: ApiResource, name: &str) {
        if let Ok(mut objects) = self.cluster_objects.lock() {
            objects.push((resource, name.to_string()));
        }
    }

    /// Creates a namespace of the body's own (deleted afterwards).
    pub async fn create_namespace(&self, name: &str) -> anyhow::Result<Namespace> {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        self.delete_afterwards(namespace_resource(), name);
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("failed to create namespace {name}"))
    }

    /// Creates a CustomResourceDefinition (deleted afterwards) and waits until it is
    /// Established, as clients must before using it.
    pub async fn install_crd(&self, crd: Value) -> anyhow::Result<()> {
        let name = crd["metadata"]["name"]
            .as_str()
            .context("the CRD has no name")?
            .to_string();
        let crds: Api<DynamicObject> = Api::all_with(self.client(), &crd_resource());
        self.delete_afterwards(crd_resource(), &name);
        crds.create(&PostParams::default(), &serde_json::from_value(crd)?)
            .await
            .with_context(|| format!("failed to create CRD {name}"))?;
        self.wait_established(&name).await
    }

    /// Waits until the CRD `name` is Established.
    pub async fn wait_established(&self, name: &str) -> anyhow::Result<()> {
        let crds: Api<DynamicObject> = Api::all_with(self.client(), &crd_resource());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let crd = crds.get(name).await?;
            let established = crd.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Established" && c["status"] == "True");
            if established {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("CRD {name} was not Established within 30s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Makes the server forget its change history up to now, so that a watch from any earlier
    /// resourceVersion is answered with 410 `Expired`: the sandbox drops its bounded history;
    /// the real control plane compacts etcd (kube-apiserver does so every 5 minutes by itself),
    /// which resources served without a watch cache, like Events, then report.
    pub async fn forget_history(&self) -> anyhow::Result<()> {
        match &self.history {
            History::Sandbox(api) => {
                api.store.compact();
                Ok(())
            }
            History::Real { netns } => compact_etcd(netns).await,
        }
    }

    /// Runs kubectl with this target's kubeconfig and a private discovery cache; returns
    /// (success, stdout, stderr).
    pub async fn kubectl(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> anyhow::Result<(bool, String, String)> {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig())
            .arg("--cache-dir")
            .arg(self.scratch().join("kubectl-cache"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .context("failed to run kubectl: it must be on PATH for the kubectl bodies")?;
        if let Some(text) = stdin
            && let Some(mut input) = child.stdin.take()
        {
            input.write_all(text.as_bytes()).await?;
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().await?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// kubectl that must succeed; its stdout.
    pub async fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let (success, out, err) = self.kubectl(args, stdin).await?;
        if !success {
            bail!("kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}");
        }
        Ok(out)
    }

    /// kubectl in the body's namespace that must succeed; its stdout.
    pub async fn kubectl_ns(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let mut full = vec!["-n", self.namespace()];
        full.extend_from_slice(args);
        self.kubectl_ok(&full, stdin).await
    }
}

impl Cleanup for Target {
    /// Deletes what the body left: its namespace and the cluster-scoped objects it registered.
    /// Returns what could not be deleted.
    async fn cleanup(&self) -> Vec<String> {
        let mut objects = self
            .cluster_objects
            .lock()
            .map(|mut o| std::mem::take(&mut *o))
            .unwrap_or_default();
        objects.push((namespace_resource(), self.namespace().to_owned()));
        let mut warnings = Vec::new();
        for (resource, name) in objects {
            let api: Api<DynamicObject> = Api::all_with(self.client(), &resource);
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => warnings.push(format!("failed to delete {} {name}: {e}", resource.kind)),
            }
        }
        warnings
    }
}

/// Compacts etcd to its current revision through its HTTP gateway, from inside the control
/// plane's network namespace.
async fn compact_etcd(netns: &str) -> anyhow::Result<()> {
    let url = |path: &str| {
        format!(
            "http://127.0.0.1:{}/v3/kv/{path}",
            initializer_controlplane::layout::ETCD_CLIENT_PORT
        )
    };
    let post = |path: String, body: String| {
        let netns = netns.to_string();
        async move {
            let out = tokio::process::Command::new("ip")
                .args([
                    "netns", "exec", &netns, "curl", "-sS", "-X", "POST", &path, "-d", &body,
                ])
                .output()
                .await
                .context("failed to run `ip netns exec ... curl` (needs iproute2 and curl)")?;
            if !out.status.success() {
                bail!(
                    "etcd request {path} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            let value: Value = serde_json::from_slice(&out.stdout)
                .with_context(|| format!("etcd answered {path} with something not JSON"))?;
            Ok(value)
        }
    };
    // Any range request reports the current revision in its header.
    let range = post(url("range"), json!({"key": "AA==", "limit": 1}).to_string()).await?;
    let revision = range["header"]["revision"]
        .as_str()
        .context("etcd reported no revision")?
        .to_string();
    let compacted = post(
        url("compaction"),
        json!({"revision": revision, "physical": true}).to_string(),
    )
    .await?;
    if compacted.get("header").is_none() {
        bail!("etcd refused the compaction: {compacted}");
    }
    Ok(())
}
