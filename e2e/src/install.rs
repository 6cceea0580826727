//! Installs the operator the way users do: from the bundle, with
//! `initializer-operator install --bundle bundles/initializer-operator` (the same command on the
//! sandbox and on kind; on kind, the release's bundle, `E2E_RELEASE`), or, with `E2E_INSTALL=helm`, through the Helm chart generated from that
//! bundle (`helm upgrade --install` with the real helm, built by `tools/helm/build.sh`). Either
//! way the same wait for the CRD and the operator's Deployment follows.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use initializer_crds::{constants, images};
use initializer_packaging::readiness::deployment_available;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use tokio::process::Command;

use crate::paths;
use crate::wait::{self, Check};

/// Name of the operator's Deployment (and binary, and image repository).
pub const OPERATOR_NAME: &str = images::OPERATOR;
/// Namespace the operator is installed into by default.
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "initializer-system";
/// Label selecting the operator's pods.
pub const OPERATOR_POD_SELECTOR: &str = "app.kubernetes.io/name=initializer-operator";
/// How long the operator may take to become available.
pub const INSTALL_TIMEOUT: Duration = Duration::from_secs(180);

/// Env var choosing how the suite installs the operator: `bundle` (the default) or `helm`.
pub const INSTALL_ENV: &str = "E2E_INSTALL";
/// Name of the Helm release the suite installs.
pub const HELM_RELEASE: &str = "initializer-operator";
/// Where the chart is, relative to the workspace root.
pub const CHART_DIR: &str = "charts/initializer-operator";

/// Whether the installed operator writes NetworkPolicies in front of initializers' pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkPolicies {
    /// The operator's default (`--network-policy=auto`): the bundle and the chart as they are.
    Default,
    /// None (`--network-policy=off`; the chart's `networkPolicy.enabled=false`).
    Off,
}

impl NetworkPolicies {
    /// The operator's environment for it, as `kubectl set env` takes it (`NAME-` unsets).
    pub const fn env(self) -> &'static str {
        match self {
            Self::Default => "NETWORK_POLICY-",
            Self::Off => "NETWORK_POLICY=off",
        }
    }
}

/// What the suite's install ([`install`]) writes: no NetworkPolicy. The scenarios that dial an
/// initializer's pod from elsewhere (the connection and body-flood attacks) test the SDK's own
/// defences, not a firewall's, and the others are timed without a route change per
/// registration. The network scenarios set `auto` themselves and put `off` back; OLM's install
/// and the upgrades run the operator's default.
pub const SUITE_NETWORK_POLICIES: NetworkPolicies = NetworkPolicies::Off;

/// How the operator is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstallMethod {
    /// `initializer-operator install --bundle`.
    Bundle,
    /// `helm upgrade --install` of the chart.
    Helm,
}

impl InstallMethod {
    /// Reads [`INSTALL_ENV`]; unset or empty means the bundle.
    pub fn from_env() -> anyhow::Result<Self> {
        Self::parse(std::env::var(INSTALL_ENV).ok().as_deref())
    }

    /// Parses a value of [`INSTALL_ENV`], refusing anything but `bundle` and `helm`.
    pub fn parse(value: Option<&str>) -> anyhow::Result<Self> {
        match value.map(str::trim) {
            None | Some("") | Some("bundle") => Ok(Self::Bundle),
            Some("helm") => Ok(Self::Helm),
            Some(other) => bail!("failed to read {INSTALL_ENV}={other:?}: use bundle or helm"),
        }
    }
}

/// Installs the operator (from the bundle, or through the chart with `E2E_INSTALL=helm`) into
/// the cluster `kubeconfig` points at, writing [`SUITE_NETWORK_POLICIES`], and waits until it
/// is available; returns the operator's namespace.
pub async fn install(client: &Client, kubeconfig: &Path) -> anyhow::Result<String> {
    match InstallMethod::from_env()? {
        InstallMethod::Bundle => {
            let bundle = paths::install_bundle_dir();
            if !bundle.join("manifests").is_dir() {
                bail!(
                    "failed to install the operator: no bundle at {} (run `make bundle`)",
                    bundle.display()
                );
            }
            install_from_bundle(&bundle, kubeconfig, SUITE_NETWORK_POLICIES).await?;
        }
        InstallMethod::Helm => {
            let chart = paths::workspace_root().join(CHART_DIR);
            if !chart.join("Chart.yaml").is_file() {
                bail!(
                    "failed to install the operator: no chart at {} (run `make bundle`)",
                    chart.display()
                );
            }
            install_with_helm(&chart, kubeconfig, SUITE_NETWORK_POLICIES).await?;
            eprintln!(
                "e2e: operator installed through the Helm chart {}",
                chart.display()
            );
        }
    }
    wait_available(client).await
}

