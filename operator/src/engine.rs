//! The engine choice: where a preset Initializer's injection runs. A preset is exactly what a
//! `MutatingAdmissionPolicy` can express, so the API server itself can run it: no pod, no
//! certificate, no network hop, nothing to go down. The operator moves a preset there only once
//! it has proven, on the API server itself, that the policy does what the webhook does, and
//! moves it back at the first sign that it may not.
//!
//! ```text
//!  Webhook registered ──prove──► canary binding, corpus agrees ──widen──► in force everywhere
//!        ▲                                    │ disagreement                    │
//!        │                                    ▼                                 ▼
//!        └──────── way back ◄──── policy removed, Disproved        webhook deregistered,
//!                     ▲                                            Deployment scaled to zero
//!                     └──── policy or binding edited or deleted (Drifted), a new spec,
//!                           creates stored uninjected (NotEnforced)
//! ```
//!
//! - this file, pure: [`decide`] (the plan for one reconcile, from the spec, the compiler, the
//!   API server's discovery, the canary namespace and what is already settled for this
//!   generation) and [`view`] (what the status says: `status.engine` and the `InApiServer`
//!   condition's reason and message);
//! - [`compare`]: the corpus dressed for the Initializer's selectors, and two stored objects
//!   compared as the engines must agree;
//! - [`proof`]: the IO: the policy and its canary binding applied, the corpus created through
//!   both engines by server-side dry run, the binding widened and confirmed in force, the drift
//!   and in-force checks, and the removal.
//!
//! What proves the policy in force without taking the webhook away first: the webhook marks
//! only what it changes (its signed `initialized-by` annotation), and policies run before every
//! webhook. A create that comes back injected and unmarked was injected by the policy.
//!
//! The proof runs in one namespace, the canary namespace an administrator names
//! (`--policy-canary-namespace`) and grants the operator dry-run creates in (the ClusterRole
//! `initializer-operator-policy-canary`, bound there): it must be one the Initializer
//! intercepts, or there is nothing to compare.

pub mod compare;
pub mod proof;

use std::time::{Duration, Instant};

use initializer_crds::{Engine, EngineInForce, InitializerStatus, Suspension};

use crate::policy::CompileError;
use crate::policy::served::NotServed;

/// Condition type: the injection runs in the API server (True), or why not (False).
pub const IN_API_SERVER: &str = "InApiServer";

/// Why the webhook is the engine in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// `spec.engine: Webhook`.
    Pinned,
    /// Suspended (`spec.suspend` or the break-glass annotation): neither engine is in the path.
    Suspended(Suspension),
    /// The compiler cannot express the Initializer (it names the field).
    NotCompilable { field: String, message: String },
    /// The API server serves no MutatingAdmissionPolicy the operator can write.
    NotServed(String),
    /// No canary namespace is configured: nowhere to prove the policy.
    NoCanaryNamespace,
    /// The canary namespace is missing or outside the Initializer's namespaces.
    CanaryOutOfScope(String),
    /// Nothing of the corpus is changed by the preset in the canary namespace: a proof would
    /// compare nothing.
    NothingToProve(String),
    /// Waiting for the webhook to be registered: the proof compares the policy with it.
    AwaitingWebhook,
    /// The proof could not finish (an API call failed, the policy never came in force): tried
    /// again at the next reconcile.
    ProofFailed(String),
    /// The policy and the webhook disagreed on the corpus (or the policy failed in the
    /// canary): the webhook stays for this generation of the spec.
    Disproved(String),
    /// The policy or its binding was edited or deleted by someone else while in force: the
    /// webhook came back, and stays for this generation of the spec.
    Drifted(String),
    /// While in force, the periodic check found creates stored without the policy's injection
    /// (an API server that serves the API without running the admission plugin), or could not
    /// make its creates: the webhook came back, and the policy is proven again at the next
    /// resync.
    NotEnforced(String),
}

