//! A connection's wake-ups of itself, answered by polling it again at once instead of through
//! the scheduler.
//!
//! When the handler takes the request body, hyper's body channel wakes the connection's
//! dispatcher, which is the same task, still being polled. tokio treats a task woken while it
//! runs as a yield: the task goes to the back of the run queue and another worker is woken to
//! steal it. While the handler runs, the reading worker makes a futex call and the answer
//! usually moves to the woken worker. A hand-written server that answers within that same poll
//! never sees this cost; ours, whose handler runs in its own task, paid it on every review.
//!
//! [`Repoll`] polls the future again right away when it woke itself during the poll, at most
//! [`MAX_REPOLLS`] times in a row. After that the wake goes to tokio as before. hyper's own
//! fairness yield is such a wake too, so a connection with pipelined requests now goes back to
//! tokio after 48 turns of hyper's loop instead of 16: still bounded, and tokio's budget still
//! stops a task that has used up its share (those wakes come after the poll).
//!
//! Justified by: sdk/README.md, "The biggest costs found", row "thread wake-ups per review"
//! (p50 at 1,000 req/s 82–85 → 59–61 µs; 104,600 instructions per review without it).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Polls in a row after a wake-up from inside the poll. One covers the body channel's wake-up;
/// a second leaves room for a wake-up from another thread during the repoll.
pub(crate) const MAX_REPOLLS: usize = 2;

/// Not being polled: a wake-up goes to the task's own waker.
const IDLE: u8 = 0;
/// Being polled: a wake-up is noted, and the poll is repeated.
const POLLING: u8 = 1;
/// Woken during the current poll.
const WOKEN: u8 = 2;

/// A future that answers its own wake-ups by being polled again, see the module header.
pub(crate) struct Repoll<F> {
    inner: Pin<Box<F>>,
    wake: Arc<SelfWake>,
    /// The waker handed to `inner`, built once: it refers to `wake`.
    waker: Waker,
}

struct SelfWake {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for SelfWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            // The running poll sees it and polls again.
            Ok(_) | Err(WOKEN) => {}
            _ => self.task.wake(),
        }
    }
}

impl<F: Future> Repoll<F> {
    pub(crate) fn new(inner: F) -> Self {
        let wake = Arc::new(SelfWake {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(Arc::clone(&wake));
        Self {
            inner: Box::pin(inner),
            wake,
            waker,
        }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Registered before polling: a wake-up that arrives once the poll ended must find it.
        this.wake.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..=MAX_REPOLLS {
            this.wake.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(out) = this.inner.as_mut().poll(&mut inner_cx) {
                this.wake.state.store(IDLE, Ordering::Release);
                return Poll::Ready(out);
            }
            if this
                .wake
                .state
                .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        // Still waking itself: let the scheduler run others first.
        this.wake.state.store(IDLE, Ordering::Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (Arc::clone(&count), Waker::from(count))
    }

    /// Wakes itself on each of its first `self_wakes` polls, then is ready.
    fn waking_itself(self_wakes: usize, polls: Arc<AtomicUsize>) -> impl Future<Output = usize> {
        std::future::poll_fn(move |cx| {
            let n = polls.fetch_add(1, Ordering::SeqCst);
            if n < self_wakes {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(n)
            }
        })
    }

    #[test]
    fn a_wake_up_from_inside_the_poll_is_answered_by_polling_again() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut fut = std::pin::pin!(Repoll::new(waking_itself(1, Arc::clone(&polls))));
        let (count, waker) = counting();
        let polled = fut.as_mut().poll(&mut Context::from_waker(&waker));
        assert_eq!(polled, Poll::Ready(1));
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "the task was not rescheduled"
        );
    }

    #[test]
    fn a_future_that_keeps_waking_itself_goes_back_to_the_scheduler() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut fut = std::pin::pin!(Repoll::new(waking_itself(usize::MAX, Arc::clone(&polls))));
        let (count, waker) = counting();
        assert!(
            fut.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(polls.load(Ordering::SeqCst), MAX_REPOLLS + 1);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "handed to the scheduler once"
        );
    }

    #[test]
    fn a_wake_up_after_the_poll_reaches_the_task() {
        let stash: Arc<std::sync::Mutex<Option<Waker>>> = Arc::default();
        let fut = {
            let stash = Arc::clone(&stash);
            std::future::poll_fn(move |cx| {
                *stash.lock().unwrap() = Some(cx.waker().clone());
                Poll::<()>::Pending
            })
        };
        let mut fut = std::pin::pin!(Repoll::new(fut));
        let (count, waker) = counting();
        assert!(
            fut.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        let inner = stash.lock().unwrap().take().unwrap();
        inner.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        // A later poll registers a new task waker, which the next wake-up reaches.
        let (second, waker) = counting();
        assert!(
            fut.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        inner.wake();
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_wake_up_from_another_thread_during_the_poll_is_not_lost() {
        let polls = Arc::new(AtomicUsize::new(0));
        let fut = {
            let polls = Arc::clone(&polls);
            std::future::poll_fn(move |cx| {
                if polls.fetch_add(1, Ordering::SeqCst) == 0 {
                    let waker = cx.waker().clone();
                    std::thread::spawn(move || waker.wake()).join().unwrap();
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
        };
        let mut fut = std::pin::pin!(Repoll::new(fut));
        let (count, waker) = counting();
        assert_eq!(
            fut.as_mut().poll(&mut Context::from_waker(&waker)),
            Poll::Ready(())
        );
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_wake_racing_the_end_of_the_poll_is_never_lost() {
        // The other thread wakes at any moment: during the poll (then the poll is repeated and the
        // future is ready at once) or after it (then the task is woken). Never neither.
        for round in 0..2_000u64 {
            let polls = Arc::new(AtomicUsize::new(0));
            let waking: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
            let fut = {
                let (polls, waking) = (Arc::clone(&polls), Arc::clone(&waking));
                std::future::poll_fn(move |cx| {
                    if polls.fetch_add(1, Ordering::SeqCst) == 0 {
                        let waker = cx.waker().clone();
                        *waking.lock().unwrap() = Some(std::thread::spawn(move || waker.wake()));
                        // End the poll a little later each round, so the wake lands on both sides.
                        let spin = std::time::Instant::now();
                        while spin.elapsed() < std::time::Duration::from_micros(round % 80) {}
                        Poll::Pending
                    } else {
                        Poll::Ready(())
                    }
                })
            };
            let mut fut = std::pin::pin!(Repoll::new(fut));
            let (count, waker) = counting();
            let polled = fut.as_mut().poll(&mut Context::from_waker(&waker));
            waking.lock().unwrap().take().unwrap().join().unwrap();
            let woken = count.0.load(Ordering::SeqCst);
            match polled {
                Poll::Ready(()) => assert_eq!(woken, 0, "repolled and also rescheduled"),
                Poll::Pending => assert_eq!(woken, 1, "the wake-up was lost"),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_tokio_a_task_woken_from_elsewhere_completes() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(Repoll::new(async move { rx.await.unwrap() + 1 }));
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        tx.send(41).unwrap();
        let done = tokio::time::timeout(std::time::Duration::from_secs(10), task).await;
        assert_eq!(done.expect("the wake-up was lost").unwrap(), 42);
    }
}
