//! Bounded event fan-out: one publisher, many subscribers, none able to slow it.
//!
//! Each subscriber has its own queue, bounded in events and in bytes.
//! Publishing takes each queue's lock for a push and never awaits, so a
//! subscriber that stopped reading costs the publisher nothing more than one
//! that keeps up. When a queue is full its oldest events are dropped and
//! counted; the subscriber is told how many it missed ([`Event::Missed`])
//! before the events that came after the gap, so it knows to resynchronise
//! (for example with a status call).
//!
//! [`pump`] forwards a subscription to a connection. It sends the next event
//! only while the connection's outbox holds less than
//! [`ring::PUMP_BATCH_BYTES`] (events wait in the subscriber's queue, where
//! the oldest are dropped and counted, not in an outbox of megabytes), as
//! long as the connection lives, and never closes it: a
//! subscriber whose socket stops draining (a paused `attach`, Ctrl-Z) loses
//! events, counted, not its connection, and when it drains again it reads the
//! events queued before the gap, then the missed-count notice, then live ones.
//!
//! [`ring`] is the other shape of the same contract, for many subscribers of
//! one busy publisher: one shared ring read at a cursor per subscriber, so a
//! publish costs the same however many subscribers there are.

pub mod ring;

use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::message::Kind;
use crate::peer::PeerHandle;

/// Default queue length per subscriber, in events.
pub const DEFAULT_QUEUE: usize = 1024;
/// Default queue size per subscriber, in bytes.
pub const DEFAULT_QUEUE_BYTES: usize = 4 * 1024 * 1024;

/// The size an event takes in a subscriber's queue.
pub trait Weigh {
    fn weight(&self) -> usize;
}

impl Weigh for Bytes {
    fn weight(&self) -> usize {
        self.len()
    }
}

impl Weigh for String {
    fn weight(&self) -> usize {
        self.len()
    }
}

impl Weigh for Vec<u8> {
    fn weight(&self) -> usize {
        self.len()
    }
}

impl<T: Weigh + ?Sized> Weigh for Arc<T> {
    fn weight(&self) -> usize {
        (**self).weight()
    }
}

macro_rules! weigh_by_size {
    ($($t:ty),*) => {$(
        impl Weigh for $t {
            fn weight(&self) -> usize {
                std::mem::size_of::<$t>()
            }
        }
    )*};
}
weigh_by_size!(u8, u16, u32, u64, usize, i32, i64);

/// Which topics a subscriber wants. `*` stands for every topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topics {
    /// Every topic but these.
    All { except: HashSet<String> },
    /// Only these.
    Only(HashSet<String>),
}

/// The name that subscribes to every topic.
pub const EVERY_TOPIC: &str = "*";

impl Topics {
    pub fn none() -> Self {
        Topics::Only(HashSet::new())
    }

    pub fn all() -> Self {
        Topics::All { except: HashSet::new() }
    }

    pub fn only<I: IntoIterator<Item = S>, S: Into<String>>(topics: I) -> Self {
        let mut set = Topics::none();
        for topic in topics {
            set.add(&topic.into());
        }
        set
    }

    pub fn contains(&self, topic: &str) -> bool {
        match self {
            Topics::All { except } => !except.contains(topic),
            Topics::Only(set) => set.contains(topic),
        }
    }

    /// Subscribes to `topic` (`*`: to every topic) in any state.
    pub fn add(&mut self, topic: &str) {
        match self {
            _ if topic == EVERY_TOPIC => *self = Topics::all(),
            Topics::All { except } => {
                except.remove(topic);
            }
            Topics::Only(set) => {
                set.insert(topic.to_owned());
            }
        }
    }

    /// Unsubscribes from `topic` (`*`: from every topic) in any state,
    /// including after `*`.
    pub fn remove(&mut self, topic: &str) {
        match self {
            _ if topic == EVERY_TOPIC => *self = Topics::none(),
            Topics::All { except } => {
                except.insert(topic.to_owned());
            }
            Topics::Only(set) => {
                set.remove(topic);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Topics::Only(set) if set.is_empty())
    }
}

/// What a subscriber receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<T> {
    Item(T),
    /// This many events were dropped because the queue was full.
    Missed(u64),
}

/// The publishing side. Cloning shares the same subscribers.
pub struct Fanout<T> {
    inner: Arc<Mutex<Registry<T>>>,
    capacity: usize,
    max_bytes: usize,
}

impl<T> Clone for Fanout<T> {
    fn clone(&self) -> Self {
        Fanout { inner: self.inner.clone(), capacity: self.capacity, max_bytes: self.max_bytes }
    }
}

struct Registry<T> {
    next_id: u64,
    queues: Vec<(u64, Arc<Queue<T>>)>,
}

impl<T> Drop for Registry<T> {
    /// The publisher is gone: wake every subscriber so it sees the end.
    fn drop(&mut self) {
        for (_, queue) in &self.queues {
            queue.state.lock().closed = true;
            queue.ready.notify_one();
        }
    }
}

struct Queue<T> {
    state: Mutex<QueueState<T>>,
    ready: Notify,
}

