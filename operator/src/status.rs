//! Pure computation of an Initializer's whole status from what the operator observed: phase,
//! the four conditions with reasons and messages, and the figures shown by `kubectl get`. The
//! IO shell writes the result as one patch.

use std::collections::BTreeMap;
use std::time::Duration;

use initializer_crds::constants::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use initializer_crds::{
    Initializer, InitializerStatus, MissedInitializations, Outage, Phase, Suspension,
};
use initializer_packaging::manifest::{NAME_LABEL as OPERATOR_NAME_LABEL, OPERATOR_NAME};
use initializer_packaging::readiness::deployment_available;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::engine::EngineView;
pub use crate::engine::IN_API_SERVER;
use crate::health::{Snapshot, State};
use crate::probe::Failure;
use crate::validate::{Refusal, describe};

/// The last probe's time and latency are refreshed in the status at most this often, so that
/// probes alone do not turn into a stream of status writes.
pub const PROBE_STATUS_REFRESH: Duration = Duration::from_secs(25);

pub use initializer_crds::conditions::{
    AVAILABLE, CONFLICT, DEGRADED, FAIL_CLOSED, FALLBACK_IN_FORCE, READY, RECONCILING, REGISTERED,
    RESPONDING, SHARED_NAMESPACE, STALLED, VALID,
};

/// The `details` key holding why the last reconcile failed.
pub const LAST_ERROR: &str = "lastError";

/// A stored status with `details.lastError` set to `error`, or removed without one: what an
/// Initializer nobody supervises shows when only its last error changed.
pub fn with_last_error(mut status: InitializerStatus, error: Option<&str>) -> InitializerStatus {
    match error {
        Some(error) => {
            status
                .details
                .insert(LAST_ERROR.to_string(), error.to_string());
        }
        None => {
            status.details.remove(LAST_ERROR);
        }
    }
    status
}

/// Where the fallback policy stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FallbackView {
    /// Not installed: the initializer is healthy (or never left the path).
    NotNeeded,
    /// Created; the API server loads it within about a second.
    Installing,
    /// In force.
    InForce,
    /// The API server does not serve ValidatingAdmissionPolicy.
    Unsupported,
    /// It could not be installed: why.
    Failed(String),
}

/// What the Deployment's status says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadObservation {
    /// Desired replicas.
    pub replicas: i32,
    /// Ready replicas.
    pub ready_replicas: i32,
    /// Available replicas.
    pub available_replicas: i32,
    /// The `Available` condition is true and at least one replica is available (the one
    /// predicate, [`deployment_available`]).
    pub available: bool,
    /// The Deployment's own explanation when it is not available.
    pub message: Option<String>,
    /// The Deployment's `Progressing` message once its progress deadline passed without a
    /// rollout completing (reason `ProgressDeadlineExceeded`): it will not get there by itself.
    pub past_deadline: Option<String>,
    /// Deployments in the operator's namespace that neither the operator nor an Initializer
    /// made ([`foreign_deployments`]).
    pub shared_with: Vec<String>,
}

/// The Deployments in the operator's namespace that are not the operator's own (its pods carry
/// `app.kubernetes.io/name: initializer-operator`) nor an Initializer's workload (the operator's
/// managed-by label): someone else runs there, with rights on the namespace's Secrets.
pub fn foreign_deployments(deployments: &[Deployment]) -> Vec<String> {
    let named = |labels: Option<&BTreeMap<String, String>>, key: &str, value: &str| {
        labels.and_then(|l| l.get(key)).is_some_and(|v| v == value)
    };
    deployments
        .iter()
        .filter(|d| {
            let own = d.metadata.labels.as_ref();
            let pods = d
                .spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref());
            let operator = [own, pods]
                .into_iter()
                .any(|labels| named(labels, OPERATOR_NAME_LABEL, OPERATOR_NAME));
            let workload = named(own, MANAGED_BY_LABEL, MANAGED_BY_VALUE);
            !operator && !workload
        })
        .filter_map(|d| d.metadata.name.clone())
        .collect()
}

