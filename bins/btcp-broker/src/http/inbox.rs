//! An SSE client's POSTed messages on their way to its peer: a bounded
//! queue, like tokio's `mpsc::channel`, but one that holds memory only
//! while it holds messages. tokio's allocates its first block of 32 slots
//! and a cache-padded channel up front (1.8 KiB), which an idle SSE agent
//! then kept for its whole life (B8s).
//!
//! Bounded in frames and in bytes. A POST reserves [`Room`] for its body
//! before reading it, so the bodies of POSTs waiting for a busy peer are
//! counted too: counting queued frames alone let 400 waiting 4 MB POSTs
//! hold 1.5 GB for a client that never read its stream. The bytes come
//! back when the peer's reader takes the frame (the engine's own backlog
//! bounds it from there), or when a POST gives up.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use rpc_core::codec::Frame;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A queue of at most `capacity` frames and `budget` bytes (reserved,
/// waiting or queued).
pub fn channel(capacity: usize, budget: usize) -> (InboxSender, InboxReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            reserved: 0,
            reader: None,
            senders: 1,
            receiver_gone: false,
        }),
        room: Notify::new(),
        capacity,
        budget,
    });
    (InboxSender { shared: shared.clone() }, InboxReceiver { shared })
}

struct Shared {
    state: Mutex<State>,
    /// Woken when a frame is taken, bytes are given back or the receiver goes.
    room: Notify,
    capacity: usize,
    budget: usize,
}

struct State {
    /// Frames and the bytes reserved for each.
    queue: VecDeque<(Frame, usize)>,
    /// Bytes reserved: by POSTs still reading or waiting, and queued frames.
    reserved: usize,
    reader: Option<Waker>,
    senders: usize,
    receiver_gone: bool,
}

/// Why a frame was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// The peer is gone.
    Closed,
    /// The queue stayed full until the deadline.
    Timeout,
}

pub struct InboxSender {
    shared: Arc<Shared>,
}

impl Clone for InboxSender {
    fn clone(&self) -> Self {
        self.shared.state.lock().senders += 1;
        InboxSender { shared: self.shared.clone() }
    }
}

impl Drop for InboxSender {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.senders -= 1;
        if state.senders == 0
            && let Some(reader) = state.reader.take()
        {
            reader.wake();
        }
    }
}

/// Bytes of the budget held for one body: given back when dropped, or
/// passed on to the queue with the frame.
pub struct Room {
    shared: Arc<Shared>,
    bytes: usize,
}

impl Room {
    /// Gives back what the body turned out not to need.
    pub fn shrink_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            self.shared.give_back(self.bytes - bytes);
            self.bytes = bytes;
        }
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        self.shared.give_back(self.bytes);
    }
}

impl Shared {
    fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            self.state.lock().reserved -= bytes;
            self.room.notify_waiters();
        }
    }

    /// Waits until `ready` finds room under the lock (it acts on it and
    /// returns `Some`), the receiver goes, or `deadline` passes.
    async fn wait_for<T>(
        &self,
        deadline: Instant,
        mut ready: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<T, SendError> {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before looking, so that room made in between wakes it.
            room.as_mut().enable();
            {
                let mut state = self.state.lock();
                if state.receiver_gone {
                    return Err(SendError::Closed);
                }
                if let Some(done) = ready(&mut state) {
                    return Ok(done);
                }
            }
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                return Err(SendError::Timeout);
            }
        }
    }
}

impl InboxSender {
    /// Reserves `bytes` (at most the budget) for a body about to be read,
    /// waiting until `deadline` for them.
    pub async fn reserve(&self, bytes: usize, deadline: Instant) -> Result<Room, SendError> {
        let shared = &self.shared;
        let bytes = bytes.min(shared.budget);
        shared
            .wait_for(deadline, |state| (state.reserved + bytes <= shared.budget).then(|| state.reserved += bytes))
            .await?;
        Ok(Room { shared: shared.clone(), bytes })
    }

    /// Queues `frame` in the room reserved for it, waiting until `deadline`
    /// for a free place.
    pub async fn send(&self, frame: Frame, mut room: Room, deadline: Instant) -> Result<(), SendError> {
        let shared = &self.shared;
        let mut frame = Some(frame);
        shared
            .wait_for(deadline, |state| {
                if state.queue.len() >= shared.capacity {
                    return None;
                }
                // The room's bytes now belong to the queued frame.
                state.queue.push_back((frame.take()?, std::mem::take(&mut room.bytes)));
                if let Some(reader) = state.reader.take() {
                    reader.wake();
                }
                Some(())
            })
            .await
    }
}

pub struct InboxReceiver {
    shared: Arc<Shared>,
}

