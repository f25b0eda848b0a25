//! The outbox: every message a connection writes goes through one bounded
//! queue, which the connection's own task drains into the transport.
//!
//! Why the connection task writes, rather than a writer task of its own: a
//! reply then goes out from the task that produced it, with no other task to
//! wake. At one request in flight that hop was most of the round trip on top
//! of the network's own (performance.md: "avoid a channel hop per message on
//! the fast path"). What a writer task gave is kept: one writer at a time,
//! messages written in the order they were queued, flushed once per batch
//! rather than once per message, a bounded queue whose producers wait for room,
//! and a peer that stops reading is cut off after the stall timeout instead of
//! growing memory. Producers on other tasks (fan-out, a handler of another
//! connection forwarding a call) queue and wake the connection task.

use std::collections::VecDeque;
use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::codec::{FrameSink, Outbound};

/// The queue shared by every producer of one connection.
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// Items queued and not yet taken by the connection task (read without the lock).
    len: AtomicUsize,
    capacity: usize,
    /// The connection task, woken to write what other tasks queued.
    writer: AtomicWaker,
    /// Producers waiting for room.
    room: Notify,
}

struct Queue {
    items: VecDeque<Outbound>,
    closed: bool,
}

/// Nothing more can be queued: the connection is closing or gone.
#[derive(Debug)]
pub(crate) enum PushError {
    Closed,
    /// No room for as long as the stall timeout: the other side is not reading.
    Stalled,
}

impl Outbox {
    pub fn new(capacity: usize) -> Self {
        Outbox {
            queue: Mutex::new(Queue { items: VecDeque::new(), closed: false }),
            len: AtomicUsize::new(0),
            capacity: capacity.max(1),
            writer: AtomicWaker::new(),
            room: Notify::new(),
        }
    }

    /// Queues an item from any task, waiting up to `stall` for room.
    pub async fn push(&self, item: Outbound, stall: Duration) -> Result<(), PushError> {
        let mut item = match self.try_push(item) {
            Ok(()) => return Ok(()),
            Err(Some(item)) => item,
            Err(None) => return Err(PushError::Closed),
        };
        let deadline = Instant::now() + stall;
        loop {
            // Registered before the check below, so room made in between wakes us.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            item = match self.try_push(item) {
                Ok(()) => return Ok(()),
                Err(Some(item)) => item,
                Err(None) => return Err(PushError::Closed),
            };
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                return Err(PushError::Stalled);
            }
        }
    }

    /// Queues an item if there is room. `Err(Some(item))`: full; `Err(None)`: closed.
    fn try_push(&self, item: Outbound) -> Result<(), Option<Outbound>> {
        {
            let mut queue = self.queue.lock().unwrap();
            if queue.closed {
                return Err(None);
            }
            if queue.items.len() >= self.capacity {
                return Err(Some(item));
            }
            queue.items.push_back(item);
            self.len.store(queue.items.len(), Ordering::Relaxed);
        }
        self.writer.wake();
        Ok(())
    }

    /// Queues an item from the connection task itself, or an item that must go
    /// out however full the queue is (a close). Never waits: the connection
    /// stops reading requests while the queue is over capacity instead, which
    /// bounds what it adds. Does not wake the connection task: it is either
    /// the caller or is woken by `close`.
    pub fn push_now(&self, item: Outbound) -> Result<(), PushError> {
        let mut queue = self.queue.lock().unwrap();
        if queue.closed {
            return Err(PushError::Closed);
        }
        queue.items.push_back(item);
        self.len.store(queue.items.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Whether the queue holds as much as it should (the reader pauses).
    pub fn is_full(&self) -> bool {
        self.len.load(Ordering::Relaxed) >= self.capacity
    }

    /// Refuses further items and releases every producer waiting for room.
    pub fn close(&self) {
        self.queue.lock().unwrap().closed = true;
        self.room.notify_waiters();
        self.writer.wake();
    }

    /// Moves every queued item into `into` (which must be empty), keeping both
    /// buffers' capacity: the two ping-pong instead of reallocating.
    fn take_all(&self, into: &mut VecDeque<Outbound>) {
        let mut queue = self.queue.lock().unwrap();
        std::mem::swap(&mut queue.items, into);
        self.len.store(0, Ordering::Relaxed);
        drop(queue);
        if !into.is_empty() {
            self.room.notify_waiters();
        }
    }
}

/// What a turn of draining achieved.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Something was written and flushed; there may be more.
    Progress,
    /// A close went out: the transport is shut.
    Closed,
}

