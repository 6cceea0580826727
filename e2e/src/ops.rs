//! What scenarios ask of an Initializer and its workload: its configuration, its pods, its
//! conditions, and waits for the states a user would check with kubectl.

use std::time::{Duration, Instant};

use anyhow::Context;
use initializer_crds::{Initializer, Phase, constants};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, MutatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use crate::wait::{self, Check};

/// Whether a webhook configuration belongs to the Initializer `name`: it carries
/// `initializer.dev/initializer=<name>`, or it is managed by the operator and calls a Service
/// named after the Initializer.
pub fn belongs_to(configuration: &MutatingWebhookConfiguration, name: &str) -> bool {
    let labels = configuration.labels();
    if labels
        .get(constants::INITIALIZER_LABEL)
        .is_some_and(|value| value == name)
    {
        return true;
    }
    let managed = labels
        .get(constants::MANAGED_BY_LABEL)
        .is_some_and(|value| value == constants::MANAGED_BY_VALUE);
    managed
        && configuration.webhooks.iter().flatten().any(|webhook| {
            webhook
                .client_config
                .service
                .as_ref()
                .is_some_and(|service| service.name == name)
        })
}

/// Lists what `api` reaches that matches `params` (a failure names it `what`), and keeps what
/// `keep` picks.
pub async fn list_matching<K>(
    api: &Api<K>,
    params: &ListParams,
    what: &str,
    keep: impl Fn(&K) -> bool,
) -> anyhow::Result<Vec<K>>
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let list = api
        .list(params)
        .await
        .with_context(|| format!("failed to list {what}"))?;
    Ok(list.items.into_iter().filter(|k| keep(k)).collect())
}

/// Every webhook configuration of the Initializer `name`.
pub async fn configurations_of(
    client: &Client,
    name: &str,
) -> anyhow::Result<Vec<MutatingWebhookConfiguration>> {
    let api = Api::all(client.clone());
    let what = "MutatingWebhookConfigurations";
    list_matching(&api, &ListParams::default(), what, |c| belongs_to(c, name)).await
}

/// The webhook of the configuration registered for the Initializer `name`.
pub async fn registered_webhook(client: &Client, name: &str) -> anyhow::Result<MutatingWebhook> {
    configurations_of(client, name)
        .await?
        .into_iter()
        .next()
        .with_context(|| format!("no configuration of {name} is registered"))?
        .webhooks
        .into_iter()
        .flatten()
        .next()
        .with_context(|| format!("the configuration of {name} has no webhook"))
}

/// Every webhook configuration managed by the operator.
pub async fn managed_configurations(
    client: &Client,
) -> anyhow::Result<Vec<MutatingWebhookConfiguration>> {
    let selector = format!(
        "{}={}",
        constants::MANAGED_BY_LABEL,
        constants::MANAGED_BY_VALUE
    );
    let list = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default().labels(&selector))
        .await
        .context("failed to list managed MutatingWebhookConfigurations")?;
    Ok(list.items)
}

/// The Initializer `name`.
pub async fn initializer(client: &Client, name: &str) -> anyhow::Result<Initializer> {
    Api::<Initializer>::all(client.clone())
        .get(name)
        .await
        .with_context(|| format!("failed to get Initializer {name}"))
}

/// Sets the Initializer's `spec.suspend` (a merge patch); what the operator does about it is
/// for the caller to wait for.
pub async fn set_suspend(client: &Client, name: &str, suspended: bool) -> anyhow::Result<()> {
    Api::<Initializer>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"suspend": suspended}})),
        )
        .await
        .with_context(|| format!("failed to set suspend={suspended} on Initializer {name}"))?;
    Ok(())
}

/// The condition `type_` of an Initializer.
pub fn condition<'a>(initializer: &'a Initializer, type_: &str) -> Option<&'a Condition> {
    initializer
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// The phase, conditions and detail of an Initializer in one line, for messages.
pub fn describe(initializer: &Initializer) -> String {
    let Some(status) = initializer.status.as_ref() else {
        return "no status".to_string();
    };
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={} ({}: {})", c.type_, c.status, c.reason, c.message))
        .collect();
    let shown = |value: Option<String>| value.unwrap_or_else(|| "-".to_string());
    format!(
        "phase {}, registered {}, ready {}, conditions [{}]",
        shown(status.phase.map(|p| format!("{p:?}"))),
        shown(status.registered.map(|r| r.to_string())),
        shown(status.ready_replicas.map(|r| r.to_string())),
        conditions.join("; ")
    )
}

