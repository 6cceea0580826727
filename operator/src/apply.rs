//! The IO shell that writes desired objects: server-side apply with one field manager, reading
//! the existing certificates, and the [`WebhookRegistrar`] that registers and removes the webhook
//! configuration. A workload object that already exists is written only when it is this
//! Initializer's ([`ownership`]): a user's object of the same name is never taken over.

use std::fmt::Debug;

use initializer_crds::constants::{FIELD_MANAGER, INITIALIZER_LABEL};
use initializer_crds::{GuardWitness, Initializer, InitializerStatus, WithdrawnNetworkPolicy};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::build::{Desired, FallbackPolicy};
use crate::error::{Error, Result, api_code, is_not_found};
pub use crate::ownership::{
    Ownership, controller_uid, fallback_is_ours, labelled_ours, ownership, registered_by_operator,
};
use crate::tls::Ca;

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// A namespaced built-in object the operator claims and applies ([`claim`], [`apply_claimed`]):
/// named once so that every function writing one states the same requirements.
pub trait NamespacedObject:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + k8s_openapi::Resource
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
{
}

impl<K> NamespacedObject for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
{
}

/// Reads the live object of `obj`'s name and refuses with [`Error::NotOurs`] when it is not
/// this Initializer's (the owner on `obj` says which Initializer that is).
pub async fn claim<K>(client: &Client, obj: &K) -> Result<Ownership>
where
    K: NamespacedObject,
{
    let name = obj.name_any();
    let kind = <K as k8s_openapi::Resource>::KIND;
    let api: Api<K> = Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default());
    let live = api.get_opt(&name).await.map_err(|source| Error::Get {
        kind,
        name: name.clone(),
        source: Box::new(source),
    })?;
    match ownership(live.as_ref().map(|l| l.meta()), controller_uid(obj.meta())) {
        Ownership::NotOurs => Err(Error::NotOurs { kind, name }),
        claimed => Ok(claimed),
    }
}

/// Server-side applies one namespaced object that [`claim`] found absent or ours, and returns
/// what the API server stored. Only our own object is applied with `force`; a new one is
/// applied without, so that an object someone else created in the meantime with other values
/// makes the apply fail with a conflict instead of being taken over.
pub async fn apply_claimed<K>(client: &Client, obj: &K, claimed: Ownership) -> Result<K>
where
    K: NamespacedObject,
{
    let name = obj.name_any();
    let kind = <K as k8s_openapi::Resource>::KIND;
    let params = match claimed {
        Ownership::Ours => apply_params(),
        Ownership::Absent => PatchParams::apply(FIELD_MANAGER),
        Ownership::NotOurs => return Err(Error::NotOurs { kind, name }),
    };
    let api: Api<K> = Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default());
    api.patch(&name, &params, &Patch::Apply(obj))
        .await
        .map_err(|source| Error::Apply {
            kind,
            name,
            source: Box::new(source),
        })
}

/// Applies the workload and returns the stored Deployment, whose status says whether it is
/// available. Every object is read first: when any of them exists and is not this
/// Initializer's, nothing is written and the answer is [`Error::NotOurs`]. Then the Secrets,
/// ServiceAccount, ConfigMap, Service and PodDisruptionBudget go together; the Deployment last, so its pods
/// start with everything they mount. With `uninitialized_creates` (the `InitializerConfiguration`
/// backend) an object that does not exist yet is created with an explicit empty pending list,
/// so that no initializer, its own least of all, is ever asked to initialize it.
pub async fn apply_workload(
    client: &Client,
    desired: &Desired,
    uninitialized_creates: bool,
) -> Result<Deployment> {
    let config_map = async {
        match &desired.config_map {
            Some(cm) => claim(client, cm).await.map(Some),
            None => Ok(None),
        }
    };
    let (ca, account, tls, cm, service, pdb, deployment, policy) = futures::try_join!(
        claim(client, &desired.ca_secret),
        claim(client, &desired.service_account),
        claim(client, &desired.tls_secret),
        config_map,
        claim(client, &desired.service),
        claim(client, &desired.pdb),
        claim(client, &desired.deployment),
        network_policy::claim_or_remove(client, desired),
    )?;
    let config_map = async {
        match (&desired.config_map, cm) {
            (Some(obj), Some(claimed)) => put(client, obj, claimed, uninitialized_creates)
                .await
                .map(|_| ()),
            _ => Ok(()),
        }
    };
    futures::try_join!(
        put(client, &desired.ca_secret, ca, uninitialized_creates),
        put(
            client,
            &desired.service_account,
            account,
            uninitialized_creates
        ),
        put(client, &desired.tls_secret, tls, uninitialized_creates),
        config_map,
        put(client, &desired.service, service, uninitialized_creates),
        put(client, &desired.pdb, pdb, uninitialized_creates),
        network_policy::put(client, desired, policy, uninitialized_creates),
    )?;
    put(
        client,
        &desired.deployment,
        deployment,
        uninitialized_creates,
    )
    .await
}

