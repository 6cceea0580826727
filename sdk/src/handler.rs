//! The handler trait an author implements per kind, and its type-erased form the server calls.
//!
//! The patch is the JSON diff between the typed object serialized before and after the handler
//! ran. Diffing typed against typed (not the raw request against the typed result) means fields
//! the Rust types do not know about are never touched by the patch. Both serializations are
//! JSON text: an unchanged object is recognised by comparing the two strings, and the diff
//! parses only the subtrees that differ (see `diff`). The initialized-by mark of a changed
//! object is one operation added to that patch, not a third serialization.

pub(crate) mod diff;
pub(crate) mod lane;

use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::gate::AnnotationGate;
use crate::mark::Marker;
use crate::mutate;
use crate::review::{Denial, Review};

/// Mutate (or refuse) one kind of object. Implement it once per kind, or generically over
/// kinds (for example over every [`PodSpecHolder`](crate::mutate::PodSpecHolder)).
///
/// The handler runs off its connection's task with a time budget: as a task on the async
/// workers while one worker stays free of handlers, else on tokio's blocking pool (see
/// `lane.rs`), so it may do synchronous work, but it should be quick, since every matching
/// create in the cluster waits for it. It must be idempotent: run on its own output it must
/// change nothing (the API server may reinvoke it).
pub trait Initialize<K, C = ()>: Send + Sync + 'static {
    /// Change `obj` in place, or refuse it with a [`Denial`].
    fn initialize(&self, obj: &mut K, review: &Review<C>) -> Result<(), Denial>;
}

impl<K, C, F> Initialize<K, C> for F
where
    F: Fn(&mut K, &Review<C>) -> Result<(), Denial> + Send + Sync + 'static,
{
    fn initialize(&self, obj: &mut K, review: &Review<C>) -> Result<(), Denial> {
        self(obj, review)
    }
}

/// What a handler run produced.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The annotation gate left the object alone; the handler did not run.
    Skipped,
    Unchanged,
    Patched(json_patch::Patch),
    Denied(Denial),
}

/// A handler run that failed outside the handler's own logic.
#[derive(Debug)]
pub(crate) enum Failure {
    Decode(String),
    Encode(String),
}

/// A handler with its kind erased, callable with the untyped object.
pub(crate) trait ErasedHandler<C>: Send + Sync {
    fn call(
        &self,
        object: &RawValue,
        review: &Review<C>,
        gate: Option<&AnnotationGate>,
        mark: Option<&Marker>,
    ) -> Result<Outcome, Failure>;
}

pub(crate) struct Typed<K, H> {
    pub(crate) handler: H,
    pub(crate) kind: PhantomData<fn() -> K>,
}

fn decode<K: DeserializeOwned>(object: &RawValue) -> Result<K, Failure> {
    // Straight from the request's bytes into the typed object: no intermediate Value tree.
    serde_json::from_str(object.get()).map_err(|e| Failure::Decode(e.to_string()))
}

fn encode<K: Serialize>(obj: &K) -> Result<String, Failure> {
    serde_json::to_string(obj).map_err(|e| Failure::Encode(e.to_string()))
}

/// The patch from `before` (the object's JSON before the handler ran) to `obj`, marking the
/// object as initialized when it changed (signed for the object as it now is, see `mark`).
fn finish<K: Resource + Serialize>(
    before: &str,
    obj: &mut K,
    mark: Option<&Marker>,
) -> Result<Outcome, Failure> {
    let after = encode(obj)?;
    // The same typed value always serializes to the same text.
    if after == before {
        return Ok(Outcome::Unchanged);
    }
    let mut patch = diff::diff_text(before, &after).map_err(|e| Failure::Encode(e.to_string()))?;
    if patch.0.is_empty() {
        return Ok(Outcome::Unchanged);
    }
    // The mark is one more operation on the metadata the patch leaves: cheaper than encoding
    // and diffing the whole object again.
    if let Some(marker) = mark {
        let entry = marker.entry(obj.meta());
        let had_annotations = obj.meta().annotations.is_some();
        if mutate::mark_initialized(obj.meta_mut(), &entry)
            && let Some(value) = obj
                .meta()
                .annotations
                .as_ref()
                .and_then(|a| a.get(mutate::INITIALIZED_BY_ANNOTATION))
        {
            patch.0.push(mark_operation(had_annotations, value));
        }
    }
    Ok(Outcome::Patched(patch))
}

