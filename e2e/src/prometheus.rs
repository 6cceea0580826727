//! A real Prometheus for the suite: Debian's `prometheus` binary scraping the operator's pods
//! and evaluating the shipped alert rules, queried with Debian's `promtool`.
//!
//! Both run where the pods are reachable ([`Target::command_inside`]): on this host for the
//! sandbox, inside the network namespace of the real control plane. Prometheus listens on
//! loopback there, and every query is a `promtool query instant` run in the same place, so no
//! address outside loopback or the namespace is ever used. [`config`] and [`parse_samples`]
//! are pure; the rest is the process shell.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::paths;
use crate::target::Target;
use crate::wait::Check;

/// Debian's Prometheus server binary.
pub const PROMETHEUS: &str = "prometheus";
/// Debian's `promtool`.
pub const PROMTOOL: &str = "promtool";
/// The scrape job's name.
pub const JOB: &str = "initializer-operator";

/// One sample of an instant query's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The series' labels (with `__name__`).
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// The Prometheus configuration: scrape `targets` (`host:port`) every `interval`, evaluate
/// `rule_file` every `interval`.
pub fn config(targets: &[String], rule_file: &Path, interval: Duration) -> String {
    let interval = format!("{}ms", interval.as_millis());
    let doc = serde_json::json!({
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "rule_files": [rule_file.display().to_string()],
        "scrape_configs": [{
            "job_name": JOB,
            "metrics_path": "/metrics",
            "static_configs": [{ "targets": targets }],
        }],
    });
    // JSON is YAML.
    doc.to_string()
}

/// The samples of `promtool query instant -o json` output.
pub fn parse_samples(json: &str) -> anyhow::Result<Vec<Sample>> {
    #[derive(serde::Deserialize)]
    struct Raw {
        metric: BTreeMap<String, String>,
        value: (f64, String),
    }
    let raw: Vec<Raw> = serde_json::from_str(json.trim())
        .with_context(|| format!("failed to parse promtool's answer: {json}"))?;
    raw.into_iter()
        .map(|r| {
            let value = r
                .value
                .1
                .parse()
                .with_context(|| format!("failed to parse the sample value {:?}", r.value.1))?;
            Ok(Sample {
                labels: r.metric,
                value,
            })
        })
        .collect()
}

/// `name` looked up on `PATH`.
pub fn find_program(name: &str) -> anyhow::Result<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .with_context(|| {
            format!("failed to find {name} on PATH: install Debian's prometheus package (apt-get install -y prometheus)")
        })
}

/// A running Prometheus, stopped when dropped.
pub struct Prometheus {
    target: Arc<dyn Target>,
    child: tokio::process::Child,
    url: String,
    promtool: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` every `interval` and evaluating `rule_file`
    /// (copied into its own directory); returns once it answers queries.
    pub async fn start(
        target: Arc<dyn Target>,
        targets: &[String],
        rule_file: &Path,
        interval: Duration,
    ) -> anyhow::Result<Self> {
        let prometheus = find_program(PROMETHEUS)?;
        let promtool = find_program(PROMTOOL)?;
        let dir = paths::state_dir("prometheus", "prometheus.log, data/")?;
        let rules = dir.path().join("rules.yaml");
        std::fs::copy(rule_file, &rules)
            .with_context(|| format!("failed to copy {}", rule_file.display()))?;
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config(targets, &rules, interval))
            .context("failed to write the Prometheus configuration")?;
        // A free port on this host's loopback; inside the real control plane's namespace
        // nothing else listens on loopback at all.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("failed to find a free port")?
            .port();
        let log = dir.path().join("prometheus.log");
        let log_file = std::fs::File::create(&log).context("failed to create the log")?;
        let mut command = target.command_inside(&prometheus).with_context(|| {
            format!(
                "failed to run Prometheus where the pods of {} are reachable: this target has no such place",
                target.name()
            )
        })?;
        command
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .stdout(log_file.try_clone().context("failed to open the log")?)
            .stderr(log_file);
        let child = tokio::process::Command::from(command)
            .kill_on_drop(true)
            .spawn()
            .context("failed to start Prometheus")?;
        let mut me = Self {
            target,
            child,
            url: format!("http://127.0.0.1:{port}"),
            promtool,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = me
                .child
                .try_wait()
                .context("failed to wait for Prometheus")?
            {
                bail!(
                    "Prometheus exited with {status} at start:\n{}",
                    me.log_tail()
                );
            }
            if me.query("vector(1)").await.is_ok() {
                return Ok(me);
            }
            if Instant::now() > deadline {
                bail!("Prometheus did not answer within 30s:\n{}", me.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The last lines of Prometheus' log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// An instant query, answered by Prometheus through `promtool query instant`.
    pub async fn query(&self, expr: &str) -> anyhow::Result<Vec<Sample>> {
        let mut command = self
            .target
            .command_inside(&self.promtool)
            .context("failed to run promtool where Prometheus listens")?;
        command
            .args(["query", "instant", "-o", "json", &self.url, expr])
            .stdin(std::process::Stdio::null());
        let output = tokio::process::Command::from(command)
            .kill_on_drop(true)
            .output()
            .await
            .context("failed to run promtool")?;
        if !output.status.success() {
            bail!(
                "promtool query {expr:?} failed with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        parse_samples(&String::from_utf8_lossy(&output.stdout))
    }

    /// Queries `expr` every `every` until it returns at least one sample, or fails after
    /// `timeout` with what it last saw.
    pub async fn wait_for(
        &self,
        expr: &str,
        every: Duration,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Sample>> {
        crate::wait::until_every(format!("a sample of {expr:?}"), every, timeout, || async {
            Ok(match self.query(expr).await {
                Ok(samples) if !samples.is_empty() => Check::Done(samples),
                last => Check::Pending(format!("{last:?}")),
            })
        })
        .await
        .map_err(|err| anyhow::anyhow!("{err:#}; Prometheus' log:\n{}", self.log_tail()))
    }

    /// Stops Prometheus.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_scrapes_every_target_and_loads_the_rules() {
        let text = config(
            &["10.244.0.5:8080".to_string(), "10.244.0.6:8080".to_string()],
            Path::new("/tmp/x/rules.yaml"),
            Duration::from_secs(1),
        );
        let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(doc["global"]["scrape_interval"], "1000ms");
        assert_eq!(doc["global"]["evaluation_interval"], "1000ms");
        assert_eq!(doc["rule_files"][0], "/tmp/x/rules.yaml");
        let job = &doc["scrape_configs"][0];
        assert_eq!(job["job_name"], JOB);
        assert_eq!(job["static_configs"][0]["targets"][1], "10.244.0.6:8080");
    }

    #[test]
    fn promtool_json_answers_become_samples() {
        let samples = parse_samples(
            r#"[{"metric":{"__name__":"up","instance":"127.0.0.1:9090","job":"self"},"value":[1795427023.365,"1"]}]"#,
        )
        .unwrap();
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].labels["job"], "self");
        assert_eq!(samples[0].value, 1.0);
        assert!(parse_samples("[]\n").unwrap().is_empty());
        assert!(parse_samples("error: bad").is_err());
    }
}
