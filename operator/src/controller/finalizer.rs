//! The finalizer's paths: a suspended Initializer is deregistered first (its configuration and
//! fallback removed and kept removed); a deleted one is cleaned up (configuration, fallback and,
//! with the legacy backend, the objects still pending on its name) before its workload may go.

use initializer_crds::{Backend, Initializer, Suspension};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use tracing::{info, warn};

use crate::apply;
use crate::backend::{Configurations, Live};
use crate::error::{Error, Result};
use crate::events::Reason;
use crate::naming;
use crate::status;
use crate::validate;

use super::{Context, legacy_reached, publish, suspend_is_news};

/// Removes this Initializer's configuration if it is there and ours (another object of the same
/// name is never deleted: [`Error::NotOurs`]); true when one was removed. Refused when this
/// replica does not lead.
pub(super) async fn remove_configuration(
    ctx: &Context,
    initializer: &str,
    configuration: &str,
    backend: Backend,
) -> Result<bool> {
    ctx.supervisor
        .leadership()
        .check(|| format!("deregister {configuration}"))?;
    Configurations::new(ctx.client.clone(), backend)
        .remove(configuration, &naming::names(initializer).label)
        .await
}

/// The break-glass switch comes first: suspended (`spec.suspend` or the break-glass
/// annotation), the configuration (and any fallback) is removed before anything that could fail
/// (validation, the namespace, the Deployment), so a suspend always takes the initializer out
/// of the path.
pub(super) async fn suspend_first(
    obj: &Initializer,
    ctx: &Context,
    suspension: Suspension,
) -> Result<()> {
    let name = obj.name_any();
    let names = naming::names(&name);
    // Anything under the name counts, as before the backend object: someone else's object is
    // then refused by remove_configuration (NotOurs), not passed over.
    let live = Configurations::new(ctx.client.clone(), obj.spec.backend)
        .live(&names.configuration, &names.label)
        .await?;
    if !matches!(live, Live::Absent) {
        ctx.supervisor.stop(&name).await;
        if remove_configuration(ctx, &name, &names.configuration, obj.spec.backend).await? {
            ctx.metrics.deregistered(&name, "Suspended", None);
            info!(initializer = %name, configuration = %names.configuration, "deregistered: suspended");
        }
    }
    if had_fallback(obj) && apply::remove_fallback(&ctx.client, &names.fallback).await? {
        info!(initializer = %name, "removed the fallback: suspended");
    }
    // A preset running in the API server leaves the path too: break-glass means nothing.
    if super::engine::remove_policy(ctx, obj).await? {
        info!(initializer = %name, "removed the policy: suspended");
    }
    if suspend_is_news(obj) {
        publish(
            ctx,
            obj,
            EventType::Normal,
            Reason::Suspended,
            format!(
                "{}: the configuration is removed and stays removed; the workload keeps running",
                suspension.describe()
            ),
        )
        .await;
    }
    Ok(())
}

/// Releases what still waits on a deleted legacy-backend Initializer's name (its
/// configuration is gone by now), with an Event; failures are logged, never block deletion.
pub(super) async fn release_on_delete(ctx: &Context, obj: &Initializer) {
    let name = obj.name_any();
    let Some(namespace) = obj
        .spec
        .namespace
        .clone()
        .or_else(|| Some(ctx.operator_namespace.clone()))
    else {
        return;
    };
    let pending_name = validate::legacy::pending_name(&name, &namespace);
    let reached = match legacy_reached(&ctx.client, &obj.spec.rules).await {
        Ok(reached) => reached,
        Err(e) => {
            warn!(initializer = %name, error = %e, "could not release pending objects");
            return;
        }
    };
    let released = apply::legacy::release(&ctx.client, &reached, &pending_name).await;
    for failure in &released.failed {
        warn!(initializer = %name, %failure, "could not release a pending object");
    }
    if released.count > 0 {
        publish(
            ctx,
            obj,
            EventType::Normal,
            Reason::ReleasedPendingObjects,
            format!(
                "released {} object(s) still pending on {pending_name}: the Initializer is deleted",
                released.count
            ),
        )
        .await;
    }
}

pub(super) async fn cleanup(obj: &Initializer, ctx: &Context) -> Result<Action> {
    let name = obj.name_any();
    let names = naming::names(&name);
    ctx.supervisor.stop(&name).await;
    match remove_configuration(ctx, &name, &names.configuration, obj.spec.backend).await {
        Ok(true) => {
            ctx.metrics.deregistered(&name, "Deleted", None);
            publish(
                ctx,
                obj,
                EventType::Normal,
                Reason::Deregistered,
                format!(
                    "removed {} before the workload is deleted",
                    names.configuration
                ),
            )
            .await;
        }
        Ok(false) => {}
        // Someone else's object of the same name: ours was never registered, nothing to wait for.
        Err(Error::NotOurs { kind, name: other }) => {
            warn!(initializer = %name, %kind, configuration = %other, "left alone: not created by the operator");
        }
        Err(e) => return Err(e),
    }
    if had_fallback(obj) && apply::remove_fallback(&ctx.client, &names.fallback).await? {
        info!(initializer = %name, "removed the fallback");
    }
    if super::engine::remove_policy(ctx, obj).await? {
        info!(initializer = %name, "removed the policy");
    }
    ctx.supervisor.forget(&name);
    ctx.memory.forget(&name);
    // The finalizer stays until the API server confirms the configuration is gone, so no
    // create ever meets a configuration whose initializer has already been deleted.
    let left = Configurations::new(ctx.client.clone(), obj.spec.backend)
        .holds_ours(&names.configuration, &names.label)
        .await?;
    if left {
        return Err(Error::CleanupPending(names.configuration));
    }
    // What waited on the initializer would wait on nothing once it is gone.
    if obj.spec.backend == Backend::InitializerConfiguration {
        release_on_delete(ctx, obj).await;
    }
    info!(initializer = %name, "cleaned up");
    Ok(Action::await_change())
}

/// Whether the Initializer has (or had, as its status shows) a fallback that may be installed.
pub fn had_fallback(obj: &Initializer) -> bool {
    obj.spec.fallback.is_some()
        || obj.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == status::FALLBACK_IN_FORCE)
        })
}
