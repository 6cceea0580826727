//! What a network that enforces NetworkPolicy shows (kind: kindnetd online, kube-router's
//! firewall offline): with `--network-policy=auto` the operator's policy admits the API server's
//! own address and keeps every other pod from an initializer's port, while the API server's
//! calls and the operator's probes still reach it; and that a range that leaves the API server
//! out fails no create under a registration that fails closed, and under `auto` is withdrawn.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use initializer_e2e::fixtures::{self, Health};
use initializer_e2e::runner::Ctx;
use initializer_e2e::wait::{self, Check};
use initializer_e2e::watch::Change;
use initializer_e2e::{install, ops};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT, Sidecar, kubectl, kubectl_both, s};

/// The operator's Deployment, as every install names it.
const OPERATOR_DEPLOYMENT: &str = "deployment/initializer-operator";
/// The setting the suite installs the operator with, which each scenario here puts back
/// whatever happened.
const SUITE_SETTING: &str = install::SUITE_NETWORK_POLICIES.env();
/// How long a connection attempt from the outsider pod may take before it counts as refused.
const CONNECT_SECONDS: &str = "3";
/// The outsider's image when `E2E_SHELL_IMAGE` names none.
const SHELL_IMAGE: &str = "debian:bookworm-slim";
/// An API server range that is not the API server's (TEST-NET-1, RFC 5737).
const WRONG_RANGE: &str = "192.0.2.1/32";
/// How often a create is tried while waiting for a route check the wrong range leaves
/// unanswered.
const CREATE_EVERY: Duration = Duration::from_secs(2);
/// What the `Registered` condition quotes of a route check the initializer did not answer.
const UNANSWERED: &str = "admitted without the initializer's answer";
/// The route deadline `auto` is given in the wrong-range scenario, after which it withdraws the
/// policy (the default, 300 s, would only make the scenario longer).
const WITHDRAW_AFTER: Duration = Duration::from_secs(30);

/// An outsider pod reaches a registered initializer's Service until the operator, set to
/// `--network-policy=auto` without ranges, writes its NetworkPolicy, which admits the API
/// server's address as the `kubernetes` Service lists it (the control-plane node's); from then
/// on the outsider is kept out, while a create the initializer
/// changes is still changed (the API server's call is admitted), the Initializer stays
/// registered (the operator's probes are admitted), and an Initializer applied with the policy
/// in force proves its route and registers. With the setting off again the policy goes and the
/// outsider reaches the Service again.
pub async fn network_policy_keeps_other_pods_out_and_lets_the_api_server_in(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "netpol", Health::default()).await?;
    let outsider_ns = ctx.scope.outside_namespace("netpol-outsider").await?;
    let pods = Api::<Pod>::namespaced(ctx.client(), &outsider_ns);
    pods.create(&Default::default(), &outsider_pod()?).await?;
    wait::until("the outsider pod ready", STEP_TIMEOUT, || async {
        let pod = pods.get("outsider").await?;
        Ok(if ops::pod_ready(&pod) {
            Check::Done(())
        } else {
            Check::Pending(ops::pod_states(&[pod]))
        })
    })
    .await?;
    let service_ip = service_ip(&ctx, &sidecar).await?;
    let outsider = Outsider {
        namespace: &outsider_ns,
        target: &service_ip,
    };
    let before = outsider.connect(&ctx).await;
    ensure!(
        before == Reach::Connected,
        "the outsider pod cannot reach {service_ip}:443 with no NetworkPolicy ({before:?}): the check below would prove nothing"
    );

    let on = Instant::now();
    set_operator_env(&ctx, &["NETWORK_POLICY=auto"]).await?;
    let result = with_the_policy_on(&ctx, &sidecar, &outsider, on).await;
    let off = set_operator_env(&ctx, &[SUITE_SETTING]).await;
    result?;
    off?;

    wait::until(
        "the NetworkPolicy removed with the setting off",
        STEP_TIMEOUT,
        || async {
            Ok(match policy_of(&ctx, &sidecar).await? {
                None => Check::Done(()),
                Some(_) => Check::Pending("the policy is still there".to_string()),
            })
        },
    )
    .await?;
    wait::until(
        "the outsider reaching the Service again",
        STEP_TIMEOUT,
        || async {
            Ok(match outsider.connect(&ctx).await {
                Reach::Connected => Check::Done(()),
                other => Check::Pending(format!("{service_ip}:443: {other:?}")),
            })
        },
    )
    .await?;
    Ok(())
}

