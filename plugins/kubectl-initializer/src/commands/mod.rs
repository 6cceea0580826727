//! The IO shell of every subcommand: connect, read what the decision needs, call the pure
//! code, print. Errors go back to `main`, which prints them on stderr.
//!
//! `why`, which reads arbitrary objects through discovery, has its own file (`why.rs`); so has
//! `diff` (`diff.rs`), which reads no cluster at all.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;
use initializer_crds::constants::BREAK_GLASS_ANNOTATION;
use initializer_crds::{Initializer, Phase};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::json;

use crate::cli::{Cli, Command, Switch};
use crate::error::{Error, Result, is_not_found};
use crate::output::{Format, structured};
use crate::why::OperatorFacts;
use crate::{probe, status};

mod diff;
mod why;

/// The field manager of every write the plugin makes (the operator's is
/// `initializer-operator`).
pub const FIELD_MANAGER: &str = "kubectl-initializer";

/// The label on the operator's pods, by which its namespace is found.
pub const OPERATOR_POD_SELECTOR: &str = "app.kubernetes.io/name=initializer-operator";

/// A client for the chosen kubeconfig and context, and the namespace in force.
pub struct Connection {
    pub client: Client,
    /// `-n`, else the context's namespace, else `default`.
    pub namespace: String,
}

/// Connects the kubectl way: `--kubeconfig`, else `KUBECONFIG` (a list of files, merged),
/// else `~/.kube/config`; `--context`, else the current context.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    namespace: Option<&str>,
) -> Result<Connection> {
    let file = match kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    }
    .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = Config::from_custom_kubeconfig(file, &options)
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let namespace = namespace
        .map(str::to_string)
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    Ok(Connection { client, namespace })
}

/// Runs the command line; returns what to print on stdout.
pub async fn run(cli: Cli) -> Result<String> {
    // Offline: before any kubeconfig is read, so that it works without one.
    if let Command::Diff(args) = &cli.command {
        return diff::run(
            args,
            cli.namespace.as_deref(),
            cli.operator_namespace.as_deref(),
            cli.output,
        )
        .await;
    }
    let conn = connect(
        cli.kubeconfig.as_deref(),
        cli.context.as_deref(),
        cli.namespace.as_deref(),
    )
    .await?;
    let format = cli.output;
    let operator_namespace = cli.operator_namespace.clone();
    match cli.command {
        Command::Status { name } => status_command(&conn, name.as_deref(), format).await,
        Command::Suspend(suspend) => {
            let action = SwitchAction::Suspend(&suspend.reason);
            switch_command(&conn, &suspend.switch, action, format).await
        }
        Command::Resume(switch) => {
            switch_command(&conn, &switch, SwitchAction::Resume, format).await
        }
        Command::Probe { name, timeout } => {
            probe_command(&conn, &name, timeout, operator_namespace, format).await
        }
        Command::Why {
            object,
            filename,
            operation,
        } => {
            why::run(
                &conn,
                object.as_deref(),
                filename.as_deref(),
                &operation,
                operator_namespace,
                format,
            )
            .await
        }
        // Answered above, without a connection.
        Command::Diff(_) => Err(Error::BadInput(
            "diff runs offline and was answered above".to_string(),
        )),
    }
}

async fn get_initializer(client: &Client, name: &str) -> Result<Initializer> {
    Api::<Initializer>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| {
            if is_not_found(&e) {
                Error::InitializerNotFound(name.to_string())
            } else {
                Error::api(format!("read Initializer {name}"), e)
            }
        })
}

async fn status_command(conn: &Connection, name: Option<&str>, format: Format) -> Result<String> {
    let initializers = match name {
        Some(name) => vec![get_initializer(&conn.client, name).await?],
        None => {
            Api::<Initializer>::all(conn.client.clone())
                .list(&ListParams::default())
                .await
                .map_err(|e| Error::api("list Initializers", e))?
                .items
        }
    };
    let now = jiff::Timestamp::now();
    let rows: Vec<status::StatusRow> = initializers.iter().map(|i| status::row(i, now)).collect();
    if let Some(out) = structured(format, &json!({"items": rows}))? {
        return Ok(out);
    }
    if rows.is_empty() {
        return Ok("No Initializers found.\n".to_string());
    }
    Ok(status::table(&rows))
}

