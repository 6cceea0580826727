//! What few initializers need; an author starts at the crate root. Here: serving by hand
//! ([`Server`] from [`Initializer::bind`](crate::Initializer::bind), [`block_on`], and the routes
//! for a server of your own from [`Initializer::into_router`](crate::Initializer::into_router)),
//! the Kubernetes 1.7 controller mode ([`Mode`], [`Rules`]), what the raw review entry points
//! ([`Initializer::review`](crate::Initializer::review)) answer with, and the knobs of
//! [`Tuning`].

pub use crate::controller::{Mode, Rule, Rules};
pub use crate::initializer::{DEFAULT_BUDGET, DEFAULT_MAX_REQUEST_BYTES, Rejection};
pub use crate::review::{Response, Status, Verdict};
pub use crate::serve::server::{INITIALIZE_PATH, Server, block_on};

/// Settings an initializer rarely changes: bring them in with `use
/// kube_initializer::advanced::Tuning;` and chain them like the builder's own.
pub trait Tuning: Sized + sealed::Sealed {
    /// Largest accepted request body (default 7 MiB: an UPDATE of two 3 MiB objects); larger
    /// ones get HTTP 413.
    fn max_request_bytes(self, bytes: usize) -> Self;

    /// Whether to mark every object a handler changed, in
    /// [`INITIALIZED_BY_ANNOTATION`](crate::mutate::INITIALIZED_BY_ANNOTATION):
    /// `<name>/<generation>/t=<unix seconds>/<MAC>` (`<name>/t=…` without a generation), the MAC
    /// made with a key derived from the serving key, over the object's namespace, group,
    /// resource and name (or `generateName`) and the time stamp; `<name>/<generation>` unsigned
    /// while no serving key is loaded (a handler called without a server). On by default: after
    /// an outage the operator counts the objects created without a valid mark, so that they can
    /// be recreated; an unsigned or copied mark counts as none.
    fn mark_initialized(self, mark: bool) -> Self;

    /// The generation written into the mark (from `INITIALIZER_GENERATION` when served).
    fn generation(self, generation: Option<i64>) -> Self;

    /// Run handlers inside the task of the connection that received the request. Saves a task
    /// spawn per request; panics are still caught, but the budget can no longer answer for a
    /// handler that hangs. Only for handlers that never block. Without it, handlers already run
    /// as tasks on the async workers (no thread hand-off) while one worker stays free of
    /// handlers, and on tokio's blocking pool beyond that.
    fn inline_handlers(self, inline: bool) -> Self;
}

pub(crate) mod sealed {
    /// Only the SDK's own types take [`Tuning`](super::Tuning), so it can grow.
    pub trait Sealed {}
}

impl<C> sealed::Sealed for crate::Initializer<C> {}

impl<C> Tuning for crate::Initializer<C> {
    fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    fn mark_initialized(mut self, mark: bool) -> Self {
        self.mark_initialized = mark;
        self
    }

    fn generation(mut self, generation: Option<i64>) -> Self {
        self.generation = generation;
        self
    }

    fn inline_handlers(mut self, inline: bool) -> Self {
        self.inline_handlers = inline;
        self
    }
}
