//! Installs the operator the way users do: from the bundle, with
//! `initializer-operator install --bundle bundles/initializer-operator` (the same command on the
//! sandbox and on kind).
//!
//! Until the bundle exists in the tree, the harness installs what the bundle would: the CRD from
//! `initializer-crds` and an operator Deployment with the operator's image, and says so.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use initializer_crds::{Initializer, constants, images};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::json;
use tokio::process::Command;

use crate::ops;
use crate::paths;
use crate::wait::{self, Check};

/// Name of the operator's Deployment (and binary, and image repository).
pub const OPERATOR_NAME: &str = images::OPERATOR;
/// Namespace the operator is installed into by default.
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "initializer-system";
/// Label selecting the operator's pods.
pub const OPERATOR_POD_SELECTOR: &str = "app.kubernetes.io/name=initializer-operator";
/// Field manager of the fallback install.
const FIELD_MANAGER: &str = "initializer-e2e";
/// How long the operator may take to become available.
pub const INSTALL_TIMEOUT: Duration = Duration::from_secs(180);

/// How the operator was installed.
#[derive(Clone, Debug)]
pub struct Installed {
    /// The operator's namespace.
    pub namespace: String,
    /// `bundle` or `fallback (no bundle yet)`.
    pub method: String,
}

/// Installs the operator into the cluster `kubeconfig` points at and waits until it is available.
pub async fn install(client: &Client, kubeconfig: &Path) -> anyhow::Result<Installed> {
    let bundle = paths::bundle_dir();
    let method = if bundle.join("manifests").is_dir() {
        install_from_bundle(&bundle, kubeconfig).await?;
        "bundle".to_string()
    } else {
        install_fallback(client).await?;
        format!("fallback: no bundle at {} yet", bundle.display())
    };
    let namespace = wait_available(client).await?;
    Ok(Installed { namespace, method })
}

/// Runs `initializer-operator install --bundle DIR` against `kubeconfig`.
pub async fn install_from_bundle(bundle: &Path, kubeconfig: &Path) -> anyhow::Result<()> {
    let binary = paths::binary(images::OPERATOR)?;
    let output = tokio::time::timeout(
        INSTALL_TIMEOUT,
        Command::new(&binary)
            .arg("install")
            .arg("--bundle")
            .arg(bundle)
            .env("KUBECONFIG", kubeconfig)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .with_context(|| {
        format!(
            "failed to install the operator: `install --bundle` took over {}s",
            INSTALL_TIMEOUT.as_secs()
        )
    })?
    .with_context(|| format!("failed to run {}", binary.display()))?;
    if !output.status.success() {
        bail!(
            "failed to install the operator: `{} install --bundle {}` exited with {}:\n{}{}",
            binary.display(),
            bundle.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Installs the CRD and an operator Deployment directly (until the bundle lands).
pub async fn install_fallback(client: &Client) -> anyhow::Result<()> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let crd = Initializer::crd();
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(constants::CRD_NAME, &apply, &Patch::Apply(&crd))
        .await
        .context("failed to apply the Initializer CRD")?;
    let namespace = DEFAULT_OPERATOR_NAMESPACE;
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace},
    }))?;
    Api::<Namespace>::all(client.clone())
        .patch(namespace, &apply, &Patch::Apply(&ns))
        .await
        .context("failed to apply the operator's namespace")?;
    let account: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": OPERATOR_NAME, "namespace": namespace},
    }))?;
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .patch(OPERATOR_NAME, &apply, &Patch::Apply(&account))
        .await
        .context("failed to apply the operator's service account")?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{OPERATOR_NAME}-e2e")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_NAME, "namespace": namespace}],
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&binding.name_any(), &apply, &Patch::Apply(&binding))
        .await
        .context("failed to apply the operator's role binding")?;
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": OPERATOR_NAME, "namespace": namespace},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app.kubernetes.io/name": OPERATOR_NAME}},
            "template": {
                "metadata": {"labels": {
                    "app.kubernetes.io/name": OPERATOR_NAME,
                    constants::EXCLUDE_LABEL: constants::EXCLUDE_LABEL_VALUE,
                }},
                "spec": {
                    "serviceAccountName": OPERATOR_NAME,
                    "containers": [{
                        "name": OPERATOR_NAME,
                        "image": images::image(images::OPERATOR),
                        "args": ["run", "--preset-image", images::image(images::PRESET_INITIALIZER)],
                        "env": [
                            {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
                            {"name": "POD_NAME", "valueFrom": field("metadata.name")},
                            {"name": constants::POD_IP_ENV, "valueFrom": field("status.podIP")},
                            {"name": "RUST_LOG", "value": "info"},
                        ],
                    }],
                },
            },
        },
    }))?;
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .patch(OPERATOR_NAME, &apply, &Patch::Apply(&deployment))
        .await
        .context("failed to apply the operator's Deployment")?;
    Ok(())
}

/// Waits until the CRD serves and the operator's Deployment is available; returns the
/// operator's namespace.
pub async fn wait_available(client: &Client) -> anyhow::Result<String> {
    wait::until(
        "the Initializer CRD to be established",
        INSTALL_TIMEOUT,
        || async {
            let crd = Api::<CustomResourceDefinition>::all(client.clone())
                .get_opt(constants::CRD_NAME)
                .await?;
            let established = crd
                .as_ref()
                .and_then(|c| c.status.as_ref())
                .is_some_and(|s| {
                    s.conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            Ok(if established {
                Check::Done(())
            } else {
                Check::Pending(format!("CRD present: {}", crd.is_some()))
            })
        },
    )
    .await?;
    wait::until(
        "the operator's Deployment to be available",
        INSTALL_TIMEOUT,
        || async {
            let deployment = operator_deployment(client).await?;
            Ok(match deployment {
                Some(d) if ops::deployment_available(&d) => Check::Done(
                    d.namespace()
                        .unwrap_or_else(|| DEFAULT_OPERATOR_NAMESPACE.to_string()),
                ),
                Some(d) => Check::Pending(format!("status {:?}", d.status)),
                None => Check::Pending(format!(
                    "no Deployment named {OPERATOR_NAME} in any namespace"
                )),
            })
        },
    )
    .await
}

/// The operator's Deployment, wherever it was installed.
pub async fn operator_deployment(client: &Client) -> anyhow::Result<Option<Deployment>> {
    let list = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("failed to list Deployments")?;
    Ok(list
        .items
        .into_iter()
        .find(|d| d.name_any() == OPERATOR_NAME))
}
