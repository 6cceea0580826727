//! The admission configuration an Initializer registers, whichever its backend
//! (`spec.backend`): a `MutatingWebhookConfiguration`, or the `InitializerConfiguration` of
//! Kubernetes 1.7–1.13.
//!
//! [`Configurations`] is the one object that reads, registers and removes it, deciding whether
//! what the cluster holds under its name is the operator's with [`is_ours`] (from
//! [`crate::ownership`], where every ownership check lives):
//! the supervisor, the finalizer and the orphan sweep ask them instead of branching on the
//! backend. What really differs between the two is said here too: only a webhook has a failure
//! policy to relax ([`Found::degraded`]), and the operator sets different things in each, so
//! what counts as someone else's edit differs ([`Found::differs_from`]). How each is probed (a
//! dry-run review to every endpoint, or a canary through the API server) is the supervisor's
//! ([`crate::supervisor::Registration`]).
//!
//! The backends are a closed set (an immutable spec field with two values), so this is an enum
//! matched in one module rather than a trait object: the compiler names every place a third
//! would have to fill in.

use initializer_crds::Backend;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::DynamicObject;

use crate::apply::WebhookRegistrar;
use crate::apply::legacy::InitializerConfigurationRegistrar;
use crate::build;
use crate::error::{Error, Result};
pub use crate::ownership::is_ours;

/// What the operator registers: the webhook configuration for the presence wanted, or the
/// `InitializerConfiguration` (one state: it has no failure policy to relax).
#[derive(Clone, Copy, Debug)]
pub enum Desired<'a> {
    /// A `MutatingWebhookConfiguration`.
    Webhook(&'a MutatingWebhookConfiguration),
    /// An `InitializerConfiguration`.
    InitializerConfiguration(&'a DynamicObject),
}

/// A configuration of the operator's, as the cluster holds it.
#[derive(Clone, Debug)]
pub enum Found {
    /// A `MutatingWebhookConfiguration`.
    Webhook(Box<MutatingWebhookConfiguration>),
    /// An `InitializerConfiguration`.
    InitializerConfiguration(Box<DynamicObject>),
}

impl Found {
    /// Whether it is the degraded form (`failurePolicy: Ignore`, short timeout). An
    /// `InitializerConfiguration` has no failure policy, so it is never degraded.
    pub fn degraded(&self) -> bool {
        match self {
            Found::Webhook(found) => build::is_degraded(found),
            Found::InitializerConfiguration(_) => false,
        }
    }

    /// Whether it is the proving form (degraded, with the route check's webhook).
    pub fn proving(&self) -> bool {
        match self {
            Found::Webhook(found) => crate::route::is_proving(found),
            Found::InitializerConfiguration(_) => false,
        }
    }

    /// Whether it differs from `desired` in what the operator sets: every field it applies in a
    /// webhook configuration ([`crate::supervisor::drifted`]); the registered initializers in an
    /// `InitializerConfiguration`. Another kind than `desired` always differs.
    pub fn differs_from(&self, desired: Desired<'_>) -> bool {
        match (self, desired) {
            (Found::Webhook(found), Desired::Webhook(desired)) => {
                crate::supervisor::drifted(desired, found)
            }
            (
                Found::InitializerConfiguration(found),
                Desired::InitializerConfiguration(desired),
            ) => {
                build::legacy::registered_initializers(found)
                    != build::legacy::registered_initializers(desired)
            }
            _ => true,
        }
    }
}

/// What the cluster holds under a configuration's name.
#[derive(Clone, Debug)]
pub enum Live {
    /// Nothing.
    Absent,
    /// Someone else's object ([`is_ours`]).
    NotOurs,
    /// The operator's.
    Ours(Found),
}

/// Reads, registers and removes the configurations of one backend's kind.
#[derive(Clone)]
pub struct Configurations {
    backend: Backend,
    webhooks: WebhookRegistrar,
    initializer_configurations: InitializerConfigurationRegistrar,
}

impl std::fmt::Debug for Configurations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Configurations")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl Configurations {
    /// The configurations `backend` registers, through `client`.
    pub fn new(client: Client, backend: Backend) -> Self {
        Self {
            backend,
            webhooks: WebhookRegistrar::new(client.clone()),
            initializer_configurations: InitializerConfigurationRegistrar::new(client),
        }
    }

    /// The kind this backend registers.
    pub fn kind(&self) -> &'static str {
        kind(self.backend)
    }

    /// What the cluster holds under `name`, and whether it is the configuration of the
    /// Initializer labelled `initializer_label`.
    pub async fn live(&self, name: &str, initializer_label: &str) -> Result<Live> {
        let found = match self.backend {
            Backend::Webhook => self
                .webhooks
                .get(name)
                .await?
                .map(|found| Found::Webhook(Box::new(found))),
            Backend::InitializerConfiguration => self
                .initializer_configurations
                .get(name)
                .await?
                .map(|found| Found::InitializerConfiguration(Box::new(found))),
        };
        Ok(match found {
            None => Live::Absent,
            Some(found) if !is_ours(found_meta(&found), initializer_label) => Live::NotOurs,
            Some(found) => Live::Ours(found),
        })
    }

    /// Whether the configuration `name` of the Initializer labelled `initializer_label` is
    /// registered now.
    pub async fn holds_ours(&self, name: &str, initializer_label: &str) -> Result<bool> {
        Ok(matches!(
            self.live(name, initializer_label).await?,
            Live::Ours(_)
        ))
    }

    /// Creates or updates the configuration (server-side apply, forced: it is the operator's
    /// alone; the caller has checked that what the name holds is ours or absent).
    pub async fn register(&self, desired: Desired<'_>) -> Result<()> {
        match desired {
            Desired::Webhook(desired) => self.webhooks.register(desired).await,
            Desired::InitializerConfiguration(desired) => {
                self.initializer_configurations.register(desired).await
            }
        }
    }

    /// Deletes the configuration `name` if the operator registered it
    /// ([`crate::apply::registered_by_operator`], checked on the object deleted, with its UID
    /// and resourceVersion as preconditions); true when something was deleted.
    pub async fn deregister(&self, name: &str) -> Result<bool> {
        match self.backend {
            Backend::Webhook => self.webhooks.deregister(name).await,
            Backend::InitializerConfiguration => {
                self.initializer_configurations.deregister(name).await
            }
        }
    }

    /// Removes the configuration `name` of the Initializer labelled `initializer_label`: true
    /// when it was there and removed, false when it was absent, [`Error::NotOurs`] when the name
    /// holds someone else's object (left alone).
    pub async fn remove(&self, name: &str, initializer_label: &str) -> Result<bool> {
        match self.live(name, initializer_label).await? {
            Live::Ours(_) => self.deregister(name).await,
            Live::NotOurs => Err(Error::NotOurs {
                kind: self.kind(),
                name: name.to_string(),
            }),
            Live::Absent => Ok(false),
        }
    }
}

