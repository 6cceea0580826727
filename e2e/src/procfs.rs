//! Reading `/proc`, for what the harness measures or does to pods' processes (the scale
//! benchmark's leader, the starved operator): on the sandbox and the real control plane, pods
//! are processes of this machine.

use std::path::PathBuf;

/// Every process now: its pid and its `/proc/<pid>` directory.
pub fn processes() -> anyhow::Result<impl Iterator<Item = (u32, PathBuf)>> {
    Ok(std::fs::read_dir("/proc")?.filter_map(|entry| {
        let entry = entry.ok()?;
        let pid = entry.file_name().to_str()?.parse().ok()?;
        Some((pid, entry.path()))
    }))
}

/// Field `number` of `/proc/<pid>/stat` as proc(5) numbers them (3 is the state, 5 the process
/// group, 14 utime), counted after the command name, which may hold spaces and parentheses.
pub fn stat_field(stat: &str, number: usize) -> Option<&str> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(number.checked_sub(3)?)
}

/// The peak resident memory of a process so far, in KiB (`VmHWM` of `/proc/<pid>/status`).
pub fn peak_rss_kib(status: &str) -> Option<u64> {
    initializer_controlplane::component::status_kib(status, "VmHWM")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_read_from_the_high_water_mark() {
        let status =
            "Name:\tsecret-guard\nVmPeak:\t  90000 kB\nVmHWM:\t   41234 kB\nVmRSS:\t 30000 kB\n";
        assert_eq!(peak_rss_kib(status), Some(41_234));
        assert_eq!(peak_rss_kib("Name:\tx\n"), None);
        let mine = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        assert!(peak_rss_kib(&mine).is_some_and(|kib| kib > 0));
    }

    #[test]
    fn stat_fields_are_counted_past_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (initializer (op) x) S 1 4200 4200 0 -1 4194560 2000 0 0 0 150 37";
        assert_eq!(stat_field(stat, 3), Some("S"));
        assert_eq!(stat_field(stat, 5), Some("4200"));
        assert_eq!(stat_field(stat, 15), Some("37"));
        assert_eq!(stat_field(stat, 2), None);
        assert_eq!(stat_field("garbage", 3), None);
    }

    #[test]
    fn this_process_is_listed() {
        let me = std::process::id();
        assert!(processes().expect("/proc").any(|(pid, _)| pid == me));
    }
}
