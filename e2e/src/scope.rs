//! A scenario's own corner of the cluster: fresh namespaces and Initializers with a random
//! suffix, all removed afterwards whatever the outcome.
//!
//! The runner calls [`Scope::cleanup`] after every scenario, passed or failed (a `finally`, not
//! a `Drop`, so cleanup can be awaited and its problems reported).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use initializer_crds::{Initializer, constants};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use rand::Rng;
use serde_json::json;

use crate::ops;

/// The ClusterRole the operator's bundle ships for the namespaces allowed for workloads.
pub const WORKLOADS_CLUSTER_ROLE: &str = "initializer-operator-workloads";
/// The operator's service account, as its bundle names it.
pub const OPERATOR_ACCOUNT: &str = "initializer-operator";

/// Label on every namespace the suite creates, valued with the scope's id.
pub const SCOPE_LABEL: &str = "e2e.initializer.dev/scope";
/// Label on the scope's target namespaces (the ones its Initializers select).
pub const TARGET_LABEL: &str = "e2e.initializer.dev/target";

/// A scenario's namespaces and Initializers.
pub struct Scope {
    client: Client,
    id: String,
    prefix: String,
    namespaces: Mutex<Vec<String>>,
    initializers: Mutex<Vec<String>>,
}

impl Scope {
    /// A scope for the scenario `scenario`, with a fresh random id.
    pub fn new(client: Client, scenario: &str) -> Self {
        let id = random_suffix();
        // Names stay short: DNS labels are at most 63 characters.
        let prefix: String = scenario
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(12)
            .collect();
        Self {
            client,
            id,
            prefix: prefix.to_ascii_lowercase(),
            namespaces: Mutex::new(Vec::new()),
            initializers: Mutex::new(Vec::new()),
        }
    }

    /// The scope's random id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A name unique to this scope: `e2e-<scenario>-<role>-<id>`.
    pub fn name(&self, role: &str) -> String {
        format!("e2e-{}-{role}-{}", self.prefix, self.id)
    }

    /// The label selector value that marks this scope's target namespaces.
    pub fn target_selector(&self) -> (String, String) {
        (TARGET_LABEL.to_string(), self.id.clone())
    }

    /// Creates a namespace named for `role` with extra `labels`, removed on cleanup.
    pub async fn namespace(&self, role: &str, labels: &[(&str, &str)]) -> anyhow::Result<String> {
        self.namespace_named(&self.name(role), labels).await
    }

