//! Unit tests of [`crate::supervisor`].

use super::*;
use crate::health::Action;
use crate::probe;
use crate::status::FallbackView;
use crate::validate::Refusal;
use initializer_crds::constants::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use initializer_crds::{FailurePolicy, Initializer};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};

fn endpoint(ready: Option<bool>) -> Endpoint {
    Endpoint {
        addresses: vec!["127.0.0.2".into()],
        conditions: Some(EndpointConditions {
            ready,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An Initializer named `guard`, deployed in `ops`, as the API server stores it.
fn guard() -> Initializer {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "initializer.dev/v1alpha1",
        "kind": "Initializer",
        "metadata": {"name": "guard", "uid": "uid-1", "generation": 2},
        "spec": {
            "image": "example/guard:1",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
        },
    }))
    .unwrap()
}

/// A client whose API server answers every status patch with the Initializer, recording
/// the statuses written.
fn recording_client(written: Arc<Mutex<Vec<serde_json::Value>>>) -> Client {
    failing_then_recording_client(written, 0).0
}

/// [`recording_client`], whose API server first fails `failures` patches (a 500, as when etcd
/// times out) without recording them; with the count of patches it was sent.
fn failing_then_recording_client(
    written: Arc<Mutex<Vec<serde_json::Value>>>,
    failures: usize,
) -> (Client, Arc<std::sync::atomic::AtomicUsize>) {
    use http_body_util::BodyExt;
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = attempts.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let written = written.clone();
        let attempt = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            let patch = req.into_body().collect().await.unwrap().to_bytes();
            let patch: serde_json::Value = serde_json::from_slice(&patch).unwrap_or_default();
            let (code, body) = if attempt < failures {
                (
                    500,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500}),
                )
            } else {
                written.lock().unwrap().push(patch["status"].clone());
                let mut obj = serde_json::to_value(guard()).unwrap();
                obj["status"] = patch["status"].clone();
                (200, obj)
            };
            let response = http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    (Client::new(service, "default"), attempts)
}

/// The state of a registered Initializer `guard` whose configuration is live as applied.
fn guard_state() -> SupervisedState {
    let health = HealthConfig::from_policy(&Default::default());
    let mut machine = Machine::new(health);
    machine.adopt_registered(false, Instant::now());
    let mut webhook = MutatingWebhookConfiguration::default();
    webhook.metadata.name = Some("initializer-guard".into());
    let target = Supervision {
        initializer: "guard".into(),
        reference: ObjectReference::default(),
        namespace: "ops".into(),
        service: "guard".into(),
        probe: probe::target_for(&[]),
        period: health.period,
        budget: Duration::from_millis(500),
        health,
        webhook: webhook.clone(),
        fallback: None,
        rules: Vec::new(),
        gate: None,
        timeout: Duration::from_secs(5),
        // The configuration above has no webhook: nothing fails closed.
        failure_policy: FailurePolicy::Ignore,
        available: true,
        suspended: None,
        generation: Some(2),
        workload: WorkloadObservation::default(),
        certificate_not_after: None,
        stored_status: None,
        stored_version: None,
        registration: Registration::Webhook,
        mark_keys: Default::default(),
        engine: None,
    };
    SupervisedState {
        machine,
        target,
        last_probe: None,
        applied: Some(webhook),
        presence: Presence::Normal,
        pending: PendingChange::default(),
        outage: OutageLog::default(),
        fallback: FallbackRun::default(),
        removal_retry: RemovalRetry::None,
        route: RouteChecks::default(),
        status: StatusFence::new(None),
        stopped: CancellationToken::new(),
    }
}

/// A supervisor holding `guard` registered and answering, as a sync leaves it.
fn supervising_guard(client: Client) -> (Supervisor, Arc<Supervised>) {
    let recorder = Recorder::new(client.clone(), kube::runtime::events::Reporter::from("t"));
    let sup = Supervisor::new(
        client,
        recorder,
        Metrics::shared(),
        "probe".into(),
        Leadership::unconditional(),
    );
    let entry = Supervised::start(&sup, guard_state());
    sup.entries().insert("guard".into(), entry.clone());
    (sup, entry)
}

