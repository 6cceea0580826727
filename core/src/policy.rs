//! The preset compiler: a preset Initializer as a `MutatingAdmissionPolicy` and its binding,
//! so that the API server itself does what the preset webhook does (no pod, no certificate, no
//! network hop, nothing to go down). Pure: no client.
//!
//! ```text
//!  spec.preset + scope ──compile──► Program ──render──► MutatingAdmissionPolicy (+ binding)
//!                                      │
//!                                      └──evaluate──► the same patch, in Rust (tests, diff)
//! ```
//!
//! - [`ir`]: the [`Program`]: the conditions that select a request and, per kind with pods, a
//!   list of guarded patch steps; and the interpreter that runs it on JSON objects the way the
//!   API server runs the rendered policy.
//! - [`render`]: the program as CEL: `matchConditions` and one JSONPatch mutation per kind
//!   (`compile` keeps the kinds the rules can send).
//! - [`compile`](mod@compile): from a validated Initializer to the program, the policy with the webhook's
//!   scope, and the binding (everywhere, or a canary namespace); or the field that keeps the
//!   Initializer on the webhook ([`CompileError`]).
//! - [`api`]: the `admissionregistration.k8s.io/v1beta1` types of the policy and binding.
//! - [`corpus`]: objects to feed both engines, and a representative preset.
//! - [`served`]: whether the API server serves the API, and at which version; the reason to
//!   keep the webhook where it does not.
//!
//! Everything is patched with JSONPatch, nothing with ApplyConfiguration: the preset adds an
//! item only where none with its name (or mount path, or label key) exists and never changes
//! one that does, while server-side apply would overwrite an existing label, annotation or env
//! var of the same name; and ApplyConfiguration refuses any atomic list, map or struct in the
//! patch (`validatePatch` in `k8s.io/apiserver`, `plugin/policy/mutating/patch/smd.go`), which a
//! container's `command`, `args` or `env[].valueFrom` are. One patch form also keeps one
//! interpreter.
//!
//! What the policy does not do: write the initializer's `initialized-by` mark. The SDK signs
//! that mark with a key only the initializer's pods and the operator hold, over the object's
//! identity and a time stamp; CEL has neither. An object a policy initialized therefore carries
//! no mark, and the comparison of the engines leaves the mark out.

pub mod api;
pub mod compile;
pub mod corpus;
pub mod ir;
pub mod render;
pub mod served;

pub use compile::{BindingScope, CompileError, Compiled, binding, compile, policy_name, program};
pub use ir::{Evaluation, Program, RequestFacts};

#[cfg(test)]
mod tests;
