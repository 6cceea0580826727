//! The engine: how the SDK serves reviews, apart from what an initializer author writes. Nothing
//! here is needed to read or write a handler; everything here is here because a measurement or
//! an attack asked for it, and each file's header names which (the README row, with figures):
//!
//! - [`server`]: the HTTPS server, its accept loop, reloads and graceful shutdown, and the
//!   routes (`Initializer::into_router` gives them to a server of your own);
//! - `conn` and `slots`: what one client may hold, and who gets a connection slot when they
//!   run out (the connection attack);
//! - `budget`: how many request-body bytes the server holds at once, in all and per peer (the
//!   body flood);
//! - `repoll` and `lane`: where a handler runs and how a connection is polled, so a review costs
//!   no thread hand-off (thread wake-ups per review);
//! - `diff`: the JSON patch from the two serializations' text (the patch's CPU);
//! - `answer`: the `AdmissionReview` answer written piece by piece (the answer's CPU).

pub(crate) mod answer;
pub(crate) mod budget;
pub(crate) mod conn;
pub(crate) mod diff;
pub(crate) mod lane;
pub(crate) mod repoll;
pub(crate) mod server;
pub(crate) mod slots;
