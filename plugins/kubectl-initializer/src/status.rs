//! `kubectl initializer status`: one row per Initializer from the status the operator writes
//! (phase, engine, registration, the `Responding` condition, the last probe, the certificate's
//! expiry),
//! and the human table. Pure: the time is a parameter.

use initializer_crds::Initializer;
use initializer_crds::conditions::{DEGRADED, REGISTERED, RESPONDING};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use serde::Serialize;

/// A certificate expiring sooner than this is flagged in the table.
pub const CERTIFICATE_WARNING_DAYS: i64 = 30;

/// What `status` reports for one Initializer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRow {
    /// The Initializer's name.
    pub name: String,
    /// The phase the operator reports (`Unknown` before its first status).
    pub phase: String,
    /// Where its injection runs now: `Webhook`, or `Policy` (in the API server).
    pub engine: String,
    /// Whether its configuration is registered now.
    pub registered: bool,
    /// The name of the registered MutatingWebhookConfiguration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configuration: Option<String>,
    /// Health in one word: `Responding`, `Degraded`, the failed probe's reason, or `Unknown`.
    pub health: String,
    /// The `Responding` (or, when degraded, `Degraded`) condition's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_message: Option<String>,
    /// Ready initializer pods, of the desired replicas.
    pub ready_replicas: i32,
    /// The replicas the spec asks for.
    pub replicas: i32,
    /// When the operator last probed it (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<String>,
    /// Seconds since the last probe, at the time of the report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_probe_age_seconds: Option<i64>,
    /// Latency of the last probe, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_probe_latency_millis: Option<i64>,
    /// The serving certificate's expiry (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_not_after: Option<String>,
    /// Seconds until the certificate expires (negative once expired).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_expires_in_seconds: Option<i64>,
    /// Whether it is suspended (`spec.suspend` or the break-glass annotation).
    pub suspended: bool,
}

fn condition<'a>(initializer: &'a Initializer, type_: &str) -> Option<&'a Condition> {
    initializer
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

fn seconds_between(earlier: &Time, later: Timestamp) -> i64 {
    later.as_second() - earlier.0.as_second()
}

/// The row for one Initializer at time `now`.
pub fn row(initializer: &Initializer, now: Timestamp) -> StatusRow {
    let status = initializer.status.clone().unwrap_or_default();
    let phase = status
        .phase
        .map(|p| format!("{p:?}"))
        .unwrap_or_else(|| "Unknown".to_string());
    let registered = status
        .registered
        .unwrap_or_else(|| condition(initializer, REGISTERED).is_some_and(|c| c.status == "True"));
    let responding = condition(initializer, RESPONDING);
    let degraded = condition(initializer, DEGRADED).filter(|c| c.status == "True");
    let (health, health_message) = match (phase.as_str(), responding, degraded) {
        ("Degraded", _, Some(d)) => ("Degraded".to_string(), Some(d.message.clone())),
        (_, Some(r), _) if r.status == "True" => ("Responding".to_string(), None),
        (_, Some(r), _) => (
            if r.reason.is_empty() {
                "NotResponding".to_string()
            } else {
                r.reason.clone()
            },
            Some(r.message.clone()).filter(|m| !m.is_empty()),
        ),
        _ => ("Unknown".to_string(), None),
    };
    StatusRow {
        name: initializer.name_any(),
        phase,
        engine: format!("{:?}", status.engine.unwrap_or_default()),
        registered,
        configuration: status.configuration_name.clone().filter(|_| registered),
        health,
        health_message,
        ready_replicas: status.ready_replicas.unwrap_or(0),
        replicas: initializer.spec.replicas,
        last_probe_time: status.last_probe_time.as_ref().map(|t| t.0.to_string()),
        last_probe_age_seconds: status
            .last_probe_time
            .as_ref()
            .map(|t| seconds_between(t, now)),
        last_probe_latency_millis: status.last_probe_latency_millis,
        certificate_not_after: status
            .certificate_not_after
            .as_ref()
            .map(|t| t.0.to_string()),
        certificate_expires_in_seconds: status
            .certificate_not_after
            .as_ref()
            .map(|t| -seconds_between(t, now)),
        suspended: initializer.is_suspended(),
    }
}

