//! One EndpointSlice watch per namespace, shared by every Initializer whose Service is there.
//!
//! A watch holds a connection to the API server for as long as it runs (kube's client speaks
//! HTTP/1.1), and a watch per Initializer was most of the leader's memory at 100 Initializers
//! (issue 29; `docs/src/design/2026-11-jemalloc.md`). The operator's rights over EndpointSlices
//! are per namespace (its Role, and the RoleBindings an administrator adds where workloads
//! run), so the shared watch is per namespace too, never cluster-wide.
//!
//! [`SliceTable`] is the pure part: the namespace's slices by Service, fed the watch's events.
//! [`EndpointSliceWatches`] runs one watch per namespace while someone subscribes to it and
//! hands each subscriber its Service's slices through a `watch` channel.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tracing::warn;

/// The label the EndpointSlice controller puts on a slice: the name of its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming who maintains a slice, and the EndpointSlice controller's value of it.
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const ENDPOINT_SLICE_CONTROLLER: &str = "endpointslice-controller.k8s.io";

/// One slice's ready endpoints: how many, and the addresses to probe.
pub(super) type SliceEndpoints = (u32, Vec<SocketAddr>);

/// A Service's slices by name; `None` until the namespace's watch has listed them.
pub(super) type ServiceSlices = Option<BTreeMap<String, SliceEndpoints>>;

/// A slice as the table is fed it: its name, and its Service and ready endpoints when it is the
/// EndpointSlice controller's slice of that Service (`None`: a slice the table ignores).
type Slice = (String, Option<(String, SliceEndpoints)>);

/// What one watch event changed.
#[derive(Debug, PartialEq, Eq)]
enum Changed {
    /// Nothing a subscriber sees (a slice buffered while the watch lists).
    Nothing,
    /// The slices of these Services.
    Services(Vec<String>),
    /// A new list replaced the whole table: every Service may have changed.
    Everything,
}

/// The EndpointSlices of one namespace, by the Service they belong to (pure).
#[derive(Debug, Default)]
struct SliceTable {
    /// Whether a list has completed: before it, no Service's slices are known.
    listed: bool,
    /// Service → slice name → its endpoints.
    by_service: HashMap<String, BTreeMap<String, SliceEndpoints>>,
    /// Slice name → its Service, so a slice relabelled to another Service leaves the first.
    service_of: HashMap<String, String>,
    /// The slices of a list in progress (a relist replaces the table only once it is complete).
    listing: Option<Vec<(String, String, SliceEndpoints)>>,
}

impl SliceTable {
    /// The slices of `service`: `None` until listed, then an empty map when it has none.
    fn of(&self, service: &str) -> ServiceSlices {
        self.listed
            .then(|| self.by_service.get(service).cloned().unwrap_or_default())
    }

    fn apply(&mut self, event: watcher::Event<Slice>) -> Changed {
        match event {
            watcher::Event::Init => {
                self.listing = Some(Vec::new());
                Changed::Nothing
            }
            watcher::Event::InitApply((name, slice)) => {
                if let (Some(listing), Some((service, endpoints))) = (self.listing.as_mut(), slice)
                {
                    listing.push((name, service, endpoints));
                }
                Changed::Nothing
            }
            watcher::Event::InitDone => {
                self.by_service.clear();
                self.service_of.clear();
                for (name, service, endpoints) in self.listing.take().unwrap_or_default() {
                    self.insert(name, service, endpoints);
                }
                self.listed = true;
                Changed::Everything
            }
            watcher::Event::Apply((name, None)) => {
                Changed::Services(self.remove(&name).into_iter().collect())
            }
            watcher::Event::Apply((name, Some((service, endpoints)))) => {
                let mut changed = self.remove(&name).into_iter().collect::<Vec<_>>();
                if !changed.contains(&service) {
                    changed.push(service.clone());
                }
                self.insert(name, service, endpoints);
                Changed::Services(changed)
            }
            watcher::Event::Delete((name, _)) => {
                Changed::Services(self.remove(&name).into_iter().collect())
            }
        }
    }

    fn insert(&mut self, name: String, service: String, endpoints: SliceEndpoints) {
        self.by_service
            .entry(service.clone())
            .or_default()
            .insert(name.clone(), endpoints);
        self.service_of.insert(name, service);
    }

    /// Removes slice `name`; the Service it belonged to, if it was known.
    fn remove(&mut self, name: &str) -> Option<String> {
        let service = self.service_of.remove(name)?;
        if let Some(slices) = self.by_service.get_mut(&service) {
            slices.remove(name);
            if slices.is_empty() {
                self.by_service.remove(&service);
            }
        }
        Some(service)
    }
}

