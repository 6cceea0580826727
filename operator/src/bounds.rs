//! Puts the operator's bounds in place when it starts (the objects are
//! `initializer_packaging::bounds`): the API server learns, through a SelfSubjectReview, which
//! account the operator runs as, and from then on refuses that account any change to a webhook
//! configuration the operator did not make. The bounds are created once and never changed by the
//! operator: bounds that differ from what this operator would make (an older version's, or an
//! administrator's) are reported, and replacing them is an administrator's call.

use initializer_crds::constants::FIELD_MANAGER;
use initializer_packaging::bounds;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::PostParams;
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::guard;

/// What putting the bounds in place came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Created now, or found as this operator would make them, under this name.
    InPlace(String),
    /// Found under this name, but not as this operator would make them (an older operator's,
    /// or changed by an administrator): left as they are.
    Differ(String),
    /// The operator runs as this user, which is no service account (or one whose bounds could
    /// not be named): nothing to bound.
    NotAnAccount(String),
    /// The API server serves no SelfSubjectReview or no ValidatingAdmissionPolicy.
    NotServed,
}

/// Learns the operator's user name and creates its bounds where they are missing.
pub async fn put_in_place(client: &Client) -> Result<Outcome, kube::Error> {
    let review = match Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(review) => review,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Outcome::NotServed),
        Err(e) => return Err(e),
    };
    let username = review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default();
    let (Some(policy), Some(binding), Some(name)) = (
        bounds::policy(&username),
        bounds::binding(&username),
        bounds::name(&username),
    ) else {
        return Ok(Outcome::NotAnAccount(username));
    };
    let policy_same = match create_once(client, &policy).await {
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Outcome::NotServed),
        other => other?,
    };
    let binding_same = create_once(client, &binding).await?;
    Ok(if policy_same && binding_same {
        Outcome::InPlace(name)
    } else {
        Outcome::Differ(name)
    })
}

/// Creates `desired` unless an object of its name exists; says whether what is there now has
/// `desired`'s spec as the API server stores it ([`guard::as_stored`]).
async fn create_once<K>(client: &Client, desired: &K) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + Serialize
        + DeserializeOwned,
{
    let api: Api<K> = Api::all(client.clone());
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    match api.create(&params, desired).await {
        Ok(_) => return Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return Err(e),
    }
    let live = api
        .get(desired.meta().name.as_deref().unwrap_or_default())
        .await?;
    let stored = guard::as_stored(&api, desired).await?;
    Ok(guard::whole_spec_patch(&live, &stored).is_none())
}

/// Puts the bounds in place at startup, retrying with backoff (up to a minute apart) until
/// done or `shutdown`; logs what it came to. Never fails the operator.
pub async fn keep_trying(client: Client, shutdown: CancellationToken) {
    let outcome = crate::retry::until_done(&shutdown, "put the operator's bounds in place", || {
        put_in_place(&client)
    })
    .await;
    match outcome {
        None => {}
        Some(Outcome::InPlace(name)) => info!(%name, "the operator's bounds are in place"),
        Some(Outcome::Differ(name)) => warn!(
            %name,
            "the operator's bounds in place differ from this version's; left as they are (an administrator's to replace)"
        ),
        Some(Outcome::NotAnAccount(user)) => {
            info!(%user, "running as no service account the bounds can name: the operator's bounds are not applied")
        }
        Some(Outcome::NotServed) => warn!(
            "the API server serves no SelfSubjectReview or ValidatingAdmissionPolicy: the operator is bounded by RBAC alone"
        ),
    }
}
