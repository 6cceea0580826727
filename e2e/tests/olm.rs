//! OLM installs, upgrades and removes the operator for real, on the real control plane (etcd,
//! kube-apiserver and kube-controller-manager from the Go modules, our node agent), with `olm`,
//! `catalog` and `opm` built from their modules (`make olm`). Each test starts a control plane
//! of its own and prints its figures as a table (`make e2e-olm`):
//!
//! - install: catalog → Subscription → InstallPlan → CSV `Succeeded` → the book's example
//!   Initializer registered, the operator running under the RBAC OLM generated from the CSV;
//!   the window between the CRD being established and the operator's guard policy in force;
//! - upgrade under load: the example Initializer (`failurePolicy: Fail`) registered, an
//!   annotated Deployment created every 100 ms while OLM replaces the operator with the next
//!   version (a bundle generated from the committed one, `replaces` in the channel): no create
//!   fails, the Initializer never leaves `Registered`, the old CSV is gone, the new one
//!   `Succeeded`, and the new operator reconciles the next generation. The same upgrade through
//!   `helm upgrade` and through `install --bundle` of the next bundle, in tests of their own,
//!   each of which first installs with the example applied beside the install every 200 ms (as
//!   a GitOps sync of both does): the CRD must come no sooner than the guard is in force, and
//!   the example must be deployed as created, never held back;
//! - removal: the book's commands (`docs/src/install/uninstall.md`), then no webhook
//!   configuration of ours, only the guard policy the book says remains, and creates in a
//!   matching namespace succeed.
//!
//! They need root (the control plane's network namespace), the binaries of `cargo build
//! --workspace --bins`, `make controlplane helm olm`, and kubectl: a plain `cargo test` lists
//! them as ignored, and `make e2e-olm` runs them (`--ignored`, but for the two that run on kind).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use initializer_crds::{Initializer, InitializerStatus, Phase};
use initializer_e2e::fixtures::{has_sidecar, nginx_deployment};
use initializer_e2e::install::{self, NetworkPolicies, OPERATOR_NAME, OPERATOR_POD_SELECTOR};
use initializer_e2e::load::{self, CreateLoad};
use initializer_e2e::olm::{self, CatalogSource, Entry, Olm, Tools};
use initializer_e2e::real::RealTarget;
use initializer_e2e::sharing::{self, Share};
use initializer_e2e::target::Target;
use initializer_e2e::timings::CreateCount;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::watch::Recorder;
use initializer_e2e::{ops, paths, release, scope};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// The book's example Initializer (`docs/src/guides/initializer-api.md`), the one the bundle
/// offers (alm-examples).
const EXAMPLE: &str = "examples/sidecar-initializer.yaml";
const EXAMPLE_NAME: &str = "sidecar";
/// The operator's guard on Initializers (operator/src/guard.rs), policy and binding.
const GUARD: &str = "initializer-operator-guard";
/// How long after its binding's creation (whole seconds) the operator takes the guard to be in
/// force.
const IN_FORCE_AFTER: Duration = initializer_packaging::guard::IN_FORCE_AFTER;
/// How long OLM may take to install or replace the operator.
const OLM_TIMEOUT: Duration = Duration::from_secs(300);
/// How often the load creates.
const CREATE_EVERY: Duration = Duration::from_millis(100);

/// One scenario's figures.
#[derive(Default)]
struct Row {
    scenario: String,
    subscription_to_succeeded: Option<Duration>,
    subscription_to_registered: Option<Duration>,
    guard_window: Option<Duration>,
    example_after_guard: Option<Duration>,
    next_only: Option<Duration>,
    upgrade: Option<Duration>,
    creates: Option<CreateCount>,
    phases: Option<String>,
    removal: Option<Duration>,
}

fn table(rows: &[Row]) -> String {
    let headers = [
        "scenario",
        "subscription→CSV Succeeded",
        "subscription→registered",
        "CRD established→guard in force",
        "guard's binding→example created (server clock)",
        "upgrade: trigger→only the next operator ready",
        "upgrade: trigger→done",
        "failed creates",
        "Initializer phases during upgrade",
        "removal",
    ];
    let secs = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.2}s", d.as_secs_f64()));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            vec![
                row.scenario.clone(),
                secs(row.subscription_to_succeeded),
                secs(row.subscription_to_registered),
                secs(row.guard_window),
                secs(row.example_after_guard),
                secs(row.next_only),
                secs(row.upgrade),
                row.creates
                    .map_or("-".into(), |c| format!("{}/{}", c.failed, c.total)),
                row.phases.clone().unwrap_or_else(|| "-".into()),
                secs(row.removal),
            ]
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(headers.len()));
    for line in cells {
        let _ = writeln!(out, "| {} |", line.join(" | "));
    }
    out
}

/// Runs `body` on a fresh real control plane (the suite's lock held), always stopping it, and
/// prints the rows the body returns.
fn on_real_control_plane<F, Fut>(body: F)
where
    F: FnOnce(std::sync::Arc<RealTarget>) -> Fut,
    Fut: Future<Output = anyhow::Result<Vec<Row>>>,
{
    let _turn = sharing::take(Share::Shared, "the OLM suite").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        paths::require_binaries().unwrap();
        let target = std::sync::Arc::new(RealTarget::start().await.unwrap());
        let result = body(target.clone()).await;
        target.shutdown().await;
        match result {
            Ok(rows) => eprintln!("\n{}", table(&rows)),
            Err(err) => panic!("{err:?}"),
        }
    });
}

