//! The peer: one JSON-RPC connection, symmetric in both directions.
//!
//! One task per connection ([`Connection::run`]) does everything in one
//! `select!`: it reads frames, routes responses to our pending calls, runs
//! incoming handlers as futures it polls itself (no task spawn per message),
//! and writes what the outbox holds (see `outbox.rs`: one bounded queue, one
//! writer, flushed once per batch). Because the reader and the handlers live
//! in one loop, a handler that awaits a reply from the other side never stops
//! that reply from being read: that is the deadlock tower-lsp's
//! `buffer_unordered(4)` walks into.
//!
//! Memory is bounded in bytes whatever the other side does:
//! replies wait in the outbox (a byte budget), requests and notifications that
//! cannot run yet wait in the [`IncomingBacklog`] (a count and a byte budget),
//! and past those, requests are refused (`overloaded`) and notifications
//! dropped, until a peer that keeps flooding is cut off. The reader pauses
//! while the outbox is full (the other side is not reading our replies), but
//! never while we wait for answers of our own: two peers that flood each other
//! with requests whose handlers call back would otherwise stop reading each
//! other's answers and stall for good.
//!
//! [`PeerHandle`] is the cheap, cloneable side: send requests (with a timeout
//! each, or none) and notifications, and close the connection. When the
//! connection ends, every pending call fails at once with
//! [`CallError::Disconnected`].

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, join_all};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::codec::{Frame, Outbound, Transport};
use crate::message::{self, Id, Invalid, Kind, Message, Outcome, Parsed, RpcError};
use crate::outbox::{Drain, Drained, Outbox, PushError};
use crate::router::{ConnCtx, Ctx, HandlerFuture, Router};
use crate::shutdown::Shutdown;

/// Limits and timeouts of one connection. The defaults are the engine's
/// documented budgets (README, "The engine").
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// Incoming requests whose handlers run at once. With the write budget it
    /// bounds what one connection can make the daemon hold: up to
    /// `write_budget` of queued replies plus one reply per running handler.
    pub max_concurrent: usize,
    /// Requests waiting for a handler slot and notifications waiting to run,
    /// together: at most this many...
    pub backlog: usize,
    /// ...and this many bytes (of their frames). Past either, a request is
    /// answered `overloaded` and a notification dropped.
    pub backlog_bytes: usize,
    /// Messages refused in a row (overloaded requests, dropped notifications)
    /// after which the peer is judged to be flooding and disconnected.
    pub flood_limit: usize,
    /// Outbound messages waiting to be written: at most this many...
    pub write_queue: usize,
    /// ...and this many bytes. While either is reached no new incoming request
    /// is started, and producers on other tasks wait for room.
    pub write_budget: usize,
    /// How long writes may make no progress while replies are owed before the
    /// other side is judged not to be reading and the connection is dropped.
    pub write_stall: Duration,
    /// Timeout of [`PeerHandle::request`] (`request_raw` takes its own).
    pub request_timeout: Duration,
    /// Longest batch accepted.
    pub max_batch: usize,
    /// Interval between liveness pings on transports that want them (WebSocket),
    /// and how many may go unanswered.
    pub keepalive: Duration,
    pub keepalive_misses: u32,
    /// A handshake (see [`PeerHandle::handshake_done`]) the other side must
    /// complete within this time, or the connection is closed.
    pub handshake_deadline: Option<Duration>,
    /// What the daemon says to this peer when it shuts down.
    pub goodbye: Option<Goodbye>,
    /// Give our requests ids the other side cannot predict (still unique, and
    /// below 2^53 so JavaScript reads them exactly), for a daemon that
    /// accepts answers on a channel where a third party could guess the next
    /// id (BTCP's SSE fallback).
    pub unguessable_ids: bool,
}

/// Default number of messages in the incoming backlog.
pub const DEFAULT_BACKLOG: usize = 1024;
/// Default bytes in the incoming backlog.
pub const DEFAULT_BACKLOG_BYTES: usize = 16 * 1024 * 1024;
/// Default byte budget of the outbox.
pub const DEFAULT_WRITE_BUDGET: usize = 8 * 1024 * 1024;

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            max_concurrent: 32,
            backlog: DEFAULT_BACKLOG,
            backlog_bytes: DEFAULT_BACKLOG_BYTES,
            flood_limit: 4 * DEFAULT_BACKLOG,
            write_queue: 1024,
            write_budget: DEFAULT_WRITE_BUDGET,
            write_stall: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            max_batch: 1000,
            keepalive: Duration::from_secs(30),
            keepalive_misses: 2,
            handshake_deadline: None,
            goodbye: None,
            unguessable_ids: false,
        }
    }
}

/// The daemon's last word to a peer at shutdown.
#[derive(Clone, Debug)]
pub struct Goodbye {
    pub method: String,
    pub params: serde_json::Value,
    /// `Some(limit)`: sent as a request and awaited at most this long (for
    /// connections the daemon opened: a child told to `shutdown`). `None`: a
    /// notification.
    pub awaited: Option<Duration>,
}

impl Goodbye {
    /// A notification, for connections the daemon accepted.
    pub fn notification(method: &str, params: serde_json::Value) -> Self {
        Goodbye { method: method.to_owned(), params, awaited: None }
    }

    /// A request awaited at most `limit`, for connections the daemon opened.
    pub fn request(method: &str, params: serde_json::Value, limit: Duration) -> Self {
        Goodbye { method: method.to_owned(), params, awaited: Some(limit) }
    }
}

/// Why one of our outgoing requests got no result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The other side answered with an error.
    #[error("{0}")]
    Rpc(RpcError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("connection closed")]
    Disconnected,
    #[error("malformed response: {0}")]
    Malformed(String),
    /// Our caller gave up on it ([`PeerHandle::request_cancellable`]).
    #[error("cancelled")]
    Cancelled,
}

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

type Reply = Result<Box<RawValue>, CallError>;

/// Our requests waiting for an answer. Closed for good when the connection ends,
/// so a request made after that fails at once instead of waiting for a timeout.
#[derive(Default)]
struct PendingCalls {
    calls: HashMap<u64, oneshot::Sender<Reply>>,
    closed: bool,
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
    /// Requests answered `overloaded`.
    pub refused: u64,
    /// Notifications dropped because the backlog was full.
    pub dropped_notifications: u64,
}

#[derive(Default)]
struct Counters {
    backlog: AtomicUsize,
    backlog_bytes: AtomicUsize,
    refused: AtomicU64,
    dropped_notifications: AtomicU64,
}