/// The statuses written once the entry's writer has written `count` of them (within 5 s).
async fn writes(written: &Mutex<Vec<serde_json::Value>>, count: usize) -> Vec<serde_json::Value> {
    for _ in 0..500 {
        let now = written.lock().unwrap().clone();
        if now.len() >= count {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the writer wrote {} statuses in 5 s, not {count}",
        written.lock().unwrap().len()
    );
}

#[tokio::test]
async fn a_deploy_failure_stays_in_the_status_when_the_supervisor_writes_it_again() {
    let written = Arc::new(Mutex::new(Vec::new()));
    let (sup, entry) = supervising_guard(recording_client(written.clone()));
    let failure = "failed to apply Deployment ops/guard: forbidden";
    sup.report_failure(&guard(), "initializer-guard", failure.into())
        .await;
    writes(&written, 1).await;
    // A probe fails afterwards: the supervisor writes the status for its own reasons.
    {
        let mut st = entry.state.lock().await;
        st.last_probe = Some(ProbeRecord {
            at: Timestamp::now(),
            latency: Duration::from_millis(3),
            ok: false,
            message: "connection refused".into(),
            failure: None,
        });
        st.status.due();
    }
    let written = writes(&written, 2).await;
    assert_eq!(written.len(), 2, "{written:?}");
    for status in &written {
        assert_eq!(status["details"][status::LAST_ERROR], failure, "{status}");
    }
    assert_eq!(
        written[1]["details"]["lastProbeError"],
        "connection refused"
    );
}

#[tokio::test]
async fn marks_made_while_the_writer_waits_coalesce_into_one_write_of_the_latest_state() {
    let written = Arc::new(Mutex::new(Vec::new()));
    let (sup, entry) = supervising_guard(recording_client(written.clone()));
    {
        // Three places learn something while the entry is locked, each marking it due.
        let mut st = entry.state.lock().await;
        for message in ["refused", "reset", "timed out"] {
            st.last_probe = Some(ProbeRecord {
                at: Timestamp::now(),
                latency: Duration::from_millis(3),
                ok: false,
                message: message.into(),
                failure: None,
            });
            st.status.due();
        }
    }
    let first = writes(&written, 1).await;
    assert_eq!(first[0]["details"]["lastProbeError"], "timed out");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        written.lock().unwrap().len(),
        1,
        "one write for three marks"
    );
    // Once supervision stops, a mark writes nothing.
    sup.stop("guard").await;
    entry.state.lock().await.status.due();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(written.lock().unwrap().len(), 1, "nothing after stop");
}

#[tokio::test]
async fn a_status_the_api_server_did_not_take_is_written_again() {
    let written = Arc::new(Mutex::new(Vec::new()));
    // The first two writes meet an API server that fails them; the third is taken.
    let (client, attempts) = failing_then_recording_client(written.clone(), 2);
    let (_sup, entry) = supervising_guard(client);
    entry.state.lock().await.status.due();
    let written = writes(&written, 1).await;
    assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(written.len(), 1);
}

#[tokio::test]
async fn a_refusal_clears_the_last_failure_and_a_conflict_replaces_it() {
    let written = Arc::new(Mutex::new(Vec::new()));
    let client = recording_client(written.clone());
    let (sup, _) = supervising_guard(client);
    sup.stop("guard").await;
    sup.report_failure(&guard(), "initializer-guard", "failed to apply".into())
        .await;
    let conflict = sup
        .report_unsupervised(&guard(), &[], "initializer-guard", Some("not ours".into()))
        .await
        .unwrap();
    assert_eq!(conflict.details[status::LAST_ERROR], "not ours");
    assert!(
        conflict
            .conditions
            .iter()
            .any(|c| c.type_ == status::CONFLICT && c.status == "True")
    );
    let refusal = Refusal {
        field: "spec.rules".into(),
        message: "intercepts leases".into(),
    };
    let refused = sup
        .report_unsupervised(&guard(), &[refusal], "initializer-guard", None)
        .await
        .unwrap();
    assert!(!refused.details.contains_key(status::LAST_ERROR));
    assert_eq!(sup.failure("guard"), None);
    assert_eq!(written.lock().unwrap().len(), 3);
}