/// The arguments of `helm upgrade --install` for the suite's release: the operator's namespace
/// (created when missing), the images the targets map (our registry, this version's tag) and
/// `policies`.
pub fn helm_install_args(
    chart: &Path,
    kubeconfig: &Path,
    policies: NetworkPolicies,
) -> Vec<String> {
    let image = |binary: &str| format!("{}/{binary}", images::REGISTRY);
    let mut args: Vec<String> = [
        "upgrade",
        "--install",
        HELM_RELEASE,
        &chart.display().to_string(),
        "--namespace",
        DEFAULT_OPERATOR_NAMESPACE,
        "--create-namespace",
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--timeout",
        &format!("{}s", INSTALL_TIMEOUT.as_secs()),
        "--set",
        &format!("image.repository={}", image(images::OPERATOR)),
        "--set",
        &format!("image.tag={}", images::TAG),
        "--set",
        &format!(
            "presetImage.repository={}",
            image(images::PRESET_INITIALIZER)
        ),
        "--set",
        &format!("presetImage.tag={}", images::TAG),
        "--set",
        &format!("policyCanaryNamespace={POLICY_CANARY_NAMESPACE}"),
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    if policies == NetworkPolicies::Off {
        args.extend(["--set".into(), "networkPolicy.enabled=false".into()]);
    }
    args
}

/// The helm binary, built from its Go module by `tools/helm/build.sh` (instant once built).
pub async fn helm_binary() -> anyhow::Result<std::path::PathBuf> {
    paths::built_by_script("tools/helm/build.sh", "helm").await
}

/// Runs `helm upgrade --install` of `chart` against `kubeconfig`, writing `policies`.
pub async fn install_with_helm(
    chart: &Path,
    kubeconfig: &Path,
    policies: NetworkPolicies,
) -> anyhow::Result<()> {
    let helm = helm_binary().await?;
    let args = helm_install_args(chart, kubeconfig, policies);
    let output = tokio::time::timeout(
        INSTALL_TIMEOUT,
        Command::new(&helm).args(&args).kill_on_drop(true).output(),
    )
    .await
    .with_context(|| {
        format!(
            "failed to install the operator: helm took over {}s",
            INSTALL_TIMEOUT.as_secs()
        )
    })?
    .with_context(|| format!("failed to run {}", helm.display()))?;
    if !output.status.success() {
        bail!(
            "failed to install the operator: `helm {}` exited with {}:\n{}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Runs `initializer-operator install --bundle DIR` against `kubeconfig`, telling the operator
/// where to prove a preset's policy and `policies` (`--env`, as the chart's values and a
/// Subscription's `config.env` would).
pub async fn install_from_bundle(
    bundle: &Path,
    kubeconfig: &Path,
    policies: NetworkPolicies,
) -> anyhow::Result<()> {
    let binary = paths::binary(images::OPERATOR)?;
    let mut command = Command::new(&binary);
    command
        .arg("install")
        .arg("--bundle")
        .arg(bundle)
        .arg("--env")
        .arg(format!("POLICY_CANARY_NAMESPACE={POLICY_CANARY_NAMESPACE}"));
    if policies == NetworkPolicies::Off {
        command.arg("--env").arg(policies.env());
    }
    let output = tokio::time::timeout(
        INSTALL_TIMEOUT,
        command
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
                Some(d) if deployment_available(&d) => Check::Done(
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

/// The namespace where the operator proves a preset's policy (the chart's
/// `policyCanaryNamespace`, set by [`helm_install_args`]).
pub const POLICY_CANARY_NAMESPACE: &str = "initializer-e2e-canary";
/// The label the canary namespace carries, and with it every namespace an engine scenario's
/// Initializer selects: the canary is in their scope and in no other scenario's.
pub const ENGINE_LABEL: &str = "e2e.initializer.dev/engine";

/// What an administrator does for the policy engine (`docs/src/guides/engine.md`): the
/// canary namespace, labelled [`ENGINE_LABEL`], and the bundle's ClusterRole
/// `initializer-operator-policy-canary` bound there to the operator's service account.
pub async fn prepare_policy_canary(
    client: &Client,
    operator_namespace: &str,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kube::api::{Patch, PatchParams};
    let params = PatchParams::apply("initializer-e2e").force();
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": POLICY_CANARY_NAMESPACE, "labels": {ENGINE_LABEL: "true"}},
    }))?;
    Api::<Namespace>::all(client.clone())
        .patch(POLICY_CANARY_NAMESPACE, &params, &Patch::Apply(&namespace))
        .await
        .context("failed to apply the policy canary namespace")?;
    let role = initializer_packaging::rbac::POLICY_CANARY_CLUSTER_ROLE;
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": role, "namespace": POLICY_CANARY_NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_NAME, "namespace": operator_namespace}],
    }))?;
    Api::<RoleBinding>::namespaced(client.clone(), POLICY_CANARY_NAMESPACE)
        .patch(role, &params, &Patch::Apply(&binding))
        .await
        .context("failed to bind the policy canary ClusterRole")?;
    Ok(())
}

/// The ClusterRole (and its binding) that lets the operator list what the scenarios intercept,
/// so that it can count missed initializations; the bundle does not grant it.
pub const COUNTING_ROLE: &str = "initializer-operator-count";

/// Grants the operator's service account in `operator_namespace` list on Deployments, Pods and
/// Secrets cluster-wide, as `docs/src/install/permissions.md` tells an administrator who wants
/// missed initializations counted (without it the count says `unchecked`).
pub async fn grant_counting(client: &Client, operator_namespace: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{Patch, PatchParams};
    let params = PatchParams::apply("initializer-e2e").force();
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": COUNTING_ROLE},
        "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["list"]},
        ],
    }))?;
    Api::<ClusterRole>::all(client.clone())
        .patch(COUNTING_ROLE, &params, &Patch::Apply(&role))
        .await
        .context("failed to apply the counting ClusterRole")?;
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": COUNTING_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COUNTING_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_NAME, "namespace": operator_namespace}],
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(COUNTING_ROLE, &params, &Patch::Apply(&binding))
        .await
        .context("failed to apply the counting ClusterRoleBinding")?;
    Ok(())
}