/// [`apply_claimed`], or, for an absent object when `uninitialized_creates`, a create with
/// `metadata.initializers: {"pending": []}`.
async fn put<K>(
    client: &Client,
    obj: &K,
    claimed: Ownership,
    uninitialized_creates: bool,
) -> Result<K>
where
    K: NamespacedObject,
{
    if uninitialized_creates && claimed == Ownership::Absent {
        legacy::create_uninitialized(client, obj).await
    } else {
        apply_claimed(client, obj, claimed).await
    }
}

/// The certificates found for one Initializer.
#[derive(Clone, Debug, Default)]
pub struct FoundTls {
    /// The CA to keep: the one in the operator's namespace only ([`ca_to_keep`]).
    pub ca: Option<Ca>,
    /// The serving certificate and key.
    pub serving: Option<(String, String)>,
    /// A CA Secret of the name in the workload namespace, labelled ours, left by a version that
    /// kept the CA beside the workload: removed once the CA is in the operator's namespace.
    pub stale_ca: Option<ObjectMeta>,
    /// The retired mark key the CA Secret keeps ([`crate::tls::retire`]); never one from the
    /// workload namespace.
    pub retired_mark_key: Option<initializer_mark::Retired>,
}

/// Which CA to keep: the one in the operator's namespace, never one found in the workload
/// namespace. An earlier version kept the CA there, but whoever administers that namespace can
/// write a Secret of that name with the operator's labels and an owner reference copied from the
/// Initializer, and a CA they made would sign serving certificates the API server then trusts.
/// Such a Secret is only removed ([`remove_stale_ca`]); an Initializer still served under one
/// gets a new CA and serving certificate, and fails open by the health rules until its pods
/// have loaded the new certificate.
pub fn ca_to_keep(current: Option<Ca>, _in_workload_namespace: Option<Ca>) -> Option<Ca> {
    current
}

/// Reads the existing CA (in `ca_namespace`) and serving certificate (in `namespace`), if any,
/// so they are kept until rotation. A Secret of the name without the operator's label counts as
/// absent: someone else's key is never used, and [`apply_workload`] reports the conflict. When
/// the CA lives apart from the workload, a CA Secret labelled ours in the workload namespace is
/// read too, to be removed by [`remove_stale_ca`], never used ([`ca_to_keep`]).
pub async fn read_tls(
    client: &Client,
    ca_namespace: &str,
    namespace: &str,
    ca_secret: &str,
    tls_secret: &str,
) -> Result<FoundTls> {
    let get = |namespace: &str, name: &str| {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let name = name.to_string();
        async move {
            api.get_opt(&name)
                .await
                .map(|found| found.filter(|s| labelled_ours(&s.metadata)))
                .map_err(|source| Error::Get {
                    kind: "Secret",
                    name,
                    source: Box::new(source),
                })
        }
    };
    let stale = async {
        if ca_namespace == namespace {
            Ok(None)
        } else {
            get(namespace, ca_secret).await
        }
    };
    let text = |s: &Secret, key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    let as_ca = |s: &Secret| {
        Some(Ca {
            cert_pem: text(s, "ca.crt")?,
            key_pem: text(s, "ca.key")?,
        })
    };
    let (ca, serving, stale) = futures::try_join!(
        get(ca_namespace, ca_secret),
        get(namespace, tls_secret),
        stale
    )?;
    let serving = serving.and_then(|s| Some((text(&s, "tls.crt")?, text(&s, "tls.key")?)));
    let retired_mark_key = ca
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(crate::tls::retired_from);
    Ok(FoundTls {
        ca: ca_to_keep(ca.as_ref().and_then(as_ca), stale.as_ref().and_then(as_ca)),
        serving,
        stale_ca: stale.map(|s| s.metadata),
        retired_mark_key,
    })
}

