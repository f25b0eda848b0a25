//! The outbox: every message a connection writes goes through one bounded
//! queue, which the connection's own task drains into the transport.
//!
//! Why the connection task writes, rather than a writer task of its own: a
//! reply then goes out from the task that produced it, with no other task to
//! wake. At one request in flight that hop was most of the round trip on top
//! of the network's own: a channel hop per message on the fast path is what
//! the engine avoids. What a writer task gave is kept: one writer at a time,
//! messages written in the order they were queued, flushed once per batch
//! rather than once per message.
//!
//! The bound is in bytes as well as in messages: a peer that
//! pipelines requests with 1 MiB replies and never reads must not hold a
//! thousand of them. Producers on other tasks (fan-out, a handler of another
//! connection forwarding a call) wait for room; the connection task itself
//! never waits (it stops *starting* requests instead, see `peer.rs`), so the
//! replies of handlers already running may go past the budget by their own
//! size. The queue also counts the replies it owes, because only owed replies
//! make a stalled writer fatal: a subscriber that pauses loses events, not its
//! connection (§5).

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::codec::{FrameSink, Outbound};
use crate::message::Kind;

/// The queue shared by every producer of one connection.
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// Items queued and not yet taken by the connection task (read without the lock).
    len: AtomicUsize,
    /// Two counters in one word, so a queued reply costs one atomic update:
    /// the bytes of the messages queued and not yet handed to the transport
    /// (low bits), and the responses queued or handed to the transport and
    /// not yet flushed (from `OWED_SHIFT` up).
    load: AtomicU64,
    /// Producers waiting for room (spares the wake-up when there are none).
    waiting: AtomicUsize,
    capacity: usize,
    budget: usize,
    /// The connection task, woken to write what other tasks queued.
    writer: AtomicWaker,
    /// Producers waiting for room.
    room: Notify,
}

struct Queue {
    items: VecDeque<Outbound>,
    closed: bool,
}

/// Why an item could not be queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PushError {
    /// The connection is closing or gone.
    Closed,
    /// No room before the caller's deadline.
    TimedOut,
}

fn size_of(item: &Outbound) -> usize {
    match item {
        Outbound::Message { json, .. } => json.len(),
        Outbound::Ping | Outbound::Close { .. } => 0,
    }
}

fn is_response(item: &Outbound) -> bool {
    matches!(item, Outbound::Message { kind: Kind::Response, .. })
}

/// Where the owed-reply count starts in `Outbox::load` (bytes below: 1 TiB).
const OWED_SHIFT: u32 = 40;
const BYTES_MASK: u64 = (1 << OWED_SHIFT) - 1;

/// What an item adds to `Outbox::load`.
fn load_of(item: &Outbound) -> u64 {
    size_of(item) as u64 + (u64::from(is_response(item)) << OWED_SHIFT)
}

impl Outbox {
    /// A queue of at most `capacity` messages and `budget` bytes (either full
    /// means full).
    pub fn new(capacity: usize, budget: usize) -> Self {
        Outbox {
            queue: Mutex::new(Queue { items: VecDeque::new(), closed: false }),
            len: AtomicUsize::new(0),
            load: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            capacity: capacity.max(1),
            budget: budget.max(1),
            writer: AtomicWaker::new(),
            room: Notify::new(),
        }
    }

    /// Queues an item from any task, waiting for room until `deadline`
    /// (`None`: as long as the connection lives).
    pub async fn push(&self, item: Outbound, deadline: Option<Instant>) -> Result<(), PushError> {
        match self.try_push(item) {
            Ok(()) => Ok(()),
            // Boxed: waiting holds a timer and a waiter, and every call's
            // future (each boxed by the engine) would otherwise carry their
            // size for a wait that few of them ever do.
            Err(Some(item)) => Box::pin(self.push_when_room(item, deadline)).await,
            Err(None) => Err(PushError::Closed),
        }
    }