/// Whether the operator has reported what `suspend` (or `resume`) asked for.
pub fn switch_done(initializer: &Initializer, suspend: bool) -> bool {
    let status = initializer.status.as_ref();
    let observed = status.and_then(|s| s.observed_generation) >= initializer.metadata.generation;
    let registered = status.and_then(|s| s.registered).unwrap_or(false);
    let phase = status.and_then(|s| s.phase);
    if suspend {
        observed && phase == Some(Phase::Suspended) && !registered
    } else {
        observed && registered
    }
}

/// What `suspend` and `resume` change.
#[derive(Clone, Copy, Debug)]
enum SwitchAction<'a> {
    /// Set the break-glass annotation, with this reason as its value.
    Suspend(&'a str),
    /// Remove the break-glass annotation (whoever set it) and clear `spec.suspend`.
    Resume,
}

/// The request that flips the switch: the annotation by server-side apply, so that this field
/// manager owns it and an apply by another manager that omits it leaves it; a resume by a
/// merge patch, which removes the annotation whoever set it (`kubectl annotate`, a manifest) and
/// clears `spec.suspend` too.
fn switch_patch(name: &str, action: SwitchAction<'_>) -> (Patch<serde_json::Value>, PatchParams) {
    match action {
        SwitchAction::Suspend(reason) => (
            Patch::Apply(json!({
                "apiVersion": "initializer.dev/v1alpha1",
                "kind": "Initializer",
                "metadata": {"name": name, "annotations": {BREAK_GLASS_ANNOTATION: reason}},
            })),
            PatchParams::apply(FIELD_MANAGER).force(),
        ),
        SwitchAction::Resume => (
            Patch::Merge(json!({
                "metadata": {"annotations": {BREAK_GLASS_ANNOTATION: null}},
                "spec": {"suspend": false},
            })),
            PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            },
        ),
    }
}