/// Deletes the CA Secret an earlier version left in the workload namespace, once the CA is in
/// the operator's namespace, and only when it is this Initializer's (label and controller
/// reference with `owner_uid`; the delete is conditional on its UID). Returns whether it went.
pub async fn remove_stale_ca(client: &Client, stale: &ObjectMeta, owner_uid: &str) -> Result<bool> {
    if ownership(Some(stale), Some(owner_uid)) != Ownership::Ours {
        return Ok(false);
    }
    let name = stale.name.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(
        client.clone(),
        stale.namespace.as_deref().unwrap_or_default(),
    );
    let preconditions = Preconditions {
        uid: stale.uid.clone(),
        resource_version: None,
    };
    delete_unless_changed(&api, &name, preconditions)
        .await
        .map_err(|source| Error::Delete {
            kind: "Secret",
            name,
            source: Box::new(source),
        })
}

/// The preconditions of an object as it was read: its UID and resourceVersion, so that a
/// delete takes only that object, unchanged since ([`delete_unless_changed`]).
pub fn as_read(meta: &ObjectMeta) -> Preconditions {
    Preconditions {
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
    }
}

/// Deletes `name` only while it still meets `preconditions` (the UID and resourceVersion it was
/// read with); false when it is gone, or was replaced or changed since it was read.
pub async fn delete_unless_changed<K>(
    api: &Api<K>,
    name: &str,
    preconditions: Preconditions,
) -> std::result::Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = DeleteParams {
        preconditions: Some(preconditions),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) || api_code(&e) == Some(409) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes an Initializer's whole status with server-side apply on the status subresource (fields
/// the operator no longer sets are removed), onto the version `computed_from` only: the
/// resourceVersion of the Initializer the status was computed from. If anyone wrote the
/// Initializer since (a user's edit, another replica's status), the API server refuses the
/// write with 409 Conflict, so a status computed from an old view never lands. This is what
/// fences a replica frozen between its leadership check and its write. Returns the version
/// the write made.
pub async fn apply_status(
    client: &Client,
    name: &str,
    status: &InitializerStatus,
    computed_from: Option<&str>,
) -> Result<Option<String>> {
    let api: Api<Initializer> = Api::all(client.clone());
    let patch = status_patch(status, computed_from);
    api.patch_status(name, &apply_params(), &Patch::Apply(&patch))
        .await
        .map(|written| written.metadata.resource_version)
        .map_err(|source| Error::Status {
            name: name.to_string(),
            source: Box::new(source),
        })
}

/// The field manager of the guard's witness in the status ([`apply_guard_witness`]), apart from
/// the status the supervisor applies, so that neither write removes the other's fields.
pub const GUARD_WITNESS_MANAGER: &str = "initializer-operator-guard";

/// Writes the guard's witness into an Initializer's status, onto the version `read_at` only (a
/// write since, a spec change included, refuses it with 409: the witness then names exactly the
/// generation stored when it landed).
pub async fn apply_guard_witness(
    client: &Client,
    name: &str,
    witness: &GuardWitness,
    read_at: Option<&str>,
) -> Result<Initializer> {
    apply_status_fields(
        client,
        name,
        GUARD_WITNESS_MANAGER,
        serde_json::json!({"guard": witness}),
        read_at,
    )
    .await
}

/// The field manager of the withdrawn NetworkPolicy in the status
/// ([`apply_withdrawn_network_policy`]), apart from the status the supervisor applies.
pub const NETWORK_POLICY_MANAGER: &str = "initializer-operator-network-policy";

