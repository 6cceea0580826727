//! An object author who forges the initializer's mark: while the initializer is out of the path,
//! Deployments are created carrying `initializer.dev/initialized-by` as the author can write it
//! (the unsigned form the SDK wrote before, a signed form with a made-up MAC, a genuine mark
//! copied from another object, and a genuine mark bought ahead of time for the very object, by
//! posting the initializer an UPDATE review whose `oldObject` claims a creation time to come).
//! None of them may hide its object from the operator's count of missed initializations; a
//! Deployment the initializer genuinely marked in the window is not counted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use initializer_e2e::fixtures;
use initializer_e2e::ops;
use initializer_e2e::runner::Ctx;
use initializer_e2e::timings::Missed;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhook;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

use crate::common::{self, REGISTER_TIMEOUT, STEP_TIMEOUT, s};

/// The mark's annotation (`kube_initializer::mutate::INITIALIZED_BY_ANNOTATION`).
pub const MARK: &str = "initializer.dev/initialized-by";

/// How far ahead a bought mark's review claims its object was created: beyond the mark's window
/// (`initializer_mark::WINDOW_SECONDS`, 10 s) from the moment it is bought, so that a mark
/// stamped with the claim fits a create made at the claimed time, and one stamped with the
/// initializer's own clock does not.
const BOUGHT_AHEAD: Duration = Duration::from_secs(25);
/// The Deployment a mark is bought for ahead of time.
const BOUGHT: &str = "forged-bought";

/// The mark a Deployment carries.
pub fn mark_of(deployment: &Deployment) -> Option<&str> {
    deployment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MARK))
        .map(String::as_str)
}

/// What an author can write, given a genuine mark `genuine` (`<name>/<generation>/t=…/<MAC>`)
/// they read on another object: `(what it is, the annotation's value)`.
pub fn forgeries(genuine: &str, now: i64) -> anyhow::Result<Vec<(&'static str, String)>> {
    let parts: Vec<&str> = genuine.split('/').collect();
    let [name, generation, time, _mac] = parts.as_slice() else {
        anyhow::bail!("the genuine mark {genuine:?} is not <name>/<generation>/t=<time>/<MAC>");
    };
    ensure!(
        time.starts_with("t="),
        "the genuine mark {genuine:?} has no time stamp"
    );
    Ok(vec![
        ("the unsigned mark, name alone", (*name).to_string()),
        (
            "the unsigned mark the SDK wrote before",
            format!("{name}/{generation}"),
        ),
        (
            "a signed-looking mark with a made-up MAC",
            format!("{name}/{generation}/t={now}/{}", "A".repeat(43)),
        ),
        (
            "a genuine mark copied from another object",
            genuine.to_string(),
        ),
    ])
}

/// Asks the initializer for a mark on the Deployment `namespace/name`, as anyone who reaches its
/// `/initialize` can (here through the API server's service proxy): an UPDATE review whose
/// `oldObject` claims the Deployment was created at `claimed`. Returns the mark its answer
/// writes, if any.
async fn buy_mark(
    ctx: &Ctx,
    webhook: &MutatingWebhook,
    namespace: &str,
    name: &str,
    claimed: Timestamp,
) -> anyhow::Result<Option<String>> {
    let service = webhook
        .client_config
        .service
        .as_ref()
        .context("the webhook calls no Service")?;
    let path = format!(
        "/api/v1/namespaces/{}/services/https:{}:{}/proxy{}",
        service.namespace,
        service.name,
        service.port.unwrap_or(443),
        service.path.as_deref().unwrap_or("/")
    );
    let mut deployment = serde_json::to_value(fixtures::nginx_deployment(name, true, 0)?)?;
    deployment["metadata"]["namespace"] = json!(namespace);
    deployment["metadata"]["creationTimestamp"] = json!(claimed.to_string());
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "bought-ahead",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": name,
            "namespace": namespace,
            "operation": "UPDATE",
            "userInfo": {"username": "system:serviceaccount:team-a:default"},
            "object": deployment,
            "oldObject": deployment,
        },
    });
    let request = http::Request::post(&path)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&review)?)?;
    let answer: Value = serde_json::from_str(
        &ctx.client()
            .request_text(request)
            .await
            .with_context(|| format!("failed to post a review to {path}"))?,
    )?;
    let Some(patch) = answer["response"].get("patch") else {
        return Ok(None);
    };
    let patch: k8s_openapi::ByteString = serde_json::from_value(patch.clone())?;
    let operations: Vec<Value> = serde_json::from_slice(&patch.0)?;
    let key = MARK.replace('/', "~1");
    Ok(operations.iter().find_map(|op| {
        let value = match op["path"].as_str()? {
            "/metadata/annotations" => &op["value"][MARK],
            path if path == format!("/metadata/annotations/{key}") => &op["value"],
            _ => return None,
        };
        value.as_str().map(str::to_string)
    }))
}

