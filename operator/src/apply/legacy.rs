//! The IO of the `InitializerConfiguration` backend: whether the API server serves it, what the
//! rules reach (discovery), objects created with an explicit empty pending list, the
//! controller's RBAC, the [`InitializerConfigurationRegistrar`], releasing a dead initializer's
//! pending objects, and the canary probe.
//!
//! `includeUninitialized` (list, watch and create of Kubernetes 1.7–1.13) is no parameter of
//! kube-rs, so the requests that need it are built with `kube::core::Request` and the
//! parameter appended to their query. The decisions are in [`crate::pending`].

use std::fmt::Debug;
use std::time::{Duration, Instant};

use initializer_crds::constants::{FIELD_MANAGER, LEGACY_GROUP_VERSION, LEGACY_PLURAL};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::Request;
use kube::discovery::{Discovery, Scope};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::{debug, info, warn};

use super::{Ownership, deregister_configuration, ownership, register_configuration};
use crate::build::legacy::{LegacyDesired, configuration_resource};
use crate::error::{Error, Result, api_code, is_not_found};
use crate::pending::{self, Served};
use crate::probe::{Failure, Outcome};

fn legacy_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Legacy {
        what,
        source: Box::new(source),
    }
}

fn http_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::BuildRequest {
        what: what.to_string(),
        reason: e.to_string(),
    }
}

/// `req` with `includeUninitialized=true` added to its query.
fn include_uninitialized(mut req: http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
    let uri = req.uri().to_string();
    let joined = if uri.contains('?') {
        format!("{uri}&includeUninitialized=true")
    } else {
        format!("{uri}?includeUninitialized=true")
    };
    if let Ok(parsed) = joined.parse() {
        *req.uri_mut() = parsed;
    }
    req
}

/// Whether the API server serves `admissionregistration.k8s.io/v1alpha1`
/// `initializerconfigurations` (its discovery document lists it).
pub async fn api_served(client: &Client) -> Result<bool> {
    let path = format!("/apis/{LEGACY_GROUP_VERSION}");
    let req = http::Request::get(&path)
        .body(Vec::new())
        .map_err(|e| http_error("build the discovery request", e))?;
    match client.request::<Value>(req).await {
        Ok(list) => Ok(list["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["name"] == LEGACY_PLURAL))),
        Err(e) if matches!(api_code(&e), Some(404 | 403)) => Ok(false),
        Err(source) => Err(Error::Legacy {
            what: format!("read the discovery document {path}"),
            source: Box::new(source),
        }),
    }
}

/// Every resource the API server serves, for [`pending::reached`] (only the groups the rules
/// name, unless one names every group).
pub async fn discover(client: &Client, groups: &[String]) -> Result<Vec<Served>> {
    let mut discovery = Discovery::new(client.clone());
    if !groups.iter().any(|g| g == "*") {
        let named: Vec<&str> = groups.iter().map(String::as_str).collect();
        discovery = discovery.filter(&named);
    }
    let discovery = discovery
        .run()
        .await
        .map_err(legacy_error("discover the served resources"))?;
    let mut served = Vec::new();
    for group in discovery.groups() {
        let preferred = group.preferred_version_or_latest().to_string();
        for version in group.versions() {
            for (resource, caps) in group.versioned_resources(version) {
                if resource.plural.contains('/') {
                    continue;
                }
                served.push(Served {
                    group: resource.group.clone(),
                    version: resource.version.clone(),
                    preferred: version == preferred,
                    resource: resource.plural.clone(),
                    kind: resource.kind.clone(),
                    namespaced: caps.scope == Scope::Namespaced,
                });
            }
        }
    }
    Ok(served)
}

/// The API resource of a served one.
pub fn api_resource(served: &Served) -> ApiResource {
    ApiResource {
        group: served.group.clone(),
        version: served.version.clone(),
        api_version: if served.group.is_empty() {
            served.version.clone()
        } else {
            format!("{}/{}", served.group, served.version)
        },
        kind: served.kind.clone(),
        plural: served.resource.clone(),
    }
}

/// Creates `obj` with `metadata.initializers: {"pending": []}`: its creator says it needs no
/// initializer, so the API server adds none and the create does not wait (the reference
/// walkthrough's self-exclusion of the initializer's own Deployment).
pub async fn create_uninitialized<K>(client: &Client, obj: &K) -> Result<K>
where
    K: Resource<DynamicType = ()> + k8s_openapi::Resource + Serialize + DeserializeOwned,
{
    let name = obj.name_any();
    let kind = <K as k8s_openapi::Resource>::KIND;
    let mut body = serde_json::to_value(obj).map_err(|e| Error::Serialize {
        what: kind,
        reason: e.to_string(),
    })?;
    body["metadata"]["initializers"] = serde_json::json!({"pending": []});
    let url = K::url_path(&(), obj.meta().namespace.as_deref());
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_string()),
    };
    let req = Request::new(url)
        .create(&params, body.to_string().into_bytes())
        .map_err(|e| http_error(&format!("create {kind} {name}"), e))?;
    client
        .request::<K>(req)
        .await
        .map_err(|source| Error::Apply {
            kind,
            name,
            source: Box::new(source),
        })
}