/// The scenario's part with `--network-policy=auto`, after which the setting goes back whatever
/// happened here.
async fn with_the_policy_on(
    ctx: &Ctx,
    sidecar: &Sidecar,
    outsider: &Outsider<'_>,
    on: Instant,
) -> anyhow::Result<()> {
    let policy = wait::until("the operator's NetworkPolicy", REGISTER_TIMEOUT, || async {
        Ok(match policy_of(ctx, sidecar).await? {
            Some(policy) => Check::Done(policy),
            None => Check::Pending("no NetworkPolicy yet".to_string()),
        })
    })
    .await?;
    eprintln!(
        "NetworkPolicy {} written {} after the setting",
        policy.name_any(),
        s(on.elapsed())
    );
    let node = api_server_cidr(ctx).await?;
    ensure!(
        ops::admitted_ranges(&policy) == [node.as_str()],
        "the policy admits {:?}, not the control-plane node's {node} where the API server runs",
        ops::admitted_ranges(&policy)
    );
    wait::until("the outsider kept out", STEP_TIMEOUT, || async {
        Ok(match outsider.connect(ctx).await {
            Reach::KeptOut => Check::Done(()),
            other => Check::Pending(format!(
                "{}:443 from {}: {other:?}",
                outsider.target, outsider.namespace
            )),
        })
    })
    .await?;
    eprintln!("outsider kept out {} after the setting", s(on.elapsed()));
    // Kept out by the policy, not by a Service with nothing behind it: every pod is ready.
    let replicas = usize::try_from(sidecar.initializer.spec.replicas).unwrap_or(1);
    let pods = ops::workload_pods(&ctx.client(), &sidecar.workload_ns, &sidecar.name).await?;
    ensure!(
        pods.iter().filter(|pod| ops::pod_ready(pod)).count() >= replicas,
        "the outsider was kept out while the initializer's pods were not all ready, so the policy is not shown to be what kept it out: {}",
        ops::pod_states(&pods)
    );

    let injected = common::create_nginx(ctx, &sidecar.target_ns, "nginx-netpol", true).await?;
    ensure!(
        fixtures::has_sidecar(&injected),
        "with the NetworkPolicy in force, an annotated Deployment in {} was not injected (the API server's call was dropped?): containers {:?}",
        sidecar.target_ns,
        fixtures::template_containers(&injected)
    );
    // Written under a registration, the policy had the route proven again (failing open
    // meanwhile); the operator's probes are admitted, so it stays registered from then on.
    ops::wait_registered(&ctx.client(), &sidecar.name, REGISTER_TIMEOUT).await?;
    eprintln!(
        "registered with the spec's values again {} after the setting",
        s(on.elapsed())
    );

    let applied = Instant::now();
    let late = common::registered_sidecar(ctx, "netpol-late", Health::default()).await?;
    eprintln!(
        "an Initializer applied with the policy in force registered {} after apply",
        s(applied.elapsed())
    );
    ensure!(
        policy_of(ctx, &late).await?.is_some(),
        "the Initializer applied with the setting on has no NetworkPolicy"
    );
    Ok(())
}

/// Under a registration with `failurePolicy: Fail` and `--network-policy=on` with the right
/// range, a range the API server's calls do not come from fails no create
/// ([`a_wrong_range_fails_open`]).
pub async fn a_wrong_network_policy_range_fails_no_create(ctx: Ctx) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "badrange", Health::default()).await?;
    let cidr = api_server_cidr(&ctx).await?;
    set_operator_env(
        &ctx,
        &["NETWORK_POLICY=on", &format!("API_SERVER_CIDRS={cidr}")],
    )
    .await?;
    let result = async {
        ops::wait_registered(&ctx.client(), &sidecar.name, REGISTER_TIMEOUT).await?;
        a_wrong_range_fails_open(&ctx, &sidecar).await
    }
    .await;
    let off = set_operator_env(
        &ctx,
        &[
            SUITE_SETTING,
            "API_SERVER_CIDRS-",
            "ROUTE_DEADLINE_SECONDS-",
        ],
    )
    .await;
    result?;
    off
}

