//! What one client may hold: the phase a connection is in (waiting for a request head, receiving
//! a request body, running a request, idle between requests), the deadline each phase allows,
//! and the IO and service wrappers that track the phase, so a slow client is cut off instead of
//! holding a connection slot forever, and a full server knows which connections it can close
//! without losing an answer (`slots`).
//!
//! Justified by safety, not speed: the e2e scenario
//! `connection_attack_neither_deregisters_the_guard_nor_fails_a_create` (docs/architecture.md,
//! "a pod holding connections does not keep the API server and the probe out"; 0 failed creates
//! of 151 on kind).

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::route::Carried;
use crate::serve::budget::BodyAllowance;

/// The time bounds of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// From the TCP accept to the end of the TLS handshake, and from the first byte of a
    /// request (or the end of the handshake) to its complete head.
    pub header: Duration,
    /// Between the end of one answer and the first byte of the next request.
    pub idle: Duration,
}

/// Where a connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for a request head to complete (also right after the handshake).
    Head,
    /// At least one request is being answered; the handler's budget and the body timeout bound it.
    Busy,
    /// A request's body is still arriving (the body timeout bounds it): nothing is being worked
    /// on yet, so closing the connection loses no answer.
    Body,
    /// Between requests, nothing received yet.
    Idle,
}

/// When a connection in `phase` since `since` is to be closed; `None` while a request runs.
pub(crate) fn deadline(phase: Phase, since: Instant, limits: &Limits) -> Option<Instant> {
    match phase {
        Phase::Head => Some(since + limits.header),
        Phase::Idle => Some(since + limits.idle),
        Phase::Busy | Phase::Body => None,
    }
}

/// What the watchdog does, looking at `now` at a connection in `phase` since `since`: `Err` with
/// the phase when it overstayed, else `Ok` with when to look again. It looks again at the
/// deadline, and at the latest after the shorter of the two limits: a phase that begins after
/// `now` cannot end before `now` plus that limit, so no phase change needs to wake the watchdog
/// (it is never woken per request, only about every header timeout per connection).
pub(crate) fn next_look(
    phase: Phase,
    since: Instant,
    now: Instant,
    limits: &Limits,
) -> Result<Instant, Phase> {
    let recheck = now + limits.header.min(limits.idle);
    match deadline(phase, since, limits) {
        Some(at) if at <= now => Err(phase),
        Some(at) => Ok(at.min(recheck)),
        None => Ok(recheck),
    }
}

/// How soon after the accept a connection's first request must come for the connection to count
/// as dialled for it ([`Carried::NewConnection`]). A client may dial a connection and leave it
/// in its idle pool (Go's transport does, when another connection freed up first), and that
/// connection's first request comes later, on a path admitted when it was dialled. The operator
/// makes a route check some seconds after it changes what admits the API server, longer than
/// this, so a connection counted as new was dialled after the change. A connection dialled for
/// a check is never judged otherwise: the check's webhook times out after 1 s too, so a call
/// answered in time reached this server within 1 s of its dial.
pub(crate) const NEW_CONNECTION_WITHIN: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct State {
    phase: Phase,
    since: Instant,
    in_flight: usize,
    /// Requests begun on the connection so far.
    requests: u64,
    /// When the connection was accepted.
    accepted: Instant,
}

/// The phase of one connection, shared by its IO wrapper, its service and its watchdog.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<State>,
}

