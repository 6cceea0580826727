//! The orphan sweep: webhook configurations, `InitializerConfiguration`s, fallback policies and
//! preset policies whose Initializer is gone (removed without its finalizer) or suspended (the
//! preset policies: gone only) are deleted at start,
//! whenever a managed configuration changes, and every minute. The sweep's watch also keeps the
//! copy of the operator's configurations the supervisor checks healthy registrations against.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use initializer_crds::constants::{INITIALIZER_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use initializer_crds::{Backend, Initializer, Phase};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{DynamicObject, ListParams};
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::apply;
use crate::apply::legacy::InitializerConfigurationRegistrar;
use crate::backend::Configurations;
use crate::build;
use crate::engine::proof::PolicyObjects;
use crate::error::{Error, Result, api_code};
use crate::naming;
use crate::supervisor::Supervisor;

use super::{Memory, PolicyApi, legacy_reached};

/// Names of managed objects that belong to no existing Initializer: both labels the operator
/// sets, the Initializer label naming none of `initializers`. An object with the managed-by
/// label alone is not one the operator registered (anyone who can write it can set that label),
/// so it is left alone.
pub fn orphans<K: Resource>(objects: &[K], initializers: &[String]) -> Vec<String> {
    let labels: Vec<String> = initializers
        .iter()
        .map(|n| naming::names(n).label)
        .collect();
    objects
        .iter()
        .filter(|c| {
            c.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
                && c.labels()
                    .get(INITIALIZER_LABEL)
                    .is_some_and(|owner| !labels.contains(owner))
        })
        .map(ResourceExt::name_any)
        .collect()
}

/// Names of the Initializers that may have a configuration and a fallback: every one but those
/// whose suspension (either switch) the operator has carried out, as their status says. Until
/// then the reconcile of the suspend removes both (`suspend_first`); a sweep that removed them
/// first would race a reconcile still holding the Initializer as it was before the suspend,
/// which would register the configuration again.
pub fn wanting_configurations(initializers: &[Initializer]) -> Vec<String> {
    initializers
        .iter()
        .filter(|i| !(i.is_suspended() && shows_suspended(i)))
        .map(ResourceExt::name_any)
        .collect()
}

/// Whether the status of `initializer` says it is suspended: the operator has removed its
/// configuration for the suspend.
fn shows_suspended(initializer: &Initializer) -> bool {
    initializer.status.as_ref().and_then(|s| s.phase) == Some(Phase::Suspended)
}

pub(super) fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

/// Deletes every managed configuration (webhook or `InitializerConfiguration`, whose waiting
/// objects are then released), and every fallback policy and binding, whose
/// Initializer no longer exists (removed without its finalizer, or while an outage had its
/// fallback in force); and every webhook configuration and fallback of a suspended one once
/// the suspend is carried out (a registration still in flight when the suspend was handled,
/// from a replica frozen past its lease, lands after it); and every preset policy and binding (MutatingAdmissionPolicy) whose
/// Initializer no longer exists (where the API server serves them, as `policy_api` last found
/// out). Returns their names.
pub async fn remove_orphans(client: &Client, policy_api: &PolicyApi) -> Result<Vec<String>> {
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let found = configs
        .list(&ListParams::default().labels(&managed_selector()))
        .await
        .map_err(|e| Error::Orphans(Box::new(e)))?;
    // Only fallbacks carry the Initializer label; other managed policies (the guard on
    // Initializers) belong to the operator itself.
    let fallbacks =
        ListParams::default().labels(&format!("{},{INITIALIZER_LABEL}", managed_selector()));
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let (policies, bindings) = match (
        policies.list(&fallbacks).await,
        bindings.list(&fallbacks).await,
    ) {
        (Ok(p), Ok(b)) => (p.items, b.items),
        // An API server without ValidatingAdmissionPolicy has no fallbacks to sweep.
        (Err(e), _) | (_, Err(e)) if matches!(api_code(&e), Some(404)) => (Vec::new(), Vec::new()),
        (Err(e), _) | (_, Err(e)) => return Err(Error::Orphans(Box::new(e))),
    };
    let legacy = InitializerConfigurationRegistrar::new(client.clone())
        .list(&managed_selector())
        .await?;
    let presets = preset_policies(client, policy_api, &fallbacks).await?;
    if found.items.is_empty()
        && policies.is_empty()
        && bindings.is_empty()
        && legacy.is_empty()
        && presets.iter().all(|(_, _, listed)| listed.is_empty())
    {
        return Ok(Vec::new());
    }
    let initializers: Api<Initializer> = Api::all(client.clone());
    let existing = initializers
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::Orphans(Box::new(e)))?
        .items;
    let wanting = wanting_configurations(&existing);
    let unwanted = orphans(&found.items, &wanting);
    let mut orphaned = delete_as_listed(
        &configs,
        &found.items,
        &unwanted,
        "configuration",
        |name, e| Error::Deregister {
            name,
            source: Box::new(e),
        },
    )
    .await?;
    // A suspended legacy Initializer keeps what waits on its name (its workload still
    // initializes it): only the configurations of Initializers that are gone are released.
    let names: Vec<String> = existing.iter().map(ResourceExt::name_any).collect();
    orphaned.extend(remove_legacy_orphans(client, legacy, &names).await?);
    let mut fallbacks = orphans(&policies, &wanting);
    fallbacks.extend(orphans(&bindings, &wanting));
    fallbacks.sort();
    fallbacks.dedup();
    for name in &fallbacks {
        apply::remove_fallback(client, name).await?;
        info!(fallback = %name, "removed orphaned fallback");
    }
    orphaned.extend(fallbacks);
    // A preset's policy and binding stay in force with nobody to show for them once their
    // Initializer is gone without the operator's cleanup: its owner reference lets the garbage
    // collector remove them, and the sweep removes those applied before they carried one.
    for (api, kind, listed) in presets {
        let unowned = orphans(&listed, &names);
        let removed = delete_as_listed(&api, &listed, &unowned, kind, |name, e| Error::Delete {
            kind,
            name,
            source: Box::new(e),
        })
        .await?;
        orphaned.extend(removed);
    }
    Ok(orphaned)
}

