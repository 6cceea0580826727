//! Writing an Initializer's NetworkPolicy with the other workload objects, and removing the one
//! written before once none is wanted (`--network-policy` off, or the policy withdrawn), so that
//! the setting is what the cluster holds. Whether a write must wait for the API server to fail
//! open, or the policy is withdrawn, is the reconcile's to decide, from the live policy [`read`]
//! here and the API server's ranges [`read_api_server_ranges`], which every policy follows as
//! soon as they change ([`api_server_range_changes`]).

use futures::{Stream, StreamExt, future};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::{Ownership, as_read, claim, controller_uid, delete_unless_changed, ownership};
use crate::build::Desired;
use crate::build::network_policy::{
    API_SERVER_NAMESPACE, API_SERVER_SERVICE, Cidr, api_server_ranges,
};
use crate::error::{Error, Result};

const KIND: &str = "NetworkPolicy";

/// The policy the cluster holds under the name and namespace of `named` (the desired policy, or
/// the Service it is named like), whoever wrote it.
pub async fn read<K: Resource>(client: &Client, named: &K) -> Result<Option<NetworkPolicy>> {
    let name = named.name_any();
    let api: Api<NetworkPolicy> =
        Api::namespaced(client.clone(), &named.namespace().unwrap_or_default());
    api.get_opt(&name).await.map_err(|source| Error::Get {
        kind: KIND,
        name,
        source: Box::new(source),
    })
}

/// Whether the API server serves NetworkPolicies (`networking.k8s.io/v1`); taken as served when
/// its discovery cannot be read.
pub async fn served(client: &Client) -> bool {
    match client
        .list_api_group_resources("networking.k8s.io/v1")
        .await
    {
        Ok(list) => list.resources.iter().any(|r| r.name == "networkpolicies"),
        Err(kube::Error::Api(status)) if status.code == 404 => false,
        Err(error) => {
            tracing::warn!(%error, "failed to tell whether the API server serves NetworkPolicies: taken as served");
            true
        }
    }
}

/// The API server's addresses, from the EndpointSlice of the `kubernetes` Service. Empty, with
/// a warning, when it cannot be read or holds none: the caller then leaves the policy as it is.
pub async fn read_api_server_ranges(client: &Client) -> Vec<Cidr> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), API_SERVER_NAMESPACE);
    match api.get_opt(API_SERVER_SERVICE).await {
        Ok(Some(slice)) => {
            let ranges = api_server_ranges(&slice);
            if ranges.is_empty() {
                tracing::warn!(
                    "the API server's EndpointSlice {API_SERVER_NAMESPACE}/{API_SERVER_SERVICE} lists no address: NetworkPolicies stay as they are"
                );
            }
            ranges
        }
        Ok(None) => {
            tracing::warn!(
                "no EndpointSlice {API_SERVER_NAMESPACE}/{API_SERVER_SERVICE} tells the API server's addresses: NetworkPolicies stay as they are; give --api-server-cidrs"
            );
            Vec::new()
        }
        Err(error) => {
            tracing::warn!(%error, "failed to read the API server's addresses from the EndpointSlice {API_SERVER_NAMESPACE}/{API_SERVER_SERVICE}: NetworkPolicies stay as they are");
            Vec::new()
        }
    }
}

/// One item at the first reading of the API server's addresses in the EndpointSlice of the
/// `kubernetes` Service, and one each time they change (an API server replica joins or leaves):
/// every Initializer's policy then follows at once rather than at its next resync, so a replica
/// that joins is kept out for seconds at most. Watched by name, which the ClusterRole's rule
/// naming that slice allows (a list or watch with a `metadata.name` field selector is authorized
/// as a request for that name); while it cannot be watched the policies follow at each reconcile.
pub fn api_server_range_changes(client: Client) -> impl Stream<Item = ()> + Send {
    let api: Api<EndpointSlice> = Api::namespaced(client, API_SERVER_NAMESPACE);
    let config = watcher::Config::default().fields(&format!("metadata.name={API_SERVER_SERVICE}"));
    watcher(api, config)
        .default_backoff()
        .applied_objects()
        .filter_map(|slice| {
            future::ready(match slice {
                Ok(slice) => Some(api_server_ranges(&slice)),
                Err(error) => {
                    tracing::warn!(%error, "failed to watch the API server's EndpointSlice {API_SERVER_NAMESPACE}/{API_SERVER_SERVICE}: NetworkPolicies follow its addresses at each reconcile only");
                    None
                }
            })
        })
        .scan(None, |last: &mut Option<Vec<Cidr>>, ranges| {
            let changed = last.as_ref() != Some(&ranges);
            *last = Some(ranges);
            future::ready(Some(changed))
        })
        .filter_map(|changed| future::ready(changed.then_some(())))
}

/// With a policy desired, [`claim`] it (`Some`); without, remove this Initializer's policy of
/// the workload's name if one is there (`None`).
pub async fn claim_or_remove(client: &Client, desired: &Desired) -> Result<Option<Ownership>> {
    match &desired.network_policy {
        Some(policy) => claim(client, policy).await.map(Some),
        None => remove(client, desired).await.map(|_| None),
    }
}

/// Applies the claimed policy, as every other workload object is applied.
pub async fn put(
    client: &Client,
    desired: &Desired,
    claimed: Option<Ownership>,
    uninitialized_creates: bool,
) -> Result<()> {
    match (&desired.network_policy, claimed) {
        (Some(policy), Some(claimed)) => super::put(client, policy, claimed, uninitialized_creates)
            .await
            .map(drop),
        _ => Ok(()),
    }
}

/// Deletes the policy named like the workload's Service when it is this Initializer's (label
/// and controller reference), on its UID and resourceVersion; someone else's is left alone.
/// Returns whether it went.
async fn remove(client: &Client, desired: &Desired) -> Result<bool> {
    let service = &desired.service;
    let Some(live) = read(client, service).await? else {
        return Ok(false);
    };
    let name = service.name_any();
    let api: Api<NetworkPolicy> =
        Api::namespaced(client.clone(), &service.namespace().unwrap_or_default());
    if ownership(Some(&live.metadata), controller_uid(service.meta())) != Ownership::Ours {
        return Ok(false);
    }
    let removed = delete_unless_changed(&api, &name, as_read(&live.metadata))
        .await
        .map_err(|source| Error::Delete {
            kind: KIND,
            name: name.clone(),
            source: Box::new(source),
        })?;
    if removed {
        tracing::info!(%name, namespace = ?service.namespace(), "removed the NetworkPolicy: none is wanted (--network-policy is off, or it was withdrawn)");
    }
    Ok(removed)
}