/// Server-side applies one cluster-scoped object of the controller's RBAC, unless an object of
/// its name exists that is not this Initializer's ([`Error::NotOurs`]).
async fn apply_cluster_owned<K>(client: &Client, obj: &K) -> Result<()>
where
    K: Resource<DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let name = obj.name_any();
    let kind = <K as k8s_openapi::Resource>::KIND;
    let api: Api<K> = Api::all(client.clone());
    let live = api.get_opt(&name).await.map_err(|source| Error::Get {
        kind,
        name: name.clone(),
        source: Box::new(source),
    })?;
    let owner = obj
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str());
    let params = match ownership(live.as_ref().map(|l| l.meta()), owner) {
        Ownership::NotOurs => return Err(Error::NotOurs { kind, name }),
        Ownership::Ours => PatchParams::apply(FIELD_MANAGER).force(),
        Ownership::Absent => PatchParams::apply(FIELD_MANAGER),
    };
    api.patch(&name, &params, &Patch::Apply(obj))
        .await
        .map(|_| ())
        .map_err(|source| Error::Apply {
            kind,
            name,
            source: Box::new(source),
        })
}

/// Applies the controller's ClusterRole and its binding (the role first, so the binding never
/// names a missing role).
pub async fn apply_rbac(client: &Client, legacy: &LegacyDesired) -> Result<()> {
    apply_cluster_owned(client, &legacy.cluster_role).await?;
    apply_cluster_owned(client, &legacy.cluster_role_binding).await
}

/// Reads, registers and removes `InitializerConfiguration`s (the legacy backend's kind;
/// [`crate::backend::Configurations`] chooses between the two backends).
#[derive(Clone)]
pub struct InitializerConfigurationRegistrar {
    client: Client,
}

impl InitializerConfigurationRegistrar {
    /// A registrar using `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    fn api(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &configuration_resource())
    }

    /// The configuration `name` as stored, if it exists (`None` too when the API server does
    /// not serve the kind at all).
    pub async fn get(&self, name: &str) -> Result<Option<DynamicObject>> {
        match self.api().get_opt(name).await {
            Ok(found) => Ok(found),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) if self.forbidden_because_not_served(&e).await? => Ok(None),
            Err(source) => Err(Error::Get {
                kind: "InitializerConfiguration",
                name: name.to_string(),
                source: Box::new(source),
            }),
        }
    }

    /// Creates or updates the configuration.
    pub async fn register(&self, desired: &DynamicObject) -> Result<()> {
        register_configuration(&self.api(), desired).await
    }

    /// Deletes the configuration `name` if it is the operator's; true when something was deleted.
    pub async fn deregister(&self, name: &str) -> Result<bool> {
        deregister_configuration(&self.api(), name).await
    }

    /// Every configuration carrying `labels` (none when the API server does not serve the
    /// kind).
    pub async fn list(&self, labels: &str) -> Result<Vec<DynamicObject>> {
        match self.api().list(&ListParams::default().labels(labels)).await {
            Ok(list) => Ok(list.items),
            Err(e) if is_not_found(&e) => Ok(Vec::new()),
            Err(e) if self.forbidden_because_not_served(&e).await? => Ok(Vec::new()),
            Err(source) => Err(Error::Orphans(Box::new(source))),
        }
    }

    /// Whether `err` is a 403 for a kind the API server does not serve at all. kube-apiserver
    /// authorizes before it routes, so without a grant on `initializerconfigurations` (the
    /// operator's default roles have none; the legacy ClusterRole is opt-in) a server without
    /// the API answers Forbidden, not NotFound, and nothing of the kind can exist there. A 403
    /// where the API is served stays an error: the grant is missing.
    async fn forbidden_because_not_served(&self, err: &kube::Error) -> Result<bool> {
        if api_code(err) != Some(403) {
            return Ok(false);
        }
        Ok(!api_served(&self.client).await?)
    }
}

