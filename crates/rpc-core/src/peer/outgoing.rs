//! Our requests to the other side that wait for an answer: one type keeps
//! them, their count and their ids (lsp-server's `req_queue.rs`, outgoing
//! half). The incoming half is `incoming.rs`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::message::{Id, RpcError};

/// Why one of our outgoing requests got no result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The other side answered with an error.
    #[error("{0}")]
    Rpc(RpcError),
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("connection closed")]
    Disconnected,
    #[error("malformed response: {0}")]
    Malformed(String),
    /// Our caller gave up on it ([`PeerHandle::request_cancellable`](super::PeerHandle::request_cancellable)).
    #[error("cancelled")]
    Cancelled,
}

/// The answer to one of our requests.
pub type Reply = Result<Box<RawValue>, CallError>;

/// Our requests waiting for an answer, by id. Closed for good when the
/// connection ends, so a request made after that fails at once instead of
/// waiting for a timeout.
///
/// Their deadlines share one timer, the connection's: a call records its
/// deadline here, and the connection fails the calls whose deadlines passed
/// ([`expire`](Self::expire)) when its timer fires, then sets it for the next
/// one. A timer of each call's own would be registered in and removed from
/// the runtime's timer wheel for every call, answered or not.
pub(crate) struct OutgoingCalls {
    pending: Mutex<Pending>,
    /// How many are pending, read without the lock (the reader reads while
    /// calls are pending, whatever else holds it back).
    len: AtomicUsize,
    /// A call's deadline came before the one the connection's timer is set
    /// for: the connection must set it again ([`take_rearm`](Self::take_rearm)).
    rearm: AtomicBool,
    next_id: AtomicU64,
    /// Keys that scramble our ids, when they must be unguessable.
    scrambler: Option<IdScrambler>,
}

#[derive(Default)]
struct Pending {
    /// By our own ids, which the other side does not choose: a fast hash is safe.
    calls: FxHashMap<u64, Waiting>,
    /// The deadlines of calls that have one, earliest first. A call answered
    /// in time leaves its entry behind, to be skipped when it comes up; the
    /// heap is rebuilt from the calls when such entries outnumber them.
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    /// When the connection's timer fires next; `None` while it is unset.
    armed: Option<Instant>,
    closed: bool,
}

/// A call waiting for its answer.
struct Waiting {
    answer: oneshot::Sender<Reply>,
    /// When it times out, and the timeout it was given (for the error).
    deadline: Option<(Instant, Duration)>,
}

/// A call just registered: its id, where its answer arrives, and whether the
/// connection must look again at its duties: the call is the only one
/// pending (the connection reads while calls are pending), or its deadline
/// comes before the one the connection's timer is set for.
pub(crate) struct Registered {
    pub id: u64,
    pub answer: oneshot::Receiver<Reply>,
    pub wake: bool,
}

impl OutgoingCalls {
    pub fn new(unguessable_ids: bool) -> Self {
        OutgoingCalls {
            pending: Mutex::default(),
            len: AtomicUsize::new(0),
            rearm: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            scrambler: unguessable_ids.then(IdScrambler::new),
        }
    }

    /// A new call, failed with [`CallError::Timeout`] at `deadline` (`Some((at,
    /// timeout))`) if no answer came by then; `Disconnected` once the
    /// connection has ended.
    pub fn register(&self, deadline: Option<(Instant, Duration)>) -> Result<Registered, CallError> {
        let mut id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(keys) = &self.scrambler {
            id = keys.scramble(id);
        }
        let (tx, answer) = oneshot::channel();
        let mut pending = self.pending.lock();
        if pending.closed {
            return Err(CallError::Disconnected);
        }
        pending.calls.insert(id, Waiting { answer: tx, deadline });
        self.len.store(pending.calls.len(), Ordering::Relaxed);
        let mut wake = pending.calls.len() == 1;
        if let Some((at, _)) = deadline {
            if pending.deadlines.len() >= 2 * pending.calls.len() + 64 {
                pending.rebuild_deadlines();
            }
            pending.deadlines.push(Reverse((at, id)));
            if pending.armed.is_none_or(|armed| at < armed) {
                pending.armed = Some(at);
                self.rearm.store(true, Ordering::Release);
                wake = true;
            }
        }
        Ok(Registered { id, answer, wake })
    }