#[test]
#[ignore = "needs root, the real control plane, helm and OLM built from Go, and kubectl: make e2e-olm"]
fn olm_installs_upgrades_under_load_and_removes_the_operator() {
    on_real_control_plane(|target| async move {
        let tools = Tools::build().await?;
        let client = target.client();
        let kubeconfig = target.kubeconfig_path().to_path_buf();
        // The bundle ships a PrometheusRule and a ServiceMonitor, and OLM installs every object
        // of a bundle: the cluster needs prometheus-operator's CRDs (`docs/src/install/olm.md`).
        run(
            &kubeconfig,
            &format!(
                "kubectl apply --server-side -f {}",
                tools.monitoring_crds().display()
            ),
        )
        .await?;
        let mut olm = Olm::start(&client, &kubeconfig, tools).await?;
        eprintln!("olm: state in {}", olm.state_dir().display());
        let result = olm_scenarios(&client, &kubeconfig, &mut olm).await;
        if result.is_err() {
            // The processes' own words are what explains a failure here.
            let _ = olm.check().map_err(|err| eprintln!("olm: {err:?}"));
            for log in ["olm.log", "catalog.log"] {
                let text = std::fs::read_to_string(olm.state_dir().join(log)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                eprintln!(
                    "--- last lines of {log}:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        }
        olm.stop().await;
        result
    });
}

async fn olm_scenarios(
    client: &Client,
    kubeconfig: &Path,
    olm: &mut Olm,
) -> anyhow::Result<Vec<Row>> {
    let committed = paths::bundle_dir();
    let next_dir = tempfile::tempdir()?;
    let next = next_dir.path().join("initializer-operator");
    olm::next_bundle(&committed, &next)?;
    let first = Entry {
        bundle: committed,
        version: olm::VERSION.into(),
        replaces: None,
    };
    olm.serve(std::slice::from_ref(&first)).await?;

    let mut rows = Vec::new();
    let example = paths::workspace_root().join(EXAMPLE);
    rows.push(
        olm_install(
            client,
            kubeconfig,
            CatalogSource::Address(&olm.address()),
            olm::VERSION,
            &example,
        )
        .await?,
    );
    olm.check()?;

    let entries = [
        first,
        Entry {
            bundle: next,
            version: olm::NEXT_VERSION.into(),
            replaces: Some(olm::csv_name(olm::VERSION)),
        },
    ];
    // A new catalog, as a catalog image rolled to its next tag: OLM re-resolves the
    // Subscription on reconnect (or at its resync) and replaces the CSV.
    let next_image = format!(":{}", olm::NEXT_VERSION);
    let mut row = upgrade_under_load(
        client,
        "upgrade_by_olm_under_load_loses_no_create",
        &next_image,
        Through::Registered,
        olm.serve(&entries),
        || csv_replaced(client, olm::VERSION, olm::NEXT_VERSION),
    )
    .await?;
    olm.check()?;
    row.scenario = "upgrade_by_olm_under_load_loses_no_create".into();
    rows.push(row);

    rows.push(olm_removal(client, kubeconfig).await?);
    olm.check()?;
    Ok(rows)
}

/// The book's subscription (`docs/src/install/olm.md`), applied as it is with the catalog at
/// `source`, until the CSV of `version` succeeds; then `example` applied; figures up to the
/// example registered.
async fn olm_install(
    client: &Client,
    kubeconfig: &Path,
    source: CatalogSource<'_>,
    version: &str,
    example: &Path,
) -> anyhow::Result<Row> {
    let started = Instant::now();
    olm::kubectl_apply(kubeconfig, &olm::subscription_yaml(source)).await?;
    // When the CRD is established and when the guard is in force, seen from here every 50 ms.
    let window = tokio::spawn(guard_window(client.clone(), started));
    let csvs = olm::olm_api(
        client,
        "ClusterServiceVersion",
        Some(olm::OPERATOR_NAMESPACE),
    );
    let name = olm::csv_name(version);
    let succeeded = wait::until(format!("CSV {name} to succeed"), OLM_TIMEOUT, || async {
        let csv = csvs.get_opt(&name).await?;
        Ok(match csv.as_ref().and_then(olm::csv_phase) {
            Some(phase) if phase == "Succeeded" => Check::Done(Instant::now()),
            phase => Check::Pending(format!(
                "CSV phase {phase:?}; {}",
                subscription_state(client).await
            )),
        })
    })
    .await?;
    run(
        kubeconfig,
        &format!("kubectl apply -f {}", example.display()),
    )
    .await?;
    let (_, registered) =
        ops::wait_registered(client, EXAMPLE_NAME, Duration::from_secs(120)).await?;
    // A release before this one wrote no NetworkPolicy by default (its upgrade checks this
    // one's).
    if version == olm::VERSION {
        wait::until(
            "the operator's default NetworkPolicy in front of the example",
            Duration::from_secs(60),
            || async {
                Ok(match default_network_policy_pending(client).await? {
                    None => Check::Done(()),
                    Some(pending) => Check::Pending(pending),
                })
            },
        )
        .await?;
    }
    let (crd_at, guard_at) = tokio::time::timeout(Duration::from_secs(60), window)
        .await
        .context("the guard never came in force")???;
    ensure_olm_rbac(client, version).await?;
    eprintln!(
        "olm: CRD established {:.2}s after the Subscription, guard in force {:.2}s after",
        (crd_at - started).as_secs_f64(),
        (guard_at - started).as_secs_f64()
    );
    Ok(Row {
        scenario: "olm_installs_the_operator_and_the_example_registers".into(),
        subscription_to_succeeded: Some(succeeded - started),
        subscription_to_registered: Some(registered - started),
        guard_window: Some(guard_at.saturating_duration_since(crd_at)),
        ..Row::default()
    })
}

/// What keeps the operator's default (`--network-policy=auto`, which neither the Subscription
/// nor the bundle or the chart sets) from being in force for the example: `None` once its
/// NetworkPolicy admits exactly the API server's addresses, as the cluster lists them, and the
/// Initializer is `Registered` (its route proven through the policy).
async fn default_network_policy_pending(client: &Client) -> anyhow::Result<Option<String>> {
    let api_server = ops::api_server_addresses(client).await?;
    let admitted: Vec<Vec<String>> = ops::network_policies_of(client, EXAMPLE_NAME)
        .await?
        .iter()
        .map(|policy| {
            let mut ranges = ops::admitted_ranges(policy);
            ranges.sort();
            ranges
        })
        .collect();
    if admitted != [api_server.clone()] {
        return Ok(Some(format!(
            "the example's NetworkPolicies admit {admitted:?}, not the API server's {api_server:?}"
        )));
    }
    let initializer = Api::<Initializer>::all(client.clone())
        .get(EXAMPLE_NAME)
        .await?;
    let status = initializer.status.clone().unwrap_or_default();
    Ok(
        if status.phase == Some(Phase::Registered) && status.registered == Some(true) {
            None
        } else {
            Some(ops::describe(&initializer))
        },
    )
}

async fn subscription_state(client: &Client) -> String {
    let subs = olm::olm_api(client, "Subscription", Some(olm::OPERATOR_NAMESPACE));
    match subs.get_opt(olm::PACKAGE).await {
        Ok(Some(sub)) => format!(
            "Subscription state {:?}, conditions {}",
            sub.data["status"]["state"].as_str(),
            sub.data["status"]["conditions"]
        ),
        other => format!("Subscription: {other:?}"),
    }
}

/// Polls until the Initializer CRD is established and the guard's binding exists; returns both
/// instants.
async fn guard_window(client: Client, since: Instant) -> anyhow::Result<(Instant, Instant)> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client);
    let (mut crd_at, mut guard_at) = (None, None);
    while since.elapsed() < OLM_TIMEOUT {
        if crd_at.is_none()
            && let Ok(Some(crd)) = crds.get_opt(initializer_crds::constants::CRD_NAME).await
            && crd
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.type_ == "Established" && c.status == "True")
        {
            crd_at = Some(Instant::now());
        }
        if guard_at.is_none()
            && matches!(bindings.get_opt(GUARD).await, Ok(Some(_)))
            && matches!(policies.get_opt(GUARD).await, Ok(Some(_)))
        {
            guard_at = Some(Instant::now());
        }
        if let (Some(crd), Some(guard)) = (crd_at, guard_at) {
            return Ok((crd, guard));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("CRD established at {crd_at:?}, guard at {guard_at:?} after {OLM_TIMEOUT:?}")
}

/// The operator runs under the RBAC OLM generated from the CSV of `version`: every binding of
/// its service account is OLM's for that CSV (`olm.owner`), none the installer's or Helm's.
async fn ensure_olm_rbac(client: &Client, version: &str) -> anyhow::Result<()> {
    let account = scope::OPERATOR_ACCOUNT;
    let ours = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == account
                && s.namespace.as_deref() == Some(olm::OPERATOR_NAMESPACE)
        })
    };
    let cluster: Vec<ClusterRoleBinding> = Api::<ClusterRoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|b| ours(&b.subjects))
        .collect();
    let namespaced: Vec<RoleBinding> =
        Api::<RoleBinding>::namespaced(client.clone(), olm::OPERATOR_NAMESPACE)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|b| ours(&b.subjects))
            .collect();
    ensure!(
        !cluster.is_empty() && !namespaced.is_empty(),
        "no bindings for the operator's account: {} cluster, {} namespaced",
        cluster.len(),
        namespaced.len()
    );
    let names = |labels: Vec<(String, Option<String>)>| {
        labels
            .into_iter()
            .filter(|(_, owner)| owner.as_deref() != Some(&olm::csv_name(version)))
            .map(|(name, owner)| format!("{name} (olm.owner {owner:?})"))
            .collect::<Vec<_>>()
    };
    let foreign = names(
        cluster
            .iter()
            .map(|b| (b.name_any(), b.labels().get("olm.owner").cloned()))
            .chain(
                namespaced
                    .iter()
                    .map(|b| (b.name_any(), b.labels().get("olm.owner").cloned())),
            )
            .collect(),
    );
    ensure!(
        foreign.is_empty(),
        "bindings of the operator's account not made by OLM for the CSV: {foreign:?}"
    );
    let deployment = install::operator_deployment(client)
        .await?
        .context("no operator Deployment")?;
    ensure!(
        deployment.labels().get("olm.owner").map(String::as_str)
            == Some(olm::csv_name(version).as_str()),
        "the operator's Deployment is not OLM's: labels {:?}",
        deployment.labels()
    );
    eprintln!(
        "olm: the operator's account is bound by OLM's {} ClusterRoleBinding(s) and {} RoleBinding(s)",
        cluster.len(),
        namespaced.len()
    );
    Ok(())
}