/// How many tries a release of one object gets when its update meets a conflict (the
/// initializer or a controller wrote it meanwhile).
const RELEASE_TRIES: usize = 3;

/// Removes `name` from the pending list of `obj` (of `resource`), re-reading it after a
/// conflict; true when this call released it.
async fn release_one(
    client: &Client,
    resource: &ApiResource,
    obj: Value,
    name: &str,
) -> Result<bool> {
    let mut current = obj;
    for _ in 0..RELEASE_TRIES {
        let Some(mut updated) = pending::released(&current, name) else {
            return Ok(false);
        };
        let object_name = updated["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let namespace = updated["metadata"]["namespace"]
            .as_str()
            .map(str::to_string);
        updated["apiVersion"] = Value::String(resource.api_version.clone());
        updated["kind"] = Value::String(resource.kind.clone());
        let request = Request::new(DynamicObject::url_path(resource, namespace.as_deref()));
        let what = format!("release {} {object_name}", resource.kind);
        let req = request
            .replace(
                &object_name,
                &PostParams::default(),
                updated.to_string().into_bytes(),
            )
            .map_err(|e| http_error(&what, e))?;
        match client.request::<Value>(req).await {
            Ok(_) => return Ok(true),
            Err(e) if is_not_found(&e) => return Ok(false),
            Err(e) if api_code(&e) == Some(409) => {
                let req = request
                    .get(&object_name, &Default::default())
                    .map_err(|e| http_error(&what, e))?;
                match client.request::<Value>(req).await {
                    Ok(fresh) => current = fresh,
                    Err(e) if is_not_found(&e) => return Ok(false),
                    Err(source) => return Err(legacy_error(what)(source)),
                }
            }
            Err(source) => return Err(legacy_error(what)(source)),
        }
    }
    Ok(false)
}

/// Every object of `resource` (cluster-wide, or in `namespace`, matching `labels`) with its
/// uninitialized ones.
async fn list_uninitialized(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    labels: Option<&str>,
) -> Result<Vec<Value>> {
    let what = format!("list {} with includeUninitialized", resource.plural);
    let mut params = ListParams::default();
    if let Some(labels) = labels {
        params = params.labels(labels);
    }
    let req = Request::new(DynamicObject::url_path(resource, namespace))
        .list(&params)
        .map_err(|e| http_error(&what, e))?;
    let list = client
        .request::<Value>(include_uninitialized(req))
        .await
        .map_err(legacy_error(what))?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// What a release did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Objects whose pending list no longer holds the name, the operator's own canaries left
    /// out (they are released too, and a probe deletes them: no user's create waited on them).
    pub count: u64,
    /// Resources that could not be listed or objects that could not be written, and why.
    pub failed: Vec<String>,
}

/// Removes `name` from every object of the reached resources still pending on it: after its
/// configuration is deleted nothing else would, and their creates would wait until they time
/// out (and the objects stay uninitialized). Errors are collected, not returned: every other
/// object is still released.
pub async fn release(client: &Client, reached: &[Served], name: &str) -> Released {
    let mut out = Released::default();
    for served in reached {
        let resource = api_resource(served);
        let items = match list_uninitialized(client, &resource, None, None).await {
            Ok(items) => items,
            Err(e) => {
                out.failed.push(e.to_string());
                continue;
            }
        };
        for item in items {
            if !pending::pending_names(&item).contains(&name) {
                continue;
            }
            let canary = pending::is_canary(&item);
            match release_one(client, &resource, item, name).await {
                Ok(true) if !canary => out.count += 1,
                Ok(_) => {}
                Err(e) => out.failed.push(e.to_string()),
            }
        }
    }
    if out.count > 0 {
        info!(pending_name = %name, released = out.count, "released pending objects");
    }
    out
}

/// Removes the initializer's own name from its own ReplicaSets and pods (selected by
/// `labels` in `namespace`), should the API server have given it to them: they must never
/// wait on the initializer they run. Returns how many were released.
pub async fn clear_own(client: &Client, namespace: &str, labels: &str, name: &str) -> Result<u64> {
    let mut count = 0;
    for resource in [
        ApiResource::erase::<ReplicaSet>(&()),
        ApiResource::erase::<Pod>(&()),
    ] {
        for item in list_uninitialized(client, &resource, Some(namespace), Some(labels)).await? {
            if release_one(client, &resource, item, name).await? {
                count += 1;
            }
        }
    }
    if count > 0 {
        info!(%namespace, pending_name = %name, count, "cleared the initializer's name from its own objects");
    }
    Ok(count)
}

/// Deletes the canaries of `canary`'s Initializer that a probe left behind (the operator
/// stopped between their create and their delete): older than any probe
/// ([`pending::stale_canaries`]). Returns how many went.
pub async fn remove_stale_canaries(client: &Client, canary: &Canary) -> Result<usize> {
    let Some(served) = &canary.resource else {
        return Ok(0);
    };
    let resource = api_resource(served);
    let labels = format!(
        "{}={}",
        initializer_crds::constants::CANARY_LABEL,
        canary.label
    );
    let items =
        list_uninitialized(client, &resource, Some(&canary.namespace), Some(&labels)).await?;
    let stale = pending::stale_canaries(&items, jiff::Timestamp::now());
    let request = Request::new(DynamicObject::url_path(&resource, Some(&canary.namespace)));
    for name in &stale {
        let what = format!("delete the stale canary {} {name}", resource.kind);
        let req = request
            .delete(name, &DeleteParams::background())
            .map_err(|e| http_error(&what, e))?;
        match client.request::<Value>(req).await {
            Ok(_) => info!(canary = %name, "deleted a canary a probe left behind"),
            Err(e) if is_not_found(&e) => {}
            Err(source) => return Err(legacy_error(what)(source)),
        }
    }
    Ok(stale.len())
}

/// What the canary probe needs: the resource it is made of (`None` when the rules reach none
/// that can be a canary), where, its label and the pending name it waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Canary {
    /// The canary's resource.
    pub resource: Option<Served>,
    /// Its namespace.
    pub namespace: String,
    /// Prefix of its name (the Initializer's base name).
    pub prefix: String,
    /// The value of its `initializer-operator.io/canary` label (the Initializer's label).
    pub label: String,
    /// The name it is pending on.
    pub pending_name: String,
}