struct Shared {
    conn_id: u64,
    outbox: Outbox,
    pending: Mutex<PendingCalls>,
    /// How many calls are pending (read without the lock, by the reader).
    pending_len: AtomicUsize,
    next_id: AtomicU64,
    /// Keys that scramble our request ids, when they must be unguessable.
    id_keys: Option<IdScrambler>,
    closing: CancellationToken,
    /// Set by a handler that wants the connection closed once its reply is out.
    close_after_reply: AtomicBool,
    /// The other side completed the daemon's handshake.
    handshaken: AtomicBool,
    /// Tokens of incoming calls whose handlers asked for one ([`Ctx::call_token`]).
    cancellable: Mutex<HashMap<Id, CancellationToken>>,
    /// Whether any handler ever asked for a token (spares the lock otherwise).
    any_call_tokens: AtomicBool,
    /// The other side's input ended: no more can arrive, so call tokens fire
    /// (the handlers still running may still reply to a client that only
    /// half-closed, but work that waits on the client's behalf is abandoned).
    input_ended: AtomicBool,
    counters: Counters,
    config: PeerConfig,
}

/// The cloneable handle to a connection: send requests and notifications, close it.
#[derive(Clone)]
pub struct PeerHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for PeerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerHandle").field("conn", &self.shared.conn_id).finish()
    }
}

static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

impl PeerHandle {
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
    pub async fn request_raw<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
    ) -> Reply {
        self.request_inner(method, params, timeout, None).await
    }

    /// [`request_raw`](Self::request_raw) that our caller may abandon: when
    /// `cancel` fires first, the call is forgotten (a late answer is dropped),
    /// `notice` tells the other side which request to stop, and the result is
    /// [`CallError::Cancelled`].
    pub async fn request_cancellable<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
        notice: Option<CancelNotice>,
    ) -> Reply {
        self.request_inner(method, params, timeout, Some((cancel, notice))).await
    }

    async fn request_inner<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
        cancel: Option<(&CancellationToken, Option<CancelNotice>)>,
    ) -> Reply {
        let shared = &self.shared;
        let deadline = timeout.map(|limit| Instant::now() + limit);
        let mut n = shared.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(keys) = &shared.id_keys {
            n = keys.scramble(n);
        }
        let json = message::request(Some(&Id::from(n)), method, params)
            .map_err(|e| CallError::Malformed(format!("params did not serialise: {e}")))?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = shared.pending.lock();
            if pending.closed {
                return Err(CallError::Disconnected);
            }
            pending.calls.insert(n, tx);
            shared.pending_len.store(pending.calls.len(), Ordering::Relaxed);
            if pending.calls.len() == 1 {
                // The connection reads while calls are pending, however full
                // its outbox: it must look again now, even if this request
                // itself waits for room (and so wakes no one).
                shared.outbox.wake_connection();
            }
        }
        // Removes the entry however this future ends unanswered: timed out,
        // failed to send, cancelled, or dropped by its caller.
        let mut forget = ForgetOnDrop { shared, id: Some(n) };
        let exchange = async {
            match shared.outbox.push(Outbound::message(Kind::Request, json), deadline).await {
                Ok(()) => {}
                Err(PushError::Closed) => return Err(CallError::Disconnected),
                Err(PushError::TimedOut) => return Err(CallError::Timeout(timeout.unwrap_or_default())),
            }
            let answer = match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, rx).await {
                    Ok(answer) => answer,
                    Err(_) => return Err(CallError::Timeout(timeout.unwrap_or_default())),
                },
                None => rx.await,
            };
            answer.map_err(|_| CallError::Disconnected)
        };
        let answer = match cancel {
            None => exchange.await,
            Some((token, notice)) => tokio::select! {
                answer = exchange => answer,
                _ = token.cancelled() => {
                    drop(forget);
                    if let Some(notice) = notice {
                        let params = serde_json::json!({ notice.id_field: n });
                        let _ = self.notify(notice.method, params).await;
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

    /// Sends a notification, waiting for room in the outbox as long as the
    /// connection lives.
    pub async fn notify(&self, method: &str, params: impl Serialize) -> Result<(), Closed> {
        let json = message::request(None, method, &params).map_err(|_| Closed)?;
        self.send_raw(Kind::Notification, json.into()).await
    }

    /// Sends an already serialised message (fan-out serialises an event once for
    /// all subscribers), waiting for room in the outbox as long as the
    /// connection lives. Waiting never closes the connection: a paused reader
    /// of events keeps it.
    pub async fn send_raw(&self, kind: Kind, json: Bytes) -> Result<(), Closed> {
        self.shared.outbox.push(Outbound::Message { kind, json }, None).await.map_err(|_| Closed)
    }

    /// Closes the connection after what is already queued has been written, with
    /// this WebSocket close code and reason.
    pub fn close(&self, code: u16, reason: &str) {
        let _ = self.shared.outbox.push_now(Outbound::Close { code, reason: reason.to_owned() });
        self.shared.closing.cancel();
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

    /// Cancels the token of an incoming call in progress (one whose handler
    /// asked for it with [`Ctx::call_token`]), for a daemon's cancel message.
    /// Returns whether there was one.
    pub fn cancel_call(&self, id: &Id) -> bool {
        match self.shared.cancellable.lock().remove(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
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
            refused: counters.refused.load(Ordering::Relaxed),
            dropped_notifications: counters.dropped_notifications.load(Ordering::Relaxed),
        }
    }

    /// A token for the incoming call `id`, cancelled when the connection
    /// closes, when the call is cancelled ([`PeerHandle::cancel_call`]) or
    /// abandoned at shutdown.
    pub(crate) fn call_token(&self, id: &Id) -> CancellationToken {
        self.shared.any_call_tokens.store(true, Ordering::Relaxed);
        let mut tokens = self.shared.cancellable.lock();
        let token = tokens.entry(id.clone()).or_insert_with(|| self.shared.closing.child_token()).clone();
        if self.shared.input_ended.load(Ordering::Acquire) {
            token.cancel();
        }
        token
    }

    /// The other side will send nothing more: every call token fires.
    fn end_of_input(&self) {
        self.shared.input_ended.store(true, Ordering::Release);
        if self.shared.any_call_tokens.load(Ordering::Relaxed) {
            for token in self.shared.cancellable.lock().values() {
                token.cancel();
            }
        }
    }

    fn complete(&self, id: &Id, reply: Reply) {
        let sender = id.as_u64().and_then(|n| {
            let mut pending = self.shared.pending.lock();
            let sender = pending.calls.remove(&n);
            self.shared.pending_len.store(pending.calls.len(), Ordering::Relaxed);
            sender
        });
        match sender {
            Some(tx) => {
                let _ = tx.send(reply);
            }
            None => {
                tracing::debug!(conn = self.shared.conn_id, %id, "response to no pending request (late or unknown); dropped")
            }
        }
    }

    fn has_pending_calls(&self) -> bool {
        self.shared.pending_len.load(Ordering::Relaxed) > 0
    }

    fn fail_all_pending(&self) {
        let calls = {
            let mut pending = self.shared.pending.lock();
            pending.closed = true;
            self.shared.pending_len.store(0, Ordering::Relaxed);
            std::mem::take(&mut pending.calls)
        };
        for (_, tx) in calls {
            let _ = tx.send(Err(CallError::Disconnected));
        }
    }

    /// Forgets the cancellation token of a finished call, if it had one.
    fn forget_call_token(&self, id: &Id) {
        if self.shared.any_call_tokens.load(Ordering::Relaxed) {
            self.shared.cancellable.lock().remove(id);
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

struct ForgetOnDrop<'a> {
    shared: &'a Shared,
    id: Option<u64>,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut pending = self.shared.pending.lock();
            pending.calls.remove(&id);
            self.shared.pending_len.store(pending.calls.len(), Ordering::Relaxed);
        }
    }
}

/// Frames handled per wake-up of the connection task before it looks at its
/// other duties (completed handlers, keepalive, shutdown) again.
const READ_BATCH: usize = 64;

/// When a drain ends, what was already sent is read and answered: how long
/// the input must be quiet for that to end, and at most how many frames and
/// how long it takes.
const SWEEP_QUIET: Duration = Duration::from_millis(20);
const SWEEP_LIMIT: usize = 4096;
const SWEEP_LONGEST: Duration = Duration::from_millis(250);

/// How long the last writes get when we close a connection on purpose.
const FINAL_FLUSH: Duration = Duration::from_secs(1);

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

/// A connection not yet running. Get the [`PeerHandle`] from [`Connection::new`],
/// register it wherever the daemon keeps connections, then [`Connection::run`].
pub struct Connection<S> {
    handle: PeerHandle,
    transport: Transport,
    router: Arc<Router<S>>,
    state: Arc<S>,
    shutdown: Shutdown,
}

/// One finished unit of incoming work: the ids it held and the reply to write.
struct Done {
    owed: Owed,
    reply: Option<Vec<u8>>,
}

/// The ids a unit of incoming work answers.
enum Owed {
    /// Nothing is in flight for it (answered on the spot, or notifications only).
    Nothing,
    One(Id),
    /// A batch: its number (see `Work::batches`).
    Batch(u64),
}

impl<S: Send + Sync + 'static> Connection<S> {
    pub fn new(transport: Transport, router: Arc<Router<S>>, state: Arc<S>, config: PeerConfig) -> (PeerHandle, Self) {
        let shared = Arc::new(Shared {
            conn_id: NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed),
            outbox: Outbox::new(config.write_queue, config.write_budget),
            pending: Mutex::default(),
            pending_len: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            id_keys: config.unguessable_ids.then(IdScrambler::new),
            closing: CancellationToken::new(),
            close_after_reply: AtomicBool::new(false),
            handshaken: AtomicBool::new(config.handshake_deadline.is_none()),
            cancellable: Mutex::default(),
            any_call_tokens: AtomicBool::new(false),
            input_ended: AtomicBool::new(false),
            counters: Counters::default(),
            config,
        });
        let handle = PeerHandle { shared };
        let conn = Connection { handle: handle.clone(), transport, router, state, shutdown: Shutdown::new() };
        (handle, conn)
    }

    /// Ties the connection to the daemon's shutdown signal.
    pub fn with_shutdown(mut self, shutdown: &Shutdown) -> Self {
        self.shutdown = shutdown.clone();
        self
    }

    /// Serves the connection until either side closes it.
    pub async fn run(self) -> CloseReason {
        let Connection { handle, transport, router, state, shutdown } = self;
        let shared = handle.shared.clone();
        let mut driver = Driver::new(handle, transport, router, state);
        // Made once: building these futures anew for every turn would register
        // and unregister a waiter on each token every time.
        let closing = shared.closing.cancelled();
        let draining = shutdown.draining();
        let aborted = shutdown.aborted();
        tokio::pin!(closing, draining, aborted);
        let reason = std::future::poll_fn(|cx| {
            let mut signals =
                Signals { closing: closing.as_mut(), draining: draining.as_mut(), aborted: aborted.as_mut() };
            driver.poll_run(&mut signals, cx)
        })
        .await;
        driver.close(reason).await
    }
}

/// The three signals a connection watches besides its own sources.
struct Signals<'a, 'b> {
    /// The connection was closed from our side ([`PeerHandle::close`]).
    closing: Pin<&'a mut (dyn Future<Output = ()> + Send + 'b)>,
    /// The daemon began to shut down.
    draining: Pin<&'a mut (dyn Future<Output = ()> + Send + 'b)>,
    /// The grace period is over.
    aborted: Pin<&'a mut (dyn Future<Output = ()> + Send + 'b)>,
}

