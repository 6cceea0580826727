//! How one supervised Initializer is registered, probed and released, by backend
//! ([`Registration`]): every place where the supervisor's path differs between a
//! `MutatingWebhookConfiguration` and an `InitializerConfiguration`, in one file. Reading,
//! registering and removing either kind, and deciding what is ours, is [`crate::backend`]'s.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use initializer_crds::constants::{FIELD_MANAGER, RELEASED_OBJECTS_DETAIL};
use initializer_crds::{Backend, InitializerStatus};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use tracing::{debug, info};

use crate::apply::legacy::Canary;
use crate::backend::{Configurations, Desired};
use crate::pending::Served;
use crate::probe::{self, EndpointResult, Outcome, Round};
use crate::route;

use super::{
    CALL_TIMEOUT, PENDING_NAME_DETAIL, RouteChecks, SupervisedState, Supervisor, route_check_retry,
};

/// How one Initializer is registered and probed.
#[derive(Clone, Debug, PartialEq)]
pub enum Registration {
    /// A `MutatingWebhookConfiguration` (the [`super::Supervision::webhook`] itself), probed
    /// with a dry-run AdmissionReview to every ready endpoint, as the API server calls it.
    Webhook,
    /// An `InitializerConfiguration` (`spec.backend: InitializerConfiguration`), probed end to
    /// end through the API server with a canary.
    InitializerConfiguration(Box<LegacySupervision>),
}

/// What the `InitializerConfiguration` backend supervises beyond the webhook's.
#[derive(Clone, Debug, PartialEq)]
pub struct LegacySupervision {
    /// The configuration to register. [`super::Supervision::webhook`] then only names and
    /// labels it.
    pub configuration: DynamicObject,
    /// The end-to-end probe's canary.
    pub canary: Canary,
    /// The resources the rules reach: where objects pending on the name are looked for when
    /// the configuration is removed.
    pub reached: Vec<Served>,
}

impl Registration {
    /// The backend that registers it.
    pub fn backend(&self) -> Backend {
        match self {
            Registration::Webhook => Backend::Webhook,
            Registration::InitializerConfiguration(_) => Backend::InitializerConfiguration,
        }
    }

    /// The kind of the configuration it registers.
    pub(super) fn kind(&self) -> &'static str {
        crate::backend::kind(self.backend())
    }

    /// The configurations of its kind, read and written through `sup`'s client.
    pub(super) fn configurations(&self, sup: &Supervisor) -> Configurations {
        Configurations::new(sup.inner.client.clone(), self.backend())
    }

    /// What is registered for the webhook configuration `webhook` (the presence wanted, built
    /// by [`super::Supervision::desired`]): that configuration, or the `InitializerConfiguration`,
    /// which has one state only.
    pub(super) fn desired<'a>(&'a self, webhook: &'a MutatingWebhookConfiguration) -> Desired<'a> {
        match self {
            Registration::Webhook => Desired::Webhook(webhook),
            Registration::InitializerConfiguration(legacy) => {
                Desired::InitializerConfiguration(&legacy.configuration)
            }
        }
    }

    /// Whether the operator's watch of webhook configurations holds a copy of it (the watch
    /// covers `MutatingWebhookConfiguration`s only).
    pub(super) fn watched(&self) -> bool {
        matches!(self, Registration::Webhook)
    }

    /// The canary the prober creates, if it probes with one (part of what its tasks are
    /// started with).
    pub(super) fn canary(&self) -> Option<&Canary> {
        match self {
            Registration::Webhook => None,
            Registration::InitializerConfiguration(legacy) => Some(&legacy.canary),
        }
    }

    /// One probe round: each ready endpoint's result, or the outcome when the round as a whole
    /// has one (no endpoint could be tried; the canary's end-to-end verdict).
    pub(super) async fn probe(
        &self,
        sup: &Supervisor,
        round: &Round<'_>,
        budget: Duration,
    ) -> Result<Vec<EndpointResult>, Outcome> {
        match self {
            Registration::Webhook => probe::probe_each(&sup.inner.connector, round).await,
            // A canary pending on this initializer alone must come back initialized within the
            // budget: the path the API server's own objects take.
            Registration::InitializerConfiguration(legacy) => Err(
                crate::apply::legacy::canary_probe(&sup.inner.client, &legacy.canary, budget).await,
            ),
        }
    }

    /// What a degrade means for creates, for its Event.
    pub(super) fn degraded_note(&self, took: Duration) -> String {
        match self {
            Registration::Webhook => format!(
                "fails open now (failurePolicy Ignore, timeoutSeconds 1), {} ms after the failed probe",
                took.as_millis()
            ),
            Registration::InitializerConfiguration(_) => {
                "stays registered (an InitializerConfiguration has no failure policy to relax)"
                    .to_string()
            }
        }
    }

    /// What waits on the initializer's name once its configuration is removed and must be
    /// released: only an `InitializerConfiguration` leaves objects pending.
    pub(super) fn left_pending(&self) -> Option<&LegacySupervision> {
        match self {
            Registration::Webhook => None,
            Registration::InitializerConfiguration(legacy) => Some(legacy.as_ref()),
        }
    }

    /// What the status says beyond the shared conditions: the pending name, and how many
    /// objects the last removal released.
    pub(super) fn add_details(&self, status: &mut InitializerStatus, released: Option<u64>) {
        let Registration::InitializerConfiguration(legacy) = self else {
            return;
        };
        status.details.insert(
            PENDING_NAME_DETAIL.to_string(),
            legacy.canary.pending_name.clone(),
        );
        if let Some(released) = released {
            status
                .details
                .insert(RELEASED_OBJECTS_DETAIL.to_string(), released.to_string());
        }
    }
}

