//! Component tests: reviews through the server's router, without a socket.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use kube_initializer::advanced::Tuning;
use kube_initializer::mutate::{self, PodSpecHolder};
use kube_initializer::testing::{Answer, HttpAnswer, Tester, review};
use kube_initializer::{AnnotationGate, Denial, FailurePolicy, Initializer, Operation, Review};
use serde_json::json;

fn nginx_pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.8.1",
            "imagePullPolicy": "IfNotPresent", "ports": [{"containerPort": 80}]}]}
    }))
    .unwrap()
}

fn sidecar() -> Container {
    Container {
        name: "sidecar-nginx".into(),
        image: Some("nginx:1.8.1".into()),
        image_pull_policy: Some("IfNotPresent".into()),
        ..Container::default()
    }
}

fn add_sidecar(pod: &mut Pod, _: &Review) -> Result<(), Denial> {
    if let Some(spec) = pod.pod_spec_mut() {
        mutate::add_container(spec, &sidecar());
    }
    Ok(())
}

/// Posts `body` to the review path as the API server would.
async fn post(tester: &Tester, body: Vec<u8>) -> HttpAnswer {
    tester.send("POST", "/initialize", body).await.unwrap()
}

/// Checks that a review was refused with `status` and a body that says `message`.
fn assert_refused(http: &HttpAnswer, status: u16, message: &str) {
    assert_refused_for("the review", http, status, message);
}

/// [`assert_refused`], for a review described by `case` (named in a failure).
fn assert_refused_for(case: &str, http: &HttpAnswer, status: u16, message: &str) {
    assert_eq!(http.status, status, "{case}: {}", http.body);
    assert!(http.body.contains(message), "{case}: {}", http.body);
}

