//! Unit tests of [`crate::status`].

use super::*;

#[test]
fn under_fail_the_fail_closed_condition_says_how_soon_a_hung_initializer_leaves_the_path() {
    let bounds = FailClosedBounds {
        degraded_within: Duration::from_millis(1500),
        removed_within: Duration::from_millis(2500),
    };
    let registered = Observation {
        registered: true,
        fail_closed: Some(bounds),
        ..base()
    };
    let c = compute(&registered);
    let fail_closed = c
        .conditions
        .iter()
        .find(|c| c.type_ == FAIL_CLOSED)
        .unwrap();
    assert_eq!(fail_closed.status, "True");
    assert!(
        fail_closed.message.contains("within 1.5 s"),
        "{}",
        fail_closed.message
    );
    assert!(fail_closed.message.contains("removed within 2.5 s"));
    assert!(fail_closed.message.contains("operator is down"));
    let degraded = Observation {
        degraded: true,
        ..registered
    };
    let c = compute(&degraded);
    let fail_closed = c
        .conditions
        .iter()
        .find(|c| c.type_ == FAIL_CLOSED)
        .unwrap();
    assert_eq!(fail_closed.status, "False");
    let ignore = Observation {
        registered: true,
        fail_closed: None,
        ..base()
    };
    assert!(
        !compute(&ignore)
            .conditions
            .iter()
            .any(|c| c.type_ == FAIL_CLOSED)
    );
}

#[test]
fn a_conflict_is_one_condition_that_keeps_its_first_time() {
    let first = Timestamp::from_second(1_800_000_000).unwrap();
    let later = Timestamp::from_second(1_800_000_100).unwrap();
    let once = with_conflict(InitializerStatus::default(), "taken".into(), None, first);
    let twice = with_conflict(once.clone(), "still taken".into(), Some(&once), later);
    let conflicts: Vec<_> = twice
        .conditions
        .iter()
        .filter(|c| c.type_ == CONFLICT)
        .collect();
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].message, "still taken");
    assert_eq!(conflicts[0].last_transition_time, Time(first));
}
use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentSpec, DeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

fn snapshot(state: State, endpoints: Option<u32>) -> Snapshot {
    Snapshot {
        state,
        ok_streak: 0,
        fail_streak: 0,
        endpoints,
        available: true,
        hold_down: None,
    }
}

fn ready() -> WorkloadObservation {
    WorkloadObservation {
        replicas: 2,
        ready_replicas: 2,
        available_replicas: 2,
        available: true,
        message: None,
        past_deadline: None,
        shared_with: Vec::new(),
    }
}

fn good_probe() -> ProbeRecord {
    ProbeRecord {
        at: now(),
        latency: Duration::from_millis(12),
        ok: true,
        message: "ok".into(),
        failure: None,
    }
}

fn base() -> Observation<'static> {
    Observation {
        generation: Some(3),
        refusals: &[],
        suspended: None,
        workload: None,
        health: None,
        probe: None,
        registered: false,
        configuration_name: "initializer-sidecar",
        configuration_kind: "MutatingWebhookConfiguration",
        certificate_not_after: None,
        now: now(),
        previous: None,
        degraded: false,
        outage: None,
        fallback: None,
        missed: None,
        fail_closed: None,
        last_error: None,
        engine: None,
        route_check: None,
    }
}

#[test]
fn the_last_error_is_shown_until_a_reconcile_clears_it() {
    let failed = compute(&Observation {
        last_error: Some("failed to apply the Deployment"),
        ..base()
    });
    assert_eq!(failed.details[LAST_ERROR], "failed to apply the Deployment");
    assert!(!compute(&base()).details.contains_key(LAST_ERROR));
    let kept = with_last_error(failed.clone(), Some("failed again"));
    assert_eq!(kept.details[LAST_ERROR], "failed again");
    assert_eq!(kept.phase, failed.phase);
    assert!(
        !with_last_error(failed, None)
            .details
            .contains_key(LAST_ERROR)
    );
}

fn cond<'a>(s: &'a InitializerStatus, t: &str) -> &'a Condition {
    s.conditions.iter().find(|c| c.type_ == t).unwrap()
}