/// Removes what [`grant_counting`] made (the harness's own objects, which no uninstall of the
/// operator touches), so that a later install starts from an account bound only by its own
/// install.
pub async fn revoke_counting(client: &Client) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::DeleteParams;
    let gone = |result: Result<_, kube::Error>| match result {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err),
    };
    gone(
        Api::<ClusterRoleBinding>::all(client.clone())
            .delete(COUNTING_ROLE, &DeleteParams::default())
            .await
            .map(|_| ()),
    )
    .context("failed to delete the counting ClusterRoleBinding")?;
    gone(
        Api::<ClusterRole>::all(client.clone())
            .delete(COUNTING_ROLE, &DeleteParams::default())
            .await
            .map(|_| ()),
    )
    .context("failed to delete the counting ClusterRole")?;
    Ok(())
}

/// The operator's Deployment, wherever it was installed.
pub async fn operator_deployment(client: &Client) -> anyhow::Result<Option<Deployment>> {
    let api = Api::<Deployment>::all(client.clone());
    let named = |d: &Deployment| d.name_any() == OPERATOR_NAME;
    let params = ListParams::default();
    let found = crate::ops::list_matching(&api, &params, "Deployments", named).await?;
    Ok(found.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_install_method_is_the_bundle_unless_helm_is_asked_for() {
        assert_eq!(InstallMethod::parse(None).unwrap(), InstallMethod::Bundle);
        assert_eq!(
            InstallMethod::parse(Some("")).unwrap(),
            InstallMethod::Bundle
        );
        assert_eq!(
            InstallMethod::parse(Some("bundle")).unwrap(),
            InstallMethod::Bundle
        );
        assert_eq!(
            InstallMethod::parse(Some("helm")).unwrap(),
            InstallMethod::Helm
        );
        let err = InstallMethod::parse(Some("olm")).unwrap_err().to_string();
        assert!(
            err.contains("E2E_INSTALL=\"olm\"") && err.contains("bundle or helm"),
            "{err}"
        );
    }

    #[test]
    fn helm_installs_into_the_operators_namespace_with_the_images_the_targets_map() {
        let args = helm_install_args(Path::new("/c"), Path::new("/k"), NetworkPolicies::Off);
        let joined = args.join(" ");
        assert!(joined.starts_with("upgrade --install initializer-operator /c --namespace initializer-system --create-namespace --kubeconfig /k"), "{joined}");
        for set in [
            format!("image.repository={}", images::REGISTRY) + "/initializer-operator",
            format!("image.tag={}", images::TAG),
            format!("presetImage.repository={}", images::REGISTRY) + "/preset-initializer",
            format!("presetImage.tag={}", images::TAG),
            "networkPolicy.enabled=false".to_string(),
        ] {
            let at = args
                .iter()
                .position(|arg| *arg == set)
                .unwrap_or_else(|| panic!("{set} in {joined}"));
            assert_eq!(args[at - 1], "--set");
        }
        let default = helm_install_args(Path::new("/c"), Path::new("/k"), NetworkPolicies::Default);
        assert!(
            !default.iter().any(|arg| arg.starts_with("networkPolicy.")),
            "the chart's default: {default:?}"
        );
    }
}