/// Records in an Initializer's status that its NetworkPolicy was withdrawn, onto the version
/// `read_at` only (what the reconcile decided from).
pub async fn apply_withdrawn_network_policy(
    client: &Client,
    name: &str,
    withdrawn: &WithdrawnNetworkPolicy,
    read_at: Option<&str>,
) -> Result<Initializer> {
    apply_status_fields(
        client,
        name,
        NETWORK_POLICY_MANAGER,
        serde_json::json!({"withdrawnNetworkPolicy": withdrawn}),
        read_at,
    )
    .await
}

/// Applies `fields` of an Initializer's status as `manager`, onto the version `read_at` only
/// when it is given.
async fn apply_status_fields(
    client: &Client,
    name: &str,
    manager: &str,
    fields: serde_json::Value,
    read_at: Option<&str>,
) -> Result<Initializer> {
    let api: Api<Initializer> = Api::all(client.clone());
    let patch = status_apply_patch(fields, read_at);
    api.patch_status(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|source| Error::Status {
        name: name.to_string(),
        source: Box::new(source),
    })
}

/// The apply patch of a status, preconditioned on `computed_from` when it is known. The guard's
/// witness and the withdrawn NetworkPolicy are left out: they are [`apply_guard_witness`]'s and
/// [`apply_withdrawn_network_policy`]'s alone.
fn status_patch(status: &InitializerStatus, computed_from: Option<&str>) -> serde_json::Value {
    let status = InitializerStatus {
        guard: None,
        withdrawn_network_policy: None,
        ..status.clone()
    };
    status_apply_patch(serde_json::json!(status), computed_from)
}

/// An apply patch of the status subresource holding `status`, written onto `resource_version`
/// only when it is given.
fn status_apply_patch(
    status: serde_json::Value,
    resource_version: Option<&str>,
) -> serde_json::Value {
    let mut patch = serde_json::json!({
        "apiVersion": Initializer::api_version(&()),
        "kind": Initializer::kind(&()),
        "status": status,
    });
    if let Some(version) = resource_version {
        patch["metadata"] = serde_json::json!({"resourceVersion": version});
    }
    patch
}