#[test]
fn a_new_initializer_is_pending_with_unknown_health() {
    let s = compute(&base());
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(s.observed_generation, Some(3));
    assert_eq!(cond(&s, VALID).status, "True");
    assert_eq!(cond(&s, AVAILABLE).reason, "NotDeployed");
    assert_eq!(cond(&s, RESPONDING).status, "Unknown");
    assert_eq!(cond(&s, REGISTERED).reason, "WaitingForReadiness");
    assert_eq!(s.registered, Some(false));
    assert_eq!(s.conditions.len(), 7);
}

#[test]
fn a_configuration_proving_its_route_is_not_registered_and_says_what_the_check_saw() {
    let s = compute(&Observation {
        route_check: Some(RouteCheck {
            last: "refused without the initializer's answer: connection refused",
            unanswered_for: Duration::from_secs(3),
            deadline: ROUTE_DEADLINE,
        }),
        ..base()
    });
    let registered = cond(&s, REGISTERED);
    assert_eq!(
        (registered.status.as_str(), registered.reason.as_str()),
        ("False", "ProvingRoute")
    );
    assert!(
        registered.message.contains("connection refused"),
        "{}",
        registered.message
    );
    assert!(
        registered.message.contains("failing open"),
        "{}",
        registered.message
    );
    assert_eq!(s.registered, Some(false));
    assert_eq!(cond(&s, RECONCILING).status, "True", "proving is progress");
}

/// A registration whose route changed under it (its NetworkPolicy) fails open in place while
/// the route is proven again: degraded, and saying why, not deploying.
#[test]
fn a_registration_proving_a_changed_route_is_degraded_and_says_why() {
    let outage = Outage {
        deregistered_at: None,
        fallback_installed_at: None,
        ..outage()
    };
    let proving = |unanswered_for| Observation {
        workload: Some(ready()),
        health: Some(snapshot(State::Degraded, Some(1))),
        outage: Some(outage.clone()),
        route_check: Some(RouteCheck {
            last: "refused without the initializer's answer: connection refused",
            unanswered_for,
            deadline: ROUTE_DEADLINE,
        }),
        ..base()
    };
    let s = compute(&proving(Duration::from_secs(3)));
    assert_eq!(s.phase, Some(Phase::Degraded));
    assert_eq!(s.registered, Some(false), "not with the spec's values");
    let degraded = cond(&s, DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "RouteChanged")
    );
    assert!(
        degraded.message.contains("NetworkPolicy"),
        "{}",
        degraded.message
    );
    assert_eq!(cond(&s, REGISTERED).reason, "ProvingRoute");
    assert_eq!(cond(&s, RECONCILING).reason, "Degraded");
    let past = compute(&proving(ROUTE_DEADLINE));
    assert_eq!(
        (
            cond(&past, STALLED).status.as_str(),
            cond(&past, STALLED).reason.as_str()
        ),
        ("True", "RouteNotProven"),
        "a changed route never proven stalls as a new one does"
    );
}

#[test]
fn route_checks_unanswered_past_the_deadline_stall_it() {
    let check = |unanswered_for| RouteCheck {
        last: "admitted without the initializer's answer",
        unanswered_for,
        deadline: ROUTE_DEADLINE,
    };
    let just_before = compute(&Observation {
        route_check: Some(check(ROUTE_DEADLINE - Duration::from_secs(1))),
        ..base()
    });
    assert_eq!(cond(&just_before, RECONCILING).status, "True");
    let past = compute(&Observation {
        route_check: Some(check(ROUTE_DEADLINE)),
        ..base()
    });
    let stalled = cond(&past, STALLED);
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "RouteNotProven")
    );
    assert!(
        stalled
            .message
            .contains("admitted without the initializer's answer")
    );
    assert_eq!(cond(&past, REGISTERED).reason, "ProvingRoute");
    assert_eq!(
        crate::metrics::StatusGauges::of(&past).stalled,
        Some(crate::metrics::Stalled::RouteNotProven),
        "the stalled gauge and its alert see the reason"
    );
    let shorter = RouteCheck {
        deadline: Duration::from_secs(20),
        ..check(Duration::from_secs(20))
    };
    let told = compute(&Observation {
        route_check: Some(shorter),
        ..base()
    });
    let stalled = cond(&told, STALLED);
    assert_eq!(
        stalled.reason, "RouteNotProven",
        "a deadline the operator was told"
    );
    assert!(stalled.message.contains("for 20 s"), "{}", stalled.message);
}