    /// Hands `reply` to the call `id` is the answer to; `false` when no call
    /// waits for it (late, unknown, or not one of our ids).
    pub fn complete(&self, id: &Id, reply: Reply) -> bool {
        let Some(tx) = id.as_u64().and_then(|n| self.take(n)) else {
            return false;
        };
        let _ = tx.send(reply);
        true
    }

    /// Whether the connection's timer must be set again, and when for
    /// (`None`: unset). Asking clears the request.
    pub fn take_rearm(&self) -> Option<Option<Instant>> {
        if !self.rearm.swap(false, Ordering::Acquire) {
            return None;
        }
        Some(self.pending.lock().armed)
    }

    /// The connection's timer fired: fails every call whose deadline is
    /// not after `now` with [`CallError::Timeout`], and returns when to fire
    /// next (the earliest deadline still pending), if ever.
    pub fn expire(&self, now: Instant) -> Option<Instant> {
        let mut overdue = Vec::new();
        let next = {
            let mut pending = self.pending.lock();
            let pending = &mut *pending;
            let next = loop {
                let Some(&Reverse((at, id))) = pending.deadlines.peek() else { break None };
                let answered = !pending.calls.contains_key(&id);
                if !answered && at > now {
                    break Some(at);
                }
                pending.deadlines.pop();
                if let Some(waiting) = pending.calls.remove(&id) {
                    overdue.push(waiting);
                }
            };
            self.len.store(pending.calls.len(), Ordering::Relaxed);
            pending.armed = next;
            next
        };
        for waiting in overdue {
            let limit = waiting.deadline.map(|(_, limit)| limit).unwrap_or_default();
            let _ = waiting.answer.send(Err(CallError::Timeout(limit)));
        }
        next
    }

    /// Forgets a call that will not be answered here (timed out, cancelled).
    pub fn forget(&self, id: u64) {
        self.take(id);
    }

    fn take(&self, id: u64) -> Option<oneshot::Sender<Reply>> {
        let mut pending = self.pending.lock();
        let waiting = pending.calls.remove(&id);
        self.len.store(pending.calls.len(), Ordering::Relaxed);
        waiting.map(|waiting| waiting.answer)
    }

    pub fn contains(&self, id: &Id) -> bool {
        id.as_u64().is_some_and(|n| self.pending.lock().calls.contains_key(&n))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// The connection ended: every pending call fails now, and new ones at once.
    pub fn fail_all(&self) {
        let calls = {
            let mut pending = self.pending.lock();
            pending.closed = true;
            self.len.store(0, Ordering::Relaxed);
            pending.deadlines = BinaryHeap::new();
            std::mem::take(&mut pending.calls)
        };
        for (_, waiting) in calls {
            let _ = waiting.answer.send(Err(CallError::Disconnected));
        }
    }
}

impl Pending {
    /// The deadlines of the calls still pending, without the entries of
    /// those answered: the heap holds at most about twice as many entries
    /// as there are calls, and rebuilding it costs each call that left an
    /// entry behind a constant share.
    fn rebuild_deadlines(&mut self) {
        let live = self.calls.iter().filter_map(|(&id, waiting)| waiting.deadline.map(|(at, _)| Reverse((at, id))));
        self.deadlines = live.collect();
    }
}

/// Forgets a call however the future waiting for it ends unanswered: timed
/// out, failed to send, cancelled, or dropped by its caller.
pub(crate) struct ForgetOnDrop<'a> {
    pub calls: &'a OutgoingCalls,
    pub id: Option<u64>,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.calls.forget(id);
        }
    }
}

/// A keyed permutation of 52-bit numbers (a four-round Feistel network over
/// two 26-bit halves, SipHash with random keys as its round function): ids
/// made from a counter stay unique, but the next one cannot be told from the
/// last ones without the keys.
struct IdScrambler {
    keys: std::hash::RandomState,
}

impl IdScrambler {
    const HALF: u32 = 26;
    const MASK: u64 = (1 << Self::HALF) - 1;

