//! Watch-fed caches of what the kubelet reads (Pods, Secrets, ConfigMaps), and a change counter
//! that wakes every pod worker when any of them changes.

use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::env::Lookup;

/// Every Pod, Secret and ConfigMap of the cluster (not only this node's), kept current by
/// watches: pod workers read these instead of asking the API.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub secrets: Store<Secret>,
    pub config_maps: Store<ConfigMap>,
    changes: watch::Sender<u64>,
    config_changes: watch::Sender<u64>,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches").finish_non_exhaustive()
    }
}

/// A store of every `K`, fed by a watch until `shutdown`. Every event bumps `changes` (and `also`,
/// when given); a failed watch is retried with backoff.
pub fn feed<K>(
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
            secrets: feed(client, changes.clone(), config.clone(), shutdown),
            config_maps: feed(client, changes.clone(), config, shutdown),
            changes,
            config_changes,
        }
    }

    /// Waits until every cache has its first complete listing.
    pub async fn ready(&self) -> Result<(), crate::Error> {
        let e = |e: reflector::store::WriterDropped| crate::Error::Watch(e.to_string());
        self.pods.wait_until_ready().await.map_err(e)?;
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

    /// The pod `namespace/name`, once the watch has seen it.
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