/// `API_SERVER_CIDRS` set to a range the API server's calls do not come from, under `sidecar`
/// registered with `failurePolicy: Fail`: no create is refused, the configuration fails open
/// from the setting on and never gets the spec's values back, and the status says that the
/// route is being proven and that a check went unanswered. Then `auto` withdraws that policy
/// ([`auto_withdraws_the_wrong_range`]), and with the range read from the cluster writes the
/// right one: registered with the spec's values, and creates are changed again.
async fn a_wrong_range_fails_open(ctx: &Ctx, sidecar: &Sidecar) -> anyhow::Result<()> {
    let right = api_server_cidr(ctx).await?;
    let changed = Instant::now();
    set_operator_env(ctx, &[&format!("API_SERVER_CIDRS={WRONG_RANGE}")]).await?;
    wait::until("the wrong range written", REGISTER_TIMEOUT, || async {
        let ranges = policy_of(ctx, sidecar)
            .await?
            .map(|p| ops::admitted_ranges(&p));
        Ok(match ranges {
            Some(ranges) if ranges == [WRONG_RANGE] => Check::Done(()),
            other => Check::Pending(format!("API server ranges {other:?}")),
        })
    })
    .await?;
    eprintln!(
        "the wrong range written {} after the setting",
        s(changed.elapsed())
    );
    // Creates every 2 s until the status says that a route check went unanswered: the wrong
    // range keeps the API server's new connections out. None of the creates may be refused.
    // They may still be injected: the API server keeps the connection its calls of the
    // initializer came on open, and the firewall lets an established connection through.
    let mut attempt = 0;
    let seen = wait::until_every(
        "a route check unanswered under the wrong range",
        CREATE_EVERY,
        STEP_TIMEOUT,
        || {
            attempt += 1;
            let name = format!("nginx-wrong-range-{attempt}");
            async move {
                if let Err(refused) =
                    common::create_nginx(ctx, &sidecar.target_ns, &name, true).await
                {
                    return Ok(Check::Done(Err(refused)));
                }
                let current = ops::initializer(&ctx.client(), &sidecar.name).await?;
                Ok(match ops::condition(&current, "Registered") {
                    Some(c) if c.reason == "ProvingRoute" && c.message.contains(UNANSWERED) => {
                        Check::Done(Ok(attempt))
                    }
                    other => Check::Pending(format!(
                        "{name} admitted; Registered {:?}",
                        other.map(|c| (&c.reason, &c.message))
                    )),
                })
            }
        },
    )
    .await?;
    let creates = seen.with_context(|| {
        format!(
            "a create was refused under a range that leaves the API server out (the configuration failed closed); the configuration went through: {}",
            configurations_seen(sidecar)
        )
    })?;
    eprintln!(
        "a route check unanswered {} after the setting, {creates} creates admitted meanwhile",
        s(changed.elapsed())
    );
    let proving = ops::configurations_of(&ctx.client(), &sidecar.name).await?;
    ensure!(
        proving
            .iter()
            .all(|c| ops::is_proving(c) && ops::is_degraded(c))
            && !proving.is_empty(),
        "under the wrong range the configuration is not the proving one: {proving:?}"
    );
    // A check that rode a connection opened before the policy would have proven the wrong
    // range, and the spec's failurePolicy would have come back for a while.
    let restored = sidecar.configurations.seen().into_iter().any(|seen| {
        seen.at >= changed && seen.change != Change::Deleted && !ops::is_proving(&seen.object)
    });
    ensure!(
        !restored,
        "under the wrong range the configuration went back to the spec's values: {}",
        configurations_seen(sidecar)
    );

    auto_withdraws_the_wrong_range(ctx, sidecar).await?;

    let back = Instant::now();
    set_operator_env(ctx, &["API_SERVER_CIDRS-"]).await?;
    wait::until("the right range written", REGISTER_TIMEOUT, || async {
        let ranges = policy_of(ctx, sidecar)
            .await?
            .map(|p| ops::admitted_ranges(&p));
        Ok(match ranges {
            Some(ranges) if ranges == [right.as_str()] => Check::Done(()),
            other => Check::Pending(format!("API server ranges {other:?}")),
        })
    })
    .await?;
    ops::wait_registered(&ctx.client(), &sidecar.name, REGISTER_TIMEOUT).await?;
    eprintln!(
        "the range read from the cluster written, and registered again {} after it",
        s(back.elapsed())
    );
    let injected = common::create_nginx(ctx, &sidecar.target_ns, "nginx-right-range", true).await?;
    ensure!(
        fixtures::has_sidecar(&injected),
        "the right range back, an annotated Deployment was not injected: containers {:?}",
        fixtures::template_containers(&injected)
    );
    Ok(())
}

