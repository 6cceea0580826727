//! The route check: proof that the API server reaches an initializer through its Service before
//! the configuration takes the spec's `failurePolicy`.
//!
//! The operator's probe dials every endpoint directly; the API server dials the Service, through
//! whatever routes the cluster's service proxy has programmed on the API server's own node, and
//! those follow new endpoints only at their next sync (later still on a loaded node). So the
//! first registration is the *proving* configuration: the Initializer's webhook failing open (as
//! [`build::degraded`]) plus one more webhook, [`check_webhook`], that selects only dry-run
//! creates of ConfigMaps labelled [`ROUTE_CHECK_LABEL`] in the workload namespace and calls the
//! same Service at [`ROUTE_CHECK_PATH`]. The operator sends such a dry-run create
//! ([`check_object`]); the SDK denies it there with [`ROUTE_CHECK_ANSWER`] and the object's name,
//! an answer that only a call which reached the initializer can carry, and the API server names
//! the check's webhook in the refusal ([`reached`]). Until then nothing blocks: the check's
//! webhook fails open too, a configuration the API server has not loaded yet admits the dry run
//! unanswered, and the Initializer's own webhook fails open. Once answered on a connection the
//! API server dialled for the check ([`Answered::proves_route`]), the spec's values are written.
//!
//! The check object never exists (a dry run stores nothing), and the label only adds a call to a
//! path that runs no handler: setting it on one's own ConfigMap exempts it from nothing.

use std::collections::BTreeMap;

use initializer_crds::constants::{
    DEGRADED_TIMEOUT_SECONDS, NAMESPACE_NAME_LABEL, ROUTE_CHECK_LABEL, ROUTE_CHECK_WEBHOOK_PREFIX,
};
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::build;

/// Where the check calls, and what it answers, as every SDK-built initializer serves them.
pub use kube_initializer::route::{Carried, ROUTE_CHECK_ANSWER, ROUTE_CHECK_PATH};

/// Name of the check webhook's `matchCondition` that lets only dry runs through.
pub const DRY_RUN_ONLY: &str = "initializer-route-check-dry-run";

/// The name of the route check's webhook beside the Initializer's webhook `webhook`.
pub fn check_name(webhook: &str) -> String {
    format!("{ROUTE_CHECK_WEBHOOK_PREFIX}{webhook}")
}

/// The webhook that answers the route check: the same Service and `caBundle` as `webhook` (the
/// Initializer's own) at [`ROUTE_CHECK_PATH`], for dry-run creates of ConfigMaps labelled
/// [`ROUTE_CHECK_LABEL`]` = label` in `workload_namespace` only, failing open.
pub fn check_webhook(
    webhook: &MutatingWebhook,
    workload_namespace: &str,
    label: &str,
) -> MutatingWebhook {
    let selector = |key: &str, value: &str| LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..LabelSelector::default()
    };
    MutatingWebhook {
        name: check_name(&webhook.name),
        admission_review_versions: vec!["v1".into()],
        client_config: WebhookClientConfig {
            service: webhook
                .client_config
                .service
                .clone()
                .map(|service| ServiceReference {
                    path: Some(ROUTE_CHECK_PATH.to_string()),
                    ..service
                }),
            ..webhook.client_config.clone()
        },
        failure_policy: Some("Ignore".into()),
        match_policy: Some("Exact".into()),
        namespace_selector: Some(selector(NAMESPACE_NAME_LABEL, workload_namespace)),
        object_selector: Some(selector(ROUTE_CHECK_LABEL, label)),
        reinvocation_policy: Some("Never".into()),
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec!["v1".into()]),
            resources: Some(vec!["configmaps".into()]),
            operations: Some(vec!["CREATE".into()]),
            scope: Some("Namespaced".into()),
        }]),
        side_effects: "None".into(),
        timeout_seconds: Some(DEGRADED_TIMEOUT_SECONDS),
        match_conditions: Some(vec![MatchCondition {
            name: DRY_RUN_ONLY.into(),
            expression: "request.dryRun == true".into(),
        }]),
    }
}

/// The configuration registered while the route is being proven: `webhook` degraded to fail
/// open ([`build::degraded`]), with [`check_webhook`] after its own webhooks (so readers that
/// take the first webhook still find the Initializer's).
pub fn proving(
    webhook: &MutatingWebhookConfiguration,
    workload_namespace: &str,
    label: &str,
) -> MutatingWebhookConfiguration {
    let mut proving = build::degraded(webhook);
    let check = webhook
        .webhooks
        .iter()
        .flatten()
        .next()
        .map(|first| check_webhook(first, workload_namespace, label));
    if let Some(check) = check {
        proving.webhooks.get_or_insert_with(Vec::new).push(check);
    }
    proving
}

/// Whether a configuration found in the cluster is a proving one (it holds the check's webhook).
pub fn is_proving(configuration: &MutatingWebhookConfiguration) -> bool {
    configuration
        .webhooks
        .iter()
        .flatten()
        .any(|hook| hook.name.starts_with(ROUTE_CHECK_WEBHOOK_PREFIX))
}

/// The ConfigMap a route check creates with `dryRun=All`: named `route-check-<nonce>` (the
/// name comes back in the answer, so an answer to an earlier check does not count), labelled for
/// the check's webhook.
pub fn check_object(workload_namespace: &str, label: &str, nonce: u64) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("route-check-{nonce:016x}")),
            namespace: Some(workload_namespace.to_string()),
            labels: Some(BTreeMap::from([(
                ROUTE_CHECK_LABEL.to_string(),
                label.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// The denial message with which an initializer answers the route check for `object_name`,
/// which came on `carried` (`None`: an initializer that does not say).
pub fn answer(object_name: &str, carried: Option<Carried>) -> String {
    kube_initializer::route::answer_message(object_name, carried)
}

/// The initializer's answer to a route check, found in the API server's refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answered {
    /// Which connection carried the check, as the initializer said; `None` when it does not
    /// say (a server of its own, or one built on an SDK from before the answer said it).
    pub carried: Option<Carried>,
}

impl Answered {
    /// Whether the answer proves the route as it is now. One on a reused connection does not:
    /// a firewall lets a connection it admitted keep flowing after its rules change, so the
    /// call may have come a way a new connection can no longer take. The initializer closed
    /// that connection, so the next check comes on another. An answer that does not say is
    /// taken as proof, which is all such an initializer allows.
    pub fn proves_route(self) -> bool {
        self.carried != Some(Carried::ReusedConnection)
    }
}

/// The answer in the API server's refusal of the check object `object_name` (its message) when
/// the refusal is the check webhook `check_webhook`'s: the call went through the Service and was
/// answered. The API server ends its message with the webhook's, so the answer must end it too,
/// followed by nothing or by which connection carried it. `None` for anything else (the dry run
/// admitted because the configuration is not loaded yet or the call failed open, refused by
/// another webhook or for another reason, or an answer with more words), which proves nothing.
pub fn reached(refusal: &str, check_webhook: &str, object_name: &str) -> Option<Answered> {
    let answer = format!(
        "admission webhook \"{check_webhook}\" denied the request: {}",
        answer(object_name, None)
    );
    let rest = &refusal[refusal.rfind(&answer)? + answer.len()..];
    if rest.is_empty() {
        return Some(Answered { carried: None });
    }
    [Carried::NewConnection, Carried::ReusedConnection]
        .into_iter()
        .find(|carried| rest.strip_prefix(' ') == Some(carried.words()))
        .map(|carried| Answered {
            carried: Some(carried),
        })
}

#[cfg(test)]
mod tests;
