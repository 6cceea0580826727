//! The condition types of `status.conditions` that the operator writes and its tools read (the
//! kubectl plugin's status and explanations). What each means for a user is in the book's
//! `docs/src/reference/status.md` and `docs/api.md`.

/// Condition: the initializer does its job as the spec has it: registered and answering, in
/// force in the API server, or suspended because the spec says so. With `Reconciling` and
/// `Stalled`, what tools that know no Initializer read (kstatus, and so Flux and kpt; `kubectl
/// wait --for=condition=Ready`; Argo CD's health check): exactly one of the three is `True`.
pub const READY: &str = "Ready";
/// Condition: the operator works towards the spec (deploying, or waiting for the initializer to
/// answer again while it is out of the path).
pub const RECONCILING: &str = "Reconciling";
/// Condition: the operator cannot get to the spec without a change: the spec was refused or
/// held back, another party's object is in the way, or the workload never became ready within
/// its Deployment's progress deadline.
pub const STALLED: &str = "Stalled";
/// Condition: the spec passed validation.
pub const VALID: &str = "Valid";
/// Condition: the Deployment is available.
pub const AVAILABLE: &str = "Available";
/// Condition: the initializer answers probes correctly within its budget.
pub const RESPONDING: &str = "Responding";
/// Condition: the webhook configuration is registered.
pub const REGISTERED: &str = "Registered";
/// Condition: the initializer is out of the path as the spec has it (degraded to fail open, or
/// removed); present from the first outage on.
pub const DEGRADED: &str = "Degraded";
/// Condition: the fallback policy is in force; present with `spec.fallback`.
pub const FALLBACK_IN_FORCE: &str = "FallbackInForce";
/// Present under `failurePolicy: Fail`: `True` while the spec's configuration is registered, so
/// matching creates are refused whenever the initializer cannot answer; says how soon the
/// operator takes a hung initializer out of the path, and that nothing does while it is down.
pub const FAIL_CLOSED: &str = "FailClosed";
/// `True` while an object the operator would create for this Initializer exists and is not
/// its own (it is left alone, so nothing is registered).
pub const CONFLICT: &str = "Conflict";
/// Condition type: the operator's namespace, where every CA key lives, holds another party's
/// Deployments (another operator's, under OLM's shared `operators` namespace), whose Roles there
/// can read those keys.
pub const SHARED_NAMESPACE: &str = "SharedNamespace";
