//! What a handler gets besides its params: [`Ctx`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio_util::sync::CancellationToken;

use super::handle::PeerHandle;
use super::tokens::Signal;
use crate::message::Id;

/// What a handler gets besides its params: the connection it serves, that
/// connection's own state (`S`, e.g. "has said hello", "is the browser of X"),
/// and the id of the request it answers. `ctx.peer` and `ctx.state` are the
/// [`ConnCtx`]'s, shared by every call on the connection (one reference count
/// a call, not two).
pub struct Ctx<S> {
    conn: Arc<ConnCtx<S>>,
    call: Option<Id>,
}

/// The part of a [`Ctx`] that is the same for every call on a connection.
pub struct ConnCtx<S> {
    pub peer: PeerHandle,
    pub state: Arc<S>,
}

impl<S> std::ops::Deref for Ctx<S> {
    type Target = ConnCtx<S>;

    fn deref(&self) -> &ConnCtx<S> {
        &self.conn
    }
}

impl<S> Clone for Ctx<S> {
    fn clone(&self) -> Self {
        Ctx { conn: self.conn.clone(), call: self.call.clone() }
    }
}

impl<S> Ctx<S> {
    pub fn new(peer: PeerHandle, state: Arc<S>, call: Option<Id>) -> Self {
        Ctx { conn: Arc::new(ConnCtx { peer, state }), call }
    }

    /// A call's context on a connection whose [`ConnCtx`] already exists.
    pub fn on(conn: &Arc<ConnCtx<S>>, call: Option<Id>) -> Self {
        Ctx { conn: conn.clone(), call }
    }

    /// What every call on this connection shares.
    pub fn conn(&self) -> &Arc<ConnCtx<S>> {
        &self.conn
    }

    /// The id of the request being handled (`None` for a notification).
    pub fn request_id(&self) -> Option<&Id> {
        self.call.as_ref()
    }

    /// A token that fires when this call should be abandoned: its connection
    /// closed, the call was cancelled ([`PeerHandle::cancel_call`]), or
    /// shutdown gave up on it. Hand it to work the handler spawns or forwards
    /// (a forwarded call, a dialog) so that work is abandoned, not leaked.
    pub fn cancel_token(&self) -> CancellationToken {
        match &self.call {
            Some(id) => self.peer.call_token(id),
            None => self.peer.close_token(),
        }
    }

    /// Resolves on the same events as [`cancel_token`](Self::cancel_token)
    /// fires, for work that only waits for them (a call forwarded on this
    /// call's behalf: [`PeerHandle::request_abandonable`]). It costs a flag
    /// and a wait, where a token's every clone, check and drop takes its
    /// tree's lock. It may be handed to spawned work like the token: it still
    /// resolves when the connection closes after the call is over.
    pub fn abandoned(&self) -> Abandoned {
        Abandoned(match &self.call {
            Some(id) => Waits::Call(self.peer.call_signal(id)),
            None => {
                let peer = self.peer.clone();
                Waits::Connection(Box::pin(async move { peer.closed().await }))
            }
        })
    }
}

/// A future that resolves when a call is abandoned: [`Ctx::abandoned`].
///
/// A pointer in size, and `Unpin`: a call forwarded on a handler's behalf
/// keeps it in its own future (moved into its box, and once more for every
/// `async fn` it passes through) and polls it in place.
pub struct Abandoned(Waits);

enum Waits {
    /// A request's: its signal in the call table.
    Call(Arc<Signal>),
    /// A notification has no entry in the call table: its connection's close.
    Connection(Pin<Box<dyn Future<Output = ()> + Send>>),
}

impl Abandoned {
    /// Whether the call is abandoned already (cancelled while it waited to
    /// start, say): work on its behalf need not begin. A flag's load.
    pub fn has_fired(&self) -> bool {
        match &self.0 {
            Waits::Call(signal) => signal.has_fired(),
            Waits::Connection(_) => false,
        }
    }
}

impl Future for Abandoned {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            Waits::Call(signal) => signal.poll_fired(cx),
            Waits::Connection(closed) => closed.as_mut().poll(cx),
        }
    }
}