/// What explains a Deployment OLM did not remove once its CSV was deleted (the one named
/// [`OPERATOR_NAME`] in `namespace`): who owns it, which CSVs and InstallPlans are left (their UIDs
/// against the owner's), and the state and last words of the controller manager, whose garbage
/// collector deletes a CSV's dependents.
fn removal_diagnostics(namespace: &str) -> String {
    format!(
        "\
kubectl get deployment -n {namespace} {OPERATOR_NAME} \\
  -o jsonpath='owners: {{.metadata.ownerReferences}}{{\"\\n\"}}deletion: {{.metadata.deletionTimestamp}} finalizers: {{.metadata.finalizers}}{{\"\\n\"}}' || true
kubectl get csv,installplan,subscription -A \\
  -o custom-columns=KIND:.kind,NAMESPACE:.metadata.namespace,NAME:.metadata.name,UID:.metadata.uid,PHASE:.status.phase,DELETION:.metadata.deletionTimestamp \\
  | head -n 40 || true
kubectl get pods -n kube-system -o wide || true
kubectl get lease -n kube-system kube-controller-manager \\
  -o jsonpath='controller manager lease: {{.spec}}{{\"\\n\"}}' || true
kubectl logs -n kube-system -l component=kube-controller-manager --tail=2000 \\
  | grep -i -E 'garbage|graph_builder|leader' | tail -n 40 || true
kubectl logs -n kube-system -l component=kube-controller-manager --tail=20 || true
kubectl logs -n kube-system -l component=kube-controller-manager --previous --tail=20 || true
"
    )
}

/// Kubernetes' garbage collector deletes a CSV's Deployment when it sees the CSV go, and it sees
/// that only once it watches CSVs: kube-controller-manager learns new resource types at its
/// discovery sync, every 30 s. A CSV deleted before then is, to the collector, an owner it has
/// never observed, which it re-checks with exponential backoff, so its Deployment can stay for
/// minutes. Users remove an operator long after OLM's CRDs were made; this test may do it seconds
/// after, so it first lets two of those syncs pass.
const GARBAGE_COLLECTOR_DISCOVERY: Duration = Duration::from_secs(60);
const CSV_CRD: &str = "clusterserviceversions.operators.coreos.com";

/// Waits until OLM's CSV CRD is [`GARBAGE_COLLECTOR_DISCOVERY`] old.
async fn let_the_garbage_collector_learn_csvs(client: &Client) -> anyhow::Result<()> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(CSV_CRD)
        .await
        .with_context(|| format!("failed to read the CRD {CSV_CRD}"))?;
    let created = crd
        .metadata
        .creation_timestamp
        .with_context(|| format!("the CRD {CSV_CRD} has no creationTimestamp"))?
        .0;
    let age = created.duration_until(k8s_openapi::jiff::Timestamp::now());
    // A negative age (clocks apart) counts as none.
    let age = Duration::try_from(age).unwrap_or_default();
    if let Some(rest) = GARBAGE_COLLECTOR_DISCOVERY.checked_sub(age) {
        eprintln!(
            "olm: {CSV_CRD} is {:.1}s old; waiting {:.1}s for the garbage collector to watch CSVs",
            age.as_secs_f64(),
            rest.as_secs_f64()
        );
        tokio::time::sleep(rest).await;
    }
    Ok(())
}

