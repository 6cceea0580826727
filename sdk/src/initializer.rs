//! The initializer: handlers registered by kind, the gates and policies around them, and the
//! one function that turns a review's bytes into a response's bytes. The HTTPS server and the
//! `testing` module both call [`Initializer::review_json`], so tests exercise the real path.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::core::GroupVersionKind;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::ConfigStore;
use crate::gate::AnnotationGate;
use crate::handler::lane::{Lane, Lanes};
use crate::handler::{AnyHandler, Failure, Initialize, InitializeAsync, Outcome, Typed};
use crate::mark::{self, KeyCell, Marker, Stamp};
use crate::metrics::Metrics;
use crate::review::{
    Operation, REVIEW_API_VERSION, REVIEW_KIND, RequestIn, RequestInfo, Response, Review, ReviewIn,
    Status, Verdict,
};

/// Largest request body accepted by default: 7 MiB. The API server accepts objects up to 3 MiB
/// each, and an UPDATE's review carries two (`object` and `oldObject`) plus the request around
/// them; controller-runtime's webhook server uses the same limit.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 7 * 1024 * 1024;

/// Default time a client has to send a request body once its head arrived: 10 s.
pub(crate) const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default handler budget: the default webhook timeout (5 s) minus 500 ms of margin.
pub const DEFAULT_BUDGET: Duration = Duration::from_millis(4_500);

/// What to answer when a handler panics, overruns its budget or cannot decode the object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Admit the object unchanged, with a warning (fail open). The default.
    #[default]
    Allow,
    /// Refuse the object with code 500 (fail closed), for policies that guard security.
    Deny,
}

/// A request refused with an HTTP error because it is not a valid admission review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// HTTP status (400 or 413).
    pub status: u16,
    /// Why, for the caller.
    pub message: String,
    /// Why the bytes were rejected, as the `reason` label of the invalid-request counter.
    pub reason: &'static str,
}

impl Rejection {
    pub(crate) fn new(status: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            reason,
        }
    }
}

struct KindHandler<C> {
    gvk: GroupVersionKind,
    /// The resource's plural name, for the controller mode's list, watch and update URLs.
    plural: String,
    handler: AnyHandler<C>,
}

/// An initializer: typed handlers per kind plus the policies the server enforces around them.
///
/// `C` is the configuration type read from `config.yaml` (`()` for none).
pub struct Initializer<C = ()> {
    pub(crate) name: Arc<str>,
    handlers: Vec<KindHandler<C>>,
    pub(crate) config: Arc<ConfigStore<C>>,
    failure_policy: FailurePolicy,
    pub(crate) budget: Duration,
    pub(crate) max_request_bytes: usize,
    pub(crate) body_timeout: Duration,
    pub(crate) annotation_gate: Option<AnnotationGate>,
    pub(crate) gate_set: bool,
    pub(crate) mark_initialized: bool,
    pub(crate) generation: Option<i64>,
    /// The key marks are signed with, filled by the certificate store while serving.
    pub(crate) mark_key: Arc<KeyCell>,
    pub(crate) inline_handlers: bool,
    lanes: Lanes,
    pub(crate) metrics: Arc<Metrics>,
}

impl<C> std::fmt::Debug for Initializer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Initializer")
            .field("name", &self.name)
            .field(
                "kinds",
                &self.handlers.iter().map(|e| &e.gvk).collect::<Vec<_>>(),
            )
            .field("failure_policy", &self.failure_policy)
            .field("budget", &self.budget)
            .field("annotation_gate", &self.annotation_gate)
            .finish()
    }
}

impl Initializer<()> {
    /// An initializer without configuration.
    pub fn new(name: impl Into<String>) -> Self {
        Self::with_store(name, ConfigStore::fixed(()))
    }
}

