//! How the incoming calls whose handlers asked hear that they are abandoned:
//! a cancellation token ([`Ctx::cancel_token`](super::ctx::Ctx::cancel_token))
//! or, cheaper, a [`Signal`] ([`Ctx::abandoned`](super::ctx::Ctx::abandoned)).
//! Both fire when the call is cancelled, its connection closes, or the other
//! side's input ends.
//!
//! A signal is a flag and the tasks waiting on it. A token is a child of the
//! connection's, whose tree takes a lock at every clone, check and drop: a
//! forwarded call costs 3 % less with a signal. What the tree also gives, a
//! token that still fires on the connection's close when work the handler
//! spawned holds it after the call is over, signals get from this table: a
//! signal still held when its call is forgotten stays listed until the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::message::{Id, IdMap};

#[derive(Default)]
pub(crate) struct CallTokens {
    calls: Mutex<Calls>,
    /// Whether any handler ever asked (spares the lock otherwise).
    any: AtomicBool,
}

#[derive(Default)]
struct Calls {
    by_id: IdMap<Entry>,
    /// Signals still held after their call was forgotten (work the handler
    /// spawned): they fire at the end with the others. Cleared of the ones
    /// no one holds any more whenever it is full.
    outliving: Vec<Weak<Signal>>,
    /// The other side's input ended or the connection closed: everything
    /// fired, and whatever is asked for from now on is fired already (the
    /// handlers still running may still reply to a client that only
    /// half-closed, but work that waits on the client's behalf is abandoned).
    ended: bool,
}

/// What the handler of one call asked for.
#[derive(Default)]
struct Entry {
    token: Option<CancellationToken>,
    signal: Option<Arc<Signal>>,
    /// Cancelled while it waited to start: what its handler asks for is
    /// fired already.
    cancelled: bool,
}

impl Entry {
    fn fire(&self) {
        if let Some(token) = &self.token {
            token.cancel();
        }
        if let Some(signal) = &self.signal {
            signal.fire();
        }
    }
}

/// A call's abandonment without a token: a flag, and the tasks waiting for it.
#[derive(Default)]
pub(crate) struct Signal {
    fired: AtomicBool,
    /// One waker per task that waited, woken once by [`fire`](Self::fire).
    /// A waiter that gives up leaves its waker (a spurious wake-up at
    /// most). tokio's `Notify`, which links and unlinks every waiter under
    /// its lock, made a forwarded call 1.5 % dearer.
    waiters: Mutex<Waiters>,
}

/// Nearly always one waker, the call's own task's: it is kept in place, and
/// only a second task that waits makes the list allocate (a signal is made
/// for every forwarded call).
#[derive(Default)]
struct Waiters {
    first: Option<Waker>,
    more: Vec<Waker>,
}

impl Waiters {
    fn add(&mut self, waker: &Waker) {
        let listed = |waiting: &Waker| waiting.will_wake(waker);
        if self.first.as_ref().is_some_and(listed) || self.more.iter().any(listed) {
            return;
        }
        match &self.first {
            None => self.first = Some(waker.clone()),
            Some(_) => self.more.push(waker.clone()),
        }
    }
}

impl Signal {
    fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        let Waiters { first, more } = std::mem::take(&mut *self.waiters.lock());
        for waker in first.into_iter().chain(more) {
            waker.wake();
        }
    }

    pub fn has_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Ready once the signal has fired; until then, `cx` is woken when it does.
    pub fn poll_fired(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        let mut waiters = self.waiters.lock();
        // Checked again under the lock that `fire` empties the list under:
        // a fire in between is seen here, or finds this waker listed.
        if self.fired.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        waiters.add(cx.waker());
        Poll::Pending
    }
}

impl CallTokens {
    /// The token of call `id`, a child of `closing` (the connection's).
    pub fn token(&self, id: &Id, closing: &CancellationToken) -> CancellationToken {
        self.any.store(true, Ordering::Relaxed);
        let mut calls = self.calls.lock();
        let ended = calls.ended;
        let entry = calls.by_id.entry(id.clone()).or_default();
        let token = entry.token.get_or_insert_with(|| closing.child_token()).clone();
        if ended || entry.cancelled {
            token.cancel();
        }
        token
    }

    /// The signal of call `id`.
    pub fn signal(&self, id: &Id) -> Arc<Signal> {
        self.any.store(true, Ordering::Relaxed);
        let mut calls = self.calls.lock();
        let ended = calls.ended;
        let entry = calls.by_id.entry(id.clone()).or_default();
        let signal = entry.signal.get_or_insert_with(Arc::default).clone();
        if ended || entry.cancelled {
            signal.fire();
        }
        signal
    }

    /// Notes call `id`, read and waiting for a handler slot, so that a
    /// cancel that comes before it starts is not lost.
    pub fn waiting(&self, id: &Id) {
        self.any.store(true, Ordering::Relaxed);
        self.calls.lock().by_id.entry(id.clone()).or_default();
    }

    /// Fires what call `id` asked for, or what it will ask for if it has not
    /// started yet; whether there was such a call.
    pub fn cancel(&self, id: &Id) -> bool {
        let mut calls = self.calls.lock();
        let Some(entry) = calls.by_id.get_mut(id) else { return false };
        entry.cancelled = true;
        entry.fire();
        true
    }

    /// Forgets what a call that finished asked for. A signal someone still
    /// holds is kept for the end.
    pub fn forget(&self, id: &Id) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let mut calls = self.calls.lock();
        if let Some(Entry { signal: Some(signal), .. }) = calls.by_id.remove(id)
            && Arc::strong_count(&signal) > 1
            && !calls.ended
        {
            let outliving = &mut calls.outliving;
            if outliving.len() == outliving.capacity() {
                outliving.retain(|held| held.strong_count() > 0);
            }
            outliving.push(Arc::downgrade(&signal));
        }
    }

    /// The other side will send nothing more, or the connection closed:
    /// everything fires.
    pub fn end(&self) {
        let mut calls = self.calls.lock();
        calls.ended = true;
        for entry in calls.by_id.values() {
            entry.fire();
        }
        for held in calls.outliving.drain(..) {
            if let Some(signal) = held.upgrade() {
                signal.fire();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// A task's waker that counts its wake-ups.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_signal_wakes_every_task_that_waited_once_and_stays_fired() {
        let signal = Signal::default();
        let tasks: Vec<Arc<Counted>> = (0..3).map(|_| Arc::default()).collect();
        let wakers: Vec<Waker> = tasks.iter().map(|task| Waker::from(task.clone())).collect();
        // The first task waits twice: it is listed once.
        for waker in [&wakers[0], &wakers[0], &wakers[1], &wakers[2]] {
            assert!(signal.poll_fired(&mut Context::from_waker(waker)).is_pending());
        }
        signal.fire();
        let woken: Vec<usize> = tasks.iter().map(|task| task.0.load(Ordering::Relaxed)).collect();
        assert_eq!(woken, [1, 1, 1]);
        assert!(signal.poll_fired(&mut Context::from_waker(&wakers[1])).is_ready());
        signal.fire();
        assert_eq!(tasks[0].0.load(Ordering::Relaxed), 1, "a second fire finds nobody waiting");
    }
}
