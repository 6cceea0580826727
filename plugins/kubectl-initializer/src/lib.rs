//! kubectl-initializer: the `kubectl initializer` plugin. It answers an Initializer user's
//! questions from outside the cluster: what state each Initializer is in ([`status`]), how to
//! take one out of the path now and put it back (`suspend`, `resume`), whether it answers
//! ([`probe`]), and why an object was or was not intercepted ([`why`]).
//!
//! The decisions are pure functions over what the API server returned, reusing the operator's
//! own code (names, validation, the webhook configuration it builds, the probe's review and
//! answer check) and the SDK's annotation gate; [`commands`] is the thin IO shell.

pub mod cli;
pub mod commands;
pub mod error;
pub mod object;
pub mod output;
pub mod probe;
pub mod status;
pub mod why;

pub use error::{Error, Result};
