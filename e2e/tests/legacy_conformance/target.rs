//! What a body runs against: an admin client, a kubeconfig for child processes, a fresh
//! namespace and unique names, on either backend (as `e2e/tests/conformance/target.rs` does,
//! without its etcd compaction; the names come from `initializer_e2e::conformance`).
//! Configurations are cluster-wide and the 1.13 server is shared by every body, so each one a body creates is
//! deleted after it, and the next body starts only once the plugin has re-read them.

use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, bail};
use initializer_e2e::conformance::{
    BodyScope, Cleanup, Scoped, delete, namespace_for, post, random_suffix,
};

use serde_json::json;

use crate::support::{CONFIGURATIONS, SETTLE};

/// One body's view of a server.
pub struct Target {
    scope: BodyScope,
    label: &'static str,
    unprivileged: Option<kube::Client>,
    configurations: Mutex<Vec<String>>,
}

impl Scoped for Target {
    fn scope(&self) -> &BodyScope {
        &self.scope
    }
}

impl Target {
    /// Creates the body's namespace and returns its target.
    pub async fn prepare(
        label: &'static str,
        client: kube::Client,
        unprivileged: Option<kube::Client>,
        kubeconfig: &Path,
        body: &str,
    ) -> anyhow::Result<Self> {
        let suffix = random_suffix();
        let namespace = namespace_for(body, &suffix);
        let (code, answer) = post(
            &client,
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
        .await?;
        if code != 201 {
            bail!("failed to create the test namespace {namespace}: {code} {answer}");
        }
        let scratch = tempfile::Builder::new()
            .prefix("initializer-legacy-conformance")
            .tempdir()
            .context("failed to create a scratch directory")?;
        Ok(Self {
            scope: BodyScope::new(client, kubeconfig, namespace, suffix, scratch),
            label,
            unprivileged,
            configurations: Mutex::new(Vec::new()),
        })
    }

    /// Which backend this is, `sandbox` or `1.13` (for the SDK bodies' process logs, never for
    /// behaviour).
    pub fn label(&self) -> &'static str {
        self.label
    }

    /// A client of a user in no group (1.13 only: the sandbox has no authorization).
    pub fn unprivileged(&self) -> anyhow::Result<kube::Client> {
        self.unprivileged
            .clone()
            .context("this backend has no unprivileged user")
    }

    /// Deletes the configuration `name` after the body, whatever its outcome.
    pub fn delete_afterwards(&self, name: &str) {
        if let Ok(mut names) = self.configurations.lock() {
            names.push(name.to_owned());
        }
    }
}

impl Cleanup for Target {
    /// Deletes the body's configurations (then waits for the plugin to forget them) and its
    /// namespace. Returns what could not be deleted. The 1.13 server has no namespace
    /// controller, so its namespaces stay Terminating with their objects: harmless, they are
    /// in no later body's way.
    async fn cleanup(&self) -> Vec<String> {
        let names = self
            .configurations
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default();
        let mut warnings = Vec::new();
        for name in &names {
            match delete(&self.client(), &format!("{CONFIGURATIONS}/{name}")).await {
                Ok((200 | 404, _)) => {}
                Ok((code, body)) => {
                    warnings.push(format!(
                        "failed to delete configuration {name}: {code} {body}"
                    ));
                }
                Err(e) => warnings.push(format!("failed to delete configuration {name}: {e:#}")),
            }
        }
        if !names.is_empty() {
            tokio::time::sleep(SETTLE).await;
        }
        match delete(
            &self.client(),
            &format!("/api/v1/namespaces/{}", self.namespace()),
        )
        .await
        {
            Ok((200 | 202 | 404, _)) => {}
            Ok((code, body)) => warnings.push(format!(
                "failed to delete namespace {}: {code} {body}",
                self.namespace()
            )),
            Err(e) => warnings.push(format!(
                "failed to delete namespace {}: {e:#}",
                self.namespace()
            )),
        }
        warnings
    }
}
