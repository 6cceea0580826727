//! What GitOps tools make of an Initializer, read from the Initializers as the API server serves
//! them: its health as kstatus judges it, the library of sigs.k8s.io/cli-utils that Flux, kpt and
//! cli-utils' apply use for any object, and as Argo CD judges it with the health check we ship
//! (`packaging/argocd`), run in gopher-lua as Argo CD runs it (`tools/health`, built from the Go
//! modules).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, ensure};
use initializer_crds::{Initializer, Phase};
use initializer_e2e::fixtures::Health;
use initializer_e2e::runner::Ctx;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::{ops, paths};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT};

/// The progress deadline the never-ready workload's Deployment is given (the default is ten
/// minutes), so that its deployment controller gives up within the scenario.
const PROGRESS_DEADLINE_SECONDS: i32 = 10;

/// kstatus calls a registered Initializer and a suspended one Current, one deploying
/// InProgress, one whose workload never became ready within its Deployment's progress deadline
/// Failed, and one the operator refused Failed; Argo CD's health check calls them Healthy,
/// Suspended, Progressing, Degraded and Degraded: what a GitOps tool waiting for health sees.
pub async fn gitops_tools_judge_each_phase_by_its_conditions(ctx: Ctx) -> anyhow::Result<()> {
    let judge = Judge {
        health: paths::built_by_script("tools/health/build.sh", "the health command").await?,
        argocd: paths::workspace_root().join(ARGOCD_HEALTH),
    };
    let client = ctx.client();
    let api = Api::<Initializer>::all(client.clone());

    let sidecar = common::registered_sidecar(&ctx, "healthy", Health::default()).await?;
    judge
        .judged(&api, &sidecar.name, ("Current", "Healthy"))
        .await?;
    api.patch(
        &sidecar.name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await?;
    ops::wait_phase(&client, &sidecar.name, Phase::Suspended, STEP_TIMEOUT).await?;
    judge
        .judged(&api, &sidecar.name, ("Current", "Suspended"))
        .await?;

    // An image no node can run: the workload never becomes ready.
    let workload_ns = common::workload_namespace(&ctx, "never-init").await?;
    let never = ctx.scope.name("never");
    let mut initializer = common::default_sidecar(&ctx, &never, &workload_ns)?;
    initializer.spec.image = Some("registry.invalid/initializer-never:0".to_string());
    ctx.scope.create_initializer(&initializer).await?;
    ops::wait_phase(&client, &never, Phase::Deploying, REGISTER_TIMEOUT).await?;
    judge
        .judged(&api, &never, ("InProgress", "Progressing"))
        .await?;
    // Its Deployment's deadline, shortened by another field manager than the operator's (which
    // leaves the field to the API server's default and so never puts it back).
    let deployments = Api::<Deployment>::namespaced(client.clone(), &workload_ns);
    wait::until(
        format!("the Deployment of {never}"),
        STEP_TIMEOUT,
        || async {
            Ok(match deployments.get_opt(&never).await? {
                Some(_) => Check::Done(()),
                None => Check::Pending("not created yet".to_string()),
            })
        },
    )
    .await?;
    deployments
        .patch(
            &never,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS}})),
        )
        .await?;
    let stalled = judge.judged(&api, &never, ("Failed", "Degraded")).await?;
    ensure!(
        stalled.kstatus.message.contains("never became ready")
            && stalled.argocd.message.contains("never became ready"),
        "both should quote the Stalled condition, which says the workload never became ready: {stalled:?}"
    );

    // A spec the operator refuses: its workload namespace was never allowed.
    let unlabelled_ns = ctx.scope.outside_namespace("refused-init").await?;
    let refused = ctx.scope.name("refused");
    let initializer = common::default_sidecar(&ctx, &refused, &unlabelled_ns)?;
    ctx.scope.create_initializer(&initializer).await?;
    ops::wait_phase(&client, &refused, Phase::Invalid, STEP_TIMEOUT).await?;
    let failed = judge.judged(&api, &refused, ("Failed", "Degraded")).await?;
    ensure!(
        failed.kstatus.message.contains("not labelled")
            && failed.argocd.message.contains("not labelled"),
        "both should quote why the spec was refused: {failed:?}"
    );
    eprintln!(
        "gitops: registered Current/Healthy; suspended Current/Suspended; deploying InProgress/Progressing; never ready past its {PROGRESS_DEADLINE_SECONDS} s deadline Failed/Degraded ({}); refused Failed/Degraded",
        stalled.kstatus.message
    );
    Ok(())
}

/// The Argo CD health check we ship, in Argo CD's resource-customization layout.
const ARGOCD_HEALTH: &str = "packaging/argocd/initializer.dev/Initializer/health.lua";

/// One tool's verdict.
#[derive(Debug, Deserialize)]
struct Verdict {
    status: String,
    message: String,
}

/// What the health command printed for one object.
#[derive(Debug, Deserialize)]
struct Judgement {
    kstatus: Verdict,
    argocd: Verdict,
}

/// The health command and the Argo CD health check it runs.
struct Judge {
    health: PathBuf,
    argocd: PathBuf,
}

impl Judge {
    /// Waits until kstatus and Argo CD's check judge the Initializer `name` as `expected`
    /// says (kstatus's status, Argo CD's), and returns their judgement.
    async fn judged(
        &self,
        api: &Api<Initializer>,
        name: &str,
        expected: (&str, &str),
    ) -> anyhow::Result<Judgement> {
        wait::until_every(
            format!(
                "kstatus to judge Initializer {name} {} and Argo CD {}",
                expected.0, expected.1
            ),
            Duration::from_millis(500),
            STEP_TIMEOUT,
            || async {
                let object = serde_json::to_vec(&api.get(name).await?)?;
                let judgement = self.judge(&object).await?;
                Ok(
                    if (
                        judgement.kstatus.status.as_str(),
                        judgement.argocd.status.as_str(),
                    ) == expected
                    {
                        Check::Done(judgement)
                    } else {
                        Check::Pending(format!("{judgement:?}"))
                    },
                )
            },
        )
        .await
    }

    /// Runs the health command on one object.
    async fn judge(&self, object: &[u8]) -> anyhow::Result<Judgement> {
        let mut child = tokio::process::Command::new(&self.health)
            .arg("-argocd")
            .arg(&self.argocd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("failed to run {}", self.health.display()))?;
        let mut stdin = child
            .stdin
            .take()
            .context("the health command has no stdin")?;
        stdin.write_all(object).await?;
        drop(stdin);
        let output = child.wait_with_output().await?;
        ensure!(
            output.status.success(),
            "the health command failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).with_context(|| {
            format!(
                "the health command printed {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }
}