/// How often the canary is read back while it waits.
const CANARY_POLL: Duration = Duration::from_millis(20);

fn failed(failure: Failure, latency: Duration, message: String) -> Outcome {
    Outcome {
        ok: false,
        latency,
        message,
        failure: Some(failure),
        current_ca: false,
    }
}

/// The end-to-end probe of the legacy backend: creates a canary with `includeUninitialized`
/// pending on this initializer alone, and waits (within `budget`) for the initializer to
/// remove its name; the canary is deleted after, whatever happened.
pub async fn canary_probe(client: &Client, canary: &Canary, budget: Duration) -> Outcome {
    let Some(served) = &canary.resource else {
        return failed(
            Failure::Unreachable,
            Duration::ZERO,
            "the rules reach no namespaced resource the operator can make a canary of (ConfigMap, Secret, Deployment, StatefulSet, ReplicaSet, DaemonSet, Job, CronJob, Service or Pod)".into(),
        );
    };
    let resource = api_resource(served);
    let suffix = format!("{:08x}", rand::random::<u32>());
    let prefix: String = canary.prefix.chars().take(40).collect();
    let run = CanaryRun {
        client,
        request: Request::new(DynamicObject::url_path(&resource, Some(&canary.namespace))),
        name: format!("{}-canary-{suffix}", prefix.trim_end_matches('-')),
        kind: &resource.kind,
        pending_name: &canary.pending_name,
        budget,
        started: Instant::now(),
    };
    let body = pending::canary(
        served,
        &run.name,
        &canary.namespace,
        (initializer_crds::constants::CANARY_LABEL, &canary.label),
        &canary.pending_name,
    );
    let outcome = match run.create(body).await {
        Ok(true) => Ok(()),
        Ok(false) => run.wait_initialized().await,
        Err(outcome) => Err(outcome),
    };
    let latency = run.started.elapsed();
    run.delete_in_background();
    match outcome {
        Ok(()) => initialized_in(&resource.kind, latency, budget),
        Err(outcome) => outcome,
    }
}