/// A slice as the table is fed it. Only the EndpointSlice controller's slices of a Service
/// count: its managed-by label, and a controlling owner reference to the Service its
/// service-name label names. Whoever may write EndpointSlices in the namespace could otherwise
/// hand the probe addresses to dial, fail it with a slice of unready endpoints, or churn the
/// list so that a hung initializer is never judged.
fn entry(slice: &EndpointSlice) -> Slice {
    let labels = slice.labels();
    let trusted = labels.get(SERVICE_NAME_LABEL).filter(|service| {
        labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(ENDPOINT_SLICE_CONTROLLER)
            && slice.owner_references().iter().any(|owner| {
                owner.controller == Some(true)
                    && owner.api_version == "v1"
                    && owner.kind == "Service"
                    && &owner.name == *service
            })
    });
    let endpoints = || (ready_endpoints(slice), crate::probe::ready_addresses(slice));
    (
        slice.name_any(),
        trusted.map(|service| (service.clone(), endpoints())),
    )
}

/// Ready endpoints in a slice; an endpoint without a `ready` condition counts as ready, as the
/// EndpointSlice API says consumers should treat an unknown state.
pub fn ready_endpoints(slice: &EndpointSlice) -> u32 {
    let ready = slice
        .endpoints
        .iter()
        .flatten()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .count();
    u32::try_from(ready).unwrap_or(u32::MAX)
}

/// A namespace's table and the channel of each Service someone subscribed to.
#[derive(Default)]
struct Shared {
    table: SliceTable,
    subscribers: HashMap<String, watch::Sender<ServiceSlices>>,
}

impl Shared {
    fn publish(&mut self, changed: Changed) {
        let services: Vec<String> = match changed {
            Changed::Nothing => return,
            Changed::Services(services) => services,
            Changed::Everything => self.subscribers.keys().cloned().collect(),
        };
        for service in services {
            if let Some(sender) = self.subscribers.get(&service) {
                let now = self.table.of(&service);
                sender.send_if_modified(|current| {
                    let changed = *current != now;
                    if changed {
                        *current = now;
                    }
                    changed
                });
            }
        }
        // A Service nobody subscribes to any longer (its Initializer gone) keeps no channel.
        self.subscribers
            .retain(|_, sender| sender.receiver_count() > 0);
    }
}

/// One namespace's running watch; dropping the last subscription stops it.
struct NamespaceWatch {
    shared: Arc<Mutex<Shared>>,
    task: AbortHandle,
}

impl Drop for NamespaceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A subscriber's view of its Service's slices; the namespace's watch runs while it is held.
pub(super) struct Subscription {
    pub slices: watch::Receiver<ServiceSlices>,
    _watch: Arc<NamespaceWatch>,
}

/// The EndpointSlice watches of one supervisor, one per namespace in use.
pub(super) struct EndpointSliceWatches {
    client: Client,
    namespaces: Mutex<HashMap<String, Weak<NamespaceWatch>>>,
}

impl EndpointSliceWatches {
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            namespaces: Mutex::new(HashMap::new()),
        }
    }

    /// The slices of Service `service` in `namespace`, watched with every other subscriber
    /// of that namespace (the watch starts with the first subscriber).
    pub(super) fn subscribe(&self, namespace: &str, service: &str) -> Subscription {
        let mut namespaces = self
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        namespaces.retain(|_, watch| watch.strong_count() > 0);
        let watch = match namespaces.get(namespace).and_then(Weak::upgrade) {
            Some(watch) => watch,
            None => {
                let watch = Arc::new(self.start(namespace));
                namespaces.insert(namespace.to_string(), Arc::downgrade(&watch));
                watch
            }
        };
        let slices = {
            let mut shared = watch.shared.lock().unwrap_or_else(PoisonError::into_inner);
            let Shared { table, subscribers } = &mut *shared;
            subscribers
                .entry(service.to_string())
                .or_insert_with(|| watch::channel(table.of(service)).0)
                .subscribe()
        };
        Subscription {
            slices,
            _watch: watch,
        }
    }

    /// How many namespaces are watched now.
    #[cfg(test)]
    fn watched(&self) -> usize {
        let namespaces = self
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        namespaces.values().filter(|w| w.strong_count() > 0).count()
    }

    fn start(&self, namespace: &str) -> NamespaceWatch {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), namespace);
        let task = tokio::spawn(run(api, shared.clone(), namespace.to_string()));
        NamespaceWatch {
            shared,
            task: task.abort_handle(),
        }
    }
}

