//! The `initializer-operator` binary installed from the committed bundle onto the sandbox runs:
//! it takes an Initializer under its finalizer, and uninstall removes it, its pods and every
//! webhook configuration. (The installer's own behaviour is tested in `initializer-packaging`.)

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use initializer_crds::{Initializer, constants, images};
use initializer_packaging::bundle::{self, Bundle};
use initializer_packaging::install::{self, InstallPlan, UninstallArgs};
use initializer_packaging::readiness::deployment_available;
use initializer_sandbox::{Sandbox, SandboxConfig};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use tokio::time::Instant;

const NAMESPACE: &str = "initializer-system";
const OPERATOR: &str = "initializer-operator";

fn committed_plan() -> InstallPlan {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(bundle::BUNDLE_DIR);
    install::plan(&Bundle::read(&dir).unwrap(), NAMESPACE).unwrap()
}

async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_some()
}

/// Uninstall everything, Initializers included.
fn uninstall_args() -> UninstallArgs {
    let mut args = UninstallArgs::new(NAMESPACE);
    args.delete_initializers = true;
    args.timeout = 30;
    args
}

#[tokio::test]
async fn bundle_installs_a_running_operator_on_the_sandbox_and_uninstalls_it() {
    let dir = tempfile::tempdir().unwrap();
    let image_map = dir.path().join("images.yaml");
    std::fs::write(
        &image_map,
        format!(
            "{}/{}: {}\n",
            images::REGISTRY,
            images::OPERATOR,
            env!("CARGO_BIN_EXE_initializer-operator")
        ),
    )
    .unwrap();
    let mut config = SandboxConfig::new(dir.path().join("state"));
    config.image_map = Some(image_map);
    let sandbox = Sandbox::start(config).await.unwrap();
    let client = sandbox.client();

    install::install(client.clone(), &committed_plan(), Duration::from_secs(120))
        .await
        .unwrap();
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get(OPERATOR)
        .await
        .unwrap();
    assert!(deployment_available(&deployment));
    // An Initializer the running operator takes under its finalizer.
    let initializers = Api::<Initializer>::all(client.clone());
    let sidecar: Initializer = serde_saphyr::from_str(bundle::generate::SIDECAR_EXAMPLE).unwrap();
    initializers
        .create(&PostParams::default(), &sidecar)
        .await
        .unwrap();
    let finalized = Instant::now() + Duration::from_secs(60);
    loop {
        let current = initializers.get("sidecar").await.unwrap();
        if current
            .finalizers()
            .iter()
            .any(|f| f == constants::FINALIZER)
        {
            break;
        }
        assert!(
            Instant::now() < finalized,
            "the operator never added its finalizer"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut args = uninstall_args();
    args.timeout = 90;
    install::uninstall(client.clone(), &args).await.unwrap();
    assert!(
        !exists(&initializers, "sidecar").await,
        "cleaned up by the operator"
    );
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE);
    assert!(!exists(&deployments, OPERATOR).await);
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/name=initializer-operator"))
        .await
        .unwrap();
    assert!(
        pods.items.is_empty(),
        "operator pods are gone before uninstall returns"
    );
    let webhooks = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        webhooks.items.is_empty(),
        "no webhook configuration is left"
    );
    sandbox.shutdown().await;
}
