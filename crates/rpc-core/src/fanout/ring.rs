//! One shared ring of events, read by every subscriber at its own cursor.
//!
//! [`Fanout`](super::Fanout) gives each subscriber a queue of its own: a
//! publish costs a push and a wake-up per subscriber, which with a thousand
//! subscribers is most of the publisher's time. Here an event is stored once
//! (its bytes already serialised, shared by every reader) and a publish costs
//! the same however many subscribers there are: one lock, one push, one
//! wake-up of whoever waits. Each subscriber keeps a [`Cursor`], the sequence
//! number of the next event it reads, and reads everything from there to the
//! head in one batch.
//!
//! The ring is bounded in events and in bytes; the oldest events go first.
//! A cursor that fell behind the oldest event lost what was between: the
//! ring counts, per topic, how many events it has thrown away, so the reader
//! learns exactly how many of *its* topics' events it missed (the `dropped
//! {count}` contract), then reads on from the oldest event still there.
//! Nothing a subscriber does (or fails to do) makes the publisher wait or
//! hold more memory: a reader that never reads only has a cursor that stays
//! behind.
//!
//! [`pump`] forwards a cursor's events to a connection, as
//! [`fanout::pump`](super::pump) does for a queue: it waits for room in the
//! connection's outbox and never closes the connection.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Notify;

use super::Topics;
use crate::message::Kind;
use crate::peer::PeerHandle;

/// Most topics a ring carries (their per-topic counts live in arrays).
pub const MAX_TOPICS: usize = 8;

/// Per topic, a count of events.
type Counts = [u64; MAX_TOPICS];

/// The shared ring: one publisher (or several, serialised by its lock), any
/// number of readers.
pub struct Ring {
    state: Mutex<RingState>,
    /// The topics' names; an event's topic is its index here.
    topics: Vec<String>,
    capacity: usize,
    max_bytes: usize,
    /// Readers waiting for the head to move.
    changed: Notify,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Ring")
            .field("first", &state.first)
            .field("len", &state.events.len())
            .field("bytes", &state.bytes)
            .finish()
    }
}

struct RingState {
    events: VecDeque<(u8, Bytes)>,
    /// Sequence number of `events[0]`.
    first: u64,
    bytes: usize,
    /// Per topic, the events published before `first` (thrown away).
    evicted: Counts,
    /// Per topic, every event published.
    published: Counts,
    /// No more events will come.
    closed: bool,
}

/// Where one reader is: the next event it reads and, per topic, how many
/// events came before it (to count what it missed when it fell behind).
#[derive(Clone, Debug)]
pub struct Cursor {
    next: u64,
    before: Counts,
}

/// What one [`Ring::read`] found besides the events.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Read {
    /// Events of the reader's topics lost before the ones read (the cursor
    /// had fallen behind the ring).
    pub missed: u64,
    /// The ring is closed and the cursor is at its head: nothing will come.
    pub ended: bool,
}

impl Ring {
    /// A ring of `topics` (at most [`MAX_TOPICS`]) holding at most `capacity`
    /// events and `max_bytes` bytes.
    pub fn new(topics: &[&str], capacity: usize, max_bytes: usize) -> Ring {
        assert!(topics.len() <= MAX_TOPICS, "a ring carries at most {MAX_TOPICS} topics");
        Ring {
            state: Mutex::new(RingState {
                events: VecDeque::new(),
                first: 0,
                bytes: 0,
                evicted: [0; MAX_TOPICS],
                published: [0; MAX_TOPICS],
                closed: false,
            }),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            capacity: capacity.max(1),
            max_bytes: max_bytes.max(1),
            changed: Notify::new(),
        }
    }

    /// The index of `topic`, to publish under.
    pub fn topic(&self, topic: &str) -> Option<u8> {
        self.topics.iter().position(|t| t == topic).map(|i| i as u8)
    }

    /// Appends every event of `events` under `topic` (an index from
    /// [`Ring::topic`]) and wakes the readers once: a batch (one read of a
    /// terminal, say) costs one lock and one wake-up. Never waits.
    pub fn publish(&self, topic: u8, events: impl IntoIterator<Item = Bytes>) {
        let t = usize::from(topic);
        assert!(t < self.topics.len(), "unknown topic {topic}");
        let mut added = false;
        {
            let mut state = self.state.lock();
            if state.closed {
                return;
            }
            for json in events {
                added = true;
                state.bytes += json.len();
                state.published[t] += 1;
                state.events.push_back((topic, json));
                // Oldest first, until it fits (an event larger than the whole
                // budget goes too, counted like the others).
                while state.events.len() > self.capacity || state.bytes > self.max_bytes {
                    let Some((old, json)) = state.events.pop_front() else { break };
                    state.bytes -= json.len();
                    state.evicted[usize::from(old)] += 1;
                    state.first += 1;
                }
            }
        }
        if added {
            self.changed.notify_waiters();
        }
    }

