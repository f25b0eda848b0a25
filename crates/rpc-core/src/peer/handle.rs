//! [`PeerHandle`], the cheap, cloneable side of a connection: send requests
//! (with a timeout each, or none) and notifications, close it, read what it
//! counted; and the state it shares with the connection's task.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Wake;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::PeerConfig;
use super::incoming::Counters;
use super::outbox::{Outbox, PushError};
use super::outgoing::{CallError, ForgetOnDrop, OutgoingCalls, Reply};
use super::tokens::{CallTokens, Signal};
use crate::codec::Outbound;
use crate::message::{self, Id, Kind, WriteJson};

/// How to tell the other side that we abandoned a request: a notification
/// naming its id. The dialects differ: MCP sends `notifications/cancelled`
/// with `requestId`, LSP `$/cancelRequest` with `id`.
#[derive(Clone, Copy, Debug)]
pub struct CancelNotice {
    pub method: &'static str,
    /// The params field that carries the request's id.
    pub id_field: &'static str,
}

impl CancelNotice {
    /// MCP's (and BTCP's) `notifications/cancelled {requestId}`.
    pub const MCP: CancelNotice = CancelNotice { method: "notifications/cancelled", id_field: "requestId" };
}

/// The connection was closed; nothing more can be sent on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("connection closed")]
pub struct Closed;

/// Room held in a connection's outbox for a reply being made
/// ([`PeerHandle::reserve_reply`]); given back when dropped.
pub struct ReplyRoom {
    shared: Arc<Shared>,
    bytes: usize,
}

impl Drop for ReplyRoom {
    fn drop(&mut self) {
        self.shared.outbox.unreserve(self.bytes);
    }
}

/// Keeps `Shared::answer_waiters` right however a wait ends.
struct AnswerWaiter<'a>(&'a Shared);

impl Drop for AnswerWaiter<'_> {
    fn drop(&mut self) {
        self.0.answer_waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the engine counted on one connection, for tests, metrics and logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Bytes waiting in the outbox.
    pub queued_bytes: usize,
    /// Replies owed and not yet flushed.
    pub owed_replies: usize,
    /// Messages and bytes in the incoming backlog.
    pub backlog: usize,
    pub backlog_bytes: usize,
    /// Bytes of the requests whose handlers run now.
    pub running_bytes: usize,
    /// Requests answered `overloaded`.
    pub refused: u64,
    /// Notifications dropped because the backlog was full.
    pub dropped_notifications: u64,
}

/// How a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The other side closed its end.
    Eof,
    /// Closed from our side (`PeerHandle::close`).
    Closed,
    /// The daemon shut down.
    Shutdown,
    /// Reading or writing failed, the other side stopped reading or answering
    /// pings, missed the handshake deadline or flooded.
    Failed(String),
}

/// What a connection's handles and its task share.
pub(crate) struct Shared {
    pub conn_id: u64,
    pub outbox: Outbox,
    pub calls: OutgoingCalls,
    pub closing: CancellationToken,
    /// Set by a handler that wants the connection closed once its reply is out.
    pub close_after_reply: AtomicBool,
    /// The other side completed the daemon's handshake.
    pub handshaken: AtomicBool,
    /// One of the signals the connection's task watches (its closing, the
    /// daemon's shutdown) woke it: they are polled with this as their waker
    /// (see the `Wake` impl), and polled again only once it is set.
    pub signalled: AtomicBool,
    pub tokens: CallTokens,
    pub counters: Counters,
    pub config: PeerConfig,
    /// Woken by the connection's task once every request it read has its
    /// answer queued, while someone waits for that
    /// ([`PeerHandle::all_answered`], counted in `answer_waiters`).
    pub answered: Notify,
    pub answer_waiters: AtomicUsize,
    /// [`PeerHandle::stop_serving`] was called: its grace in milliseconds,
    /// plus one (0 while the connection serves).
    pub stop_serving: AtomicU64,
}

impl Shared {
    /// The grace asked for by [`PeerHandle::stop_serving`], once it was called.
    pub fn stop_serving_asked(&self) -> Option<Duration> {
        match self.stop_serving.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms - 1)),
        }
    }
}

/// The waker of the signals the connection's task watches: notes that one
/// fired, then wakes the task (whose waker the outbox holds, registered at
/// each of its polls before it reads the note).
impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.signalled.store(true, Ordering::Release);
        self.outbox.wake_connection();
    }
}

