//! The scale benchmark's arithmetic (`make bench-scale`, `src/bin/scale-bench.rs`): what it
//! reads from the operator's `/metrics` and from `/proc`, and the table it prints. Pure, so the
//! figures are tested on fixed text rather than trusted.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// The sum of every series of the metric `name` in Prometheus' text format (a counter's
/// `_total` or a histogram's `_count`, written out in full).
pub fn metric_sum(text: &str, name: &str) -> f64 {
    series(text, name).map(|(_, value)| value).sum()
}

/// The metric `name`'s values by the value of its label `label` (series without it are left
/// out; series with the same value are added).
pub fn metric_by_label(text: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (labels, value) in series(text, name) {
        if let Some(found) = label_value(labels, label) {
            *out.entry(found.to_string()).or_insert(0.0) += value;
        }
    }
    out
}

/// Each series of `name`: its label text (between the braces, empty when none) and its value.
fn series<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(move |line| {
            let rest = line.strip_prefix(name)?;
            let (labels, value) = if let Some(rest) = rest.strip_prefix('{') {
                let (labels, value) = rest.split_once('}')?;
                (labels, value)
            } else if rest.starts_with(' ') {
                ("", rest)
            } else {
                // Another metric whose name starts with this one.
                return None;
            };
            let value = value.split_whitespace().next()?.parse().ok()?;
            Some((labels, value))
        })
}

fn label_value<'a>(labels: &'a str, label: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key.trim() == label).then(|| value.trim().trim_matches('"'))
    })
}

/// CPU time a process has used, in clock ticks (`utime + stime` of `/proc/<pid>/stat`; the
/// fields are counted after the command name, which may hold spaces and parentheses).
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let utime: u64 = crate::procfs::stat_field(stat, 14)?.parse().ok()?;
    let stime: u64 = crate::procfs::stat_field(stat, 15)?.parse().ok()?;
    Some(utime + stime)
}

/// Resident memory in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(status: &str) -> Option<u64> {
    initializer_controlplane::component::parse_rss_kib(status)
}

/// Whether `/proc/<pid>/environ` (NUL-separated) holds `key=value`.
pub fn environ_has(environ: &[u8], key: &str, value: &str) -> bool {
    let wanted = format!("{key}={value}");
    environ
        .split(|b| *b == 0)
        .any(|entry| entry == wanted.as_bytes())
}

/// A share of one core from ticks used over a window.
pub fn cpu_percent(ticks: u64, ticks_per_second: u64, window: Duration) -> f64 {
    if ticks_per_second == 0 || window.is_zero() {
        return 0.0;
    }
    100.0 * ticks as f64 / ticks_per_second as f64 / window.as_secs_f64()
}

/// One run: N Initializers applied at once on one control plane.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    /// `sandbox` or `real`.
    pub cluster: String,
    /// Initializers applied.
    pub initializers: usize,
    /// From the apply to every one Registered (`None`: not within the timeout).
    pub all_registered: Option<Duration>,
    /// Registered at the end of the steady window.
    pub registered_at_end: usize,
    /// Times an Initializer seen Registered was later seen not Registered (churn).
    pub left_registered: usize,
    /// The leader's resident memory at the end of the steady window, in MiB.
    pub leader_rss_mib: f64,
    /// The leader's CPU over the steady window, in % of one core.
    pub leader_cpu_percent: f64,
    /// The leader's API requests per second over the steady window, by verb.
    pub requests_per_second: BTreeMap<String, f64>,
    /// The leader's probe rounds per second over the steady window.
    pub probes_per_second: f64,
    /// Container restarts of every pod, at the end.
    pub restarts: u32,
}

/// The median of each figure over several runs of the same control plane and count (each
/// figure on its own: the median RSS and the median CPU may come from different runs). A run
/// that did not get every Initializer Registered counts as the slowest. `None` for no runs.
pub fn median(runs: &[Row]) -> Option<Row> {
    let first = runs.first()?;
    let mut all_registered: Vec<Option<Duration>> = runs.iter().map(|r| r.all_registered).collect();
    // `None` (not within the timeout) sorts after every time.
    all_registered.sort_by_key(|d| (d.is_none(), *d));
    let verbs: std::collections::BTreeSet<&String> = runs
        .iter()
        .flat_map(|r| r.requests_per_second.keys())
        .collect();
    Some(Row {
        cluster: first.cluster.clone(),
        initializers: first.initializers,
        all_registered: all_registered[all_registered.len() / 2],
        registered_at_end: middle(runs.iter().map(|r| r.registered_at_end)),
        left_registered: middle(runs.iter().map(|r| r.left_registered)),
        leader_rss_mib: middle_f64(runs.iter().map(|r| r.leader_rss_mib)),
        leader_cpu_percent: middle_f64(runs.iter().map(|r| r.leader_cpu_percent)),
        requests_per_second: verbs
            .into_iter()
            .map(|verb| {
                let rates = runs
                    .iter()
                    .map(|r| r.requests_per_second.get(verb).copied().unwrap_or(0.0));
                (verb.clone(), middle_f64(rates))
            })
            .collect(),
        probes_per_second: middle_f64(runs.iter().map(|r| r.probes_per_second)),
        restarts: middle(runs.iter().map(|r| r.restarts)),
    })
}