impl Activity {
    /// A connection just accepted: its handshake, then its first request head, are awaited.
    pub fn new() -> Arc<Self> {
        let now = Instant::now();
        Arc::new(Self {
            state: Mutex::new(State {
                phase: Phase::Head,
                since: now,
                in_flight: 0,
                requests: 0,
                accepted: now,
            }),
        })
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// The phase and when it began.
    pub fn phase(&self) -> (Phase, Instant) {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (s.phase, s.since)
    }

    /// Whether closing the connection loses no answer: no request is being worked on (idle,
    /// a head or a body still arriving).
    pub fn can_close(&self) -> bool {
        self.phase().0 != Phase::Busy
    }

    /// The request's body starts arriving; the returned guard marks the end of it when dropped.
    fn body_started(self: &Arc<Self>) -> ReadingBody {
        self.update(|s| {
            if s.phase == Phase::Busy {
                s.phase = Phase::Body;
                s.since = Instant::now();
            }
        });
        ReadingBody(Arc::clone(self))
    }

    /// The TLS handshake ended: the first request head's clock starts now.
    pub fn handshaken(&self) {
        self.update(|s| {
            if s.phase == Phase::Head {
                s.since = Instant::now();
            }
        });
    }

    fn received(&self) {
        self.update(|s| {
            if s.phase == Phase::Idle {
                s.phase = Phase::Head;
                s.since = Instant::now();
            }
        });
    }

    /// A request's head arrived: which connection carries it, one dialled for it (the first
    /// request, within [`NEW_CONNECTION_WITHIN`] of the accept) or one that was there before.
    pub(crate) fn request_started(&self) -> Carried {
        let mut carried = Carried::ReusedConnection;
        self.update(|s| {
            s.in_flight += 1;
            s.requests += 1;
            s.phase = Phase::Busy;
            if s.requests == 1 && s.accepted.elapsed() <= NEW_CONNECTION_WITHIN {
                carried = Carried::NewConnection;
            }
        });
        carried
    }

    fn request_ended(&self) {
        self.update(|s| {
            s.in_flight = s.in_flight.saturating_sub(1);
            if s.in_flight == 0 {
                s.phase = Phase::Idle;
                s.since = Instant::now();
            }
        });
    }

    #[cfg(test)]
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        deadline(s.phase, s.since, limits)
    }

    /// Returns once the connection has overstayed its phase's deadline.
    pub async fn expired(&self, limits: Limits) -> Phase {
        loop {
            let (phase, since) = self.phase();
            match next_look(phase, since, Instant::now(), &limits) {
                Err(overstayed) => return overstayed,
                Ok(at) => tokio::time::sleep_until(at).await,
            }
        }
    }
}

/// An IO stream that marks the start of a request head when bytes arrive on an idle connection.
pub(crate) struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Watched<T> {
    /// Wrap `inner`, reporting to `activity`.
    pub fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.received();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Marks a request's body as arriving until dropped (see [`BodyWatch`]).
pub(crate) struct ReadingBody(Arc<Activity>);

impl Drop for ReadingBody {
    fn drop(&mut self) {
        self.0.update(|s| {
            if s.phase == Phase::Body {
                s.phase = Phase::Busy;
            }
        });
    }
}

/// In a request's extensions: lets the handler say while it waits for the body, so that a
/// client sending its body slowly holds a slot a newcomer can take.
#[derive(Clone)]
pub(crate) struct BodyWatch(Arc<Activity>);

impl BodyWatch {
    /// The body starts arriving; it has arrived (or the wait is over) when the guard drops.
    pub fn reading(&self) -> ReadingBody {
        self.0.body_started()
    }
}

/// A hyper service that marks each request busy from its head until its answer is produced,
/// and gives each request the body budget it draws on and which connection carries it
/// ([`Carried`], for the route check).
#[derive(Clone)]
pub(crate) struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    allowance: BodyAllowance,
}

impl<S> Tracked<S> {
    /// Wrap `inner`, reporting to `activity`; its bodies draw on `allowance`.
    pub fn new(inner: S, activity: Arc<Activity>, allowance: BodyAllowance) -> Self {
        Self {
            inner,
            activity,
            allowance,
        }
    }
}

/// Ends the request's busy phase when dropped, also when the answer is abandoned.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

