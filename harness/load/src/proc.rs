//! What a server process holds and has spent, read from `/proc/<pid>/status` and
//! `/proc/<pid>/stat`: resident memory (now and peak), threads, CPU time.

use std::io;
use std::time::Duration;

/// Clock ticks per second of `utime`/`stime` in `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux).
pub const CLOCK_TICKS_PER_SECOND: u64 = 100;

/// One reading of a process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Resident set size, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set size, KiB (`VmHWM`).
    pub peak_rss_kib: u64,
    /// Threads of the process (`Threads:` in `/proc/PID/status`).
    pub threads: u64,
    /// User plus system CPU time, clock ticks.
    pub cpu_ticks: u64,
}

impl Sample {
    /// CPU time spent between `earlier` and `self`.
    pub fn cpu_since(&self, earlier: &Sample) -> Duration {
        let ticks = self.cpu_ticks.saturating_sub(earlier.cpu_ticks);
        Duration::from_millis(ticks * 1000 / CLOCK_TICKS_PER_SECOND)
    }
}

/// The value of a `Name:   1234 kB` (or plain number) line of `/proc/<pid>/status`.
pub fn status_field(status: &str, name: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// `utime + stime` from `/proc/<pid>/stat` (fields 14 and 15; the command name in parentheses
/// may hold spaces, so fields are counted after its closing parenthesis).
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Parse both files into a [`Sample`].
pub fn parse(status: &str, stat: &str) -> Option<Sample> {
    Some(Sample {
        rss_kib: status_field(status, "VmRSS")?,
        peak_rss_kib: status_field(status, "VmHWM")?,
        threads: status_field(status, "Threads")?,
        cpu_ticks: stat_cpu_ticks(stat)?,
    })
}

/// Read process `pid` now.
pub fn sample(pid: u32) -> io::Result<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse(&status, &stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("failed to parse /proc/{pid}/status or stat"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str =
        "Name:\tpreset-initiali\nVmHWM:\t   15560 kB\nVmRSS:\t   15200 kB\nThreads:\t5\n";
    const STAT: &str =
        "4242 (preset (init)) S 1 4242 4242 0 -1 4194560 2406 0 0 0 731 112 0 0 20 0 5 0 1";

    #[test]
    fn status_and_stat_give_memory_threads_and_cpu() {
        let sample = parse(STATUS, STAT).unwrap();
        assert_eq!(
            sample,
            Sample {
                rss_kib: 15200,
                peak_rss_kib: 15560,
                threads: 5,
                cpu_ticks: 843,
            }
        );
        let later = Sample {
            cpu_ticks: 943,
            ..sample
        };
        assert_eq!(later.cpu_since(&sample), Duration::from_secs(1));
        assert_eq!(sample.cpu_since(&later), Duration::ZERO);
    }

    #[test]
    fn a_missing_field_is_none_not_zero() {
        assert_eq!(status_field(STATUS, "VmSwap"), None);
        assert_eq!(status_field("VmRSSx:\t1 kB\n", "VmRSS"), None);
        assert_eq!(parse("VmRSS:\t1 kB\n", STAT), None);
        assert_eq!(stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let me = sample(std::process::id()).unwrap();
        assert!(me.rss_kib > 0 && me.threads >= 1);
    }
}