    /// Creates a namespace with exactly this `name` (which should contain the scope's id) and
    /// extra `labels`, removed on cleanup.
    pub async fn namespace_named(
        &self,
        name: &str,
        labels: &[(&str, &str)],
    ) -> anyhow::Result<String> {
        let name = name.to_string();
        let mut all: BTreeMap<String, String> =
            BTreeMap::from([(SCOPE_LABEL.to_string(), self.id.clone())]);
        for (key, value) in labels {
            all.insert((*key).to_string(), (*value).to_string());
        }
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(all),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        self.track_namespace(&name);
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("failed to create namespace {name}"))?;
        Ok(name)
    }

    /// Creates a namespace an administrator allowed for initializers' workloads: labelled
    /// `initializer.dev/workloads: "true"`, with the bundle's `initializer-operator-workloads`
    /// ClusterRole bound there to the operator's service account in `operator_namespace` (the
    /// two commands of `docs/src/install/permissions.md`). Removed, with the binding, on cleanup.
    pub async fn workload_namespace(
        &self,
        role: &str,
        operator_namespace: &str,
    ) -> anyhow::Result<String> {
        let name = self
            .namespace(
                role,
                &[(constants::WORKLOADS_LABEL, constants::WORKLOADS_LABEL_VALUE)],
            )
            .await?;
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": WORKLOADS_CLUSTER_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WORKLOADS_CLUSTER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_ACCOUNT, "namespace": operator_namespace}],
        }))
        .context("failed to build the workloads RoleBinding")?;
        Api::<RoleBinding>::namespaced(self.client.clone(), &name)
            .create(&PostParams::default(), &binding)
            .await
            .with_context(|| format!("failed to bind {WORKLOADS_CLUSTER_ROLE} in {name}"))?;
        Ok(name)
    }

    /// Creates a namespace its Initializers select (it carries [`TARGET_LABEL`]).
    pub async fn target_namespace(&self, role: &str) -> anyhow::Result<String> {
        let id = self.id.clone();
        self.namespace(role, &[(TARGET_LABEL, &id)]).await
    }

    /// Creates a namespace no Initializer of this scope selects.
    pub async fn outside_namespace(&self, role: &str) -> anyhow::Result<String> {
        self.namespace(role, &[]).await
    }

    /// Remembers a namespace to remove on cleanup.
    pub fn track_namespace(&self, name: &str) {
        if let Ok(mut namespaces) = self.namespaces.lock() {
            namespaces.push(name.to_string());
        }
    }

    /// Remembers an Initializer to remove on cleanup.
    pub fn track_initializer(&self, name: &str) {
        if let Ok(mut initializers) = self.initializers.lock()
            && !initializers.iter().any(|known| known == name)
        {
            initializers.push(name.to_string());
        }
    }

    /// Creates an Initializer, remembered for cleanup.
    pub async fn create_initializer(
        &self,
        initializer: &Initializer,
    ) -> anyhow::Result<Initializer> {
        let name = initializer.name_any();
        self.track_initializer(&name);
        Api::<Initializer>::all(self.client.clone())
            .create(&PostParams::default(), initializer)
            .await
            .with_context(|| format!("failed to create Initializer {name}"))
    }

    /// Removes everything the scope created: Initializers first (waiting for their finalizer,
    /// then removing any configuration left behind), then namespaces. Returns what went wrong,
    /// as warnings; cleanup never stops half-way.
    pub async fn cleanup(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let initializers: Vec<String> = self
            .initializers
            .lock()
            .map(|i| i.clone())
            .unwrap_or_default();
        let api = Api::<Initializer>::all(self.client.clone());
        for name in &initializers {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(err) => warnings.push(format!("failed to delete Initializer {name}: {err}")),
            }
        }
        for name in &initializers {
            if !gone(&api, name, Duration::from_secs(60)).await {
                warnings.push(format!(
                    "Initializer {name} was still there 60s after deletion (its finalizer never \
                     finished); removing the finalizer"
                ));
                let patch = json!({"metadata": {"finalizers": null}});
                if let Err(err) = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    warnings.push(format!("failed to remove the finalizer of {name}: {err}"));
                }
            }
            // A configuration left behind would break every later scenario: remove it, and say so.
            let configurations = Api::<MutatingWebhookConfiguration>::all(self.client.clone());
            match ops::configurations_of(&self.client, name).await {
                Ok(left) => {
                    for configuration in left {
                        let cname = configuration.name_any();
                        warnings.push(format!(
                            "configuration {cname} of Initializer {name} outlived it (orphan); deleting it"
                        ));
                        let _ = configurations
                            .delete(&cname, &DeleteParams::default())
                            .await;
                    }
                }
                Err(err) => {
                    warnings.push(format!("failed to list configurations of {name}: {err:#}"))
                }
            }
        }
        let namespaces: Vec<String> = self
            .namespaces
            .lock()
            .map(|n| n.clone())
            .unwrap_or_default();
        let api = Api::<Namespace>::all(self.client.clone());
        for name in &namespaces {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => warnings.push(format!("failed to delete namespace {name}: {err}")),
            }
        }
        for name in &namespaces {
            if !gone(&api, name, Duration::from_secs(60)).await {
                warnings.push(format!(
                    "namespace {name} was still there 60s after deletion"
                ));
            }
        }
        warnings
    }
}

async fn gone<K>(api: &Api<K>, name: &str, timeout: Duration) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        match api.get_opt(name).await {
            Ok(None) => return true,
            Ok(Some(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    false
}

/// Five lowercase letters and digits.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The label that marks objects the operator manages, as a selector string.
pub fn managed_selector() -> String {
    format!(
        "{}={}",
        constants::MANAGED_BY_LABEL,
        constants::MANAGED_BY_VALUE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_suffixes_are_short_dns_safe_and_vary() {
        let a = random_suffix();
        let b = random_suffix();
        assert_eq!(a.len(), 5);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        // Two equal draws out of 36^5 would be a broken generator.
        assert_ne!(a, b);
    }
}