/// Reads the relevant figures from a Deployment.
pub fn observe_workload(deployment: &Deployment) -> WorkloadObservation {
    let status = deployment.status.clone().unwrap_or_default();
    let condition = |type_: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_.as_deref() == Some(type_))
    };
    let past_deadline = condition("Progressing")
        .filter(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
        .map(|c| c.message.clone().unwrap_or_default());
    WorkloadObservation {
        replicas: deployment.spec.replicas.unwrap_or(1),
        ready_replicas: status.ready_replicas.unwrap_or(0),
        available_replicas: status.available_replicas.unwrap_or(0),
        available: deployment_available(deployment),
        message: condition("Available").and_then(|c| c.message.clone()),
        past_deadline,
        shared_with: Vec::new(),
    }
}

/// The outcome of the last active probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeRecord {
    /// When it ran.
    pub at: Timestamp,
    /// How long it took.
    pub latency: Duration,
    /// Whether it counted as a success.
    pub ok: bool,
    /// What happened, for humans.
    pub message: String,
    /// Why it failed, when it did.
    pub failure: Option<Failure>,
}

/// Everything the status is computed from.
#[derive(Clone, Debug)]
pub struct Observation<'a> {
    /// `metadata.generation` of the Initializer.
    pub generation: Option<i64>,
    /// Refusals, when the spec is invalid.
    pub refusals: &'a [Refusal],
    /// Whether, and by which switch, it is suspended.
    pub suspended: Option<Suspension>,
    /// The Deployment, once it exists.
    pub workload: Option<WorkloadObservation>,
    /// The health machine, once it runs.
    pub health: Option<Snapshot>,
    /// The last probe.
    pub probe: Option<ProbeRecord>,
    /// Whether the configuration exists now.
    pub registered: bool,
    /// Name of the configuration (registered or not).
    pub configuration_name: &'a str,
    /// Its kind (`MutatingWebhookConfiguration`, or `InitializerConfiguration` with the legacy
    /// backend), for the messages.
    pub configuration_kind: &'a str,
    /// Expiry of the serving certificate.
    pub certificate_not_after: Option<Timestamp>,
    /// The time of this computation.
    pub now: Timestamp,
    /// The status before, to keep `lastTransitionTime` of unchanged conditions.
    pub previous: Option<&'a InitializerStatus>,
    /// Whether the configuration is registered degraded (fail open).
    pub degraded: bool,
    /// The last outage's steps.
    pub outage: Option<Outage>,
    /// The fallback, when the spec has one.
    pub fallback: Option<FallbackView>,
    /// What slipped through the last fail-open window.
    pub missed: Option<MissedInitializations>,
    /// Under `failurePolicy: Fail`, how soon a hung initializer is taken out of the path.
    pub fail_closed: Option<FailClosedBounds>,
    /// Why the last reconcile could not deploy the workload (or left an object alone), shown
    /// as `details.lastError` until a reconcile deploys it.
    pub last_error: Option<&'a str>,
    /// Where a preset's injection runs, and why ([`crate::engine`]); `None` for an
    /// Initializer nothing supervises.
    pub engine: Option<&'a EngineView>,
    /// While the proving configuration is registered: what the route checks saw
    /// ([`crate::route`]).
    pub route_check: Option<RouteCheck<'a>>,
}

/// The route checks of a proving configuration, as the status shows them.
#[derive(Clone, Copy, Debug)]
pub struct RouteCheck<'a> {
    /// What the last check saw.
    pub last: &'a str,
    /// How long the checks have gone unanswered.
    pub unanswered_for: Duration,
    /// How long they may before the Initializer is `Stalled` ([`ROUTE_DEADLINE`] unless the
    /// operator is told otherwise).
    pub deadline: Duration,
}

/// How long the route checks may go unanswered, by default, before the Initializer is `Stalled`: the API
/// server does not reach it, and something outside the spec (a firewall, a NetworkPolicy, an
/// image without `/route-check`) must change. It recovers by itself once that is put right.
pub const ROUTE_DEADLINE: Duration = Duration::from_secs(300);

/// What has not happened within its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overdue<'a> {
    /// The Deployment's progress deadline passed: its message.
    Workload(&'a str),
    /// The route checks went unanswered for their deadline: what the last one saw, and the
    /// deadline.
    Route(&'a str, Duration),
}

impl Observation<'_> {
    /// Whether the injection runs in the API server: the webhook is deregistered and its
    /// Deployment kept at zero replicas on purpose.
    fn in_api_server(&self) -> bool {
        self.engine.is_some_and(EngineView::in_api_server)
    }

    /// Whether a registration fails open while a route that changed under it is proven again
    /// (the machine degraded, the proving configuration registered).
    fn reproving(&self) -> bool {
        self.route_check.is_some() && self.health.is_some_and(|h| h.state == State::Degraded)
    }
}