/// Checks that a review whose handler outran the budget was let through with a warning.
fn assert_allowed_past_the_budget(answer: &Answer) {
    assert!(answer.allowed());
    let warnings = answer.warnings();
    assert!(
        warnings[0].contains("did not answer within"),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn handler_that_changes_nothing_yields_no_patch() {
    let tester = Tester::new(Initializer::new("noop").handle(|_: &mut Pod, _: &Review| Ok(())));
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    assert!(answer.allowed());
    assert!(answer.patch().is_none());
    assert!(answer.response().get("patchType").is_none());
}

#[tokio::test]
async fn handler_change_becomes_a_patch_that_reproduces_it() {
    let tester = Tester::new(Initializer::new("sidecar").handle(add_sidecar));
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    assert!(answer.allowed());
    assert_eq!(answer.response()["patchType"], "JSONPatch");
    let patch = serde_json::to_value(answer.patch().unwrap()).unwrap();
    // The container, and the mark the SDK puts on every object it changed.
    let ops: Vec<(&str, &str)> = patch
        .as_array()
        .unwrap()
        .iter()
        .map(|op| (op["op"].as_str().unwrap(), op["path"].as_str().unwrap()))
        .collect();
    assert!(ops.contains(&("add", "/spec/containers/1")), "{ops:?}");
    assert!(
        ops.iter()
            .any(|(_, path)| path.starts_with("/metadata/annotations")),
        "{ops:?}"
    );
    let patched: Pod = answer.patched().unwrap();
    let names: Vec<_> = patched
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["nginx", "sidecar-nginx"]);
}

#[tokio::test]
async fn reinvocation_on_the_patched_object_yields_no_patch() {
    let tester = Tester::new(
        Initializer::new("sidecar")
            .handle(add_sidecar)
            .mark_initialized(true),
    );
    let first = tester.call(&review(&nginx_pod())).await.unwrap();
    let patched: Pod = first.patched().unwrap();
    assert!(mutate::is_initialized_by(&patched.metadata, "sidecar"));
    let second = tester.call(&review(&patched)).await.unwrap();
    assert!(second.allowed());
    assert!(second.patch().is_none());
}

#[tokio::test]
async fn fields_unknown_to_the_types_are_never_removed() {
    let tester = Tester::new(Initializer::new("sidecar").handle(add_sidecar));
    let mut builder = review(&nginx_pod());
    let mut doc = builder.to_json();
    doc["request"]["object"]["spec"]["futureField"] = json!({"x": 1});
    let http = post(&tester, serde_json::to_vec(&doc).unwrap()).await;
    assert_eq!(http.status, 200);
    let response: serde_json::Value = serde_json::from_str(&http.body).unwrap();
    let patch = String::from_utf8(
        base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            response["response"]["patch"].as_str().unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(!patch.contains("remove"), "{patch}");
    builder = builder.uid("x");
    assert_eq!(builder.to_json()["request"]["uid"], "x");
}

#[tokio::test]
async fn denial_carries_code_and_message() {
    let tester = Tester::new(
        Initializer::new("guard").handle(|_: &mut Secret, _: &Review| {
            Err(Denial::new("key password is too short").with_code(422))
        }),
    );
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    let answer = tester.call(&review(&secret)).await.unwrap();
    assert!(!answer.allowed());
    assert_eq!(answer.code(), Some(422));
    assert_eq!(answer.message(), Some("key password is too short"));
    assert!(answer.patch().is_none());
}

#[tokio::test]
async fn warnings_reach_the_response_whether_or_not_the_object_changes() {
    let tester = Tester::new(
        Initializer::new("warner").handle(|pod: &mut Pod, r: &Review| {
            r.warn("image uses a mutable tag");
            if pod.metadata.name.as_deref() == Some("change") {
                mutate::set_label(&mut pod.metadata, "a", "b");
            }
            Ok(())
        }),
    );
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    assert_eq!(answer.warnings(), ["image uses a mutable tag"]);
    let mut pod = nginx_pod();
    pod.metadata.name = Some("change".into());
    let answer = tester.call(&review(&pod)).await.unwrap();
    assert_eq!(answer.warnings(), ["image uses a mutable tag"]);
    assert!(answer.patch().is_some());
}

#[tokio::test]
async fn handler_sees_operation_namespace_user_dry_run_and_old_object() {
    let tester = Tester::new(Initializer::new("ctx").handle(|pod: &mut Pod, r: &Review| {
        assert_eq!(r.operation(), &Operation::Update);
        assert_eq!(r.namespace(), Some("team-a"));
        assert_eq!(r.user_info().username.as_deref(), Some("bob"));
        assert!(r.dry_run());
        let old: Pod = r.old_object().unwrap().unwrap();
        mutate::set_label(
            &mut pod.metadata,
            "old-name",
            old.metadata.name.as_deref().unwrap_or(""),
        );
        Ok(())
    }));
    let mut old = nginx_pod();
    old.metadata.name = Some("before".into());
    let answer = tester
        .call(
            &review(&nginx_pod())
                .update(&old)
                .namespace(Some("team-a"))
                .user("bob")
                .dry_run(true),
        )
        .await
        .unwrap();
    let patched: Pod = answer.patched().unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["old-name"], "before");
}

#[tokio::test]
async fn kinds_without_a_handler_are_admitted_unchanged_with_the_same_uid() {
    let tester = Tester::new(Initializer::new("pods-only").handle(add_sidecar));
    let deployment: Deployment =
        serde_json::from_value(json!({"metadata": {"name": "d"}})).unwrap();
    let answer = tester
        .call(&review(&deployment).uid("probe-1").dry_run(true))
        .await
        .unwrap();
    assert!(answer.allowed());
    assert_eq!(answer.uid(), "probe-1");
    assert!(answer.patch().is_none());
}

#[tokio::test]
async fn deletes_without_an_object_are_admitted() {
    let tester = Tester::new(Initializer::new("sidecar").handle(add_sidecar));
    let answer = tester.call(&review(&nginx_pod()).delete()).await.unwrap();
    assert!(answer.allowed());
    assert!(answer.patch().is_none());
}

#[tokio::test]
async fn panicking_handler_is_admitted_under_the_allow_policy_and_the_server_keeps_serving() {
    let tester = Tester::new(
        Initializer::new("boom").handle(|pod: &mut Pod, _: &Review| {
            if pod.metadata.name.as_deref() == Some("boom") {
                panic!("handler bug");
            }
            mutate::set_label(&mut pod.metadata, "ok", "true");
            Ok(())
        }),
    );
    let mut pod = nginx_pod();
    pod.metadata.name = Some("boom".into());
    let answer = tester.call(&review(&pod)).await.unwrap();
    assert!(answer.allowed());
    assert!(answer.patch().is_none());
    assert!(
        answer.warnings()[0].contains("handler bug"),
        "{:?}",
        answer.warnings()
    );
    let next = tester.call(&review(&nginx_pod())).await.unwrap();
    assert!(next.patch().is_some());
}

#[tokio::test]
async fn panicking_handler_is_refused_under_the_deny_policy() {
    let tester = Tester::new(
        Initializer::new("boom")
            .failure_policy(FailurePolicy::Deny)
            .handle(|_: &mut Pod, _: &Review| -> Result<(), Denial> { panic!("handler bug") }),
    );
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    assert!(!answer.allowed());
    assert_eq!(answer.code(), Some(500));
    assert!(answer.message().unwrap().contains("panicked: handler bug"));
}

#[tokio::test]
async fn slow_handler_is_answered_within_its_budget() {
    let budget = Duration::from_millis(200);
    let tester = Tester::new(Initializer::new("slow").budget(budget).handle(
        |_: &mut Pod, _: &Review| {
            std::thread::sleep(Duration::from_secs(4));
            Ok(())
        },
    ));
    let start = Instant::now();
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    let elapsed = start.elapsed();
    assert_allowed_past_the_budget(&answer);
    // Generous margin for a loaded 2-core machine; the handler itself sleeps 4 s.
    assert!(
        elapsed < budget + Duration::from_millis(2_000),
        "answered after {elapsed:?}"
    );
}

#[tokio::test]
async fn stuck_handlers_do_not_block_other_requests() {
    let tester = Tester::new(
        Initializer::new("stuck")
            .budget(Duration::from_secs(10))
            .handle(|pod: &mut Pod, _: &Review| {
                if pod.metadata.name.as_deref() == Some("stuck") {
                    std::thread::sleep(Duration::from_secs(5));
                }
                Ok(())
            }),
    );
    let mut stuck = nginx_pod();
    stuck.metadata.name = Some("stuck".into());
    let stuck_review = review(&stuck);
    let t = tester.clone();
    let background = tokio::spawn(async move { t.call(&stuck_review).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = Instant::now();
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    assert!(answer.allowed());
    // Had the stuck handler blocked the runtime, this would wait for its 5 s.
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "blocked for {:?}",
        start.elapsed()
    );
    background.abort();
}

#[tokio::test]
async fn malformed_json_is_a_400_with_a_message() {
    let tester = Tester::new(Initializer::new("x").handle(add_sidecar));
    let http = post(&tester, b"{not json".to_vec()).await;
    assert_refused(&http, 400, "failed to parse the AdmissionReview");
}

#[tokio::test]
async fn review_without_request_or_uid_is_a_400() {
    let tester = Tester::new(Initializer::new("x").handle(add_sidecar));
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
    let http = post(&tester, serde_json::to_vec(&body).unwrap()).await;
    assert_refused(&http, 400, "no request");
    let mut doc = review(&nginx_pod()).to_json();
    doc["request"]["uid"] = json!("");
    let http = post(&tester, serde_json::to_vec(&doc).unwrap()).await;
    assert_refused(&http, 400, "uid");
}

#[tokio::test]
async fn wrong_api_version_or_kind_of_the_review_is_a_400() {
    let tester = Tester::new(Initializer::new("x").handle(add_sidecar));
    for (api_version, kind) in [
        ("admission.k8s.io/v1beta1", "AdmissionReview"),
        ("admission.k8s.io/v1", "Pod"),
    ] {
        let mut doc = review(&nginx_pod()).to_json();
        doc["apiVersion"] = json!(api_version);
        doc["kind"] = json!(kind);
        let http = post(&tester, serde_json::to_vec(&doc).unwrap()).await;
        let case = format!("{api_version} {kind}");
        assert_refused_for(&case, &http, 400, "expected apiVersion admission.k8s.io/v1");
    }
}

#[tokio::test]
async fn oversized_request_is_a_413_with_a_message() {
    let tester = Tester::new(
        Initializer::new("x")
            .max_request_bytes(1024)
            .handle(add_sidecar),
    );
    let mut pod = nginx_pod();
    mutate::set_annotation(&mut pod.metadata, "big", &"x".repeat(2048));
    let http = post(&tester, review(&pod).to_bytes()).await;
    assert_refused(&http, 413, "larger than 1024 bytes");
}

#[tokio::test]
async fn undecodable_object_is_answered_by_the_failure_policy() {
    let tester = Tester::new(
        Initializer::new("x")
            .failure_policy(FailurePolicy::Deny)
            .handle(add_sidecar),
    );
    let mut doc = review(&nginx_pod()).to_json();
    doc["request"]["object"]["spec"]["containers"] = json!("not a list");
    let http = post(&tester, serde_json::to_vec(&doc).unwrap()).await;
    assert_eq!(http.status, 200);
    let response: serde_json::Value = serde_json::from_str(&http.body).unwrap();
    assert_eq!(response["response"]["allowed"], false);
    assert!(
        response["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("failed to decode the Pod")
    );
}

#[tokio::test]
async fn annotation_gate_skips_objects_before_the_handler_runs() {
    let tester = Tester::new(
        Initializer::new("sidecar")
            .annotation_gate(Some(AnnotationGate::new(
                "initializer.kubernetes.io/sidecar",
                true,
            )))
            .handle(add_sidecar),
    );
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    assert!(answer.patch().is_none());
    let mut annotated = nginx_pod();
    mutate::set_annotation(
        &mut annotated.metadata,
        "initializer.kubernetes.io/sidecar",
        "true",
    );
    let answer = tester.call(&review(&annotated)).await.unwrap();
    assert!(answer.patch().is_some());
}

#[tokio::test]
async fn unloaded_configuration_is_answered_by_the_failure_policy() {
    #[derive(serde::Deserialize)]
    struct Cfg {
        #[allow(dead_code)]
        image: String,
    }
    let tester = Tester::new(
        Initializer::<Cfg>::with_config("cfg").handle(|_: &mut Pod, _: &Review<Cfg>| Ok(())),
    );
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    assert!(answer.allowed());
    assert!(
        answer.warnings()[0].contains("configuration is not loaded"),
        "{:?}",
        answer.warnings()
    );
}

#[tokio::test]
async fn metrics_count_requests_by_kind_and_verdict_and_patch_sizes() {
    let tester = Tester::new(Initializer::new("sidecar").handle(add_sidecar));
    tester.call(&review(&nginx_pod())).await.unwrap();
    post(&tester, b"nope".to_vec()).await;
    let metrics = tester.send("GET", "/metrics", Vec::new()).await.unwrap();
    assert_eq!(metrics.status, 200);
    let text = metrics.body;
    for sample in [
        r#"initializer_admission_requests_total{kind="Pod",verdict="patched",mode="webhook"} 1"#,
        r#"initializer_admission_duration_seconds_count{kind="Pod",verdict="patched",mode="webhook"} 1"#,
        r#"initializer_patch_bytes_count{kind="Pod"} 1"#,
        r#"initializer_invalid_requests_total{reason="malformed"} 1"#,
    ] {
        assert!(text.contains(sample), "{sample} not in {text}");
    }
}

/// A review for an object of `kind`, as raw JSON: any caller can name any kind.
fn review_of_kind(kind: &str, uid: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("uid-{uid}"),
            "kind": {"group": "example.com", "version": "v1", "kind": kind},
            "resource": {"group": "example.com", "version": "v1", "resource": "things"},
            "name": "x",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "anyone"},
            "object": {"apiVersion": "example.com/v1", "kind": kind, "metadata": {"name": "x"}},
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn kinds_a_caller_makes_up_are_counted_under_one_label() {
    let tester = Tester::new(Initializer::new("sidecar").handle(add_sidecar));
    tester.call(&review(&nginx_pod())).await.unwrap();
    let made_up = 300;
    for n in 0..made_up {
        let answer = post(&tester, review_of_kind(&format!("Kind{n}"), n)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    let text = tester
        .send("GET", "/metrics", Vec::new())
        .await
        .unwrap()
        .body;
    let mut kinds: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split("kind=\"").nth(1)?.split('"').next())
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds, ["Pod", "other"], "{text}");
    assert!(
        text.contains(&format!(
            r#"initializer_admission_requests_total{{kind="other",verdict="allowed",mode="webhook"}} {made_up}"#
        )),
        "{text}"
    );
}

#[tokio::test]
async fn healthz_is_ok_and_readyz_waits_for_the_certificate() {
    let tester = Tester::new(Initializer::new("x"));
    assert_eq!(
        tester
            .send("GET", "/healthz", Vec::new())
            .await
            .unwrap()
            .status,
        200
    );
    let ready = tester.send("GET", "/readyz", Vec::new()).await.unwrap();
    assert_eq!(ready.status, 503);
    assert!(ready.body.contains("serving certificate"), "{}", ready.body);
}

#[tokio::test]
async fn the_operators_dry_run_probe_gets_a_well_formed_answer_for_the_same_uid() {
    // The shape the operator's active probe sends: dry run, null oldObject, CreateOptions.
    let probe = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7c0e2a4e-probe",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "initializer-operator-probe",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:initializer-system:initializer-operator"},
            "object": {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "initializer-operator-probe", "namespace": "default"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "p"}},
                    "template": {"metadata": {"labels": {"app": "p"}},
                        "spec": {"containers": [{"name": "probe", "image": "probe"}]}}}},
            "oldObject": null,
            "dryRun": true,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "dryRun": ["All"]}
        }
    });
    let seen_dry_run = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = seen_dry_run.clone();
    let tester = Tester::new(Initializer::new("sidecar").handle(
        move |d: &mut Deployment, r: &Review| {
            flag.store(r.dry_run(), std::sync::atomic::Ordering::SeqCst);
            mutate::set_label(&mut d.metadata, "seen", "true");
            Ok(())
        },
    ));
    let http = post(&tester, serde_json::to_vec(&probe).unwrap()).await;
    assert_eq!(http.status, 200, "{}", http.body);
    let answer: serde_json::Value = serde_json::from_str(&http.body).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], "7c0e2a4e-probe");
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
    assert!(seen_dry_run.load(std::sync::atomic::Ordering::SeqCst));
}