impl<S, B> hyper::service::Service<http::Request<B>> for Tracked<S>
where
    S: hyper::service::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, mut request: http::Request<B>) -> Self::Future {
        let carried = self.activity.request_started();
        let extensions = request.extensions_mut();
        extensions.insert(carried);
        extensions.insert(BodyWatch(Arc::clone(&self.activity)));
        extensions.insert(self.allowance.clone());
        let guard = InFlight(Arc::clone(&self.activity));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let out = answer.await;
            drop(guard);
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        header: Duration::from_secs(10),
        idle: Duration::from_secs(120),
    };

    #[test]
    fn each_phase_has_its_own_deadline_and_a_running_request_none() {
        let t = Instant::now();
        assert_eq!(
            deadline(Phase::Head, t, &LIMITS),
            Some(t + Duration::from_secs(10))
        );
        assert_eq!(
            deadline(Phase::Idle, t, &LIMITS),
            Some(t + Duration::from_secs(120))
        );
        assert_eq!(deadline(Phase::Busy, t, &LIMITS), None);
    }

    #[test]
    fn the_watchdog_looks_again_at_the_deadline_or_after_the_shorter_limit() {
        let t = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(next_look(Phase::Head, t, t + s(3), &LIMITS), Ok(t + s(10)));
        assert_eq!(
            next_look(Phase::Head, t, t + s(10), &LIMITS),
            Err(Phase::Head)
        );
        assert_eq!(next_look(Phase::Idle, t, t + s(50), &LIMITS), Ok(t + s(60)));
        assert_eq!(
            next_look(Phase::Idle, t, t + s(115), &LIMITS),
            Ok(t + s(120))
        );
        assert_eq!(
            next_look(Phase::Idle, t, t + s(121), &LIMITS),
            Err(Phase::Idle)
        );
        assert_eq!(
            next_look(Phase::Busy, t, t + s(999), &LIMITS),
            Ok(t + s(1009))
        );
    }

    #[test]
    fn a_phase_beginning_after_a_look_never_ends_before_the_next_look() {
        // Whatever the watchdog saw at `now`, any phase entered at or after `now` has its
        // deadline no earlier than the next look: no phase change needs to wake it.
        let t = Instant::now();
        let s = Duration::from_secs;
        let short = Limits {
            header: s(30),
            idle: s(5),
        };
        for limits in [LIMITS, short] {
            for seen in [Phase::Head, Phase::Idle, Phase::Busy] {
                for since in [t, t + s(1)] {
                    let now = t + s(2);
                    let Ok(look) = next_look(seen, since, now, &limits) else {
                        continue;
                    };
                    for entered in [now, now + s(1), now + s(7)] {
                        for next in [Phase::Head, Phase::Idle] {
                            let at = deadline(next, entered, &limits).unwrap();
                            assert!(at >= look, "{seen:?} then {next:?}: {at:?} < {look:?}");
                        }
                    }
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_on_an_idle_connection_start_the_header_clock() {
        let activity = Activity::new();
        activity.request_started();
        activity.request_ended();
        assert_eq!(
            activity.deadline(&LIMITS),
            Some(Instant::now() + LIMITS.idle)
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        activity.received();
        assert_eq!(
            activity.deadline(&LIMITS),
            Some(Instant::now() + LIMITS.header)
        );
        // More bytes of the same head do not push the deadline back.
        tokio::time::advance(Duration::from_secs(5)).await;
        activity.received();
        assert_eq!(
            activity.deadline(&LIMITS),
            Some(Instant::now() + Duration::from_secs(5))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_arriving_can_be_closed_and_the_answer_being_worked_on_cannot() {
        let activity = Activity::new();
        activity.request_started();
        assert!(!activity.can_close(), "the head arrived: the request runs");
        tokio::time::advance(Duration::from_secs(3)).await;
        let reading = activity.body_started();
        assert_eq!(activity.phase(), (Phase::Body, Instant::now()));
        assert!(
            activity.can_close(),
            "nothing is worked on while the body arrives"
        );
        assert_eq!(
            activity.deadline(&LIMITS),
            None,
            "the body timeout bounds it"
        );
        drop(reading);
        assert_eq!(activity.phase().0, Phase::Busy);
        assert!(!activity.can_close());
        activity.request_ended();
        assert!(activity.can_close());
    }

    #[test]
    fn only_the_first_request_comes_on_a_new_connection() {
        let activity = Activity::new();
        assert_eq!(activity.request_started(), Carried::NewConnection);
        activity.request_ended();
        assert_eq!(activity.request_started(), Carried::ReusedConnection);
        assert_eq!(activity.request_started(), Carried::ReusedConnection);
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_request_long_after_the_accept_comes_on_a_waiting_connection() {
        let dialled_for_it = Activity::new();
        tokio::time::advance(NEW_CONNECTION_WITHIN).await;
        assert_eq!(dialled_for_it.request_started(), Carried::NewConnection);
        // A client's pool keeps a connection it dialled and did not use; its first request
        // may come well after whatever admitted it has changed.
        let pooled = Activity::new();
        tokio::time::advance(NEW_CONNECTION_WITHIN + Duration::from_millis(1)).await;
        assert_eq!(pooled.request_started(), Carried::ReusedConnection);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_expires_only_once_its_phase_overstays() {
        let activity = Activity::new();
        activity.request_started();
        let watcher = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move { activity.expired(LIMITS).await }
        });
        tokio::time::advance(Duration::from_secs(600)).await;
        tokio::task::yield_now().await;
        assert!(!watcher.is_finished(), "a running request never expires");
        activity.request_ended();
        tokio::time::advance(Duration::from_secs(119)).await;
        tokio::task::yield_now().await;
        assert!(!watcher.is_finished());
        activity.received();
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(watcher.await.unwrap(), Phase::Head);
    }
}
