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
//! [`PeerHandle`] is the cheap, cloneable side: send requests (with a timeout
//! each) and notifications, and close the connection. When the connection ends,
//! every pending call fails at once with [`CallError::Disconnected`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, join_all};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::codec::{Frame, Outbound, Transport};
use crate::message::{self, Id, Invalid, Kind, Message, Outcome, Parsed, RpcError};
use crate::outbox::{Drain, Drained, Outbox, PushError};
use crate::router::{Ctx, HandlerFuture, Router};
use crate::shutdown::Shutdown;

/// Limits and timeouts of one connection.
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// Incoming requests whose handlers run at once.
    pub max_concurrent: usize,
    /// Requests waiting for a handler slot; beyond this they are refused.
    pub max_queued: usize,
    /// Outbound messages waiting for the writer.
    pub write_queue: usize,
    /// How long a write (or a place in the write queue) may take before the
    /// other side is judged not to be reading and the connection is dropped.
    pub write_stall: Duration,
    /// Default timeout of our own outgoing requests.
    pub request_timeout: Duration,
    /// Longest batch accepted.
    pub max_batch: usize,
    /// Interval between liveness pings on transports that want them (WebSocket),
    /// and how many may go unanswered.
    pub keepalive: Duration,
    pub keepalive_misses: u32,
    /// Accept a response carrying both `result` and `error` as a success (some
    /// clients send that for tool errors). Strictly it is malformed.
    pub accept_result_with_error: bool,
    /// Notification sent to the other side when the daemon shuts down.
    pub goodbye: Option<(String, serde_json::Value)>,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            max_concurrent: 128,
            max_queued: 1024,
            write_queue: 1024,
            write_stall: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            max_batch: 1000,
            keepalive: Duration::from_secs(30),
            keepalive_misses: 2,
            accept_result_with_error: false,
            goodbye: None,
        }
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

struct Shared {
    conn_id: u64,
    outbox: Outbox,
    pending: Mutex<PendingCalls>,
    next_id: AtomicU64,
    closing: CancellationToken,
    /// Set by a handler that wants the connection closed once its reply is out.
    close_after_reply: std::sync::atomic::AtomicBool,
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

    /// Sends a request and waits for its result, with the default timeout.
    pub async fn request<R: DeserializeOwned>(&self, method: &str, params: impl Serialize) -> Result<R, CallError> {
        let raw = self.request_raw(method, &params, None).await?;
        serde_json::from_str(raw.get()).map_err(|e| CallError::Malformed(e.to_string()))
    }

    /// Sends a request and returns the raw result, for callers that pass it on
    /// untouched. `timeout: None` uses the connection's default.
    pub async fn request_raw<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Option<Duration>,
    ) -> Reply {
        let shared = &self.shared;
        let n = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let json = message::request(Some(&Id::from(n)), method, params)
            .map_err(|e| CallError::Malformed(format!("params did not serialise: {e}")))?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = shared.pending.lock().unwrap();
            if pending.closed {
                return Err(CallError::Disconnected);
            }
            pending.calls.insert(n, tx);
        }
        // Removes the entry however this future ends unanswered: timed out,
        // failed to send, or dropped by its caller.
        let mut forget = ForgetOnDrop { shared, id: Some(n) };
        self.send(Outbound::message(Kind::Request, json)).await.map_err(|_| CallError::Disconnected)?;
        let limit = timeout.unwrap_or(shared.config.request_timeout);
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(reply)) => {
                // Whoever answered already took the entry out of the map.
                forget.id = None;
                reply
            }
            Ok(Err(_)) => Err(CallError::Disconnected),
            Err(_) => Err(CallError::Timeout(limit)),
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: impl Serialize) -> Result<(), Closed> {
        let json = message::request(None, method, &params).map_err(|_| Closed)?;
        self.send(Outbound::message(Kind::Notification, json)).await
    }

    /// Sends an already serialised message (fan-out serialises an event once for
    /// all subscribers).
    pub async fn send_raw(&self, kind: Kind, json: Bytes) -> Result<(), Closed> {
        self.send(Outbound::Message { kind, json }).await
    }

    /// Queues an item for the connection to write. A queue that stays full for
    /// longer than the stall timeout means the other side stopped reading: the
    /// connection is dropped.
    async fn send(&self, item: Outbound) -> Result<(), Closed> {
        let shared = &self.shared;
        match shared.outbox.push(item, shared.config.write_stall).await {
            Ok(()) => Ok(()),
            Err(PushError::Closed) => Err(Closed),
            Err(PushError::Stalled) => {
                tracing::warn!(conn = shared.conn_id, "peer is not reading; dropping the connection");
                shared.closing.cancel();
                Err(Closed)
            }
        }
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

    fn complete(&self, id: &Id, reply: Reply) {
        let sender = id.as_u64().and_then(|n| self.shared.pending.lock().unwrap().calls.remove(&n));
        match sender {
            Some(tx) => {
                let _ = tx.send(reply);
            }
            None => {
                tracing::debug!(conn = self.shared.conn_id, %id, "response to no pending request (late or unknown); dropped")
            }
        }
    }

    fn fail_all_pending(&self) {
        let calls = {
            let mut pending = self.shared.pending.lock().unwrap();
            pending.closed = true;
            std::mem::take(&mut pending.calls)
        };
        for (_, tx) in calls {
            let _ = tx.send(Err(CallError::Disconnected));
        }
    }
}