/// How soon, under `failurePolicy: Fail`, the operator takes a hung initializer out of the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailClosedBounds {
    /// Degraded to fail open: one period and the latency budget.
    pub degraded_within: Duration,
    /// Removed: `failureThreshold` periods and the latency budget (capped by validation).
    pub removed_within: Duration,
}

/// The phase for an observation.
pub fn phase(o: &Observation<'_>) -> Phase {
    if !o.refusals.is_empty() {
        Phase::Invalid
    } else if o.suspended.is_some() {
        Phase::Suspended
    } else if o.in_api_server() && !o.registered {
        Phase::InApiServer
    } else if (o.registered && o.degraded) || o.reproving() {
        Phase::Degraded
    } else if o.registered {
        Phase::Registered
    } else if o.health.is_some_and(|h| h.state == State::Unresponsive) {
        Phase::Unresponsive
    } else if o.workload.is_some() {
        Phase::Deploying
    } else {
        Phase::Pending
    }
}

/// Computes the whole status.
pub fn compute(o: &Observation<'_>) -> InitializerStatus {
    let conditions = conditions(o);
    let details = details(o);
    let status = InitializerStatus {
        phase: Some(phase(o)),
        conditions,
        observed_generation: o.generation,
        ready_replicas: o.workload.as_ref().map(|w| w.ready_replicas),
        registered: Some(o.registered),
        engine: o.engine.map(|e| e.in_force),
        configuration_name: Some(o.configuration_name.to_string()),
        last_probe_time: o.probe.as_ref().map(|p| Time(p.at)),
        last_probe_latency_millis: o
            .probe
            .as_ref()
            .map(|p| i64::try_from(p.latency.as_millis()).unwrap_or(i64::MAX)),
        certificate_not_after: o.certificate_not_after.map(Time),
        details,
        last_outage: o.outage.clone(),
        missed_initializations: o.missed.clone(),
        // The guard's witness is written apart (`Supervisor::record_guard_witness`), as is the
        // withdrawn NetworkPolicy (`apply::apply_withdrawn_network_policy`).
        guard: None,
        withdrawn_network_policy: None,
    };
    let workload = o.workload.as_ref().and_then(|w| w.past_deadline.as_deref());
    let route = o
        .route_check
        .filter(|check| check.unanswered_for >= check.deadline);
    let overdue = match (workload, route) {
        (Some(message), _) => Some(Overdue::Workload(message)),
        (None, Some(check)) => Some(Overdue::Route(check.last, check.deadline)),
        (None, None) => None,
    };
    with_standing(status, overdue, o.previous, o.now)
}

/// The conditions: `Valid`, then either the three a refused spec leaves unknown or every
/// condition the observation shows.
fn conditions(o: &Observation<'_>) -> Vec<Condition> {
    let invalid = !o.refusals.is_empty();
    let mut conditions = vec![valid_condition(o)];
    if invalid {
        for type_ in [AVAILABLE, RESPONDING, REGISTERED] {
            let reason = if type_ == REGISTERED {
                "Invalid"
            } else {
                "NotDeployed"
            };
            let status = if type_ == REGISTERED {
                "False"
            } else {
                "Unknown"
            };
            conditions.push(condition(
                o,
                type_,
                status,
                reason,
                "the spec was refused".into(),
            ));
        }
    } else {
        conditions.push(available_condition(o));
        conditions.push(responding_condition(o));
        conditions.push(registered_condition(o));
        if let Some(c) = degraded_condition(o) {
            conditions.push(c);
        }
        if let Some(c) = fallback_condition(o) {
            conditions.push(c);
        }
        if let Some(c) = fail_closed_condition(o) {
            conditions.push(c);
        }
        if let Some(c) = shared_namespace_condition(o) {
            conditions.push(c);
        }
        if let Some(c) = in_api_server_condition(o) {
            conditions.push(c);
        }
    }
    conditions
}

/// `status.details`: the last probe's error, the hold-down while out of the path, the last
/// failure.
fn details(o: &Observation<'_>) -> BTreeMap<String, String> {
    let mut details = BTreeMap::new();
    if let Some(p) = o.probe.as_ref().filter(|p| !p.ok) {
        details.insert("lastProbeError".to_string(), p.message.clone());
    }
    if let Some(hold) = o.health.and_then(|h| h.hold_down).filter(|_| !o.registered) {
        details.insert("holdDownSeconds".to_string(), hold.as_secs().to_string());
    }
    if let Some(error) = o.last_error {
        details.insert(LAST_ERROR.to_string(), error.to_string());
    }
    details
}

