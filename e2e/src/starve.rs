//! Starving a pod of CPU, as a saturated machine does: its processes are moved into a cgroup
//! of their own whose CPU quota lets them run `quota` in every `period` (cgroup v1's `cpu`
//! controller, or cgroup v2's `cpu.max`), and moved back when the [`Starved`] guard is dropped,
//! whether the scenario passed, failed or was cancelled.
//!
//! Only for pods whose containers are process groups of this machine (the sandbox and the real
//! control plane: `process://<pgid>` container ids); needs root.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail, ensure};

use crate::procfs;

/// Where cgroup v1 mounts its `cpu` controller.
const V1_CPU: &str = "/sys/fs/cgroup/cpu";
/// Where cgroup v2 mounts its single hierarchy.
const V2_ROOT: &str = "/sys/fs/cgroup";

/// The cgroup layout of this machine, as far as CPU quotas go.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Layout {
    /// cgroup v1: `cpu.cfs_period_us` and `cpu.cfs_quota_us` under [`V1_CPU`].
    V1,
    /// cgroup v2: `cpu.max` under [`V2_ROOT`], whose root enables the `cpu` controller.
    V2,
}

fn layout() -> Option<Layout> {
    if Path::new(V1_CPU).join("cpu.cfs_quota_us").exists() {
        return Some(Layout::V1);
    }
    let controllers = std::fs::read_to_string(Path::new(V2_ROOT).join("cgroup.subtree_control"));
    controllers
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
        .then_some(Layout::V2)
}

/// Why pods cannot be starved here, if they cannot (for the suite's list of ignored scenarios).
pub fn unavailable() -> Option<&'static str> {
    if !rustix::process::geteuid().is_root() {
        return Some(
            "needs root, to put the operator's processes under a CPU quota (run the suite as root)",
        );
    }
    if layout().is_none() {
        return Some(
            "needs cgroup v1's cpu controller or cgroup v2 with cpu enabled at its root, for a CPU quota",
        );
    }
    None
}

/// The file lines that give a cgroup of `layout` the quota `quota` per `period` (pure).
fn quota_files(layout: &Layout, quota: Duration, period: Duration) -> Vec<(&'static str, String)> {
    let (quota, period) = (quota.as_micros(), period.as_micros());
    match layout {
        Layout::V1 => vec![
            ("cpu.cfs_period_us", period.to_string()),
            ("cpu.cfs_quota_us", quota.to_string()),
        ],
        Layout::V2 => vec![("cpu.max", format!("{quota} {period}"))],
    }
}

/// The processes of the process groups `groups`: every pid whose `/proc/<pid>/stat` names one
/// of them as its group.
fn processes_of(groups: &[i32]) -> anyhow::Result<Vec<u32>> {
    Ok(procfs::processes()?
        .filter(|(_, dir)| {
            std::fs::read_to_string(dir.join("stat"))
                .ok()
                .and_then(|stat| process_group(&stat))
                .is_some_and(|group| groups.contains(&group))
        })
        .map(|(pid, _)| pid)
        .collect())
}

/// The process group in `/proc/<pid>/stat` (field 5 of proc(5)).
fn process_group(stat: &str) -> Option<i32> {
    procfs::stat_field(stat, 5)?.parse().ok()
}

/// Processes held under a CPU quota until dropped.
#[derive(Debug)]
pub struct Starved {
    cgroup: PathBuf,
    home: PathBuf,
    pids: Vec<u32>,
}