/// Where a connection is in its life.
enum Phase {
    /// Reading, running handlers, writing.
    Serving,
    /// The daemon is shutting down: new requests are refused, what runs
    /// finishes (`swept`: what the peer sent before is read, see `Sweep`).
    Draining { swept: bool },
    /// Everything owed is answered, and requests the peer sent before the
    /// signal may still wait in the socket unread: they are read and answered
    /// `shutting_down` rather than closed on (a close with unread input is a
    /// reset, and they would go unanswered), until the input is quiet.
    Sweeping(Sweep),
    /// Everything is answered; the goodbye request is out, awaited with its
    /// own timeout (the daemon opened this connection: a child told to stop).
    SayingGoodbye(BoxFuture<'static, ()>),
}

/// The sweep at the end of a drain: bounded in frames and time, for a peer
/// that keeps writing.
struct Sweep {
    quiet: Pin<Box<tokio::time::Sleep>>,
    until: Instant,
    frames: usize,
}

impl Sweep {
    fn new() -> Sweep {
        let now = Instant::now();
        Sweep { quiet: Box::pin(tokio::time::sleep_until(now + SWEEP_QUIET)), until: now + SWEEP_LONGEST, frames: 0 }
    }

    /// A frame arrived: the input is not quiet yet.
    fn heard(&mut self) {
        self.frames += 1;
        let next = (Instant::now() + SWEEP_QUIET).min(self.until);
        self.quiet.as_mut().reset(next);
    }
}

/// Returns a source's turn when it had something; carries on to the next
/// source when it had nothing.
macro_rules! source {
    ($turn:expr) => {
        if let ready @ Poll::Ready(_) = $turn {
            return ready;
        }
    };
}

/// What one turn of the connection did.
type Turn = Poll<Result<(), CloseReason>>;

/// Turns taken in one poll before the task yields to its neighbours.
const TURNS_PER_POLL: usize = 256;

/// The running connection: its phase and every source of events it watches.
///
/// One turn ([`Driver::poll_turn`]) looks at each source in priority order and
/// handles the first that has something, then the next turn starts again from
/// the top. Every condition a source depends on (is the outbox full, does the
/// peer owe us answers, are we draining) is read when the turn gets to it,
/// never carried over from an earlier turn: a condition read before waiting
/// and not looked at again is how a connection sleeps through its own
/// deadline.
struct Driver<S> {
    handle: PeerHandle,
    reader: crate::codec::FrameStream,
    work: Work<S>,
    phase: Phase,
    /// The other side's input ended: nothing more can arrive.
    input_ended: bool,
    /// The grace period is over: whatever still ran was answered `shutting_down`.
    abandoned: bool,
    /// The transport's write side failed or was shut: nothing more to write.
    sink_done: bool,
    keepalive: Option<tokio::time::Interval>,
    missed_pings: u32,
    handshake: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S: Send + Sync + 'static> Driver<S> {
    fn new(handle: PeerHandle, transport: Transport, router: Arc<Router<S>>, state: Arc<S>) -> Self {
        let config = &handle.shared.config;
        let keepalive = transport.wants_keepalive.then(|| {
            let mut t = tokio::time::interval_at(Instant::now() + config.keepalive, config.keepalive);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        let handshake = config.handshake_deadline.map(|limit| Box::pin(tokio::time::sleep(limit)));
        let drain = Drain::new(transport.writer, config.write_stall);
        Driver {
            work: Work::new(handle.clone(), router, state, drain),
            handle,
            reader: transport.reader,
            phase: Phase::Serving,
            input_ended: false,
            abandoned: false,
            sink_done: false,
            keepalive,
            missed_pings: 0,
            handshake,
        }
    }

    fn config(&self) -> &PeerConfig {
        &self.handle.shared.config
    }

    fn outbox(&self) -> &Outbox {
        &self.handle.shared.outbox
    }

    /// Takes turns until nothing has anything to say (`Pending`, every source
    /// registered to wake us) or the connection is to close.
    fn poll_run(&mut self, signals: &mut Signals<'_, '_>, cx: &mut Context<'_>) -> Poll<CloseReason> {
        for _ in 0..TURNS_PER_POLL {
            match self.poll_turn(signals, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(reason)) => return Poll::Ready(reason),
                Poll::Pending => return Poll::Pending,
            }
        }
        // Busy for a long while: let the other tasks on this thread run.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// One turn: the first source (in this order) with something to handle.
    fn poll_turn(&mut self, signals: &mut Signals<'_, '_>, cx: &mut Context<'_>) -> Turn {
        if signals.closing.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(CloseReason::Closed));
        }
        if !self.abandoned && signals.aborted.as_mut().poll(cx).is_ready() {
            return Poll::Ready(self.on_grace_over());
        }
        if let Some(turn) = self.next_phase() {
            return Poll::Ready(turn);
        }
        self.work.start_waiting();
        source!(self.poll_write(cx));
        source!(self.poll_goodbye(cx));
        source!(self.poll_handlers(cx));
        source!(self.poll_notifications(cx));
        source!(self.poll_keepalive(cx));
        source!(self.poll_handshake(cx));
        if matches!(self.phase, Phase::Serving) && signals.draining.as_mut().poll(cx).is_ready() {
            return Poll::Ready(self.on_drain_begun());
        }
        source!(self.poll_sweep(cx));
        self.poll_read(cx)
    }

