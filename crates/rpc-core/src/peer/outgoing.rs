//! Our requests to the other side that wait for an answer: one type keeps
//! them, their count and their ids (lsp-server's `req_queue.rs`, outgoing
//! half). The incoming half is `incoming.rs`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

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
pub(crate) struct OutgoingCalls {
    pending: Mutex<Pending>,
    /// How many are pending, read without the lock (the reader reads while
    /// calls are pending, whatever else holds it back).
    len: AtomicUsize,
    next_id: AtomicU64,
    /// Keys that scramble our ids, when they must be unguessable.
    scrambler: Option<IdScrambler>,
}

#[derive(Default)]
struct Pending {
    /// By our own ids, which the other side does not choose: a fast hash is safe.
    calls: FxHashMap<u64, oneshot::Sender<Reply>>,
    closed: bool,
}

/// A call just registered: its id, where its answer arrives, and whether it is
/// the only one pending (the connection must then look again at whether it
/// may read).
pub(crate) struct Registered {
    pub id: u64,
    pub answer: oneshot::Receiver<Reply>,
    pub first: bool,
}

impl OutgoingCalls {
    pub fn new(unguessable_ids: bool) -> Self {
        OutgoingCalls {
            pending: Mutex::default(),
            len: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            scrambler: unguessable_ids.then(IdScrambler::new),
        }
    }

    /// A new call; `Disconnected` once the connection has ended.
    pub fn register(&self) -> Result<Registered, CallError> {
        let mut id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(keys) = &self.scrambler {
            id = keys.scramble(id);
        }
        let (tx, answer) = oneshot::channel();
        let mut pending = self.pending.lock();
        if pending.closed {
            return Err(CallError::Disconnected);
        }
        pending.calls.insert(id, tx);
        self.len.store(pending.calls.len(), Ordering::Relaxed);
        Ok(Registered { id, answer, first: pending.calls.len() == 1 })
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

    /// Forgets a call that will not be answered here (timed out, cancelled).
    pub fn forget(&self, id: u64) {
        self.take(id);
    }

    fn take(&self, id: u64) -> Option<oneshot::Sender<Reply>> {
        let mut pending = self.pending.lock();
        let sender = pending.calls.remove(&id);
        self.len.store(pending.calls.len(), Ordering::Relaxed);
        sender
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
            std::mem::take(&mut pending.calls)
        };
        for (_, tx) in calls {
            let _ = tx.send(Err(CallError::Disconnected));
        }
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
    fn the_count_follows_every_change() {
        let calls = OutgoingCalls::new(false);
        let a = calls.register().unwrap();
        assert!(a.first);
        let b = calls.register().unwrap();
        assert!(!b.first);
        assert_eq!(calls.len(), 2);
        assert!(calls.complete(&Id::from(a.id), Err(CallError::Cancelled)));
        assert!(!calls.complete(&Id::from(a.id), Err(CallError::Cancelled)), "answered once");
        calls.forget(b.id);
        assert!(calls.is_empty());
        let c = calls.register().unwrap();
        calls.fail_all();
        assert!(calls.is_empty());
        assert_eq!(c.answer.blocking_recv().unwrap().unwrap_err(), CallError::Disconnected);
        assert!(matches!(calls.register(), Err(CallError::Disconnected)));
    }
}