/// The book's removal commands (`docs/src/install/uninstall.md`), then what must (not) remain.
async fn olm_removal(client: &Client, kubeconfig: &Path) -> anyhow::Result<Row> {
    // The Deployment OLM made: the removal must delete this very object.
    let made = install::operator_deployment(client)
        .await?
        .context("no operator Deployment before the removal")?;
    let (namespace, uid) = (
        made.namespace().unwrap_or_default(),
        made.uid().unwrap_or_default(),
    );
    ensure!(
        namespace == olm::OPERATOR_NAMESPACE,
        "the operator's Deployment is in {namespace}, not in OLM's {}",
        olm::OPERATOR_NAMESPACE
    );
    let_the_garbage_collector_learn_csvs(client).await?;
    let started = Instant::now();
    let output = run(kubeconfig, olm::REMOVAL_COMMANDS).await?;
    eprintln!("olm: removal commands said:\n{output}");
    let deployments = Api::<Deployment>::namespaced(client.clone(), &namespace);
    let removed = wait::until(
        "OLM to remove the operator's Deployment",
        OLM_TIMEOUT,
        || async {
            Ok(match deployments.get_opt(OPERATOR_NAME).await? {
                None => Check::Done(()),
                Some(d) if d.uid().as_deref() == Some(uid.as_str()) => Check::Pending(format!(
                    "Deployment {namespace}/{OPERATOR_NAME} (uid {uid}) still there"
                )),
                Some(d) => Check::Pending(format!(
                    "Deployment {namespace}/{OPERATOR_NAME} made again (uid {:?}, labels {:?})",
                    d.uid(),
                    d.labels()
                )),
            })
        },
    )
    .await;
    if let Err(err) = removed {
        let said = run(kubeconfig, &removal_diagnostics(&namespace))
            .await
            .unwrap_or_else(|failed| format!("{failed:#}"));
        eprintln!("olm: the Deployment stayed; what the cluster says:\n{said}");
        return Err(err);
    }
    let removal = started.elapsed();
    let selector = ListParams::default().labels(&scope::managed_selector());
    let webhooks = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&selector)
        .await?;
    ensure!(
        webhooks.items.is_empty(),
        "webhook configurations left: {:?}",
        webhooks
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>()
    );
    let policies: Vec<String> = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .list(&selector)
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let bindings: Vec<String> = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .list(&selector)
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    // The guard stays on purpose (`docs/src/install/uninstall.md`): OLM leaves the CRD, so
    // Initializers can still be created, and the guard keeps that to those who may create
    // webhook configurations. So do the bounds the operator put on its account, which a
    // reinstall under the same account finds in place.
    let bounds =
        initializer_packaging::bounds::name(&initializer_packaging::bounds::service_account_user(
            olm::OPERATOR_NAMESPACE,
            OPERATOR_NAME,
        ))
        .context("the operator's account has no bounds name")?;
    let left = [bounds.as_str(), GUARD];
    ensure!(
        policies == left && bindings == left,
        "admission policies left: {policies:?}, bindings {bindings:?}"
    );
    // A create the suspended Initializer matched still succeeds, untouched.
    let namespace = create_namespace(client, "olm-removed").await?;
    let created = Api::<Deployment>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &{
            let mut deployment = example_workload()?;
            deployment.metadata.name = Some("after-removal".into());
            deployment
        })
        .await
        .context("a create in a matching namespace failed after the removal")?;
    ensure!(!has_sidecar(&created), "injected after the removal");
    Ok(Row {
        scenario: "olm_removal_leaves_no_webhook_and_creates_succeed".into(),
        removal: Some(removal),
        ..Row::default()
    })
}

async fn create_namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let name = format!("{prefix}-{}", scope::random_suffix());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("failed to create namespace {name}"))?;
    Ok(name)
}

async fn run(kubeconfig: &Path, script: &str) -> anyhow::Result<String> {
    olm::run_shell(kubeconfig, script).await
}

/// What the example's status may show while an upgrade runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Through {
    /// `Registered` in every update.
    Registered,
    /// `Registered`, but for the route change of the NetworkPolicy the next version writes by
    /// default where the previous one wrote none: phase `Degraded` with reason `RouteChanged`,
    /// failing open until a route check is answered through the policy.
    RouteChange,
}

impl Through {
    /// Whether `status` is one the upgrade may show.
    fn allows(self, status: &InitializerStatus) -> bool {
        let registered = status.phase == Some(Phase::Registered) && status.registered == Some(true);
        let route_changed = status.phase == Some(Phase::Degraded)
            && status
                .conditions
                .iter()
                .any(|c| c.type_ == "Degraded" && c.reason == "RouteChanged");
        registered || (self == Self::RouteChange && route_changed)
    }
}