/// Where an Initializer stands, in the terms of Kubernetes' conventions for any object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The one of `Ready`, `Reconciling` and `Stalled` that is `True`.
    pub type_: &'static str,
    /// Why, in one word (the reason of all three conditions).
    pub reason: &'static str,
    /// Why, for humans.
    pub message: String,
}

/// Where a status stands: stalled when a change is needed (a refused or held-back spec,
/// another party's object in the way, a workload past its progress deadline), reconciling while
/// the operator works towards the spec or waits for the initializer to answer again, ready when
/// the initializer does its job as the spec has it (suspended included: that is what the spec
/// asks). `overdue` is what did not happen within its deadline, if anything.
pub fn standing(status: &InitializerStatus, overdue: Option<Overdue<'_>>) -> Standing {
    let stand = |type_, reason, message: &str| Standing {
        type_,
        reason,
        message: message.to_string(),
    };
    let message_of = |type_: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map_or("", |c| c.message.as_str())
    };
    let conflict = status
        .conditions
        .iter()
        .any(|c| c.type_ == CONFLICT && c.status == "True");
    if conflict {
        return stand(STALLED, "Conflict", message_of(CONFLICT));
    }
    let route_not_proven = |last: &str, deadline: Duration| {
        stand(
            STALLED,
            "RouteNotProven",
            &format!(
                "the API server has not been seen reaching the initializer through its Service for {} s; it stays registered failing open; the last check: {last}",
                deadline.as_secs()
            ),
        )
    };
    match status.phase.unwrap_or_default() {
        Phase::Invalid => stand(STALLED, "Refused", message_of(VALID)),
        Phase::Pending | Phase::Deploying => match overdue {
            Some(Overdue::Workload(message)) => stand(
                STALLED,
                "ProgressDeadlineExceeded",
                &format!("the workload never became ready: {message}"),
            ),
            Some(Overdue::Route(last, deadline)) => route_not_proven(last, deadline),
            None => stand(
                RECONCILING,
                "Deploying",
                "the workload is being deployed; the configuration is registered once it is ready and answering",
            ),
        },
        // A route that changed under the registration and is not proven again.
        Phase::Degraded if let Some(Overdue::Route(last, deadline)) = overdue => {
            route_not_proven(last, deadline)
        }
        Phase::Degraded => stand(RECONCILING, "Degraded", message_of(DEGRADED)),
        Phase::Unresponsive => stand(RECONCILING, "Unresponsive", message_of(DEGRADED)),
        Phase::Registered => stand(READY, "Registered", message_of(REGISTERED)),
        Phase::InApiServer => stand(READY, "InApiServer", message_of(IN_API_SERVER)),
        Phase::Suspended => stand(READY, "Suspended", message_of(REGISTERED)),
    }
}

/// `status` with its `Ready`, `Reconciling` and `Stalled` conditions set from [`standing`]
/// (each keeping its `lastTransitionTime` from `previous` while its status stays the same).
pub fn with_standing(
    mut status: InitializerStatus,
    overdue: Option<Overdue<'_>>,
    previous: Option<&InitializerStatus>,
    now: Timestamp,
) -> InitializerStatus {
    let standing = standing(&status, overdue);
    status
        .conditions
        .retain(|c| ![READY, RECONCILING, STALLED].contains(&c.type_.as_str()));
    for (i, type_) in [READY, RECONCILING, STALLED].into_iter().enumerate() {
        let truth = if type_ == standing.type_ {
            "True"
        } else {
            "False"
        };
        let since = transition_time(previous, type_, truth, now);
        status.conditions.insert(
            i,
            Condition {
                type_: type_.to_string(),
                status: truth.to_string(),
                reason: standing.reason.to_string(),
                message: standing.message.clone(),
                observed_generation: status.observed_generation,
                last_transition_time: since,
            },
        );
    }
    status
}