/// A duration in kubectl's short style: `45s`, `12m`, `5h`, `364d`.
pub fn short_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// The table: NAME, PHASE, ENGINE, REGISTERED, HEALTH, READY, LAST-PROBE, LATENCY, CERT-EXPIRES.
pub fn table(rows: &[StatusRow]) -> String {
    let header = [
        "NAME",
        "PHASE",
        "ENGINE",
        "REGISTERED",
        "HEALTH",
        "READY",
        "LAST-PROBE",
        "LATENCY",
        "CERT-EXPIRES",
    ]
    .map(String::from)
    .to_vec();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let certificate = match r.certificate_expires_in_seconds {
                None => "<none>".to_string(),
                Some(s) if s <= 0 => "EXPIRED".to_string(),
                Some(s) if s < CERTIFICATE_WARNING_DAYS * 86_400 => {
                    format!("in {} (soon)", short_duration(s))
                }
                Some(s) => format!("in {}", short_duration(s)),
            };
            vec![
                r.name.clone(),
                if r.suspended && r.phase != "Suspended" {
                    format!("{} (suspending)", r.phase)
                } else {
                    r.phase.clone()
                },
                r.engine.clone(),
                r.registered.to_string(),
                r.health.clone(),
                format!("{}/{}", r.ready_replicas, r.replicas),
                r.last_probe_age_seconds
                    .map(|s| format!("{} ago", short_duration(s)))
                    .unwrap_or_else(|| "<none>".to_string()),
                r.last_probe_latency_millis
                    .map(|ms| format!("{ms}ms"))
                    .unwrap_or_else(|| "<none>".to_string()),
                certificate,
            ]
        })
        .collect();
    crate::output::columns(&header, &cells)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn registered() -> Initializer {
        serde_json::from_value(json!({
            "apiVersion": "initializer.dev/v1alpha1",
            "kind": "Initializer",
            "metadata": {"name": "sidecar"},
            "spec": {"image": "x:1", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
            "status": {
                "phase": "Registered",
                "registered": true,
                "configurationName": "initializer-sidecar",
                "readyReplicas": 2,
                "lastProbeTime": "2026-11-23T10:00:00Z",
                "lastProbeLatencyMillis": 7,
                "certificateNotAfter": "2027-11-23T10:00:00Z",
                "conditions": [
                    {"type": "Responding", "status": "True", "reason": "ProbeSucceeded", "message": "ok", "lastTransitionTime": "2026-11-23T09:00:00Z"},
                    {"type": "Registered", "status": "True", "reason": "Registered", "message": "", "lastTransitionTime": "2026-11-23T09:00:00Z"},
                ],
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_registered_initializer_reports_its_probe_and_certificate() {
        let r = row(&registered(), at("2026-11-23T10:00:30Z"));
        assert_eq!(r.phase, "Registered");
        assert!(r.registered);
        assert_eq!(r.configuration.as_deref(), Some("initializer-sidecar"));
        assert_eq!(r.health, "Responding");
        assert_eq!((r.ready_replicas, r.replicas), (2, 2));
        assert_eq!(r.last_probe_age_seconds, Some(30));
        assert_eq!(r.last_probe_latency_millis, Some(7));
        assert_eq!(r.certificate_expires_in_seconds, Some(365 * 86_400 - 30));
        let table = table(&[r]);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("NAME "), "{table}");
        assert!(lines[0].contains("CERT-EXPIRES"));
        for cell in [
            "sidecar",
            "Registered",
            "true",
            "Responding",
            "2/2",
            "30s ago",
            "7ms",
            "in 364d",
        ] {
            assert!(lines[1].contains(cell), "{cell} missing: {table}");
        }
    }

    #[test]
    fn an_unresponsive_initializer_shows_the_failed_probes_reason() {
        let mut init = registered();
        let status = init.status.as_mut().unwrap();
        status.phase = Some(initializer_crds::Phase::Unresponsive);
        status.registered = Some(false);
        status.conditions[0].status = "False".into();
        status.conditions[0].reason = "ProbeTimedOut".into();
        status.conditions[0].message = "no answer within 500 ms".into();
        let r = row(&init, at("2026-11-23T10:00:30Z"));
        assert!(!r.registered);
        assert_eq!(r.configuration, None);
        assert_eq!(r.health, "ProbeTimedOut");
        assert_eq!(r.health_message.as_deref(), Some("no answer within 500 ms"));
    }

    #[test]
    fn a_preset_in_the_api_server_shows_its_engine() {
        let mut init = registered();
        let status = init.status.as_mut().unwrap();
        status.phase = Some(initializer_crds::Phase::InApiServer);
        status.engine = Some(initializer_crds::EngineInForce::Policy);
        status.registered = Some(false);
        let r = row(&init, at("2026-11-23T10:00:30Z"));
        assert_eq!(
            (r.phase.as_str(), r.engine.as_str()),
            ("InApiServer", "Policy")
        );
        let table = table(&[r]);
        assert!(
            table.lines().next().is_some_and(|h| h.contains(" ENGINE ")),
            "{table}"
        );
        assert!(table.contains("Policy"), "{table}");
        // Before the operator wrote an engine, the webhook.
        assert_eq!(
            row(&registered(), at("2026-11-23T10:00:30Z")).engine,
            "Webhook"
        );
    }

    #[test]
    fn a_new_initializer_without_status_is_unknown_and_an_expired_certificate_says_so() {
        let mut init = registered();
        init.status = None;
        let r = row(&init, at("2026-11-23T10:00:30Z"));
        assert_eq!(
            (r.phase.as_str(), r.health.as_str(), r.registered),
            ("Unknown", "Unknown", false)
        );
        assert!(table(&[r]).contains("<none>"));
        let expired = row(&registered(), at("2027-12-01T00:00:00Z"));
        assert!(table(&[expired]).contains("EXPIRED"));
        let soon = row(&registered(), at("2027-11-13T10:00:00Z"));
        assert!(table(&[soon]).contains("in 10d (soon)"));
    }

    #[test]
    fn durations_are_shown_as_kubectl_shows_ages() {
        assert_eq!(short_duration(-3), "0s");
        assert_eq!(short_duration(59), "59s");
        assert_eq!(short_duration(600), "10m");
        assert_eq!(short_duration(3 * 3600), "3h");
        assert_eq!(short_duration(400 * 86_400), "400d");
    }

    #[test]
    fn json_uses_camel_case_and_omits_what_is_unknown() {
        let mut init = registered();
        init.status = None;
        let value = serde_json::to_value(row(&init, at("2026-11-23T10:00:30Z"))).unwrap();
        assert_eq!(value["readyReplicas"], 0);
        assert!(value.get("lastProbeTime").is_none());
        assert!(value.get("certificateNotAfter").is_none());
    }
}
