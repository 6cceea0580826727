//! Watch-fed caches of what the sandbox's controllers read (Pods, Deployments, Services,
//! EndpointSlices, Endpoints), and a change counter that wakes both controllers when any of them
//! changes.

use std::time::Duration;

use initializer_node::cache::feed;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::runtime::reflector::{self, Store};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Watch-fed caches of what the workload controllers read; one watch per kind, shared.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub deployments: Store<Deployment>,
    pub services: Store<Service>,
    pub endpoint_slices: Store<EndpointSlice>,
    /// Every v1 Endpoints.
    pub endpoints: Store<Endpoints>,
    changes: watch::Sender<u64>,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches").finish_non_exhaustive()
    }
}

impl Caches {
    /// Starts the watches; they end when `shutdown` is cancelled.
    pub fn start(client: &Client, shutdown: &CancellationToken) -> Self {
        let (changes, _) = watch::channel(0u64);
        Self {
            pods: feed(client, changes.clone(), None, shutdown),
            deployments: feed(client, changes.clone(), None, shutdown),
            services: feed(client, changes.clone(), None, shutdown),
            endpoint_slices: feed(client, changes.clone(), None, shutdown),
            endpoints: feed(client, changes.clone(), None, shutdown),
            changes,
        }
    }

    /// Waits until every cache has its first complete listing.
    pub async fn ready(&self) -> Result<(), super::Error> {
        let e = |e: reflector::store::WriterDropped| super::Error::Watch(e.to_string());
        self.pods.wait_until_ready().await.map_err(e)?;
        self.deployments.wait_until_ready().await.map_err(e)?;
        self.services.wait_until_ready().await.map_err(e)?;
        self.endpoint_slices.wait_until_ready().await.map_err(e)?;
        self.endpoints.wait_until_ready().await.map_err(e)?;
        Ok(())
    }

    /// A receiver that sees a new value after every change to any cache.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// Waits for the next change in `changes`, or `timeout`; false when the loop reading the caches
/// should end (`shutdown`, or the caches are gone).
pub async fn wait_for_change(
    changes: &mut watch::Receiver<u64>,
    shutdown: &CancellationToken,
    timeout: Duration,
) -> bool {
    tokio::select! {
        () = shutdown.cancelled() => false,
        changed = changes.changed() => changed.is_ok(),
        () = tokio::time::sleep(timeout) => true,
    }
}