    fn new() -> Self {
        IdScrambler { keys: std::hash::RandomState::new() }
    }

    fn scramble(&self, n: u64) -> u64 {
        use std::hash::BuildHasher;
        let (mut left, mut right) = ((n >> Self::HALF) & Self::MASK, n & Self::MASK);
        for round in 0..4u64 {
            let f = self.keys.hash_one((round, right)) & Self::MASK;
            (left, right) = (right, left ^ f);
        }
        (left << Self::HALF) | right
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrambled_ids_are_unique_below_2_pow_53_and_not_sequential() {
        let keys = IdScrambler::new();
        let ids: Vec<u64> = (1..=100_000).map(|n| keys.scramble(n)).collect();
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        assert!(ids.iter().all(|&id| id < 1 << 53));
        let steps_of_one = ids.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(steps_of_one < 10, "{steps_of_one} consecutive ids");
        // Another connection's keys give other ids.
        assert_ne!(IdScrambler::new().scramble(1), keys.scramble(1));
    }

    #[test]
    fn deadlines_of_answered_calls_do_not_pile_up_and_only_overdue_calls_fail() {
        let calls = OutgoingCalls::new(false);
        let start = Instant::now();
        let limit = Duration::from_secs(30);
        let long = calls.register(Some((start + Duration::from_secs(60), limit))).unwrap();
        for n in 0..10_000 {
            let call = calls.register(Some((start + Duration::from_millis(n), limit))).unwrap();
            assert!(calls.complete(&Id::from(call.id), Err(CallError::Cancelled)));
            let entries = calls.pending.lock().deadlines.len();
            // At most twice the calls pending before the answer, plus 64.
            assert!(entries <= 2 * (calls.len() + 1) + 64, "{entries} deadlines kept for {} calls", calls.len());
        }
        let due = calls.register(Some((start + Duration::from_secs(1), limit))).unwrap();
        // Answered calls' deadlines are skipped; the one overdue call fails.
        assert_eq!(calls.expire(start + Duration::from_secs(2)), Some(start + Duration::from_secs(60)));
        assert_eq!(due.answer.blocking_recv().unwrap().unwrap_err(), CallError::Timeout(limit));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls.expire(start + Duration::from_secs(61)), None);
        assert_eq!(long.answer.blocking_recv().unwrap().unwrap_err(), CallError::Timeout(limit));
        assert!(calls.is_empty());
    }

    #[test]
    fn an_earlier_deadline_asks_for_the_timer_again_and_a_later_one_does_not() {
        let calls = OutgoingCalls::new(false);
        let start = Instant::now();
        let limit = Duration::from_secs(1);
        let _a = calls.register(Some((start + Duration::from_secs(5), limit))).unwrap();
        assert_eq!(calls.take_rearm(), Some(Some(start + Duration::from_secs(5))));
        assert_eq!(calls.take_rearm(), None, "asked once");
        let b = calls.register(Some((start + Duration::from_secs(9), limit))).unwrap();
        assert!(!b.wake);
        assert_eq!(calls.take_rearm(), None);
        let c = calls.register(Some((start + Duration::from_secs(2), limit))).unwrap();
        assert!(c.wake);
        assert_eq!(calls.take_rearm(), Some(Some(start + Duration::from_secs(2))));
    }

    #[test]
    fn the_count_follows_every_change() {
        let calls = OutgoingCalls::new(false);
        let a = calls.register(None).unwrap();
        assert!(a.wake);
        let b = calls.register(None).unwrap();
        assert!(!b.wake);
        assert_eq!(calls.len(), 2);
        assert!(calls.complete(&Id::from(a.id), Err(CallError::Cancelled)));
        assert!(!calls.complete(&Id::from(a.id), Err(CallError::Cancelled)), "answered once");
        calls.forget(b.id);
        assert!(calls.is_empty());
        let c = calls.register(None).unwrap();
        calls.fail_all();
        assert!(calls.is_empty());
        assert_eq!(c.answer.blocking_recv().unwrap().unwrap_err(), CallError::Disconnected);
        assert!(matches!(calls.register(None), Err(CallError::Disconnected)));
    }
}