/// The same wrong range under `--network-policy=auto`, whose route deadline is made short: once
/// the route checks went unanswered for it, the policy is withdrawn (gone, recorded in the
/// status, a `NetworkPolicyWithdrawn` Warning), and the initializer registers with the spec's
/// values without it; no create is refused meanwhile.
async fn auto_withdraws_the_wrong_range(ctx: &Ctx, sidecar: &Sidecar) -> anyhow::Result<()> {
    let auto = Instant::now();
    set_operator_env(
        ctx,
        &[
            "NETWORK_POLICY=auto",
            &format!("ROUTE_DEADLINE_SECONDS={}", WITHDRAW_AFTER.as_secs()),
        ],
    )
    .await?;
    let mut attempt = 0;
    let seen = wait::until_every(
        "the wrong range withdrawn and the initializer registered without it",
        CREATE_EVERY,
        REGISTER_TIMEOUT + WITHDRAW_AFTER,
        || {
            attempt += 1;
            let name = format!("nginx-withdrawing-{attempt}");
            async move {
                if let Err(refused) =
                    common::create_nginx(ctx, &sidecar.target_ns, &name, true).await
                {
                    return Ok(Check::Done(Err(refused)));
                }
                let current = ops::initializer(&ctx.client(), &sidecar.name).await?;
                let withdrawn = current
                    .status
                    .as_ref()
                    .and_then(|s| s.withdrawn_network_policy.clone());
                let policy = policy_of(ctx, sidecar).await?;
                Ok(
                    match (&withdrawn, &policy, ops::status_registered(&current)) {
                        (Some(_), None, true) => Check::Done(Ok(withdrawn)),
                        _ => Check::Pending(format!(
                            "withdrawn {withdrawn:?}; policy {:?}; {}",
                            policy.map(|p| ops::admitted_ranges(&p)),
                            ops::describe(&current)
                        )),
                    },
                )
            }
        },
    )
    .await?;
    let withdrawn = seen
        .with_context(|| {
            format!(
                "a create was refused while auto withdrew the wrong range; the configuration went through: {}",
                configurations_seen(sidecar)
            )
        })?
        .context("withdrawn")?;
    ensure!(
        withdrawn.api_server_cidrs == [WRONG_RANGE],
        "the status records {:?} as withdrawn, not {WRONG_RANGE}",
        withdrawn.api_server_cidrs
    );
    eprintln!(
        "the wrong range withdrawn and registered without it {} after auto ({attempt} creates, none refused; the last check: {})",
        s(auto.elapsed()),
        withdrawn.last_route_check
    );
    let warnings = ops::warning_events(&ctx.client(), &sidecar.name).await?;
    ensure!(
        warnings
            .iter()
            .any(|w| w.starts_with("NetworkPolicyWithdrawn:") && w.contains(WRONG_RANGE)),
        "no NetworkPolicyWithdrawn Warning names {WRONG_RANGE}: {warnings:?}"
    );
    // Not written again while the range is the one withdrawn, across a restart.
    set_operator_env(ctx, &["ROUTE_DEADLINE_SECONDS-"]).await?;
    ops::wait_registered(&ctx.client(), &sidecar.name, REGISTER_TIMEOUT).await?;
    ensure!(
        policy_of(ctx, sidecar).await?.is_none(),
        "the withdrawn range was written again after the operator restarted"
    );
    Ok(())
}