/// The operation that sets the mark annotation to `value`: into the existing annotations, or
/// as a new annotations map holding only the mark.
fn mark_operation(had_annotations: bool, value: &str) -> json_patch::PatchOperation {
    use json_patch::jsonptr::PointerBuf;
    let (path, value) = if had_annotations {
        (
            PointerBuf::from_tokens(["metadata", "annotations", mutate::INITIALIZED_BY_ANNOTATION]),
            serde_json::Value::String(value.to_owned()),
        )
    } else {
        (
            PointerBuf::from_tokens(["metadata", "annotations"]),
            serde_json::json!({ mutate::INITIALIZED_BY_ANNOTATION: value }),
        )
    };
    // `add` on an existing member replaces it (RFC 6902, 4.1).
    json_patch::PatchOperation::Add(json_patch::AddOperation { path, value })
}

impl<K, C, H> ErasedHandler<C> for Typed<K, H>
where
    K: Resource + DeserializeOwned + Serialize + 'static,
    H: Initialize<K, C>,
{
    fn call(
        &self,
        object: &RawValue,
        review: &Review<C>,
        gate: Option<&AnnotationGate>,
        mark: Option<&Marker>,
    ) -> Result<Outcome, Failure> {
        let mut obj: K = decode(object)?;
        if gate.is_some_and(|g| !g.admits(obj.meta().annotations.as_ref())) {
            return Ok(Outcome::Skipped);
        }
        let before = encode(&obj)?;
        if let Err(denial) = self.handler.initialize(&mut obj, review) {
            return Ok(Outcome::Denied(denial));
        }
        finish(&before, &mut obj, mark)
    }
}

/// The asynchronous form of [`Initialize`], for handlers that must await something (an API
/// call, a lookup). Runs as a tokio task under the same budget and panic policy; a handler that
/// overruns the budget is cancelled at its next `.await`.
pub trait InitializeAsync<K, C = ()>: Send + Sync + 'static {
    /// Change `obj` in place, or refuse it with a [`Denial`].
    fn initialize(
        &self,
        obj: &mut K,
        review: &Review<C>,
    ) -> impl Future<Output = Result<(), Denial>> + Send;
}

/// An asynchronous handler with its kind erased.
pub(crate) trait ErasedAsyncHandler<C>: Send + Sync {
    fn call(
        self: Arc<Self>,
        object: Box<RawValue>,
        review: Arc<Review<C>>,
        gate: Option<AnnotationGate>,
        mark: Option<Arc<Marker>>,
    ) -> BoxFuture<'static, Result<Outcome, Failure>>;
}

impl<K, C, H> ErasedAsyncHandler<C> for Typed<K, H>
where
    K: Resource + DeserializeOwned + Serialize + Send + 'static,
    C: Send + Sync + 'static,
    H: InitializeAsync<K, C>,
{
    fn call(
        self: Arc<Self>,
        object: Box<RawValue>,
        review: Arc<Review<C>>,
        gate: Option<AnnotationGate>,
        mark: Option<Arc<Marker>>,
    ) -> BoxFuture<'static, Result<Outcome, Failure>> {
        Box::pin(async move {
            let mut obj: K = decode(&object)?;
            if gate.is_some_and(|g| !g.admits(obj.meta().annotations.as_ref())) {
                return Ok(Outcome::Skipped);
            }
            let before = encode(&obj)?;
            if let Err(denial) = self.handler.initialize(&mut obj, &review).await {
                return Ok(Outcome::Denied(denial));
            }
            finish(&before, &mut obj, mark.as_deref())
        })
    }
}

/// A registered handler of either kind.
pub(crate) enum AnyHandler<C> {
    Sync(Arc<dyn ErasedHandler<C>>),
    Async(Arc<dyn ErasedAsyncHandler<C>>),
}