impl InboxReceiver {
    /// The next frame; `None` once every sender is gone and the queue empty.
    /// The frame's bytes go back to the budget: the peer has it now.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        let mut state = self.shared.state.lock();
        if let Some((frame, bytes)) = state.queue.pop_front() {
            state.reserved -= bytes;
            if state.queue.is_empty() {
                // Idle again: hold nothing.
                state.queue = VecDeque::new();
            }
            drop(state);
            self.shared.room.notify_waiters();
            return Poll::Ready(Some(frame));
        }
        if state.senders == 0 {
            return Poll::Ready(None);
        }
        if !state.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            state.reader = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for InboxReceiver {
    fn drop(&mut self) {
        {
            let mut state = self.shared.state.lock();
            state.receiver_gone = true;
            let queued: usize = state.queue.iter().map(|(_, bytes)| bytes).sum();
            state.reserved -= queued;
            state.queue = VecDeque::new();
        }
        self.shared.room.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::future::poll_fn;
    use std::time::Duration;

    fn frame(n: u8) -> Frame {
        Frame::Message(Bytes::from(vec![n]))
    }

    /// What a POST does: room for its one byte, then a place in the queue.
    async fn send_timeout(tx: &InboxSender, frame: Frame, wait: Duration) -> Result<(), SendError> {
        let deadline = Instant::now() + wait;
        let room = tx.reserve(1, deadline).await?;
        tx.send(frame, room, deadline).await
    }

    fn reserved(tx: &InboxSender) -> usize {
        tx.shared.state.lock().reserved
    }

    #[tokio::test]
    async fn frames_arrive_in_order_and_the_end_comes_with_the_last_sender() {
        let (tx, mut rx) = channel(4, 100);
        let tx2 = tx.clone();
        send_timeout(&tx, frame(1), Duration::ZERO).await.unwrap();
        send_timeout(&tx2, frame(2), Duration::ZERO).await.unwrap();
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(1)));
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(2)));
        drop(tx);
        let reader = tokio::spawn(async move { poll_fn(|cx| rx.poll_recv(cx)).await });
        tokio::task::yield_now().await;
        drop(tx2);
        assert_eq!(reader.await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_makes_the_sender_wait_then_time_out_or_get_in() {
        let (tx, mut rx) = channel(2, 100);
        send_timeout(&tx, frame(1), Duration::ZERO).await.unwrap();
        send_timeout(&tx, frame(2), Duration::ZERO).await.unwrap();
        assert_eq!(send_timeout(&tx, frame(3), Duration::from_secs(1)).await, Err(SendError::Timeout));
        assert_eq!(reserved(&tx), 2, "the refused frame's byte came back");
        let waiting = {
            let tx = tx.clone();
            tokio::spawn(async move { send_timeout(&tx, frame(3), Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(1)));
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(2)));
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(3)));
        let blocked = {
            let tx = tx.clone();
            send_timeout(&tx, frame(4), Duration::ZERO).await.unwrap();
            send_timeout(&tx, frame(5), Duration::ZERO).await.unwrap();
            tokio::spawn(async move { send_timeout(&tx, frame(6), Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(rx);
        assert_eq!(blocked.await.unwrap(), Err(SendError::Closed));
        assert_eq!(send_timeout(&tx, frame(7), Duration::ZERO).await, Err(SendError::Closed));
        assert_eq!(reserved(&tx), 0, "nothing is held once the receiver is gone");
    }

    /// Bodies waiting for a place count against the budget as queued ones
    /// do: a POST finding no room for its bytes waits (or times out) before
    /// it reads a byte, and bytes come back as the reader takes frames.
    #[tokio::test(start_paused = true)]
    async fn bytes_are_reserved_before_reading_and_come_back_when_taken() {
        let (tx, mut rx) = channel(64, 10);
        let soon = || Instant::now() + Duration::from_secs(1);
        let mut first = tx.reserve(6, soon()).await.unwrap();
        let second = tx.reserve(4, soon()).await.unwrap();
        assert_eq!(tx.reserve(1, soon()).await.err(), Some(SendError::Timeout), "full: 6 + 4");
        first.shrink_to(3);
        assert_eq!(reserved(&tx), 7, "a body shorter than reserved gives the rest back");
        let third = tx.reserve(3, soon()).await.unwrap();
        tx.send(frame(1), first, soon()).await.unwrap();
        tx.send(frame(2), second, soon()).await.unwrap();
        assert_eq!(reserved(&tx), 10, "queued frames keep their bytes");
        drop(third);
        let waiting = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.reserve(6, Instant::now() + Duration::from_secs(10)).await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "6 bytes more do not fit beside the 7 queued");
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(1)));
        assert_eq!(waiting.await.unwrap(), Ok(()), "the reader took 3: room for 6");
        assert_eq!(reserved(&tx), 4);
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(2)));
        let all = tx.reserve(50, soon()).await.map(|room| room.bytes);
        assert_eq!(all.ok(), Some(10), "more than the budget is the whole budget");
    }
}
