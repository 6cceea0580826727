//! kubectl-initializer: the `kubectl initializer` plugin. It answers an Initializer user's
//! questions from outside the cluster: what state each Initializer is in ([`status`]), how to
//! take one out of the path now and put it back (`suspend`, `resume`), whether it answers
//! ([`probe`]), why an object was or was not intercepted ([`why`]), and, offline, the exact
//! change an Initializer would make to a manifest ([`diff`]).
//!
//! The decisions are pure functions over what the API server returned (or, for `diff`, what
//! the files say), reusing the operator's own code (names, validation, the webhook
//! configuration it builds, the preset compiler and its interpreter, the probe's review and
//! answer check), the SDK's annotation gate and the preset initializer's own code; [`commands`]
//! is the thin IO shell.

pub mod cli;
pub mod commands;
pub mod diff;
pub mod error;
pub mod object;
pub mod output;
pub mod probe;
pub mod status;
pub mod why;

pub use error::{Error, Result};