    /// Waits for room as a producer on another task does: `take` is tried
    /// until it takes the room (`Some`), the queue closes or `deadline`
    /// passes (`None`: as long as the connection lives).
    async fn wait_for_room<T>(
        &self,
        deadline: Option<Instant>,
        mut take: impl FnMut() -> Result<Option<T>, PushError>,
    ) -> Result<T, PushError> {
        // Counted before the check below (and the drain counts room before it
        // looks at this), so room made in between is never missed: one side
        // always sees the other's write (both are SeqCst).
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _counted = WaitingProducer(&self.waiting);
        loop {
            // Registered before the check below, so room made in between wakes us.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if let Some(taken) = take()? {
                return Ok(taken);
            }
            match deadline {
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline, room).await.is_err() {
                        return Err(PushError::TimedOut);
                    }
                }
                None => room.await,
            }
        }
    }

    /// `item` queued once there is room (see [`push`](Self::push)).
    async fn push_when_room(&self, item: Outbound, deadline: Option<Instant>) -> Result<(), PushError> {
        let mut item = Some(item);
        self.wait_for_room(deadline, || match self.try_push(item.take().expect("put back while waiting")) {
            Ok(()) => Ok(Some(())),
            Err(Some(back)) => {
                item = Some(back);
                Ok(None)
            }
            Err(None) => Err(PushError::Closed),
        })
        .await
    }

    /// Waits until the queue holds at most `bytes` (at once when it does), or
    /// fails once it closed: for a producer that should not fill the whole
    /// budget, a subscriber's pump, whose events wait in a shared ring.
    pub async fn wait_until_at_most(&self, bytes: usize) -> Result<(), PushError> {
        if self.bytes() <= bytes {
            return Ok(());
        }
        let low = || {
            if self.queue.lock().closed {
                return Err(PushError::Closed);
            }
            Ok((self.bytes() <= bytes).then_some(()))
        };
        Box::pin(self.wait_for_room(None, low)).await
    }

    /// Room for `bytes` of a reply a handler is about to make (at most the
    /// budget, so one of any size fits an empty queue), counted as queued
    /// until [`unreserve`](Self::unreserve). Waits while the queue is full,
    /// as a producer on another task does. Returns the bytes held.
    pub async fn reserve(&self, bytes: usize) -> Result<usize, PushError> {
        let bytes = bytes.min(self.budget);
        self.wait_for_room(None, || Ok(self.try_reserve(bytes)?.then_some(bytes))).await
    }

    fn try_reserve(&self, bytes: usize) -> Result<bool, PushError> {
        let queue = self.queue.lock();
        if queue.closed {
            return Err(PushError::Closed);
        }
        if self.is_full() {
            return Ok(false);
        }
        self.load.fetch_add(bytes as u64, Ordering::SeqCst);
        Ok(true)
    }

    /// Gives back what [`reserve`](Self::reserve) held: waiting producers
    /// may retry, and the connection task may start requests again.
    pub fn unreserve(&self, bytes: usize) {
        self.release(bytes as u64, 0);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.room.notify_waiters();
        }
        self.writer.wake();
    }

    /// Queues an item if there is room. `Err(Some(item))`: full; `Err(None)`: closed.
    fn try_push(&self, item: Outbound) -> Result<(), Option<Outbound>> {
        {
            let mut queue = self.queue.lock();
            if queue.closed {
                return Err(None);
            }
            if self.is_full() {
                return Err(Some(item));
            }
            self.account(&item);
            queue.items.push_back(item);
            self.len.store(queue.items.len(), Ordering::Relaxed);
        }
        self.writer.wake();
        Ok(())
    }

    /// Queues an item from the connection task itself, or an item that must go
    /// out however full the queue is (a close). Never waits: the connection
    /// stops starting requests while the queue is full instead, which bounds
    /// what it adds. Does not wake the connection task: it is either the
    /// caller or is woken by `close`.
    pub fn push_now(&self, item: Outbound) -> Result<(), PushError> {
        let mut queue = self.queue.lock();
        if queue.closed {
            return Err(PushError::Closed);
        }
        self.account(&item);
        queue.items.push_back(item);
        self.len.store(queue.items.len(), Ordering::Relaxed);
        Ok(())
    }

    fn account(&self, item: &Outbound) {
        self.load.fetch_add(load_of(item), Ordering::Relaxed);
    }

    /// Whether the queue holds as much as it should (in messages or in bytes).
    pub fn is_full(&self) -> bool {
        self.len.load(Ordering::Relaxed) >= self.capacity || self.bytes() >= self.budget
    }

    /// Bytes queued and not yet handed to the transport.
    pub fn bytes(&self) -> usize {
        (self.load.load(Ordering::SeqCst) & BYTES_MASK) as usize
    }

    /// Responses queued and not yet flushed: the replies this side owes.
    pub fn owed(&self) -> usize {
        (self.load.load(Ordering::Relaxed) >> OWED_SHIFT) as usize
    }

    /// Takes `bytes` and `owed` replies off the count (handed over, flushed,
    /// or dropped after a close).
    fn release(&self, bytes: u64, owed: u64) {
        if bytes | owed != 0 {
            self.load.fetch_sub(bytes + (owed << OWED_SHIFT), Ordering::SeqCst);
        }
    }

    /// Registers the connection task's waker (as `Drain::poll_drain` does).
    pub fn register_connection(&self, waker: &std::task::Waker) {
        self.writer.register(waker);
    }

    /// Wakes the connection task, to look at its conditions again.
    pub fn wake_connection(&self) {
        self.writer.wake();
    }

    /// Refuses further items and releases every producer waiting for room.
    pub fn close(&self) {
        self.queue.lock().closed = true;
        self.room.notify_waiters();
        self.writer.wake();
    }

    /// Moves every queued item into `into` (which must be empty) by swapping
    /// the two buffers, so a busy connection's ping-pong instead of
    /// reallocating. With nothing queued nothing moves: the drain then holds
    /// the last buffer it emptied, and frees it (see `Drain::write_batch`).
    /// The bytes stay counted until each item is handed to the transport.
    fn take_all(&self, into: &mut VecDeque<Outbound>) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut queue = self.queue.lock();
        std::mem::swap(&mut queue.items, into);
        self.len.store(0, Ordering::Relaxed);
    }
}