#[tokio::test]
async fn inline_handlers_patch_and_their_panics_are_still_caught() {
    let tester = Tester::new(Initializer::new("inline").inline_handlers(true).handle(
        |pod: &mut Pod, _: &Review| {
            if pod.metadata.name.as_deref() == Some("boom") {
                panic!("inline bug");
            }
            if let Some(spec) = pod.pod_spec_mut() {
                mutate::add_container(spec, &sidecar());
            }
            Ok(())
        },
    ));
    let patched: Pod = tester
        .call(&review(&nginx_pod()))
        .await
        .unwrap()
        .patched()
        .unwrap();
    assert_eq!(patched.spec.unwrap().containers.len(), 2);
    let mut boom = nginx_pod();
    boom.metadata.name = Some("boom".into());
    let answer = tester.call(&review(&boom)).await.unwrap();
    assert!(answer.allowed());
    assert!(
        answer.warnings()[0].contains("inline bug"),
        "{:?}",
        answer.warnings()
    );
}

struct AsyncLabeller;

impl kube_initializer::InitializeAsync<Pod> for AsyncLabeller {
    async fn initialize(&self, pod: &mut Pod, review: &Review) -> Result<(), Denial> {
        match pod.metadata.name.as_deref() {
            Some("slow") => tokio::time::sleep(Duration::from_secs(5)).await,
            Some("boom") => panic!("async bug"),
            Some("deny") => return Err(Denial::new("not today")),
            _ => tokio::task::yield_now().await,
        }
        review.warn("looked up asynchronously");
        mutate::set_label(&mut pod.metadata, "async", "true");
        Ok(())
    }
}

