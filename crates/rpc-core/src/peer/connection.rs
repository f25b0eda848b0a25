//! The connection's task: [`Connection::run`] takes turns over its sources
//! (the reader, running handlers, the writer, timers, the shutdown signals)
//! until either side closes it, then says its last words.

use std::cell::Cell;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFuture;

use super::config::PeerConfig;
use super::dispatch::{Dispatch, Refusing};
use super::handle::{CloseReason, PeerHandle, Shared};
use super::outbox::{Drain, Drained, Outbox};
use crate::codec::{Frame, FrameStream, Lines, Outbound, Transport};
use crate::message;
use crate::router::Router;
use crate::shutdown::Shutdown;

/// Frames handled per wake-up of the connection task before it looks at its
/// other duties (completed handlers, keepalive, shutdown) again.
const READ_BATCH: usize = 64;

/// A connection with its thread to itself handles the first [`READ_BATCH`]
/// frames after it caught up with its peer in slices of this many, each
/// slice's replies written before the next is handled: the peer, which was
/// waiting, starts on them while the rest are handled, instead of both sides
/// taking turns a whole batch at a time (each turn a wake-up of the other's
/// thread). Connections that share their thread with other busy ones, and a
/// peer that keeps ahead (more is there to read), keep whole batches, whose
/// single write is what the thread has to spare.
const SLICE: usize = 8;

thread_local! {
    /// The connection whose task this thread polled last: a connection
    /// polled twice in a row has had the thread to itself in between.
    static LAST_POLLED: Cell<u64> = const { Cell::new(u64::MAX) };
}

/// When a drain ends, what was already sent is read and answered: how long
/// the input must be quiet for that to end, and at most how many frames and
/// how long it takes.
const SWEEP_QUIET: Duration = Duration::from_millis(20);
const SWEEP_LIMIT: usize = 4096;
const SWEEP_LONGEST: Duration = Duration::from_millis(250);

/// How long the last writes get when we close a connection on purpose.
const FINAL_FLUSH: Duration = Duration::from_secs(1);

/// A connection not yet running. Get the [`PeerHandle`] from [`Connection::new`],
/// register it wherever the daemon keeps connections, then [`Connection::run`].
pub struct Connection<S> {
    handle: PeerHandle,
    transport: Transport,
    router: Arc<Router<S>>,
    state: Arc<S>,
    shutdown: Shutdown,
}

impl<S: Send + Sync + 'static> Connection<S> {
    pub fn new(transport: Transport, router: Arc<Router<S>>, state: Arc<S>, config: PeerConfig) -> (PeerHandle, Self) {
        let handle = PeerHandle::new(config);
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
        let daemon = shutdown.draining();
        tokio::pin!(closing, daemon);
        // Both are polled at the first turn.
        let mut due = Due { closing: true, daemon: true };
        let reason = std::future::poll_fn(|cx| {
            // Before any turn reads the note: a signal that fires from now on
            // wakes this poll's waker.
            shared.outbox.register_connection(cx.waker());
            let mut signals = Signals {
                closing: closing.as_mut(),
                daemon: daemon.as_mut(),
                shared: &shared,
                due: &mut due,
                shutdown: &shutdown,
            };
            driver.poll_run(&mut signals, cx)
        })
        .await;
        // Boxed: what closing needs would otherwise be laid out in this
        // future beside what running needs, for the connection's whole life.
        Box::pin(driver.close(reason)).await
    }
}

/// The signals a connection watches besides its own sources.
struct Signals<'a, 's> {
    /// The connection was closed from our side ([`PeerHandle::close`]).
    closing: Pin<&'a mut WaitForCancellationFuture<'s>>,
    /// The daemon's next step: while the connection serves, the beginning
    /// of its shutdown; from then on, the end of the grace period (always
    /// later, see [`Shutdown::aborted`]). One future for both keeps every
    /// connection's task smaller.
    daemon: Pin<&'a mut WaitForCancellationFuture<'s>>,
    /// Both are polled with `shared` as their waker, which notes that one
    /// fired (`Shared::signalled`) and wakes the task.
    shared: &'a Arc<Shared>,
    due: &'a mut Due,
    shutdown: &'s Shutdown,
}