struct ForgetOnDrop<'a> {
    shared: &'a Shared,
    id: Option<u64>,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.shared.pending.lock().unwrap().calls.remove(&id);
        }
    }
}

/// Frames handled per wake-up of the connection task before it looks at its
/// other duties (completed handlers, keepalive, shutdown) again.
const READ_BATCH: usize = 64;

/// How a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The other side closed its end.
    Eof,
    /// Closed from our side (`PeerHandle::close`).
    Closed,
    /// The daemon shut down.
    Shutdown,
    /// Reading or writing failed, or the other side stopped reading or answering pings.
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
    ids: DoneIds,
    reply: Option<Vec<u8>>,
}

enum DoneIds {
    None,
    One(Id),
    Many(Vec<Id>),
}

impl<S: Send + Sync + 'static> Connection<S> {
    pub fn new(transport: Transport, router: Arc<Router<S>>, state: Arc<S>, config: PeerConfig) -> (PeerHandle, Self) {
        let shared = Arc::new(Shared {
            conn_id: NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed),
            outbox: Outbox::new(config.write_queue),
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
            closing: CancellationToken::new(),
            close_after_reply: Default::default(),
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
        let config = &shared.config;
        let outbox = &shared.outbox;
        let mut drain = Drain::new(transport.writer);
        let mut reader = transport.reader;
        let mut work = Work {
            handle: handle.clone(),
            router,
            state,
            running: FuturesUnordered::new(),
            queued: VecDeque::new(),
            in_flight: HashSet::new(),
            notifications: VecDeque::new(),
            draining: false,
        };
        let mut keepalive = transport.wants_keepalive.then(|| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + config.keepalive, config.keepalive);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        let mut missed_pings = 0u32;
        let mut reading = true;
        // The transport's write side failed or was shut: nothing more to write.
        let mut sink_done = false;
        // Created once: building these futures anew for every message would
        // register and unregister a waiter on each token every time.
        let closing = shared.closing.cancelled();
        let draining = shutdown.draining();
        let aborted = shutdown.aborted();
        tokio::pin!(closing, draining, aborted);

        let reason = 'serve: loop {
            if !reading && work.is_idle() {
                break CloseReason::Eof;
            }
            if work.draining && work.is_idle() {
                break CloseReason::Shutdown;
            }
            let blocked_since = drain.blocked_since();
            tokio::select! {
                biased;
                _ = &mut closing => break CloseReason::Closed,
                _ = &mut aborted => break CloseReason::Shutdown,
                drained = std::future::poll_fn(|cx| drain.poll_drain(outbox, cx)) => match drained {
                    Ok(Drained::Progress) => {}
                    Ok(Drained::Closed) => {
                        sink_done = true;
                        break CloseReason::Closed;
                    }
                    Err(e) => {
                        sink_done = true;
                        break CloseReason::Failed(format!("write failed: {e}"));
                    }
                },
                _ = stalled(blocked_since, config.write_stall), if blocked_since.is_some() => {
                    sink_done = true;
                    break CloseReason::Failed("write stalled: the peer is not reading".into());
                }
                Some(done) = work.running.next(), if !work.running.is_empty() => {
                    // Take every handler that has finished by now, so their replies
                    // leave in one flush: answers arriving from another connection
                    // would otherwise cost a write each.
                    let mut next = Some(done);
                    let mut budget = READ_BATCH;
                    while let Some(done) = next.take() {
                        if let Err(reason) = work.finish(done) {
                            break 'serve reason;
                        }
                        budget -= 1;
                        if budget == 0 || work.running.is_empty() {
                            break;
                        }
                        next = match std::future::poll_fn(|cx| Poll::Ready(work.running.poll_next_unpin(cx))).await {
                            Poll::Ready(done) => done,
                            Poll::Pending => None,
                        };
                    }
                }
                () = run_front(&mut work.notifications), if !work.notifications.is_empty() => {
                    work.notifications.pop_front();
                }
                _ = tick(&mut keepalive) => {
                    if missed_pings >= config.keepalive_misses {
                        break CloseReason::Failed(format!("no answer to {missed_pings} pings"));
                    }
                    missed_pings += 1;
                    if outbox.push_now(Outbound::Ping).is_err() {
                        break CloseReason::Failed("write queue closed".into());
                    }
                }
                _ = &mut draining, if !work.draining => {
                    work.draining = true;
                }
                // While the outbox is full the other side is not reading our
                // replies; reading more requests would only queue more.
                frame = reader.next(), if reading && !outbox.is_full() => {
                    missed_pings = 0;
                    // Handle this frame and any others already buffered (a pipelining
                    // client sends many per read) without a trip through select! each.
                    let mut next = Some(frame);
                    let mut budget = READ_BATCH;
                    while let Some(frame) = next.take() {
                        match frame {
                            None => {
                                // No more answers can arrive: fail our calls now rather
                                // than at their timeouts, but finish the handlers (a
                                // client that half-closed still reads its replies).
                                reading = false;
                                handle.fail_all_pending();
                                break;
                            }
                            Some(Err(e)) => {
                                tracing::debug!(conn = shared.conn_id, error = %e, "read failed");
                                reading = false;
                                handle.fail_all_pending();
                                break;
                            }
                            Some(Ok(Frame::Unsupported { close_code, reason })) => {
                                tracing::info!(conn = shared.conn_id, close_code, reason, "closing connection");
                                handle.close(close_code, reason);
                                break;
                            }
                            Some(Ok(frame)) => {
                                if let Err(reason) = work.on_frame(frame).await {
                                    break 'serve reason;
                                }
                            }
                        }
                        budget -= 1;
                        if budget == 0 || outbox.is_full() {
                            break;
                        }
                        next = match std::future::poll_fn(|cx| Poll::Ready(reader.poll_next_unpin(cx))).await {
                            Poll::Ready(frame) => Some(frame),
                            Poll::Pending => None,
                        };
                    }
                }
            }
        };

        handle.fail_all_pending();
        shared.closing.cancel();
        // Dropping the work cancels handlers still running (they lost their peer).
        drop(work);
        if !sink_done {
            if reason == CloseReason::Shutdown
                && let Some((method, params)) = &config.goodbye
                && let Ok(json) = message::request(None, method, params)
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
            drain.finish(outbox, config.write_stall).await;
        }
        outbox.close();
        tracing::debug!(conn = shared.conn_id, ?reason, "connection finished");
        reason
    }
}

