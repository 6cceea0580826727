//! Refuse Secrets holding any value shorter than a minimum length (20 characters by default):
//! short values are probably passwords someone typed. The refusal names every short key.
//!
//! Only `Opaque` Secrets (and Secrets without a type) are checked by default: service-account
//! tokens, TLS pairs and registry credentials have formats of their own with short fields.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube_initializer::{Denial, FailurePolicy, Initialize, Initializer, Operation, Review};

/// Default name of this initializer.
pub const NAME: &str = "secret-guard";
/// Default minimum length of every value.
pub const DEFAULT_MIN_LENGTH: usize = 20;

/// The handler.
#[derive(Clone, Debug)]
pub struct SecretGuard {
    /// Values shorter than this many characters are refused.
    pub min_length: usize,
    /// Secret types checked; an absent type counts as `Opaque`.
    pub types: Vec<String>,
}

impl Default for SecretGuard {
    fn default() -> Self {
        Self {
            min_length: DEFAULT_MIN_LENGTH,
            types: vec!["Opaque".into()],
        }
    }
}

impl SecretGuard {
    /// The keys whose values are too short, with their lengths, sorted by key.
    pub fn short_keys(&self, secret: &Secret) -> BTreeMap<String, usize> {
        let mut short = BTreeMap::new();
        for (key, value) in secret.data.iter().flatten() {
            // Count characters when the bytes are text, bytes otherwise.
            let len = std::str::from_utf8(&value.0).map_or(value.0.len(), |s| s.chars().count());
            if len < self.min_length {
                short.insert(key.clone(), len);
            }
        }
        for (key, value) in secret.string_data.iter().flatten() {
            let len = value.chars().count();
            if len < self.min_length {
                short.insert(key.clone(), len);
            }
        }
        short
    }

    fn checks(&self, secret: &Secret) -> bool {
        let kind = secret.type_.as_deref().unwrap_or("Opaque");
        self.types.iter().any(|t| t == kind)
    }
}

impl Initialize<Secret> for SecretGuard {
    fn initialize(&self, secret: &mut Secret, review: &Review) -> Result<(), Denial> {
        if !matches!(review.operation(), Operation::Create | Operation::Update)
            || !self.checks(secret)
        {
            return Ok(());
        }
        let short = self.short_keys(secret);
        if short.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = short
            .iter()
            .map(|(key, len)| format!("key {key:?} has {len}"))
            .collect();
        let name = secret.metadata.name.as_deref().unwrap_or(review.name());
        Err(format!(
            "secret {name:?} refused: every value must be at least {} characters long, but {}",
            self.min_length,
            keys.join(", ")
        ))?
    }
}

/// The initializer: refuses on failure too (fail closed), since it guards security.
pub fn initializer(guard: SecretGuard) -> Initializer {
    Initializer::new(NAME)
        .failure_policy(FailurePolicy::Deny)
        .handle::<Secret>(guard)
}