impl Starved {
    /// Moves every process of the process groups `groups` into a new cgroup `name` that may
    /// run `quota` every `period`.
    pub fn start(
        name: &str,
        groups: &[i32],
        quota: Duration,
        period: Duration,
    ) -> anyhow::Result<Self> {
        if let Some(why) = unavailable() {
            bail!("cannot starve processes here: {why}");
        }
        let layout = layout().context("no cgroup CPU controller")?;
        let home = PathBuf::from(match layout {
            Layout::V1 => V1_CPU,
            Layout::V2 => V2_ROOT,
        });
        let pids = processes_of(groups)?;
        ensure!(!pids.is_empty(), "no process in the groups {groups:?}");
        let cgroup = home.join(name);
        std::fs::create_dir(&cgroup)
            .with_context(|| format!("failed to create the cgroup {}", cgroup.display()))?;
        // From here on, dropping the guard moves whatever was moved back and removes the cgroup.
        let starved = Self { cgroup, home, pids };
        for (file, value) in quota_files(&layout, quota, period) {
            let path = starved.cgroup.join(file);
            std::fs::write(&path, &value)
                .with_context(|| format!("failed to write {value} to {}", path.display()))?;
        }
        for pid in &starved.pids {
            std::fs::write(starved.cgroup.join("cgroup.procs"), pid.to_string())
                .with_context(|| format!("failed to move process {pid} under the quota"))?;
        }
        Ok(starved)
    }

    /// The processes under the quota.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// How often the quota held them back so far (the kernel's `cpu.stat`).
    pub fn throttling(&self) -> anyhow::Result<Throttling> {
        let path = self.cgroup.join("cpu.stat");
        let stat = std::fs::read_to_string(&path)
            .with_context(|| format!("failed to read {}", path.display()))?;
        Throttling::parse(&stat).with_context(|| format!("unexpected {}: {stat}", path.display()))
    }
}

/// The periods a cgroup's processes ran in, and those in which they used up the quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttling {
    pub periods: u64,
    pub throttled: u64,
}

impl Throttling {
    /// From `cpu.stat` (the same two fields in cgroup v1 and v2).
    fn parse(stat: &str) -> Option<Self> {
        let field = |name: &str| {
            stat.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|value| value.trim().parse().ok())
        };
        Some(Self {
            periods: field("nr_periods")?,
            throttled: field("nr_throttled")?,
        })
    }
}

impl Drop for Starved {
    fn drop(&mut self) {
        // Every process still in the cgroup goes back where cgroups start (the node agent puts
        // pods in no cgroup of their own), then the empty cgroup is removed.
        let members = std::fs::read_to_string(self.cgroup.join("cgroup.procs")).unwrap_or_default();
        for pid in members.lines() {
            if let Err(err) = std::fs::write(self.home.join("cgroup.procs"), pid) {
                eprintln!(
                    "failed to move process {pid} back from {}: {err}",
                    self.cgroup.display()
                );
            }
        }
        if let Err(err) = std::fs::remove_dir(&self.cgroup) {
            eprintln!(
                "failed to remove the cgroup {}: {err}",
                self.cgroup.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_written_as_each_cgroup_version_spells_them() {
        let (quota, period) = (Duration::from_millis(5), Duration::from_millis(500));
        assert_eq!(
            quota_files(&Layout::V1, quota, period),
            vec![
                ("cpu.cfs_period_us", "500000".to_string()),
                ("cpu.cfs_quota_us", "5000".to_string())
            ]
        );
        assert_eq!(
            quota_files(&Layout::V2, quota, period),
            vec![("cpu.max", "5000 500000".to_string())]
        );
    }

    #[test]
    fn throttling_is_read_from_either_versions_cpu_stat() {
        let v1 = "nr_periods 16\nnr_throttled 15\nthrottled_time 7451234567\n";
        let v2 = "usage_usec 80000\nuser_usec 50000\nsystem_usec 30000\nnr_periods 16\nnr_throttled 15\nthrottled_usec 7451234\n";
        for stat in [v1, v2] {
            assert_eq!(
                Throttling::parse(stat),
                Some(Throttling {
                    periods: 16,
                    throttled: 15
                })
            );
        }
        assert_eq!(Throttling::parse("nr_periods 3\n"), None);
    }

    #[test]
    fn the_process_group_is_read_past_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (initializer (op) x) S 1 4200 4200 0 -1 4194560";
        assert_eq!(process_group(stat), Some(4200));
        assert_eq!(process_group("garbage"), None);
    }
}