/// Keeps `Outbox::waiting` right however a waiting push ends.
struct WaitingProducer<'a>(&'a AtomicUsize);

impl Drop for WaitingProducer<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a turn of draining achieved.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Something was written and flushed; there may be more.
    Progress,
    /// A close went out: the transport is shut.
    Closed,
    /// Writes made no progress for the stall limit while replies were owed:
    /// the other side is not reading.
    Stalled,
}

/// The connection task's side of the outbox: owns the transport's write half.
pub(crate) struct Drain {
    sink: FrameSink,
    /// Items taken from the queue and not yet accepted by the sink.
    batch: VecDeque<Outbound>,
    unflushed: bool,
    /// Responses handed to the sink since the last flush.
    unflushed_responses: u64,
    /// Of those, the ones handed over by [`Drain::write_now`], which the
    /// outbox never counted.
    unflushed_direct: u64,
    /// Bytes handed to the sink in this turn, taken off the count at its end
    /// (one atomic update a turn rather than one a message).
    handed_bytes: u64,
    /// A close was handed to the sink: flush it, shut the sink, write nothing more.
    closing: bool,
    /// What the sink held unwritten when writes last blocked (see
    /// `FrameWrite::unwritten`), saturated: less now is progress. A `u32`
    /// beside the flags, where it takes no room of its own.
    unwritten: u32,
    /// How long writes may make no progress while replies are owed.
    stall_limit: Duration,
    /// Armed while the sink refuses data and replies are owed; fires at the
    /// stall limit. It lives here, polled with every drain, so the rule holds
    /// whatever else the connection task is doing or waiting for.
    stall: Option<Pin<Box<Sleep>>>,
    /// The sink failed when [`Drain::write_now`] used it: the error, until
    /// the next drain reports it, and from then on that it failed (a sink
    /// is not polled after it failed).
    broken: Option<io::Error>,
    failed: bool,
}

impl Drain {
    pub fn new(sink: FrameSink, stall_limit: Duration) -> Self {
        Drain {
            sink,
            batch: VecDeque::new(),
            unflushed: false,
            unflushed_responses: 0,
            unflushed_direct: 0,
            handed_bytes: 0,
            closing: false,
            unwritten: 0,
            stall_limit,
            stall: None,
            broken: None,
            failed: false,
        }
    }