#[test]
fn a_refused_spec_is_invalid_and_says_why() {
    let refusals = [Refusal {
        field: "spec.rules[0].resources".into(),
        message: "leases must never be intercepted".into(),
    }];
    let o = Observation {
        refusals: &refusals,
        ..base()
    };
    let s = compute(&o);
    assert_eq!(s.phase, Some(Phase::Invalid));
    let valid = cond(&s, VALID);
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "Refused")
    );
    assert!(valid.message.contains("spec.rules[0].resources: leases"));
    assert_eq!(cond(&s, REGISTERED).reason, "Invalid");
    assert_eq!(cond(&s, REGISTERED).status, "False");
}

#[test]
fn a_deploying_initializer_reports_replicas_and_probe_failures() {
    let o = Observation {
        workload: Some(WorkloadObservation {
            ready_replicas: 0,
            available_replicas: 0,
            available: false,
            message: Some("Deployment does not have minimum availability.".into()),
            past_deadline: None,
            replicas: 2,
            shared_with: Vec::new(),
        }),
        health: Some(snapshot(State::Waiting, Some(1))),
        probe: Some(ProbeRecord {
            ok: false,
            message: "failed to reach the initializer: 503".into(),
            ..good_probe()
        }),
        ..base()
    };
    let s = compute(&o);
    assert_eq!(s.phase, Some(Phase::Deploying));
    assert_eq!(s.ready_replicas, Some(0));
    assert_eq!(cond(&s, AVAILABLE).reason, "DeploymentUnavailable");
    assert!(cond(&s, AVAILABLE).message.contains("minimum availability"));
    assert_eq!(cond(&s, RESPONDING).reason, "ProbeFailed");
    assert_eq!(
        s.details["lastProbeError"],
        "failed to reach the initializer: 503"
    );
}

#[test]
fn a_registered_initializer_shows_probe_latency_and_certificate_expiry() {
    let expiry = now() + jiff::SignedDuration::from_hours(24 * 365);
    let o = Observation {
        workload: Some(ready()),
        health: Some(snapshot(State::Registered, Some(2))),
        probe: Some(good_probe()),
        registered: true,
        certificate_not_after: Some(expiry),
        ..base()
    };
    let s = compute(&o);
    assert_eq!(s.phase, Some(Phase::Registered));
    assert_eq!(s.last_probe_latency_millis, Some(12));
    assert_eq!(s.last_probe_time, Some(Time(now())));
    assert_eq!(s.certificate_not_after, Some(Time(expiry)));
    assert_eq!(s.configuration_name.as_deref(), Some("initializer-sidecar"));
    for t in [VALID, AVAILABLE, RESPONDING, REGISTERED] {
        assert_eq!(cond(&s, t).status, "True", "{t}");
    }
    assert!(s.details.is_empty());
}

#[test]
fn the_registered_condition_names_the_kind_its_backend_registers() {
    let registered = |kind| {
        let s = compute(&Observation {
            workload: Some(ready()),
            health: Some(snapshot(State::Registered, Some(2))),
            probe: Some(good_probe()),
            registered: true,
            configuration_kind: kind,
            ..base()
        });
        cond(&s, REGISTERED).message.clone()
    };
    assert_eq!(
        registered("MutatingWebhookConfiguration"),
        "MutatingWebhookConfiguration initializer-sidecar is registered"
    );
    assert_eq!(
        registered("InitializerConfiguration"),
        "InitializerConfiguration initializer-sidecar is registered"
    );
}

#[test]
fn an_unresponsive_initializer_is_not_registered_and_not_responding() {
    let o = Observation {
        workload: Some(ready()),
        health: Some(snapshot(State::Unresponsive, Some(0))),
        probe: Some(good_probe()),
        ..base()
    };
    let s = compute(&o);
    assert_eq!(s.phase, Some(Phase::Unresponsive));
    assert_eq!(cond(&s, RESPONDING).reason, "NoReadyEndpoints");
    assert_eq!(cond(&s, REGISTERED).reason, "Unresponsive");
}

fn outage() -> Outage {
    let t = |s| {
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            now() + jiff::SignedDuration::from_millis(s),
        ))
    };
    Outage {
        started_at: t(0),
        degraded_at: t(12),
        fallback_installed_at: t(10),
        deregistered_at: t(510),
        restored_at: None,
    }
}

