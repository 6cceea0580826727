//! Processes a test starts behind util-linux's `setpriv --pdeathsig`, as the control plane's
//! components and the node's containers are: when the parent-death signal is in place, and how
//! the process ended.
//!
//! Failures panic: the test cannot go on, and the message says which process and why.
#![allow(clippy::panic, clippy::expect_used)]

use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions, kill_process, waitpid};

/// Waits until process `pid`, started as `setpriv ... -- PROGRAM`, runs its program: `setpriv`
/// sets the parent-death signal just before, and a parent that ends sooner is not the one the
/// signal waits on.
pub fn wait_past_setpriv(pid: u32) {
    let comm = format!("/proc/{pid}/comm");
    loop {
        let name = std::fs::read_to_string(&comm)
            .unwrap_or_else(|e| panic!("process {pid} is gone before running its program: {e}"));
        if name.trim() != "setpriv" {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reaps this process's child `pid` once it ends and returns the signal that ended it (`None`:
/// it exited). Kills it and panics if it is still running after `within`.
pub fn reap_within(pid: u32, within: Duration) -> Option<i32> {
    let pid = Pid::from_raw(pid.cast_signed()).expect("a process id is positive");
    let deadline = Instant::now() + within;
    loop {
        match waitpid(Some(pid), WaitOptions::NOHANG) {
            Ok(Some((_, status))) => return status.terminating_signal(),
            Ok(None) => {}
            Err(e) => panic!("failed to wait for process {pid:?}: {e}"),
        }
        if Instant::now() > deadline {
            let _ = kill_process(pid, Signal::KILL);
            panic!("process {pid:?} was still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