impl<C: DeserializeOwned + Send + Sync + 'static> Initializer<C> {
    /// An initializer whose configuration of type `C` is read from `config.yaml` in the
    /// configuration directory when served (see [`ServeArgs`](crate::ServeArgs)).
    pub fn with_config(name: impl Into<String>) -> Self {
        Self::with_store(name, ConfigStore::unloaded(None))
    }

    fn with_store(name: impl Into<String>, store: ConfigStore<C>) -> Self {
        Self {
            name: Arc::from(name.into()),
            handlers: Vec::new(),
            config: Arc::new(store),
            failure_policy: FailurePolicy::default(),
            budget: DEFAULT_BUDGET,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            annotation_gate: None,
            gate_set: false,
            mark_initialized: true,
            generation: None,
            mark_key: Arc::new(KeyCell::default()),
            inline_handlers: false,
            lanes: Lanes::default(),
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Use this configuration value and never read `config.yaml` (tests, or compiled-in
    /// settings).
    pub fn fixed_config(mut self, value: C) -> Self {
        self.config = Arc::new(ConfigStore::fixed(value));
        self
    }

    /// Read `config.yaml` as [`with_config`](Self::with_config) does, but use `value` while
    /// the file does not exist (without a fallback, the initializer is not ready until the
    /// file appears).
    pub fn fallback_config(mut self, value: C) -> Self {
        self.config = Arc::new(ConfigStore::unloaded(Some(value)));
        self
    }

    /// Register `handler` for kind `K` (group, version and kind from `K`).
    pub fn handle<K>(self, handler: impl Initialize<K, C>) -> Self
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Serialize + 'static,
    {
        let typed = Typed::<K, _> {
            handler,
            kind: PhantomData,
        };
        self.insert_handler::<K>(AnyHandler::Sync(Arc::new(typed)))
    }

    /// Register an asynchronous `handler` for kind `K`: it runs as a tokio task (not on the
    /// blocking pool) under the same budget and failure policy.
    pub fn handle_async<K>(self, handler: impl InitializeAsync<K, C>) -> Self
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Serialize + Send + 'static,
    {
        let typed = Typed::<K, _> {
            handler,
            kind: PhantomData,
        };
        self.insert_handler::<K>(AnyHandler::Async(Arc::new(typed)))
    }

    /// Replace any handler registered for `K` with `handler`, so the last call for a kind wins.
    fn insert_handler<K>(mut self, handler: AnyHandler<C>) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        let gvk = GroupVersionKind::gvk(&K::group(&()), &K::version(&()), &K::kind(&()));
        self.handlers.retain(|e| e.gvk != gvk);
        self.handlers.push(KindHandler {
            gvk,
            plural: K::plural(&()).into_owned(),
            handler,
        });
        self
    }

    /// Register one handler for Pods and every kind with a pod template: Deployment,
    /// StatefulSet, DaemonSet, ReplicaSet, Job and CronJob.
    pub fn handle_pod_kinds<H>(self, handler: H) -> Self
    where
        H: Clone
            + Initialize<Pod, C>
            + Initialize<Deployment, C>
            + Initialize<StatefulSet, C>
            + Initialize<DaemonSet, C>
            + Initialize<ReplicaSet, C>
            + Initialize<Job, C>
            + Initialize<CronJob, C>,
    {
        self.handle::<Pod>(handler.clone())
            .handle::<Deployment>(handler.clone())
            .handle::<StatefulSet>(handler.clone())
            .handle::<DaemonSet>(handler.clone())
            .handle::<ReplicaSet>(handler.clone())
            .handle::<Job>(handler.clone())
            .handle::<CronJob>(handler)
    }

    /// What to answer when a handler fails (default [`FailurePolicy::Allow`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure_policy = policy;
        self
    }

    /// How long a handler may run before the failure policy answers (default 4.5 s). Keep it
    /// under the webhook's `timeoutSeconds`.
    pub fn budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// Skip objects the annotation gate does not admit, before any handler runs. Without a
    /// call, the server takes the gate from its arguments (`--annotation`,
    /// `INITIALIZER_ANNOTATION`).
    pub fn annotation_gate(mut self, gate: Option<AnnotationGate>) -> Self {
        self.annotation_gate = gate;
        self.gate_set = true;
        self
    }

    /// What marks an object the handler changes in answer to `info`, stamped per `stamp`.
    fn marker(&self, info: &RequestInfo, stamp: Stamp) -> Option<Arc<Marker>> {
        self.mark_initialized.then(|| {
            Arc::new(Marker {
                initializer: Arc::clone(&self.name),
                generation: self.generation,
                key: self.mark_key.current(),
                namespace: info.namespace.clone().unwrap_or_default(),
                group: info.resource.group.clone(),
                resource: info.resource.resource.clone(),
                stamp,
            })
        })
    }

    /// The initializer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kinds with a handler.
    pub(crate) fn kinds(&self) -> impl Iterator<Item = &GroupVersionKind> {
        self.handlers.iter().map(|e| &e.gvk)
    }

    /// The kinds with a handler and their resources' plural names.
    pub(crate) fn resources(&self) -> impl Iterator<Item = (&GroupVersionKind, &str)> {
        self.handlers.iter().map(|e| (&e.gvk, e.plural.as_str()))
    }

    /// Whether a failed handler refuses the object ([`FailurePolicy::Deny`]).
    pub(crate) fn fails_closed(&self) -> bool {
        self.failure_policy == FailurePolicy::Deny
    }

    /// The `kind` label a review for `kind` is counted under: the kind itself when a handler
    /// serves it, else [`OTHER_KIND`](crate::metrics::OTHER_KIND). A review names its own kind,
    /// so counting every name would let anyone who can reach the webhook add series until the
    /// pod runs out of memory.
    pub(crate) fn kind_label<'a>(&self, kind: &'a str) -> &'a str {
        if self.handlers.iter().any(|h| h.gvk.kind == kind) {
            kind
        } else {
            crate::metrics::OTHER_KIND
        }
    }

    /// Answer a review given as bytes: the response document, or a rejection for bytes that
    /// are not a valid review. Counts the metrics.
    pub async fn review_json(&self, body: &[u8]) -> Result<Vec<u8>, Rejection> {
        let start = Instant::now();
        match self.review(body).await {
            Ok((kind, response)) => {
                let (json, patch_len) = response.to_json();
                self.metrics.observe(
                    self.kind_label(&kind),
                    response.verdict,
                    start.elapsed(),
                    patch_len,
                    crate::metrics::MODE_WEBHOOK,
                );
                Ok(json)
            }
            Err(rejection) => {
                self.metrics.observe_invalid(rejection.reason);
                Err(rejection)
            }
        }
    }

    /// Answer a review given as bytes, returning the kind it was for and the response.
    pub async fn review(&self, body: &[u8]) -> Result<(String, Response), Rejection> {
        let mut request = self.parse_review(body)?;
        let object = request.object.take();
        let old_object = request.old_object.take();
        let info = RequestInfo {
            uid: request.uid,
            kind: request.kind,
            resource: request.resource,
            sub_resource: request.sub_resource,
            name: request.name,
            namespace: request.namespace,
            operation: request.operation,
            user_info: request.user_info,
            dry_run: request.dry_run.unwrap_or(false),
        };
        let kind = info.kind.kind.clone();
        // A create is stamped when it arrives (the API server sets the creation time just
        // after); an update with the stored object's creation, never the request's own
        // metadata, and never later than now (see `mark`).
        let now = mark::now();
        let stamp = match info.operation {
            Operation::Update => Stamp::At(
                old_object
                    .as_deref()
                    .and_then(mark::created_at)
                    .map_or(now, |created| created.min(now)),
            ),
            _ => Stamp::At(now),
        };
        Ok((kind, self.answer(info, object, old_object, stamp).await))
    }

    /// A review given as bytes, checked to be one this SDK answers: its request.
    fn parse_review(&self, body: &[u8]) -> Result<RequestIn, Rejection> {
        if body.len() > self.max_request_bytes {
            return Err(too_large(self.max_request_bytes));
        }
        let parsed: ReviewIn = serde_json::from_slice(body).map_err(|e| {
            Rejection::new(
                400,
                "malformed",
                format!("failed to parse the AdmissionReview: {e}"),
            )
        })?;
        if parsed.api_version != REVIEW_API_VERSION || parsed.kind != REVIEW_KIND {
            return Err(Rejection::new(
                400,
                "unsupported",
                format!(
                    "failed to accept the review: expected apiVersion {REVIEW_API_VERSION} and kind {REVIEW_KIND}, got {:?} and {:?}",
                    parsed.api_version, parsed.kind
                ),
            ));
        }
        let Some(request) = parsed.request else {
            return Err(Rejection::new(
                400,
                "malformed",
                "failed to accept the review: it has no request",
            ));
        };
        if request.uid.is_empty() {
            return Err(Rejection::new(
                400,
                "malformed",
                "failed to accept the review: request.uid is empty",
            ));
        }
        Ok(request)
    }

    /// Answer the operator's route check given as bytes (a review sent to
    /// [`crate::route::ROUTE_CHECK_PATH`]) that came on `carried` (`None` when the server does
    /// not tell): the JSON response.
    pub fn route_check_json(
        &self,
        body: &[u8],
        carried: Option<crate::route::Carried>,
    ) -> Result<Vec<u8>, Rejection> {
        let request = self.parse_review(body)?;
        Ok(crate::route::answer(&request, carried).to_json().0)
    }

    /// Run the handler of `info.kind` on `object` under the budget and the failure policy: the
    /// answer to one request, from the webhook's reviews and the controller mode alike. A mark
    /// is stamped per `stamp`.
    pub(crate) async fn answer(
        &self,
        info: RequestInfo,
        object: Option<Box<serde_json::value::RawValue>>,
        old_object: Option<Box<serde_json::value::RawValue>>,
        stamp: Stamp,
    ) -> Response {
        let kind = info.kind.kind.clone();
        let uid = info.uid.clone();

        // Nothing to mutate (DELETE, CONNECT), no handler for this kind, or gated out: admit.
        let Some(object) = object else {
            return Response::allow(uid);
        };
        let Some(entry) = self.handlers.iter().find(|e| e.gvk == info.kind) else {
            return Response::allow(uid);
        };
        let Some(config) = self.config.current() else {
            return self.failed(uid, "its configuration is not loaded yet".into());
        };

        let mark = self.marker(&info, stamp);
        let review = Review::new(Arc::new(info), old_object, config, Arc::clone(&self.name));
        let gate = self.annotation_gate.clone();
        let ran = match &entry.handler {
            AnyHandler::Sync(handler) => {
                let handler = Arc::clone(handler);
                let run = move || {
                    let outcome = handler.call(&object, &review, gate.as_ref(), mark.as_deref());
                    (outcome, review.take_warnings())
                };
                if self.inline_handlers {
                    // Trusted-fast handlers: no thread handoff; panics are caught, the budget
                    // is not enforced.
                    self.metrics.observe_lane(crate::metrics::LANE_INLINE);
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
                        .map_err(|payload| panic_message(payload.as_ref()))
                        .map(Ok)
                } else {
                    // Off this connection's task, so that the timeout answers for a stuck or
                    // slow handler and the join error catches its panic: a task on the workers
                    // while one worker stays free of handlers, else a blocking thread. The
                    // budget counts from here, the wait for a worker slot included.
                    let ran = async {
                        let task = match self.lanes.choose().await {
                            Lane::Worker(slot) => {
                                self.metrics.observe_lane(crate::metrics::LANE_WORKER);
                                tokio::spawn(async move {
                                    let _slot = slot;
                                    run()
                                })
                            }
                            Lane::Blocking => {
                                self.metrics.observe_lane(crate::metrics::LANE_BLOCKING);
                                tokio::task::spawn_blocking(run)
                            }
                        };
                        task.await
                    };
                    match tokio::time::timeout(self.budget, ran).await {
                        Err(_) => Ok(Err(())),
                        Ok(Err(join)) => Err(join_failure(join)),
                        Ok(Ok(done)) => Ok(Ok(done)),
                    }
                }
            }
            AnyHandler::Async(handler) => {
                let review = Arc::new(review);
                let future = Arc::clone(handler).call(object, Arc::clone(&review), gate, mark);
                let task = tokio::spawn(future);
                let abort = task.abort_handle();
                match tokio::time::timeout(self.budget, task).await {
                    Err(_) => {
                        abort.abort();
                        Ok(Err(()))
                    }
                    Ok(Err(join)) => Err(join_failure(join)),
                    Ok(Ok(outcome)) => Ok(Ok((outcome, review.take_warnings()))),
                }
            }
        };
        match ran {
            Ok(Err(())) => {
                tracing::warn!(%uid, kind, budget = ?self.budget, "handler overran its budget");
                self.failed(
                    uid,
                    format!("its handler did not answer within {:?}", self.budget),
                )
            }
            Err(what) => {
                tracing::error!(%uid, kind, panic = what, "handler panicked");
                self.failed(uid, format!("its handler panicked: {what}"))
            }
            Ok(Ok((Err(failure), _))) => {
                let what = match failure {
                    Failure::Decode(e) => format!("failed to decode the {kind}: {e}"),
                    Failure::Encode(e) => format!("failed to encode the {kind}: {e}"),
                };
                tracing::warn!(%uid, kind, error = what, "handler could not run");
                self.failed(uid, what)
            }
            Ok(Ok((Ok(outcome), warnings))) => {
                let mut response = Response::allow(uid);
                response.warnings = warnings;
                match outcome {
                    Outcome::Skipped | Outcome::Unchanged => {}
                    Outcome::Patched(patch) => {
                        response.patch = Some(patch);
                        response.verdict = Verdict::Patched;
                    }
                    Outcome::Denied(denial) => {
                        response.allowed = false;
                        response.verdict = Verdict::Denied;
                        response.status = Some(Status {
                            code: denial.code,
                            message: denial.message,
                        });
                    }
                }
                response
            }
        }
    }

    pub(crate) fn failed(&self, uid: String, what: String) -> Response {
        let mut response = Response::allow(uid);
        response.verdict = Verdict::Error;
        let message = format!("initializer {} failed: {what}", self.name);
        match self.failure_policy {
            FailurePolicy::Allow => {
                response
                    .warnings
                    .push(format!("{message}; the object was admitted unchanged"));
            }
            FailurePolicy::Deny => {
                response.allowed = false;
                response.status = Some(Status { code: 500, message });
            }
        }
        response
    }

    /// True once the configuration is loaded.
    pub(crate) fn config_loaded(&self) -> bool {
        self.config.is_loaded()
    }
}

pub(crate) fn too_large(limit: usize) -> Rejection {
    Rejection::new(
        413,
        "too_large",
        format!("failed to accept the review: the body is larger than {limit} bytes"),
    )
}

fn join_failure(join: tokio::task::JoinError) -> String {
    match join.try_into_panic() {
        Ok(payload) => panic_message(payload.as_ref()),
        Err(e) => e.to_string(),
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}