#[test]
fn a_degraded_initializer_is_registered_failing_open_with_its_steps_in_a_condition() {
    let o = Observation {
        workload: Some(ready()),
        health: Some(snapshot(State::Degraded, Some(2))),
        probe: Some(ProbeRecord {
            ok: false,
            failure: Some(Failure::TimedOut),
            message: "no answer within the latency budget of 500 ms".into(),
            ..good_probe()
        }),
        registered: true,
        degraded: true,
        outage: Some(outage()),
        fallback: Some(FallbackView::Installing),
        ..base()
    };
    let s = compute(&o);
    assert_eq!(s.phase, Some(Phase::Degraded));
    assert_eq!(s.registered, Some(true));
    let degraded = cond(&s, DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "FailOpen")
    );
    assert!(
        degraded.message.contains("08:00:00.012Z"),
        "{}",
        degraded.message
    );
    assert_eq!(cond(&s, RESPONDING).reason, "ProbeTimedOut");
    assert_eq!(cond(&s, FALLBACK_IN_FORCE).reason, "Installing");
    assert_eq!(s.last_outage, Some(outage()));
}

#[test]
fn after_an_outage_the_degraded_condition_stays_false_with_the_steps() {
    let mut restored = outage();
    restored.restored_at = restored.deregistered_at.clone();
    let o = Observation {
        workload: Some(ready()),
        health: Some(snapshot(State::Registered, Some(2))),
        probe: Some(good_probe()),
        registered: true,
        outage: Some(restored),
        fallback: Some(FallbackView::NotNeeded),
        ..base()
    };
    let s = compute(&o);
    assert_eq!(s.phase, Some(Phase::Registered));
    assert_eq!(cond(&s, DEGRADED).reason, "Restored");
    assert_eq!(cond(&s, DEGRADED).status, "False");
    let unresponsive = compute(&Observation {
        health: Some(snapshot(State::Unresponsive, Some(2))),
        registered: false,
        outage: Some(outage()),
        fallback: Some(FallbackView::InForce),
        ..o
    });
    assert_eq!(cond(&unresponsive, DEGRADED).reason, "Deregistered");
    assert_eq!(cond(&unresponsive, FALLBACK_IN_FORCE).status, "True");
    let fresh = compute(&base());
    assert!(
        fresh
            .conditions
            .iter()
            .all(|c| c.type_ != DEGRADED && c.type_ != FALLBACK_IN_FORCE)
    );
}

#[test]
fn a_suspended_initializer_keeps_its_workload_and_says_so() {
    let o = Observation {
        suspended: Some(Suspension::Spec),
        workload: Some(ready()),
        health: Some(snapshot(State::Aside, Some(2))),
        probe: Some(good_probe()),
        ..base()
    };
    let s = compute(&o);
    assert_eq!(s.phase, Some(Phase::Suspended));
    assert_eq!(cond(&s, AVAILABLE).status, "True");
    assert_eq!(cond(&s, REGISTERED).reason, "Suspended");
}

#[test]
fn unchanged_conditions_keep_their_transition_time() {
    let earlier = now() - jiff::SignedDuration::from_hours(1);
    let first = compute(&Observation {
        now: earlier,
        ..base()
    });
    let second = compute(&Observation {
        previous: Some(&first),
        workload: Some(ready()),
        ..base()
    });
    assert_eq!(cond(&second, VALID).last_transition_time, Time(earlier));
    assert_eq!(cond(&second, AVAILABLE).last_transition_time, Time(now()));
}