/// Deletes each of `listed` named in `unwanted`, only as listed (one written again since, such
/// as a configuration an un-suspend registered, is left alone); returns the names removed.
/// `failed` turns a refused deletion into the sweep's error; `what` names the object in the log.
async fn delete_as_listed<K>(
    api: &Api<K>,
    listed: &[K],
    unwanted: &[String],
    what: &str,
    failed: impl Fn(String, kube::Error) -> Error,
) -> Result<Vec<String>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut removed = Vec::new();
    for object in listed.iter().filter(|o| unwanted.contains(&o.name_any())) {
        let name = object.name_any();
        let gone = apply::delete_unless_changed(api, &name, apply::as_read(object.meta()))
            .await
            .map_err(|source| failed(name.clone(), source))?;
        if gone {
            info!(%name, "removed an orphaned {what}");
            removed.push(name);
        }
    }
    Ok(removed)
}

/// The preset policies and bindings (MutatingAdmissionPolicy) the operator applied, bindings
/// first, with their APIs and kinds; none where the API server does not serve them.
async fn preset_policies(
    client: &Client,
    policy_api: &PolicyApi,
    managed: &ListParams,
) -> Result<Vec<(Api<DynamicObject>, &'static str, Vec<DynamicObject>)>> {
    let Ok(version) = policy_api.served_version(client).await? else {
        return Ok(Vec::new());
    };
    let mut listed = Vec::new();
    for (api, kind) in PolicyObjects::apis(client, version).into_iter().rev() {
        let objects = api
            .list(managed)
            .await
            .map_err(|e| Error::Orphans(Box::new(e)))?
            .items;
        listed.push((api, kind, objects));
    }
    Ok(listed)
}

/// Deletes the managed `InitializerConfiguration`s among `found` whose Initializer no longer
/// exists, then releases what still waits on their names (nothing would remove them); returns
/// their names.
pub(super) async fn remove_legacy_orphans(
    client: &Client,
    found: Vec<kube::api::DynamicObject>,
    initializers: &[String],
) -> Result<Vec<String>> {
    let configurations = Configurations::new(client.clone(), Backend::InitializerConfiguration);
    let orphaned = orphans(&found, initializers);
    for configuration in found.iter().filter(|c| orphaned.contains(&c.name_any())) {
        let name = configuration.name_any();
        configurations.deregister(&name).await?;
        info!(configuration = %name, "removed orphaned InitializerConfiguration");
        for (pending_name, rules) in own_pending_names(configuration) {
            let reached = legacy_reached(client, &rules).await?;
            let released = apply::legacy::release(client, &reached, &pending_name).await;
            info!(configuration = %name, %pending_name, released = released.count, "released what waited on an orphaned configuration");
        }
    }
    Ok(orphaned)
}

/// What an orphaned `InitializerConfiguration` registers under the one name the operator gives
/// the Initializer it was made for (`<base>.initializers.initializer.dev` for the configuration
/// `initializer-<base>`): a name someone added to it is another initializer's, and stripping it
/// from pending objects would let them skip that initializer.
pub fn own_pending_names(
    configuration: &kube::api::DynamicObject,
) -> Vec<(String, Vec<initializer_crds::InterceptRule>)> {
    let own = configuration
        .metadata
        .name
        .as_deref()
        .and_then(naming::webhook_of_configuration);
    build::legacy::registered(configuration)
        .into_iter()
        .filter(|(name, _)| Some(name) == own.as_ref())
        .collect()
}

/// Removes orphans at start, whenever a managed configuration changes, and every minute (an
/// Initializer removed without its finalizer leaves no event on the configuration); the
/// minute sweep also stops supervising, and forgets, Initializers that no longer exist. The same watch keeps
/// `configurations`, the copy the supervisor checks healthy registrations against.
pub async fn watch_orphans(
    client: Client,
    supervisor: Supervisor,
    memory: Memory,
    configurations: Writer<MutatingWebhookConfiguration>,
    shutdown: CancellationToken,
) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut events = watcher(api, watcher::Config::default().labels(&managed_selector()))
        .default_backoff()
        .reflect(configurations)
        .applied_objects()
        .boxed();
    let mut sweep = tokio::time::interval(Duration::from_secs(60));
    let initializers: Api<Initializer> = Api::all(client.clone());
    // Every change of a managed configuration sweeps: the API server's discovery is asked once
    // a minute, not each time.
    let policy_api = PolicyApi::default();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = sweep.tick() => {
                if let Ok(list) = initializers.list(&ListParams::default()).await {
                    let names: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
                    supervisor.retain(&names);
                    memory.retain(&names);
                }
            }
            event = events.next() => {
                if event.is_none() {
                    return;
                }
            }
        }
        if let Err(e) = remove_orphans(&client, &policy_api).await {
            warn!(error = %e, "orphan sweep failed");
        }
    }
}