/// Which signals the connection must poll when it gets to them. Each turn
/// looks at them, and a token's future takes two locks a poll: a quarter
/// of what a subscriber's connection did for each event it sends. So a
/// signal is polled only when it is new or may have fired: both become due
/// whenever the note says one woke the task, and each stays due until the
/// turn gets to it (one signal's wake-up is never taken for the other's).
struct Due {
    closing: bool,
    daemon: bool,
}

impl Signals<'_, '_> {
    fn closed(&mut self) -> bool {
        self.read_note();
        fired(&mut self.due.closing, self.closing.as_mut(), self.shared)
    }

    /// The daemon took its next step (see `daemon`).
    fn daemon_moved_on(&mut self) -> bool {
        self.read_note();
        fired(&mut self.due.daemon, self.daemon.as_mut(), self.shared)
    }

    /// The drain has begun: wait for the end of the grace period.
    fn wait_for_abort(&mut self) {
        self.daemon.set(self.shutdown.aborted());
        self.due.daemon = true;
    }

    fn read_note(&mut self) {
        let signalled = &self.shared.signalled;
        if signalled.load(Ordering::Relaxed) && signalled.swap(false, Ordering::Acquire) {
            *self.due = Due { closing: true, daemon: true };
        }
    }
}

/// Polls `signal` if it is `due` (no longer due after that), with the
/// connection's note as its waker; whether it fired.
fn fired(due: &mut bool, signal: Pin<&mut WaitForCancellationFuture<'_>>, shared: &Arc<Shared>) -> bool {
    if !std::mem::take(due) {
        return false;
    }
    let waker = Waker::from(shared.clone());
    signal.poll(&mut Context::from_waker(&waker)).is_ready()
}

