//! Startup, readiness and liveness probes as the kubelet runs them: `httpGet` (HTTP, or HTTPS without
//! verifying the certificate), `tcpSocket`; `exec` is not supported and always succeeds (the
//! node cannot run a command inside a process). `grpc` likewise.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::exchange::{Transport, exchange, insecure_tls_config};

/// A probe's timing and thresholds, defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// `initialDelaySeconds` (0).
    pub initial_delay: Duration,
    /// `periodSeconds` (10).
    pub period: Duration,
    /// `timeoutSeconds` (1).
    pub timeout: Duration,
    /// `failureThreshold` (3).
    pub failure_threshold: u32,
    /// `successThreshold` (1).
    pub success_threshold: u32,
}

fn secs(v: Option<i32>, default: u64) -> Duration {
    Duration::from_secs(
        v.and_then(|v| u64::try_from(v).ok())
            .filter(|v| *v > 0)
            .unwrap_or(default),
    )
}

fn count(v: Option<i32>, default: u32) -> u32 {
    v.and_then(|v| u32::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(default)
}

impl Timing {
    /// The timing of `probe` with Kubernetes defaults.
    pub fn of(probe: &Probe) -> Self {
        Self {
            initial_delay: Duration::from_secs(
                probe
                    .initial_delay_seconds
                    .and_then(|v| u64::try_from(v).ok())
                    .unwrap_or(0),
            ),
            period: secs(probe.period_seconds, 10),
            timeout: secs(probe.timeout_seconds, 1),
            failure_threshold: count(probe.failure_threshold, 3),
            success_threshold: count(probe.success_threshold, 1),
        }
    }
}

/// Counts consecutive results and applies the thresholds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tracker {
    successes: u32,
    failures: u32,
}

impl Tracker {
    /// Records one result; returns the verdict when a threshold is crossed.
    pub fn record(&mut self, success: bool, timing: &Timing) -> Option<bool> {
        if success {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            (self.successes >= timing.success_threshold).then_some(true)
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            (self.failures >= timing.failure_threshold).then_some(false)
        }
    }
}

/// The host and port a probe's handler connects to: its own host if it names one, else the
/// pod's IP.
fn target(
    port: &IntOrString,
    host: Option<&str>,
    container: &Container,
    pod_ip: &str,
) -> Result<(String, u16), String> {
    let port = port_of(port, container).ok_or_else(|| format!("invalid port {port:?}"))?;
    let host = host.filter(|h| !h.is_empty()).unwrap_or(pod_ip).to_owned();
    Ok((host, port))
}

/// Resolves a probe port (number or container port name).
fn port_of(port: &IntOrString, container: &Container) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .or_else(|| name.parse().ok()),
    }
}

/// Runs the probe once against the pod at `pod_ip`; `Err` carries the kubelet-style message.
pub async fn run(
    probe: &Probe,
    container: &Container,
    pod_ip: &str,
    timeout: Duration,
) -> Result<(), String> {
    if let Some(h) = &probe.http_get {
        let (host, port) = target(&h.port, h.host.as_deref(), container, pod_ip)?;
        let https = h
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"));
        let path = h
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".into());
        let path = if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        };
        let addr = format!("{host}:{port}");
        let transport = if https {
            let config = insecure_tls_config().map_err(|e| e.to_string())?;
            Transport::Tls(Arc::new(config), host.clone())
        } else {
            Transport::Plain
        };
        let mut request = http::Request::get(path.as_str())
            .header(http::header::HOST, addr.as_str())
            .header(http::header::USER_AGENT, "kube-probe/1.31")
            .header(http::header::ACCEPT, "*/*");
        for header in h.http_headers.iter().flatten() {
            request = request.header(header.name.as_str(), header.value.as_str());
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let scheme = if https { "https" } else { "http" };
        let url = format!("{scheme}://{addr}{path}");
        let attempt = async {
            let response = exchange(&addr, &transport, request)
                .await
                .map_err(|e| format!("Get {url:?}: {e}"))?;
            let status = response.status();
            let _ = response.into_body().collect().await;
            if status.as_u16() >= 200 && status.as_u16() < 400 {
                Ok(())
            } else {
                Err(format!(
                    "HTTP probe failed with statuscode: {}",
                    status.as_u16()
                ))
            }
        };
        return match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )),
        };
    }
    if let Some(t) = &probe.tcp_socket {
        let (host, port) = target(&t.port, t.host.as_deref(), container, pod_ip)?;
        let addr = format!("{host}:{port}");
        return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {addr}: connect: {e}")),
            Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_defaults_follow_kubernetes() {
        let t = Timing::of(&Probe::default());
        assert_eq!(t.period, Duration::from_secs(10));
        assert_eq!(t.timeout, Duration::from_secs(1));
        assert_eq!((t.failure_threshold, t.success_threshold), (3, 1));
        assert_eq!(t.initial_delay, Duration::ZERO);
    }

    #[test]
    fn tracker_needs_consecutive_results_to_cross_thresholds() {
        let t = Timing {
            failure_threshold: 2,
            success_threshold: 2,
            ..Timing::of(&Probe::default())
        };
        let mut tr = Tracker::default();
        assert_eq!(tr.record(false, &t), None);
        assert_eq!(tr.record(true, &t), None);
        assert_eq!(tr.record(false, &t), None);
        assert_eq!(tr.record(false, &t), Some(false));
        assert_eq!(tr.record(true, &t), None);
        assert_eq!(tr.record(true, &t), Some(true));
    }

    #[tokio::test]
    async fn tcp_probe_fails_on_a_closed_port_and_passes_on_an_open_one() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let probe = |port: u16| Probe {
            tcp_socket: Some(k8s_openapi::api::core::v1::TCPSocketAction {
                port: IntOrString::Int(i32::from(port)),
                host: None,
            }),
            ..Default::default()
        };
        let c = Container::default();
        assert!(
            run(&probe(port), &c, "127.0.0.1", Duration::from_secs(1))
                .await
                .is_ok()
        );
        drop(listener);
        assert!(
            run(&probe(port), &c, "127.0.0.1", Duration::from_secs(1))
                .await
                .is_err()
        );
    }
}