/// Whether the status says the Initializer is registered.
pub fn status_registered(initializer: &Initializer) -> bool {
    initializer
        .status
        .as_ref()
        .is_some_and(|s| s.registered == Some(true))
}

/// Waits until the Initializer is registered: its status says so and its configuration exists.
/// Returns the configuration and when it was first seen.
pub async fn wait_registered(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<(MutatingWebhookConfiguration, Instant)> {
    wait::until(
        format!("Initializer {name} to be registered"),
        timeout,
        || async {
            let initializer = initializer(client, name).await?;
            let mut configurations = configurations_of(client, name).await?;
            Ok(
                match (status_registered(&initializer), configurations.pop()) {
                    (true, Some(configuration)) => Check::Done((configuration, Instant::now())),
                    (_, configuration) => Check::Pending(format!(
                        "{}; configuration {}",
                        describe(&initializer),
                        configuration.map_or("absent".to_string(), |c| c.name_any())
                    )),
                },
            )
        },
    )
    .await
}

/// Waits until the Initializer has no configuration and its status says it is not registered.
pub async fn wait_deregistered(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    wait::until(
        format!("Initializer {name} to be deregistered"),
        timeout,
        || async {
            let initializer = initializer(client, name).await?;
            let configurations = configurations_of(client, name).await?;
            Ok(
                if configurations.is_empty() && !status_registered(&initializer) {
                    Check::Done(Instant::now())
                } else {
                    Check::Pending(format!(
                        "{}; {} configuration(s)",
                        describe(&initializer),
                        configurations.len()
                    ))
                },
            )
        },
    )
    .await
}

/// Waits until the Initializer reaches `phase`.
pub async fn wait_phase(
    client: &Client,
    name: &str,
    phase: Phase,
    timeout: Duration,
) -> anyhow::Result<Initializer> {
    wait::until(
        format!("Initializer {name} to reach phase {phase:?}"),
        timeout,
        || async {
            let initializer = initializer(client, name).await?;
            Ok(
                if initializer.status.as_ref().and_then(|s| s.phase) == Some(phase) {
                    Check::Done(initializer)
                } else {
                    Check::Pending(describe(&initializer))
                },
            )
        },
    )
    .await
}

/// The namespace an Initializer's workload runs in.
pub fn workload_namespace(initializer: &Initializer, operator_namespace: &str) -> String {
    initializer
        .spec
        .namespace
        .clone()
        .unwrap_or_else(|| operator_namespace.to_string())
}

fn initializer_selector(name: &str) -> String {
    format!("{}={name}", constants::INITIALIZER_LABEL)
}

/// The objects of the Initializer `name` in `namespace` (by its label) that `keep` picks; a
/// failure names them `kind`.
async fn labelled<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    kind: &str,
    keep: impl Fn(&K) -> bool,
) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    let api = Api::<K>::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(&initializer_selector(name));
    list_matching(&api, &params, &format!("{kind} in {namespace}"), keep).await
}