impl Why {
    /// The condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Why::Pinned => "Pinned",
            Why::Suspended(_) => "Suspended",
            Why::NotCompilable { .. } => "NotCompilable",
            Why::NotServed(_) => "NotServed",
            Why::NoCanaryNamespace => "NoCanaryNamespace",
            Why::CanaryOutOfScope(_) => "CanaryOutOfScope",
            Why::NothingToProve(_) => "NothingToProve",
            Why::AwaitingWebhook => "AwaitingWebhook",
            Why::ProofFailed(_) => "ProofFailed",
            Why::Disproved(_) => "Disproved",
            Why::Drifted(_) => "Drifted",
            Why::NotEnforced(_) => "NotEnforced",
        }
    }

    /// The condition's message.
    pub fn message(&self) -> String {
        match self {
            Why::Pinned => "spec.engine is Webhook".to_owned(),
            Why::Suspended(suspension) => format!(
                "{}: neither the webhook nor the policy is in the path; the policy is proven \
                 again once it is resumed",
                suspension.describe()
            ),
            Why::NotCompilable { field, message } => {
                format!("{field} cannot run as a MutatingAdmissionPolicy: {message}")
            }
            Why::NotServed(why) => why.clone(),
            Why::NoCanaryNamespace => "the operator has no canary namespace to prove the policy \
                 in (--policy-canary-namespace, env POLICY_CANARY_NAMESPACE)"
                .to_owned(),
            Why::CanaryOutOfScope(why)
            | Why::NothingToProve(why)
            | Why::ProofFailed(why)
            | Why::Disproved(why)
            | Why::Drifted(why)
            | Why::NotEnforced(why) => why.clone(),
            Why::AwaitingWebhook => {
                "the policy is proven against the webhook once the webhook is registered".to_owned()
            }
        }
    }

    /// Whether it holds for the rest of this generation of the spec (the others are looked at
    /// again at every reconcile).
    pub fn settles(&self) -> bool {
        matches!(self, Why::Disproved(_) | Why::Drifted(_))
    }

    /// From a compile error.
    pub fn not_compilable(error: &CompileError) -> Self {
        Why::NotCompilable {
            field: error.field().to_owned(),
            message: error.to_string(),
        }
    }

    /// From the API server's discovery.
    pub fn not_served(error: &NotServed) -> Self {
        Why::NotServed(error.to_string())
    }
}

/// What the canary namespace is to this Initializer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Canary {
    /// None is configured.
    NotConfigured,
    /// Configured, but missing or outside the Initializer's namespaces: why.
    OutOfScope(String),
    /// In scope, but the preset changes nothing of the corpus there: why.
    NothingToProve(String),
    /// This namespace, which the Initializer intercepts.
    InScope(String),
}

/// What is already settled for this generation of the spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Nothing yet.
    Nothing,
    /// The policy was proven and is in force.
    InForce,
    /// The webhook stays, for this reason ([`Why::settles`]).
    Webhook(Why),
}

/// What the operator remembers of one Initializer's engine between reconciles (the supervisor
/// keeps it with the rest of what is known of the Initializer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remembered {
    /// The generation `settled` holds for.
    pub generation: Option<i64>,
    /// What is settled for that generation.
    pub settled: Settled,
    /// The engine in force now.
    pub in_force: EngineInForce,
    /// How the policy in force was proven (the condition's message).
    pub proven: String,
    /// The last proof's failure, shown until the next proof.
    pub failure: Option<Why>,
    /// When the last proof that could not finish failed: the next waits a resync.
    pub proof_failed_at: Option<Instant>,
    /// A policy or binding of this Initializer may exist (removed once the webhook is back).
    pub policy_may_exist: bool,
    /// The reason last published in a `PolicyUnavailable` Warning, so that each is published
    /// once.
    pub warned: Option<&'static str>,
}

impl Remembered {
    /// What is remembered for `generation` of the spec: what was settled, and the last proof's
    /// failure, hold only for the generation they were found at.
    pub fn at_generation(&mut self, generation: Option<i64>) {
        if self.generation != generation {
            self.generation = generation;
            self.settled = Settled::Nothing;
            self.failure = None;
            self.proof_failed_at = None;
        }
    }

    /// Records what a way back to the webhook for `why` settles (the switch itself is shown
    /// with the plan): a reason that settles holds for this generation; any other is kept as
    /// the last failure, and the policy proven again later.
    pub fn going_back(&mut self, why: &Why) {
        if why.settles() {
            self.settled = Settled::Webhook(why.clone());
        } else {
            self.settled = Settled::Nothing;
            self.failure = Some(why.clone());
        }
    }

    /// Whether a proof may run at `now`: not within `wait` of the last one that could not
    /// finish (its own writes wake the reconcile at once, which would run it again back to back).
    pub fn proof_due(&self, now: Instant, wait: Duration) -> bool {
        self.proof_failed_at
            .is_none_or(|at| now.saturating_duration_since(at) >= wait)
    }

    /// What a stored status says, for an Initializer this replica has not decided on yet (after
    /// a restart, or a change of leader): the engine in force, and a disproof or drift that
    /// holds for the generation the status describes. A policy may exist.
    pub fn recovered(status: Option<&InitializerStatus>) -> Self {
        let in_force = status.and_then(|s| s.engine).unwrap_or_default();
        let condition = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == IN_API_SERVER));
        let message = condition.map(|c| c.message.clone()).unwrap_or_default();
        let settled = match (in_force, condition.map(|c| c.reason.as_str())) {
            (EngineInForce::Policy, _) => Settled::InForce,
            (_, Some("Disproved")) => Settled::Webhook(Why::Disproved(message.clone())),
            (_, Some("Drifted")) => Settled::Webhook(Why::Drifted(message.clone())),
            _ => Settled::Nothing,
        };
        Self {
            generation: status.and_then(|s| s.observed_generation),
            settled,
            in_force,
            proven: message,
            failure: None,
            proof_failed_at: None,
            policy_may_exist: true,
            warned: None,
        }
    }
}