    /// Moves on when the current phase is over; `None` while it is not.
    fn next_phase(&mut self) -> Option<Result<(), CloseReason>> {
        if self.input_ended && self.work.is_idle() {
            return Some(Err(CloseReason::Eof));
        }
        // Draining ends when nothing is owed either way: our own calls in
        // flight (a call forwarded to this peer) get the grace period too.
        let Phase::Draining { swept } = self.phase else { return None };
        let nothing_owed = self.abandoned || !self.handle.has_pending_calls();
        if !self.work.is_idle() || !nothing_owed {
            return None;
        }
        if !swept && !self.input_ended {
            self.phase = Phase::Sweeping(Sweep::new());
            return Some(Ok(()));
        }
        match self.config().goodbye.as_ref().filter(|bye| bye.awaited.is_some()) {
            Some(bye) => {
                self.phase = Phase::SayingGoodbye(send_goodbye(self.handle.clone(), bye.clone()));
                Some(Ok(()))
            }
            None => Some(Err(CloseReason::Shutdown)),
        }
    }

    /// Shutdown began: requests that have not started are answered now.
    fn on_drain_begun(&mut self) -> Result<(), CloseReason> {
        self.phase = Phase::Draining { swept: false };
        self.work.draining = true;
        self.work.refuse_waiting()
    }

    /// The grace period is over: whatever still runs is answered
    /// `shutting_down` and dropped; the goodbye still goes out.
    fn on_grace_over(&mut self) -> Result<(), CloseReason> {
        self.abandoned = true;
        if matches!(self.phase, Phase::Serving) {
            self.phase = Phase::Draining { swept: false };
        }
        self.work.draining = true;
        self.work.abandon_all()
    }

    /// Writes what is queued. The write-stall rule lives in the drain (see
    /// `Drain::poll_drain`), so its clock runs whenever writes are blocked
    /// with replies owed, whatever else the connection is doing.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Turn {
        let outbox = &self.handle.shared.outbox;
        match ready!(self.work.drain.poll_drain(outbox, cx)) {
            Ok(Drained::Progress) => Poll::Ready(Ok(())),
            Ok(Drained::Closed) => {
                self.sink_done = true;
                Poll::Ready(Err(CloseReason::Closed))
            }
            Ok(Drained::Stalled) => {
                self.sink_done = true;
                let limit = self.config().write_stall;
                tracing::info!(conn = self.handle.conn_id(), ?limit, "the peer is not reading its replies; closing");
                Poll::Ready(Err(CloseReason::Failed(format!(
                    "write stalled for {limit:?} with replies owed: the peer is not reading"
                ))))
            }
            Err(e) => {
                self.sink_done = true;
                Poll::Ready(Err(CloseReason::Failed(format!("write failed: {e}"))))
            }
        }
    }

    /// The goodbye was answered, or its timeout passed.
    fn poll_goodbye(&mut self, cx: &mut Context<'_>) -> Turn {
        match &mut self.phase {
            Phase::SayingGoodbye(bye) => bye.as_mut().poll(cx).map(|()| Err(CloseReason::Shutdown)),
            _ => Poll::Pending,
        }
    }

    /// Writes the replies of handlers that finished: every one finished by
    /// now, so they leave in one flush (answers arriving from another
    /// connection would otherwise cost a write each).
    fn poll_handlers(&mut self, cx: &mut Context<'_>) -> Turn {
        let mut finished = 0;
        while finished < READ_BATCH && !self.work.running.is_empty() {
            match self.work.running.poll_next_unpin(cx) {
                Poll::Ready(Some(done)) => self.work.finish(done)?,
                Poll::Ready(None) | Poll::Pending => break,
            }
            finished += 1;
        }
        if finished > 0 { Poll::Ready(Ok(())) } else { Poll::Pending }
    }

    /// Runs notifications one at a time, in the order they arrived.
    fn poll_notifications(&mut self, cx: &mut Context<'_>) -> Turn {
        let counters = &self.handle.shared.counters;
        ready!(self.work.backlog.poll_front_notification(cx));
        self.work.backlog.finish_front_notification(counters);
        Poll::Ready(Ok(()))
    }

