//! Serving: how the SDK serves reviews, apart from what an initializer author writes. Nothing
//! here is needed to read or write a handler; everything here is here because a measurement or
//! an attack asked for it, and each file's header names which (the README row, with figures).
//! It depends on what it serves (the initializer, its handlers, the controller mode), never the
//! other way round: where a handler runs and how its change becomes a patch are the handler's
//! (`handler::lane`, `handler::diff`).
//!
//! - [`server`]: the HTTPS server, its accept loop, reloads and graceful shutdown, and the
//!   routes (`Initializer::into_router` gives them to a server of your own);
//! - `conn` and `slots`: what one client may hold, and who gets a connection slot when they
//!   run out (the connection attack);
//! - `budget`: how many request-body bytes the server holds at once, in all and per peer (the
//!   body flood);
//! - `repoll`: how a connection is polled, so a review costs no thread hand-off (thread
//!   wake-ups per review, with `handler::lane`);
//! - `answer`: the `AdmissionReview` answer written piece by piece (the answer's CPU).

pub(crate) mod answer;
pub(crate) mod budget;
pub(crate) mod conn;
pub(crate) mod repoll;
pub(crate) mod server;
pub(crate) mod slots;