/// Where a connection is in its life.
enum Phase {
    /// Reading, running handlers, writing.
    Serving,
    /// The connection no longer serves the other side's requests
    /// ([`PeerHandle::stop_serving`]) but stays open for ours: new ones are
    /// refused, running ones are answered so when `grace` runs out.
    NotServing { grace: Option<Pin<Box<tokio::time::Sleep>>> },
    /// The daemon is shutting down: new requests are refused, what runs
    /// finishes (`swept`: what the peer sent before is read, see `Sweep`).
    Draining { swept: bool },
    /// Everything owed is answered, and requests the peer sent before the
    /// signal may still wait in the socket unread: they are read and answered
    /// `shutting_down` rather than closed on (a close with unread input is a
    /// reset, and they would go unanswered), until the input is quiet.
    Sweeping(Box<Sweep>),
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
    reader: FrameStream,
    /// The lines of the last NDJSON read not handled yet: handled before
    /// anything more is read.
    lines: Option<Lines>,
    work: Dispatch<S>,
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
    /// Set for the earliest deadline of our calls in flight (see
    /// `OutgoingCalls`); `None` while none has one.
    call_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// No other connection's task ran on this thread since this one's last
    /// poll (see [`SLICE`]).
    alone: bool,
    /// Frames still to handle in slices: [`READ_BATCH`] from when the reader
    /// last had nothing.
    sliced_left: usize,
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
            work: Dispatch::new(handle.clone(), router, state, drain),
            handle,
            reader: transport.reader,
            lines: None,
            phase: Phase::Serving,
            input_ended: false,
            abandoned: false,
            sink_done: false,
            keepalive,
            missed_pings: 0,
            handshake,
            call_deadline: None,
            alone: false,
            sliced_left: 0,
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
        let id = self.handle.conn_id();
        self.alone = LAST_POLLED.with(|last| last.replace(id)) == id;
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
        if signals.closed() {
            return Poll::Ready(Err(CloseReason::Closed));
        }
        self.work.publish_answered();
        if let Some(grace) = self.handle.shared.stop_serving_asked()
            && matches!(self.phase, Phase::Serving)
        {
            return Poll::Ready(self.on_stop_serving(grace));
        }
        let draining = matches!(self.phase, Phase::Draining { .. } | Phase::Sweeping(_));
        if draining && !self.abandoned && signals.daemon_moved_on() {
            return Poll::Ready(self.on_grace_over());
        }
        if let Some(turn) = self.next_phase() {
            return Poll::Ready(turn);
        }
        self.work.start_waiting();
        source!(self.poll_write(cx));
        source!(self.poll_serving_grace(cx));
        source!(self.poll_handlers(cx));
        source!(self.poll_notifications(cx));
        source!(self.poll_keepalive(cx));
        source!(self.poll_handshake(cx));
        source!(self.poll_call_deadlines(cx));
        if !draining && signals.daemon_moved_on() {
            signals.wait_for_abort();
            return Poll::Ready(self.on_drain_begun());
        }
        source!(self.poll_sweep(cx));
        self.poll_read(cx)
    }

    /// Moves on when the current phase is over; `None` while it is not.
    fn next_phase(&mut self) -> Option<Result<(), CloseReason>> {
        if self.input_ended && self.work.incoming.is_idle() {
            return Some(Err(CloseReason::Eof));
        }
        // Draining ends when nothing is owed either way: our own calls in
        // flight (a call forwarded to this peer) get the grace period too.
        let Phase::Draining { swept } = self.phase else { return None };
        let nothing_owed = self.abandoned || !self.handle.has_pending_calls();
        if !self.work.incoming.is_idle() || !nothing_owed {
            return None;
        }
        if !swept && !self.input_ended {
            self.phase = Phase::Sweeping(Box::new(Sweep::new()));
            return Some(Ok(()));
        }
        Some(Err(CloseReason::Shutdown))
    }

    /// Shutdown began: requests that have not started are answered now.
    fn on_drain_begun(&mut self) -> Result<(), CloseReason> {
        self.phase = Phase::Draining { swept: false };
        self.work.refuse_from_now(Refusing::ShuttingDown)
    }

    /// The connection is to serve no more requests: those that have not
    /// started are answered now, running ones get `grace`.
    fn on_stop_serving(&mut self, grace: Duration) -> Result<(), CloseReason> {
        self.phase = Phase::NotServing { grace: Some(Box::pin(tokio::time::sleep(grace))) };
        self.work.refuse_from_now(Refusing::StoppedServing)
    }

    /// The grace after [`PeerHandle::stop_serving`] ran out: what still runs
    /// is answered and dropped.
    fn poll_serving_grace(&mut self, cx: &mut Context<'_>) -> Turn {
        let Phase::NotServing { grace: Some(grace) } = &mut self.phase else { return Poll::Pending };
        ready!(grace.as_mut().poll(cx));
        self.phase = Phase::NotServing { grace: None };
        Poll::Ready(self.work.abandon_all())
    }

    /// The grace period is over (the drain began before it): whatever still
    /// runs is answered `shutting_down` and dropped.
    fn on_grace_over(&mut self) -> Result<(), CloseReason> {
        self.abandoned = true;
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

    /// Writes the replies of handlers that finished: every one finished by
    /// now, so they leave in one flush (answers arriving from another
    /// connection would otherwise cost a write each).
    fn poll_handlers(&mut self, cx: &mut Context<'_>) -> Turn {
        let mut finished = 0;
        while finished < READ_BATCH {
            match self.work.incoming.poll_finished(cx) {
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
        ready!(self.work.incoming.poll_front_notification(cx));
        self.work.incoming.finish_front_notification(counters);
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

    /// Our calls whose deadlines passed fail with a timeout. The timer is
    /// set again whenever a new call's deadline comes before it.
    fn poll_call_deadlines(&mut self, cx: &mut Context<'_>) -> Turn {
        if let Some(armed) = self.handle.shared.calls.take_rearm() {
            self.set_call_deadline(armed);
        }
        let Some(timer) = &mut self.call_deadline else { return Poll::Pending };
        ready!(timer.as_mut().poll(cx));
        let next = self.handle.shared.calls.expire(Instant::now());
        self.set_call_deadline(next);
        Poll::Ready(Ok(()))
    }

    fn set_call_deadline(&mut self, at: Option<Instant>) {
        match (at, &mut self.call_deadline) {
            (None, timer) => *timer = None,
            (Some(at), Some(timer)) => timer.as_mut().reset(at),
            (Some(at), timer @ None) => *timer = Some(Box::pin(tokio::time::sleep_until(at))),
        }
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
    /// costs no future or wake-up of its own. The lines of an NDJSON read
    /// count one each, and what the batch leaves of them waits for the next.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Turn {
        let mut handled = 0;
        let batch = if self.alone && self.sliced_left > 0 { SLICE.min(self.sliced_left) } else { READ_BATCH };
        while handled < batch && self.may_read() {
            if let Some(lines) = &mut self.lines {
                if let Some(next) = lines.next_read(message::parse_leading) {
                    handled += 1;
                    self.missed_pings = 0;
                    if let Phase::Sweeping(sweep) = &mut self.phase {
                        sweep.heard();
                    }
                    self.work.on_next(next, cx)?;
                    continue;
                }
                // Every line handled: the read buffer is ours again.
                self.lines = None;
            }
            let frame = match self.reader.poll_next_unpin(cx) {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    // Caught up: the peer waits for what comes next.
                    self.sliced_left = READ_BATCH;
                    break;
                }
            };
            self.missed_pings = 0;
            // A read's lines count one each and the read itself nothing: a
            // batch that ended one line short of a read would send that
            // line's reply in a write of its own.
            if let Some(Ok(Frame::Lines(lines))) = frame {
                self.lines = Some(lines);
                continue;
            }
            handled += 1;
            match frame {
                Some(Ok(Frame::Unsupported { close_code, reason })) => {
                    tracing::info!(conn = self.handle.conn_id(), close_code, reason, "closing connection");
                    self.handle.close(close_code, reason);
                    break;
                }
                Some(Ok(frame)) => {
                    if let Phase::Sweeping(sweep) = &mut self.phase {
                        sweep.heard();
                    }
                    self.work.on_frame(frame, cx)?
                }
                None => {
                    self.on_end_of_input();
                    break;
                }
                // Not an end the peer chose (a reset, a broken stream): no
                // reply can reach it, so its handlers go with the connection
                // now instead of running on (a queued evaluation, a call
                // forwarded for it) for a client that is gone.
                Some(Err(e)) => {
                    tracing::debug!(conn = self.handle.conn_id(), error = %e, "read failed");
                    self.on_end_of_input();
                    return Poll::Ready(Err(CloseReason::Failed(format!("read failed: {e}"))));
                }
            }
        }
        if handled > 0 {
            self.sliced_left = self.sliced_left.saturating_sub(handled);
            return Poll::Ready(Ok(()));
        }
        // Nothing to read for now: an idle connection keeps no reply buffer.
        self.work.release_reply_buffer();
        Poll::Pending
    }

    /// No more answers can arrive: fail our calls now rather than at their
    /// timeouts, and fire call tokens, but finish the handlers after an end
    /// of input (a client that half-closed still reads its replies).
    fn on_end_of_input(&mut self) {
        self.input_ended = true;
        self.handle.end_of_input();
    }

    /// Says the last words and closes the transport.
    async fn close(self, reason: CloseReason) -> CloseReason {
        let Driver { handle, work, sink_done, .. } = self;
        let shared = &handle.shared;
        let (config, outbox) = (&shared.config, &shared.outbox);
        shared.calls.fail_all();
        shared.closing.cancel();
        shared.tokens.end();
        // Dropping the work cancels handlers still running (they lost their peer).
        let Dispatch { mut drain, .. } = work;
        if !sink_done {
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