/// What a route check admitted without the initializer's answer says.
const UNANSWERED: &str = "admitted without the initializer's answer: the API server has not \
    loaded the configuration yet, or its call failed (refused, timed out, or the image does not \
    serve /route-check)";

/// What a route check answered on a connection that carried calls before says.
const ANSWERED_ON_A_REUSED_CONNECTION: &str = "answered on a connection the API server opened \
    before, which may predate what admits it now: checking again on a new one";

/// Why a route check did not prove the route.
enum Unproven {
    /// Answered on a connection the API server had used before ([`route::Answered`]).
    Reused,
    /// Not answered: what was seen instead.
    Other(String),
}

impl Supervisor {
    /// One route check while the proving configuration is registered, when one is due: a
    /// dry-run create of the check object, which proves the route only when refused with the
    /// initializer's answer for it on a new connection ([`route::reached`]). What it saw is kept
    /// for the status; checks that see no answer back off, one answered on a reused connection
    /// is made again at once.
    pub(super) async fn route_reached(&self, st: &mut SupervisedState) -> bool {
        let now = Instant::now();
        if st.route.next_at.is_some_and(|at| now < at) {
            return false;
        }
        let nonce = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let namespace = &st.target.namespace;
        let object = route::check_object(namespace, &st.target.label(), nonce);
        let name = object.metadata.name.clone().unwrap_or_default();
        let check = st.target.route_check_name();
        let params = PostParams {
            dry_run: true,
            field_manager: Some(FIELD_MANAGER.to_string()),
        };
        let api = Api::<ConfigMap>::namespaced(self.inner.client.clone(), namespace);
        let created = tokio::time::timeout(CALL_TIMEOUT, api.create(&params, &object)).await;
        let seen = match created {
            Ok(Err(kube::Error::Api(refused))) => {
                match route::reached(&refused.message, &check, &name) {
                    Some(answered) if answered.proves_route() => Ok(()),
                    Some(_) => Err(Unproven::Reused),
                    None => Err(Unproven::Other(format!(
                        "refused, not by the check: {}",
                        refused.message
                    ))),
                }
            }
            Ok(Err(e)) => Err(Unproven::Other(format!("failed: {e}"))),
            Ok(Ok(_)) => Err(Unproven::Other(UNANSWERED.to_string())),
            Err(_) => Err(Unproven::Other(format!(
                "no answer from the API server within {CALL_TIMEOUT:?}"
            ))),
        };
        match seen {
            Ok(()) => {
                info!(initializer = %st.target.initializer, took_ms = now.elapsed().as_millis() as u64, "the API server reaches the initializer through its Service");
                st.route = RouteChecks::default();
                true
            }
            Err(unproven) => {
                st.route.since.get_or_insert(now);
                let why = match unproven {
                    Unproven::Reused => {
                        // The initializer closed that connection: the next check, at the
                        // next look, comes on another, with no backoff.
                        debug!(initializer = %st.target.initializer, "route check answered on a reused connection");
                        st.route.next_at = None;
                        ANSWERED_ON_A_REUSED_CONNECTION.to_string()
                    }
                    Unproven::Other(why) => {
                        debug!(initializer = %st.target.initializer, %why, "route check not answered");
                        let delay = route_check_retry(st.route.backoff);
                        st.route.backoff = Some(delay);
                        st.route.next_at = Some(Instant::now() + delay);
                        why
                    }
                };
                if st.route.last.as_ref() != Some(&why) {
                    st.route.last = Some(why);
                    st.status.due();
                }
                false
            }
        }
    }
}