/// One canary on its way: created, read back until initialized, deleted.
struct CanaryRun<'a> {
    client: &'a Client,
    request: Request,
    name: String,
    kind: &'a str,
    pending_name: &'a str,
    budget: Duration,
    started: Instant,
}

impl CanaryRun<'_> {
    fn failed(&self, failure: Failure, message: String) -> Outcome {
        failed(failure, self.started.elapsed(), message)
    }

    /// Creates the canary; true when it came back initialized already.
    async fn create(&self, body: Value) -> Result<bool, Outcome> {
        let (kind, name) = (self.kind, &self.name);
        let req = self
            .request
            .create(&PostParams::default(), body.to_string().into_bytes())
            .map_err(|e| self.failed(Failure::Unreachable, e.to_string()))?;
        let create = self.client.request::<Value>(include_uninitialized(req));
        match tokio::time::timeout(self.budget, create).await {
            Err(_) => Err(failed(
                Failure::TimedOut,
                self.budget,
                format!(
                    "creating the canary {kind} {name} took longer than {} ms",
                    self.budget.as_millis()
                ),
            )),
            Ok(Err(e)) => Err(self.failed(
                Failure::Unreachable,
                format!("failed to create the canary {kind} {name}: {e}"),
            )),
            Ok(Ok(created)) => Ok(pending::is_initialized(&created)),
        }
    }

    /// Reads the canary back until the initializer removed its name, refused it, or the
    /// budget ran out.
    async fn wait_initialized(&self) -> Result<(), Outcome> {
        let (kind, name) = (self.kind, &self.name);
        loop {
            let left = self.budget.saturating_sub(self.started.elapsed());
            if left.is_zero() {
                return Err(failed(
                    Failure::TimedOut,
                    self.budget,
                    format!(
                        "the canary {kind} {name} was not initialized within {} ms: the initializer did not remove {}",
                        self.budget.as_millis(),
                        self.pending_name
                    ),
                ));
            }
            tokio::time::sleep(CANARY_POLL.min(left)).await;
            let req = self
                .request
                .get(name, &Default::default())
                .map_err(|e| self.failed(Failure::Unreachable, e.to_string()))?;
            match self.client.request::<Value>(req).await {
                Ok(found) if pending::is_initialized(&found) => return Ok(()),
                Ok(found) => {
                    if let Some(why) = pending::failure(&found) {
                        return Err(self.failed(
                            Failure::BadAnswer,
                            format!("the initializer refused the canary: {why}"),
                        ));
                    }
                }
                // A failure result deletes the object.
                Err(e) if is_not_found(&e) => {
                    return Err(self.failed(
                        Failure::BadAnswer,
                        format!("the canary {kind} {name} was deleted before it was initialized: the initializer refused it"),
                    ));
                }
                Err(e) => debug!(error = %e, "reading the canary failed"),
            }
        }
    }

    /// Deletes the canary without waiting for it.
    fn delete_in_background(self) {
        let client = self.client.clone();
        let (request, name) = (self.request, self.name);
        tokio::spawn(async move {
            let req = match request.delete(&name, &DeleteParams::background()) {
                Ok(req) => req,
                Err(e) => return warn!(error = %e, "failed to build the canary's delete"),
            };
            if let Err(e) = client.request::<Value>(req).await
                && !is_not_found(&e)
            {
                warn!(canary = %name, error = %e, "failed to delete the canary");
            }
        });
    }
}

/// The verdict on a canary of `kind` initialized after `latency`: a success within `budget`.
fn initialized_in(kind: &str, latency: Duration, budget: Duration) -> Outcome {
    let within = latency <= budget;
    let took = format!(
        "the canary {kind} was initialized in {} ms",
        latency.as_millis()
    );
    let message = if within {
        took
    } else {
        format!("{took}, over the budget of {} ms", budget.as_millis())
    };
    Outcome {
        ok: within,
        latency,
        message,
        failure: (!within).then_some(Failure::TimedOut),
        current_ca: true,
    }
}
