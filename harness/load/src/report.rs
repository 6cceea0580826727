//! The benchmark's comparison table: for each server and measure, the range over the rounds and
//! the ratio of its median to the first server's (the hand-written baseline), and the order in
//! which the servers take turns so that machine noise falls on all of them alike.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Measure {
    /// Closed-loop throughput, req/s.
    Saturation,
    /// Server CPU time (user + system) per review at saturation, µs.
    CpuPerReview,
    /// Median latency at the open-loop rate, ms.
    P50,
    /// 99th percentile at the open-loop rate, ms.
    P99,
    /// 99.9th percentile at the open-loop rate, ms.
    P999,
    /// Resident memory once ready, before any load, MiB.
    RssIdle,
    /// Resident memory after every run, MiB.
    RssLoaded,
    /// Peak resident memory over the whole run, MiB.
    RssPeak,
    /// Threads after every run.
    Threads,
}

impl Measure {
    /// Every row, in table order.
    pub const ALL: [Measure; 9] = [
        Measure::Saturation,
        Measure::CpuPerReview,
        Measure::P50,
        Measure::P99,
        Measure::P999,
        Measure::RssIdle,
        Measure::RssLoaded,
        Measure::RssPeak,
        Measure::Threads,
    ];

    /// The row's label, with the load parameters filled in.
    pub fn label(self, connections: usize, rate: f64) -> String {
        match self {
            Measure::Saturation => format!("saturation, {connections} connections"),
            Measure::CpuPerReview => "server CPU per review at saturation".into(),
            Measure::P50 => format!("p50 at {rate:.0} req/s, open loop"),
            Measure::P99 => format!("p99 at {rate:.0} req/s"),
            Measure::P999 => format!("p99.9 at {rate:.0} req/s"),
            Measure::RssIdle => "RSS idle (ready, one review served)".into(),
            Measure::RssLoaded => "RSS after load".into(),
            Measure::RssPeak => "RSS peak".into(),
            Measure::Threads => "threads after load".into(),
        }
    }

    fn show(self, v: f64) -> String {
        match self {
            Measure::Saturation => format!("{:.1}k", v / 1000.0),
            Measure::CpuPerReview => format!("{v:.0}"),
            Measure::P50 | Measure::P99 | Measure::P999 => format!("{v:.2}"),
            Measure::RssIdle | Measure::RssLoaded | Measure::RssPeak => format!("{v:.1}"),
            Measure::Threads => format!("{v:.0}"),
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Measure::Saturation => " req/s",
            Measure::CpuPerReview => " µs",
            Measure::P50 | Measure::P99 | Measure::P999 => " ms",
            Measure::RssIdle | Measure::RssLoaded | Measure::RssPeak => " MiB",
            Measure::Threads => "",
        }
    }
}

/// The median of `values` (the mean of the middle two for an even count), `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// The order of the servers in round `round`: rotated by one each round, so none always runs
/// first (right after a quiet pause) or last.
pub fn turn_order(servers: usize, round: usize) -> Vec<usize> {
    (0..servers).map(|i| (i + round) % servers.max(1)).collect()
}

/// Every value measured, by server and row.
#[derive(Clone, Debug, Default)]
pub struct Results {
    servers: Vec<String>,
    values: BTreeMap<(usize, Measure), Vec<f64>>,
}

impl Results {
    /// Results for these servers; the first is the yardstick of the ratios.
    pub fn new(servers: Vec<String>) -> Self {
        Self {
            servers,
            values: BTreeMap::new(),
        }
    }

    /// Record one value of `measure` for server `server`.
    pub fn record(&mut self, server: usize, measure: Measure, value: f64) {
        self.values
            .entry((server, measure))
            .or_default()
            .push(value);
    }

    /// The median of a server's values for a row.
    pub fn median(&self, server: usize, measure: Measure) -> Option<f64> {
        median(self.values.get(&(server, measure))?)
    }

    /// A server's median divided by the yardstick's.
    pub fn ratio(&self, server: usize, measure: Measure) -> Option<f64> {
        let base = self.median(0, measure)?;
        (base > 0.0).then(|| self.median(server, measure).map(|v| v / base))?
    }

    fn cell(&self, server: usize, measure: Measure) -> String {
        let Some(values) = self
            .values
            .get(&(server, measure))
            .filter(|v| !v.is_empty())
        else {
            return "–".into();
        };
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = (measure.show(min), measure.show(max));
        let mut cell = if lo == hi { lo } else { format!("{lo}–{hi}") };
        cell.push_str(measure.unit());
        if server > 0
            && let Some(ratio) = self.ratio(server, measure)
        {
            let _ = write!(cell, " ({ratio:.2}×)");
        }
        cell
    }

    /// The Markdown table: one column per server, one row per measure, ranges over the rounds
    /// and the ratio of medians to the first server in parentheses.
    pub fn table(&self, connections: usize, rate: f64) -> String {
        let mut out = String::from("| |");
        for name in &self.servers {
            let _ = write!(out, " {name} |");
        }
        out.push_str("\n|---|");
        out.push_str(&"---|".repeat(self.servers.len()));
        out.push('\n');
        for measure in Measure::ALL {
            let _ = write!(out, "| {} |", measure.label(connections, rate));
            for server in 0..self.servers.len() {
                let _ = write!(out, " {} |", self.cell(server, measure));
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts_and_none_for_nothing() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN]), None);
    }

    #[test]
    fn every_server_leads_one_round_in_turn() {
        assert_eq!(turn_order(3, 0), [0, 1, 2]);
        assert_eq!(turn_order(3, 1), [1, 2, 0]);
        assert_eq!(turn_order(3, 2), [2, 0, 1]);
        assert_eq!(turn_order(3, 3), [0, 1, 2]);
        assert!(turn_order(0, 1).is_empty());
    }

    #[test]
    fn the_table_shows_ranges_and_ratios_of_medians_to_the_first_server() {
        let mut r = Results::new(vec!["baseline".into(), "preset".into()]);
        for v in [16_000.0, 17_000.0, 16_500.0] {
            r.record(0, Measure::Saturation, v);
        }
        for v in [8_000.0, 8_250.0, 9_000.0] {
            r.record(1, Measure::Saturation, v);
        }
        r.record(0, Measure::RssLoaded, 8.0);
        r.record(1, Measure::RssLoaded, 8.0);
        assert_eq!(r.ratio(1, Measure::Saturation), Some(0.5));
        let table = r.table(16, 1000.0);
        assert!(
            table.contains(
                "| saturation, 16 connections | 16.0k–17.0k req/s | 8.0k–9.0k req/s (0.50×) |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| RSS after load | 8.0 MiB | 8.0 MiB (1.00×) |"),
            "{table}"
        );
        assert!(
            table.contains("| p50 at 1000 req/s, open loop | – | – |"),
            "{table}"
        );
    }

    #[test]
    fn no_ratio_without_a_yardstick_value() {
        let mut r = Results::new(vec!["baseline".into(), "preset".into()]);
        r.record(1, Measure::P50, 0.3);
        assert_eq!(r.ratio(1, Measure::P50), None);
        r.record(0, Measure::P50, 0.0);
        assert_eq!(r.ratio(1, Measure::P50), None);
    }
}
