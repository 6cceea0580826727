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
use crate::store::{EventType, ResKey, WatchStart, object_rv};

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
        let key = Self::key(rt);
        let (ns, name) = crate::store::names(stored);
        let uid = stored.pointer("/metadata/uid").cloned();
        // Subscribing before reading the current state: no change can fall in between.
        let mut changes = match self.store.watch_from(self.store.current_rv()) {
            WatchStart::Resumed(_, rx) => rx,
            WatchStart::Expired(_) => {
                return Err(ApiError::internal("the change history is unavailable"));
            }
        };
        let current_step = || match self.store.get(&key, &ns, &name) {
            Some(obj) if obj.pointer("/metadata/uid").cloned() == uid => {
                init::wait_step(false, &obj)
            }
            _ => WaitStep::Deleted,
        };
        let wait = async {
            let mut step = current_step();
            loop {
                match step {
                    WaitStep::Waiting => {}
                    WaitStep::Initialized(obj) => return Ok(obj),
                    WaitStep::Failed(status) => return Err(init::result_error(&status)),
                    WaitStep::Deleted => return Err(init::deleted_while_waiting()),
                }
                step = loop {
                    match changes.recv().await {
                        Ok(change)
                            if change.key == key
                                && change.namespace == ns
                                && name_of(&change.object) == name
                                && change.object.pointer("/metadata/uid").cloned() == uid =>
                        {
                            break init::wait_step(
                                change.kind == EventType::Deleted,
                                &change.object,
                            );
                        }
                        Ok(_) => {}
                        // Missed changes: the stored object says where things are.
                        Err(RecvError::Lagged(_)) => break current_step(),
                        Err(RecvError::Closed) => {
                            return Err(ApiError::internal("the store stopped"));
                        }
                    }
                };
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(answer) => answer,
            Err(_) => Err(init::timeout_error(timeout)),
        }
    }
}