/// The time stamp of a signed mark (`<name>/<generation>/t=<seconds>/<MAC>`), in Unix seconds.
fn stamp_of(mark: &str) -> Option<i64> {
    mark.split('/')
        .find_map(|part| part.strip_prefix("t="))
        .and_then(|time| time.parse().ok())
}

/// Creates an annotated nginx Deployment (no replicas) carrying `mark`, if any.
async fn create_marked(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    mark: Option<&str>,
) -> anyhow::Result<Deployment> {
    let mut deployment = fixtures::nginx_deployment(name, true, 0)?;
    if let Some(mark) = mark {
        deployment
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(MARK.to_string(), mark.to_string());
    }
    Api::<Deployment>::namespaced(ctx.client(), namespace)
        .create(&Default::default(), &deployment)
        .await
        .with_context(|| format!("failed to create Deployment {namespace}/{name}"))
}

/// Every pod of the sidecar initializer frozen until its configuration is removed; meanwhile
/// one Deployment per forgery and one unmarked are created (none injected). After the thaw and
/// the registration, more are created at once, inside the count's window and injected. The
/// operator's count must be exactly the Deployments created without the initializer (the forged
/// ones and the unmarked one): before the marks were signed it counted only the unmarked one.
pub async fn forged_marks_do_not_hide_objects_from_the_missed_count(
    ctx: Ctx,
) -> anyhow::Result<()> {
    let sidecar = common::registered_sidecar(&ctx, "forged", Default::default()).await?;
    let ns = sidecar.target_ns.clone();
    let genuine = create_marked(&ctx, &ns, "genuine", None).await?;
    ensure!(
        fixtures::has_sidecar(&genuine),
        "the initializer should inject before the outage"
    );
    let genuine_mark = mark_of(&genuine)
        .context("the injected Deployment carries no mark")?
        .to_string();
    eprintln!("{}: a genuine mark: {genuine_mark}", sidecar.name);
    // A mark bought now for a Deployment to be created during the outage, at the claimed time.
    let claimed = Timestamp::now() + BOUGHT_AHEAD;
    let webhook = ops::registered_webhook(&ctx.client(), &sidecar.name).await?;
    let bought = buy_mark(&ctx, &webhook, &ns, BOUGHT, claimed)
        .await?
        .context("the initializer wrote no mark for an annotated Deployment's update")?;
    let bought_stamp = stamp_of(&bought).context("the bought mark is not signed")?;
    ensure!(
        bought_stamp <= Timestamp::now().as_second(),
        "the initializer stamped a mark {}s in the future, the time the review claimed: {bought}",
        bought_stamp - Timestamp::now().as_second()
    );

    let frozen_wall = Timestamp::now();
    let frozen_at = Instant::now();
    let frozen = common::freeze_all(&ctx, &sidecar).await?;
    let removed = sidecar.removed_after(frozen_at).await;
    let forged = async {
        removed?;
        let mut created = Vec::new();
        // Created at the time the review claimed, where a mark stamped with that claim would
        // pass.
        if let Ok(wait) = Duration::try_from(claimed.duration_since(Timestamp::now())) {
            tokio::time::sleep(wait).await;
        }
        let deployment = create_marked(&ctx, &ns, BOUGHT, Some(&bought)).await?;
        created.push(("a genuine mark bought ahead of time", deployment));
        let now = Timestamp::now().as_second();
        for (n, (what, mark)) in forgeries(&genuine_mark, now)?.into_iter().enumerate() {
            let deployment = create_marked(&ctx, &ns, &format!("forged-{n}"), Some(&mark)).await?;
            created.push((what, deployment));
        }
        let unmarked = create_marked(&ctx, &ns, "unmarked", None).await?;
        created.push(("no mark", unmarked));
        anyhow::Ok(created)
    }
    .await;
    let thawed = common::thaw_all(&ctx, &sidecar, &frozen).await;
    let forged = forged?;
    thawed?;
    for (what, deployment) in &forged {
        ensure!(
            !fixtures::has_sidecar(deployment),
            "{what}: created while the initializer was out, yet injected"
        );
    }

    // Back in the path: creates right away fall in the count's window (it closes the webhook
    // timeout plus a second after the registration) and carry genuine marks.
    let (_, registered) =
        ops::wait_registered(&ctx.client(), &sidecar.name, REGISTER_TIMEOUT).await?;
    let mut after = Vec::new();
    for n in 0..3 {
        after.push(create_marked(&ctx, &ns, &format!("after-{n}"), None).await?);
    }
    let after_took = registered.elapsed();
    let not_injected_after = after.iter().filter(|d| !fixtures::has_sidecar(d)).count();
    let expected = forged.len() + not_injected_after;
    eprintln!(
        "{}: {} Deployments created with forged or no marks while the initializer was out, {} after it came back ({} injected, the last {} after the registration); the operator must count {expected}",
        sidecar.name,
        forged.len(),
        after.len(),
        after.len() - not_injected_after,
        s(after_took)
    );
    let counted = counted_since(&ctx, &sidecar.name, frozen_wall, expected).await?;
    ctx.row.update(|row| {
        row.missed = Some(Missed {
            reported: counted,
            actual: expected,
        })
    });
    ensure!(
        usize::try_from(counted).ok() == Some(expected),
        "the operator counted {counted} missed initialization(s) over the outage's windows, the harness saw {expected} creates pass without the initializer"
    );

    // The window held at least one genuinely marked Deployment, which was not counted.
    let missed = ops::wait_missed(&ctx.client(), &sidecar.name, frozen_wall, STEP_TIMEOUT).await?;
    let in_window: Vec<&Deployment> = after
        .iter()
        .filter(|d| {
            fixtures::has_sidecar(d)
                && d.metadata
                    .creation_timestamp
                    .as_ref()
                    .is_some_and(|t| t.0.as_second() <= missed.to.0.as_second())
        })
        .collect();
    ensure!(
        !in_window.is_empty(),
        "no injected Deployment was created before the window closed at {} (created {:?}): the count was not shown to leave genuine marks alone",
        missed.to.0,
        after
            .iter()
            .map(|d| d.metadata.creation_timestamp.clone())
            .collect::<Vec<_>>()
    );
    for (what, deployment) in &forged {
        let name = deployment.metadata.name.as_deref().unwrap_or_default();
        eprintln!("  {what}: {name} {:?}", mark_of(deployment));
    }
    Ok(())
}

