//! Cancellation tokens of the incoming calls whose handlers asked for one
//! ([`Ctx::cancel_token`](super::ctx::Ctx::cancel_token)): fired when the call
//! is cancelled, its connection closes, or the other side's input ends.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::message::{Id, IdMap};

#[derive(Default)]
pub(crate) struct CallTokens {
    tokens: Mutex<IdMap<CancellationToken>>,
    /// Whether any handler ever asked for one (spares the lock otherwise).
    any: AtomicBool,
    /// The other side's input ended: no more can arrive, so every token fires
    /// (the handlers still running may still reply to a client that only
    /// half-closed, but work that waits on the client's behalf is abandoned).
    input_ended: AtomicBool,
}

impl CallTokens {
    /// The token of call `id`, a child of `closing` (the connection's).
    pub fn token(&self, id: &Id, closing: &CancellationToken) -> CancellationToken {
        self.any.store(true, Ordering::Relaxed);
        let mut tokens = self.tokens.lock();
        let token = tokens.entry(id.clone()).or_insert_with(|| closing.child_token()).clone();
        if self.input_ended.load(Ordering::Acquire) {
            token.cancel();
        }
        token
    }

    /// Fires and forgets the token of call `id`; whether there was one.
    pub fn cancel(&self, id: &Id) -> bool {
        match self.tokens.lock().remove(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Forgets the token of a call that finished, if it had one.
    pub fn forget(&self, id: &Id) {
        if self.any.load(Ordering::Relaxed) {
            self.tokens.lock().remove(id);
        }
    }

    /// The other side will send nothing more: every token fires.
    pub fn end_of_input(&self) {
        self.input_ended.store(true, Ordering::Release);
        if self.any.load(Ordering::Relaxed) {
            for token in self.tokens.lock().values() {
                token.cancel();
            }
        }
    }
}