    /// Hands an item from the connection task itself straight to the sink,
    /// when nothing is queued or being written ahead of it: it then goes out
    /// in the order the queue would have given it, without the queue's lock
    /// and accounting (a reply to a pipelined request costs no more than its
    /// encoding). `Err(item)` when it must be queued instead: something is
    /// ahead of it, a close went out, or the sink is full (the queue then
    /// holds it, within the outbox's limits). The next [`Drain::poll_drain`]
    /// flushes it.
    pub fn write_now(&mut self, outbox: &Outbox, item: Outbound) -> Result<(), Outbound> {
        if !self.may_write_now(outbox) {
            return Err(item);
        }
        let response = is_response(&item);
        let sent = self.sink.as_mut().start_send(item);
        self.handed_over(sent, response);
        Ok(())
    }

    /// [`Drain::write_now`] of a response whose JSON is borrowed: a framing
    /// into a buffer of its own copies it there and allocates nothing.
    /// `false` when it must be queued instead (as an owned item).
    pub fn write_json_now(&mut self, outbox: &Outbox, kind: Kind, json: &[u8]) -> bool {
        if !self.may_write_now(outbox) {
            return false;
        }
        let sent = self.sink.as_mut().start_send_json(kind, json);
        self.handed_over(sent, kind == Kind::Response);
        true
    }