/// The watch of one namespace: every event goes through the table to the subscribers.
async fn run(api: Api<EndpointSlice>, shared: Arc<Mutex<Shared>>, namespace: String) {
    // Only slices that belong to a Service: the others can never be an initializer's.
    let config = watcher::Config::default().labels(SERVICE_NAME_LABEL);
    let mut stream = watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                warn!(%namespace, error = %e, "endpoint watch failed");
                continue;
            }
        };
        let event = match event {
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitDone => watcher::Event::InitDone,
            watcher::Event::InitApply(slice) => watcher::Event::InitApply(entry(&slice)),
            watcher::Event::Apply(slice) => watcher::Event::Apply(entry(&slice)),
            watcher::Event::Delete(slice) => watcher::Event::Delete(entry(&slice)),
        };
        let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = shared.table.apply(event);
        shared.publish(changed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(name: &str, service: &str, ready: u32) -> Slice {
        let addresses = (0..ready)
            .map(|i| SocketAddr::from(([10, 0, 0, u8::try_from(i).unwrap()], 8443)))
            .collect();
        (name.into(), Some((service.into(), (ready, addresses))))
    }

    fn listed(slices: Vec<Slice>) -> SliceTable {
        let mut table = SliceTable::default();
        table.apply(watcher::Event::Init);
        for s in slices {
            table.apply(watcher::Event::InitApply(s));
        }
        assert_eq!(table.apply(watcher::Event::InitDone), Changed::Everything);
        table
    }

    fn ready(table: &SliceTable, service: &str) -> Option<u32> {
        table.of(service).map(|s| s.values().map(|(n, _)| n).sum())
    }

    #[test]
    fn nothing_is_known_of_any_service_until_the_first_list_completes() {
        let mut table = SliceTable::default();
        assert_eq!(table.of("a"), None);
        table.apply(watcher::Event::Init);
        assert_eq!(
            table.apply(watcher::Event::InitApply(slice("a-1", "a", 1))),
            Changed::Nothing
        );
        assert_eq!(
            table.of("a"),
            None,
            "a list in progress is not the namespace"
        );
        table.apply(watcher::Event::InitDone);
        assert_eq!(ready(&table, "a"), Some(1));
        assert_eq!(
            ready(&table, "b"),
            Some(0),
            "listed, and no slice: none ready (which deregisters at once)"
        );
    }

    #[test]
    fn each_service_sees_only_its_own_slices_and_only_its_changes() {
        let mut table = listed(vec![slice("a-1", "a", 1), slice("b-1", "b", 2)]);
        assert_eq!(
            table.apply(watcher::Event::Apply(slice("a-2", "a", 3))),
            Changed::Services(vec!["a".into()])
        );
        assert_eq!(ready(&table, "a"), Some(4));
        assert_eq!(ready(&table, "b"), Some(2));
        assert_eq!(
            table.apply(watcher::Event::Delete(slice("b-1", "b", 2))),
            Changed::Services(vec!["b".into()])
        );
        assert_eq!(ready(&table, "b"), Some(0));
        assert_eq!(
            table.apply(watcher::Event::Delete(slice("gone", "c", 0))),
            Changed::Services(vec![]),
            "a slice never seen changes nobody"
        );
    }

    #[test]
    fn a_slice_moved_to_another_service_leaves_the_first() {
        let mut table = listed(vec![slice("s", "a", 1)]);
        assert_eq!(
            table.apply(watcher::Event::Apply(slice("s", "b", 1))),
            Changed::Services(vec!["a".into(), "b".into()])
        );
        assert_eq!(ready(&table, "a"), Some(0));
        assert_eq!(ready(&table, "b"), Some(1));
    }

    #[test]
    fn a_relist_replaces_the_table_only_once_complete() {
        let mut table = listed(vec![slice("a-1", "a", 1), slice("b-1", "b", 1)]);
        table.apply(watcher::Event::Init);
        table.apply(watcher::Event::InitApply(slice("a-1", "a", 2)));
        assert_eq!(
            ready(&table, "a"),
            Some(1),
            "the old list holds until the new completes"
        );
        assert_eq!(ready(&table, "b"), Some(1));
        table.apply(watcher::Event::InitDone);
        assert_eq!(ready(&table, "a"), Some(2));
        assert_eq!(ready(&table, "b"), Some(0), "gone while the watch was down");
    }

    #[test]
    fn subscribers_are_told_only_of_their_services_changes() {
        let mut shared = Shared::default();
        let (a_tx, mut a) = watch::channel(None);
        let (b_tx, mut b) = watch::channel(None);
        shared.subscribers.insert("a".into(), a_tx);
        shared.subscribers.insert("b".into(), b_tx);
        let changed = shared.table.apply(watcher::Event::Init);
        shared.publish(changed);
        let changed = shared.table.apply(watcher::Event::InitDone);
        shared.publish(changed);
        assert!(a.has_changed().unwrap() && b.has_changed().unwrap());
        a.mark_unchanged();
        b.mark_unchanged();
        let changed = shared
            .table
            .apply(watcher::Event::Apply(slice("a-1", "a", 1)));
        shared.publish(changed);
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        drop(b);
        let changed = shared
            .table
            .apply(watcher::Event::Apply(slice("a-1", "a", 2)));
        shared.publish(changed);
        assert_eq!(
            shared.subscribers.keys().collect::<Vec<_>>(),
            ["a"],
            "the channel of a Service nobody watches is dropped"
        );
    }

    /// A slice of Service `service` with one ready endpoint at `10.0.0.9`, as the EndpointSlice
    /// controller writes it.
    fn controller_slice(service: &str) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("{service}-x1"),
                "labels": {SERVICE_NAME_LABEL: service, MANAGED_BY_LABEL: ENDPOINT_SLICE_CONTROLLER},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": service,
                    "uid": "u", "controller": true, "blockOwnerDeletion": true}],
            },
            "addressType": "IPv4",
            "ports": [{"port": 8443}],
            "endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": true}}],
        }))
        .unwrap()
    }

    #[test]
    fn the_endpoint_slice_controllers_slice_of_the_service_counts() {
        let (name, trusted) = entry(&controller_slice("a"));
        assert_eq!(name, "a-x1");
        let (service, (ready, addresses)) = trusted.expect("the controller's slice counts");
        assert_eq!((service.as_str(), ready), ("a", 1));
        assert_eq!(addresses, [SocketAddr::from(([10, 0, 0, 9], 8443))]);
    }

    #[test]
    fn a_slice_anyone_else_wrote_is_ignored() {
        let forged = |change: fn(&mut EndpointSlice)| {
            let mut slice = controller_slice("a");
            change(&mut slice);
            entry(&slice).1
        };
        assert_eq!(
            forged(|s| {
                s.labels_mut().remove(MANAGED_BY_LABEL);
            }),
            None,
            "without the controller's managed-by label"
        );
        assert_eq!(
            forged(|s| {
                s.labels_mut()
                    .insert(MANAGED_BY_LABEL.into(), "someone.example.com".into());
            }),
            None,
            "managed by someone else"
        );
        assert_eq!(
            forged(|s| s.metadata.owner_references = None),
            None,
            "owned by nothing"
        );
        assert_eq!(
            forged(|s| {
                s.owner_references_mut()[0].name = "b".into();
            }),
            None,
            "owned by another Service than the one it names"
        );
        assert_eq!(
            forged(|s| {
                s.owner_references_mut()[0].controller = None;
            }),
            None,
            "owned by the Service, but not as its controller's"
        );
        assert_eq!(
            forged(|s| {
                s.owner_references_mut()[0].kind = "ConfigMap".into();
            }),
            None,
            "owned by something of the same name that is no Service"
        );
    }

    #[test]
    fn a_slice_that_stops_being_the_controllers_leaves_its_service() {
        let mut table = listed(vec![slice("a-1", "a", 1), slice("a-2", "a", 1)]);
        assert_eq!(
            table.apply(watcher::Event::Apply(("a-2".into(), None))),
            Changed::Services(vec!["a".into()])
        );
        assert_eq!(ready(&table, "a"), Some(1));
        let mut relisted = SliceTable::default();
        relisted.apply(watcher::Event::Init);
        relisted.apply(watcher::Event::InitApply(slice("a-1", "a", 1)));
        relisted.apply(watcher::Event::InitApply(("forged".into(), None)));
        relisted.apply(watcher::Event::InitDone);
        assert_eq!(ready(&relisted, "a"), Some(1));
    }

    #[tokio::test]
    async fn initializers_in_one_namespace_share_one_watch_that_stops_with_the_last() {
        // No API server answers here: the watches retry in the background, which is enough to
        // count them.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let watches = EndpointSliceWatches::new(Client::try_from(config).unwrap());
        let a = watches.subscribe("ops", "a");
        let b = watches.subscribe("ops", "b");
        let c = watches.subscribe("elsewhere", "c");
        assert_eq!(watches.watched(), 2);
        assert!(Arc::ptr_eq(&a._watch, &b._watch));
        drop(a);
        assert_eq!(watches.watched(), 2, "b still subscribes in ops");
        drop(b);
        assert_eq!(watches.watched(), 1);
        drop(c);
        assert_eq!(watches.watched(), 0);
    }
}