/// The missed initializations the operator counted over every window that opened at or after
/// `since`, summed from its `MissedInitializations` Events (one per window: "N object(s) in scope
/// were created without the initializer between FROM and TO"), waiting up to the step timeout
/// for the sum to reach `expected`. The status keeps only the last window's report; on a loaded
/// cluster a probe may fail again right after the return, and then the forged objects are
/// counted in the first window and the status shows a later one (seen on kind, after the
/// connection attack).
async fn counted_since(
    ctx: &Ctx,
    name: &str,
    since: k8s_openapi::jiff::Timestamp,
    expected: usize,
) -> anyhow::Result<i64> {
    let events: Api<Event> = Api::all(ctx.client());
    let started = Instant::now();
    loop {
        let list = events
            .list(&ListParams::default())
            .await
            .context("failed to list Events")?;
        let mut windows = BTreeMap::new();
        for event in &list.items {
            let regarding = event.regarding.as_ref().and_then(|r| r.name.as_deref());
            if regarding != Some(name) || event.reason.as_deref() != Some("MissedInitializations") {
                continue;
            }
            let note = event.note.as_deref().unwrap_or_default();
            if let Some((count, from)) = window_count(note)
                && from >= since.as_second() - 1
            {
                windows.insert(from, count);
            }
        }
        let counted: i64 = windows.values().sum();
        if usize::try_from(counted).ok() == Some(expected) || started.elapsed() > STEP_TIMEOUT {
            eprintln!("{name}: missed initializations by window (from, count): {windows:?}");
            return Ok(counted);
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// The count and the window's start (Unix seconds) in a `MissedInitializations` Event's note.
fn window_count(note: &str) -> Option<(i64, i64)> {
    let note = note.strip_prefix("at least ").unwrap_or(note);
    let (count, rest) = note.split_once(" object(s) in scope were created")?;
    let from = rest.split_once(" between ")?.1.split(" and ").next()?;
    let from: k8s_openapi::jiff::Timestamp = from.parse().ok()?;
    Some((count.trim().parse().ok()?, from.as_second()))
}