/// The connection task's side of the outbox: owns the transport's write half.
pub(crate) struct Drain {
    sink: FrameSink,
    /// Items taken from the queue and not yet accepted by the sink.
    batch: VecDeque<Outbound>,
    unflushed: bool,
    /// A close was handed to the sink: flush it, shut the sink, write nothing more.
    closing: bool,
    /// Since when the sink has refused to take or flush data.
    blocked_since: Option<Instant>,
}

impl Drain {
    pub fn new(sink: FrameSink) -> Self {
        Drain { sink, batch: VecDeque::new(), unflushed: false, closing: false, blocked_since: None }
    }

    /// When the sink started refusing data, for the stall timeout.
    pub fn blocked_since(&self) -> Option<Instant> {
        self.blocked_since
    }

    /// Writes what is queued and flushes it. Pending when there is nothing to
    /// write (the waker is then registered for new items) or when the sink
    /// cannot take more (registered for writability).
    pub fn poll_drain(&mut self, outbox: &Outbox, cx: &mut Context<'_>) -> Poll<io::Result<Drained>> {
        outbox.writer.register(cx.waker());
        let mut progressed = false;
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
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return self.blocked(),
                }
                self.closing = matches!(item, Outbound::Close { .. });
                let item = self.batch.pop_front().expect("front() was Some");
                self.sink.as_mut().start_send(item)?;
                self.unflushed = true;
                progressed = true;
                if self.closing {
                    self.batch.clear();
                    break;
                }
            }
        }
        if self.unflushed {
            match self.sink.as_mut().poll_flush(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.blocked(),
            }
        }
        self.blocked_since = None;
        if self.closing {
            return match self.sink.as_mut().poll_close(cx) {
                Poll::Ready(_) => Poll::Ready(Ok(Drained::Closed)),
                Poll::Pending => self.blocked(),
            };
        }
        if progressed { Poll::Ready(Ok(Drained::Progress)) } else { Poll::Pending }
    }

    fn blocked(&mut self) -> Poll<io::Result<Drained>> {
        self.blocked_since.get_or_insert_with(Instant::now);
        Poll::Pending
    }

    /// Drains until a close has gone out, for at most `limit` (a peer that is
    /// not reading does not hold the connection open).
    pub async fn finish(&mut self, outbox: &Outbox, limit: Duration) {
        let done = std::future::poll_fn(|cx| {
            loop {
                match self.poll_drain(outbox, cx) {
                    Poll::Ready(Ok(Drained::Progress)) => continue,
                    Poll::Ready(Ok(Drained::Closed) | Err(_)) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }
        });
        let _ = tokio::time::timeout(limit, done).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Kind;

    fn message(n: u32) -> Outbound {
        Outbound::message(Kind::Notification, format!("{n}"))
    }

    #[tokio::test]
    async fn items_are_written_in_queue_order_and_flushed_once_per_batch() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let sink = futures_util::sink::unfold(tx, |tx, item: Outbound| async move {
            tx.send(item).await.map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
            Ok::<_, io::Error>(tx)
        });
        let outbox = Outbox::new(8);
        let mut drain = Drain::new(Box::pin(sink));
        for n in 0..5 {
            outbox.push(message(n), Duration::from_secs(1)).await.unwrap();
        }
        outbox.push_now(Outbound::Close { code: 1000, reason: String::new() }).unwrap();
        outbox.push_now(message(99)).unwrap();
        drain.finish(&outbox, Duration::from_secs(1)).await;
        let mut got = Vec::new();
        while let Ok(item) = rx.try_recv() {
            got.push(item);
        }
        assert_eq!(got.len(), 6, "five messages and the close, nothing after it: {got:?}");
        assert_eq!(got[..5], (0..5).map(message).collect::<Vec<_>>()[..]);
    }

    #[tokio::test]
    async fn a_full_queue_makes_producers_wait_then_gives_up_after_the_stall_timeout() {
        let outbox = Outbox::new(2);
        outbox.push(message(1), Duration::from_secs(1)).await.unwrap();
        outbox.push(message(2), Duration::from_secs(1)).await.unwrap();
        assert!(outbox.is_full());
        let started = std::time::Instant::now();
        let stalled = outbox.push(message(3), Duration::from_millis(100)).await;
        assert!(matches!(stalled, Err(PushError::Stalled)));
        assert!(started.elapsed() >= Duration::from_millis(90));
        // Room made by the writer lets a waiting producer in.
        let outbox = std::sync::Arc::new(outbox);
        let waiting = {
            let outbox = outbox.clone();
            tokio::spawn(async move { outbox.push(message(4), Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        outbox.take_all(&mut VecDeque::new());
        assert!(waiting.await.unwrap().is_ok());
        outbox.close();
        assert!(matches!(outbox.push(message(5), Duration::from_secs(1)).await, Err(PushError::Closed)));
    }
}
