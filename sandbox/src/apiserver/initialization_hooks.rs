//! Where the verbs meet Kubernetes 1.7–1.13 Initializers: the thin IO around the decisions of
//! [`super::initialization`] (reading configurations from the store, waiting on its changes,
//! removing a failed object). Every hook is a no-op, or strips `metadata.initializers`, when
//! legacy mode is off.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

use super::ApiServer;
use super::initialization::{self as init, WaitStep};
use crate::error::ApiError;
use crate::resource::ResourceType;
use crate::store::{Change, EventType, ResKey, WatchStart, object_rv};

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl ApiServer {
    /// Outside legacy mode, every write loses `metadata.initializers`.
    pub(super) fn drop_initializers_unless_legacy(&self, obj: &mut Value) {
        if !self.legacy_initializers {
            init::strip(obj);
        }
    }

    /// On create, between the mutating and the validating webhooks (where 1.13's
    /// `Initializers` plugin ran): assigns `metadata.initializers` and validates it.
    pub(super) fn assign_initializers(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        let stored = self
            .store
            .list(&ResKey::new(init::GROUP, init::PLURAL), None)
            .0;
        let configurations: Vec<&Value> = stored.iter().map(|c| &**c).collect();
        let names =
            init::matching_initializers(&configurations, &rt.group, &rt.version, &rt.plural);
        let assignment = init::assign_on_create(obj, names);
        init::apply(obj, assignment);
        init::encode_result_as_go(obj);
        let causes = init::validate_initializers(obj);
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(&rt.group, &rt.kind, name_of(obj), causes))
        }
    }

    /// A status update in legacy mode takes `metadata.initializers` from the request body, as
    /// 1.13's status strategies did (`ResetObjectMetaForStatus` kept labels, annotations,
    /// finalizers and owners from the stored object, not initializers): a status PUT without
    /// the field initializes the object (observed on a real 1.13 server).
    pub(super) fn initializers_from_status_body(&self, result: &mut Value, body: &Value) {
        if !self.legacy_initializers {
            return;
        }
        let from_body = match init::initializers_of(body) {
            Some(v) => init::Assignment::Set(v.clone()),
            None => init::Assignment::Remove,
        };
        init::apply(result, from_body);
        init::encode_result_as_go(result);
    }

    /// On an update of the main resource, at the same point: an emptied `initializers` is
    /// removed (the plugin skipped subresources: through `status` an emptied list stays, and
    /// the object stays hidden, as on 1.13), and the transition is validated.
    pub(super) fn settle_initializers(
        &self,
        rt: &ResourceType,
        current: &Value,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        init::apply(obj, init::settle_update(obj));
        init::encode_result_as_go(obj);
        self.check_initializers_update(rt, current, obj)
    }

    /// Validates the change of `metadata.initializers` on any update (the update validation
    /// of object metadata).
    pub(super) fn check_initializers_update(
        &self,
        rt: &ResourceType,
        current: &Value,
        obj: &Value,
    ) -> Result<(), ApiError> {
        let mut causes = init::validate_initializers_update(obj, current);
        if causes.is_empty() {
            causes = init::validate_initializers(obj);
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(&rt.group, &rt.kind, name_of(obj), causes))
        }
    }

    /// After an update is stored: an object with a failure `result` is removed at once,
    /// finalizers or not (`shouldDeleteForFailedInitialization`, then
    /// `deleteWithoutFinalizers` in the era's `store.go`), so waiting creates and watchers see
    /// the modification, then the deletion.
    pub(super) fn end_failed_initialization(&self, rt: &ResourceType, stored: &Arc<Value>) {
        if !self.legacy_initializers || init::failure_result(stored).is_none() {
            return;
        }
        let (ns, name) = crate::store::names(stored);
        if let Ok(removed) = self
            .store
            .remove(&Self::key(rt), &ns, &name, Some(object_rv(stored)))
        {
            super::kinds::hooks(&rt.group, &rt.kind).after_remove(self, &removed);
            self.store.changed.notify_one();
        }
    }

    /// Whether a create that stored `stored` must wait for its initialization.
    pub(super) fn must_wait_for_initialization(
        &self,
        stored: &Value,
        include_uninitialized: bool,
    ) -> bool {
        self.legacy_initializers && !include_uninitialized && !init::is_initialized(stored)
    }

    /// The answer to a dry-run create whose object got pending names: 1.13's `Store.Create`
    /// waits for initialization after a dry run too, for an object that was never stored and
    /// so can never be initialized, failed or deleted: the 504 once `timeout` has passed.
    pub(super) async fn wait_for_never_stored(timeout: Duration) -> ApiError {
        tokio::time::sleep(timeout).await;
        init::timeout_error(timeout)
    }

    /// `WaitForInitialized`: the create's answer once its object is initialized, failed or
    /// deleted, or the 504 once `timeout` has passed (the object then stays, uninitialized).
    pub(super) async fn wait_for_initialized(
        &self,
        rt: &ResourceType,
        stored: &Value,
        timeout: Duration,
    ) -> Result<Value, ApiError> {
        match tokio::time::timeout(timeout, self.initialization_answer(rt, stored)).await {
            Ok(answer) => answer,
            Err(_) => Err(init::timeout_error(timeout)),
        }
    }

    /// The answer read from `stored` itself (a result set at creation fails the create at
    /// once), then from the changes since the create stored it, as the era's server watched
    /// from the object's resourceVersion: an initializer can fail the object and the server
    /// remove it before the create starts waiting, and the answer is then the failure, not
    /// the deletion.
    async fn initialization_answer(
        &self,
        rt: &ResourceType,
        stored: &Value,
    ) -> Result<Value, ApiError> {
        if let Some(answer) = init::wait_step(false, stored).answer() {
            return answer;
        }
        let key = Self::key(rt);
        let (ns, name) = crate::store::names(stored);
        let uid = stored.pointer("/metadata/uid");
        let is_ours = |obj: &Value| name_of(obj) == name && obj.pointer("/metadata/uid") == uid;
        let answer_to = |change: &Change| {
            let ours = change.key == key && change.namespace == ns && is_ours(&change.object);
            ours.then(|| init::wait_step(change.kind == EventType::Deleted, &change.object))
                .and_then(WaitStep::answer)
        };
        let mut seen = object_rv(stored);
        loop {
            let (history, mut live) = match self.store.watch_from(seen) {
                WatchStart::Resumed(history, live) => (history, live),
                // The changes since `seen` are gone: the object as stored now says where
                // things are, and the wait resumes from the oldest change kept.
                WatchStart::Expired(oldest) => {
                    let now = match self.store.get(&key, &ns, &name) {
                        Some(obj) if is_ours(&obj) => init::wait_step(false, &obj),
                        _ => WaitStep::Deleted,
                    };
                    if let Some(answer) = now.answer() {
                        return answer;
                    }
                    seen = oldest;
                    continue;
                }
            };
            for change in history {
                seen = change.rv;
                if let Some(answer) = answer_to(&change) {
                    return answer;
                }
            }
            loop {
                match live.recv().await {
                    Ok(change) if change.rv > seen => {
                        seen = change.rv;
                        if let Some(answer) = answer_to(&change) {
                            return answer;
                        }
                    }
                    Ok(_) => {}
                    // Missed changes: resume from the last one read.
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => {
                        return Err(ApiError::internal("the store stopped"));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;
    use crate::admission::Admission;
    use crate::faults::Faults;
    use crate::resource::Registry;
    use crate::store::Store;

    /// A server in legacy mode keeping `history` changes, the configmaps' type, and one
    /// configmap stored pending on `initializer`.
    fn stored_pending(
        history: usize,
        name: &str,
        initializer: &str,
    ) -> (Arc<ApiServer>, ResourceType, Arc<Value>) {
        let store = Arc::new(Store::new(Registry::with_builtins(), history));
        let rt = store
            .registry()
            .get("", "v1", "configmaps")
            .unwrap()
            .clone();
        let api = ApiServer::new(store, Admission::default(), Arc::new(Faults::default()))
            .with_legacy_initializers(true);
        let pending = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                         "initializers": {"pending": [{"name": initializer}]}},
        });
        let stored = api.store.create(&ApiServer::key(&rt), pending).unwrap();
        (Arc::new(api), rt, stored)
    }

    /// An initializer can fail the object, and the server remove it, before the create that
    /// stored it starts waiting: the create still answers the initializer's result, as the
    /// era's `WaitForInitialized` did by watching from the stored object's resourceVersion.
    #[tokio::test]
    async fn a_failure_landed_before_the_wait_begins_is_still_the_answer() {
        let (api, rt, stored) = stored_pending(64, "weak", "guard.example.com");
        let key = ApiServer::key(&rt);
        let mut failed = (*stored).clone();
        failed["metadata"]["initializers"]["result"] = json!({
            "apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": "password: 7 characters, at least 20 needed", "code": 403,
        });
        let failed = api.store.update(&key, failed, object_rv(&stored)).unwrap();
        api.end_failed_initialization(&rt, &failed);
        assert!(api.store.get(&key, "default", "weak").is_none());

        let answer = api
            .wait_for_initialized(&rt, &stored, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(answer.code, 403, "{answer:?}");
        assert!(answer.message.contains("password"), "{answer:?}");
    }

    /// The changes since the create are no longer kept (a busy server, a short history): the
    /// wait goes on from the object as stored now and still sees its initialization.
    #[tokio::test]
    async fn a_wait_whose_history_is_gone_goes_on_and_sees_the_initialization() {
        let (api, rt, stored) = stored_pending(2, "slow", "slow.example.com");
        let key = ApiServer::key(&rt);
        for i in 0..5 {
            let other = json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": format!("other-{i}"), "namespace": "default"}});
            api.store.create(&key, other).unwrap();
        }
        assert!(matches!(
            api.store.watch_from(object_rv(&stored)),
            WatchStart::Expired(_)
        ));

        let waiting = {
            let (api, rt, stored) = (api.clone(), rt.clone(), stored.clone());
            tokio::spawn(async move {
                api.wait_for_initialized(&rt, &stored, Duration::from_secs(5))
                    .await
            })
        };
        tokio::task::yield_now().await;
        let mut initialized = (*stored).clone();
        initialized["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("initializers");
        initialized["data"] = json!({"by": "slow.example.com"});
        api.store
            .update(&key, initialized, object_rv(&stored))
            .unwrap();

        let answer = waiting.await.unwrap().expect("the initialized object");
        assert_eq!(answer["data"], json!({"by": "slow.example.com"}));
    }
}