struct QueueState<T> {
    items: VecDeque<T>,
    bytes: usize,
    missed: u64,
    topics: Topics,
    closed: bool,
}

impl<T: Clone + Weigh> Fanout<T> {
    /// Subscribers' queues hold at most `capacity` events and `max_bytes` bytes.
    pub fn new(capacity: usize, max_bytes: usize) -> Self {
        Fanout {
            inner: Arc::new(Mutex::new(Registry { next_id: 0, queues: Vec::new() })),
            capacity: capacity.max(1),
            max_bytes: max_bytes.max(1),
        }
    }

    pub fn subscribe(&self, topics: Topics) -> Subscription<T> {
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState { items: VecDeque::new(), bytes: 0, missed: 0, topics, closed: false }),
            ready: Notify::new(),
        });
        let mut registry = self.inner.lock();
        let id = registry.next_id;
        registry.next_id += 1;
        registry.queues.push((id, queue.clone()));
        Subscription { id, queue, registry: Arc::downgrade(&self.inner) }
    }

    /// Delivers `item` to every subscriber of `topic`; returns how many got it.
    /// Never waits.
    pub fn publish(&self, topic: &str, item: &T) -> usize {
        let weight = item.weight();
        let registry = self.inner.lock();
        let mut delivered = 0;
        for (_, queue) in &registry.queues {
            let mut state = queue.state.lock();
            if !state.topics.contains(topic) {
                continue;
            }
            state.items.push_back(item.clone());
            state.bytes += weight;
            // Oldest first, until it fits (an event larger than the whole
            // budget is itself dropped and counted).
            while state.items.len() > self.capacity || state.bytes > self.max_bytes {
                let Some(old) = state.items.pop_front() else { break };
                state.bytes -= old.weight();
                state.missed += 1;
            }
            drop(state);
            queue.ready.notify_one();
            delivered += 1;
        }
        delivered
    }

    pub fn subscriber_count(&self) -> usize {
        self.inner.lock().queues.len()
    }
}

/// The receiving side of one subscriber; dropping it unsubscribes.
pub struct Subscription<T> {
    id: u64,
    queue: Arc<Queue<T>>,
    registry: Weak<Mutex<Registry<T>>>,
}

impl<T: Weigh> Subscription<T> {
    /// The next event; `None` once the publisher is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Event<T>> {
        loop {
            {
                let mut state = self.queue.state.lock();
                if state.missed > 0 {
                    return Some(Event::Missed(std::mem::take(&mut state.missed)));
                }
                if let Some(item) = state.items.pop_front() {
                    state.bytes -= item.weight();
                    return Some(Event::Item(item));
                }
                if state.closed {
                    return None;
                }
            }
            // `notify_one` stores a permit when nobody waits, so a publish between
            // the check above and this await is not lost.
            self.queue.ready.notified().await;
        }
    }
}

/// Changes a subscription's topics while something else (a [`pump`]) owns
/// it: the events already queued stay, the next ones follow the new topics.
pub struct TopicsHandle<T> {
    queue: Arc<Queue<T>>,
}

impl<T> Clone for TopicsHandle<T> {
    fn clone(&self) -> Self {
        TopicsHandle { queue: self.queue.clone() }
    }
}

impl<T> TopicsHandle<T> {
    /// Changes the topics in place and returns them as they now are.
    pub fn update(&self, change: impl FnOnce(&mut Topics)) -> Topics {
        let mut state = self.queue.state.lock();
        change(&mut state.topics);
        state.topics.clone()
    }

    pub fn topics(&self) -> Topics {
        self.queue.state.lock().topics.clone()
    }
}

impl<T> Subscription<T> {
    /// A handle that changes this subscription's topics from elsewhere.
    pub fn topics_handle(&self) -> TopicsHandle<T> {
        TopicsHandle { queue: self.queue.clone() }
    }

    pub fn set_topics(&self, topics: Topics) {
        self.queue.state.lock().topics = topics;
    }

    /// Changes the topic set in place (for subscribe/unsubscribe calls).
    pub fn update_topics(&self, change: impl FnOnce(&mut Topics)) {
        change(&mut self.queue.state.lock().topics);
    }

    pub fn topics(&self) -> Topics {
        self.queue.state.lock().topics.clone()
    }

    /// Events waiting in the queue.
    pub fn len(&self) -> usize {
        self.queue.state.lock().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Drop for Subscription<T> {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.lock().queues.retain(|(id, _)| *id != self.id);
        }
    }
}

