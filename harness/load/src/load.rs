//! A load generator for any HTTPS endpoint that serves AdmissionReview: open loop at a fixed
//! rate (a request delayed because the previous answer was late is timed from its scheduled
//! slot, so a slow server cannot hide its queueing) or closed loop at a fixed concurrency.
//! Used by the `initializer-load` binary and the benchmarks.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::client::{ClientError, Connection, Trust, connector};

/// How to load the endpoint.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// `https://host:port/path`.
    pub url: String,
    /// Whom to trust.
    pub trust: Trust,
    /// The request body (an AdmissionReview).
    pub body: Bytes,
    /// Requests per second over all connections (open loop); `None` means closed loop.
    pub rate: Option<f64>,
    /// Connections (open loop) or concurrent requesters (closed loop).
    pub connections: usize,
    /// How long to measure.
    pub duration: Duration,
    /// How long to send before measuring (connections, caches, allocator warm up).
    pub warmup: Duration,
}

/// What a load run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// Requests answered with HTTP 200 in the measured window.
    pub ok: u64,
    /// Requests that failed (connection errors, non-200) in the measured window.
    pub errors: u64,
    /// Length of the measured window.
    pub elapsed: Duration,
    /// Sorted latencies of the successful requests, in nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// The first error seen, if any.
    pub first_error: Option<String>,
}

impl Report {
    /// Successful requests per second.
    pub fn throughput(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    /// The latency at quantile `q` (0.0–1.0).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.latencies_ns.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((self.latencies_ns.len() as f64 * q).ceil() as usize)
            .clamp(1, self.latencies_ns.len());
        Duration::from_nanos(self.latencies_ns[rank - 1])
    }

    /// One line: req/s, p50, p99, p999, max, errors.
    pub fn summary(&self) -> String {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        format!(
            "{:.0} req/s  p50 {:.0} µs  p90 {:.0} µs  p99 {:.0} µs  p999 {:.0} µs  max {:.0} µs  ({} ok, {} errors)",
            self.throughput(),
            us(self.quantile(0.50)),
            us(self.quantile(0.90)),
            us(self.quantile(0.99)),
            us(self.quantile(0.999)),
            us(self.quantile(1.0)),
            self.ok,
            self.errors
        )
    }
}

struct WorkerResult {
    ok: u64,
    errors: u64,
    latencies: Vec<u64>,
    first_error: Option<String>,
}

/// Run the load and report; needs a multi-threaded tokio runtime to be meaningful.
pub async fn run(spec: &LoadSpec) -> Result<Report, ClientError> {
    let tls = connector(&spec.trust)?;
    let connections = spec.connections.max(1);
    // Open every connection first, so handshakes are not measured.
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        conns.push(Connection::open(&spec.url, &tls).await?);
    }
    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + spec.warmup;
    let end = measure_from + spec.duration;
    let mut tasks = Vec::with_capacity(connections);
    for (i, mut conn) in conns.into_iter().enumerate() {
        let body = spec.body.clone();
        let url = spec.url.clone();
        let tls = tls.clone();
        let interval = spec
            .rate
            .map(|r| Duration::from_secs_f64(connections as f64 / r.max(0.001)));
        tasks.push(tokio::spawn(async move {
            let mut result = WorkerResult {
                ok: 0,
                errors: 0,
                latencies: Vec::new(),
                first_error: None,
            };
            // Stagger the connections evenly over one interval.
            let mut next = start
                + interval.map_or(Duration::ZERO, |iv| {
                    iv.mul_f64(i as f64 / connections as f64)
                });
            loop {
                // When the previous answer came after this request's slot, the wait counts
                // (the server made it late); when the worker idled, timing starts at the send,
                // so the timer's millisecond granularity is not charged to the server.
                let (scheduled, started) = match interval {
                    Some(iv) => {
                        let slot = next;
                        next += iv;
                        if Instant::now() < slot {
                            tokio::time::sleep_until(slot.into()).await;
                            (slot, Instant::now())
                        } else {
                            (slot, slot)
                        }
                    }
                    None => {
                        let now = Instant::now();
                        (now, now)
                    }
                };
                if scheduled >= end {
                    break;
                }
                let reply = conn.post(body.clone()).await;
                let done = Instant::now();
                let measured = scheduled >= measure_from;
                match reply {
                    Ok(r) if r.status == 200 => {
                        if measured {
                            result.ok += 1;
                            result.latencies.push(
                                u64::try_from((done - started).as_nanos()).unwrap_or(u64::MAX),
                            );
                        }
                    }
                    other => {
                        if measured {
                            result.errors += 1;
                        }
                        if result.first_error.is_none() {
                            result.first_error = Some(match other {
                                Ok(r) => format!(
                                    "HTTP {}: {}",
                                    r.status,
                                    String::from_utf8_lossy(&r.body)
                                ),
                                Err(e) => e.to_string(),
                            });
                        }
                        if let Ok(fresh) = Connection::open(&url, &tls).await {
                            conn = fresh;
                        }
                    }
                }
            }
            result
        }));
    }
    let mut report = Report {
        ok: 0,
        errors: 0,
        elapsed: spec.duration,
        latencies_ns: Vec::new(),
        first_error: None,
    };
    for task in tasks {
        let r = task.await.map_err(|e| ClientError::Request {
            url: spec.url.clone(),
            message: format!("failed to join a load worker: {e}"),
        })?;
        report.ok += r.ok;
        report.errors += r.errors;
        report.latencies_ns.extend(r.latencies);
        if report.first_error.is_none() {
            report.first_error = r.first_error;
        }
    }
    report.latencies_ns.sort_unstable();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_the_nearest_rank() {
        let report = Report {
            ok: 1000,
            errors: 0,
            elapsed: Duration::from_secs(1),
            latencies_ns: (1..=1000).collect(),
            first_error: None,
        };
        assert_eq!(report.quantile(0.5), Duration::from_nanos(500));
        assert_eq!(report.quantile(0.99), Duration::from_nanos(990));
        assert_eq!(report.quantile(0.999), Duration::from_nanos(999));
        assert_eq!(report.quantile(1.0), Duration::from_nanos(1000));
        assert!((report.throughput() - 1000.0).abs() < 1e-9);
    }
}