/// With the example Initializer registered (`failurePolicy: Fail`) and an annotated Deployment
/// created every 100 ms, runs `upgrade` and waits until the operator runs the next version
/// only, its pods' image ending in `next_image` (and `done` says nothing more is pending);
/// then checks that no create failed, every one was injected, the Initializer showed only what
/// `through` allows, and the new operator reconciles the next generation.
async fn upgrade_under_load<UF, D, DF>(
    client: &Client,
    scenario: &str,
    next_image: &str,
    through: Through,
    upgrade: UF,
    done: D,
) -> anyhow::Result<Row>
where
    UF: Future<Output = anyhow::Result<()>>,
    D: Fn() -> DF,
    DF: Future<Output = anyhow::Result<Option<String>>>,
{
    ops::wait_registered(client, EXAMPLE_NAME, Duration::from_secs(120)).await?;
    let namespace = create_namespace(client, "upgrade").await?;
    let initializers = Recorder::start(
        Api::<Initializer>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={EXAMPLE_NAME}")),
        |_| true,
    );
    let template = example_workload()?;
    // Dry runs: admitted like any create, but stored Deployments (a thousand in an upgrade)
    // would queue ahead of the operator's own in kube-controller-manager and slow its rollout.
    let load = CreateLoad::start_with(
        Api::<Deployment>::namespaced(client.clone(), &namespace),
        CREATE_EVERY,
        PostParams {
            dry_run: true,
            ..PostParams::default()
        },
        move |n| {
            let mut deployment = template.clone();
            deployment.metadata.name = Some(format!("load-{n}"));
            deployment
        },
        has_sidecar,
    );
    // A second of creates before, so the window holds the old operator too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    upgrade.await?;
    // When only the next version's pods were running, all ready (before the installer, Helm or
    // OLM said it was done).
    let next_only = std::sync::Mutex::new(None);
    wait::until(
        format!("{scenario}: the operator to run {next_image} only"),
        OLM_TIMEOUT,
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), olm::OPERATOR_NAMESPACE)
                .list(&ListParams::default().labels(OPERATOR_POD_SELECTOR))
                .await?
                .items;
            let images: Vec<String> = pods
                .iter()
                .map(|p| {
                    let image = p
                        .spec
                        .as_ref()
                        .map(|s| s.containers[0].image.clone().unwrap_or_default())
                        .unwrap_or_default();
                    let terminating = if p.metadata.deletion_timestamp.is_some() {
                        " terminating"
                    } else {
                        ""
                    };
                    format!(
                        "{} {image}{terminating} ready={}",
                        p.name_any(),
                        ops::pod_ready(p)
                    )
                })
                .collect();
            let deployment = install::operator_deployment(client).await?;
            let rolled = deployment.as_ref().is_some_and(|d| {
                let status = d.status.clone().unwrap_or_default();
                let replicas = d.spec.replicas.unwrap_or(1);
                status.observed_generation >= d.metadata.generation
                    && status.updated_replicas == Some(replicas)
                    && status.available_replicas == Some(replicas)
                    && status.replicas == Some(replicas)
            });
            let all_next = !pods.is_empty()
                && images
                    .iter()
                    .all(|i| i.contains(&format!("{next_image} ready=true")));
            if !(rolled && all_next) {
                // The Deployment's own account, to tell a slow rollout from a slow status.
                let counts = deployment.as_ref().map_or("no Deployment".into(), |d| {
                    let status = d.status.clone().unwrap_or_default();
                    format!(
                        "generation {:?} observed {:?}, replicas {:?} updated {:?} ready {:?} \
                         available {:?} terminating {:?}",
                        d.metadata.generation,
                        status.observed_generation,
                        status.replicas,
                        status.updated_replicas,
                        status.ready_replicas,
                        status.available_replicas,
                        status.terminating_replicas
                    )
                });
                let pending = format!("rolled {rolled} ({counts}); pods {images:?}");
                progress(started, &pending);
                return Ok(Check::Pending(pending));
            }
            if let Ok(mut at) = next_only.lock() {
                at.get_or_insert_with(|| started.elapsed());
            }
            Ok(match done().await? {
                None => Check::Done(()),
                Some(pending) => {
                    progress(started, &pending);
                    Check::Pending(pending)
                }
            })
        },
    )
    .await?;
    let upgraded = started.elapsed();
    let next_only = next_only.lock().ok().and_then(|at| *at);
    // A little longer under load: the new leader settles in.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let attempts = load.stop().await;
    let creates = load::count_in(&attempts, started, None);
    let all = load::count_in(
        &attempts,
        attempts.first().map_or(started, |a| a.started),
        None,
    );
    let uninjected = attempts.iter().filter(|a| a.outcome == Ok(false)).count();
    ensure!(
        creates.failed == 0 && all.failed == 0,
        "{scenario}: {}/{} creates failed: {:?}",
        all.failed,
        all.total,
        load::errors(&attempts)
    );
    ensure!(
        uninjected == 0,
        "{scenario}: {uninjected} creates passed without the initializer"
    );
    ensure!(
        creates.total >= 10,
        "{scenario}: only {} creates during the upgrade",
        creates.total
    );
    let seen = initializers.seen();
    let phases: Vec<String> = seen
        .iter()
        .map(|s| {
            let status = s.object.status.clone().unwrap_or_default();
            let phase = status.phase.map_or("no phase".into(), |p| format!("{p:?}"));
            match status.registered {
                Some(true) => phase,
                _ => format!("{phase} (not registered)"),
            }
        })
        .collect();
    // What the upgrade may not show, each described with the reasons the Initializer gave.
    let disallowed: Vec<String> = seen
        .iter()
        .filter(|s| !through.allows(&s.object.status.clone().unwrap_or_default()))
        .map(|s| ops::describe(&s.object))
        .collect();
    ensure!(
        !seen.is_empty() && disallowed.is_empty(),
        "{scenario}: the Initializer showed more than {through:?} allows: {phases:?}; not allowed: \
         {disallowed:?}"
    );
    // The next generation, reconciled by the new operator (the old one is gone).
    let api = Api::<Initializer>::all(client.clone());
    let patched = api
        .patch(
            EXAMPLE_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"timeoutSeconds": 6}})),
        )
        .await?;
    let generation = patched.metadata.generation;
    wait::until(
        format!("{scenario}: the new operator to observe generation {generation:?}"),
        Duration::from_secs(60),
        || async {
            let initializer = api.get(EXAMPLE_NAME).await?;
            let configurations = ops::configurations_of(client, EXAMPLE_NAME).await?;
            let timeout_applied = configurations.iter().all(|c| {
                c.webhooks
                    .iter()
                    .flatten()
                    .all(|w| w.timeout_seconds == Some(6))
            });
            let status = initializer.status.clone().unwrap_or_default();
            Ok(
                if status.observed_generation == generation
                    && status.registered == Some(true)
                    && timeout_applied
                    && !configurations.is_empty()
                {
                    Check::Done(())
                } else {
                    Check::Pending(ops::describe(&initializer))
                },
            )
        },
    )
    .await?;
    // Back to the example as shipped, for what follows.
    api.patch(
        EXAMPLE_NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"timeoutSeconds": 5}})),
    )
    .await?;
    let distinct: std::collections::BTreeSet<String> = phases.into_iter().collect();
    Ok(Row {
        scenario: scenario.into(),
        next_only,
        upgrade: Some(upgraded),
        creates: Some(creates),
        phases: Some(format!(
            "{} ({} updates)",
            distinct.into_iter().collect::<Vec<_>>().join(", "),
            seen.len()
        )),
        ..Row::default()
    })
}

/// Prints what an upgrade waits for whenever it changes, with the time since the trigger.
fn progress(started: Instant, pending: &str) {
    static LAST: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
    if let Ok(mut last) = LAST.lock()
        && *last != pending
    {
        eprintln!(
            "upgrade +{:.2}s: {pending}",
            started.elapsed().as_secs_f64()
        );
        *last = pending.to_string();
    }
}

/// An nginx Deployment carrying the annotation the example Initializer selects on.
fn example_workload() -> anyhow::Result<Deployment> {
    let example: serde_json::Value = serde_saphyr::from_str(&paths::read_workspace_file(EXAMPLE)?)?;
    let annotation = example["spec"]["annotation"]["name"]
        .as_str()
        .context("the example Initializer has no spec.annotation.name")?;
    let mut deployment = nginx_deployment("load", false, 0)?;
    deployment.metadata.annotations = Some([(annotation.to_string(), "true".to_string())].into());
    Ok(deployment)
}

/// The operator's Deployment has moved to the image ending in `next_image`.
async fn operator_on(client: &Client, next_image: &str) -> anyhow::Result<Option<String>> {
    let deployment = install::operator_deployment(client)
        .await?
        .context("no operator Deployment")?;
    let image = deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    Ok((!image.ends_with(next_image)).then(|| format!("{OPERATOR_NAME} runs {image}")))
}

#[test]
#[ignore = "needs root, the real control plane, helm and OLM built from Go, and kubectl: make e2e-olm"]
fn helm_upgrade_under_load_loses_no_create() {
    on_real_control_plane(|target| async move {
        let client = target.client();
        let kubeconfig = target.kubeconfig_path().to_path_buf();
        let chart = paths::workspace_root().join(install::CHART_DIR);
        let example_after_guard = install_with_the_example_beside(
            &client,
            &kubeconfig,
            install::install_with_helm(&chart, &kubeconfig, NetworkPolicies::Default),
        )
        .await?;
        let next_dir = tempfile::tempdir()?;
        let next = next_chart(&chart, next_dir.path())?;
        let next_image = format!(":{}", olm::NEXT_VERSION);
        let mut row = upgrade_under_load(
            &client,
            "upgrade_by_helm_under_load_loses_no_create",
            &next_image,
            Through::Registered,
            helm_upgrade(&next, &kubeconfig),
            || operator_on(&client, &next_image),
        )
        .await?;
        row.example_after_guard = Some(example_after_guard);
        Ok(vec![row])
    });
}