fn named(name: &str) -> Pod {
    let mut pod = nginx_pod();
    pod.metadata.name = Some(name.into());
    pod
}

#[tokio::test]
async fn async_handlers_patch_warn_and_deny() {
    let tester = Tester::new(Initializer::new("async").handle_async::<Pod>(AsyncLabeller));
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    assert_eq!(answer.warnings(), ["looked up asynchronously"]);
    let patched: Pod = answer.patched().unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["async"], "true");
    let denied = tester.call(&review(&named("deny"))).await.unwrap();
    assert!(!denied.allowed());
    assert_eq!(denied.message(), Some("not today"));
}

#[tokio::test]
async fn async_handlers_are_cancelled_at_the_budget_and_their_panics_caught() {
    let budget = Duration::from_millis(200);
    let tester = Tester::new(
        Initializer::new("async")
            .budget(budget)
            .failure_policy(FailurePolicy::Deny)
            .handle_async::<Pod>(AsyncLabeller),
    );
    let start = Instant::now();
    let slow = tester.call(&review(&named("slow"))).await.unwrap();
    // The handler sleeps 5 s; generous margin for a loaded machine.
    assert!(
        start.elapsed() < budget + Duration::from_millis(2_000),
        "{:?}",
        start.elapsed()
    );
    assert!(!slow.allowed());
    assert!(slow.message().unwrap().contains("did not answer within"));
    let boom = tester.call(&review(&named("boom"))).await.unwrap();
    assert_eq!(boom.code(), Some(500));
    assert!(boom.message().unwrap().contains("async bug"));
    assert!(tester.call(&review(&nginx_pod())).await.unwrap().allowed());
}