/// What `sidecar`'s webhook configuration went through, for messages.
fn configurations_seen(sidecar: &Sidecar) -> String {
    sidecar
        .configurations
        .seen()
        .iter()
        .map(|seen| {
            let state = if ops::is_proving(&seen.object) {
                "proving"
            } else if ops::is_degraded(&seen.object) {
                "degraded"
            } else {
                "the spec's values"
            };
            format!("{:?} {state}", seen.change)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A pod in a namespace no policy admits, dialling the initializer's Service.
struct Outsider<'a> {
    namespace: &'a str,
    target: &'a str,
}

/// What became of one connection attempt from the outsider.
#[derive(Debug, PartialEq, Eq)]
enum Reach {
    /// The connection was accepted.
    Connected,
    /// Refused, or nothing answered within [`CONNECT_SECONDS`]: what a NetworkPolicy does to a
    /// connection it does not admit (kube-router refuses, others drop), and also what a Service
    /// without a ready endpoint does (the scenario tells the two apart).
    KeptOut,
    /// Failed otherwise, with what kubectl said.
    Failed(String),
}

impl Outsider<'_> {
    /// Opens a TCP connection from the outsider pod to the Service's port 443, for at most
    /// [`CONNECT_SECONDS`] (bash's `/dev/tcp`: no tool beyond the shell).
    async fn connect(&self, ctx: &Ctx) -> Reach {
        let connect = format!("exec 3<>/dev/tcp/{}/443", self.target);
        let args = [
            "-n",
            self.namespace,
            "exec",
            "outsider",
            "--",
            "timeout",
            CONNECT_SECONDS,
            "bash",
            "-c",
            &connect,
        ];
        match kubectl_both(ctx, &args).await {
            Ok(_) => Reach::Connected,
            // timeout(1) exits 124 when the command ran out of time.
            Err(e)
                if e.to_string().contains("exit code 124")
                    || e.to_string().contains("Connection refused") =>
            {
                Reach::KeptOut
            }
            Err(e) => Reach::Failed(e.to_string()),
        }
    }
}

/// The outsider: a pod that only waits, in the image `E2E_SHELL_IMAGE` names (Debian, which
/// has bash; `make e2e-kind` loads it into the nodes).
fn outsider_pod() -> anyhow::Result<Pod> {
    let image = std::env::var("E2E_SHELL_IMAGE").unwrap_or_else(|_| SHELL_IMAGE.to_string());
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "outsider", "labels": {"app": "e2e-outsider"}},
        "spec": {
            "containers": [{"name": "shell", "image": image, "command": ["sleep", "infinity"]}],
            "terminationGracePeriodSeconds": 0,
        },
    }))?)
}

/// The cluster IP of the Service in front of `sidecar`'s pods.
async fn service_ip(ctx: &Ctx, sidecar: &Sidecar) -> anyhow::Result<String> {
    ops::workload_service_ip(&ctx.client(), &sidecar.workload_ns, &sidecar.name)
        .await?
        .with_context(|| format!("{} has no Service with a cluster IP", sidecar.name))
}

/// The NetworkPolicy the operator wrote in front of `sidecar`'s pods, if any.
async fn policy_of(ctx: &Ctx, sidecar: &Sidecar) -> anyhow::Result<Option<NetworkPolicy>> {
    ops::workload_network_policy(&ctx.client(), &sidecar.workload_ns, &sidecar.name).await
}

/// Where the API server's calls come from on kind: the control-plane node's address (the API
/// server runs in its network namespace), as one address.
async fn api_server_cidr(ctx: &Ctx) -> anyhow::Result<String> {
    let nodes = Api::<Node>::all(ctx.client())
        .list(&ListParams::default().labels("node-role.kubernetes.io/control-plane"))
        .await?;
    nodes
        .items
        .iter()
        .filter_map(|node| node.status.as_ref()?.addresses.as_ref())
        .flatten()
        .find(|address| address.type_ == "InternalIP")
        .map(|address| {
            let prefix = if address.address.contains(':') {
                128
            } else {
                32
            };
            format!("{}/{prefix}", address.address)
        })
        .context("no control-plane node with an InternalIP")
}

/// Sets (or with `NAME-`, unsets) the operator's environment, as `kubectl set env` does, and
/// waits for the new pods to be available.
async fn set_operator_env(ctx: &Ctx, settings: &[&str]) -> anyhow::Result<()> {
    let namespace = ctx.env.operator_namespace.as_str();
    let mut args = vec!["-n", namespace, "set", "env", OPERATOR_DEPLOYMENT];
    args.extend_from_slice(settings);
    kubectl(ctx, &args).await?;
    let timeout = format!("--timeout={}s", REGISTER_TIMEOUT.as_secs());
    kubectl(
        ctx,
        &[
            "-n",
            namespace,
            "rollout",
            "status",
            OPERATOR_DEPLOYMENT,
            &timeout,
        ],
    )
    .await?;
    Ok(())
}
