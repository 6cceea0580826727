//! The network namespace the control plane lives in, made with `ip netns add` and removed when
//! dropped. Every component runs inside it (`ip netns exec`); nothing inside can reach the
//! machine's other addresses, and nothing outside reaches in except through [`connect`], which
//! the port forward uses.
//!
//! `ip netns` needs root (CAP_SYS_ADMIN). Without it, [`NetNs::create`] fails with the command,
//! its error and what to do; the real backend never falls back to something else.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd as _;
use std::path::PathBuf;
use std::process::Command;

use crate::Error;

/// Where `ip netns` keeps its namespaces.
const NETNS_DIR: &str = "/var/run/netns";
/// Every namespace this crate makes starts with this, followed by the owning process id.
const PREFIX: &str = "initializer-cp-";

/// A named network namespace, deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates a namespace named after this process and runs `setup` (`ip` argument lists)
    /// inside it. Namespaces left behind by processes that no longer exist are removed first.
    pub fn create(setup: &[Vec<String>]) -> Result<Self, Error> {
        remove_stale();
        let name = format!(
            "{PREFIX}{}-{:04x}",
            std::process::id(),
            rand::random::<u16>()
        );
        run_ip(&["netns", "add", &name]).map_err(|message| Error::Netns {
            message: format!(
                "{message}; creating a network namespace needs root (CAP_SYS_ADMIN): \
                 run as root, or use the sandbox backend"
            ),
        })?;
        let netns = Self { name };
        for args in setup {
            let mut full = vec!["-n", netns.name.as_str()];
            full.extend(args.iter().map(String::as_str));
            run_ip(&full).map_err(|message| Error::Netns { message })?;
        }
        Ok(netns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The command prefix that runs a program inside the namespace.
    pub fn exec_prefix(&self) -> [String; 4] {
        [
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.name.clone(),
        ]
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(&self.name)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(message) = run_ip(&["netns", "del", &self.name]) {
            tracing::warn!(netns = %self.name, %message, "failed to remove the network namespace");
        }
    }
}

/// Connects to `addr` from inside the namespace. The connect runs on a thread of its own that
/// enters the namespace and then ends, so no thread of the async runtime ever changes
/// namespace; the socket stays in the namespace it was made in.
pub fn connect(netns: &NetNs, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let path = netns.path();
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path)?;
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5))
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("the connecting thread panicked")))
}

fn run_ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip").args(args).output().map_err(|e| {
        format!(
            "failed to run `ip {}`: {e} (install iproute2)",
            args.join(" ")
        )
    })?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "`ip {}` failed with {}: {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}

/// The process id a namespace name of ours carries, if it is one of ours.
fn owner_pid(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

/// Removes namespaces of ours whose process is gone (a run killed before it could clean up).
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(pid) = owner_pid(&name)
            && !PathBuf::from(format!("/proc/{pid}")).exists()
        {
            let _ = run_ip(&["netns", "del", &name]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_namespaces_name_an_owner() {
        assert_eq!(owner_pid("initializer-cp-4242-00af"), Some(4242));
        assert_eq!(owner_pid("someone-else"), None);
        assert_eq!(owner_pid("initializer-cp-x-1"), None);
    }
}
