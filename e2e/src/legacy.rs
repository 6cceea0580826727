//! The Kubernetes 1.7–1.13 Initializers as the legacy scenarios and the demo see them: the
//! `InitializerConfiguration` kind (`admissionregistration.k8s.io/v1alpha1`), the
//! `metadata.initializers` pending list of any object, and the `includeUninitialized=true`
//! requests that show objects still waiting on it.
//!
//! k8s-openapi has neither (they were removed in Kubernetes 1.14), so the configuration is a
//! small type of our own and objects with pending lists are read and written as raw JSON: a
//! typed `Deployment` would drop `metadata.initializers` on the way in and out. Field names and
//! query parameters are those of `k8s.io/api/admissionregistration/v1alpha1/types.go` and
//! `k8s.io/apimachinery/pkg/apis/meta/v1/types.go` (`Initializers`, `Initializer`,
//! `IncludeUninitialized`) of Kubernetes 1.13.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt;
use initializer_crds::{Initializer, constants};
use initializer_test_support::api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::ops;
use crate::wait::{self, Check};

/// The API group and version the legacy configurations are served under.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1alpha1";

/// The status detail (`status.details`) holding how many objects the operator released from a
/// dead initializer's pending name the last time it removed its configuration.
pub const RELEASED_DETAIL: &str = "releasedObjects";
/// The status detail holding the name the initializer is pending as.
pub const PENDING_NAME_DETAIL: &str = "pendingName";
/// The reason of the Event the operator emits when it releases pending objects.
pub const RELEASED_EVENT_REASON: &str = "ReleasedPendingObjects";

/// An `InitializerConfiguration`: which initializers the API server appends to the pending
/// list of new objects, by the objects' group, version and resource.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct InitializerConfiguration {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The initializers, in the order their names are appended.
    #[serde(default)]
    pub initializers: Vec<LegacyInitializer>,
}

/// One initializer of a configuration.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct LegacyInitializer {
    /// The fully qualified name put in `metadata.initializers.pending`.
    pub name: String,
    /// The resources whose new objects get that name.
    #[serde(default)]
    pub rules: Vec<LegacyRule>,
}

/// The resources one initializer applies to (`*` matches all).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LegacyRule {
    /// API groups (`""` the core group).
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// API versions.
    #[serde(default)]
    pub api_versions: Vec<String>,
    /// Resources.
    #[serde(default)]
    pub resources: Vec<String>,
}

impl k8s_openapi::Resource for InitializerConfiguration {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = "admissionregistration.k8s.io";
    const KIND: &'static str = "InitializerConfiguration";
    const VERSION: &'static str = "v1alpha1";
    const URL_PATH_SEGMENT: &'static str = "initializerconfigurations";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for InitializerConfiguration {
    const LIST_KIND: &'static str = "InitializerConfigurationList";
}