#[test]
fn the_configuration_is_written_only_when_the_cluster_holds_something_else() {
    use Presence::*;
    let mut spec = MutatingWebhookConfiguration::default();
    spec.metadata.name = Some("initializer-guard".into());
    let degraded = build::degraded(&spec);
    let proving = crate::route::proving(&spec, "guard-init", "guard");
    let write = |presence, applied: Option<&MutatingWebhookConfiguration>, next| {
        let desired = match next {
            Normal => Some(spec.clone()),
            Degraded => Some(degraded.clone()),
            Proving => Some(proving.clone()),
            Absent => None,
        };
        configuration_write(presence, applied, next, desired)
    };
    assert_eq!(
        write(Normal, Some(&spec), Normal),
        ConfigurationWrite::Nothing
    );
    assert_eq!(write(Absent, None, Absent), ConfigurationWrite::Nothing);
    assert_eq!(
        write(Absent, None, Normal),
        ConfigurationWrite::Apply(Box::new(spec.clone()))
    );
    // Edited by someone else (nothing applied is live): applied again.
    assert_eq!(
        write(Normal, None, Normal),
        ConfigurationWrite::Apply(Box::new(spec.clone()))
    );
    assert_eq!(
        write(Normal, Some(&spec), Degraded),
        ConfigurationWrite::Apply(Box::new(degraded.clone()))
    );
    assert_eq!(
        write(Degraded, Some(&degraded), Absent),
        ConfigurationWrite::Remove
    );
    assert_eq!(
        write(Normal, Some(&spec), Absent),
        ConfigurationWrite::Remove
    );
    assert_eq!(
        write(Absent, None, Proving),
        ConfigurationWrite::Apply(Box::new(proving.clone()))
    );
    assert_eq!(
        write(Proving, Some(&proving), Proving),
        ConfigurationWrite::Nothing
    );
    assert_eq!(
        write(Proving, Some(&proving), Normal),
        ConfigurationWrite::Apply(Box::new(spec.clone()))
    );
    assert_eq!(
        write(Proving, Some(&proving), Absent),
        ConfigurationWrite::Remove
    );
}

#[test]
fn a_step_out_of_the_path_waits_for_the_fallback_and_nothing_else_does() {
    use Presence::*;
    assert_eq!(next_presence(Normal, Degraded, false), Normal);
    assert_eq!(next_presence(Normal, Absent, false), Normal);
    assert_eq!(next_presence(Normal, Degraded, true), Degraded);
    assert_eq!(next_presence(Degraded, Absent, false), Absent);
    assert_eq!(next_presence(Absent, Normal, false), Normal);
    assert_eq!(next_presence(Degraded, Normal, false), Normal);
    assert_eq!(next_presence(Absent, Proving, false), Proving);
    assert_eq!(next_presence(Proving, Absent, false), Absent);
}

#[test]
fn the_fallback_is_ready_once_in_force_or_when_it_cannot_be() {
    let now = Instant::now();
    let mut run = FallbackRun::default();
    assert!(!run.ready(now));
    run.installed_at = Some(now);
    assert_eq!(run.view(now), FallbackView::Installing);
    assert!(!run.ready(now + Duration::from_millis(500)));
    assert!(run.ready(now + FALLBACK_SETTLE));
    assert_eq!(run.view(now + FALLBACK_SETTLE), FallbackView::InForce);
    let unsupported = FallbackRun {
        unsupported: true,
        ..FallbackRun::default()
    };
    assert!(unsupported.ready(now));
    let failed = FallbackRun {
        failed: Some("forbidden".into()),
        ..FallbackRun::default()
    };
    assert!(failed.ready(now));
}

fn configuration(labels: serde_json::Value) -> MutatingWebhookConfiguration {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "initializer-guard", "labels": labels},
        "webhooks": [{
            "name": "guard.initializer.dev",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"caBundle": "Q0E=", "service": {"name": "guard", "namespace": "ops"}},
            "failurePolicy": "Fail",
            "objectSelector": {"matchLabels": {"team": "a"}},
            "sideEffects": "None",
            "timeoutSeconds": 5,
        }],
    }))
    .unwrap()
}

