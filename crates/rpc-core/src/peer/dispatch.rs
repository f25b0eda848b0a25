//! From a frame to its handler, and from the handler to the reply: parsing,
//! routing, admission (duplicate ids, a full backlog, a full outbox,
//! shutdown), batches, answers to our own calls, and a panic turned into the
//! error of that one request.
//!
//! Not async: a frame is handled in the connection task's poll, and a handler
//! that finishes without waiting is polled once right there, so a message
//! costs no future of its own.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::batch::{self, Member};
use super::ctx::{ConnCtx, Ctx};
use super::handle::{CloseReason, PeerHandle, Shared};
use super::incoming::{Done, Flooding, Incoming, Owed};
use super::outbox::{Drain, Outbox};
use super::outgoing::CallError;
use crate::codec::{Frame, Line, Next, Outbound};
use crate::escape::OneLine;
use crate::message::{self, Id, Invalid, Kind, Message, Outcome, Parsed, RpcError};
use crate::router::{HandlerFuture, LastRoute, Router, Started};

/// Everything the connection task does with what the other side sends.
pub(crate) struct Dispatch<S> {
    handle: PeerHandle,
    router: Arc<Router<S>>,
    /// What every call's `Ctx` shares.
    conn: Arc<ConnCtx<S>>,
    /// The write side: replies written here go straight to the transport
    /// when nothing is queued ahead of them.
    pub drain: Drain,
    pub incoming: Incoming,
    /// Whether new requests are refused, and why.
    pub refusing: Refusing,
    /// Where a `method_now` handler writes its response, kept from one to
    /// the next while the connection is busy (up to `KEEP_REPLY` bytes).
    reply: Vec<u8>,
    /// The route this connection's last call took.
    last_route: LastRoute,
}

/// Past this, the reply buffer goes after use: a busy connection keeps at
/// most this much for the next reply, however large one was.
const KEEP_REPLY: usize = 16 * 1024;

impl From<Flooding> for CloseReason {
    fn from(Flooding(why): Flooding) -> CloseReason {
        CloseReason::Failed(why)
    }
}