#[test]
fn the_workload_is_available_only_with_the_condition_and_a_replica() {
    let mut d = Deployment {
        spec: DeploymentSpec {
            replicas: Some(2),
            ..Default::default()
        },
        status: Some(DeploymentStatus {
            available_replicas: Some(1),
            ready_replicas: Some(1),
            conditions: Some(vec![DeploymentCondition {
                type_: Some("Available".into()),
                status: Some("True".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let w = observe_workload(&d);
    assert!(w.available);
    assert_eq!((w.replicas, w.ready_replicas), (2, 1));
    d.status.as_mut().unwrap().available_replicas = Some(0);
    assert!(!observe_workload(&d).available);
    d.status = None;
    assert!(!observe_workload(&d).available);
}

#[test]
fn good_probes_that_differ_only_in_time_and_latency_are_no_status_write_guarded_or_not() {
    let registered = |at: Timestamp, latency_ms: u64| Observation {
        registered: true,
        health: Some(snapshot(State::Registered, Some(1))),
        probe: Some(ProbeRecord {
            at,
            latency: Duration::from_millis(latency_ms),
            ..good_probe()
        }),
        ..base()
    };
    let mut first = compute(&registered(now(), 3));
    // As stored where the guard on Initializers is in force: with its witness, written apart.
    first.guard = Some(initializer_crds::GuardWitness {
        binding_uid: "b-1".into(),
        generation: 3,
        held: false,
    });
    let next = compute(&Observation {
        previous: Some(&first),
        ..registered(now() + jiff::SignedDuration::from_secs(1), 41)
    });
    assert!(
        only_probe_figures_changed(
            Some(&first),
            &next,
            now() + jiff::SignedDuration::from_secs(1)
        ),
        "{first:#?}\n{next:#?}"
    );
}

#[test]
fn probe_figures_alone_are_written_only_when_stale() {
    let now = now();
    let previous = InitializerStatus {
        last_probe_time: Some(Time(now - jiff::SignedDuration::from_secs(5))),
        last_probe_latency_millis: Some(10),
        ..Default::default()
    };
    let mut next = previous.clone();
    next.last_probe_time = Some(Time(now));
    next.last_probe_latency_millis = Some(12);
    assert!(only_probe_figures_changed(Some(&previous), &next, now));
    let later = now + jiff::SignedDuration::from_secs(40);
    assert!(!only_probe_figures_changed(Some(&previous), &next, later));
    next.registered = Some(true);
    assert!(!only_probe_figures_changed(Some(&previous), &next, now));
    assert!(!only_probe_figures_changed(None, &next, now));
    let unprobed = InitializerStatus::default();
    assert!(only_probe_figures_changed(
        Some(&unprobed),
        &unprobed.clone(),
        now
    ));
}

#[test]
fn a_namespace_shared_with_another_partys_deployments_is_a_warning() {
    let deployment = |name: &str, own: &[(&str, &str)], pods: &[(&str, &str)]| {
        let labels = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        Deployment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: labels(own),
                ..Default::default()
            },
            spec: k8s_openapi::api::apps::v1::DeploymentSpec {
                template: k8s_openapi::api::core::v1::PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: labels(pods),
                        ..Default::default()
                    }),
                    spec: None,
                },
                ..Default::default()
            },
            status: None,
        }
    };
    let listed = [
        // The operator as OLM makes it (labels from the CSV), and as the installer does.
        deployment(
            "initializer-operator",
            &[("app.kubernetes.io/name", "initializer-operator")],
            &[],
        ),
        deployment(
            "operator-by-template",
            &[],
            &[("app.kubernetes.io/name", "initializer-operator")],
        ),
        // An Initializer's workload.
        deployment(
            "sidecar",
            &[("app.kubernetes.io/managed-by", "initializer-operator")],
            &[],
        ),
        // Another operator installed into the same namespace.
        deployment(
            "prometheus-operator",
            &[("app.kubernetes.io/name", "prometheus-operator")],
            &[],
        ),
    ];
    let shared_with = foreign_deployments(&listed);
    assert_eq!(shared_with, ["prometheus-operator"]);
    let o = Observation {
        workload: Some(WorkloadObservation {
            shared_with,
            ..ready()
        }),
        ..base()
    };
    let status = compute(&o);
    let shared = status
        .conditions
        .iter()
        .find(|c| c.type_ == SHARED_NAMESPACE)
        .unwrap();
    assert_eq!(shared.status, "True");
    assert!(shared.message.contains("prometheus-operator"), "{shared:?}");
    let alone = compute(&Observation {
        workload: Some(ready()),
        ..base()
    });
    assert!(alone.conditions.iter().all(|c| c.type_ != SHARED_NAMESPACE));
}

/// The one of `Ready`, `Reconciling` and `Stalled` that is `True`, and the reason all three
/// give (failing unless exactly one is `True` and they agree).
fn standing_of(s: &InitializerStatus) -> (String, String) {
    let three: Vec<&Condition> = [READY, RECONCILING, STALLED]
        .iter()
        .map(|t| cond(s, t))
        .collect();
    let truths: Vec<&&Condition> = three.iter().filter(|c| c.status == "True").collect();
    assert_eq!(truths.len(), 1, "{three:?}");
    assert!(
        three.iter().all(|c| c.reason == truths[0].reason),
        "{three:?}"
    );
    (truths[0].type_.clone(), truths[0].reason.clone())
}

/// Checks that `o` stands as `type_` for `reason`.
fn assert_stands(case: &str, o: &Observation<'_>, type_: &str, reason: &str) {
    let s = compute(o);
    assert_eq!(
        standing_of(&s),
        (type_.to_string(), reason.to_string()),
        "{case}: {:?}",
        s.phase
    );
}

#[test]
fn a_workload_on_its_way_is_reconciling_or_stalled_past_its_deadline() {
    let deploying = WorkloadObservation {
        ready_replicas: 0,
        available_replicas: 0,
        available: false,
        ..ready()
    };
    let past_deadline = WorkloadObservation {
        past_deadline: Some("ReplicaSet \"x\" has timed out progressing.".into()),
        ..deploying.clone()
    };
    assert_stands("new", &base(), RECONCILING, "Deploying");
    let o = Observation {
        workload: Some(deploying),
        ..base()
    };
    assert_stands("deploying", &o, RECONCILING, "Deploying");
    let o = Observation {
        workload: Some(past_deadline),
        ..base()
    };
    assert_stands(
        "never ready within the deadline",
        &o,
        STALLED,
        "ProgressDeadlineExceeded",
    );
}

#[test]
fn a_supervised_initializer_stands_by_its_health() {
    let registered = Observation {
        workload: Some(ready()),
        health: Some(snapshot(State::Registered, Some(2))),
        probe: Some(good_probe()),
        registered: true,
        ..base()
    };
    assert_stands("registered", &registered, READY, "Registered");
    let degraded = Observation {
        workload: Some(ready()),
        registered: true,
        degraded: true,
        outage: Some(outage()),
        ..base()
    };
    assert_stands("degraded", &degraded, RECONCILING, "Degraded");
    let unresponsive = Observation {
        workload: Some(ready()),
        health: Some(snapshot(State::Unresponsive, Some(0))),
        outage: Some(outage()),
        ..base()
    };
    assert_stands("unresponsive", &unresponsive, RECONCILING, "Unresponsive");
}

#[test]
fn out_of_the_path_on_purpose_stands_ready_and_a_refusal_stalls() {
    let suspended = Observation {
        suspended: Some(Suspension::Spec),
        ..base()
    };
    assert_stands("suspended", &suspended, READY, "Suspended");
    let in_api_server = crate::engine::view(
        initializer_crds::Engine::Auto,
        true,
        &Ok("proven against the webhook".into()),
    );
    let o = Observation {
        engine: Some(&in_api_server),
        ..base()
    };
    assert_stands("in the API server", &o, READY, "InApiServer");
    let refusals = [Refusal {
        field: "spec.namespace".into(),
        message: "not labelled for workloads".into(),
    }];
    let o = Observation {
        refusals: &refusals,
        ..base()
    };
    assert_stands("refused", &o, STALLED, "Refused");
    let refused = compute(&o);
    assert!(
        cond(&refused, STALLED)
            .message
            .contains("spec.namespace: not labelled for workloads"),
        "{:?}",
        cond(&refused, STALLED)
    );
}

#[test]
fn another_partys_object_in_the_way_stalls_the_initializer_until_it_goes() {
    let registered = compute(&Observation {
        workload: Some(ready()),
        registered: true,
        ..base()
    });
    assert_eq!(standing_of(&registered).0, READY);
    let conflict = with_conflict(
        registered.clone(),
        "MutatingWebhookConfiguration initializer-sidecar is not ours".into(),
        Some(&registered),
        now(),
    );
    assert_eq!(
        standing_of(&conflict),
        (STALLED.to_string(), "Conflict".to_string())
    );
    assert!(cond(&conflict, STALLED).message.contains("is not ours"));
}

#[test]
fn the_standing_keeps_its_transition_time_and_names_the_generation_it_describes() {
    let earlier = now() - jiff::SignedDuration::from_hours(1);
    let deploying = compute(&Observation {
        now: earlier,
        ..base()
    });
    let still = compute(&Observation {
        previous: Some(&deploying),
        ..base()
    });
    assert_eq!(
        cond(&still, RECONCILING).last_transition_time,
        Time(earlier)
    );
    let registered = compute(&Observation {
        previous: Some(&still),
        workload: Some(ready()),
        registered: true,
        ..base()
    });
    assert_eq!(cond(&registered, READY).last_transition_time, Time(now()));
    assert_eq!(
        cond(&registered, RECONCILING).last_transition_time,
        Time(now())
    );
    assert_eq!(
        cond(&registered, STALLED).last_transition_time,
        Time(earlier)
    );
    for type_ in [READY, RECONCILING, STALLED] {
        assert_eq!(cond(&registered, type_).observed_generation, Some(3));
    }
}
