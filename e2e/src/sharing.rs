//! How runs of the suites share the machine: every scenario (and every OLM test) holds the
//! suite's lock while it runs, shared by default, so the suite on kind and the suite on the real
//! control plane run side by side; a scenario that loads the machine on purpose, or whose claim
//! another suite's load would spoil, holds it alone.
//!
//! The lock is `flock(2)` on `<target>/e2e.lock`, so it is released when its holder exits,
//! however it exits. A second file, `<target>/e2e.turnstile`, keeps a scenario waiting to run
//! alone from waiting forever: everyone passes through it, and the one waiting to run alone
//! stands in it until its turn is over, so no new shared holder gets past meanwhile.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// How a scenario shares the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// Beside the scenarios of other runs that share it too.
    Shared,
    /// With no other run's scenario at the same time.
    Alone,
}

/// The lock held for one scenario; dropping it (or exiting) releases it.
#[derive(Debug)]
pub struct Turn {
    _lock: File,
    _turnstile: Option<File>,
}

/// Takes a turn, waiting as long as it takes (saying so when it waits); blocking.
pub fn take(share: Share, who: &str) -> anyhow::Result<Turn> {
    take_in(&crate::paths::target_dir(), share, who)
}

/// [`take`] on a thread of its own, so a tokio runtime goes on meanwhile.
pub async fn take_async(share: Share, who: &str) -> anyhow::Result<Turn> {
    let who = who.to_string();
    tokio::task::spawn_blocking(move || take(share, &who))
        .await
        .context("the task taking the suite's lock ended")?
}

fn take_in(dir: &Path, share: Share, who: &str) -> anyhow::Result<Turn> {
    std::fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let turnstile = open(dir.join("e2e.turnstile"))?;
    wait(&turnstile, File::try_lock, File::lock, who, "the turnstile")?;
    let lock = open(dir.join("e2e.lock"))?;
    match share {
        Share::Shared => {
            wait(
                &lock,
                File::try_lock_shared,
                File::lock_shared,
                who,
                "its shared turn",
            )?;
            drop(turnstile);
            Ok(Turn {
                _lock: lock,
                _turnstile: None,
            })
        }
        Share::Alone => {
            wait(
                &lock,
                File::try_lock,
                File::lock,
                who,
                "the machine to itself",
            )?;
            Ok(Turn {
                _lock: lock,
                _turnstile: Some(turnstile),
            })
        }
    }
}

fn open(path: PathBuf) -> anyhow::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("failed to open the suite's lock file {}", path.display()))
}

type TryLock = fn(&File) -> Result<(), std::fs::TryLockError>;
type Lock = fn(&File) -> std::io::Result<()>;

fn wait(file: &File, try_lock: TryLock, lock: Lock, who: &str, what: &str) -> anyhow::Result<()> {
    match try_lock(file) {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => {
            eprintln!("e2e: {who} waits for {what} (another run of the suites holds it)");
            lock(file).with_context(|| format!("{who} failed to wait for {what}"))
        }
        Err(std::fs::TryLockError::Error(err)) => {
            Err(err).with_context(|| format!("{who} failed to take {what}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// Whether `share` is granted within a short wait while the turns in `held` are held.
    fn granted_beside(dir: &Path, share: Share) -> bool {
        let (sent, received) = mpsc::channel();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            let turn = take_in(&dir, share, "the second");
            let _ = sent.send(turn.is_ok());
            // Held until the test ends (the thread is detached with it).
            std::thread::sleep(Duration::from_secs(5));
            drop(turn);
        });
        received
            .recv_timeout(Duration::from_millis(500))
            .unwrap_or(false)
    }

    #[test]
    fn shared_turns_run_side_by_side() {
        let dir = dir();
        let _first = take_in(dir.path(), Share::Shared, "the first").unwrap();
        assert!(granted_beside(dir.path(), Share::Shared));
    }

    #[test]
    fn a_turn_alone_waits_for_shared_ones_and_they_for_it() {
        let dir = dir();
        let shared = take_in(dir.path(), Share::Shared, "the first").unwrap();
        assert!(!granted_beside(dir.path(), Share::Alone));
        drop(shared);
        let dir = self::dir();
        let _alone = take_in(dir.path(), Share::Alone, "the first").unwrap();
        assert!(!granted_beside(dir.path(), Share::Shared));
    }

    #[test]
    fn a_waiting_turn_alone_lets_no_new_shared_turn_past() {
        let dir = dir();
        let shared = take_in(dir.path(), Share::Shared, "the first").unwrap();
        let (sent, alone_granted) = mpsc::channel();
        let path = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let turn = take_in(&path, Share::Alone, "the one alone").unwrap();
            let _ = sent.send(());
            std::thread::sleep(Duration::from_millis(300));
            drop(turn);
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !granted_beside(dir.path(), Share::Shared),
            "a new shared turn got past the one waiting to run alone"
        );
        drop(shared);
        alone_granted
            .recv_timeout(Duration::from_secs(5))
            .expect("the turn alone is granted once the shared one ends");
    }
}