/// The middle value (the upper one of an even count).
fn middle<T: Ord + Copy + Default>(values: impl Iterator<Item = T>) -> T {
    let mut values: Vec<T> = values.collect();
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn middle_f64(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// The benchmark's table, one row per run.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| control plane | Initializers | apply → all Registered | Registered at end | left Registered | leader RSS | leader CPU | API requests/s (by verb) | probe rounds/s | pod restarts |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        let all = row
            .all_registered
            .map_or("not within the timeout".into(), |d| {
                format!("{:.1} s", d.as_secs_f64())
            });
        let total: f64 = row.requests_per_second.values().sum();
        let verbs: Vec<String> = row
            .requests_per_second
            .iter()
            .filter(|(_, rate)| **rate >= 0.05)
            .map(|(verb, rate)| format!("{verb} {rate:.1}"))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {all} | {}/{} | {} | {:.0} MiB | {:.1} % | {total:.1} ({}) | {:.1} | {} |",
            row.cluster,
            row.initializers,
            row.registered_at_end,
            row.initializers,
            row.left_registered,
            row.leader_rss_mib,
            row.leader_cpu_percent,
            if verbs.is_empty() {
                "-".to_string()
            } else {
                verbs.join(", ")
            },
            row.probes_per_second,
            row.restarts,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "\
# HELP initializer_operator_api_requests Requests this replica made to the API server, by verb.
# TYPE initializer_operator_api_requests counter
initializer_operator_api_requests_total{verb=\"get\"} 12
initializer_operator_api_requests_total{verb=\"watch\"} 3
initializer_operator_api_requests_total{verb=\"patch\"} 40
initializer_operator_probe_latency_seconds_count{initializer=\"a\"} 100
initializer_operator_probe_latency_seconds_count{initializer=\"b\"} 50
initializer_operator_probe_latency_seconds_count_other 7
initializer_operator_leader 1
";

    #[test]
    fn metrics_are_summed_and_split_by_label() {
        assert_eq!(
            metric_sum(METRICS, "initializer_operator_probe_latency_seconds_count"),
            150.0
        );
        assert_eq!(metric_sum(METRICS, "initializer_operator_leader"), 1.0);
        let by_verb = metric_by_label(METRICS, "initializer_operator_api_requests_total", "verb");
        assert_eq!(
            by_verb,
            [("get", 12.0), ("patch", 40.0), ("watch", 3.0)]
                .map(|(k, v)| (k.to_string(), v))
                .into()
        );
        assert_eq!(metric_sum(METRICS, "initializer_operator_missing"), 0.0);
    }

    #[test]
    fn proc_files_give_cpu_ticks_memory_and_the_pod() {
        let stat = "4242 (initializer-op (x)) S 1 4242 4242 0 -1 4194560 2000 0 0 0 150 37 0 0 20 0 9 0 100 1000 2000";
        assert_eq!(cpu_ticks(stat), Some(187));
        let status = "Name:\tinitializer-op\nVmPeak:\t  90000 kB\nVmRSS:\t   51234 kB\n";
        assert_eq!(rss_kib(status), Some(51234));
        let environ = b"PATH=/bin\0POD_NAME=initializer-operator-abc\0HOME=/\0";
        assert!(environ_has(environ, "POD_NAME", "initializer-operator-abc"));
        assert!(!environ_has(environ, "POD_NAME", "initializer-operator"));
        assert_eq!(cpu_percent(50, 100, Duration::from_secs(2)), 25.0);
    }

    #[test]
    fn the_median_takes_each_figure_on_its_own_and_a_timeout_as_the_slowest() {
        let run = |secs: Option<u64>, rss: f64, cpu: f64, get: f64, restarts: u32| Row {
            cluster: "real".into(),
            initializers: 100,
            all_registered: secs.map(Duration::from_secs),
            registered_at_end: 100,
            leader_rss_mib: rss,
            leader_cpu_percent: cpu,
            requests_per_second: [("get".to_string(), get)].into(),
            restarts,
            ..Row::default()
        };
        let runs = [
            run(Some(30), 70.0, 9.0, 1.0, 0),
            run(None, 60.0, 12.0, 3.0, 2),
            run(Some(20), 66.0, 8.0, 2.0, 0),
        ];
        let mid = median(&runs).expect("three runs");
        assert_eq!(mid.all_registered, Some(Duration::from_secs(30)));
        assert_eq!(mid.leader_rss_mib, 66.0);
        assert_eq!(mid.leader_cpu_percent, 9.0);
        assert_eq!(mid.requests_per_second["get"], 2.0);
        assert_eq!(mid.restarts, 0);
        assert_eq!((mid.cluster.as_str(), mid.initializers), ("real", 100));
        // Two of three over the timeout: the median did not converge.
        let slow = [runs[1].clone(), runs[1].clone(), runs[0].clone()];
        assert_eq!(median(&slow).expect("runs").all_registered, None);
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn the_table_says_when_not_all_registered() {
        let row = Row {
            cluster: "sandbox".into(),
            initializers: 100,
            registered_at_end: 2,
            requests_per_second: [("get".to_string(), 3.0), ("watch".to_string(), 0.01)].into(),
            ..Row::default()
        };
        let text = table(&[row]);
        assert!(
            text.contains("| sandbox | 100 | not within the timeout | 2/100 |"),
            "{text}"
        );
        assert!(text.contains("3.0 (get 3.0)"), "{text}");
    }
}
