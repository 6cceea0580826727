//! Unit tests of [`crate::serve::server`].

use super::*;

#[test]
fn listen_address_follows_flag_then_pod_ip_then_all_interfaces() {
    let mut args = ServeArgs::new(SocketAddr::from(([127, 0, 0, 1], 9443)), "/t", "/c");
    assert_eq!(
        args.listen_addr_with(Some("10.0.0.7")).to_string(),
        "127.0.0.1:9443"
    );
    args.listen = None;
    assert_eq!(
        args.listen_addr_with(Some("10.0.0.7")).to_string(),
        "10.0.0.7:8443"
    );
    assert_eq!(
        args.listen_addr_with(Some("fd00::7")).to_string(),
        "[fd00::7]:8443"
    );
    assert_eq!(
        args.listen_addr_with(Some("garbage")).to_string(),
        "0.0.0.0:8443"
    );
    assert_eq!(args.listen_addr_with(None).to_string(), "0.0.0.0:8443");
}

#[test]
fn the_loopback_is_served_beside_a_pod_ip_only() {
    let mut args = ServeArgs::new(SocketAddr::from(([127, 0, 0, 1], 9443)), "/t", "/c");
    assert_eq!(
        args.loopback_addr_with(Some("10.0.0.7")),
        None,
        "--listen wins"
    );
    args.listen = None;
    let loopback = |ip| args.loopback_addr_with(ip).map(|a| a.to_string());
    assert_eq!(
        loopback(Some("10.244.1.7")).as_deref(),
        Some("127.0.0.1:8443")
    );
    assert_eq!(loopback(Some("fd00::7")).as_deref(), Some("[::1]:8443"));
    assert_eq!(
        loopback(Some("127.1.0.9")),
        None,
        "already a loopback address"
    );
    assert_eq!(loopback(None), None, "0.0.0.0 covers it");
    assert_eq!(loopback(Some("garbage")), None);
}

#[test]
fn block_on_returns_although_a_handler_thread_is_stuck() {
    assert_block_on_returns_promptly(async {
        drop(tokio::task::spawn_blocking(|| {
            std::thread::sleep(Duration::from_secs(30))
        }));
        7
    });
}

#[test]
fn block_on_returns_although_a_worker_is_stuck_in_a_handler() {
    assert_block_on_returns_promptly(async {
        drop(tokio::spawn(async {
            std::thread::sleep(Duration::from_secs(30))
        }));
        tokio::task::yield_now().await;
        7
    });
}

/// Runs `work` (which leaves a thread stuck for 30 s and yields 7) through `block_on` and
/// checks that the stuck thread does not hold up the return.
fn assert_block_on_returns_promptly(work: impl std::future::Future<Output = i32>) {
    let start = std::time::Instant::now();
    let out = block_on(work).unwrap();
    assert_eq!(out, 7);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn with_every_lane_hung_reviews_are_still_answered_at_the_budget() {
    use k8s_openapi::api::core::v1::Pod;
    let budget = Duration::from_millis(300);
    let initializer = Arc::new(Initializer::new("hung").budget(budget).handle(
        |pod: &mut Pod, _: &crate::Review| {
            if pod.metadata.name.as_deref() == Some("stuck") {
                std::thread::sleep(Duration::from_secs(3));
            }
            Ok(())
        },
    ));
    let stuck = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("stuck".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let body = crate::testing::review(&stuck).to_bytes();
    let runtime = webhook_runtime().unwrap();
    let start = std::time::Instant::now();
    let answers = runtime.block_on(async {
        // More hung runs than the worker slot and the blocking pool hold together.
        let calls: Vec<_> = (0..WEBHOOK_BLOCKING_THREADS + 4)
            .map(|_| {
                let (init, body) = (Arc::clone(&initializer), body.clone());
                tokio::spawn(async move { init.review_json(&body).await })
            })
            .collect();
        let mut answers = Vec::new();
        for call in calls {
            answers.push(String::from_utf8(call.await.unwrap().unwrap()).unwrap());
        }
        answers
    });
    let elapsed = start.elapsed();
    runtime.shutdown_timeout(Duration::from_millis(100));
    assert!(
        elapsed < budget + Duration::from_millis(1_500),
        "answered after {elapsed:?}"
    );
    for answer in answers {
        assert!(answer.contains("did not answer within"), "{answer}");
    }
}

#[test]
fn a_webhook_runtime_has_a_worker_per_cpu_and_a_spare() {
    assert_eq!(webhook_workers(0), 2);
    assert_eq!(webhook_workers(1), 2);
    assert_eq!(webhook_workers(2), 3);
    assert_eq!(webhook_workers(8), 9);
}

#[test]
fn controller_mode_needs_a_fully_qualified_pending_name() {
    let args = ServeArgs::new(SocketAddr::from(([127, 0, 0, 1], 0)), "/t", "/c");
    let missing = args.clone().controller(" ").controller_settings(None);
    assert!(
        matches!(&missing, Err(Error::ControllerArgs(m)) if m.contains("--pending-name (INITIALIZER_PENDING_NAME) is required")),
        "{missing:?}"
    );
    let short = args.clone().controller("sidecar").controller_settings(None);
    assert!(
        matches!(&short, Err(Error::ControllerArgs(m)) if m.contains("at least two dots")),
        "{short:?}"
    );
    let settings = args
        .controller("sidecar.initializer.kubernetes.io")
        .controller_settings(Some(AnnotationGate::new("a", true)))
        .unwrap();
    assert_eq!(settings.pending_name, "sidecar.initializer.kubernetes.io");
    assert!(settings.rules.is_none());
    assert_eq!(settings.scope.gate, Some(AnnotationGate::new("a", true)));
}

#[test]
fn an_empty_annotation_means_no_gate() {
    let mut args = ServeArgs::new(SocketAddr::from(([127, 0, 0, 1], 0)), "/t", "/c");
    args.annotation = Some("  ".into());
    args.require_annotation = true;
    assert_eq!(args.annotation_gate(), None);
}
