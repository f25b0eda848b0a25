//! A gate before a future that a task polls every time it wakes, though it
//! rarely changes (a connection closing): the future is polled again only
//! when it asked to be.
//!
//! A token's cancellation future costs a lock or two a poll (tokio-util's
//! `is_cancelled` and `Notified` each take one). A subscriber's pump polls
//! its connection's at every wake-up, once an event: with a thousand
//! subscribers, those polls (with the connection's own, which it gates the
//! same way with a note of its own, see `peer::connection`) were a tenth of
//! the work of fanning a line out. A [`Gate`] polls its future with a waker
//! of its own, which notes that it was woken and wakes the task; on the
//! task's next poll the future is polled again only if that happened.
//!
//! It keeps [`Future::poll`]'s contract: the task's latest waker is the one
//! woken (it is registered on every poll, before the note is read, so a
//! wake-up between the two is seen now or wakes the task again).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Guards one future (pinned wherever its owner keeps it): see the module's
/// documentation. A gate per future: a wake-up one future asked for must
/// not be taken as another's.
pub(crate) struct Gate {
    note: Arc<Note>,
    /// The waker the future is polled with: `note`'s.
    waker: Waker,
    /// The future was polled at least once (and so asked to wake `note`).
    armed: bool,
}

/// What a [`Gate`]'s own waker does: notes the wake-up and passes it on.
struct Note {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Note {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Default for Gate {
    fn default() -> Gate {
        let note = Arc::new(Note { woken: AtomicBool::new(false), task: AtomicWaker::new() });
        let waker = Waker::from(note.clone());
        Gate { note, waker, armed: false }
    }
}

impl Gate {
    /// Polls `future` if it was never polled or asked to be woken since it
    /// last was; `Pending` without polling it otherwise. Always the same
    /// future every time.
    pub(crate) fn poll<F: Future + ?Sized>(&mut self, future: Pin<&mut F>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.note.task.register(cx.waker());
        if self.armed && !self.note.woken.swap(false, Ordering::Acquire) {
            return Poll::Pending;
        }
        self.armed = true;
        future.poll(&mut Context::from_waker(&self.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio_util::sync::CancellationToken;

    /// A future that counts its polls and is ready once `token` is cancelled.
    fn counted(token: CancellationToken, polls: Arc<AtomicUsize>) -> impl Future<Output = ()> {
        let mut cancelled = Box::pin(token.cancelled_owned());
        std::future::poll_fn(move |cx| {
            polls.fetch_add(1, Ordering::Relaxed);
            cancelled.as_mut().poll(cx)
        })
    }

    #[tokio::test]
    async fn a_gated_future_is_polled_again_only_after_it_woke_and_fires_when_it_does() {
        let (token, polls) = (CancellationToken::new(), Arc::new(AtomicUsize::new(0)));
        let future = counted(token.clone(), polls.clone());
        tokio::pin!(future);
        let mut gate = Gate::default();
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..100 {
            assert!(gate.poll(future.as_mut(), &mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled once to register, then not until woken");
        token.cancel();
        assert!(gate.poll(future.as_mut(), &mut cx).is_ready());
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_task_waiting_behind_a_gate_is_woken_when_its_future_fires_on_another_thread() {
        let token = CancellationToken::new();
        let future = Box::pin(counted(token.clone(), Arc::new(AtomicUsize::new(0))));
        let waiter = tokio::spawn(async move {
            let (mut gate, mut future) = (Gate::default(), future);
            std::future::poll_fn(|cx| gate.poll(future.as_mut(), cx)).await
        });
        tokio::task::yield_now().await;
        std::thread::spawn(move || token.cancel()).join().unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.unwrap().unwrap();
    }
}