/// The status of an Initializer with nothing registered or supervised (refused, in conflict,
/// or suspended while its workload failed), keeping its last outage and missed count.
pub fn unsupervised(
    obj: &Initializer,
    refusals: &[Refusal],
    configuration: &str,
    last_error: Option<&str>,
    now: Timestamp,
) -> InitializerStatus {
    let previous = obj.status.as_ref();
    compute(&Observation {
        generation: obj.metadata.generation,
        refusals,
        suspended: obj.suspension(),
        workload: None,
        health: None,
        probe: None,
        registered: false,
        configuration_name: configuration,
        configuration_kind: obj.spec.backend.configuration_kind(),
        certificate_not_after: None,
        now,
        previous,
        degraded: false,
        outage: previous.and_then(|s| s.last_outage.clone()),
        fallback: None,
        missed: previous.and_then(|s| s.missed_initializations.clone()),
        fail_closed: None,
        last_error,
        engine: None,
        route_check: None,
    })
}

/// The status of an unsupervised Initializer whose workload could not be deployed: its stored
/// status with `details.lastError`, or, when suspended (its configuration is already gone) or
/// never written, the unsupervised status with it, rather than a stale phase beside the error.
pub fn after_failure(
    obj: &Initializer,
    configuration: &str,
    error: &str,
    now: Timestamp,
) -> InitializerStatus {
    match obj.status.clone() {
        Some(stored) if !obj.is_suspended() => with_last_error(stored, Some(error)),
        _ => unsupervised(obj, &[], configuration, Some(error), now),
    }
}

/// A step's time for messages: `12:00:01.234Z`.
fn at(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>) -> String {
    t.map_or_else(
        || "-".to_string(),
        |t| jiff::fmt::strtime::format("%H:%M:%S%.3fZ", t.0).unwrap_or_else(|_| t.0.to_string()),
    )
}

fn fail_closed_condition(o: &Observation<'_>) -> Option<Condition> {
    let bounds = o.fail_closed?;
    Some(if o.registered && !o.degraded {
        condition(
            o,
            FAIL_CLOSED,
            "True",
            "Supervised",
            format!(
                "failurePolicy Fail is in force: a matching create is refused whenever the initializer cannot answer. While the operator runs, a hung initializer fails open within {:.1} s (degraded) and is removed within {:.1} s; while the operator is down nothing removes it (`initializer-operator uninstall` deregisters before it removes the operator)",
                bounds.degraded_within.as_secs_f64(),
                bounds.removed_within.as_secs_f64(),
            ),
        )
    } else {
        condition(
            o,
            FAIL_CLOSED,
            "False",
            "NotInForce",
            format!(
                "{} is not registered with failurePolicy Fail now: no create is refused for want of the initializer",
                o.configuration_name
            ),
        )
    })
}

fn degraded_condition(o: &Observation<'_>) -> Option<Condition> {
    let state = o.health.map(|h| h.state);
    let outage = o.outage.as_ref();
    let name = o.configuration_name;
    if o.registered && o.degraded {
        return Some(condition(
            o,
            DEGRADED,
            "True",
            "FailOpen",
            format!(
                "a probe failed at {}; since {} {name} is registered with failurePolicy Ignore and timeoutSeconds 1, until the initializer answers again or is removed",
                at(outage.and_then(|x| x.started_at.as_ref())),
                at(outage.and_then(|x| x.degraded_at.as_ref())),
            ),
        ));
    }
    if o.reproving() {
        return Some(condition(
            o,
            DEGRADED,
            "True",
            "RouteChanged",
            format!(
                "the NetworkPolicy in front of the initializer changed at {}: {name} fails open until a call of the API server is seen reaching the initializer through it",
                at(outage.and_then(|x| x.degraded_at.as_ref())),
            ),
        ));
    }
    if !o.registered && state == Some(State::Unresponsive) {
        return Some(condition(
            o,
            DEGRADED,
            "True",
            "Deregistered",
            format!(
                "trouble since {}, degraded at {}, {name} removed at {}: creates pass without the initializer",
                at(outage.and_then(|x| x.started_at.as_ref())),
                at(outage.and_then(|x| x.degraded_at.as_ref())),
                at(outage.and_then(|x| x.deregistered_at.as_ref())),
            ),
        ));
    }
    let outage = outage?;
    Some(condition(
        o,
        DEGRADED,
        "False",
        if o.registered {
            "Restored"
        } else {
            "NotRegistered"
        },
        format!(
            "the last outage: trouble at {}, degraded at {}, removed at {}, registered again with the spec's values at {}",
            at(outage.started_at.as_ref()),
            at(outage.degraded_at.as_ref()),
            at(outage.deregistered_at.as_ref()),
            at(outage.restored_at.as_ref()),
        ),
    ))
}

