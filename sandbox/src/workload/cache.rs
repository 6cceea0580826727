//! Watch-fed caches of the objects the workload controllers read, and a change counter that
//! wakes every controller when any of them changes.

use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::env::Lookup;

/// The caches.
#[derive(Clone)]
pub struct Caches {
    /// Every pod.
    pub pods: Store<Pod>,
    /// Every Deployment.
    pub deployments: Store<Deployment>,
    /// Every Service.
    pub services: Store<Service>,
    /// Every EndpointSlice.
    pub endpoint_slices: Store<EndpointSlice>,
    /// Every v1 Endpoints.
    pub endpoints: Store<Endpoints>,
    /// Every Secret.
    pub secrets: Store<Secret>,
    /// Every ConfigMap.
    pub config_maps: Store<ConfigMap>,
    changes: watch::Sender<u64>,
    config_changes: watch::Sender<u64>,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches").finish_non_exhaustive()
    }
}

fn feed<K>(
    client: &Client,
    changes: watch::Sender<u64>,
    also: Option<watch::Sender<u64>>,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let api: Api<K> = Api::all(client.clone());
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                event = stream.next() => match event {
                    Some(Ok(_)) => {
                        if let Some(also) = &also {
                            also.send_modify(|n| *n = n.wrapping_add(1));
                        }
                        changes.send_modify(|n| *n = n.wrapping_add(1));
                    }
                    Some(Err(e)) => tracing::debug!(error = %e, kind = K::kind(&()).as_ref(), "watch failed; retrying"),
                    None => break,
                },
            }
        }
    });
    store
}

impl Caches {
    /// Starts the watches; they end when `shutdown` is cancelled.
    pub fn start(client: &Client, shutdown: &CancellationToken) -> Self {
        let (changes, _) = watch::channel(0u64);
        let (config_changes, _) = watch::channel(0u64);
        let config = Some(config_changes.clone());
        Self {
            pods: feed(client, changes.clone(), None, shutdown),
            deployments: feed(client, changes.clone(), None, shutdown),
            services: feed(client, changes.clone(), None, shutdown),
            endpoint_slices: feed(client, changes.clone(), None, shutdown),
            endpoints: feed(client, changes.clone(), None, shutdown),
            secrets: feed(client, changes.clone(), config.clone(), shutdown),
            config_maps: feed(client, changes.clone(), config, shutdown),
            changes,
            config_changes,
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
        self.secrets.wait_until_ready().await.map_err(e)?;
        self.config_maps.wait_until_ready().await.map_err(e)?;
        Ok(())
    }

    /// A receiver that sees a new value after every change to any cache.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The number of Secret and ConfigMap changes seen so far (a counter that only moves on).
    pub fn config_generation(&self) -> u64 {
        *self.config_changes.borrow()
    }

    /// Wakes every subscriber (after a local change that no watch reports, such as a probe).
    pub fn poke(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// One pod.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods.get(&ObjectRef::new(name).within(namespace))
    }
}

impl Lookup for Caches {
    fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.secrets.get(&ObjectRef::new(name).within(namespace))
    }

    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.config_maps
            .get(&ObjectRef::new(name).within(namespace))
    }
}