/// Labels the pod, or sleeps (blocking its thread) when it is named "stuck", or panics when it
/// is named "boom".
fn label_or_misbehave(pod: &mut Pod, _: &Review) -> Result<(), Denial> {
    match pod.metadata.name.as_deref() {
        Some("stuck") => std::thread::sleep(Duration::from_secs(2)),
        Some("boom") => panic!("worker bug"),
        _ => {}
    }
    mutate::set_label(&mut pod.metadata, "labelled", "true");
    Ok(())
}

async fn lane_runs(tester: &Tester, lane: &str) -> u64 {
    let text = tester
        .send("GET", "/metrics", Vec::new())
        .await
        .unwrap()
        .body;
    let prefix = format!(r#"initializer_handler_runs_total{{lane="{lane}"}} "#);
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {text}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_multi_threaded_runtime_handlers_run_as_worker_tasks_and_stay_idempotent() {
    let tester = Tester::new(Initializer::new("lanes").handle(label_or_misbehave));
    let answer = tester.call(&review(&nginx_pod())).await.unwrap();
    let patched: Pod = answer.patched().unwrap();
    assert_eq!(
        patched.metadata.labels.as_ref().unwrap()["labelled"],
        "true"
    );
    let again = tester.call(&review(&patched)).await.unwrap();
    assert!(again.patch().is_none(), "{:?}", again.patch());
    assert_eq!(lane_runs(&tester, "worker").await, 2);
    assert_eq!(lane_runs(&tester, "blocking_pool").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_two_workers_hung_handlers_are_answered_within_budget_and_others_still_served() {
    let budget = Duration::from_millis(300);
    let tester = Tester::new(
        Initializer::new("lanes")
            .budget(budget)
            .handle(label_or_misbehave),
    );
    let start = Instant::now();
    // Three hung handlers at once: the first holds the one worker slot of two workers, the
    // others go to the blocking pool; the free worker answers all three at the budget.
    let hung: Vec<_> = (0..3)
        .map(|_| {
            let t = tester.clone();
            tokio::spawn(async move { t.call(&review(&named("stuck"))).await.unwrap() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let served = tester.call(&review(&nginx_pod())).await.unwrap();
    assert!(served.patch().is_some());
    assert!(
        start.elapsed() < budget + Duration::from_millis(1_500),
        "a healthy review waited {:?}",
        start.elapsed()
    );
    for answer in hung {
        let answer = answer.await.unwrap();
        assert_allowed_past_the_budget(&answer);
    }
    // The handlers sleep 2 s; every answer came at the budget, not after them.
    assert!(
        start.elapsed() < budget + Duration::from_millis(1_500),
        "answered after {:?}",
        start.elapsed()
    );
    assert!(lane_runs(&tester, "worker").await >= 1);
    assert!(lane_runs(&tester, "blocking_pool").await >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_two_workers_a_panic_is_answered_and_gives_its_worker_slot_back() {
    let tester = Tester::new(
        Initializer::new("lanes")
            .failure_policy(FailurePolicy::Deny)
            .handle(label_or_misbehave),
    );
    let boom = tester.call(&review(&named("boom"))).await.unwrap();
    assert_eq!(boom.code(), Some(500));
    assert!(boom.message().unwrap().contains("worker bug"));
    for _ in 0..3 {
        assert!(tester.call(&review(&nginx_pod())).await.unwrap().allowed());
    }
    // Had the panic kept its slot, these would have gone to the blocking pool.
    assert_eq!(lane_runs(&tester, "worker").await, 4);
    assert_eq!(lane_runs(&tester, "blocking_pool").await, 0);
}
