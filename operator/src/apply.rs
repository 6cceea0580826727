//! The IO shell that writes desired objects: server-side apply with one field manager, reading
//! the existing certificates, and the [`Registrar`] that registers and removes the webhook
//! configuration.

use std::fmt::Debug;
use std::future::Future;

use initializer_crds::constants::FIELD_MANAGER;
use initializer_crds::{Initializer, InitializerStatus};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::build::{Desired, FallbackPolicy};
use crate::error::{Error, Result, api_code, is_not_found};
use crate::tls::Ca;

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Server-side applies one namespaced object and returns what the API server stored.
pub async fn apply_namespaced<K>(client: &Client, obj: &K) -> Result<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let name = obj.name_any();
    let namespace = obj.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    api.patch(&name, &apply_params(), &Patch::Apply(obj))
        .await
        .map_err(|source| Error::Apply {
            kind: <K as k8s_openapi::Resource>::KIND,
            name,
            source: Box::new(source),
        })
}

/// Applies the workload and returns the stored Deployment, whose status says whether it is
/// available. The Secrets, ConfigMap, Service and PodDisruptionBudget go first and together;
/// the Deployment last, so its pods start with everything they mount.
pub async fn apply_workload(client: &Client, desired: &Desired) -> Result<Deployment> {
    let config_map = async {
        match &desired.config_map {
            Some(cm) => apply_namespaced(client, cm).await.map(|_| ()),
            None => Ok(()),
        }
    };
    futures::try_join!(
        apply_namespaced(client, &desired.ca_secret),
        apply_namespaced(client, &desired.tls_secret),
        config_map,
        apply_namespaced(client, &desired.service),
        apply_namespaced(client, &desired.pdb),
    )?;
    apply_namespaced(client, &desired.deployment).await
}

/// Reads the existing CA and serving certificate, if any, so they are kept until rotation.
pub async fn read_tls(
    client: &Client,
    namespace: &str,
    ca_secret: &str,
    tls_secret: &str,
) -> Result<(Option<Ca>, Option<(String, String)>)> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let get = |name: &str| {
        let api = api.clone();
        let name = name.to_string();
        async move {
            api.get_opt(&name).await.map_err(|source| Error::Get {
                kind: "Secret",
                name,
                source: Box::new(source),
            })
        }
    };
    let text = |s: &Secret, key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    let (ca, serving) = futures::try_join!(get(ca_secret), get(tls_secret))?;
    let ca = ca.and_then(|s| {
        Some(Ca {
            cert_pem: text(&s, "ca.crt")?,
            key_pem: text(&s, "ca.key")?,
        })
    });
    let serving = serving.and_then(|s| Some((text(&s, "tls.crt")?, text(&s, "tls.key")?)));
    Ok((ca, serving))
}

/// Writes an Initializer's whole status with server-side apply on the status subresource (fields
/// the operator no longer sets are removed).
pub async fn apply_status(client: &Client, name: &str, status: &InitializerStatus) -> Result<()> {
    let api: Api<Initializer> = Api::all(client.clone());
    let patch = serde_json::json!({
        "apiVersion": Initializer::api_version(&()),
        "kind": Initializer::kind(&()),
        "status": status,
    });
    api.patch_status(name, &apply_params(), &Patch::Apply(&patch))
        .await
        .map(|_| ())
        .map_err(|source| Error::Status {
            name: name.to_string(),
            source: Box::new(source),
        })
}

/// Reads the Deployment `name`, if it exists (for the workload generation).
pub async fn read_deployment(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Deployment>> {
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|source| Error::Get {
            kind: "Deployment",
            name: name.to_string(),
            source: Box::new(source),
        })
}

/// What the API server made of the fallback policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FallbackCheck {
    /// Accepted (applied, or would be).
    Accepted,
    /// The API server does not serve ValidatingAdmissionPolicy (the sandbox, or before 1.30).
    Unsupported,
    /// The API server refused it as invalid: its message (compile errors of the expressions).
    Refused(String),
}

fn unserved(err: &kube::Error) -> bool {
    api_code(err) == Some(404)
}

fn refused(err: &kube::Error) -> Option<String> {
    match err {
        kube::Error::Api(status) if status.code == 400 || status.code == 422 => {
            Some(status.message.clone())
        }
        _ => None,
    }
}