/// The cloneable handle to a connection: send requests and notifications, close it.
#[derive(Clone)]
pub struct PeerHandle {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for PeerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerHandle").field("conn", &self.shared.conn_id).finish()
    }
}

static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

impl PeerHandle {
    pub(crate) fn new(config: PeerConfig) -> PeerHandle {
        let shared = Shared {
            conn_id: NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed),
            outbox: Outbox::new(config.write_queue, config.write_budget),
            calls: OutgoingCalls::new(config.unguessable_ids),
            closing: CancellationToken::new(),
            close_after_reply: AtomicBool::new(false),
            handshaken: AtomicBool::new(config.handshake_deadline.is_none()),
            signalled: AtomicBool::new(false),
            tokens: CallTokens::default(),
            counters: Counters::default(),
            config,
            answered: Notify::new(),
            answer_waiters: AtomicUsize::new(0),
            stop_serving: AtomicU64::new(0),
        };
        PeerHandle { shared: Arc::new(shared) }
    }

    /// A process-wide unique number for this connection (for logs and registries).
    pub fn conn_id(&self) -> u64 {
        self.shared.conn_id
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closing.is_cancelled()
    }

    /// Resolves when the connection is closing or closed.
    pub async fn closed(&self) {
        self.shared.closing.cancelled().await
    }

    /// Resolves once every request read from the other side so far has its
    /// answer queued (or the connection has closed). Whatever is sent after
    /// it resolves goes out behind those answers: a daemon stopping a child
    /// it opened refuses the child's new requests, waits for this, and only
    /// then sends its goodbye, which the child may take as the last word.
    pub async fn all_answered(&self) {
        let shared = &self.shared;
        let counters = &shared.counters;
        shared.answer_waiters.fetch_add(1, Ordering::SeqCst);
        let _counted = AnswerWaiter(shared);
        let seen = counters.answers_published.load(Ordering::SeqCst);
        // The connection's task publishes its count at its next turn.
        shared.outbox.wake_connection();
        loop {
            // Registered before the check, so a count published in between wakes us.
            let answered = shared.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            let fresh = counters.answers_published.load(Ordering::SeqCst) != seen;
            if fresh && counters.unanswered.load(Ordering::SeqCst) == 0 || self.is_closed() {
                return;
            }
            tokio::select! {
                () = answered => {}
                () = self.closed() => return,
            }
        }
    }

    /// Stops serving the other side's requests, the connection staying open
    /// for ours: new requests and those waiting for a handler slot are
    /// answered -32603 `data.reason: "shutting_down"` at once, running ones
    /// get `grace` to finish and then the same answer. Resolves once every
    /// request read has its answer queued (or the connection has closed), so
    /// what is sent next goes out behind them: for a child the daemon opened
    /// itself, which should hear every answer before its goodbye. The daemon's
    /// shutdown does this to every connection tied to it, then closes them.
    pub async fn stop_serving(&self, grace: Duration) {
        let ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX - 1).min(u64::MAX - 1);
        // The first call's grace holds.
        let _ = self.shared.stop_serving.compare_exchange(0, ms + 1, Ordering::Relaxed, Ordering::Relaxed);
        self.shared.outbox.wake_connection();
        self.all_answered().await;
    }

    /// Whether the connection still serves the other side's requests (see
    /// [`PeerHandle::stop_serving`]).
    pub fn is_serving(&self) -> bool {
        self.shared.stop_serving.load(Ordering::Relaxed) == 0 && !self.is_closed()
    }

    /// A token cancelled when the connection closes.
    pub fn close_token(&self) -> CancellationToken {
        self.shared.closing.clone()
    }

    /// Sends a request and waits for its result, at most the connection's
    /// default request timeout.
    pub async fn request<R: DeserializeOwned>(&self, method: &str, params: impl Serialize) -> Result<R, CallError> {
        let raw = self.request_raw(method, &params, Some(self.shared.config.request_timeout)).await?;
        serde_json::from_str(raw.get()).map_err(|e| CallError::Malformed(e.to_string()))
    }

    /// Sends a request and returns the raw result, for callers that pass it on
    /// untouched. `timeout: None` waits as long as the connection lives (a call
    /// that waits on a person); the time spent waiting for room in a full
    /// outbox counts towards the timeout.
    ///
    /// This and the other `request_*` methods are `fn`s that return the call's
    /// future rather than `async fn`s: an `async fn` that only awaits another
    /// lays out its arguments twice and the inner future again, in a future
    /// a handler that forwards is boxed with.
    pub fn request_raw<P: WriteJson + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Reply> {
        self.request_inner(method, params, timeout, None::<(std::future::Pending<()>, _)>)
    }

    /// [`request_raw`](Self::request_raw) that our caller may abandon: when
    /// `cancel` fires first, the call is forgotten (a late answer is dropped),
    /// `notice` tells the other side which request to stop, and the result is
    /// [`CallError::Cancelled`].
    pub fn request_cancellable<P: WriteJson + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
        notice: Option<CancelNotice>,
    ) -> impl Future<Output = Reply> {
        self.request_inner(method, params, timeout, Some((cancel.cancelled(), notice)))
    }

    /// [`request_cancellable`](Self::request_cancellable) abandoned when
    /// `abandoned` resolves: a call made on behalf of one this daemon is
    /// handling passes that call's [`Ctx::abandoned`](super::Ctx::abandoned),
    /// which costs less than its token.
    pub fn request_abandonable<P: WriteJson + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
        abandoned: impl Future<Output = ()>,
        notice: Option<CancelNotice>,
    ) -> impl Future<Output = Reply> {
        self.request_inner(method, params, timeout, Some((abandoned, notice)))
    }

    /// Written as a block rather than an `async fn`, whose arguments would
    /// be laid out twice in its future.
    #[allow(clippy::manual_async_fn, reason = "an async fn lays its arguments out twice")]
    fn request_inner<P: WriteJson + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
        cancel: Option<(impl Future<Output = ()>, Option<CancelNotice>)>,
    ) -> impl Future<Output = Reply> {
        async move {
            let shared = &self.shared;
            let deadline = timeout.map(|limit| Instant::now() + limit);
            // The connection fails the call at its deadline (one timer for all
            // its calls, see `OutgoingCalls`).
            let call = shared.calls.register(deadline.zip(timeout))?;
            let mut forget = ForgetOnDrop { calls: &shared.calls, id: Some(call.id) };
            let json = message::request(Some(&Id::from(call.id)), method, params)
                .map_err(|e| CallError::Malformed(format!("params did not serialise: {e}")))?;
            if call.wake {
                // The connection reads while calls are pending, however full its
                // outbox, and sets its timer for the earliest deadline: it must
                // look again now, even if this request itself waits for room
                // (and so wakes no one).
                shared.outbox.wake_connection();
            }
            let exchange = async {
                match shared.outbox.push(Outbound::message(Kind::Request, json), deadline).await {
                    Ok(()) => {}
                    Err(PushError::Closed) => return Err(CallError::Disconnected),
                    Err(PushError::TimedOut) => return Err(CallError::Timeout(timeout.unwrap_or_default())),
                }
                call.answer.await.map_err(|_| CallError::Disconnected)
            };
            let answer = match cancel {
                None => exchange.await,
                // Biased, the answer first: an answer that is in when the
                // call is abandoned is still the answer, and an unbiased
                // select draws a random number every poll (half a percent of
                // a forwarded call).
                Some((abandoned, notice)) => tokio::select! {
                    biased;
                    answer = exchange => answer,
                    () = abandoned => {
                        drop(forget);
                        if let Some(notice) = notice {
                            let params = serde_json::json!({ notice.id_field: call.id });
                            // Boxed: the notice's future would otherwise
                            // size every call's.
                            let _ = Box::pin(self.notify(notice.method, params)).await;
                        }
                        return Err(CallError::Cancelled);
                    }
                },
            };
            match answer {
                Ok(reply) => {
                    // Whoever answered already took the entry out of the map.
                    forget.id = None;
                    reply
                }
                Err(e) => Err(e),
            }
        }
    }

    /// Sends a notification, waiting for room in the outbox as long as the
    /// connection lives.
    pub async fn notify(&self, method: &str, params: impl Serialize) -> Result<(), Closed> {
        let json = message::request(None, method, &params).map_err(|_| Closed)?;
        self.send_raw(Kind::Notification, json.into()).await
    }

    /// Sends an already serialised message (fan-out serialises an event once for
    /// all subscribers), waiting for room in the outbox as long as the
    /// connection lives. Waiting never closes the connection: a paused reader
    /// of events keeps it. `json` is one JSON text, in UTF-8 as JSON must be:
    /// a WebSocket sends it as a text frame without checking it again.
    pub async fn send_raw(&self, kind: Kind, json: Bytes) -> Result<(), Closed> {
        debug_assert!(std::str::from_utf8(&json).is_ok(), "a raw message is UTF-8 JSON");
        self.shared.outbox.push(Outbound::Message { kind, json }, None).await.map_err(|_| Closed)
    }

    /// Room in this connection's outbox for a reply of about `bytes` that a
    /// handler is about to make (a file's contents): waits while the outbox
    /// is full, then holds the room until the returned guard drops, which
    /// the handler does by returning. The engine counts a reply only once
    /// it is queued, so without this 32 handlers would each build a large
    /// reply for a peer that is not reading and hold all 32 at once; with
    /// it they build them one budget's worth at a time. Take it after any
    /// call back to this same peer, whose requests wait while the outbox is
    /// full.
    pub async fn reserve_reply(&self, bytes: usize) -> Result<ReplyRoom, Closed> {
        let bytes = self.shared.outbox.reserve(bytes).await.map_err(|_| Closed)?;
        Ok(ReplyRoom { shared: self.shared.clone(), bytes })
    }

    /// Closes the connection after what is already queued has been written, with
    /// this WebSocket close code and reason.
    pub fn close(&self, code: u16, reason: &str) {
        let _ = self.shared.outbox.push_now(Outbound::Close { code, reason: reason.to_owned() });
        self.shared.closing.cancel();
        self.shared.tokens.end();
    }

    /// Closes the connection once the reply of the request being handled has
    /// been written (e.g. after too many failed authentication attempts).
    pub fn close_after_reply(&self) {
        self.shared.close_after_reply.store(true, Ordering::Release);
    }

    /// Records that the other side completed the daemon's handshake: the
    /// handshake deadline no longer applies, and the listener stops counting
    /// the connection among the unauthenticated ones.
    pub fn handshake_done(&self) {
        self.shared.handshaken.store(true, Ordering::Release);
    }

    pub fn is_handshaken(&self) -> bool {
        self.shared.handshaken.load(Ordering::Acquire)
    }

    /// Cancels an incoming call in progress whose handler asked to hear of it
    /// ([`Ctx::cancel_token`](super::ctx::Ctx::cancel_token),
    /// [`Ctx::abandoned`](super::ctx::Ctx::abandoned)), for a daemon's cancel
    /// message. Returns whether there was one.
    pub fn cancel_call(&self, id: &Id) -> bool {
        self.shared.tokens.cancel(id)
    }

    /// What the engine counted on this connection.
    pub fn stats(&self) -> PeerStats {
        let shared = &self.shared;
        let counters = &shared.counters;
        PeerStats {
            queued_bytes: shared.outbox.bytes(),
            owed_replies: shared.outbox.owed(),
            backlog: counters.backlog.load(Ordering::Relaxed),
            backlog_bytes: counters.backlog_bytes.load(Ordering::Relaxed),
            running_bytes: counters.running_bytes.load(Ordering::Relaxed),
            refused: counters.refused.load(Ordering::Relaxed),
            dropped_notifications: counters.dropped_notifications.load(Ordering::Relaxed),
        }
    }

    /// A token for the incoming call `id`, cancelled when the connection
    /// closes, when the call is cancelled ([`PeerHandle::cancel_call`]) or
    /// abandoned at shutdown.
    pub(crate) fn call_token(&self, id: &Id) -> CancellationToken {
        self.shared.tokens.token(id, &self.shared.closing)
    }

    /// The same events as [`call_token`](Self::call_token), as a signal.
    pub(crate) fn call_signal(&self, id: &Id) -> Arc<Signal> {
        self.shared.tokens.signal(id)
    }

    /// The other side will send nothing more: our calls fail now rather than
    /// at their timeouts, and every call token fires.
    pub(crate) fn end_of_input(&self) {
        self.shared.calls.fail_all();
        self.shared.tokens.end();
    }

    pub(crate) fn has_pending_calls(&self) -> bool {
        !self.shared.calls.is_empty()
    }
}