async fn switch_command(
    conn: &Connection,
    switch: &Switch,
    action: SwitchAction<'_>,
    format: Format,
) -> Result<String> {
    let api = Api::<Initializer>::all(conn.client.clone());
    let before = get_initializer(&conn.client, &switch.name).await?;
    let suspend = matches!(action, SwitchAction::Suspend(_));
    let verb = if suspend { "suspend" } else { "resume" };
    // A suspend without a reason keeps the reason already recorded.
    let changed = match action {
        SwitchAction::Suspend(reason) => before
            .annotations()
            .get(BREAK_GLASS_ANNOTATION)
            .is_none_or(|recorded| !reason.is_empty() && recorded != reason),
        SwitchAction::Resume => before.is_suspended(),
    };
    let mut current = if changed {
        let (patch, params) = switch_patch(&switch.name, action);
        api.patch(&switch.name, &params, &patch)
            .await
            .map_err(|e| Error::api(format!("{verb} Initializer {}", switch.name), e))?
    } else {
        before
    };
    if switch.wait {
        let started = Instant::now();
        while !switch_done(&current, suspend) {
            if started.elapsed() > switch.timeout {
                let phase = current
                    .status
                    .as_ref()
                    .and_then(|s| s.phase)
                    .map(|p| format!("{p:?}"))
                    .unwrap_or_else(|| "unknown".to_string());
                return Err(Error::Timeout(format!(
                    "Initializer {} {} within {} s (phase {phase})",
                    switch.name,
                    if suspend {
                        "suspended and deregistered"
                    } else {
                        "registered again"
                    },
                    switch.timeout.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            current = get_initializer(&conn.client, &switch.name).await?;
        }
    }
    if let Some(out) = structured(format, &current)? {
        return Ok(out);
    }
    let done = match (suspend, changed) {
        (true, true) => "suspended",
        (false, true) => "resumed",
        (_, false) => "unchanged",
    };
    let mut text = format!("initializer.initializer.dev/{} {done}\n", switch.name);
    if switch.wait {
        text.push_str(&format!(
            "the operator reports phase {}, registered {}\n",
            current
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map(|p| format!("{p:?}"))
                .unwrap_or_default(),
            current
                .status
                .as_ref()
                .and_then(|s| s.registered)
                .unwrap_or(false)
        ));
    }
    Ok(text)
}

/// The live configuration of `initializer`, if one is registered and is the operator's.
async fn live_configuration(
    client: &Client,
    initializer: &Initializer,
) -> Result<Option<MutatingWebhookConfiguration>> {
    let name = initializer_core::naming::names(&initializer.name_any()).configuration;
    match Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(&name)
        .await
    {
        Ok(found) => Ok(found.filter(|c| initializer_core::ownership::labelled_ours(&c.metadata))),
        Err(e) => Err(Error::api(
            format!("read MutatingWebhookConfiguration {name}"),
            e,
        )),
    }
}

/// The operator's namespace: the flag, else the one namespace its pods run in.
async fn operator_facts(client: &Client, flag: Option<String>) -> Result<OperatorFacts> {
    if flag.is_some() {
        return Ok(OperatorFacts { namespace: flag });
    }
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().labels(OPERATOR_POD_SELECTOR))
        .await
        .map_err(|e| Error::api("list the operator's pods", e))?;
    let namespaces: BTreeSet<String> = pods.items.iter().filter_map(|p| p.namespace()).collect();
    Ok(OperatorFacts {
        namespace: (namespaces.len() == 1)
            .then(|| namespaces.into_iter().next())
            .flatten(),
    })
}

async fn probe_command(
    conn: &Connection,
    name: &str,
    timeout: Option<Duration>,
    operator_namespace: Option<String>,
    format: Format,
) -> Result<String> {
    let initializer = get_initializer(&conn.client, name).await?;
    let live = live_configuration(&conn.client, &initializer).await?;
    let facts = if live.is_some() {
        OperatorFacts::default()
    } else {
        operator_facts(&conn.client, operator_namespace).await?
    };
    let service = probe::probed_service(&initializer, live.as_ref(), facts.namespace.as_deref())
        .map_err(|why| Error::ProbeFailed {
            name: name.to_string(),
            why,
            report: String::new(),
        })?;
    let uid = format!("{:032x}", rand::random::<u128>());
    let body = serde_json::to_vec(&probe::synthetic_review(&initializer, &uid))
        .map_err(|e| Error::Output(e.to_string()))?;
    let budget = Duration::from_millis(
        u64::try_from(initializer.spec.health_policy().latency_budget_millis).unwrap_or(500),
    );
    let wait = timeout.unwrap_or_else(|| {
        Duration::from_secs(u64::try_from(initializer.spec.timeout_seconds).unwrap_or(5))
    });
    let request = http::Request::post(service.proxy_path())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::from(body))
        .map_err(|e| Error::BadInput(e.to_string()))?;
    let started = Instant::now();
    let exchange = async {
        let response = conn.client.send(request).await?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| kube::Error::Service(Box::new(e)))?
            .to_bytes();
        Ok::<_, kube::Error>((status, bytes))
    };
    let report = match tokio::time::timeout(wait, exchange).await {
        Ok(Ok((status, bytes))) => probe::judge(
            name,
            &service,
            Some(status),
            &bytes,
            &uid,
            started.elapsed(),
            budget,
        ),
        Ok(Err(e)) => {
            return Err(Error::api(
                format!("POST the probe to {}", service.proxy_path()),
                e,
            ));
        }
        Err(_) => probe::judge(name, &service, None, b"", &uid, started.elapsed(), budget),
    };
    let out = match structured(format, &report)? {
        Some(out) => out,
        None => probe::text(&report),
    };
    if report.ok {
        Ok(out)
    } else {
        Err(Error::ProbeFailed {
            name: name.to_string(),
            why: report.message,
            report: out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_status(generation: i64, observed: i64, phase: Phase, registered: bool) -> Initializer {
        serde_json::from_value(json!({
            "apiVersion": "initializer.dev/v1alpha1",
            "kind": "Initializer",
            "metadata": {"name": "s", "generation": generation},
            "spec": {"image": "x:1", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
            "status": {"phase": phase, "registered": registered, "observedGeneration": observed},
        }))
        .unwrap()
    }

    #[test]
    fn suspend_is_done_when_the_operator_saw_the_generation_and_deregistered() {
        assert!(switch_done(
            &with_status(2, 2, Phase::Suspended, false),
            true
        ));
        assert!(!switch_done(
            &with_status(2, 1, Phase::Suspended, false),
            true
        ));
        assert!(!switch_done(
            &with_status(2, 2, Phase::Registered, true),
            true
        ));
    }

    #[test]
    fn resume_is_done_when_registered_for_the_current_generation() {
        assert!(switch_done(
            &with_status(3, 3, Phase::Registered, true),
            false
        ));
        assert!(!switch_done(
            &with_status(3, 2, Phase::Registered, true),
            false
        ));
        assert!(!switch_done(
            &with_status(3, 3, Phase::Deploying, false),
            false
        ));
    }
}