    /// Whether an item may go to the sink now, ahead of the queue's turn.
    fn may_write_now(&mut self, outbox: &Outbox) -> bool {
        if self.closing || self.failed || !self.batch.is_empty() || outbox.len.load(Ordering::Relaxed) != 0 {
            return false;
        }
        // A sink that is not ready (its buffer over the limit and the socket
        // full) registers this no-op waker; the item is then queued, and the
        // connection task's next poll of the drain registers its own.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.sink.as_mut().poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => true,
            Poll::Pending => false,
            Poll::Ready(Err(e)) => {
                // A sink that failed must not be polled again (some panic):
                // the next drain reports the failure instead.
                self.fail(e);
                false
            }
        }
    }

    fn handed_over(&mut self, sent: io::Result<()>, response: bool) {
        if let Err(e) = sent {
            self.fail(e);
        }
        self.unflushed = true;
        self.unflushed_direct += u64::from(response);
    }

    fn fail(&mut self, e: io::Error) {
        self.failed = true;
        self.broken = Some(e);
    }

    /// Replies handed over by [`Drain::write_now`] and not flushed yet: owed,
    /// like the outbox's own, for the stall timeout.
    #[cfg(test)]
    fn owed_direct(&self) -> u64 {
        self.unflushed_direct
    }

    /// Writes what is queued and flushes it. Pending when there is nothing to
    /// write (the waker is then registered for new items) or when the sink
    /// cannot take more (registered for writability, and, with replies owed,
    /// for the stall limit: then `Stalled` when it passes).
    pub fn poll_drain(&mut self, outbox: &Outbox, cx: &mut Context<'_>) -> Poll<io::Result<Drained>> {
        outbox.writer.register(cx.waker());
        if self.failed {
            return Poll::Ready(Err(self.broken.take().unwrap_or_else(|| io::ErrorKind::BrokenPipe.into())));
        }
        let mut progressed = false;
        let result = self.write_batch(outbox, cx, &mut progressed);
        outbox.release(std::mem::take(&mut self.handed_bytes), 0);
        if progressed {
            // A slow reader that takes some is not stalled: the clock starts
            // again the next time the sink refuses.
            self.stall = None;
            if outbox.waiting.load(Ordering::SeqCst) > 0 {
                // Room was made (in messages or bytes): let waiting producers retry.
                outbox.room.notify_waiters();
            }
        }
        match result {
            Some(poll) => poll,
            None if progressed => Poll::Ready(Ok(Drained::Progress)),
            None => Poll::Pending,
        }
    }

    /// Hands queued items to the sink and flushes; `None` when all is written
    /// and nothing more is queued.
    fn write_batch(
        &mut self,
        outbox: &Outbox,
        cx: &mut Context<'_>,
        progressed: &mut bool,
    ) -> Option<Poll<io::Result<Drained>>> {
        while !self.closing {
            if self.batch.is_empty() {
                outbox.take_all(&mut self.batch);
                if self.batch.is_empty() {
                    break;
                }
            }
            while let Some(item) = self.batch.front() {
                match self.sink.as_mut().poll_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Some(Poll::Ready(Err(e))),
                    Poll::Pending => {
                        if *progressed {
                            // The connection task must look again (the reader may
                            // read now that the outbox has room).
                            return Some(Poll::Ready(Ok(Drained::Progress)));
                        }
                        return Some(self.blocked(outbox, cx));
                    }
                }
                self.closing = matches!(item, Outbound::Close { .. });
                let item = self.batch.pop_front().expect("front() was Some");
                self.handed_bytes += size_of(&item) as u64;
                self.unflushed_responses += u64::from(is_response(&item));
                if let Err(e) = self.sink.as_mut().start_send(item) {
                    return Some(Poll::Ready(Err(e)));
                }
                self.unflushed = true;
                *progressed = true;
                if self.closing {
                    self.forget_batch(outbox);
                    break;
                }
            }
        }
        if self.unflushed {
            match self.sink.as_mut().poll_flush(cx) {
                Poll::Ready(Ok(())) => {
                    self.unflushed = false;
                    self.unflushed_direct = 0;
                    outbox.release(0, std::mem::take(&mut self.unflushed_responses));
                }
                Poll::Ready(Err(e)) => return Some(Poll::Ready(Err(e))),
                Poll::Pending if *progressed => return Some(Poll::Ready(Ok(Drained::Progress))),
                Poll::Pending => return Some(self.blocked(outbox, cx)),
            }
        }
        self.stall = None;
        if self.closing {
            return Some(match self.sink.as_mut().poll_close(cx) {
                Poll::Ready(_) => Poll::Ready(Ok(Drained::Closed)),
                Poll::Pending => self.blocked(outbox, cx),
            });
        }
        // All written and nothing queued: the batch's buffer goes back to
        // the allocator rather than stay with an idle connection (most of
        // them, in a daemon holding thousands). A busy one pays an
        // allocation a turn for items other tasks queued; its own replies
        // never come this way (`write_now`).
        if self.batch.capacity() != 0 {
            self.batch = VecDeque::new();
        }
        None
    }

    /// Items after a close are never written: stop counting them.
    fn forget_batch(&mut self, outbox: &Outbox) {
        let (bytes, owed) = self
            .batch
            .drain(..)
            .fold((0, 0), |(bytes, owed), item| (bytes + size_of(&item) as u64, owed + u64::from(is_response(&item))));
        outbox.release(bytes, owed);
    }

    /// The sink refuses data and nothing was written this turn. With replies
    /// owed the stall clock runs (from the first such turn since the last
    /// progress); without, nothing is lost by waiting: a subscriber that
    /// pauses loses events, never its connection (§5).
    fn blocked(&mut self, outbox: &Outbox, cx: &mut Context<'_>) -> Poll<io::Result<Drained>> {
        if outbox.owed() == 0 && self.unflushed_direct == 0 {
            self.stall = None;
            return Poll::Pending;
        }
        let limit = self.stall_limit;
        // Part of a large message went out since writes last blocked: the
        // peer reads, slowly. The clock starts again.
        let unwritten = u32::try_from(self.sink.unwritten()).unwrap_or(u32::MAX);
        if unwritten < self.unwritten
            && let Some(timer) = &mut self.stall
        {
            timer.as_mut().reset(tokio::time::Instant::now() + limit);
        }
        self.unwritten = unwritten;
        let timer = self.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Ok(Drained::Stalled)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Drains until a close has gone out, for at most `limit` (a peer that is
    /// not reading does not hold the connection open).
    pub async fn finish(&mut self, outbox: &Outbox, limit: Duration) {
        let done = std::future::poll_fn(|cx| {
            loop {
                match self.poll_drain(outbox, cx) {
                    Poll::Ready(Ok(Drained::Progress)) => continue,
                    Poll::Ready(Ok(Drained::Closed | Drained::Stalled) | Err(_)) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }
        });
        let _ = tokio::time::timeout(limit, done).await;
    }
}

#[cfg(test)]
mod tests;