/// Reads the namespace `name`, if it exists.
pub async fn read_namespace(client: &Client, name: &str) -> Result<Option<Namespace>> {
    Api::<Namespace>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(|source| Error::Get {
            kind: "Namespace",
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

/// Refuses with [`Error::NotOurs`] when a cluster-scoped object of `obj`'s name exists and is
/// not this Initializer's fallback.
async fn claim_fallback<K>(client: &Client, obj: &K) -> Result<()>
where
    K: Resource<DynamicType = ()> + k8s_openapi::Resource + Clone + Debug + DeserializeOwned,
{
    let name = obj.name_any();
    let kind = <K as k8s_openapi::Resource>::KIND;
    let live = Api::<K>::all(client.clone())
        .get_opt(&name)
        .await
        .map_err(|source| Error::Get {
            kind,
            name: name.clone(),
            source: Box::new(source),
        })?;
    let expected = obj.labels().get(INITIALIZER_LABEL).map(String::as_str);
    match live {
        Some(live) if !fallback_is_ours(live.meta(), expected) => {
            Err(Error::NotOurs { kind, name })
        }
        _ => Ok(()),
    }
}

/// Puts the fallback in force: the policy, then its binding (server-side apply). A policy or
/// binding of the same name that is not this Initializer's is never taken over
/// ([`Error::NotOurs`]).
pub async fn apply_fallback(client: &Client, fallback: &FallbackPolicy) -> Result<FallbackCheck> {
    futures::try_join!(
        claim_fallback(client, &fallback.policy),
        claim_fallback(client, &fallback.binding),
    )?;
    apply_fallback_with(client, fallback, &apply_params()).await
}

/// Asks the API server to compile the fallback without storing it (a dry-run apply).
pub async fn check_fallback(client: &Client, fallback: &FallbackPolicy) -> Result<FallbackCheck> {
    apply_fallback_with(client, fallback, &apply_params().dry_run()).await
}

/// Deletes the cluster-scoped object `name` if it is an operator-made fallback, and only that
/// very object (a UID precondition); true when it was deleted. Someone else's object of the
/// same name is left alone.
async fn remove_fallback_object<K>(client: &Client, name: &str) -> Result<bool>
where
    K: Resource<DynamicType = ()> + k8s_openapi::Resource + Clone + Debug + DeserializeOwned,
{
    let kind = <K as k8s_openapi::Resource>::KIND;
    let api: Api<K> = Api::all(client.clone());
    let live = api.get_opt(name).await.map_err(|source| Error::Get {
        kind,
        name: name.to_string(),
        source: Box::new(source),
    })?;
    let Some(live) = live else {
        return Ok(false);
    };
    if !fallback_is_ours(live.meta(), None) {
        tracing::warn!(%kind, %name, "left alone: not a fallback the operator made");
        return Ok(false);
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: live.meta().uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) || api_code(&e) == Some(409) => Ok(false),
        Err(source) => Err(Error::Delete {
            kind,
            name: name.to_string(),
            source: Box::new(source),
        }),
    }
}

/// Lifts the fallback: the binding first, then the policy. True when something was deleted;
/// an API server without ValidatingAdmissionPolicy has nothing to delete, and a policy or
/// binding of the name that the operator did not make is never deleted.
pub async fn remove_fallback(client: &Client, name: &str) -> Result<bool> {
    let binding = remove_fallback_object::<ValidatingAdmissionPolicyBinding>(client, name).await?;
    let policy = remove_fallback_object::<ValidatingAdmissionPolicy>(client, name).await?;
    Ok(binding || policy)
}

/// Reads, registers and removes `MutatingWebhookConfiguration`s (the webhook backend's kind;
/// [`crate::backend::Configurations`] chooses between the two backends).
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

    /// Creates or updates the configuration.
    pub async fn register(&self, desired: &MutatingWebhookConfiguration) -> Result<()> {
        register_configuration(&self.api(), desired).await
    }

    /// Deletes the configuration `name` if it is the operator's; true when something was deleted.
    pub async fn deregister(&self, name: &str) -> Result<bool> {
        deregister_configuration(&self.api(), name).await
    }
}

/// Server-side applies a cluster-scoped admission configuration through `api`, with `force`:
/// the configuration is the operator's alone, whichever backend's kind it is.
async fn register_configuration<K>(api: &Api<K>, desired: &K) -> Result<()>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
{
    let name = desired.name_any();
    api.patch(&name, &apply_params(), &Patch::Apply(desired))
        .await
        .map(|_| ())
        .map_err(|source| Error::Register {
            name,
            source: Box::new(source),
        })
}

/// Reads before deleting this many times when the configuration changes in between.
const DEREGISTER_ATTEMPTS: usize = 3;

/// Deletes the admission configuration `name` through `api` when it is the operator's
/// ([`registered_by_operator`]), with the UID and resourceVersion it was read with as
/// preconditions: one someone else made under the same name is never deleted, nor one replaced
/// between the read and the delete (it is read again). True when something was deleted, false
/// when it was already gone or is not the operator's (said in the log).
async fn deregister_configuration<K>(api: &Api<K>, name: &str) -> Result<bool>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    let failed = |source| Error::Deregister {
        name: name.to_string(),
        source: Box::new(source),
    };
    let mut last_conflict = None;
    for _ in 0..DEREGISTER_ATTEMPTS {
        let Some(found) = api.get_opt(name).await.map_err(failed)? else {
            return Ok(false);
        };
        if !registered_by_operator(found.meta(), name) {
            tracing::warn!(configuration = %name, "not deleting a configuration the operator did not register");
            return Ok(false);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: found.meta().uid.clone(),
                resource_version: found.meta().resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => return Ok(true),
            Err(e) if is_not_found(&e) => return Ok(false),
            Err(e) if api_code(&e) == Some(409) => last_conflict = Some(e),
            Err(e) => return Err(failed(e)),
        }
    }
    Err(failed(last_conflict.unwrap_or_else(|| {
        kube::Error::Service(format!("{name} changed under every deletion").into())
    })))
}

pub mod legacy;
pub mod network_policy;

#[cfg(test)]
mod tests;
