//! The environment every scenario shares: a target with the operator installed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::cluster::ClusterTarget;
use crate::install::{self, OPERATOR_POD_SELECTOR};
use crate::paths;
use crate::real::RealTarget;
use crate::sandbox::SandboxTarget;
use crate::target::{Target, TargetChoice};

/// A target with the operator installed.
pub struct Env {
    /// Where the scenarios run.
    pub target: Arc<dyn Target>,
    /// The operator's namespace.
    pub operator_namespace: String,
    /// How long starting the target took.
    pub target_startup: Duration,
    /// How long installing the operator took (until it was available).
    pub install_time: Duration,
}

impl Env {
    /// Starts (or connects to) the target the environment asks for and installs the operator.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(TargetChoice::from_env()?).await
    }

    /// Starts (or connects to) the given target and installs the operator.
    pub async fn start_with(choice: TargetChoice) -> anyhow::Result<Self> {
        let started = Instant::now();
        let target: Arc<dyn Target> = match choice {
            TargetChoice::Sandbox => {
                paths::require_binaries()?;
                Arc::new(SandboxTarget::start().await?)
            }
            TargetChoice::LegacySandbox => {
                paths::require_binaries()?;
                Arc::new(SandboxTarget::start_legacy().await?)
            }
            TargetChoice::Real => {
                paths::require_binaries()?;
                Arc::new(RealTarget::start().await?)
            }
            TargetChoice::Cluster { context, kind } => {
                paths::binary(initializer_crds::images::OPERATOR)?;
                Arc::new(ClusterTarget::connect(context, kind).await?)
            }
        };
        let target_startup = started.elapsed();
        eprintln!(
            "e2e: {} ready in {:.2}s; kubeconfig: {}",
            target.name(),
            target_startup.as_secs_f64(),
            target.kubeconfig_path().display()
        );
        let started = Instant::now();
        let operator_namespace =
            match install::install(&target.client(), target.kubeconfig_path()).await {
                Ok(namespace) => namespace,
                Err(err) => {
                    target.shutdown().await;
                    return Err(err);
                }
            };
        // As an administrator who wants missed initializations counted
        // (`docs/src/install/permissions.md`):
        // the operator may list what the scenarios intercept.
        if let Err(err) = install::grant_counting(&target.client(), &operator_namespace).await {
            target.shutdown().await;
            return Err(err);
        }
        if let Err(err) =
            install::prepare_policy_canary(&target.client(), &operator_namespace).await
        {
            target.shutdown().await;
            return Err(err);
        }
        let install_time = started.elapsed();
        eprintln!(
            "e2e: operator installed, available in namespace {} after {:.2}s",
            operator_namespace,
            install_time.as_secs_f64()
        );
        Ok(Self {
            target,
            operator_namespace,
            target_startup,
            install_time,
        })
    }

    /// A client with cluster-admin rights.
    pub fn client(&self) -> Client {
        self.target.client()
    }

    /// The kubeconfig a person can use to look around.
    pub fn kubeconfig_path(&self) -> &Path {
        self.target.kubeconfig_path()
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

    /// Stops the target.
    pub async fn shutdown(&self) {
        self.target.shutdown().await;
    }
}
