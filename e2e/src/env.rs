//! The environment every scenario shares: a backend with the operator installed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::backend::{Backend, BackendChoice};
use crate::cluster::ClusterBackend;
use crate::install::{self, OPERATOR_POD_SELECTOR};
use crate::paths;
use crate::real::RealBackend;
use crate::sandbox::SandboxBackend;

/// A backend with the operator installed.
pub struct Env {
    /// Where the scenarios run.
    pub backend: Arc<dyn Backend>,
    /// The operator's namespace.
    pub operator_namespace: String,
    /// How long starting the backend took.
    pub backend_startup: Duration,
    /// How long installing the operator took (until it was available).
    pub install_time: Duration,
}

impl Env {
    /// Starts (or connects to) the backend the environment asks for and installs the operator.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(BackendChoice::from_env()?).await
    }

    /// Starts (or connects to) the given backend and installs the operator.
    pub async fn start_with(choice: BackendChoice) -> anyhow::Result<Self> {
        let started = Instant::now();
        let backend: Arc<dyn Backend> = match choice {
            BackendChoice::Sandbox => {
                paths::require_binaries()?;
                Arc::new(SandboxBackend::start().await?)
            }
            BackendChoice::LegacySandbox => {
                paths::require_binaries()?;
                Arc::new(SandboxBackend::start_legacy().await?)
            }
            BackendChoice::Real => {
                paths::require_binaries()?;
                Arc::new(RealBackend::start().await?)
            }
            BackendChoice::Cluster { context, kind } => {
                paths::binary(initializer_crds::images::OPERATOR)?;
                Arc::new(ClusterBackend::connect(context, kind).await?)
            }
        };
        let backend_startup = started.elapsed();
        eprintln!(
            "e2e: {} ready in {:.2}s; kubeconfig: {}",
            backend.name(),
            backend_startup.as_secs_f64(),
            backend.kubeconfig_path().display()
        );
        let started = Instant::now();
        let operator_namespace =
            match install::install(&backend.client(), backend.kubeconfig_path()).await {
                Ok(namespace) => namespace,
                Err(err) => {
                    backend.shutdown().await;
                    return Err(err);
                }
            };
        // As an administrator who wants missed initializations counted
        // (`docs/src/install/permissions.md`):
        // the operator may list what the scenarios intercept.
        if let Err(err) = install::grant_counting(&backend.client(), &operator_namespace).await {
            backend.shutdown().await;
            return Err(err);
        }
        if let Err(err) =
            install::prepare_policy_canary(&backend.client(), &operator_namespace).await
        {
            backend.shutdown().await;
            return Err(err);
        }
        let install_time = started.elapsed();
        eprintln!(
            "e2e: operator installed, available in namespace {} after {:.2}s",
            operator_namespace,
            install_time.as_secs_f64()
        );
        Ok(Self {
            backend,
            operator_namespace,
            backend_startup,
            install_time,
        })
    }

    /// A client with cluster-admin rights.
    pub fn client(&self) -> Client {
        self.backend.client()
    }

    /// The kubeconfig a person can use to look around.
    pub fn kubeconfig_path(&self) -> &Path {
        self.backend.kubeconfig_path()
    }

    /// The operator's pods that are not being deleted.
    pub async fn operator_pods(&self) -> anyhow::Result<Vec<Pod>> {
        let list = Api::<Pod>::namespaced(self.client(), &self.operator_namespace)
            .list(&ListParams::default().labels(OPERATOR_POD_SELECTOR))
            .await
            .context("failed to list the operator's pods")?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect())
    }

    /// Stops the backend.
    pub async fn shutdown(&self) {
        self.backend.shutdown().await;
    }
}