/// What the checks of a policy in force found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InForceCheck {
    /// It is as proven, and the API server runs it.
    Holds,
    /// It drifted from what was proven (what changed).
    Drifted(String),
    /// It is as proven, but can no longer be shown to be enforced (why).
    NotEnforced(String),
}

impl InForceCheck {
    /// Why the webhook comes back, or `None` to keep the policy. The reconcile puts a drifted
    /// policy back as proven before it shows this, so it stays in force until the webhook is
    /// registered again.
    pub fn why_back(&self) -> Option<Why> {
        match self {
            InForceCheck::Holds => None,
            InForceCheck::Drifted(drift) => Some(Why::Drifted(format!(
                "{drift}; it was put back as proven and stays in force until the webhook is \
                 registered again, then removed"
            ))),
            InForceCheck::NotEnforced(why) => Some(Why::NotEnforced(format!(
                "{why}; the webhook comes back, and the policy is proven again at the next \
                 resync"
            ))),
        }
    }
}

/// What one reconcile does about the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The webhook, for this reason.
    Webhook(Why),
    /// Prove the policy in the canary namespace (once the webhook is registered) and cut over.
    Prove {
        /// The canary namespace.
        canary: String,
    },
    /// Keep the policy in force (drift-checked).
    KeepPolicy,
}

/// The plan for one reconcile. `compiled` and `served` are the compiler's and the API
/// server's answers (`Ok(())` when they allow the policy); the first reason that keeps the
/// webhook wins, in the order a reader would check them.
pub fn decide(
    engine: Engine,
    suspension: Option<Suspension>,
    compiled: Result<(), Why>,
    served: Result<(), Why>,
    canary: &Canary,
    settled: &Settled,
) -> Plan {
    if engine == Engine::Webhook {
        return Plan::Webhook(Why::Pinned);
    }
    if let Some(suspension) = suspension {
        return Plan::Webhook(Why::Suspended(suspension));
    }
    if let Err(why) = compiled.and(served) {
        return Plan::Webhook(why);
    }
    match settled {
        Settled::InForce => return Plan::KeepPolicy,
        Settled::Webhook(why) => return Plan::Webhook(why.clone()),
        Settled::Nothing => {}
    }
    match canary {
        Canary::NotConfigured => Plan::Webhook(Why::NoCanaryNamespace),
        Canary::OutOfScope(why) => Plan::Webhook(Why::CanaryOutOfScope(why.clone())),
        Canary::NothingToProve(why) => Plan::Webhook(Why::NothingToProve(why.clone())),
        Canary::InScope(namespace) => Plan::Prove {
            canary: namespace.clone(),
        },
    }
}

/// What the status says about the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineView {
    /// The engine in force.
    pub in_force: EngineInForce,
    /// The `InApiServer` condition's reason.
    pub reason: &'static str,
    /// Its message.
    pub message: String,
    /// `spec.engine: Policy` and the webhook in force for a reason other than waiting for the
    /// proof: the message says so, and a `PolicyUnavailable` Warning Event is published.
    pub warning: bool,
    /// Whether the `InApiServer` condition is shown: only for Initializers that run the
    /// built-in preset initializer (for code, the webhook is the only engine there is).
    pub shown: bool,
}

impl EngineView {
    /// Whether the injection runs in the API server: the webhook is out of the path on purpose
    /// and its Deployment kept at zero replicas.
    pub fn in_api_server(&self) -> bool {
        self.in_force == EngineInForce::Policy
    }
}

/// The view of an engine in force: the policy (`proven` says how) or the webhook for `why`.
/// `preset`: the Initializer runs the built-in preset initializer (no `spec.image`).
pub fn view(engine: Engine, preset: bool, in_force: &Result<String, Why>) -> EngineView {
    match in_force {
        Ok(proven) => EngineView {
            in_force: EngineInForce::Policy,
            reason: "Proven",
            message: proven.clone(),
            warning: false,
            shown: true,
        },
        Err(why) => {
            let warning = engine == Engine::Policy && *why != Why::AwaitingWebhook;
            EngineView {
                in_force: EngineInForce::Webhook,
                reason: why.reason(),
                message: if warning {
                    format!(
                        "spec.engine is Policy, but the webhook runs: {}",
                        why.message()
                    )
                } else {
                    why.message()
                },
                warning,
                shown: preset,
            }
        }
    }
}

#[cfg(test)]
mod tests;