impl k8s_openapi::Metadata for InitializerConfiguration {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl InitializerConfiguration {
    /// The names this configuration appends to pending lists.
    pub fn names(&self) -> Vec<String> {
        self.initializers.iter().map(|i| i.name.clone()).collect()
    }
}

/// Whether a legacy configuration belongs to the Initializer `name`: it carries
/// `initializer.dev/initializer=<name>`, or it has the name the operator gives the webhook
/// configuration of a short-named Initializer (`initializer-<name>`).
pub fn belongs_to(configuration: &InitializerConfiguration, name: &str) -> bool {
    configuration
        .labels()
        .get(constants::INITIALIZER_LABEL)
        .is_some_and(|value| value == name)
        || configuration.name_any() == format!("initializer-{name}")
}

/// The legacy configurations of the Initializer `name`.
pub async fn configurations_of(
    client: &Client,
    name: &str,
) -> anyhow::Result<Vec<InitializerConfiguration>> {
    let api = Api::all(client.clone());
    let what = "InitializerConfigurations";
    ops::list_matching(&api, &ListParams::default(), what, |c| belongs_to(c, name)).await
}

/// Whether the API server serves `InitializerConfiguration` (discovery of
/// `admissionregistration.k8s.io/v1alpha1` lists it).
pub async fn served(client: &Client) -> anyhow::Result<bool> {
    let (code, body) = api::raw(
        client,
        "GET",
        "/apis/admissionregistration.k8s.io/v1alpha1",
        None,
        None,
        None,
    )
    .await?;
    Ok(code == 200
        && body["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["name"] == "initializerconfigurations")))
}

/// Waits until the Initializer is registered the legacy way: its status says so and its
/// `InitializerConfiguration` exists. Returns the configuration and when it was first seen.
pub async fn wait_registered(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<(InitializerConfiguration, Instant)> {
    wait::until(
        format!("Initializer {name} to be registered with an InitializerConfiguration"),
        timeout,
        || async {
            let initializer = ops::initializer(client, name).await?;
            let mut configurations = configurations_of(client, name).await?;
            let webhooks = ops::configurations_of(client, name).await?;
            if !webhooks.is_empty() {
                bail!(
                    "Initializer {name} asked for the InitializerConfiguration backend but got \
                     MutatingWebhookConfiguration {}",
                    webhooks[0].name_any()
                );
            }
            Ok(
                match (ops::status_registered(&initializer), configurations.pop()) {
                    (true, Some(configuration)) => Check::Done((configuration, Instant::now())),
                    (_, configuration) => Check::Pending(format!(
                        "{}; InitializerConfiguration {}",
                        ops::describe(&initializer),
                        configuration.map_or("absent".to_string(), |c| c.name_any())
                    )),
                },
            )
        },
    )
    .await
}

/// A status detail of an Initializer.
pub fn detail<'a>(initializer: &'a Initializer, key: &str) -> Option<&'a str> {
    initializer
        .status
        .as_ref()?
        .details
        .get(key)
        .map(String::as_str)
}

/// How many objects the operator reports it released (`status.details.releasedObjects`).
pub fn released_objects(initializer: &Initializer) -> Option<i64> {
    detail(initializer, RELEASED_DETAIL)?.parse().ok()
}

/// The names in an object's `metadata.initializers.pending`, first first.
pub fn pending_names(object: &Value) -> Vec<String> {
    object["metadata"]["initializers"]["pending"]
        .as_array()
        .map(|pending| {
            pending
                .iter()
                .filter_map(|p| p["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the object is initialized: no pending name left (and no failure result).
pub fn is_initialized(object: &Value) -> bool {
    pending_names(object).is_empty() && object["metadata"]["initializers"]["result"].is_null()
}

/// The container names of a raw Deployment's pod template.
pub fn template_containers(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|containers| {
            containers
                .iter()
                .filter_map(|c| c["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The collection path of Deployments in `namespace`.
pub fn deployments_path(namespace: &str) -> String {
    format!("/apis/apps/v1/namespaces/{namespace}/deployments")
}

/// `object` with its `metadata.initializers.pending` set to `pending` (as the walkthrough's
/// initializer Deployment sets `pending: []` to exclude itself).
pub fn with_pending(mut object: Value, pending: &[&str]) -> Value {
    let pending: Vec<Value> = pending.iter().map(|name| json!({"name": name})).collect();
    object["metadata"]["initializers"] = json!({"pending": pending});
    object
}

/// Creates `object` in the collection `path` with `?includeUninitialized=true`: the API
/// server answers at once (202 when names are pending) with the object as stored, pending
/// names included, instead of waiting for them to be removed.
pub async fn create_uninitialized(
    client: &Client,
    path: &str,
    object: &Value,
) -> anyhow::Result<Value> {
    let uri = format!("{path}?includeUninitialized=true");
    let (code, body) = api::raw(
        client,
        "POST",
        &uri,
        Some("application/json"),
        Some("application/json"),
        Some(object.clone()),
    )
    .await?;
    // 202 Accepted when the object is stored uninitialized (the 1.7–1.13 create handler), 201
    // when nothing was pending.
    if code != 201 && code != 202 {
        bail!("POST {uri} answered {code}: {body}");
    }
    Ok(body)
}

/// Gets `path/name` with `?includeUninitialized=true`; `None` when it does not exist.
pub async fn get_uninitialized(
    client: &Client,
    path: &str,
    name: &str,
) -> anyhow::Result<Option<Value>> {
    let uri = format!("{path}/{name}?includeUninitialized=true");
    let (code, body) = api::raw(client, "GET", &uri, None, None, None).await?;
    match code {
        200 => Ok(Some(body)),
        404 => Ok(None),
        _ => bail!("GET {uri} answered {code}: {body}"),
    }
}

/// Lists the collection `path`, with the uninitialized objects when `include_uninitialized`.
pub async fn list(
    client: &Client,
    path: &str,
    include_uninitialized: bool,
) -> anyhow::Result<Vec<Value>> {
    let uri = if include_uninitialized {
        format!("{path}?includeUninitialized=true")
    } else {
        path.to_string()
    };
    let (code, body) = api::raw(client, "GET", &uri, None, None, None).await?;
    if code != 200 {
        bail!("GET {uri} answered {code}: {body}");
    }
    Ok(body["items"].as_array().cloned().unwrap_or_default())
}

/// The names of the objects in `path` still pending on `initializer`.
pub async fn pending_on(
    client: &Client,
    path: &str,
    initializer: &str,
) -> anyhow::Result<Vec<String>> {
    Ok(list(client, path, true)
        .await?
        .iter()
        .filter(|o| pending_names(o).iter().any(|p| p == initializer))
        .filter_map(|o| o["metadata"]["name"].as_str().map(String::from))
        .collect())
}

/// Waits until `path/name` has no pending name left (and no failure result), and returns it.
pub async fn wait_initialized(
    client: &Client,
    path: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Value> {
    wait::until(format!("{name} to be initialized"), timeout, || async {
        Ok(match get_uninitialized(client, path, name).await? {
            Some(object) if is_initialized(&object) => Check::Done(object),
            Some(object) => Check::Pending(format!("pending {:?}", pending_names(&object))),
            None => Check::Pending("absent".to_string()),
        })
    })
    .await
}

/// Waits for an Event with `reason` about the Initializer `name`, and returns its note.
pub async fn wait_event(
    client: &Client,
    name: &str,
    reason: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    ops::wait_event_about(
        client,
        name,
        format!("an Event {reason} about Initializer {name}"),
        timeout,
        |event| {
            (event.reason.as_deref() == Some(reason))
                .then(|| event.note.clone().unwrap_or_default())
        },
        |about| {
            format!(
                "Events about it: {:?}",
                about.iter().map(|e| e.reason.clone()).collect::<Vec<_>>()
            )
        },
    )
    .await
}

/// `namespace/name` of an object (just `name` when cluster-scoped).
pub fn key(object: &Value) -> String {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_string(),
    }
}

/// Whether the object is one of the operator's canaries (labelled
/// `initializer-operator.io/canary`).
pub fn is_canary(object: &Value) -> bool {
    !object["metadata"]["labels"][constants::CANARY_LABEL].is_null()
}

/// What a [`PendingRecorder`] saw pending on its name, by `namespace/name`.
#[derive(Clone, Debug, Default)]
pub struct SeenPending {
    /// Objects other than the operator's canaries.
    pub objects: BTreeSet<String>,
    /// The operator's canaries.
    pub canaries: BTreeSet<String>,
    /// Each time an object pending on the name was seen again, still there, without it: the
    /// name was removed (by the initializer, or by whoever released it).
    pub removals: Vec<Removal>,
    // Objects pending on the name as last seen.
    pending_now: BTreeSet<String>,
}

/// The name removed from one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    /// `namespace/name`.
    pub key: String,
    /// When the harness saw it.
    pub at: Instant,
    /// Whether the object is one of the operator's canaries.
    pub canary: bool,
}

impl SeenPending {
    /// Takes one sighting of `object` (`deleted`: in a DELETED event) at `at` into account.
    pub fn observe(&mut self, object: &Value, name: &str, deleted: bool, at: Instant) {
        let key = key(object);
        let canary = is_canary(object);
        if deleted {
            self.pending_now.remove(&key);
        } else if pending_names(object).iter().any(|p| p == name) {
            if canary {
                self.canaries.insert(key.clone());
            } else {
                self.objects.insert(key.clone());
            }
            self.pending_now.insert(key);
        } else if self.pending_now.remove(&key) {
            self.removals.push(Removal { key, at, canary });
        }
    }

    /// The removals seen at or after `after`.
    pub fn removed_since(&self, after: Instant) -> Vec<&Removal> {
        self.removals.iter().filter(|r| r.at >= after).collect()
    }
}

/// A background watch, with `includeUninitialized=true`, of one collection: it records every
/// object that was ever seen pending on a given name, so a scenario knows exactly which
/// objects were stuck on a dead initializer (and which were never assigned to it).
pub struct PendingRecorder {
    seen: Arc<Mutex<SeenPending>>,
    errors: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl PendingRecorder {
    /// Starts watching `path` (a collection such as [`deployments_path`], or all namespaces'
    /// `/apis/apps/v1/deployments`) for objects pending on `initializer`.
    pub fn start(client: Client, path: String, initializer: String) -> Self {
        let seen = Arc::new(Mutex::new(SeenPending::default()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(record_pending(
            client,
            path,
            initializer,
            seen.clone(),
            errors.clone(),
        ));
        Self { seen, errors, task }
    }

    /// The objects seen pending on the name so far.
    pub fn seen(&self) -> SeenPending {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// What went wrong with the watch (it lists and watches again after each).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

impl Drop for PendingRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An object of a watch event, as far as pending lists go (kept raw: typed objects lose them).
#[derive(Clone, Debug, Deserialize)]
struct RawObject(Value);

async fn record_pending(
    client: Client,
    path: String,
    initializer: String,
    seen: Arc<Mutex<SeenPending>>,
    errors: Arc<Mutex<Vec<String>>>,
) {
    let note = |object: &Value, deleted: bool| {
        if let Ok(mut seen) = seen.lock() {
            seen.observe(object, &initializer, deleted, Instant::now());
        }
    };
    let fail = |message: String| {
        if let Ok(mut errors) = errors.lock() {
            errors.push(message);
        }
    };
    loop {
        let listed = api::raw(
            &client,
            "GET",
            &format!("{path}?includeUninitialized=true"),
            None,
            None,
            None,
        )
        .await;
        let version = match listed {
            Ok((200, body)) => {
                for object in body["items"].as_array().into_iter().flatten() {
                    note(object, false);
                }
                body["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            }
            Ok((code, body)) => {
                fail(format!("list {path}: {code} {body}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(err) => {
                fail(format!("list {path}: {err:#}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let uri = format!(
            "{path}?watch=true&includeUninitialized=true&allowWatchBookmarks=false&resourceVersion={version}"
        );
        let request = match http::Request::get(&uri).body(Vec::new()) {
            Ok(request) => request,
            Err(err) => {
                fail(format!("watch {uri}: {err}"));
                return;
            }
        };
        match client.request_events::<RawObject>(request).await {
            Ok(events) => {
                let mut events = std::pin::pin!(events);
                while let Some(event) = events.next().await {
                    match event {
                        Ok(kube::api::WatchEvent::Added(RawObject(object)))
                        | Ok(kube::api::WatchEvent::Modified(RawObject(object))) => {
                            note(&object, false)
                        }
                        Ok(kube::api::WatchEvent::Deleted(RawObject(object))) => {
                            note(&object, true)
                        }
                        Ok(kube::api::WatchEvent::Bookmark(_)) => {}
                        Ok(kube::api::WatchEvent::Error(status)) => {
                            fail(format!("watch {path}: {status:?}"));
                            break;
                        }
                        Err(err) => {
                            fail(format!("watch {path}: {err}"));
                            break;
                        }
                    }
                }
            }
            Err(err) => fail(format!("watch {uri}: {err}")),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walkthroughs_configuration_reads_as_served() {
        let configuration: InitializerConfiguration = serde_json::from_value(json!({
            "apiVersion": API_VERSION,
            "kind": "InitializerConfiguration",
            "metadata": {"name": "sidecar"},
            "initializers": [{
                "name": "sidecar.initializer.kubernetes.io",
                "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["deployments"]}],
            }],
        }))
        .unwrap();
        assert_eq!(configuration.names(), ["sidecar.initializer.kubernetes.io"]);
        assert_eq!(
            configuration.initializers[0].rules[0].resources,
            ["deployments"]
        );
        assert!(!belongs_to(&configuration, "x"));
    }

    #[test]
    fn configurations_belong_to_an_initializer_by_label_or_by_name() {
        let mut configuration = InitializerConfiguration::default();
        configuration.metadata.name = Some("initializer-sidecar".into());
        assert!(belongs_to(&configuration, "sidecar"));
        assert!(!belongs_to(&configuration, "other"));
        configuration.metadata.name = Some("initializer-long-0badc0de".into());
        configuration.metadata.labels = Some(
            [(
                constants::INITIALIZER_LABEL.to_string(),
                "other".to_string(),
            )]
            .into(),
        );
        assert!(belongs_to(&configuration, "other"));
    }

    #[test]
    fn pending_names_come_in_order_and_an_empty_list_is_initialized() {
        let stuck = json!({"metadata": {"name": "nginx", "initializers": {
            "pending": [{"name": "a.example.com"}, {"name": "b.example.com"}]}}});
        assert_eq!(pending_names(&stuck), ["a.example.com", "b.example.com"]);
        assert!(!is_initialized(&stuck));
        assert!(is_initialized(&json!({"metadata": {"name": "nginx"}})));
        assert!(is_initialized(
            &json!({"metadata": {"initializers": {"pending": []}}})
        ));
        let failed = json!({"metadata": {"initializers": {"pending": [],
            "result": {"status": "Failure", "code": 403}}}});
        assert!(!is_initialized(&failed));
    }

    #[test]
    fn an_explicit_pending_list_is_written_where_the_api_server_reads_it() {
        let object = with_pending(json!({"metadata": {"name": "x"}}), &[]);
        assert_eq!(object["metadata"]["initializers"], json!({"pending": []}));
        let object = with_pending(object, &["a.example.com"]);
        assert_eq!(pending_names(&object), ["a.example.com"]);
        assert_eq!(object["metadata"]["name"], "x");
    }

    #[test]
    fn objects_are_keyed_by_namespace_and_canaries_known_by_their_label() {
        let canary = json!({"metadata": {"name": "c", "namespace": "ns",
            "labels": {(constants::CANARY_LABEL): "sidecar"}}});
        assert_eq!(key(&canary), "ns/c");
        assert!(is_canary(&canary));
        let plain = json!({"metadata": {"name": "cluster-wide"}});
        assert_eq!(key(&plain), "cluster-wide");
        assert!(!is_canary(&plain));
    }

    #[test]
    fn a_removal_is_a_pending_object_seen_again_without_the_name() {
        let name = "s.ns.initializer-operator.io";
        let at = Instant::now();
        let pending = json!({"metadata": {"name": "a", "namespace": "ns",
            "initializers": {"pending": [{"name": name}]}}});
        let released = json!({"metadata": {"name": "a", "namespace": "ns"}});
        let canary = json!({"metadata": {"name": "c", "namespace": "ns",
            "labels": {(constants::CANARY_LABEL): "s"},
            "initializers": {"pending": [{"name": name}]}}});
        let mut seen = SeenPending::default();
        seen.observe(&released, name, false, at);
        assert!(seen.removals.is_empty(), "never pending: nothing removed");
        seen.observe(&pending, name, false, at);
        seen.observe(&canary, name, false, at);
        seen.observe(&canary, name, true, at);
        assert!(
            seen.removals.is_empty(),
            "a deleted object was not released"
        );
        let later = at + Duration::from_secs(1);
        seen.observe(&released, name, false, later);
        seen.observe(&released, name, false, later);
        assert_eq!(
            seen.removals,
            [Removal {
                key: "ns/a".into(),
                at: later,
                canary: false
            }]
        );
        assert_eq!(seen.removed_since(later).len(), 1);
        assert!(
            seen.removed_since(later + Duration::from_millis(1))
                .is_empty()
        );
        assert_eq!(seen.objects.len(), 1);
        assert_eq!(seen.canaries.len(), 1);
    }

    #[test]
    fn template_containers_of_a_raw_deployment() {
        let deployment = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "nginx"}, {"name": "sidecar-nginx"}]}}}});
        assert_eq!(template_containers(&deployment), ["nginx", "sidecar-nginx"]);
        assert!(template_containers(&json!({})).is_empty());
    }
}
