//! The events on their way to one running extension, and the task that
//! writes them to its connection one at a time.
//!
//! Why a queue of its own: the connection's outbox holds at most its write
//! budget and a writer waits for room, so every event for an extension that
//! does not read would otherwise be a task waiting with its message inside:
//! an 8 MB message changed every two seconds grew the host by hundreds of
//! megabytes. Here nothing waits but the one event being written; the rest
//! are bounded, as the engine's fan-out bounds a subscriber's queue:
//!
//! - `message/changed` tells the message as it is now, so a newer one
//!   replaces the one still queued: at most one waits, the latest.
//! - Other events (`message/opened`, `message/saved`, `window/closed`) are
//!   small; at most [`MOST_QUEUED`] wait, the oldest dropped and counted,
//!   and the count written to the extension's log when it reads again.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use rpc_core::PeerHandle;
use rpc_core::message::{self, Kind};
use serde_json::Value;
use tokio::sync::Notify;

use super::Extension;

/// The most events other than `message/changed` that wait for one extension.
pub const MOST_QUEUED: usize = 256;

/// The event that only its latest instance matters for.
const MESSAGE_CHANGED: &str = "message/changed";

pub struct PendingEvents {
    queue: Mutex<Queue>,
    ready: Notify,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Queued>,
    /// Events dropped since the writer last said so.
    dropped: u64,
    /// The connection is gone: nothing more is queued.
    closed: bool,
}

struct Queued {
    method: &'static str,
    /// The notification, serialised once when it is queued.
    json: Bytes,
}

impl PendingEvents {
    pub fn new() -> Arc<PendingEvents> {
        Arc::new(PendingEvents { queue: Mutex::default(), ready: Notify::new() })
    }

    /// Queues `method` with `params`; never waits.
    pub fn push(&self, method: &'static str, params: &Value) {
        let Ok(json) = message::request(None, method, params) else { return };
        let mut queue = self.queue.lock();
        if queue.closed {
            return;
        }
        if method == MESSAGE_CHANGED {
            queue.events.retain(|queued| queued.method != MESSAGE_CHANGED);
        }
        queue.events.push_back(Queued { method, json: Bytes::from(json) });
        let others = queue.events.iter().filter(|queued| queued.method != MESSAGE_CHANGED).count();
        if others > MOST_QUEUED
            && let Some(oldest) = queue.events.iter().position(|queued| queued.method != MESSAGE_CHANGED)
        {
            queue.events.remove(oldest);
            queue.dropped += 1;
        }
        drop(queue);
        self.ready.notify_one();
    }

    /// Nothing more is queued, and what waits is let go.
    pub fn close(&self) {
        let mut queue = self.queue.lock();
        queue.closed = true;
        queue.events.clear();
        drop(queue);
        self.ready.notify_one();
    }

    /// The next event to write, and how many were dropped before it;
    /// `None` once closed.
    async fn next(&self) -> Option<(Bytes, u64)> {
        loop {
            {
                let mut queue = self.queue.lock();
                if queue.closed {
                    return None;
                }
                if let Some(queued) = queue.events.pop_front() {
                    return Some((queued.json, std::mem::take(&mut queue.dropped)));
                }
            }
            // `notify_one` keeps a permit when nobody waits: a push between
            // the check above and this await is not lost.
            self.ready.notified().await;
        }
    }
}

/// Writes `events` to `peer` in order, one at a time (waiting for room in its
/// outbox), until the connection or the queue closes.
pub async fn deliver(events: Arc<PendingEvents>, peer: PeerHandle, extension: Arc<Extension>) {
    loop {
        let next = tokio::select! {
            next = events.next() => next,
            () = peer.closed() => None,
        };
        let Some((json, dropped)) = next else { break };
        if dropped > 0 {
            extension.log.note(&format!(
                "{dropped} events dropped: it did not read them (at most {MOST_QUEUED} wait, and the latest \
                 message/changed)"
            ));
        }
        if peer.send_raw(Kind::Notification, json).await.is_err() {
            break;
        }
    }
    events.close();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn methods(events: &PendingEvents) -> Vec<&'static str> {
        events.queue.lock().events.iter().map(|queued| queued.method).collect()
    }

    #[test]
    fn a_newer_message_changed_replaces_the_one_queued() {
        let events = PendingEvents::new();
        events.push("message/changed", &json!({"message": "A"}));
        events.push("message/saved", &json!({}));
        events.push("message/changed", &json!({"message": "B"}));
        assert_eq!(methods(&events), ["message/saved", "message/changed"]);
        let last = events.queue.lock().events.back().map(|queued| queued.json.clone()).unwrap();
        assert!(std::str::from_utf8(&last).unwrap().contains("\"B\""));
    }

    #[test]
    fn other_events_are_bounded_oldest_dropped_and_counted() {
        let events = PendingEvents::new();
        events.push("message/changed", &json!({"message": "A"}));
        for n in 0..MOST_QUEUED + 10 {
            events.push("message/saved", &json!({"n": n}));
        }
        assert_eq!(methods(&events).len(), MOST_QUEUED + 1);
        assert_eq!(methods(&events)[0], "message/changed", "the latest content is never dropped");
        assert_eq!(events.queue.lock().dropped, 10);
        events.close();
        assert!(methods(&events).is_empty());
        events.push("message/saved", &json!({}));
        assert!(methods(&events).is_empty(), "nothing is queued once closed");
    }
}