fn fallback_condition(o: &Observation<'_>) -> Option<Condition> {
    let installed = at(o
        .outage
        .as_ref()
        .and_then(|x| x.fallback_installed_at.as_ref()));
    let (status, reason, message) = match o.fallback.as_ref()? {
        FallbackView::InForce => (
            "True",
            "InForce",
            format!("the fallback ValidatingAdmissionPolicy and its binding are in force (created at {installed})"),
        ),
        FallbackView::Installing => (
            "False",
            "Installing",
            format!("the fallback was created at {installed}; the API server loads policies within about a second, and the configuration fails open only then"),
        ),
        FallbackView::NotNeeded => (
            "False",
            "NotNeeded",
            "the initializer is in the path: the fallback is not installed".to_string(),
        ),
        FallbackView::Unsupported => (
            "False",
            "Unsupported",
            "the API server does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy: nothing enforces the fallback while the initializer is out".to_string(),
        ),
        FallbackView::Failed(why) => ("False", "Failed", format!("failed to install the fallback: {why}")),
    };
    Some(condition(o, FALLBACK_IN_FORCE, status, reason, message))
}

/// A warning while the operator's namespace holds someone else's Deployments.
fn shared_namespace_condition(o: &Observation<'_>) -> Option<Condition> {
    let shared = &o.workload.as_ref()?.shared_with;
    if shared.is_empty() {
        return None;
    }
    let shown: Vec<&str> = shared.iter().take(5).map(String::as_str).collect();
    Some(condition(
        o,
        SHARED_NAMESPACE,
        "True",
        "OtherDeploymentsInNamespace",
        format!(
            "the operator's namespace, which holds every CA key, also runs {} Deployment(s) \
             neither the operator nor an Initializer made ({}{}): whoever may read Secrets there \
             can sign certificates the API server trusts; install the operator in a namespace of \
             its own (initializer-system)",
            shared.len(),
            shown.join(", "),
            if shared.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        ),
    ))
}

fn condition(
    o: &Observation<'_>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
) -> Condition {
    let since = transition_time(o.previous, type_, status, o.now);
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: o.generation,
        last_transition_time: since,
    }
}

/// When condition `type_` took `status`: kept from `previous` while it has that status, else
/// `now`.
fn transition_time(
    previous: Option<&InitializerStatus>,
    type_: &str,
    status: &str,
    now: Timestamp,
) -> Time {
    previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == type_))
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now))
}

/// The status with a `Conflict` condition saying `message`: an object the operator would
/// create exists and belongs to someone else, so nothing is registered until it goes.
pub fn with_conflict(
    mut status: InitializerStatus,
    message: String,
    previous: Option<&InitializerStatus>,
    now: Timestamp,
) -> InitializerStatus {
    let since = transition_time(previous, CONFLICT, "True", now);
    status.conditions.retain(|c| c.type_ != CONFLICT);
    status.conditions.push(Condition {
        type_: CONFLICT.to_string(),
        status: "True".to_string(),
        reason: "NotOurs".to_string(),
        message,
        observed_generation: status.observed_generation,
        last_transition_time: since,
    });
    with_standing(status, None, previous, now)
}

fn valid_condition(o: &Observation<'_>) -> Condition {
    if o.refusals.is_empty() {
        condition(o, VALID, "True", "Accepted", "the spec is valid".into())
    } else {
        condition(o, VALID, "False", "Refused", describe(o.refusals))
    }
}

fn available_condition(o: &Observation<'_>) -> Condition {
    if o.in_api_server() {
        return condition(
            o,
            AVAILABLE,
            "False",
            "ScaledToZero",
            "the preset runs in the API server: the webhook's Deployment is kept at zero replicas"
                .into(),
        );
    }
    match &o.workload {
        None => condition(
            o,
            AVAILABLE,
            "False",
            "NotDeployed",
            "the Deployment does not exist yet".into(),
        ),
        Some(w) if w.available => condition(
            o,
            AVAILABLE,
            "True",
            "MinimumReplicasAvailable",
            format!("{} of {} replicas ready", w.ready_replicas, w.replicas),
        ),
        Some(w) => condition(
            o,
            AVAILABLE,
            "False",
            "DeploymentUnavailable",
            w.message.clone().unwrap_or_else(|| {
                format!("{} of {} replicas ready", w.ready_replicas, w.replicas)
            }),
        ),
    }
}