/// Forwards a subscription of pre-serialised notifications to a connection
/// until either ends. `missed` builds the notification that reports a gap.
/// Never closes the connection: while it does not drain, this waits (with at
/// most a batch in the outbox) and the subscription drops and counts events
/// instead.
pub async fn pump(mut subscription: Subscription<Bytes>, peer: PeerHandle, missed: impl Fn(u64) -> Vec<u8>) {
    loop {
        // Events wait in the subscription while the outbox holds a batch.
        if peer.shared.outbox.wait_until_at_most(ring::PUMP_BATCH_BYTES).await.is_err() {
            return;
        }
        let event = tokio::select! {
            event = subscription.recv() => event,
            _ = peer.closed() => return,
        };
        let json = match event {
            Some(Event::Item(json)) => json,
            Some(Event::Missed(count)) => Bytes::from(missed(count)),
            None => return,
        };
        if peer.send_raw(Kind::Notification, json).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn every_subscriber_of_a_topic_gets_each_event_in_order() {
        let fanout = Fanout::new(16, 1 << 20);
        let mut a = fanout.subscribe(Topics::all());
        let mut b = fanout.subscribe(Topics::only(["output"]));
        fanout.publish("output", &1);
        fanout.publish("state", &2);
        fanout.publish("output", &3);
        assert_eq!(a.recv().await, Some(Event::Item(1)));
        assert_eq!(a.recv().await, Some(Event::Item(2)));
        assert_eq!(a.recv().await, Some(Event::Item(3)));
        assert_eq!(b.recv().await, Some(Event::Item(1)));
        assert_eq!(b.recv().await, Some(Event::Item(3)));
    }

    #[tokio::test]
    async fn stalled_subscriber_drops_oldest_and_learns_how_many_while_others_get_all() {
        let fanout = Fanout::new(4, 1 << 20);
        let mut stalled = fanout.subscribe(Topics::all());
        let mut live = fanout.subscribe(Topics::all());
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while got.len() < 100 {
                match live.recv().await {
                    Some(Event::Item(n)) => got.push(n),
                    other => panic!("live subscriber saw {other:?}"),
                }
            }
            got
        });
        for n in 0..100 {
            assert!(fanout.publish("x", &n) >= 1);
            if n % 3 == 0 {
                tokio::task::yield_now().await;
            }
        }
        // The live one missed nothing even though the other never read.
        let got = tokio::time::timeout(Duration::from_secs(5), reader).await.unwrap().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        // The stalled one hears about the gap first, then the newest events.
        assert_eq!(stalled.recv().await, Some(Event::Missed(96)));
        for n in 96..100 {
            assert_eq!(stalled.recv().await, Some(Event::Item(n)));
        }
    }

    #[tokio::test]
    async fn dropping_a_subscription_unsubscribes_and_dropping_the_fanout_ends_streams() {
        let fanout = Fanout::new(4, 1 << 20);
        let a = fanout.subscribe(Topics::all());
        let mut b = fanout.subscribe(Topics::all());
        assert_eq!(fanout.subscriber_count(), 2);
        drop(a);
        assert_eq!(fanout.subscriber_count(), 1);
        fanout.publish("x", &7);
        drop(fanout);
        assert_eq!(b.recv().await, Some(Event::Item(7)));
        assert_eq!(b.recv().await, None);
    }

    #[tokio::test]
    async fn topics_can_change_after_subscribing() {
        let fanout = Fanout::new(4, 1 << 20);
        let mut sub = fanout.subscribe(Topics::none());
        assert_eq!(fanout.publish("a", &1), 0);
        sub.update_topics(|t| *t = Topics::Only(["a".to_owned()].into()));
        fanout.publish("a", &2);
        assert_eq!(sub.recv().await, Some(Event::Item(2)));
    }

    #[test]
    fn unsubscribing_works_from_every_state_including_after_star() {
        let mut topics = Topics::only(["*"]);
        assert!(topics.contains("output") && topics.contains("state"));
        topics.remove("output");
        assert!(!topics.contains("output") && topics.contains("state"));
        topics.add("output");
        assert!(topics.contains("output"));
        topics.remove("*");
        assert!(topics.is_empty() && !topics.contains("state"));
        topics.add("state");
        topics.remove("state");
        assert!(topics.is_empty());
    }

    #[tokio::test]
    async fn the_queue_is_bounded_in_bytes_too() {
        let fanout = Fanout::new(1000, 10_000);
        let mut sub = fanout.subscribe(Topics::all());
        for n in 0..100u8 {
            fanout.publish("x", &Bytes::from(vec![n; 1000]));
        }
        // Ten 1000-byte events fit; ninety were dropped, oldest first.
        assert_eq!(sub.len(), 10);
        assert_eq!(sub.recv().await, Some(Event::Missed(90)));
        assert_eq!(sub.recv().await, Some(Event::Item(Bytes::from(vec![90u8; 1000]))));
        // One event larger than the whole budget is itself dropped and counted.
        fanout.publish("x", &Bytes::from(vec![0u8; 20_000]));
        assert_eq!(sub.len(), 0);
        assert_eq!(sub.recv().await, Some(Event::Missed(10)));
    }

    #[tokio::test]
    async fn a_handle_changes_the_topics_of_a_subscription_owned_elsewhere() {
        let fanout = Fanout::new(8, 1 << 20);
        let mut sub = fanout.subscribe(Topics::only(["a"]));
        let handle = sub.topics_handle();
        fanout.publish("b", &1);
        assert_eq!(handle.update(|t| t.add("b")), Topics::only(["a", "b"]));
        fanout.publish("b", &2);
        assert_eq!(sub.recv().await, Some(Event::Item(2)));
        handle.update(|t| t.remove("*"));
        assert_eq!(fanout.publish("a", &3), 0);
    }
}