    /// A liveness ping is due; too many unanswered ones close the connection.
    fn poll_keepalive(&mut self, cx: &mut Context<'_>) -> Turn {
        let Some(keepalive) = &mut self.keepalive else { return Poll::Pending };
        ready!(keepalive.poll_tick(cx));
        let misses = self.handle.shared.config.keepalive_misses;
        if self.missed_pings >= misses {
            return Poll::Ready(Err(CloseReason::Failed(format!("no answer to {} pings", self.missed_pings))));
        }
        self.missed_pings += 1;
        match self.handle.shared.outbox.push_now(Outbound::Ping) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(_) => Poll::Ready(Err(CloseReason::Failed("write queue closed".into()))),
        }
    }

    /// The handshake deadline passed: close unless the handshake was done.
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Turn {
        let Some(deadline) = &mut self.handshake else { return Poll::Pending };
        ready!(deadline.as_mut().poll(cx));
        self.handshake = None;
        if self.handle.is_handshaken() {
            return Poll::Ready(Ok(()));
        }
        let limit = self.config().handshake_deadline.unwrap_or_default();
        tracing::info!(conn = self.handle.conn_id(), ?limit, "no handshake within the deadline; closing");
        Poll::Ready(Err(CloseReason::Failed(format!("no handshake within {limit:?}"))))
    }

    /// The sweep is over when the input has been quiet long enough, or it
    /// read its share of frames.
    fn poll_sweep(&mut self, cx: &mut Context<'_>) -> Turn {
        let Phase::Sweeping(sweep) = &mut self.phase else { return Poll::Pending };
        if sweep.frames < SWEEP_LIMIT {
            ready!(sweep.quiet.as_mut().poll(cx));
        }
        self.phase = Phase::Draining { swept: true };
        Poll::Ready(Ok(()))
    }

    /// Whether to read now. While the outbox is full the other side is not
    /// reading our replies, and reading more requests would only queue more;
    /// but answers to our own calls must always get through, and the sweep
    /// reads what is left to answer it.
    fn may_read(&self) -> bool {
        !self.input_ended
            && (matches!(self.phase, Phase::Sweeping(_)) || !self.outbox().is_full() || self.handle.has_pending_calls())
    }

    /// Handles the frames the reader has, up to a batch of them, in this
    /// poll: a pipelining client sends many per read, and a message then
    /// costs no future or wake-up of its own.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Turn {
        let mut handled = 0;
        while handled < READ_BATCH && self.may_read() {
            let frame = match self.reader.poll_next_unpin(cx) {
                Poll::Ready(frame) => frame,
                Poll::Pending => break,
            };
            handled += 1;
            self.missed_pings = 0;
            if let Phase::Sweeping(sweep) = &mut self.phase {
                sweep.heard();
            }
            match frame {
                Some(Ok(Frame::Unsupported { close_code, reason })) => {
                    tracing::info!(conn = self.handle.conn_id(), close_code, reason, "closing connection");
                    self.handle.close(close_code, reason);
                    break;
                }
                Some(Ok(frame)) => self.work.on_frame(frame, cx)?,
                None | Some(Err(_)) => {
                    if let Some(Err(e)) = frame {
                        tracing::debug!(conn = self.handle.conn_id(), error = %e, "read failed");
                    }
                    self.on_end_of_input();
                    break;
                }
            }
        }
        if handled > 0 { Poll::Ready(Ok(())) } else { Poll::Pending }
    }

    /// No more answers can arrive: fail our calls now rather than at their
    /// timeouts, and fire call tokens, but finish the handlers (a client
    /// that half-closed still reads its replies).
    fn on_end_of_input(&mut self) {
        self.input_ended = true;
        self.handle.fail_all_pending();
        self.handle.end_of_input();
    }

    /// Says the last words and closes the transport.
    async fn close(self, reason: CloseReason) -> CloseReason {
        let Driver { handle, work, sink_done, .. } = self;
        let shared = &handle.shared;
        let (config, outbox) = (&shared.config, &shared.outbox);
        handle.fail_all_pending();
        shared.closing.cancel();
        // Dropping the work cancels handlers still running (they lost their peer).
        let Work { mut drain, .. } = work;
        if !sink_done {
            if reason == CloseReason::Shutdown
                && let Some(bye) = config.goodbye.as_ref().filter(|g| g.awaited.is_none())
                && let Ok(json) = message::request(None, &bye.method, &bye.params)
            {
                let _ = outbox.push_now(Outbound::message(Kind::Notification, json));
            }
            let (code, why) = match &reason {
                CloseReason::Shutdown => (1001, "server shutting down"),
                CloseReason::Failed(_) => (1011, "connection failed"),
                _ => (1000, ""),
            };
            // After what is queued, and after any close `PeerHandle::close` queued.
            let _ = outbox.push_now(Outbound::Close { code, reason: why.to_owned() });
            outbox.close();
            // A client that half-closed gets the time a slow reader would; a
            // connection closed on purpose (shutdown, eviction, a flood) only
            // a moment for its last words.
            let limit = if reason == CloseReason::Eof { config.write_stall } else { FINAL_FLUSH };
            drain.finish(outbox, limit).await;
        }
        outbox.close();
        tracing::debug!(conn = shared.conn_id, ?reason, "connection finished");
        reason
    }
}

/// Sends the goodbye request and waits for its answer (or its timeout).
fn send_goodbye(handle: PeerHandle, bye: Goodbye) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        if let Err(error) = handle.request_raw(&bye.method, &bye.params, bye.awaited).await {
            tracing::info!(conn = handle.conn_id(), method = %bye.method, %error, "goodbye not answered");
        }
    })
}