/// Runs the notification at the front of the queue (one at a time, in order).
async fn run_front(queue: &mut VecDeque<BoxFuture<'static, ()>>) {
    match queue.front_mut() {
        Some(handler) => handler.await,
        None => std::future::pending().await,
    }
}

/// Resolves when the sink has refused data for `limit` since `since`.
async fn stalled(since: Option<tokio::time::Instant>, limit: Duration) {
    match since {
        Some(since) => tokio::time::sleep_until(since + limit).await,
        None => std::future::pending().await,
    }
}

async fn tick(timer: &mut Option<tokio::time::Interval>) {
    match timer {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Everything the connection task does with incoming messages.
struct Work<S> {
    handle: PeerHandle,
    router: Arc<Router<S>>,
    state: Arc<S>,
    running: FuturesUnordered<BoxFuture<'static, Done>>,
    /// Requests read while `max_concurrent` handlers were running: futures not
    /// yet polled, started in order as slots free up.
    queued: VecDeque<BoxFuture<'static, Done>>,
    /// Ids of incoming requests not yet answered, to refuse duplicates.
    in_flight: HashSet<Id>,
    /// Notification handlers, run one at a time in arrival order.
    notifications: VecDeque<BoxFuture<'static, ()>>,
    draining: bool,
}

impl<S: Send + Sync + 'static> Work<S> {
    fn is_idle(&self) -> bool {
        self.running.is_empty() && self.queued.is_empty() && self.notifications.is_empty()
    }

    fn ctx(&self) -> Ctx<S> {
        Ctx { peer: self.handle.clone(), state: self.state.clone() }
    }

    fn config(&self) -> &PeerConfig {
        &self.handle.shared.config
    }

    /// Queues a reply; the connection task writes it when it next drains.
    fn write(&mut self, kind: Kind, json: Vec<u8>) -> Result<(), CloseReason> {
        self.handle.shared.outbox.push_now(Outbound::message(kind, json)).map_err(|_| CloseReason::Closed)
    }

    fn write_error(&mut self, id: &Id, error: &RpcError) -> Result<(), CloseReason> {
        self.write(Kind::Response, message::response_err(id, error))
    }

    fn finish(&mut self, done: Done) -> Result<(), CloseReason> {
        match done.ids {
            DoneIds::None => {}
            DoneIds::One(id) => {
                self.in_flight.remove(&id);
            }
            DoneIds::Many(ids) => {
                for id in ids {
                    self.in_flight.remove(&id);
                }
            }
        }
        if let Some(next) = self.queued.pop_front() {
            self.running.push(next);
        }
        if let Some(reply) = done.reply {
            self.write(Kind::Response, reply)?;
        }
        if self.handle.shared.close_after_reply.load(Ordering::Acquire) {
            return Err(CloseReason::Closed);
        }
        Ok(())
    }

    async fn on_frame(&mut self, frame: Frame) -> Result<(), CloseReason> {
        match frame {
            Frame::Message(bytes) => self.on_message(&bytes).await,
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

    async fn on_message(&mut self, bytes: &[u8]) -> Result<(), CloseReason> {
        match message::parse(bytes, self.config().max_batch) {
            Parsed::Rejected(error) => self.write_error(&Id::Null, &error),
            Parsed::Single(Ok(message)) => self.on_single(message).await,
            Parsed::Single(Err(invalid)) => match self.router.adapt(bytes) {
                Some(adapted) => match message::parse(&adapted, 1) {
                    Parsed::Single(Ok(message)) => self.on_single(message).await,
                    _ => self.write_error(&invalid.id, &invalid.error),
                },
                None => self.write_error(&invalid.id, &invalid.error),
            },
            Parsed::Batch(items) => self.on_batch(items).await,
        }
    }

    async fn on_single(&mut self, message: Message<'_>) -> Result<(), CloseReason> {
        match message {
            Message::Request { id, method, params } => {
                if let Err(error) = self.admit(&id) {
                    return self.write_error(&id, &error);
                }
                let mut handler = match self.router.dispatch(self.ctx(), &method, params) {
                    Ok(handler) => handler,
                    Err(error) => return self.write_error(&id, &error),
                };
                if self.running.len() < self.config().max_concurrent {
                    // Most handlers finish without waiting for anything: poll once
                    // here, with this task's waker, and answer at once if so.
                    let polled = std::future::poll_fn(|cx| {
                        Poll::Ready(std::panic::catch_unwind(AssertUnwindSafe(|| handler.as_mut().poll(cx))))
                    })
                    .await;
                    let outcome = match polled {
                        Ok(Poll::Pending) => None,
                        Ok(Poll::Ready(result)) => Some(Ok(result)),
                        Err(panic) => Some(Err(panic)),
                    };
                    if let Some(outcome) = outcome {
                        let reply = reply_from(&id, outcome);
                        return self.finish(Done { ids: DoneIds::None, reply: Some(reply) });
                    }
                    self.in_flight.insert(id.clone());
                    self.running.push(running_request(id, handler));
                } else {
                    self.in_flight.insert(id.clone());
                    self.queued.push_back(running_request(id, handler));
                }
                Ok(())
            }
            Message::Notification { method, params } => {
                match self.router.dispatch(self.ctx(), &method, params) {
                    Ok(handler) => {
                        self.notifications.push_back(Box::pin(run_notification(method.into_owned(), handler)))
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

    /// Refuses a request while draining, when too much is queued, or when its
    /// id is already in flight.
    fn admit(&self, id: &Id) -> Result<(), RpcError> {
        if self.draining {
            return Err(
                RpcError::internal("server is shutting down").with_data(serde_json::json!({"reason": "shutting_down"}))
            );
        }
        if self.queued.len() >= self.config().max_queued {
            return Err(RpcError::internal("too many requests in flight on this connection")
                .with_data(serde_json::json!({"reason": "overloaded"})));
        }
        if !self.in_flight.is_empty() && self.in_flight.contains(id) {
            return Err(RpcError::invalid_request(format!(
                "duplicate id {id}: a request with this id is still in flight"
            )));
        }
        Ok(())
    }

    fn start(&mut self, fut: BoxFuture<'static, Done>) {
        if self.running.len() < self.config().max_concurrent {
            self.running.push(fut);
        } else {
            self.queued.push_back(fut);
        }
    }

    fn on_response(&self, id: Id, outcome: Outcome<'_>) {
        let reply = match outcome {
            Outcome::Result(result) => Ok(result.to_owned()),
            Outcome::Error(error) => Err(CallError::Rpc(error)),
            Outcome::Both(result, _) if self.config().accept_result_with_error => Ok(result.to_owned()),
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

    async fn on_batch(&mut self, items: Vec<Result<Message<'_>, Invalid>>) -> Result<(), CloseReason> {
        let mut ready = Vec::new();
        let mut parts: Vec<BoxFuture<'static, Option<Vec<u8>>>> = Vec::new();
        let mut ids = Vec::new();
        for item in items {
            match item {
                Err(invalid) => ready.push(message::response_err(&invalid.id, &invalid.error)),
                Ok(Message::Request { id, method, params }) => {
                    let admitted = self.admit(&id).and_then(|()| {
                        if ids.contains(&id) {
                            return Err(RpcError::invalid_request(format!("duplicate id {id} in batch")));
                        }
                        self.router.dispatch(self.ctx(), &method, params)
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
                    if let Ok(handler) = self.router.dispatch(self.ctx(), &method, params) {
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
        self.in_flight.extend(ids.iter().cloned());
        let fut = async move {
            ready.extend(join_all(parts).await.into_iter().flatten());
            let reply = (!ready.is_empty()).then(|| message::batch(&ready));
            Done { ids: DoneIds::Many(ids), reply }
        };
        self.start(Box::pin(fut));
        Ok(())
    }
}

fn too_large() -> RpcError {
    RpcError::invalid_request("message too large")
}

/// A request whose handler has to wait: it runs in `running` (or waits in `queued`).
fn running_request(id: Id, handler: HandlerFuture) -> BoxFuture<'static, Done> {
    Box::pin(async move {
        let reply = reply_for(&id, handler).await;
        Done { ids: DoneIds::One(id), reply: Some(reply) }
    })
}

/// Runs a handler, turning an error or a panic into the error response.
async fn reply_for(id: &Id, handler: HandlerFuture) -> Vec<u8> {
    reply_from(id, AssertUnwindSafe(handler).catch_unwind().await)
}

type Caught = Result<Result<Vec<u8>, RpcError>, Box<dyn std::any::Any + Send>>;

fn reply_from(id: &Id, outcome: Caught) -> Vec<u8> {
    match outcome {
        Ok(Ok(result)) => message::response_ok(id, &result),
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
