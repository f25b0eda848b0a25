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
//!
//! A flood (more than [`FLOOD_EVENTS`] events in [`FLOOD_WINDOW`]) is
//! delivered differently: every subscriber that keeps reading would take
//! the whole flood, and a thousand of them would read far more than the
//! publisher writes, on the same machine. While the ring floods, the pumps
//! share [`FLOOD_TURNS_PER_SECOND`] turns a second, in order of arrival,
//! and each turn delivers the newest [`FLOOD_KEEP`] events, the ones
//! before them counted as missed: a subscriber sees the flood as a terminal
//! scrolling too fast shows it, and what it costs the machine is bounded
//! whatever the number of subscribers. At a human pace (a burst of a
//! hundred lines, a line every few milliseconds) every event goes out at
//! once.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Topics;
use crate::gate::Gate;
use crate::message::Kind;
use crate::peer::PeerHandle;

/// Most topics a ring carries (their per-topic counts live in arrays).
pub const MAX_TOPICS: usize = 8;

/// Per topic, a count of events.
type Counts = [u64; MAX_TOPICS];

/// The ring floods when more than [`FLOOD_EVENTS`] events come within
/// this window (more than 20 000 a second: no person reads that).
pub const FLOOD_WINDOW: Duration = Duration::from_millis(100);
pub const FLOOD_EVENTS: u64 = 2000;
/// While the ring floods: the turns all its pumps share each second, and
/// the newest events a turn delivers. A turn costs a subscriber a wake-up
/// and a read of at most this many events: all turns together cost the
/// machine a few percent of a core, however many subscribers there are.
pub const FLOOD_TURNS_PER_SECOND: u32 = 2000;
pub const FLOOD_KEEP: u64 = 16;

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
    /// The publishing rate: when the current window started, the events
    /// published in it, and whether the window before it flooded.
    window_start: Instant,
    window_events: u64,
    flooded_before: bool,
    /// The next flood turn free to take.
    next_turn: Instant,
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
    /// The read stopped at its size limit: there is more to read now.
    pub more: bool,
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
                window_start: Instant::now(),
                window_events: 0,
                flooded_before: false,
                next_turn: Instant::now(),
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
            let now = Instant::now();
            if now.duration_since(state.window_start) >= FLOOD_WINDOW {
                let just_before = now.duration_since(state.window_start) < 2 * FLOOD_WINDOW;
                state.flooded_before = just_before && state.window_events > FLOOD_EVENTS;
                state.window_start = now;
                state.window_events = 0;
            }
            for json in events {
                added = true;
                state.window_events += 1;
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

    /// Whether more than [`FLOOD_EVENTS`] events came within the last
    /// [`FLOOD_WINDOW`] (or within the window before the current one).
    pub fn flooding(&self) -> bool {
        let state = self.state.lock();
        let age = state.window_start.elapsed();
        match age {
            age if age < FLOOD_WINDOW => state.flooded_before || state.window_events > FLOOD_EVENTS,
            age if age < 2 * FLOOD_WINDOW => state.window_events > FLOOD_EVENTS,
            _ => false,
        }
    }

    /// Takes the next flood turn: when it comes. Turns are handed out in
    /// order, [`FLOOD_TURNS_PER_SECOND`] a second, so under a flood the
    /// pumps take turns round the ring's subscribers.
    pub fn flood_turn(&self) -> Instant {
        let mut state = self.state.lock();
        let turn = state.next_turn.max(Instant::now());
        state.next_turn = turn + Duration::from_secs(1) / FLOOD_TURNS_PER_SECOND;
        turn
    }

    /// Moves `cursor` on until at most `keep` events of the topics in `mask`
    /// are left before the head (a subscriber to a quiet topic keeps its
    /// events through another topic's flood); returns how many of them it
    /// passed, those it had fallen behind the ring by included.
    pub fn skip(&self, cursor: &mut Cursor, mask: u8, keep: u64) -> u64 {
        let state = self.state.lock();
        let mut missed = catch_up(&state, cursor, mask, self.topics.len());
        let is_taken = |topic: u8| mask & (1 << topic) != 0;
        let start = (cursor.next - state.first) as usize;
        let taken = state.events.range(start..).filter(|(topic, _)| is_taken(*topic)).count() as u64;
        let mut to_pass = taken.saturating_sub(keep);
        while to_pass > 0 {
            let topic = state.events[(cursor.next - state.first) as usize].0;
            cursor.before[usize::from(topic)] += 1;
            if is_taken(topic) {
                missed += 1;
                to_pass -= 1;
            }
            cursor.next += 1;
        }
        missed
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
        let mut read = Read { missed: catch_up(&state, cursor, mask, self.topics.len()), ..Read::default() };
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
        let at_head = cursor.next == state.first + state.events.len() as u64;
        read.ended = state.closed && at_head;
        read.more = !at_head;
        read
    }

    /// Resolves when the ring has changed since `read` was called: call it,
    /// [`Notified::enable`](tokio::sync::futures::Notified::enable) the
    /// result, read, and await it only if there was nothing to read.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

/// Moves a cursor that fell behind the ring to its oldest event; returns how
/// many events of the topics in `mask` it lost.
fn catch_up(state: &RingState, cursor: &mut Cursor, mask: u8, topics: usize) -> u64 {
    if cursor.next >= state.first {
        return 0;
    }
    let lost = (0..topics).filter(|t| mask & (1 << t) != 0).map(|t| state.evicted[t].saturating_sub(cursor.before[t]));
    let lost = lost.sum();
    cursor.next = state.first;
    cursor.before = state.evicted;
    lost
}

/// A reader's topics, shared between its [`pump`] and whoever changes them
/// (subscribe and unsubscribe calls on its connection). Each change is
/// counted, so the pump works out which of the ring's topics they take
/// once a change rather than once an event: with a thousand pumps waking
/// for each line, matching the names again every time was a tenth of the
/// fan-out's work.
#[derive(Clone)]
pub struct SharedTopics(Arc<TopicsCell>);

struct TopicsCell {
    topics: Mutex<Topics>,
    /// Changes so far; moved on under the lock, after the change.
    changes: AtomicU64,
}

impl SharedTopics {
    pub fn new(topics: Topics) -> SharedTopics {
        SharedTopics(Arc::new(TopicsCell { topics: Mutex::new(topics), changes: AtomicU64::new(0) }))
    }

    /// Changes the topics in place; returns them as they now are.
    pub fn update(&self, change: impl FnOnce(&mut Topics)) -> Topics {
        let mut topics = self.0.topics.lock();
        change(&mut topics);
        self.0.changes.fetch_add(1, Ordering::Release);
        topics.clone()
    }

    pub fn get(&self) -> Topics {
        self.0.topics.lock().clone()
    }

    /// `ring`'s topics these take, with the count of changes it reflects:
    /// the count is read first, so a change made meanwhile makes the next
    /// [`SharedTopics::changed_since`] true, and the mask is worked out again.
    fn mask(&self, ring: &Ring) -> (u64, u8) {
        let changes = self.0.changes.load(Ordering::Acquire);
        (changes, ring.mask(&self.0.topics.lock()))
    }

    fn changed_since(&self, changes: u64) -> bool {
        self.0.changes.load(Ordering::Acquire) != changes
    }
}

impl std::fmt::Debug for SharedTopics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// How much a [`pump`] takes from the ring at a time: what it holds while it
/// waits for room in its connection's outbox (events before a gap, which the
/// subscriber still gets). It also takes no more while its connection's
/// outbox holds more than this: the events wait in the ring, kept once for
/// every subscriber, rather than in each one's outbox (a subscriber that
/// never reads held its whole write budget, 8 MiB, there).
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
    let connection_closed = peer.closed();
    tokio::pin!(connection_closed);
    // Looked at every wake-up (a line each), the connection's token is
    // polled only once it fired.
    let mut gate = Gate::default();
    let mut closed = std::pin::pin!(std::future::poll_fn(move |cx| gate.poll(connection_closed.as_mut(), cx)));
    // Computed apart: the topics' lock is never held with the ring's.
    let (mut seen, mut mask) = topics.mask(&ring);
    loop {
        // Registered before the read: a publish from then on wakes it, so
        // after forwarding what was read it is awaited without reading again
        // (one read a wake-up, a thousand pumps each waking once a line).
        let changed = ring.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let mut lost = 0;
        let flooding = ring.flooding();
        if flooding {
            tokio::select! {
                _ = tokio::time::sleep_until(ring.flood_turn()) => {}
                _ = &mut closed => return,
            }
        }
        if topics.changed_since(seen) {
            (seen, mask) = topics.mask(&ring);
        }
        if flooding {
            lost += ring.skip(&mut cursor, mask, FLOOD_KEEP);
        }
        if peer.shared.outbox.wait_until_at_most(PUMP_BATCH_BYTES).await.is_err() {
            return;
        }
        let read = ring.read(&mut cursor, mask, PUMP_BATCH_BYTES, &mut batch);
        lost += read.missed;
        if lost > 0 && peer.send_raw(Kind::Notification, Bytes::from(missed(lost))).await.is_err() {
            return;
        }
        for json in batch.drain(..) {
            if peer.send_raw(Kind::Notification, json).await.is_err() {
                return;
            }
        }
        if read.ended {
            return;
        }
        if read.more {
            continue;
        }
        // The ring first, the usual reason to wake: a connection that
        // closed meanwhile fails the next send.
        tokio::select! {
            biased;
            _ = changed => {}
            _ = &mut closed => return,
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

    /// A flood of one topic skips that topic's events, not a quiet one's: a
    /// subscriber to state changes alone keeps every one of them through an
    /// output flood (the newest `keep` of each subscriber's own topics are kept).
    #[test]
    fn a_flood_skips_only_the_events_of_the_subscribers_own_topics_past_the_newest() {
        let ring = Ring::new(&["output", "state"], 1000, 1 << 20);
        let (output, state) = (ring.topic("output").unwrap(), ring.topic("state").unwrap());
        let (mut only_state, mut both) = (ring.cursor(), ring.cursor());
        for n in 0..300 {
            let topic = if n % 100 == 50 { state } else { output };
            ring.publish(topic, [ev(n)]);
        }
        assert_eq!(ring.skip(&mut only_state, ring.mask(&Topics::only(["state"])), 16), 0);
        let mut got = Vec::new();
        ring.read(&mut only_state, ring.mask(&Topics::only(["state"])), usize::MAX, &mut got);
        assert_eq!(numbers(&got), [50, 150, 250], "every state change, none skipped");
        // Both topics: all but the newest 16 events passed, and counted.
        assert_eq!(ring.skip(&mut both, ring.mask(&Topics::all()), 16), 284);
        got.clear();
        ring.read(&mut both, ring.mask(&Topics::all()), usize::MAX, &mut got);
        assert_eq!(numbers(&got), (284..300).collect::<Vec<_>>());
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
        // One event larger than the whole ring pushes everything out, itself
        // too: the reader, which had read the ten, missed that one.
        ring.publish(0, [Bytes::from(vec![0u8; 20_000])]);
        assert_eq!(ring.held(), (0, 0));
        got.clear();
        assert_eq!(ring.read(&mut cursor, 1, usize::MAX, &mut got).missed, 1);
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

    #[test]
    fn skipping_to_the_newest_events_counts_the_ones_passed() {
        let ring = Ring::new(&["a", "b"], 100, 1 << 20);
        let mut cursor = ring.cursor();
        for n in 0..200 {
            ring.publish((n % 2) as u8, [ev(n)]);
        }
        // 100 fell out of the ring (50 a's), then 34 a's are passed, leaving
        // the newest 16 a's.
        assert_eq!(ring.skip(&mut cursor, 1, 16), 84);
        let mut got = Vec::new();
        let read = ring.read(&mut cursor, 1, usize::MAX, &mut got);
        assert_eq!((read.missed, numbers(&got)), (0, (168..200).step_by(2).collect()));
        // At the head, nothing is passed.
        assert_eq!(ring.skip(&mut cursor, 3, 16), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_is_more_than_the_limit_in_a_window_and_ends_two_windows_after_it() {
        let ring = Ring::new(&["x"], 100, 1 << 20);
        ring.publish(0, (0..FLOOD_EVENTS).map(ev));
        assert!(!ring.flooding(), "at the limit");
        ring.publish(0, [ev(0)]);
        assert!(ring.flooding());
        tokio::time::advance(FLOOD_WINDOW + Duration::from_millis(1)).await;
        assert!(ring.flooding(), "the window just past flooded");
        ring.publish(0, [ev(0)]);
        assert!(ring.flooding(), "the window before flooded");
        tokio::time::advance(2 * FLOOD_WINDOW).await;
        assert!(!ring.flooding());
        // Turns are handed out in order, spaced by the rate.
        let (a, b) = (ring.flood_turn(), ring.flood_turn());
        assert_eq!(b - a, Duration::from_secs(1) / FLOOD_TURNS_PER_SECOND);
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

    /// A pump follows its reader's topics as they change, from the next
    /// event on: what it worked out for the old ones is not kept.
    #[tokio::test]
    async fn a_pump_follows_topics_changed_while_it_runs() {
        use crate::{Connection, PeerConfig, Router, Transport};
        use tokio::io::{AsyncBufReadExt, BufReader};

        let ring = Arc::new(Ring::new(&["a", "b"], 64, 1 << 20));
        let (a, b) = (ring.topic("a").unwrap(), ring.topic("b").unwrap());
        let (server, client) = tokio::net::UnixStream::pair().unwrap();
        let (r, w) = server.into_split();
        let transport = Transport::ndjson(r, w, 1 << 20);
        let (peer, conn) = Connection::new(transport, Router::<()>::empty(), Arc::new(()), PeerConfig::default());
        tokio::spawn(conn.run());
        let topics = SharedTopics::new(Topics::only(["a"]));
        tokio::spawn(pump(ring.clone(), ring.cursor(), topics.clone(), peer, |_| b"{}".to_vec()));
        let mut lines = BufReader::new(client).lines();
        let mut next = async || {
            let line = tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await;
            line.expect("an event within 5 s").unwrap().unwrap()
        };
        let event = |n: u64| Bytes::from(format!("{{\"n\":{n}}}"));
        ring.publish(b, [event(1)]);
        ring.publish(a, [event(2)]);
        assert_eq!(next().await, r#"{"n":2}"#, "b is not taken yet");
        topics.update(|t| t.add("b"));
        ring.publish(b, [event(3)]);
        assert_eq!(next().await, r#"{"n":3}"#, "b is taken once added");
        topics.update(|t| t.remove("a"));
        ring.publish(a, [event(4)]);
        ring.publish(b, [event(5)]);
        assert_eq!(next().await, r#"{"n":5}"#, "a is no longer taken");
    }
}