/// Incoming work that cannot run yet: requests waiting for a handler slot (or
/// for room in the outbox) and notifications waiting for their turn. One bound,
/// in messages and bytes, for both, so a peer cannot grow it by switching
/// from one to the other.
struct IncomingBacklog {
    requests: VecDeque<Waiting>,
    /// Notification handlers, run one at a time in arrival order; the front one
    /// is running. Each with the size of its frame.
    notifications: VecDeque<(BoxFuture<'static, ()>, usize)>,
    len: usize,
    bytes: usize,
    max_len: usize,
    max_bytes: usize,
    /// Messages refused since the backlog last took one: a peer past
    /// `flood_limit` is disconnected.
    refused_in_a_row: usize,
    flood_limit: usize,
    /// Notifications dropped since the last warning, and when that was.
    dropped_unreported: u64,
    last_warning: Option<Instant>,
}

/// A request read but not started.
struct Waiting {
    run: BoxFuture<'static, Done>,
    owed: Owed,
    size: usize,
}

impl IncomingBacklog {
    fn new(config: &PeerConfig) -> Self {
        IncomingBacklog {
            requests: VecDeque::new(),
            notifications: VecDeque::new(),
            len: 0,
            bytes: 0,
            max_len: config.backlog.max(1),
            max_bytes: config.backlog_bytes.max(1),
            refused_in_a_row: 0,
            flood_limit: config.flood_limit.max(1),
            dropped_unreported: 0,
            last_warning: None,
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn has_notifications(&self) -> bool {
        !self.notifications.is_empty()
    }

    /// Room for a message of `size` bytes. An empty backlog takes any one
    /// message the framing let through, so a large request is not refused
    /// just for being large.
    fn has_room(&self, size: usize) -> bool {
        self.len == 0 || (self.len < self.max_len && self.bytes + size <= self.max_bytes)
    }

    fn add(&mut self, size: usize, counters: &Counters) {
        self.len += 1;
        self.bytes += size;
        self.refused_in_a_row = 0;
        self.publish(counters);
    }

    fn remove(&mut self, size: usize, counters: &Counters) {
        self.len -= 1;
        self.bytes -= size;
        self.publish(counters);
    }

    fn publish(&self, counters: &Counters) {
        counters.backlog.store(self.len, Ordering::Relaxed);
        counters.backlog_bytes.store(self.bytes, Ordering::Relaxed);
    }

    /// Counts a refused message; `Err` once the peer is flooding.
    fn refuse(&mut self, conn: u64) -> Result<(), CloseReason> {
        self.refused_in_a_row += 1;
        if self.refused_in_a_row > self.flood_limit {
            tracing::warn!(
                conn,
                refused = self.refused_in_a_row,
                "the peer keeps sending past the incoming backlog; disconnecting it"
            );
            return Err(CloseReason::Failed(format!("flooding: {} messages refused in a row", self.refused_in_a_row)));
        }
        Ok(())
    }

    /// Counts a dropped notification, with a warning per second at most.
    fn dropped_notification(&mut self, conn: u64, counters: &Counters) {
        counters.dropped_notifications.fetch_add(1, Ordering::Relaxed);
        self.dropped_unreported += 1;
        let now = Instant::now();
        if self.last_warning.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
            tracing::warn!(conn, dropped = self.dropped_unreported, "incoming backlog full: notifications dropped");
            self.dropped_unreported = 0;
            self.last_warning = Some(now);
        }
    }

    /// Runs the notification at the front of the queue (one at a time, in order).
    fn poll_front_notification(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.notifications.front_mut() {
            Some((handler, _)) => handler.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }

    fn finish_front_notification(&mut self, counters: &Counters) {
        if let Some((_, size)) = self.notifications.pop_front() {
            self.remove(size, counters);
        }
    }
}

/// Everything the connection task does with incoming messages.
struct Work<S> {
    handle: PeerHandle,
    router: Arc<Router<S>>,
    /// What every call's `Ctx` shares.
    conn: Arc<ConnCtx<S>>,
    /// The write side: replies written here go straight to the transport
    /// when nothing is queued ahead of them.
    drain: Drain,
    running: FuturesUnordered<BoxFuture<'static, Done>>,
    backlog: IncomingBacklog,
    /// Ids of incoming requests not yet answered, to refuse duplicates.
    in_flight: HashSet<Id>,
    /// The ids of each batch in flight, by number, to answer them together
    /// if shutdown abandons the batch.
    batches: HashMap<u64, Vec<Id>>,
    next_batch: u64,
    draining: bool,
}

impl<S: Send + Sync + 'static> Work<S> {
    fn new(handle: PeerHandle, router: Arc<Router<S>>, state: Arc<S>, drain: Drain) -> Self {
        let backlog = IncomingBacklog::new(&handle.shared.config);
        Work {
            conn: Arc::new(ConnCtx { peer: handle.clone(), state }),
            drain,
            handle,
            router,
            running: FuturesUnordered::new(),
            backlog,
            in_flight: HashSet::new(),
            batches: HashMap::new(),
            next_batch: 0,
            draining: false,
        }
    }

    fn is_idle(&self) -> bool {
        self.running.is_empty() && self.backlog.is_empty()
    }

    fn ctx(&self, call: Option<&Id>) -> Ctx<S> {
        Ctx::on(&self.conn, call.cloned())
    }

    fn config(&self) -> &PeerConfig {
        &self.handle.shared.config
    }

    fn counters(&self) -> &Counters {
        &self.handle.shared.counters
    }

    /// Whether a request may start now: a free handler slot and room in the
    /// outbox for its reply.
    ///
    /// A handler waiting for an answer from this same peer does not hold a
    /// slot: each call we have pending here may be waiting on one of the
    /// peer's own requests (its handler calls back), and if those could not
    /// start, two peers flooding each other would each fill their slots with
    /// handlers waiting on requests queued behind them, until timeouts. Such
    /// waiting handlers are still bounded, by the backlog's count.
    fn can_start(&self) -> bool {
        let config = self.config();
        let waiting_on_peer = self.handle.shared.pending_len.load(Ordering::Relaxed).min(config.backlog);
        let busy = self.running.len().saturating_sub(waiting_on_peer);
        busy < config.max_concurrent
            && self.running.len() < config.max_concurrent + config.backlog
            && !self.handle.shared.outbox.is_full()
    }

    /// Starts waiting requests, in arrival order, while they may.
    fn start_waiting(&mut self) {
        while !self.backlog.requests.is_empty() && self.can_start() {
            let waiting = self.backlog.requests.pop_front().expect("not empty");
            self.backlog.remove(waiting.size, &self.handle.shared.counters);
            self.running.push(waiting.run);
        }
    }

    /// Writes a reply, or queues it behind what is queued already; either way
    /// the connection task flushes it when it next drains.
    fn write(&mut self, kind: Kind, json: Vec<u8>) -> Result<(), CloseReason> {
        let outbox = &self.handle.shared.outbox;
        match self.drain.write_now(outbox, Outbound::message(kind, json)) {
            Ok(()) => Ok(()),
            Err(item) => outbox.push_now(item).map_err(|_| CloseReason::Closed),
        }
    }

    /// Answers a message the reader refused (unreadable, invalid, too large,
    /// shutting down). While the outbox is full such answers go past its
    /// budget, so they count towards the flood limit like refused requests.
    fn write_error(&mut self, id: &Id, error: &RpcError) -> Result<(), CloseReason> {
        let full = self.handle.shared.outbox.is_full();
        self.write(Kind::Response, message::response_err(id, error))?;
        if full {
            return self.backlog.refuse(self.handle.conn_id());
        }
        Ok(())
    }

    /// Answers the ids of `owed` with `error` (one array for a batch).
    fn answer_owed(&mut self, owed: Owed, error: &RpcError) -> Result<(), CloseReason> {
        match owed {
            Owed::Nothing => Ok(()),
            Owed::One(id) => {
                self.in_flight.remove(&id);
                self.handle.cancel_call(&id);
                self.write(Kind::Response, message::response_err(&id, error))
            }
            Owed::Batch(n) => {
                let ids = self.batches.remove(&n).unwrap_or_default();
                let replies: Vec<Vec<u8>> = ids.iter().map(|id| message::response_err(id, error)).collect();
                for id in &ids {
                    self.in_flight.remove(id);
                    self.handle.cancel_call(id);
                }
                if replies.is_empty() { Ok(()) } else { self.write(Kind::Response, message::batch(&replies)) }
            }
        }
    }

    fn finish(&mut self, done: Done) -> Result<(), CloseReason> {
        match done.owed {
            Owed::Nothing => {}
            Owed::One(id) => {
                self.in_flight.remove(&id);
                self.handle.forget_call_token(&id);
            }
            Owed::Batch(n) => {
                for id in self.batches.remove(&n).unwrap_or_default() {
                    self.in_flight.remove(&id);
                    self.handle.forget_call_token(&id);
                }
            }
        }
        if let Some(reply) = done.reply {
            self.write(Kind::Response, reply)?;
        }
        if self.handle.shared.close_after_reply.load(Ordering::Acquire) {
            return Err(CloseReason::Closed);
        }
        Ok(())
    }

    /// Shutdown began: requests that have not started are answered now.
    fn refuse_waiting(&mut self) -> Result<(), CloseReason> {
        let waiting: Vec<Waiting> = self.backlog.requests.drain(..).collect();
        for w in waiting {
            self.backlog.remove(w.size, &self.handle.shared.counters);
            self.answer_owed(w.owed, &shutting_down())?;
        }
        Ok(())
    }

    /// The grace period is over: everything still owed is answered and dropped.
    fn abandon_all(&mut self) -> Result<(), CloseReason> {
        self.refuse_waiting()?;
        self.running = FuturesUnordered::new();
        let counters = &self.handle.shared.counters;
        while self.backlog.has_notifications() {
            self.backlog.finish_front_notification(counters);
        }
        let batches: Vec<u64> = self.batches.keys().copied().collect();
        for n in batches {
            self.answer_owed(Owed::Batch(n), &shutting_down())?;
        }
        let singles: Vec<Id> = self.in_flight.drain().collect();
        for id in singles {
            self.answer_owed(Owed::One(id), &shutting_down())?;
        }
        Ok(())
    }

    /// Handles one frame. Not async: a handler is polled once with the
    /// connection task's context, `cx`, and nothing else waits, so a message
    /// costs no future of its own.
    fn on_frame(&mut self, frame: Frame, cx: &mut Context<'_>) -> Result<(), CloseReason> {
        match frame {
            Frame::Message(bytes) => self.on_message(&bytes, cx),
            Frame::TooLarge(None) => self.write_error(&Id::Null, &too_large()),
            Frame::TooLarge(Some(sniffed)) => match sniffed.id {
                Some(id) if sniffed.has_method => self.write_error(&id, &too_large()),
                Some(id) if sniffed.is_response => {
                    self.handle.complete(&id, Err(CallError::Malformed("response too large".into())));
                    Ok(())
                }
                _ => {
                    tracing::warn!(conn = self.handle.conn_id(), "skipped an oversized message");
                    Ok(())
                }
            },
            Frame::Alive | Frame::Unsupported { .. } => Ok(()),
        }
    }

    fn on_message(&mut self, bytes: &[u8], cx: &mut Context<'_>) -> Result<(), CloseReason> {
        let size = bytes.len();
        match message::parse(bytes, self.config().max_batch) {
            Parsed::Rejected(error) => self.write_error(&Id::Null, &error),
            Parsed::Single(Ok(message)) => self.on_single(message, size, cx),
            Parsed::Single(Err(invalid)) if self.is_our_call(&invalid) => {
                self.fail_malformed_answer(invalid.id);
                Ok(())
            }
            Parsed::Single(Err(invalid)) => match self.router.rewrite_invalid(bytes) {
                Some(rewritten) => match message::parse(&rewritten, 1) {
                    Parsed::Single(Ok(message)) => self.on_single(message, size, cx),
                    _ => self.write_error(&invalid.id, &invalid.error),
                },
                None => self.write_error(&invalid.id, &invalid.error),
            },
            Parsed::Batch(items) => self.on_batch(items, size),
        }
    }

    fn on_single(&mut self, message: Message<'_>, size: usize, cx: &mut Context<'_>) -> Result<(), CloseReason> {
        match message {
            Message::Request { id, method, params } => {
                if let Err(error) = self.admit(&id) {
                    return self.write_error(&id, &error);
                }
                // In arrival order: nothing starts ahead of requests already waiting.
                let start_now = self.backlog.requests.is_empty() && self.can_start();
                if !start_now && !self.backlog.has_room(size) {
                    return self.refuse_overloaded(&id);
                }
                let mut handler = match self.router.dispatch(self.ctx(Some(&id)), &method, params) {
                    Ok(handler) => handler,
                    Err(error) => return self.write_error(&id, &error),
                };
                if !start_now {
                    self.in_flight.insert(id.clone());
                    self.backlog.add(size, &self.handle.shared.counters);
                    self.backlog.requests.push_back(Waiting {
                        run: running_request(id.clone(), handler),
                        owed: Owed::One(id),
                        size,
                    });
                    return Ok(());
                }
                // Most handlers finish without waiting for anything: poll once
                // here, with this task's waker, and answer at once if so.
                let polled = std::panic::catch_unwind(AssertUnwindSafe(|| handler.as_mut().poll(cx)));
                let outcome = match polled {
                    Ok(Poll::Pending) => None,
                    Ok(Poll::Ready(result)) => Some(Ok(result)),
                    Err(panic) => Some(Err(panic)),
                };
                if let Some(outcome) = outcome {
                    let reply = reply_from(&id, outcome);
                    self.handle.forget_call_token(&id);
                    return self.finish(Done { owed: Owed::Nothing, reply: Some(reply) });
                }
                self.in_flight.insert(id.clone());
                self.running.push(running_request(id, handler));
                Ok(())
            }
            Message::Notification { method, params } => {
                if !self.backlog.has_room(size) {
                    let conn = self.handle.conn_id();
                    self.backlog.dropped_notification(conn, &self.handle.shared.counters);
                    return self.backlog.refuse(conn);
                }
                match self.router.dispatch(self.ctx(None), &method, params) {
                    Ok(handler) => {
                        self.backlog.add(size, &self.handle.shared.counters);
                        self.backlog
                            .notifications
                            .push_back((Box::pin(run_notification(method.into_owned(), handler)), size))
                    }
                    Err(error) => {
                        tracing::debug!(conn = self.handle.conn_id(), %method, %error, "notification ignored")
                    }
                }
                Ok(())
            }
            Message::Response { id, outcome } => {
                self.on_response(id, outcome);
                Ok(())
            }
        }
    }

    /// Refuses a request while draining, or when its id is already in flight.
    fn admit(&self, id: &Id) -> Result<(), RpcError> {
        if self.draining {
            return Err(shutting_down());
        }
        if !self.in_flight.is_empty() && self.in_flight.contains(id) {
            return Err(RpcError::invalid_request(format!(
                "duplicate id {id}: a request with this id is still in flight"
            )));
        }
        Ok(())
    }

    /// Answers `overloaded` at once, and cuts off a peer that keeps at it.
    fn refuse_overloaded(&mut self, id: &Id) -> Result<(), CloseReason> {
        self.counters().refused.fetch_add(1, Ordering::Relaxed);
        self.write(Kind::Response, message::response_err(id, &overloaded()))?;
        self.backlog.refuse(self.handle.conn_id())
    }

    /// Whether an unreadable message is really a malformed answer to one of
    /// our calls (an id, no method, no outcome): then it fails that call at
    /// once instead of being bounced back as an invalid request while the
    /// caller waits for its timeout.
    fn is_our_call(&self, invalid: &Invalid) -> bool {
        invalid.lacks_outcome
            && invalid.id.as_u64().is_some_and(|n| self.handle.shared.pending.lock().calls.contains_key(&n))
    }

    fn fail_malformed_answer(&self, id: Id) {
        let problem = "the answer has neither result nor error".to_owned();
        tracing::debug!(conn = self.handle.conn_id(), %id, "malformed answer to our call");
        self.handle.complete(&id, Err(CallError::Malformed(problem)));
    }

    fn on_response(&self, id: Id, outcome: Outcome<'_>) {
        let reply = match outcome {
            Outcome::Result(result) => Ok(result.to_owned()),
            Outcome::Error(error) => Err(CallError::Rpc(error)),
            Outcome::Both(result, error) if self.router.accepts_result_with_error(result, &error) => {
                Ok(result.to_owned())
            }
            Outcome::Both(..) => Err(CallError::Malformed("response has both result and error".into())),
            Outcome::Malformed(problem) => Err(CallError::Malformed(problem)),
        };
        if id == Id::Null {
            // The other side could not read something we sent.
            if let Err(error) = reply {
                tracing::warn!(conn = self.handle.conn_id(), %error, "peer reported an error without an id");
            }
            return;
        }
        self.handle.complete(&id, reply);
    }

    fn on_batch(&mut self, items: Vec<Result<Message<'_>, Invalid>>, size: usize) -> Result<(), CloseReason> {
        let start_now = self.backlog.requests.is_empty() && self.can_start();
        let has_requests = items.iter().any(|item| matches!(item, Ok(Message::Request { .. })));
        if has_requests && !start_now && !self.backlog.has_room(size) {
            // The whole batch is refused as one: each request gets `overloaded`.
            self.counters().refused.fetch_add(1, Ordering::Relaxed);
            let mut replies = Vec::new();
            for item in items {
                match item {
                    Ok(Message::Request { id, .. }) => replies.push(message::response_err(&id, &overloaded())),
                    Ok(Message::Response { id, outcome }) => self.on_response(id, outcome),
                    Err(invalid) => replies.push(message::response_err(&invalid.id, &invalid.error)),
                    Ok(Message::Notification { .. }) => {}
                }
            }
            self.write(Kind::Response, message::batch(&replies))?;
            return self.backlog.refuse(self.handle.conn_id());
        }
        let mut ready = Vec::new();
        let mut parts: Vec<BoxFuture<'static, Option<Vec<u8>>>> = Vec::new();
        let mut ids = Vec::new();
        for item in items {
            match item {
                Err(invalid) if self.is_our_call(&invalid) => self.fail_malformed_answer(invalid.id),
                Err(invalid) => ready.push(message::response_err(&invalid.id, &invalid.error)),
                Ok(Message::Request { id, method, params }) => {
                    let admitted = self.admit(&id).and_then(|()| {
                        if ids.contains(&id) {
                            return Err(RpcError::invalid_request(format!("duplicate id {id} in batch")));
                        }
                        self.router.dispatch(self.ctx(Some(&id)), &method, params)
                    });
                    match admitted {
                        Ok(handler) => {
                            ids.push(id.clone());
                            parts.push(Box::pin(async move { Some(reply_for(&id, handler).await) }));
                        }
                        Err(error) => ready.push(message::response_err(&id, &error)),
                    }
                }
                Ok(Message::Notification { method, params }) => {
                    if let Ok(handler) = self.router.dispatch(self.ctx(None), &method, params) {
                        let method = method.into_owned();
                        parts.push(Box::pin(async move {
                            run_notification(method, handler).await;
                            None
                        }));
                    }
                }
                Ok(Message::Response { id, outcome }) => self.on_response(id, outcome),
            }
        }
        if parts.is_empty() {
            // A batch of notifications (or responses) gets no reply at all, never `[]`.
            return match ready.is_empty() {
                true => Ok(()),
                false => self.write(Kind::Response, message::batch(&ready)),
            };
        }
        let n = self.next_batch;
        self.next_batch += 1;
        self.in_flight.extend(ids.iter().cloned());
        self.batches.insert(n, ids);
        let run: BoxFuture<'static, Done> = Box::pin(async move {
            ready.extend(join_all(parts).await.into_iter().flatten());
            let reply = (!ready.is_empty()).then(|| message::batch(&ready));
            Done { owed: Owed::Batch(n), reply }
        });
        if start_now {
            self.running.push(run);
        } else {
            self.backlog.add(size, &self.handle.shared.counters);
            self.backlog.requests.push_back(Waiting { run, owed: Owed::Batch(n), size });
        }
        Ok(())
    }
}