    /// No more events: readers read what is left, then learn it has ended.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_waiters();
    }

    /// A cursor at the head: it reads the events published from now on.
    pub fn cursor(&self) -> Cursor {
        let state = self.state.lock();
        Cursor { next: state.first + state.events.len() as u64, before: state.published }
    }

    /// Events of the ring (all topics), in bytes and in number.
    pub fn held(&self) -> (usize, usize) {
        let state = self.state.lock();
        (state.bytes, state.events.len())
    }

    /// Which of the ring's topics `topics` takes, as a mask.
    pub fn mask(&self, topics: &Topics) -> u8 {
        self.topics.iter().enumerate().filter(|(_, t)| topics.contains(t)).fold(0, |mask, (i, _)| mask | 1 << i)
    }

    /// Moves `cursor` on, appending to `out` the events of the topics in
    /// `mask` from where it was to the head, at most `max_bytes` of them (at
    /// least one, however large). When the cursor had fallen behind the ring,
    /// `missed` says how many of its topics' events it lost, and the events
    /// read are the ones after that gap.
    pub fn read(&self, cursor: &mut Cursor, mask: u8, max_bytes: usize, out: &mut Vec<Bytes>) -> Read {
        let state = self.state.lock();
        let mut read = Read::default();
        if cursor.next < state.first {
            for t in 0..self.topics.len() {
                if mask & (1 << t) != 0 {
                    read.missed += state.evicted[t].saturating_sub(cursor.before[t]);
                }
            }
            cursor.next = state.first;
            cursor.before = state.evicted;
        }
        let mut bytes = 0;
        let start = (cursor.next - state.first) as usize;
        for (topic, json) in state.events.range(start..) {
            if bytes >= max_bytes {
                break;
            }
            cursor.next += 1;
            cursor.before[usize::from(*topic)] += 1;
            if mask & (1 << topic) != 0 {
                bytes += json.len();
                out.push(json.clone());
            }
        }
        read.ended = state.closed && cursor.next == state.first + state.events.len() as u64;
        read
    }

    /// Resolves when the ring has changed since `read` was called: call it,
    /// [`Notified::enable`](tokio::sync::futures::Notified::enable) the
    /// result, read, and await it only if there was nothing to read.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

/// A reader's topics, shared between its [`pump`] and whoever changes them
/// (subscribe and unsubscribe calls on its connection).
pub type SharedTopics = Arc<Mutex<Topics>>;

/// How much a [`pump`] takes from the ring at a time: what it holds while it
/// waits for room in its connection's outbox (events before a gap, which the
/// subscriber still gets).
pub const PUMP_BATCH_BYTES: usize = 64 * 1024;

