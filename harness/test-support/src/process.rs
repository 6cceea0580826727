//! Processes a test starts behind util-linux's `setpriv --pdeathsig`, as the control plane's
//! components and the node's containers are: when the parent-death signal is in place, and how
//! the process ended.
//!
//! Failures panic: the test cannot go on, and the message says which process and why.
#![allow(clippy::panic, clippy::expect_used)]

use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions, kill_process, waitpid};

/// Waits until process `pid`, started as `setpriv ... -- PROGRAM`, runs `program` (its file
/// name): `setpriv` sets the parent-death signal just before it runs the program, and a parent
/// that ends sooner is not the one the signal waits on. Panics after ten seconds.
///
/// Waiting for "no longer `setpriv`" would race: `exec` closes the close-on-exec descriptors,
/// which lets the spawn return, before it renames the process, so the starter can still read
/// the name of its own thread there.
pub fn wait_for_program(pid: u32, program: &str) {
    // The kernel keeps the first 15 bytes of a process's name.
    let expected = &program.as_bytes()[..program.len().min(15)];
    let comm = format!("/proc/{pid}/comm");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let name = std::fs::read(&comm)
            .unwrap_or_else(|e| panic!("process {pid} is gone before running {program}: {e}"));
        if name.trim_ascii_end() == expected {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "process {pid} was still {:?}, not {program}, after 10 s",
                String::from_utf8_lossy(&name).trim_end()
            );
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