#[test]
fn defaults_added_by_the_api_server_are_no_drift_but_edits_of_our_fields_are() {
    let labels =
        serde_json::json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE, INITIALIZER_LABEL: "guard"});
    let desired = configuration(labels.clone());
    let mut live = desired.clone();
    // What the API server fills in, and metadata it owns.
    live.metadata.resource_version = Some("42".into());
    live.metadata.uid = Some("u-1".into());
    live.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("added-by".into(), "someone".into());
    let hook = &mut live.webhooks.as_mut().unwrap()[0];
    hook.match_policy = Some("Equivalent".into());
    hook.namespace_selector = Some(Default::default());
    hook.reinvocation_policy = Some("Never".into());
    assert!(!drifted(&desired, &live));

    let edit = |change: fn(&mut k8s_openapi::api::admissionregistration::v1::MutatingWebhook)| {
        let mut edited = live.clone();
        change(&mut edited.webhooks.as_mut().unwrap()[0]);
        drifted(&desired, &edited)
    };
    assert!(edit(|h| h.failure_policy = Some("Ignore".into())));
    assert!(edit(|h| h.object_selector = None));
    assert!(edit(|h| h.object_selector = Some(Default::default())));
    assert!(edit(|h| {
        h.object_selector
            .as_mut()
            .unwrap()
            .match_labels
            .as_mut()
            .unwrap()
            .insert("also".into(), "this".into());
    }));
    // A selector that selects everything, however it is written, is the same selector.
    let mut everything = desired.clone();
    everything.webhooks.as_mut().unwrap()[0].object_selector = Some(Default::default());
    let mut written_out = everything.clone();
    written_out.webhooks.as_mut().unwrap()[0].object_selector = Some(
        serde_json::from_value(serde_json::json!({"matchLabels": {}, "matchExpressions": []}))
            .unwrap(),
    );
    assert!(!drifted(&everything, &written_out));
    let mut narrowed = everything.clone();
    narrowed.webhooks.as_mut().unwrap()[0].object_selector = Some(
        serde_json::from_value(serde_json::json!({"matchLabels": {"nothing": "matches"}})).unwrap(),
    );
    assert!(drifted(&everything, &narrowed));
    assert!(edit(|h| {
        h.client_config.ca_bundle = Some(k8s_openapi::ByteString(b"other".to_vec()))
    }));
    assert!(edit(|h| h.timeout_seconds = Some(30)));
    let mut no_hooks = live.clone();
    no_hooks.webhooks = Some(Vec::new());
    assert!(drifted(&desired, &no_hooks));
}

#[test]
fn a_watched_copy_spares_the_read_only_when_it_is_ours_and_holds_what_is_wanted() {
    let labels =
        serde_json::json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE, INITIALIZER_LABEL: "guard"});
    let desired = configuration(labels);
    let mut watched = desired.clone();
    watched.metadata.resource_version = Some("7".into());
    watched.webhooks.as_mut().unwrap()[0].match_policy = Some("Equivalent".into());
    assert!(drift::unchanged(Some(&desired), Some(&watched), "guard"));

    // Not yet seen by the watch (or removed), nothing wanted, or someone else's: read it.
    assert!(!drift::unchanged(Some(&desired), None, "guard"));
    assert!(!drift::unchanged(None, Some(&watched), "guard"));
    assert!(!drift::unchanged(Some(&desired), Some(&watched), "other"));
    // Degraded to fail open (or edited) where the registration is meant to be normal.
    let mut degraded = watched.clone();
    degraded.webhooks.as_mut().unwrap()[0].failure_policy = Some("Ignore".into());
    assert!(!drift::unchanged(Some(&desired), Some(&degraded), "guard"));
}

#[test]
fn an_outage_found_in_progress_resumes_its_window_from_its_first_step_out() {
    let at = |s: i64| MicroTime(Timestamp::from_second(s).unwrap());
    let degraded_then_removed = Outage {
        started_at: Some(at(1_000)),
        degraded_at: Some(at(1_001)),
        deregistered_at: Some(at(1_003)),
        ..Outage::default()
    };
    assert_eq!(
        resumed_window(&degraded_then_removed),
        Some(Timestamp::from_second(1_000).unwrap())
    );
    let removed_at_once = Outage {
        deregistered_at: Some(at(2_000)),
        ..Outage::default()
    };
    assert_eq!(
        resumed_window(&removed_at_once),
        Some(Timestamp::from_second(1_999).unwrap())
    );
    let over = Outage {
        restored_at: Some(at(1_010)),
        ..degraded_then_removed
    };
    assert_eq!(resumed_window(&over), None);
    assert_eq!(
        resumed_window(&Outage::default()),
        None,
        "never left the path"
    );
}

