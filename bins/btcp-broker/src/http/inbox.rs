//! An SSE client's POSTed messages on their way to its peer: a bounded
//! queue, like tokio's `mpsc::channel`, but one that holds memory only
//! while it holds messages. tokio's allocates its first block of 32 slots
//! and a cache-padded channel up front (1.8 KiB), which an idle SSE agent
//! then kept for its whole life (B8s).

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use rpc_core::codec::Frame;
use tokio::sync::Notify;

/// A queue of at most `capacity` frames.
pub fn channel(capacity: usize) -> (InboxSender, InboxReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State { queue: VecDeque::new(), reader: None, senders: 1, receiver_gone: false }),
        room: Notify::new(),
        capacity,
    });
    (InboxSender { shared: shared.clone() }, InboxReceiver { shared })
}

struct Shared {
    state: Mutex<State>,
    /// Woken when a frame is taken or the receiver goes.
    room: Notify,
    capacity: usize,
}

struct State {
    queue: VecDeque<Frame>,
    reader: Option<Waker>,
    senders: usize,
    receiver_gone: bool,
}

/// Why a frame was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// The peer is gone.
    Closed,
    /// The queue stayed full for the whole wait.
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

impl InboxSender {
    /// Queues `frame`, waiting at most `wait` for room.
    pub async fn send_timeout(&self, frame: Frame, wait: Duration) -> Result<(), SendError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let room = self.shared.room.notified();
            tokio::pin!(room);
            // Registered before looking, so that room made in between wakes it.
            room.as_mut().enable();
            {
                let mut state = self.shared.state.lock();
                if state.receiver_gone {
                    return Err(SendError::Closed);
                }
                if state.queue.len() < self.shared.capacity {
                    state.queue.push_back(frame);
                    if let Some(reader) = state.reader.take() {
                        reader.wake();
                    }
                    return Ok(());
                }
            }
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                return Err(SendError::Timeout);
            }
        }
    }
}

pub struct InboxReceiver {
    shared: Arc<Shared>,
}

impl InboxReceiver {
    /// The next frame; `None` once every sender is gone and the queue empty.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        let mut state = self.shared.state.lock();
        if let Some(frame) = state.queue.pop_front() {
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

    fn frame(n: u8) -> Frame {
        Frame::Message(Bytes::from(vec![n]))
    }

    #[tokio::test]
    async fn frames_arrive_in_order_and_the_end_comes_with_the_last_sender() {
        let (tx, mut rx) = channel(4);
        let tx2 = tx.clone();
        tx.send_timeout(frame(1), Duration::ZERO).await.unwrap();
        tx2.send_timeout(frame(2), Duration::ZERO).await.unwrap();
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
        let (tx, mut rx) = channel(2);
        tx.send_timeout(frame(1), Duration::ZERO).await.unwrap();
        tx.send_timeout(frame(2), Duration::ZERO).await.unwrap();
        assert_eq!(tx.send_timeout(frame(3), Duration::from_secs(1)).await, Err(SendError::Timeout));
        let waiting = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.send_timeout(frame(3), Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(1)));
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(2)));
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(frame(3)));
        let blocked = {
            let tx = tx.clone();
            tx.send_timeout(frame(4), Duration::ZERO).await.unwrap();
            tx.send_timeout(frame(5), Duration::ZERO).await.unwrap();
            tokio::spawn(async move { tx.send_timeout(frame(6), Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(rx);
        assert_eq!(blocked.await.unwrap(), Err(SendError::Closed));
        assert_eq!(tx.send_timeout(frame(7), Duration::ZERO).await, Err(SendError::Closed));
    }
}