async fn apply_cluster<K>(client: &Client, obj: &K, params: &PatchParams) -> Result<FallbackCheck>
where
    K: Resource<DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let name = obj.name_any();
    match Api::<K>::all(client.clone())
        .patch(&name, params, &Patch::Apply(obj))
        .await
    {
        Ok(_) => Ok(FallbackCheck::Accepted),
        Err(e) if unserved(&e) => Ok(FallbackCheck::Unsupported),
        Err(e) => match refused(&e) {
            Some(message) => Ok(FallbackCheck::Refused(message)),
            None => Err(Error::Apply {
                kind: <K as k8s_openapi::Resource>::KIND,
                name,
                source: Box::new(e),
            }),
        },
    }
}

async fn apply_fallback_with(
    client: &Client,
    fallback: &FallbackPolicy,
    params: &PatchParams,
) -> Result<FallbackCheck> {
    match apply_cluster(client, &fallback.policy, params).await? {
        FallbackCheck::Accepted => apply_cluster(client, &fallback.binding, params).await,
        other => Ok(other),
    }
}

/// Puts the fallback in force: the policy, then its binding (server-side apply).
pub async fn apply_fallback(client: &Client, fallback: &FallbackPolicy) -> Result<FallbackCheck> {
    apply_fallback_with(client, fallback, &apply_params()).await
}

/// Asks the API server to compile the fallback without storing it (a dry-run apply).
pub async fn check_fallback(client: &Client, fallback: &FallbackPolicy) -> Result<FallbackCheck> {
    apply_fallback_with(client, fallback, &apply_params().dry_run()).await
}

/// Lifts the fallback: the binding first, then the policy. True when something was deleted;
/// an API server without ValidatingAdmissionPolicy has nothing to delete.
pub async fn remove_fallback(client: &Client, name: &str) -> Result<bool> {
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let mut deleted = false;
    for (kind, result) in [
        (
            "ValidatingAdmissionPolicyBinding",
            bindings
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
        ),
        (
            "ValidatingAdmissionPolicy",
            policies
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
        ),
    ] {
        match result {
            Ok(()) => deleted = true,
            Err(e) if is_not_found(&e) => {}
            Err(source) => {
                return Err(Error::Delete {
                    kind,
                    name: name.to_string(),
                    source: Box::new(source),
                });
            }
        }
    }
    Ok(deleted)
}

/// Registers and removes an initializer's admission configuration. The webhook backend is the
/// only one today; a legacy `InitializerConfiguration` backend can implement the same trait.
pub trait Registrar: Send + Sync {
    /// The configuration type this backend registers.
    type Configuration: Send + Sync;

    /// Creates or updates the configuration.
    fn register(&self, desired: &Self::Configuration) -> impl Future<Output = Result<()>> + Send;

    /// Deletes the configuration `name`; true when something was deleted.
    fn deregister(&self, name: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Whether the configuration `name` exists now.
    fn is_registered(&self, name: &str) -> impl Future<Output = Result<bool>> + Send;
}

/// Registers `MutatingWebhookConfiguration`s.
#[derive(Clone)]
pub struct WebhookRegistrar {
    client: Client,
}

impl WebhookRegistrar {
    /// A registrar using `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    fn api(&self) -> Api<MutatingWebhookConfiguration> {
        Api::all(self.client.clone())
    }

    /// The configuration `name` as stored, if it exists.
    pub async fn get(&self, name: &str) -> Result<Option<MutatingWebhookConfiguration>> {
        self.api().get_opt(name).await.map_err(|source| Error::Get {
            kind: "MutatingWebhookConfiguration",
            name: name.to_string(),
            source: Box::new(source),
        })
    }
}

impl Registrar for WebhookRegistrar {
    type Configuration = MutatingWebhookConfiguration;

    async fn register(&self, desired: &MutatingWebhookConfiguration) -> Result<()> {
        let name = desired.name_any();
        self.api()
            .patch(&name, &apply_params(), &Patch::Apply(desired))
            .await
            .map(|_| ())
            .map_err(|source| Error::Register {
                name,
                source: Box::new(source),
            })
    }

    async fn deregister(&self, name: &str) -> Result<bool> {
        match self.api().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(source) => Err(Error::Deregister {
                name: name.to_string(),
                source: Box::new(source),
            }),
        }
    }

    async fn is_registered(&self, name: &str) -> Result<bool> {
        self.api()
            .get_opt(name)
            .await
            .map(|found| found.is_some())
            .map_err(|source| Error::Get {
                kind: "MutatingWebhookConfiguration",
                name: name.to_string(),
                source: Box::new(source),
            })
    }
}