fn too_large() -> RpcError {
    RpcError::invalid_request("message too large")
}

fn overloaded() -> RpcError {
    RpcError::internal("too many requests waiting on this connection; retry later")
        .with_data(serde_json::json!({"reason": "overloaded"}))
}

fn shutting_down() -> RpcError {
    RpcError::internal("server is shutting down").with_data(serde_json::json!({"reason": "shutting_down"}))
}

/// A request whose handler has to wait: it runs in `running` (or waits in the backlog).
fn running_request(id: Id, handler: HandlerFuture) -> BoxFuture<'static, Done> {
    Box::pin(async move {
        let reply = reply_for(&id, handler).await;
        Done { owed: Owed::One(id), reply: Some(reply) }
    })
}

/// Runs a handler, turning an error or a panic into the error response.
async fn reply_for(id: &Id, handler: HandlerFuture) -> Vec<u8> {
    reply_from(id, AssertUnwindSafe(handler).catch_unwind().await)
}

type Caught = Result<Result<Vec<u8>, RpcError>, Box<dyn std::any::Any + Send>>;

fn reply_from(id: &Id, outcome: Caught) -> Vec<u8> {
    match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => message::response_err(id, &error),
        Err(panic) => {
            tracing::error!(%id, panic = panic_message(&panic), "handler panicked");
            message::response_err(id, &RpcError::internal("the handler failed unexpectedly"))
        }
    }
}

async fn run_notification(method: String, handler: HandlerFuture) {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => tracing::debug!(%method, %error, "notification handler failed"),
        Err(panic) => {
            tracing::error!(%method, panic = panic_message(&panic), "notification handler panicked")
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic)")
}

#[cfg(test)]
mod tests {
    use super::IdScrambler;

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
}