#[test]
fn a_refused_status_write_is_retried_soon_first_and_never_more_rarely_than_every_ten_seconds() {
    let mut delays = vec![status_write_retry(None)];
    for _ in 0..10 {
        delays.push(status_write_retry(delays.last().copied()));
    }
    assert_eq!(delays[0], FIRST_STATUS_RETRY);
    assert_eq!(delays[1], FIRST_STATUS_RETRY * 2);
    assert!(delays.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(*delays.last().unwrap(), MAX_STATUS_RETRY);
    assert_eq!(MAX_STATUS_RETRY, Duration::from_secs(10), "as the doc says");
}

#[test]
fn a_failed_removal_is_retried_sooner_first_and_never_more_rarely_than_every_five_seconds() {
    let mut delays = Vec::new();
    let mut last = None;
    for _ in 0..10 {
        let next = removal_retry(last);
        delays.push(next);
        last = Some(next);
    }
    assert_eq!(delays[0], Duration::from_millis(100));
    assert_eq!(delays[1], Duration::from_millis(200));
    assert!(delays.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(*delays.last().unwrap(), MAX_REMOVAL_RETRY);
}

#[test]
fn only_endpoints_not_marked_unready_count_as_ready() {
    let slice = EndpointSlice {
        address_type: "IPv4".into(),
        endpoints: Some(vec![
            endpoint(Some(true)),
            endpoint(None),
            endpoint(Some(false)),
        ]),
        ..Default::default()
    };
    assert_eq!(ready_endpoints(&slice), 2);
    assert_eq!(ready_endpoints(&EndpointSlice::default()), 0);
}

#[test]
fn a_read_of_a_version_this_replica_wrote_over_is_known_to_be_behind() {
    let mut replaced = Replaced::default();
    replaced.record(None);
    assert!(!replaced.contains(None));
    for version in 1..=10 {
        replaced.record(Some(version.to_string()));
    }
    // The newest few are kept; an older read or one never written over is not recognised.
    assert!(replaced.contains(Some("10")));
    assert!(replaced.contains(Some("3")));
    assert!(!replaced.contains(Some("2")));
    assert!(!replaced.contains(Some("11")));
}

/// A client that keeps every request's body (a status patch, an Event) and answers with the
/// guard, as [`recording_client`] does.
fn body_recording_client(bodies: Arc<Mutex<Vec<serde_json::Value>>>) -> Client {
    use http_body_util::BodyExt;
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let bodies = bodies.clone();
        async move {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            bodies
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap_or_default());
            let response = http::Response::builder()
                .header("content-type", "application/json")
                .body(kube::client::Body::from(
                    serde_json::to_vec(&guard()).unwrap(),
                ))
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    Client::new(service, "default")
}

fn event_reasons(bodies: &Mutex<Vec<serde_json::Value>>) -> Vec<String> {
    bodies
        .lock()
        .unwrap()
        .iter()
        .filter_map(|b| b["reason"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn removing_a_stray_configuration_is_no_deregistration_and_keeps_the_outage() {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let (sup, entry) = supervising_guard(body_recording_client(bodies.clone()));
    let mut st = entry.state.lock().await;
    let first = Outage {
        started_at: Some(micro_now()),
        deregistered_at: Some(micro_now()),
        ..Outage::default()
    };
    st.outage.last = Some(first.clone());
    st.pending.stray_found(true);
    sup.transitioned(
        &mut st,
        Presence::Normal,
        Presence::Absent,
        Timestamp::now(),
    )
    .await;
    assert_eq!(
        st.outage.last,
        Some(first.clone()),
        "the first removal's record"
    );
    assert!(st.pending.removal.is_none(), "taken by the removal");
    assert_eq!(event_reasons(&bodies), ["StrayConfigurationRemoved"]);

    // A removal the health machine asked for is a deregistration, flag or not.
    tokio::time::sleep(Duration::from_millis(2)).await;
    st.pending.stray_found(true);
    st.pending.deregister(Cause::ProbesFailed, Instant::now());
    sup.transitioned(
        &mut st,
        Presence::Normal,
        Presence::Absent,
        Timestamp::now(),
    )
    .await;
    assert_ne!(
        st.outage.last.as_ref().unwrap().deregistered_at,
        first.deregistered_at
    );
    assert!(st.pending.removal.is_none());
    assert_eq!(
        event_reasons(&bodies),
        ["StrayConfigurationRemoved", "Deregistered"]
    );
}

#[tokio::test]
async fn a_degrade_after_a_failed_restore_keeps_the_outage_and_any_other_starts_one() {
    let (sup, entry) = supervising_guard(recording_client(Arc::default()));
    let mut st = entry.state.lock().await;
    let unrestored = Outage {
        started_at: Some(micro_now()),
        degraded_at: Some(micro_now()),
        ..Outage::default()
    };
    let degrade = Action::Degrade {
        since: Instant::now(),
    };
    st.outage.last = Some(unrestored.clone());
    st.presence = Presence::Degraded;
    sup.note(&mut st, degrade);
    assert_eq!(st.outage.last, Some(unrestored.clone()));

    st.presence = Presence::Normal;
    sup.note(&mut st, degrade);
    assert_ne!(st.outage.last, Some(unrestored), "a new outage");
    assert_eq!(st.outage.last.as_ref().unwrap().degraded_at, None);
}

/// The reasons of what a change's effects publish.
fn reasons(effects: &effects::Effects) -> Vec<&'static str> {
    effects.events.iter().map(|(_, r, _)| r.as_str()).collect()
}

#[test]
fn an_outage_s_changes_say_what_they_publish_count_and_record() {
    let mut st = guard_state();
    st.outage.last = Some(Outage {
        started_at: Some(micro_now()),
        ..Outage::default()
    });
    st.pending.degrade_since = Some(Instant::now());
    let degraded = effects::of_change(
        &mut st,
        Presence::Normal,
        Presence::Degraded,
        Timestamp::now(),
    );
    assert_eq!(reasons(&degraded), ["Degraded"]);
    assert!(degraded.deregistered.is_none() && !degraded.registered);
    assert!(st.outage.last.as_ref().unwrap().degraded_at.is_some());
    assert!(st.pending.degrade_since.is_none(), "taken");

    // Removed by the probes: counted with how long it took, the window opened.
    st.pending.deregister(Cause::ProbesFailed, Instant::now());
    let written = Timestamp::now();
    let removed = effects::of_change(&mut st, Presence::Normal, Presence::Absent, written);
    assert_eq!(reasons(&removed), ["Deregistered"]);
    assert!(matches!(
        removed.deregistered,
        Some((Cause::ProbesFailed, Some(_)))
    ));
    assert!(removed.release.is_none(), "a webhook has nothing pending");
    assert_eq!(st.outage.window_from, Some(written));
    assert!(st.outage.last.as_ref().unwrap().deregistered_at.is_some());

    // Back: registered anew (counted), the window handed to the missed count.
    let back = effects::of_change(
        &mut st,
        Presence::Absent,
        Presence::Normal,
        Timestamp::now(),
    );
    assert_eq!(reasons(&back), ["Registered"]);
    assert!(back.registered);
    assert_eq!(back.count_missed_from, Some(written));
    assert!(
        st.outage.window_from.is_none() && st.outage.last.as_ref().unwrap().restored_at.is_some()
    );

    // Restored from degraded: no new registration to count.
    let restored = effects::of_change(
        &mut st,
        Presence::Degraded,
        Presence::Normal,
        Timestamp::now(),
    );
    assert_eq!(reasons(&restored), ["Restored"]);
    assert!(!restored.registered);
}

/// A route that changed under a registration: the proving configuration replaces it in place
/// (a `RouteChanged` Warning, the outage's window opened), and its return is a restore: no
/// new registration counted, the window handed to the missed count.
#[test]
fn a_changed_route_fails_open_in_place_and_its_return_is_a_restore() {
    let mut st = guard_state();
    let now = Instant::now();
    let action = st.machine.observe(Input::RouteChanged, now);
    assert_eq!(action, Action::Reprove);
    st.outage.last = Some(Outage {
        started_at: Some(micro_now()),
        ..Outage::default()
    });
    assert_eq!(Presence::of(&st.machine, now), Presence::Proving);
    let written = Timestamp::now();
    let proving = effects::of_change(&mut st, Presence::Normal, Presence::Proving, written);
    assert_eq!(reasons(&proving), ["RouteChanged"]);
    assert_eq!(
        proving.events[0].0,
        kube::runtime::events::EventType::Warning
    );
    assert!(proving.deregistered.is_none() && !proving.registered);
    assert_eq!(
        st.outage.window_from,
        Some(written),
        "failing open opens the window"
    );
    assert!(st.outage.last.as_ref().unwrap().degraded_at.is_some());

    let back = effects::of_change(
        &mut st,
        Presence::Proving,
        Presence::Normal,
        Timestamp::now(),
    );
    assert_eq!(reasons(&back), ["Restored"]);
    assert!(!back.registered, "never removed: no new registration");
    assert_eq!(back.count_missed_from, Some(written));

    // A first registration after proving is still a registration.
    let mut first = guard_state();
    let registered = effects::of_change(
        &mut first,
        Presence::Proving,
        Presence::Normal,
        Timestamp::now(),
    );
    assert_eq!(reasons(&registered), ["Registered"]);
    assert!(registered.registered);
}

#[test]
fn a_removal_on_purpose_or_of_a_stray_opens_no_window() {
    let mut st = guard_state();
    // Suspended: a deregistration without a duration, no outage, no window.
    st.pending.deregister(
        Cause::Aside(crate::health::Aside::Suspended),
        Instant::now(),
    );
    let suspended = effects::of_change(
        &mut st,
        Presence::Normal,
        Presence::Absent,
        Timestamp::now(),
    );
    assert_eq!(reasons(&suspended), ["Deregistered"]);
    assert!(matches!(
        suspended.deregistered,
        Some((Cause::Aside(crate::health::Aside::Suspended), None))
    ));
    assert_eq!(
        suspended.events[0].0,
        kube::runtime::events::EventType::Normal
    );
    assert!(st.outage.window_from.is_none());

    // Handed over to the API server: its own note and cause, no duration, no window.
    st.pending.deregister(
        Cause::Aside(crate::health::Aside::InApiServer),
        Instant::now(),
    );
    let handed_over = effects::of_change(
        &mut st,
        Presence::Normal,
        Presence::Absent,
        Timestamp::now(),
    );
    assert!(handed_over.events[0].2.contains("runs in the API server"));
    assert!(matches!(
        handed_over.deregistered,
        Some((Cause::Aside(crate::health::Aside::InApiServer), None))
    ));
    assert!(st.outage.window_from.is_none());

    // A stray configuration removed: its own reason, nothing counted, the flag consumed.
    st.pending.stray_found(true);
    let stray = effects::of_change(
        &mut st,
        Presence::Normal,
        Presence::Absent,
        Timestamp::now(),
    );
    assert_eq!(reasons(&stray), ["StrayConfigurationRemoved"]);
    assert!(stray.deregistered.is_none() && st.pending.removal.is_none());
}

#[test]
fn a_machine_decision_outranks_a_stray_and_a_kept_configuration_is_no_stray() {
    let since = Instant::now();
    let mut pending = PendingChange::default();
    pending.stray_found(true);
    assert_eq!(pending.removal, Some(Removal::Stray));
    pending.deregister(Cause::ProbesFailed, since);
    pending.stray_found(true);
    pending.stray_found(false);
    assert_eq!(
        pending.removal,
        Some(Removal::Deregister(Cause::ProbesFailed, since)),
        "a stray found or kept does not undo the machine's decision"
    );
    assert_eq!(pending.deregister_cause(), Some(Cause::ProbesFailed));

    let mut kept = PendingChange::default();
    kept.stray_found(true);
    kept.stray_found(false);
    assert_eq!(kept.removal, None, "kept, so no stray");
    assert_eq!(kept.deregister_cause(), None);
}

#[test]
fn a_removal_retry_doubles_from_the_last_delay_whether_scheduled_or_run() {
    assert_eq!(RemovalRetry::None.last_delay(), None);
    let first = removal_retry(RemovalRetry::None.last_delay());
    assert_eq!(first, FIRST_REMOVAL_RETRY);
    assert_eq!(
        removal_retry(RemovalRetry::Scheduled(first).last_delay()),
        removal_retry(RemovalRetry::Ran(first).last_delay())
    );
    assert!(removal_retry(RemovalRetry::Ran(first).last_delay()) > first);
}
