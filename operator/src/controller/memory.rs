//! What the reconcile remembers of each Initializer from one run to the next, so that it does
//! not ask the API server again what it asked a moment ago: what the legacy backend's rules
//! reached (discovery, reused for [`DISCOVERY_TTL`]), whether the API server compiled its
//! fallback (asked once per generation), and where its preset runs. Kept until the Initializer
//! is gone ([`Memory::forget`], [`Memory::retain`]); a new leader starts empty and learns again
//! (where a preset runs, from the stored status).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;

use crate::apply::{self, FallbackCheck};
use crate::build::FallbackPolicy;
use crate::engine::Remembered;
use crate::error::Result;
use crate::pending::Served;

/// How long what an Initializer's rules reach is reused before discovery runs again (a CRD
/// installed meanwhile is seen within it; a spec change at once).
pub const DISCOVERY_TTL: Duration = Duration::from_secs(60);

/// What the reconcile remembers of every Initializer this replica reconciled (cheap to clone:
/// the clones share it).
#[derive(Clone, Debug, Default)]
pub struct Memory {
    kept: Arc<Mutex<HashMap<String, Kept>>>,
}

/// What is remembered of one Initializer.
#[derive(Debug, Default)]
struct Kept {
    /// Legacy backend: what its rules reached at a generation, and when discovery ran.
    discovered: Option<(Option<i64>, Instant, Vec<Served>)>,
    /// The generation its fallback was compiled for, and the API server's refusal, if any.
    fallback_checked: Option<(Option<i64>, Option<String>)>,
    /// Where its preset's injection runs, as the reconcile last decided ([`crate::engine`]).
    engine: Option<Remembered>,
}

impl Memory {
    /// Everything kept, behind its lock; a poisoned lock is taken anyway, since every write
    /// under it is one assignment that a panic cannot leave half done.
    fn all(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn kept<T>(&self, initializer: &str, f: impl FnOnce(&mut Kept) -> T) -> T {
        f(self.all().entry(initializer.to_string()).or_default())
    }

    /// What the rules of `initializer` at `generation` reached when discovery last ran for it,
    /// unless that was more than [`DISCOVERY_TTL`] ago or for another generation.
    pub fn discovered(&self, initializer: &str, generation: Option<i64>) -> Option<Vec<Served>> {
        self.kept(initializer, |kept| {
            kept.discovered
                .as_ref()
                .filter(|(g, at, _)| *g == generation && at.elapsed() < DISCOVERY_TTL)
                .map(|(_, _, reached)| reached.clone())
        })
    }

    /// Remembers what the rules of `initializer` at `generation` reach.
    pub fn remember_discovered(
        &self,
        initializer: &str,
        generation: Option<i64>,
        reached: Vec<Served>,
    ) {
        self.kept(initializer, |kept| {
            kept.discovered = Some((generation, Instant::now(), reached));
        });
    }

    /// Asks the API server to compile an Initializer's fallback (a dry-run apply), once per
    /// generation: `Ok(None)` when it was accepted or cannot be checked here (no
    /// ValidatingAdmissionPolicy), `Ok(Some(why))` when it was refused.
    pub async fn check_fallback(
        &self,
        client: &Client,
        initializer: &str,
        generation: Option<i64>,
        fallback: &FallbackPolicy,
    ) -> Result<Option<String>> {
        let cached = self.kept(initializer, |kept| {
            kept.fallback_checked
                .as_ref()
                .filter(|(g, _)| *g == generation)
                .map(|(_, why)| why.clone())
        });
        if let Some(why) = cached {
            return Ok(why);
        }
        let why = match apply::check_fallback(client, fallback).await? {
            FallbackCheck::Refused(why) => Some(why),
            FallbackCheck::Accepted | FallbackCheck::Unsupported => None,
        };
        self.kept(initializer, |kept| {
            kept.fallback_checked = Some((generation, why.clone()));
        });
        Ok(why)
    }

    /// Where the preset of `initializer` runs, as last remembered.
    pub fn engine(&self, initializer: &str) -> Option<Remembered> {
        self.kept(initializer, |kept| kept.engine.clone())
    }

    /// Remembers where the preset of `initializer` runs.
    pub fn remember_engine(&self, initializer: &str, engine: Remembered) {
        self.kept(initializer, |kept| kept.engine = Some(engine));
    }

    /// Forgets a deleted `initializer`, so that one created again under its name starts afresh.
    pub fn forget(&self, initializer: &str) {
        self.all().remove(initializer);
    }

    /// Forgets every Initializer not named in `existing` (deleted while the controller could
    /// not see it).
    pub fn retain(&self, existing: &[String]) {
        self.all().retain(|name, _| existing.contains(name));
    }
}