/// The Initializer's Deployment.
pub async fn workload_deployment(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<Deployment>> {
    let found = labelled(client, namespace, name, "Deployments", |_: &Deployment| {
        true
    })
    .await?;
    Ok(found.into_iter().next())
}

/// The cluster IP of the Initializer's Service, once it has one.
pub async fn workload_service_ip(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let found = labelled(client, namespace, name, "Services", |_: &Service| true).await?;
    Ok(found
        .into_iter()
        .find_map(|service| service.spec.and_then(|spec| spec.cluster_ip))
        .filter(|ip| !ip.is_empty() && ip != "None"))
}

/// The NetworkPolicy the operator wrote in front of the Initializer's pods, if any.
pub async fn workload_network_policy(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<NetworkPolicy>> {
    let found = labelled(
        client,
        namespace,
        name,
        "NetworkPolicies",
        |_: &NetworkPolicy| true,
    )
    .await?;
    Ok(found.into_iter().next())
}

/// The NetworkPolicies the operator wrote in front of the Initializer `name`'s pods, in any
/// namespace.
pub async fn network_policies_of(
    client: &Client,
    name: &str,
) -> anyhow::Result<Vec<NetworkPolicy>> {
    let params = ListParams::default().labels(&initializer_selector(name));
    Ok(Api::<NetworkPolicy>::all(client.clone())
        .list(&params)
        .await
        .with_context(|| format!("failed to list the NetworkPolicies of {name}"))?
        .items)
}

/// The address ranges `policy` admits (its `ipBlock`s), in the order written.
pub fn admitted_ranges(policy: &NetworkPolicy) -> Vec<String> {
    policy
        .spec
        .iter()
        .flat_map(|spec| spec.ingress.iter().flatten())
        .flat_map(|rule| rule.from.iter().flatten())
        .filter_map(|peer| Some(peer.ip_block.as_ref()?.cidr.clone()))
        .collect()
}

/// The API server's addresses as it lists them in the EndpointSlice of the `kubernetes`
/// Service in `default`, each as one address (`/32`, `/128`), sorted: what the operator's
/// default NetworkPolicy admits.
pub async fn api_server_addresses(client: &Client) -> anyhow::Result<Vec<String>> {
    let slice = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .context("failed to read the EndpointSlice default/kubernetes")?;
    let mut addresses: Vec<String> = slice
        .endpoints
        .iter()
        .flatten()
        .flat_map(|endpoint| &endpoint.addresses)
        .map(|address| {
            let prefix = if address.contains(':') { 128 } else { 32 };
            format!("{address}/{prefix}")
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

/// The Initializer's pods that are not being deleted.
pub async fn workload_pods(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<Pod>> {
    let live = |pod: &Pod| pod.metadata.deletion_timestamp.is_none();
    labelled(client, namespace, name, "pods", live).await
}

/// Every pod of the Initializer `name` in `namespace`, terminating ones included: their
/// containers run until they exit or their grace period ends.
pub async fn workload_pods_with_terminating(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<Pod>> {
    labelled(client, namespace, name, "pods", |_: &Pod| true).await
}

/// The names of the live pods of the Initializer `name` in `namespace`.
pub async fn workload_pod_names(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<String>> {
    let pods = workload_pods(client, namespace, name).await?;
    Ok(pods.iter().map(ResourceExt::name_any).collect())
}

/// Whether a pod's Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// Waits until at least `count` of the Initializer's pods are ready, and returns them.
pub async fn wait_pods_ready(
    client: &Client,
    namespace: &str,
    name: &str,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Pod>> {
    wait::until(
        format!("{count} ready pod(s) of Initializer {name} in {namespace}"),
        timeout,
        || async {
            let pods = workload_pods(client, namespace, name).await?;
            let ready: Vec<Pod> = pods.iter().filter(|p| pod_ready(p)).cloned().collect();
            Ok(if ready.len() >= count {
                Check::Done(ready)
            } else {
                Check::Pending(format!(
                    "{} pod(s), {} ready: {}",
                    pods.len(),
                    ready.len(),
                    pod_states(&pods)
                ))
            })
        },
    )
    .await
}

/// `name=phase/ready` for each pod, for messages.
pub fn pod_states(pods: &[Pod]) -> String {
    let states: Vec<String> = pods
        .iter()
        .map(|pod| {
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            format!(
                "{}={phase}/{}",
                pod.name_any(),
                if pod_ready(pod) { "ready" } else { "unready" }
            )
        })
        .collect();
    states.join(", ")
}

/// Waits for a Warning Event about the Initializer `name` (what `kubectl describe` shows), and
/// returns its reason and note.
pub async fn wait_warning_event(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<(String, String)> {
    wait_event_about(
        client,
        name,
        format!("a Warning Event about Initializer {name}"),
        timeout,
        |event| {
            (event.type_.as_deref() == Some("Warning")).then(|| {
                (
                    event.reason.clone().unwrap_or_default(),
                    event.note.clone().unwrap_or_default(),
                )
            })
        },
        |about| format!("{} event(s) about it, none a Warning", about.len()),
    )
    .await
}

/// The Warning Events about the Initializer `name`, oldest first, as `reason: note`: why the
/// operator judged it unhealthy, for a failure message.
pub async fn warning_events(client: &Client, name: &str) -> anyhow::Result<Vec<String>> {
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("failed to list Events")?;
    let mut warnings: Vec<&Event> = events
        .items
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect();
    warnings.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    Ok(warnings
        .into_iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.as_deref().unwrap_or_default(),
                e.note.as_deref().unwrap_or_default()
            )
        })
        .collect())
}

/// Waits until `pick` takes something from one of the Events about the Initializer `name`;
/// `none` says what was there instead while waiting (the timeout error shows the last).
pub async fn wait_event_about<T>(
    client: &Client,
    name: &str,
    what: String,
    timeout: Duration,
    pick: impl Fn(&Event) -> Option<T>,
    none: impl Fn(&[&Event]) -> String,
) -> anyhow::Result<T> {
    wait::until(what, timeout, || async {
        let events = Api::<Event>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context("failed to list Events")?;
        let about: Vec<&Event> = events
            .items
            .iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect();
        Ok(match about.iter().find_map(|e| pick(e)) {
            Some(found) => Check::Done(found),
            None => Check::Pending(none(&about)),
        })
    })
    .await
}

/// Whether a configuration is the degraded one the operator registers while its initializer is
/// in trouble: `failurePolicy: Ignore` (the spec asks for `Fail`).
pub fn is_degraded(configuration: &MutatingWebhookConfiguration) -> bool {
    configuration
        .webhooks
        .iter()
        .flatten()
        .any(|w| w.failure_policy.as_deref() == Some("Ignore"))
}

/// Whether a configuration is the one the operator registers, failing open, while it proves
/// that the API server reaches the initializer (it holds the route check's webhook).
pub fn is_proving(configuration: &MutatingWebhookConfiguration) -> bool {
    configuration
        .webhooks
        .iter()
        .flatten()
        .any(|w| w.name.starts_with(constants::ROUTE_CHECK_WEBHOOK_PREFIX))
}

/// Waits until the Initializer reports missed initializations for a window that ends after
/// `after`, and returns them.
pub async fn wait_missed(
    client: &Client,
    name: &str,
    after: k8s_openapi::jiff::Timestamp,
    timeout: Duration,
) -> anyhow::Result<initializer_crds::MissedInitializations> {
    wait::until(
        format!("Initializer {name} to report missed initializations"),
        timeout,
        || async {
            let initializer = initializer(client, name).await?;
            let missed = initializer
                .status
                .as_ref()
                .and_then(|s| s.missed_initializations.clone());
            Ok(match missed {
                Some(m) if m.to.0 > after => Check::Done(m),
                other => Check::Pending(format!(
                    "missed initializations {other:?}; {}",
                    describe(&initializer)
                )),
            })
        },
    )
    .await
}

/// The last `max` lines of the logs of the pods in `namespace` selected by `labels` (the
/// last ten minutes of each) that mention `needle`, each prefixed with its pod's name: what a
/// failure's message carries of what the components saw. A pod whose log cannot be read says so
/// in its place.
pub async fn log_lines_mentioning(
    client: &Client,
    namespace: &str,
    labels: &str,
    needle: &str,
    max: usize,
) -> anyhow::Result<Vec<String>> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&ListParams::default().labels(labels))
        .await
        .with_context(|| format!("failed to list the pods {labels} in {namespace}"))?;
    let params = LogParams {
        since_seconds: Some(600),
        ..LogParams::default()
    };
    let mut lines = Vec::new();
    for pod in listed.items {
        let pod = pod.name_any();
        match pods.logs(&pod, &params).await {
            Ok(log) => lines.extend(
                log.lines()
                    .filter(|line| line.contains(needle))
                    .map(|line| format!("{pod}: {line}")),
            ),
            Err(e) => lines.push(format!("{pod}: failed to read its log: {e}")),
        }
    }
    let skip = lines.len().saturating_sub(max);
    Ok(lines.split_off(skip))
}