/// The kind `backend` registers.
pub fn kind(backend: Backend) -> &'static str {
    match backend {
        Backend::Webhook => "MutatingWebhookConfiguration",
        Backend::InitializerConfiguration => "InitializerConfiguration",
    }
}

fn found_meta(found: &Found) -> &ObjectMeta {
    match found {
        Found::Webhook(found) => &found.metadata,
        Found::InitializerConfiguration(found) => &found.metadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_webhook_configuration_can_be_degraded_and_each_kind_is_compared_on_what_the_operator_sets()
     {
        let webhook: MutatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "initializer-guard"},
            "webhooks": [{
                "name": "guard.initializer.dev",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {"caBundle": "Q0E=", "service": {"name": "guard", "namespace": "ops"}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "timeoutSeconds": 5,
            }],
        }))
        .unwrap();
        let found_webhook = Found::Webhook(Box::new(webhook.clone()));
        assert!(!found_webhook.degraded());
        assert!(!found_webhook.differs_from(Desired::Webhook(&webhook)));
        let degraded = build::degraded(&webhook);
        assert!(Found::Webhook(Box::new(degraded.clone())).degraded());
        assert!(found_webhook.differs_from(Desired::Webhook(&degraded)));
        let legacy = DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("initializer-guard".into()),
                ..ObjectMeta::default()
            },
            data: serde_json::json!({"initializers": []}),
        };
        let found_legacy = Found::InitializerConfiguration(Box::new(legacy.clone()));
        assert!(!found_legacy.degraded());
        assert!(!found_legacy.differs_from(Desired::InitializerConfiguration(&legacy)));
        let edited = DynamicObject {
            data: serde_json::json!({"initializers": [{"name": "other.initializers.example.com"}]}),
            ..legacy.clone()
        };
        assert!(found_legacy.differs_from(Desired::InitializerConfiguration(&edited)));
        assert!(found_legacy.differs_from(Desired::Webhook(&webhook)));
        assert!(found_webhook.differs_from(Desired::InitializerConfiguration(&legacy)));
    }
}