impl<S: Send + Sync + 'static> Dispatch<S> {
    pub fn new(handle: PeerHandle, router: Arc<Router<S>>, state: Arc<S>, drain: Drain) -> Self {
        Dispatch {
            conn: Arc::new(ConnCtx { peer: handle.clone(), state }),
            incoming: Incoming::new(),
            drain,
            handle,
            router,
            refusing: Refusing::No,
            reply: Vec::new(),
            last_route: LastRoute::default(),
        }
    }

    fn outbox(&self) -> &Outbox {
        &self.handle.shared.outbox
    }

    fn ctx(&self, call: Option<&Id>) -> Ctx<S> {
        Ctx::on(&self.conn, call.cloned())
    }

    /// Whether a request (or batch) of `size` bytes may start now.
    fn can_start(&self, size: usize) -> bool {
        may_start(&self.handle.shared, self.incoming.running(), self.incoming.running_bytes(), size)
    }

    /// Starts waiting requests, in arrival order, while they may.
    pub fn start_waiting(&mut self) {
        let shared = &self.handle.shared;
        self.incoming.start_waiting(&shared.counters, |running, bytes, size| may_start(shared, running, bytes, size));
    }

    /// Writes a reply, or queues it behind what is queued already; either way
    /// the connection task flushes it when it next drains.
    pub fn write(&mut self, kind: Kind, json: Vec<u8>) -> Result<(), CloseReason> {
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
        let full = self.outbox().is_full();
        let answer = message::response_err(id, error);
        let bytes = answer.len();
        self.write(Kind::Response, answer)?;
        if full {
            self.incoming.refuse(self.handle.conn_id(), &self.handle.shared.config, bytes)?;
        }
        Ok(())
    }

    /// Answers the ids of `owed` with `error` (one array for a batch).
    fn answer_owed(&mut self, owed: Owed, error: &RpcError) -> Result<(), CloseReason> {
        let batch = matches!(owed, Owed::Batch(_));
        let ids = self.incoming.settle(owed);
        for id in &ids {
            self.handle.cancel_call(id);
        }
        match (batch, ids.as_slice()) {
            (_, []) => return Ok(()),
            (false, [id]) => self.write(Kind::Response, message::response_err(id, error))?,
            _ => {
                let replies: Vec<Vec<u8>> = ids.iter().map(|id| message::response_err(id, error)).collect();
                self.write(Kind::Response, message::batch(&replies))?
            }
        }
        self.publish_answered();
        Ok(())
    }

    /// While someone waits for every request to be answered
    /// (`PeerHandle::all_answered`): publishes how many are not, and wakes
    /// the waiter once none is. Called after answers are queued and at each
    /// turn of the connection (a waiter wakes it to have the count
    /// published), so a count is never published ahead of the answers, and
    /// what the waiter sends next is queued behind them. With no one
    /// waiting it costs one load.
    pub fn publish_answered(&self) {
        let shared = &self.handle.shared;
        if shared.answer_waiters.load(Ordering::Relaxed) == 0 {
            return;
        }
        let left = self.incoming.unanswered();
        shared.counters.unanswered.store(left, Ordering::SeqCst);
        shared.counters.answers_published.fetch_add(1, Ordering::SeqCst);
        if left == 0 {
            shared.answered.notify_waiters();
        }
    }

    /// A handler finished: its ids are answered, its reply goes out.
    pub fn finish(&mut self, done: Done) -> Result<(), CloseReason> {
        let tokens = &self.handle.shared.tokens;
        if done.held > 0 {
            self.incoming.finished(done.held, &self.handle.shared.counters);
        }
        match done.owed {
            // Most calls: their id, without a list made for it.
            Owed::One(id) => {
                self.incoming.settle_one(&id);
                tokens.forget(&id);
            }
            owed => self.incoming.settle(owed).iter().for_each(|id| tokens.forget(id)),
        }
        if let Some(reply) = done.reply {
            self.write(Kind::Response, reply)?;
        }
        self.publish_answered();
        self.after_reply()
    }

    /// A `method_now` handler answered into `self.reply`: written straight
    /// into the transport's buffer when nothing is queued ahead of it.
    fn answered_now(&mut self) -> Result<(), CloseReason> {
        let outbox = &self.handle.shared.outbox;
        if !self.drain.write_json_now(outbox, Kind::Response, &self.reply) {
            let queued = Outbound::message(Kind::Response, self.reply.clone());
            outbox.push_now(queued).map_err(|_| CloseReason::Closed)?;
        }
        if self.reply.capacity() > KEEP_REPLY {
            self.reply = Vec::new();
        }
        self.after_reply()
    }

    /// The connection has nothing to read for now: it holds no reply
    /// buffer while it idles (10 000 idle connections would keep 10 000).
    pub fn release_reply_buffer(&mut self) {
        if self.reply.capacity() > 0 {
            self.reply = Vec::new();
        }
    }

    /// The handler asked for the connection to close once it answered.
    fn after_reply(&self) -> Result<(), CloseReason> {
        if self.handle.shared.close_after_reply.load(Ordering::Acquire) {
            return Err(CloseReason::Closed);
        }
        Ok(())
    }

    /// From now on new requests are refused (`why`), and those that have
    /// not started are answered so now.
    pub fn refuse_from_now(&mut self, why: Refusing) -> Result<(), CloseReason> {
        self.refusing = why;
        for waiting in self.incoming.take_waiting(&self.handle.shared.counters) {
            self.answer_owed(waiting.owed, &why.error())?;
        }
        Ok(())
    }

    /// The grace period is over: everything still owed is answered (as new
    /// requests are) and dropped.
    pub fn abandon_all(&mut self) -> Result<(), CloseReason> {
        let error = self.refusing.error();
        for waiting in self.incoming.take_waiting(&self.handle.shared.counters) {
            self.answer_owed(waiting.owed, &error)?;
        }
        for owed in self.incoming.abandon(&self.handle.shared.counters) {
            self.answer_owed(owed, &error)?;
        }
        Ok(())
    }

    /// Handles one frame, in the connection task's poll (`cx`).
    pub fn on_frame(&mut self, frame: Frame, cx: &mut Context<'_>) -> Result<(), CloseReason> {
        match frame {
            Frame::Message(bytes) => self.on_bytes(&bytes, cx),
            Frame::Lines(mut lines) => {
                while let Some(next) = lines.next_read(message::parse_leading) {
                    self.on_next(next, cx)?;
                }
                Ok(())
            }
            Frame::Text(text) => self.on_text(text.as_str(), cx),
            Frame::TooLarge(None) => self.write_error(&Id::Null, &too_large()),
            Frame::TooLarge(Some(sniffed)) => match sniffed.id {
                Some(id) if sniffed.has_method => self.write_error(&id, &too_large()),
                Some(id) if sniffed.is_response => {
                    self.handle.shared.calls.complete(&id, Err(CallError::Malformed("response too large".into())));
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

    /// Handles one NDJSON line, where it lies in the read buffer: read by
    /// [`message::parse_leading`] (the common message, its line's end found
    /// by the parse) or taken whole.
    #[inline(always)]
    pub fn on_next(&mut self, next: Next<'_, Message<'_>>, cx: &mut Context<'_>) -> Result<(), CloseReason> {
        match next {
            Next::Read(message, len) => self.on_single(message, len, cx),
            Next::Line(line) => self.on_line(line, cx),
        }
    }

    /// Handles one NDJSON line taken whole.
    fn on_line(&mut self, line: Line<'_>, cx: &mut Context<'_>) -> Result<(), CloseReason> {
        match line {
            Line::Message(bytes) => self.on_bytes(bytes, cx),
            Line::Text(text) => self.on_text(text, cx),
            Line::TooLarge => self.write_error(&Id::Null, &too_large()),
            Line::Blank => Ok(()),
        }
    }

    /// A frame known to be UTF-8 already (a WebSocket text frame, a line of
    /// a read checked as a whole).
    fn on_text(&mut self, text: &str, cx: &mut Context<'_>) -> Result<(), CloseReason> {
        // Nearly every frame is one object: its message goes straight to its
        // handling, not through a `Parsed` moved along the way (a stalled
        // copy of it was 3 % of a bridge's ping, perf).
        if text.starts_with('{') {
            return match message::parse_object(text) {
                Ok(message) => self.on_single(message, text.len(), cx),
                Err(invalid) => self.on_message(text.as_bytes(), message::invalid_object(invalid), cx),
            };
        }
        let parsed = message::parse_text(text, self.handle.shared.config.max_batch);
        self.on_message(text.as_bytes(), parsed, cx)
    }

    fn on_bytes(&mut self, bytes: &[u8], cx: &mut Context<'_>) -> Result<(), CloseReason> {
        let parsed = message::parse(bytes, self.handle.shared.config.max_batch);
        self.on_message(bytes, parsed, cx)
    }

    /// A frame (`bytes`) and what it parsed to.
    fn on_message(&mut self, bytes: &[u8], parsed: Parsed<'_>, cx: &mut Context<'_>) -> Result<(), CloseReason> {
        let size = bytes.len();
        match parsed {
            Parsed::Rejected(error) => self.write_error(&Id::Null, &error),
            Parsed::Single(Ok(message)) => self.on_single(message, size, cx),
            Parsed::Single(Err(invalid)) if self.is_our_call(&invalid) => {
                self.fail_malformed_answer(invalid);
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

    /// Inlined where a message was parsed, so that a request is handled
    /// where the parse wrote it: moved into a call, its id was read back in
    /// 16 bytes from two 8-byte stores just made, a stall that was a third of
    /// this function's time on a bridge's `ping` (perf).
    #[inline(always)]
    fn on_single(&mut self, message: Message<'_>, size: usize, cx: &mut Context<'_>) -> Result<(), CloseReason> {
        match message {
            Message::Request { ref id, ref method, params } => self.on_request(id, method, params, size, cx),
            Message::Notification { method, params } => {
                if !self.incoming.has_room(size, &self.handle.shared.config) {
                    let conn = self.handle.conn_id();
                    self.incoming.dropped_notification(conn, &self.handle.shared.counters);
                    self.incoming.refuse(conn, &self.handle.shared.config, 0)?;
                    return Ok(());
                }
                match self.router.dispatch(self.ctx(None), &method, params) {
                    Ok(handler) => {
                        let run = Box::pin(run_notification(method.into_owned(), handler));
                        self.incoming.queue_notification(run, size, &self.handle.shared.counters);
                    }
                    Err(error) => {
                        tracing::debug!(conn = self.handle.conn_id(), method = %OneLine(&method), %error, "notification ignored")
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

    fn on_request(
        &mut self,
        id: &Id,
        method: &str,
        params: Option<&serde_json::value::RawValue>,
        size: usize,
        cx: &mut Context<'_>,
    ) -> Result<(), CloseReason> {
        if let Err(error) = self.admit(id) {
            return self.write_error(id, &error);
        }
        // In arrival order: nothing starts ahead of requests already waiting.
        let start_now = !self.incoming.has_waiting() && self.can_start(size);
        if !start_now && !self.incoming.has_room(size, &self.handle.shared.config) {
            return self.refuse_overloaded(id);
        }
        if !start_now {
            // Queued behind the waiting: made now, started in its turn.
            let handler = match self.router.dispatch(self.ctx(Some(id)), method, params) {
                Ok(handler) => handler,
                Err(error) => return self.write_error(id, &error),
            };
            let run = running_request(id.clone(), handler, size);
            self.handle.shared.tokens.waiting(id);
            self.incoming.queue_request(id.clone(), run, size, &self.handle.shared.counters);
            return Ok(());
        }
        // A `method_now` handler answers as it starts: no future, no `Ctx`,
        // and its response is written where it goes.
        let reply = &mut self.reply;
        reply.clear();
        let started = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.router.start(&self.conn, Some(id), method, params, reply, &mut self.last_route)
        }));
        let mut handler = match started {
            Ok(Ok(Started::Running(handler))) => handler,
            Ok(Ok(Started::Done)) => return self.answered_now(),
            Ok(Err(error)) => return self.write_error(id, &error),
            Err(panic) => {
                self.handle.shared.tokens.forget(id);
                return self.finish(Done { owed: Owed::Nothing, reply: Some(reply_from(id, Err(panic))), held: 0 });
            }
        };
        // Most async handlers finish without waiting for anything: poll once
        // here, with this task's waker, and answer at once if so.
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| handler.as_mut().poll(cx)));
        let outcome = match polled {
            Ok(Poll::Pending) => None,
            Ok(Poll::Ready(result)) => Some(Ok(result)),
            Err(panic) => Some(Err(panic)),
        };
        if let Some(outcome) = outcome {
            let reply = reply_from(id, outcome);
            self.handle.shared.tokens.forget(id);
            return self.finish(Done { owed: Owed::Nothing, reply: Some(reply), held: 0 });
        }
        let run = running_request(id.clone(), handler, size);
        self.incoming.run_request(id.clone(), run, size, &self.handle.shared.counters);
        Ok(())
    }

    /// Refuses a request while refusing all, or when its id is already in flight.
    fn admit(&self, id: &Id) -> Result<(), RpcError> {
        if self.refusing != Refusing::No {
            return Err(self.refusing.error());
        }
        if self.incoming.is_in_flight(id) {
            return Err(RpcError::invalid_request(format!(
                "duplicate id {id}: a request with this id is still in flight"
            )));
        }
        Ok(())
    }

    /// Answers `overloaded` at once, and cuts off a peer that keeps at it.
    fn refuse_overloaded(&mut self, id: &Id) -> Result<(), CloseReason> {
        self.handle.shared.counters.refused.fetch_add(1, Ordering::Relaxed);
        let answer = message::response_err(id, &overloaded());
        let bytes = answer.len();
        self.write(Kind::Response, answer)?;
        Ok(self.incoming.refuse(self.handle.conn_id(), &self.handle.shared.config, bytes)?)
    }

    /// Whether an unreadable message is really a malformed answer to one of
    /// our calls (its id, no method; no outcome, or no or a wrong
    /// `jsonrpc`): then it fails that call at once instead of being bounced
    /// back as an invalid request while the caller waits for its timeout.
    fn is_our_call(&self, invalid: &Invalid) -> bool {
        invalid.answer_like && self.handle.shared.calls.contains(&invalid.id)
    }

    fn fail_malformed_answer(&self, invalid: Invalid) {
        let message = invalid.error.message.as_str();
        let problem = match message.strip_prefix("Invalid Request: ").unwrap_or(message) {
            message::MISSING_METHOD => "the answer has neither result nor error".to_owned(),
            why => format!("the answer is not JSON-RPC 2.0: {why}"),
        };
        tracing::debug!(conn = self.handle.conn_id(), id = %invalid.id, %problem, "malformed answer to our call");
        self.handle.shared.calls.complete(&invalid.id, Err(CallError::Malformed(problem)));
    }

    fn on_response(&self, id: Id, outcome: Outcome<'_>) {
        let reply = match outcome {
            Outcome::Result(result) => Ok(result.to_owned()),
            Outcome::Error(error) => Err(CallError::Rpc(*error)),
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
        if !self.handle.shared.calls.complete(&id, reply) {
            tracing::debug!(conn = self.handle.conn_id(), %id, "response to no pending request (late or unknown); dropped")
        }
    }

    fn on_batch(&mut self, items: Vec<Result<Message<'_>, Invalid>>, size: usize) -> Result<(), CloseReason> {
        let start_now = !self.incoming.has_waiting() && self.can_start(size);
        let has_requests = items.iter().any(|item| matches!(item, Ok(Message::Request { .. })));
        if has_requests && !start_now && !self.incoming.has_room(size, &self.handle.shared.config) {
            return self.refuse_batch(items);
        }
        let mut ready = Vec::new();
        let mut members = Vec::new();
        let mut ids = Vec::new();
        for item in items {
            match item {
                Err(invalid) if self.is_our_call(&invalid) => self.fail_malformed_answer(invalid),
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
                            let member = Some(id.clone());
                            let run = Box::pin(async move { Some(reply_for(&id, handler).await) });
                            members.push(Member { id: member, run });
                        }
                        Err(error) => ready.push(message::response_err(&id, &error)),
                    }
                }
                Ok(Message::Notification { method, params }) => {
                    if let Ok(handler) = self.router.dispatch(self.ctx(None), &method, params) {
                        let method = method.into_owned();
                        let run = Box::pin(async move {
                            run_notification(method, handler).await;
                            None
                        });
                        members.push(Member { id: None, run });
                    }
                }
                Ok(Message::Response { id, outcome }) => self.on_response(id, outcome),
            }
        }
        if members.is_empty() {
            // A batch of notifications (or responses) gets no reply at all, never `[]`.
            return match ready.is_empty() {
                true => Ok(()),
                false => self.write(Kind::Response, message::batch(&ready)),
            };
        }
        let n = self.incoming.open_batch(ids);
        let handle = self.handle.clone();
        let run: BoxFuture<'static, Done> = Box::pin(async move {
            let replies = batch::run(&handle.shared, members, ready).await;
            let reply = (!replies.is_empty()).then(|| message::batch(&replies));
            Done { owed: Owed::Batch(n), reply, held: size }
        });
        if start_now {
            self.incoming.run_batch(run, size, &self.handle.shared.counters);
        } else {
            self.incoming.queue_batch(n, run, size, &self.handle.shared.counters);
        }
        Ok(())
    }

    /// The whole batch is refused as one: each request gets `overloaded`.
    fn refuse_batch(&mut self, items: Vec<Result<Message<'_>, Invalid>>) -> Result<(), CloseReason> {
        self.handle.shared.counters.refused.fetch_add(1, Ordering::Relaxed);
        let mut replies = Vec::new();
        for item in items {
            match item {
                Ok(Message::Request { id, .. }) => replies.push(message::response_err(&id, &overloaded())),
                Ok(Message::Response { id, outcome }) => self.on_response(id, outcome),
                Err(invalid) => replies.push(message::response_err(&invalid.id, &invalid.error)),
                Ok(Message::Notification { .. }) => {}
            }
        }
        let answer = message::batch(&replies);
        let bytes = answer.len();
        self.write(Kind::Response, answer)?;
        Ok(self.incoming.refuse(self.handle.conn_id(), &self.handle.shared.config, bytes)?)
    }
}

/// Whether a request of `size` bytes may start now, with `running` handlers
/// running on requests of `running_bytes`: a free handler slot, room in the
/// outbox for its reply, and room for its request among those that run (as
/// many bytes as the backlog takes, or one request of any size while they
/// hold less than half of that). A handler keeps its request until it
/// answers, so without the last rule 32 handlers waiting on something slow
/// would hold 32 of the largest requests the framing lets through.
///
/// A handler waiting for an answer from this same peer does not hold a
/// slot: each call we have pending here may be waiting on one of the peer's
/// own requests (its handler calls back), and if those could not start, two
/// peers flooding each other would each fill their slots with handlers
/// waiting on requests queued behind them, until timeouts. Such waiting
/// handlers are still bounded, by the backlog's count, and the bytes they
/// hold are not what keeps a request from starting then either.
fn may_start(shared: &Shared, running: usize, running_bytes: usize, size: usize) -> bool {
    let config = &shared.config;
    let waiting_on_peer = shared.calls.len().min(config.backlog);
    let busy = running.saturating_sub(waiting_on_peer);
    // One request of any size may start while those running hold less than
    // half the budget: a small handler that runs as long as the connection
    // does (a subscription, a dialog) must not keep a large one out for good.
    let bytes_room =
        running_bytes + size <= config.backlog_bytes || running_bytes < config.backlog_bytes / 2 || waiting_on_peer > 0;
    busy < config.max_concurrent
        && running < config.max_concurrent + config.backlog
        && bytes_room
        && !shared.outbox.is_full()
}

fn too_large() -> RpcError {
    RpcError::invalid_request("message too large")
}

fn overloaded() -> RpcError {
    RpcError::internal("too many requests waiting on this connection; retry later")
        .with_data(serde_json::json!({"reason": "overloaded"}))
}

/// What a connection that stopped serving ([`PeerHandle::stop_serving`])
/// answers a request: for a daemon's own gate, to answer the requests it
/// holds the same way.
pub fn not_serving() -> RpcError {
    Refusing::StoppedServing.error()
}

/// Why a connection refuses new requests (and, at the end of a grace
/// period, answers those still running), if it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusing {
    No,
    /// The daemon is shutting down.
    ShuttingDown,
    /// This connection no longer serves requests ([`PeerHandle::stop_serving`]).
    StoppedServing,
}

impl Refusing {
    /// -32603 with `data.reason: "shutting_down"`, either way: to the other
    /// side the connection is going away.
    fn error(self) -> RpcError {
        let message = match self {
            Refusing::StoppedServing => "no longer serving requests: this connection is being closed",
            Refusing::No | Refusing::ShuttingDown => "server is shutting down",
        };
        RpcError::internal(message).with_data(serde_json::json!({"reason": "shutting_down"}))
    }
}

/// A request whose handler has to wait: it runs in `running` (or waits in the backlog).
fn running_request(id: Id, handler: HandlerFuture, size: usize) -> BoxFuture<'static, Done> {
    Box::pin(async move {
        let reply = reply_for(&id, handler).await;
        Done { owed: Owed::One(id), reply: Some(reply), held: size }
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
        Ok(Err(error)) => tracing::debug!(method = %OneLine(&method), %error, "notification handler failed"),
        Err(panic) => {
            tracing::error!(method = %OneLine(&method), panic = panic_message(&panic), "notification handler panicked")
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
