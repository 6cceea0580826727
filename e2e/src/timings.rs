//! The timings the safety story promises, recorded per scenario and printed as a table at the
//! end of the run.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Failed creates out of all creates started in a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateCount {
    /// Creates that failed (refused or timed out).
    pub failed: usize,
    /// Creates started in the window.
    pub total: usize,
}

/// One scenario's figures; absent ones are shown as `-`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    /// The scenario's name.
    pub scenario: String,
    /// `ok`, `FAILED` or `ignored`.
    pub outcome: String,
    /// From applying the Initializer to its configuration being registered.
    pub to_registered: Option<Duration>,
    /// From the failure (freeze, kill, suspend, delete) to the configuration being removed.
    pub failure_to_deregistered: Option<Duration>,
    /// From the failure to the first matching create that succeeded.
    pub failure_to_create_ok: Option<Duration>,
    /// From the recovery (thaw, restart, resume) to the configuration being registered again.
    pub recovery_to_registered: Option<Duration>,
    /// Creates that failed between the failure and the deregistration.
    pub failed_creates_failure: Option<CreateCount>,
    /// Creates that failed between the recovery and the registration.
    pub failed_creates_recovery: Option<CreateCount>,
    /// From applying a preset Initializer to its policy proven and in force in the API server
    /// (`status.engine: Policy`).
    pub to_policy: Option<Duration>,
    /// From the initializer's Deployment being available to its configuration being registered.
    pub available_to_registered: Option<Duration>,
    /// From the failure to creates no longer failing: the configuration degraded
    /// (`failurePolicy: Ignore`) or removed, whichever came first.
    pub creates_stop_failing: Option<Duration>,
    /// From the failure to the configuration being degraded.
    pub degraded: Option<Duration>,
    /// From the failure to the fallback's binding being created (the API server enforces it
    /// within about a second more).
    pub fallback_in_force: Option<Duration>,
    /// Missed initializations: as reported by the operator, and as counted by the harness.
    pub missed: Option<Missed>,
    /// Legacy backend: from the failure to the last object stuck on the dead initializer's
    /// pending name being released (its create answered).
    pub failure_to_released: Option<Duration>,
    /// Legacy backend: objects released from the dead initializer's pending name.
    pub released: Option<Released>,
}

/// Objects released from a dead initializer's pending name (the legacy backend).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// The count in the Initializer's status (`details.releasedObjects`).
    pub reported: i64,
    /// The objects the harness saw stuck on the name (created while the initializer was
    /// down and answered uninjected).
    pub stuck: usize,
}

/// Missed initializations of one window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Missed {
    /// The count in the Initializer's status.
    pub reported: i64,
    /// The creates the harness saw pass without the initializer.
    pub actual: usize,
}

/// A scenario's row, shared between the scenario (which fills it) and the runner.
#[derive(Clone, Debug, Default)]
pub struct RowHandle(Arc<Mutex<Row>>);

impl RowHandle {
    /// A row for `scenario`.
    pub fn new(scenario: &str) -> Self {
        Self(Arc::new(Mutex::new(Row {
            scenario: scenario.to_string(),
            ..Row::default()
        })))
    }

    /// Changes the row.
    pub fn update(&self, change: impl FnOnce(&mut Row)) {
        if let Ok(mut row) = self.0.lock() {
            change(&mut row);
        }
    }

    /// A copy of the row.
    pub fn snapshot(&self) -> Row {
        self.0.lock().map(|row| row.clone()).unwrap_or_default()
    }
}

const HEADERS: [&str; 16] = [
    "scenario",
    "outcome",
    "to registered",
    "to policy",
    "available→registered",
    "creates stop failing",
    "degraded",
    "fallback in force",
    "failure→deregistered",
    "failure→create ok",
    "recovery→registered",
    "failed creates (failure)",
    "failed creates (recovery)",
    "missed",
    "failure→released",
    "released",
];

/// The table as text, one line per scenario, columns aligned.
pub fn render(rows: &[Row]) -> String {
    let cells: Vec<[String; 16]> = rows
        .iter()
        .map(|row| {
            [
                row.scenario.clone(),
                row.outcome.clone(),
                duration(row.to_registered),
                duration(row.to_policy),
                duration(row.available_to_registered),
                duration(row.creates_stop_failing),
                duration(row.degraded),
                duration(row.fallback_in_force),
                duration(row.failure_to_deregistered),
                duration(row.failure_to_create_ok),
                duration(row.recovery_to_registered),
                count(row.failed_creates_failure),
                count(row.failed_creates_recovery),
                row.missed.map_or_else(
                    || "-".to_string(),
                    |m| format!("{}/{}", m.reported, m.actual),
                ),
                duration(row.failure_to_released),
                row.released.map_or_else(
                    || "-".to_string(),
                    |r| format!("{}/{}", r.reported, r.stuck),
                ),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell}{}", " ".repeat(width - cell.chars().count())))
            .collect();
        let _ = writeln!(out, "| {} |", padded.join(" | "));
    };
    line(&mut out, &HEADERS.map(String::from));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(&mut out, &rule);
    for cells in &cells {
        line(&mut out, cells);
    }
    out
}

fn duration(value: Option<Duration>) -> String {
    value.map_or_else(|| "-".to_string(), |d| format!("{:.2}s", d.as_secs_f64()))
}

fn count(value: Option<CreateCount>) -> String {
    value.map_or_else(|| "-".to_string(), |c| format!("{}/{}", c.failed, c.total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_each_figure_and_a_dash_for_what_was_not_measured() {
        let rows = vec![Row {
            scenario: "hung_initializer".into(),
            outcome: "ok".into(),
            to_registered: Some(Duration::from_millis(4_210)),
            failure_to_deregistered: Some(Duration::from_millis(2_346)),
            failed_creates_failure: Some(CreateCount {
                failed: 3,
                total: 12,
            }),
            ..Row::default()
        }];
        let table = render(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("| scenario"));
        assert!(
            lines[2].contains("4.21s") && lines[2].contains("2.35s") && lines[2].contains("3/12")
        );
        let with_missed = render(&[Row {
            missed: Some(Missed {
                reported: 4,
                actual: 4,
            }),
            degraded: Some(Duration::from_millis(870)),
            ..Row::default()
        }]);
        assert!(with_missed.contains("| 4/4 ") && with_missed.contains("0.87s"));
        let with_released = render(&[Row {
            failure_to_released: Some(Duration::from_millis(2_040)),
            released: Some(Released {
                reported: 5,
                stuck: 5,
            }),
            ..Row::default()
        }]);
        assert!(
            with_released.contains("| 2.04s ") && with_released.contains("| 5/5 "),
            "{with_released}"
        );
        assert!(with_released.lines().next().unwrap().contains("released"));
        assert!(
            with_missed
                .lines()
                .next()
                .unwrap()
                .contains("creates stop failing")
        );
        assert!(lines[2].contains("| -"));
    }

    #[test]
    fn table_columns_line_up() {
        let rows = vec![
            Row {
                scenario: "a".into(),
                outcome: "ok".into(),
                ..Row::default()
            },
            Row {
                scenario: "a_much_longer_name".into(),
                outcome: "FAILED".into(),
                ..Row::default()
            },
        ];
        let table = render(&rows);
        let widths: Vec<usize> = table.lines().map(|l| l.chars().count()).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
    }
}