/// Runs `install` while the book's example is applied beside it, as a GitOps sync of the
/// install and the Initializers together does: `kubectl apply` again every 200 ms until the API
/// server serves Initializers, so the example is created as early as any sync could. Then the
/// example must be deployed as created: registered at generation 1, with no spec change (held
/// back, it would wait for one). Returns how long after the guard's binding it was created, by
/// the API server's clock (whole seconds). Whatever this run's timing, the CRD must have been
/// created no sooner than [`IN_FORCE_AFTER`] after the guard's binding.
async fn install_with_the_example_beside(
    client: &Client,
    kubeconfig: &Path,
    install: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Duration> {
    let example = paths::workspace_root().join(EXAMPLE);
    let apply = async {
        let mut tries = 0;
        loop {
            tries += 1;
            let applied = run(
                kubeconfig,
                &format!("kubectl apply -f {}", example.display()),
            )
            .await;
            match applied {
                Ok(_) => return Ok(tries),
                Err(err) if tries * 200 > OLM_TIMEOUT.as_millis() => return Err(err),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    };
    // An install that fails ends the applies too.
    let (mut install, mut apply) = (std::pin::pin!(install), std::pin::pin!(apply));
    let applied = tokio::select! {
        installed = &mut install => {
            installed?;
            apply.await
        }
        applied = &mut apply => {
            install.await?;
            applied
        }
    };
    let tries = applied.context("the example was never accepted beside the install")?;
    install::wait_available(client).await?;
    ops::wait_registered(client, EXAMPLE_NAME, Duration::from_secs(120))
        .await
        .context("the example applied beside the install was not deployed")?;
    let created = Api::<Initializer>::all(client.clone())
        .get(EXAMPLE_NAME)
        .await?;
    ensure!(
        created.metadata.generation == Some(1),
        "the example reached Registered at generation {:?}, not 1",
        created.metadata.generation
    );
    let binding = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .get(GUARD)
        .await?;
    let at = |meta: &kube::api::ObjectMeta| {
        meta.creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .context("no creationTimestamp")
    };
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(initializer_crds::constants::CRD_NAME)
        .await?;
    let guard_at = at(&binding.metadata)?;
    // A time before the guard's reads as zero.
    let since_guard = |meta| -> anyhow::Result<Duration> {
        Ok(Duration::try_from(at(meta)?.duration_since(guard_at)).unwrap_or_default())
    };
    let crd_after = since_guard(&crd.metadata)?;
    let after = since_guard(&created.metadata)?;
    eprintln!(
        "e2e: the CRD was created {}s after the guard's binding; the example was accepted at \
         apply {tries}, {}s after it",
        crd_after.as_secs(),
        after.as_secs()
    );
    // Whatever the timing of this run's applies, no Initializer could have been created before
    // the operator takes the guard to be in force.
    ensure!(
        crd_after >= IN_FORCE_AFTER,
        "the CRD was created {}s after the guard's binding, not {}s: an Initializer applied then \
         would be held back",
        crd_after.as_secs(),
        IN_FORCE_AFTER.as_secs()
    );
    Ok(after)
}

/// The chart at the next version: `version` and `appVersion`, nothing else.
fn next_chart(chart: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let next = dir.join("initializer-operator");
    run_sync(&[
        "cp",
        "-r",
        &chart.display().to_string(),
        &next.display().to_string(),
    ])?;
    let path = next.join("Chart.yaml");
    let mut chart_yaml: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&path)?)
            .with_context(|| format!("failed to read {}", path.display()))?;
    for key in ["version", "appVersion"] {
        ensure!(
            chart_yaml[key] == olm::VERSION,
            "failed to bump {}: its {key} is {}, not {}",
            path.display(),
            chart_yaml[key],
            olm::VERSION
        );
        chart_yaml[key] = json!(olm::NEXT_VERSION);
    }
    let bumped = initializer_crds::yaml::to_string(&chart_yaml)?;
    std::fs::write(&path, bumped)?;
    Ok(next)
}

fn run_sync(args: &[&str]) -> anyhow::Result<()> {
    let status = std::process::Command::new(args[0])
        .args(&args[1..])
        .status()?;
    ensure!(status.success(), "`{}` failed: {status}", args.join(" "));
    Ok(())
}

/// `helm upgrade` of the release to the next chart, with the images at the next version.
async fn helm_upgrade(chart: &Path, kubeconfig: &Path) -> anyhow::Result<()> {
    let helm = install::helm_binary().await?;
    let args: Vec<String> = install::helm_install_args(chart, kubeconfig, NetworkPolicies::Default)
        .into_iter()
        .map(|arg| {
            arg.replace(
                &format!(".tag={}", olm::VERSION),
                &format!(".tag={}", olm::NEXT_VERSION),
            )
        })
        .collect();
    let output = tokio::process::Command::new(&helm)
        .args(&args)
        .kill_on_drop(true)
        .output()
        .await?;
    if !output.status.success() {
        bail!(
            "`helm {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

#[test]
#[ignore = "needs root, the real control plane, helm and OLM built from Go, and kubectl: make e2e-olm"]
fn bundle_upgrade_under_load_loses_no_create() {
    on_real_control_plane(|target| async move {
        let client = target.client();
        let kubeconfig = target.kubeconfig_path().to_path_buf();
        let example_after_guard = install_with_the_example_beside(
            &client,
            &kubeconfig,
            install::install_from_bundle(
                &paths::bundle_dir(),
                &kubeconfig,
                NetworkPolicies::Default,
            ),
        )
        .await?;
        let next_dir = tempfile::tempdir()?;
        let next = next_dir.path().join("initializer-operator");
        olm::next_bundle(&paths::bundle_dir(), &next)?;
        let next_image = format!(":{}", olm::NEXT_VERSION);
        let mut row = upgrade_under_load(
            &client,
            "upgrade_by_install_bundle_under_load_loses_no_create",
            &next_image,
            Through::Registered,
            install::install_from_bundle(&next, &kubeconfig, NetworkPolicies::Default),
            || operator_on(&client, &next_image),
        )
        .await?;
        row.example_after_guard = Some(example_after_guard);
        Ok(vec![row])
    });
}

/// OLM on kind: its two operators and the catalog as pods (the catalog behind a Service), from
/// one image of the same binaries. The cluster comes from `make e2e-kind`, whose suite installed
/// the operator from the bundle: that install is removed first (`uninstall
/// --delete-initializers`, the book's command), so OLM installs into a cluster without it.
#[test]
#[ignore = "runs on the kind cluster of make e2e-kind, after its suite (KUBECONFIG and E2E_OLM_IMAGE set by e2e/kind/run.sh)"]
fn olm_on_kind_installs_the_operator_and_the_example_registers() {
    let image = std::env::var("E2E_OLM_IMAGE")
        .expect("E2E_OLM_IMAGE names OLM's image, loaded into the nodes");
    on_kind("OLM on kind", |client, kubeconfig| async move {
        let tools = Tools::build().await?;
        let operator = paths::binary(initializer_crds::images::OPERATOR)?;
        run(
            &kubeconfig,
            &format!("{} uninstall --delete-initializers", operator.display()),
        )
        .await?;
        // The suite's own grant to the operator's account (missed initializations counted):
        // OLM's install is checked to run under OLM's RBAC only.
        install::revoke_counting(&client).await?;
        run(
            &kubeconfig,
            &format!(
                "kubectl apply --server-side -f {}",
                tools.monitoring_crds().display()
            ),
        )
        .await?;
        let started = Instant::now();
        // A release's catalog image, as users subscribe: OLM runs it, and unpacks the bundle
        // image it names. The previous release's (E2E_PREVIOUS_RELEASE) when there is one,
        // upgraded below to this release's (E2E_RELEASE); else this release's; else the
        // committed bundle, rendered and served by opm.
        let upgrade = release::Upgrade::from_env();
        let first = upgrade
            .as_ref()
            .map(|u| u.from.clone())
            .or_else(paths::release_dir);
        let catalog_image = first
            .as_ref()
            .map(|dir| release::image(dir, release::CATALOG))
            .transpose()?;
        let (version, example) = match &first {
            Some(dir) => (release::version(dir)?, release::example(dir)),
            None => (
                olm::VERSION.to_string(),
                paths::workspace_root().join(EXAMPLE),
            ),
        };
        let entry = Entry {
            bundle: paths::bundle_dir(),
            version: olm::VERSION.into(),
            replaces: None,
        };
        let entries = [entry];
        let rendered = catalog_image.is_none().then_some(&entries[..]);
        olm::deploy_as_pods(&client, &kubeconfig, &tools, &image, rendered).await?;
        eprintln!(
            "olm: its operators{} Available on kind {:.2}s after the first apply",
            if rendered.is_some() {
                " and the catalog"
            } else {
                ""
            },
            started.elapsed().as_secs_f64()
        );
        let address = olm::catalog_service_address();
        let source = match &catalog_image {
            Some(image) => CatalogSource::Image(image),
            None => CatalogSource::Address(&address),
        };
        let scenarios = async {
            let row = olm_install(&client, &kubeconfig, source, &version, &example).await?;
            let mut rows = vec![Row {
                scenario: format!(
                    "olm_on_kind_installs_the_operator_and_the_example_registers ({version})"
                ),
                ..row
            }];
            if let Some(upgrade) = &upgrade {
                rows.push(olm_upgrade_between_releases(&client, &kubeconfig, upgrade).await?);
            }
            rows.push(olm_removal(&client, &kubeconfig).await?);
            anyhow::Ok(rows)
        };
        let rows = match scenarios.await {
            Ok(rows) => rows,
            Err(err) => {
                // OLM's own words explain a failure here.
                for deployment in ["olm-operator", "catalog-operator", olm::CATALOG_SERVICE] {
                    let logs = run(
                        &kubeconfig,
                        &format!(
                            "kubectl logs -n {} deploy/{deployment} --tail=30 || true",
                            olm::OLM_NAMESPACE
                        ),
                    )
                    .await
                    .unwrap_or_default();
                    eprintln!("--- last lines of {deployment}:\n{logs}");
                }
                return Err(err);
            }
        };
        anyhow::Ok(rows)
    });
}

/// OLM's upgrade from one release to the next, as a catalog image's user gets it: the
/// CatalogSource rolled to the next release's catalog image (which carries both bundles, the
/// next one replacing the first) under load; done when the old CSV is gone and the new one
/// succeeded. Then the example, created at the first release, has gained the next one's
/// default.
async fn olm_upgrade_between_releases(
    client: &Client,
    kubeconfig: &Path,
    upgrade: &release::Upgrade,
) -> anyhow::Result<Row> {
    let (from, to) = (
        release::version(&upgrade.from)?,
        release::version(&upgrade.to)?,
    );
    let scenario = format!("upgrade_{from}_to_{to}_by_olm_from_the_catalog_image");
    let next_image = release::image(&upgrade.to, initializer_crds::images::OPERATOR)?;
    let next_catalog = release::image(&upgrade.to, release::CATALOG)?;
    let (from, to) = (&from, &to);
    // The previous release wrote no NetworkPolicy: the load goes on until this one's default is
    // in force.
    let mut row = upgrade_under_load(
        client,
        &scenario,
        &next_image,
        Through::RouteChange,
        olm::kubectl_apply(
            kubeconfig,
            &olm::subscription_yaml(CatalogSource::Image(&next_catalog)),
        ),
        move || async move {
            Ok(match csv_replaced(client, from, to).await? {
                None => default_network_policy_pending(client).await?,
                pending => pending,
            })
        },
    )
    .await?;
    gained_the_default(kubeconfig).await?;
    row.scenario = scenario;
    Ok(row)
}

/// `None` once the CSV of `from` is gone and the one of `to` succeeded; else what is pending.
async fn csv_replaced(client: &Client, from: &str, to: &str) -> anyhow::Result<Option<String>> {
    let csvs = olm::olm_api(
        client,
        "ClusterServiceVersion",
        Some(olm::OPERATOR_NAMESPACE),
    );
    let old = csvs.get_opt(&olm::csv_name(from)).await?;
    let new = csvs.get_opt(&olm::csv_name(to)).await?;
    let new_phase = new.as_ref().and_then(olm::csv_phase);
    Ok(
        if old.is_none() && new_phase.as_deref() == Some("Succeeded") {
            None
        } else {
            Some(format!(
                "old CSV {}; new CSV {new_phase:?}",
                old.as_ref()
                    .map_or("gone".to_string(), |c| olm::csv_phase(c)
                        .unwrap_or_default())
            ))
        },
    )
}

/// The example, stored before the CRD gained `spec.logLevel`, is served with the field's
/// default: read as the API server returns it (not through our types, whose own default would
/// hide its absence).
async fn gained_the_default(kubeconfig: &Path) -> anyhow::Result<()> {
    let level = run(
        kubeconfig,
        &format!("kubectl get initializer {EXAMPLE_NAME} -o jsonpath='{{.spec.logLevel}}'"),
    )
    .await?;
    ensure!(
        level.trim() == "Info",
        "the Initializer created before the upgrade has spec.logLevel {:?}, not the new CRD's default Info",
        level.trim()
    );
    Ok(())
}

/// A real upgrade on kind, from the previous release (E2E_PREVIOUS_RELEASE, built from its own
/// tree by tools/release/previous.sh) to this one (E2E_RELEASE), both in the cluster's
/// registry, every image by digest: through `install --bundle` and through `helm upgrade` of
/// the OCI chart, each under creates every 100 ms with the example Initializer of the previous
/// release registered (`failurePolicy: Fail`). The CRD gains a field with a default
/// (`spec.logLevel`): the example must keep working and be served with it. OLM's upgrade is in
/// `olm_on_kind_installs_the_operator_and_the_example_registers`.
#[test]
#[ignore = "runs on the kind cluster of make e2e-kind, after its suite (KUBECONFIG, E2E_RELEASE and E2E_PREVIOUS_RELEASE set by e2e/kind/run.sh)"]
fn release_upgrades_on_kind_lose_no_create() {
    let upgrade = release::Upgrade::from_env()
        .expect("E2E_PREVIOUS_RELEASE and E2E_RELEASE name the releases to upgrade between");
    on_kind("upgrades on kind", |client, kubeconfig| async move {
        let (from, to) = (
            release::version(&upgrade.from)?,
            release::version(&upgrade.to)?,
        );
        // The suite's install removed: each path starts from nothing of ours.
        uninstall(&client, &kubeconfig).await?;
        let by_bundle = upgrade_between_releases(
            &client,
            &kubeconfig,
            &upgrade,
            format!("upgrade_{from}_to_{to}_by_install_bundle"),
            install::install_from_bundle(
                &upgrade.from.join("bundle"),
                &kubeconfig,
                NetworkPolicies::Default,
            ),
            install::install_from_bundle(
                &upgrade.to.join("bundle"),
                &kubeconfig,
                NetworkPolicies::Default,
            ),
        )
        .await?;
        uninstall(&client, &kubeconfig).await?;
        let registry = release::registry(&upgrade.to)?;
        let by_helm = upgrade_between_releases(
            &client,
            &kubeconfig,
            &upgrade,
            format!("upgrade_{from}_to_{to}_by_helm_from_the_oci_chart"),
            helm_from_registry(&kubeconfig, &registry, "install", &from),
            helm_from_registry(&kubeconfig, &registry, "upgrade", &to),
        )
        .await?;
        helm_uninstall(&client, &kubeconfig).await?;
        Ok(vec![by_bundle, by_helm])
    });
}

/// Installs the first release (`install`), applies its example, then upgrades to the next one
/// (`upgrade`) under load; the example must then be served with the default the CRD gained.
async fn upgrade_between_releases(
    client: &Client,
    kubeconfig: &Path,
    releases: &release::Upgrade,
    scenario: String,
    install: impl Future<Output = anyhow::Result<()>>,
    upgrade: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Row> {
    let next_image = release::image(&releases.to, initializer_crds::images::OPERATOR)?;
    install.await?;
    install::wait_available(client).await?;
    let example = release::example(&releases.from);
    run(
        kubeconfig,
        &format!("kubectl apply -f {}", example.display()),
    )
    .await?;
    let next_image = &next_image;
    // The previous release wrote no NetworkPolicy: the load goes on until this one's default is
    // in force.
    let row = upgrade_under_load(
        client,
        &scenario,
        next_image,
        Through::RouteChange,
        upgrade,
        move || async move {
            Ok(match operator_on(client, next_image).await? {
                None => default_network_policy_pending(client).await?,
                pending => pending,
            })
        },
    )
    .await?;
    gained_the_default(kubeconfig).await?;
    Ok(Row { scenario, ..row })
}

/// Runs `body` on the kind cluster `make e2e-kind` made (KUBECONFIG), the suite's turn held as
/// `what`, and prints the rows it returns.
fn on_kind<F, Fut>(what: &str, body: F)
where
    F: FnOnce(Client, PathBuf) -> Fut,
    Fut: Future<Output = anyhow::Result<Vec<Row>>>,
{
    let kubeconfig =
        PathBuf::from(std::env::var_os("KUBECONFIG").expect("KUBECONFIG names the kind cluster"));
    let _turn = sharing::take(Share::Shared, what).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = runtime.block_on(async {
        let client = Client::try_default().await?;
        body(client, kubeconfig).await
    });
    match result {
        Ok(rows) => eprintln!("\n{}", table(&rows)),
        Err(err) => panic!("{err:?}"),
    }
}

/// `helm install` or `helm upgrade` of the OCI chart in `registry` at `version`, as the book
/// says (`docs/src/install/release.md`).
async fn helm_from_registry(
    kubeconfig: &Path,
    registry: &str,
    verb: &str,
    version: &str,
) -> anyhow::Result<()> {
    let helm = install::helm_binary().await?;
    run(
        kubeconfig,
        &format!(
            "{} {verb} {} oci://{registry}/charts/initializer-operator --version {version} \
             --plain-http -n {} --create-namespace --wait --timeout 300s",
            helm.display(),
            install::HELM_RELEASE,
            olm::OPERATOR_NAMESPACE
        ),
    )
    .await
    .map(drop)
}

/// The book's uninstall (`docs/src/install/uninstall.md`), the Initializers with it, and the
/// operator's namespace gone.
async fn uninstall(client: &Client, kubeconfig: &Path) -> anyhow::Result<()> {
    let operator = paths::binary(initializer_crds::images::OPERATOR)?;
    run(
        kubeconfig,
        &format!("{} uninstall --delete-initializers", operator.display()),
    )
    .await?;
    namespace_gone(client).await
}

/// Helm's uninstall as the book says (`docs/src/install/uninstall.md`): the Initializers first,
/// then the release; then what it leaves (the CRD, the guard, the bounds) and the namespace Helm
/// created.
async fn helm_uninstall(client: &Client, kubeconfig: &Path) -> anyhow::Result<()> {
    let helm = install::helm_binary().await?;
    let namespace = olm::OPERATOR_NAMESPACE;
    run(
        kubeconfig,
        &format!(
            "kubectl delete initializers --all --wait --timeout=120s && \
             {helm} uninstall {release} -n {namespace} --wait --timeout 120s && \
             kubectl delete crd {crd} --wait --timeout=60s && \
             kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy \
               {GUARD} initializer-operator-bounds.{namespace}.{release} --ignore-not-found && \
             kubectl delete namespace {namespace} --wait --timeout=120s",
            helm = helm.display(),
            release = install::HELM_RELEASE,
            crd = initializer_crds::constants::CRD_NAME,
        ),
    )
    .await?;
    namespace_gone(client).await
}

async fn namespace_gone(client: &Client) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait::until(
        format!("namespace {} to be gone", olm::OPERATOR_NAMESPACE),
        Duration::from_secs(180),
        || async {
            Ok(match namespaces.get_opt(olm::OPERATOR_NAMESPACE).await? {
                None => Check::Done(()),
                Some(_) => Check::Pending("still there".into()),
            })
        },
    )
    .await
}