/// Forwards a reader's events, from `cursor` on, to a connection until either
/// ends. Each wake-up reads everything from the cursor to the head (up to
/// [`PUMP_BATCH_BYTES`]) and queues it on the connection, which writes it in
/// one go. `missed` builds the notification that reports a gap. Never closes
/// the connection: while it does not drain, this waits for room and the
/// cursor falls behind, counted when it reads again.
pub async fn pump(
    ring: Arc<Ring>,
    mut cursor: Cursor,
    topics: SharedTopics,
    peer: PeerHandle,
    missed: impl Fn(u64) -> Vec<u8>,
) {
    let mut batch = Vec::new();
    loop {
        let changed = ring.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let mask = ring.mask(&topics.lock());
        let read = ring.read(&mut cursor, mask, PUMP_BATCH_BYTES, &mut batch);
        if read.missed > 0 && peer.send_raw(Kind::Notification, Bytes::from(missed(read.missed))).await.is_err() {
            return;
        }
        if batch.is_empty() {
            if read.ended {
                return;
            }
            tokio::select! {
                _ = changed => {}
                _ = peer.closed() => return,
            }
            continue;
        }
        for json in batch.drain(..) {
            if peer.send_raw(Kind::Notification, json).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(n: u64) -> Bytes {
        Bytes::from(n.to_string())
    }

    fn numbers(events: &[Bytes]) -> Vec<u64> {
        events.iter().map(|e| std::str::from_utf8(e).unwrap().parse().unwrap()).collect()
    }

    #[test]
    fn every_reader_gets_each_event_of_its_topics_in_order() {
        let ring = Ring::new(&["output", "state"], 100, 1 << 20);
        let (output, state) = (ring.topic("output").unwrap(), ring.topic("state").unwrap());
        let mut all = ring.cursor();
        let mut only_output = ring.cursor();
        ring.publish(output, [ev(1), ev(2)]);
        ring.publish(state, [ev(3)]);
        ring.publish(output, [ev(4)]);
        let mut got = Vec::new();
        assert_eq!(ring.read(&mut all, ring.mask(&Topics::all()), usize::MAX, &mut got), Read::default());
        assert_eq!(numbers(&got), [1, 2, 3, 4]);
        got.clear();
        ring.read(&mut only_output, ring.mask(&Topics::only(["output"])), usize::MAX, &mut got);
        assert_eq!(numbers(&got), [1, 2, 4]);
        got.clear();
        // Nothing new: nothing read.
        assert_eq!(ring.read(&mut all, ring.mask(&Topics::all()), usize::MAX, &mut got), Read::default());
        assert!(got.is_empty());
    }

    #[test]
    fn a_reader_that_fell_behind_learns_exactly_how_many_of_its_events_it_missed_then_reads_on_in_order() {
        let ring = Ring::new(&["a", "b"], 10, 1 << 20);
        let mut only_a = ring.cursor();
        let mut both = ring.cursor();
        for n in 0..100 {
            ring.publish((n % 2) as u8, [ev(n)]);
        }
        let mut got = Vec::new();
        // Ten events are left (90..100); of the 90 before them, 45 were a's.
        let read = ring.read(&mut only_a, 1, usize::MAX, &mut got);
        assert_eq!(read.missed, 45);
        assert_eq!(numbers(&got), [90, 92, 94, 96, 98]);
        got.clear();
        assert_eq!(ring.read(&mut both, 3, usize::MAX, &mut got).missed, 90);
        assert_eq!(numbers(&got), (90..100).collect::<Vec<_>>());
        // Read in small batches, a reader falls behind again and is told again.
        got.clear();
        for n in 100..125 {
            ring.publish(0, [ev(n)]);
        }
        let read = ring.read(&mut both, 3, 1, &mut got);
        assert_eq!((read.missed, numbers(&got)), (15, vec![115]));
        got.clear();
        let read = ring.read(&mut both, 3, usize::MAX, &mut got);
        assert_eq!((read.missed, numbers(&got)), (0, (116..125).collect()));
    }

    #[test]
    fn a_reader_joining_mid_stream_starts_at_the_head() {
        let ring = Ring::new(&["x"], 4, 1 << 20);
        ring.publish(0, (0..10).map(ev));
        let mut late = ring.cursor();
        let mut got = Vec::new();
        assert_eq!(ring.read(&mut late, 1, usize::MAX, &mut got), Read::default());
        assert!(got.is_empty());
        ring.publish(0, [ev(10), ev(11)]);
        let read = ring.read(&mut late, 1, usize::MAX, &mut got);
        assert_eq!((read.missed, numbers(&got)), (0, vec![10, 11]));
    }

    #[test]
    fn the_ring_is_bounded_in_bytes_and_an_event_larger_than_it_is_counted_as_missed() {
        let ring = Ring::new(&["x"], 1000, 10_000);
        let mut cursor = ring.cursor();
        for n in 0..100u8 {
            ring.publish(0, [Bytes::from(vec![n; 1000])]);
        }
        assert_eq!(ring.held(), (10_000, 10));
        let mut got = Vec::new();
        assert_eq!(ring.read(&mut cursor, 1, usize::MAX, &mut got).missed, 90);
        assert_eq!(got.len(), 10);
        assert_eq!(got[0], Bytes::from(vec![90u8; 1000]));
        ring.publish(0, [Bytes::from(vec![0u8; 20_000])]);
        assert_eq!(ring.held(), (0, 0));
        got.clear();
        assert_eq!(ring.read(&mut cursor, 1, usize::MAX, &mut got).missed, 11);
        assert!(got.is_empty());
    }

    #[test]
    fn many_readers_each_see_every_event_or_exactly_what_they_missed() {
        let ring = Ring::new(&["x"], 64, 1 << 20);
        let mut cursors: Vec<Cursor> = (0..300).map(|_| ring.cursor()).collect();
        let mut seen = vec![0u64; cursors.len()];
        let mut missed = vec![0u64; cursors.len()];
        let mut last = vec![None::<u64>; cursors.len()];
        let mut got = Vec::new();
        for n in 0..10_000u64 {
            ring.publish(0, [ev(n)]);
            // Reader i reads every i-th event: the slow ones fall behind.
            for (i, cursor) in cursors.iter_mut().enumerate() {
                if n % (i as u64 + 1) == 0 {
                    got.clear();
                    missed[i] += ring.read(cursor, 1, usize::MAX, &mut got).missed;
                    for m in numbers(&got) {
                        assert!(last[i].is_none_or(|l| m > l), "reader {i} out of order");
                        last[i] = Some(m);
                        seen[i] += 1;
                    }
                }
            }
        }
        for (i, cursor) in cursors.iter_mut().enumerate() {
            got.clear();
            missed[i] += ring.read(cursor, 1, usize::MAX, &mut got).missed;
            seen[i] += got.len() as u64;
            assert_eq!(seen[i] + missed[i], 10_000, "reader {i}");
        }
        assert_eq!(missed[0], 0);
        assert!(missed[299] > 0);
    }

    #[tokio::test]
    async fn a_waiting_reader_is_woken_by_a_publish_and_learns_when_the_ring_ends() {
        let ring = Arc::new(Ring::new(&["x"], 8, 1 << 20));
        let reader = {
            let ring = ring.clone();
            let mut cursor = ring.cursor();
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let changed = ring.changed();
                    tokio::pin!(changed);
                    changed.as_mut().enable();
                    if ring.read(&mut cursor, 1, usize::MAX, &mut got).ended {
                        return numbers(&got);
                    }
                    changed.await;
                }
            })
        };
        for n in 0..5 {
            tokio::task::yield_now().await;
            ring.publish(0, [ev(n)]);
        }
        ring.close();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), reader).await.unwrap().unwrap();
        assert_eq!(got, [0, 1, 2, 3, 4]);
    }
}