fn responding_condition(o: &Observation<'_>) -> Condition {
    if o.in_api_server() {
        return condition(
            o,
            RESPONDING,
            "Unknown",
            "InApiServer",
            "nothing to probe: the preset runs in the API server".into(),
        );
    }
    if o.health.is_some_and(|h| h.endpoints == Some(0)) {
        return condition(
            o,
            RESPONDING,
            "False",
            "NoReadyEndpoints",
            "the Service has no ready endpoint".into(),
        );
    }
    match &o.probe {
        None => condition(
            o,
            RESPONDING,
            "Unknown",
            "NotProbed",
            "no probe has run yet".into(),
        ),
        Some(p) if p.ok => condition(
            o,
            RESPONDING,
            "True",
            "ProbeSucceeded",
            // No figure here: a message that changed with every probe's latency would be a
            // status write per probe (the latency is `lastProbeLatencyMillis`, refreshed at
            // most every PROBE_STATUS_REFRESH).
            "answered a dry-run review within its latency budget".into(),
        ),
        Some(p) => condition(
            o,
            RESPONDING,
            "False",
            p.failure.map_or("ProbeFailed", Failure::reason),
            p.message.clone(),
        ),
    }
}

fn registered_condition(o: &Observation<'_>) -> Condition {
    let name = o.configuration_name;
    if o.registered {
        return condition(
            o,
            REGISTERED,
            "True",
            "Registered",
            format!("{} {name} is registered", o.configuration_kind),
        );
    }
    if let Some(suspension) = o.suspended {
        return condition(
            o,
            REGISTERED,
            "False",
            "Suspended",
            format!(
                "{}: the configuration stays removed, on purpose",
                suspension.describe()
            ),
        );
    }
    if o.in_api_server() {
        return condition(
            o,
            REGISTERED,
            "False",
            "InApiServer",
            format!("{name} is removed: the preset runs in the API server"),
        );
    }
    match o.health.map(|h| h.state) {
        Some(State::Unresponsive) => condition(
            o,
            REGISTERED,
            "False",
            "Unresponsive",
            format!(
                "{name} was removed because the initializer stopped answering; it is registered again after enough good probes"
            ),
        ),
        _ if let Some(check) = o.route_check => condition(
            o,
            REGISTERED,
            "False",
            "ProvingRoute",
            format!(
                "{name} is registered failing open until a call of the API server is seen reaching the initializer through its Service; the last check: {}",
                check.last
            ),
        ),
        _ => condition(
            o,
            REGISTERED,
            "False",
            "WaitingForReadiness",
            "waiting for an available Deployment and enough good probes".into(),
        ),
    }
}

/// `InApiServer`: where a preset's injection runs, present once the engine is known.
fn in_api_server_condition(o: &Observation<'_>) -> Option<Condition> {
    let engine = o.engine.filter(|e| e.shown)?;
    let status = if engine.in_api_server() {
        "True"
    } else {
        "False"
    };
    Some(condition(
        o,
        IN_API_SERVER,
        status,
        engine.reason,
        engine.message.clone(),
    ))
}

/// True when `next` need not be written over `previous`: nothing changed, or only the last
/// probe's time and latency changed and those were refreshed recently. The guard's witness and
/// the withdrawn NetworkPolicy in `previous` are not this writer's and are not compared.
pub fn only_probe_figures_changed(
    previous: Option<&InitializerStatus>,
    next: &InitializerStatus,
    now: Timestamp,
) -> bool {
    let Some(previous) = previous else {
        return false;
    };
    if next == previous {
        return true;
    }
    let mut same = next.clone();
    same.last_probe_time = previous.last_probe_time.clone();
    same.last_probe_latency_millis = previous.last_probe_latency_millis;
    // The guard's witness is written apart, so a computed status never has it and a stored
    // one may: compared, it made every probe a status write (and a reconcile) wherever the
    // guard is in force.
    same.guard = previous.guard.clone();
    same.withdrawn_network_policy = previous.withdrawn_network_policy.clone();
    let recent = previous.last_probe_time.as_ref().is_some_and(|t| {
        now.duration_since(t.0).as_secs()
            < i64::try_from(PROBE_STATUS_REFRESH.as_secs()).unwrap_or(i64::MAX)
    });
    &same == previous && recent
}

#[cfg(test)]
mod tests;
