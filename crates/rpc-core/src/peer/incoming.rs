//! The other side's requests and notifications on their way through a
//! connection: one type keeps what runs, what waits and which ids are in
//! flight (lsp-server's `req_queue.rs`, incoming half).
//!
//! One bound, in messages and bytes, for requests waiting for a handler slot
//! (or for room in the outbox) and notifications waiting for their turn
//! together, so a peer cannot grow it by switching from one to the other.
//! Past it a request is refused and a notification dropped; a peer that keeps
//! sending past it is judged to be flooding.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use rustc_hash::FxHashMap;
use tokio::time::Instant;

use super::config::PeerConfig;
use crate::message::{Id, IdSet};

/// What the incoming side counted, read by [`PeerHandle::stats`](super::PeerHandle::stats).
#[derive(Default)]
pub(crate) struct Counters {
    pub backlog: AtomicUsize,
    pub backlog_bytes: AtomicUsize,
    pub refused: AtomicU64,
    pub dropped_notifications: AtomicU64,
    /// Members of the connection's batches running now, and the bytes of
    /// the replies its batches hold (see `batch`).
    pub batch_members: AtomicUsize,
    pub batch_bytes: AtomicUsize,
    /// Bytes of the requests (and batches) whose handlers run now.
    pub running_bytes: AtomicUsize,
    /// Requests read whose answers are not queued yet, and how many times
    /// the connection's task published that: only while someone waits for
    /// it to reach zero (see `Dispatch::publish_answered`).
    pub unanswered: AtomicUsize,
    pub answers_published: AtomicU64,
}

/// One finished unit of incoming work: the ids it held, the reply to write
/// and the bytes of its request, counted while it ran.
pub(crate) struct Done {
    pub owed: Owed,
    pub reply: Option<Vec<u8>>,
    pub held: usize,
}

/// The ids a unit of incoming work answers.
pub(crate) enum Owed {
    /// Nothing is in flight for it (answered on the spot, or notifications only).
    Nothing,
    One(Id),
    /// A batch, by its number.
    Batch(u64),
}

/// A request (or batch) read but not started.
pub(crate) struct Waiting {
    pub run: BoxFuture<'static, Done>,
    pub owed: Owed,
    pub size: usize,
}

pub(crate) struct Incoming {
    /// Requests and batches whose handlers run, polled by the connection task.
    /// Made when the first handler has to wait (one that answers at once is
    /// never put here): an idle connection holds no queue of its own.
    running: Option<FuturesUnordered<BoxFuture<'static, Done>>>,
    /// Bytes of the requests (and batches) in `running`: a handler keeps the
    /// request it was given until it answers, so what runs is bounded in
    /// bytes as what waits is (see `may_start` in `dispatch`).
    running_bytes: usize,
    /// Requests read but not started, in arrival order.
    waiting: VecDeque<Waiting>,
    /// Notification handlers, run one at a time in arrival order; the front
    /// one is running. Each with the size of its frame.
    notifications: VecDeque<(BoxFuture<'static, ()>, usize)>,
    /// Messages and bytes waiting (requests and notifications together),
    /// bounded by the config's `backlog` and `backlog_bytes`.
    len: usize,
    bytes: usize,
    /// Messages refused since the backlog last took one, and the bytes of
    /// the errors they were answered with (which go out past the write
    /// budget while it is full): a peer past the config's `flood_limit`, or
    /// whose refusals came to more than the write budget, is disconnected.
    /// (Two `u32`s where one `usize` was: every connection's task holds them.)
    refused_in_a_row: u32,
    refused_bytes_in_a_row: u32,
    /// Notifications dropped since the last warning, and when that was.
    dropped_unreported: u64,
    last_warning: Option<Instant>,
    /// Ids of requests not yet answered, to refuse duplicates.
    in_flight: IdSet,
    /// The ids of each batch in flight, by number, to answer them together if
    /// shutdown abandons the batch.
    batches: FxHashMap<u64, Vec<Id>>,
    next_batch: u64,
}

/// The peer keeps sending past the backlog.
pub(crate) struct Flooding(pub String);

impl Incoming {
    pub fn new() -> Self {
        Incoming {
            running: None,
            running_bytes: 0,
            waiting: VecDeque::new(),
            notifications: VecDeque::new(),
            len: 0,
            bytes: 0,
            refused_in_a_row: 0,
            refused_bytes_in_a_row: 0,
            dropped_unreported: 0,
            last_warning: None,
            in_flight: IdSet::default(),
            batches: FxHashMap::default(),
            next_batch: 0,
        }
    }

    /// Nothing runs and nothing waits.
    pub fn is_idle(&self) -> bool {
        self.running() == 0 && self.len == 0
    }

    pub fn running(&self) -> usize {
        self.running.as_ref().map_or(0, FuturesUnordered::len)
    }

    pub fn running_bytes(&self) -> usize {
        self.running_bytes
    }

    fn start(&mut self, run: BoxFuture<'static, Done>, size: usize, counters: &Counters) {
        self.running.get_or_insert_with(FuturesUnordered::new).push(run);
        self.running_bytes += size;
        counters.running_bytes.store(self.running_bytes, Ordering::Relaxed);
    }

    /// A handler that ran answered: the bytes of its request are given back.
    pub fn finished(&mut self, held: usize, counters: &Counters) {
        self.running_bytes -= held;
        counters.running_bytes.store(self.running_bytes, Ordering::Relaxed);
    }

    /// Requests read and not started.
    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Requests read and not yet answered.
    pub fn unanswered(&self) -> usize {
        self.in_flight.len()
    }

    pub fn is_in_flight(&self, id: &Id) -> bool {
        !self.in_flight.is_empty() && self.in_flight.contains(id)
    }

    /// Room for a message of `size` bytes. An empty backlog takes any one
    /// message the framing let through, so a large request is not refused
    /// just for being large.
    pub fn has_room(&self, size: usize, config: &PeerConfig) -> bool {
        self.len == 0 || (self.len < config.backlog && self.bytes + size <= config.backlog_bytes)
    }

    /// Runs request `id` (of `size` bytes) now.
    pub fn run_request(&mut self, id: Id, run: BoxFuture<'static, Done>, size: usize, counters: &Counters) {
        self.in_flight.insert(id);
        self.start(run, size, counters);
    }

    /// Keeps request `id` until a slot is free.
    pub fn queue_request(&mut self, id: Id, run: BoxFuture<'static, Done>, size: usize, counters: &Counters) {
        self.in_flight.insert(id.clone());
        self.add(size, counters);
        self.waiting.push_back(Waiting { run, owed: Owed::One(id), size });
    }

    /// A batch's ids, in flight from now; its number.
    pub fn open_batch(&mut self, ids: Vec<Id>) -> u64 {
        let n = self.next_batch;
        self.next_batch += 1;
        self.in_flight.extend(ids.iter().cloned());
        self.batches.insert(n, ids);
        n
    }

    pub fn run_batch(&mut self, run: BoxFuture<'static, Done>, size: usize, counters: &Counters) {
        self.start(run, size, counters);
    }

    pub fn queue_batch(&mut self, n: u64, run: BoxFuture<'static, Done>, size: usize, counters: &Counters) {
        self.add(size, counters);
        self.waiting.push_back(Waiting { run, owed: Owed::Batch(n), size });
    }

    pub fn queue_notification(&mut self, run: BoxFuture<'static, ()>, size: usize, counters: &Counters) {
        self.add(size, counters);
        self.notifications.push_back((run, size));
    }

    /// Starts waiting requests, in arrival order, while `may_start` says so
    /// (given how many run, the bytes they hold and the next one's size).
    pub fn start_waiting(&mut self, counters: &Counters, may_start: impl Fn(usize, usize, usize) -> bool) {
        while self.waiting.front().is_some_and(|next| may_start(self.running(), self.running_bytes, next.size)) {
            let waiting = self.waiting.pop_front().expect("not empty");
            self.remove(waiting.size, counters);
            self.start(waiting.run, waiting.size, counters);
        }
    }

    /// A handler that finished, if one has.
    pub fn poll_finished(&mut self, cx: &mut Context<'_>) -> Poll<Option<Done>> {
        match &mut self.running {
            Some(running) if !running.is_empty() => running.poll_next_unpin(cx),
            _ => Poll::Ready(None),
        }
    }

    /// The id of one request is answered: no longer in flight.
    pub fn settle_one(&mut self, id: &Id) {
        self.in_flight.remove(id);
    }

    /// The ids `owed` held are answered: no longer in flight. Returns them.
    pub fn settle(&mut self, owed: Owed) -> Vec<Id> {
        let ids = match owed {
            Owed::Nothing => Vec::new(),
            Owed::One(id) => vec![id],
            Owed::Batch(n) => self.batches.remove(&n).unwrap_or_default(),
        };
        for id in &ids {
            self.in_flight.remove(id);
        }
        ids
    }

    /// Every request not started, taken out of the backlog (shutdown refuses them).
    pub fn take_waiting(&mut self, counters: &Counters) -> Vec<Waiting> {
        let waiting: Vec<Waiting> = self.waiting.drain(..).collect();
        for w in &waiting {
            self.remove(w.size, counters);
        }
        waiting
    }

    /// Drops every handler that runs and every notification that waits (the
    /// grace period is over); the batches and single requests then still
    /// owed, for their `shutting_down` answers.
    pub fn abandon(&mut self, counters: &Counters) -> Vec<Owed> {
        self.running = None;
        self.running_bytes = 0;
        counters.running_bytes.store(0, Ordering::Relaxed);
        while !self.notifications.is_empty() {
            self.finish_front_notification(counters);
        }
        let mut owed: Vec<Owed> = self.batches.keys().copied().map(Owed::Batch).collect();
        let in_batches: HashSet<&Id> = self.batches.values().flatten().collect();
        owed.extend(self.in_flight.iter().filter(|id| !in_batches.contains(id)).cloned().map(Owed::One));
        owed
    }

    /// Runs the notification at the front of the queue (one at a time, in order).
    pub fn poll_front_notification(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.notifications.front_mut() {
            Some((handler, _)) => handler.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }

    pub fn finish_front_notification(&mut self, counters: &Counters) {
        if let Some((_, size)) = self.notifications.pop_front() {
            self.remove(size, counters);
        }
    }

    /// Counts a refused message, answered with `answer_bytes` (0 for a
    /// dropped notification); `Err` once the peer is flooding. A peer that
    /// does not read its replies is still read from while it owes answers to
    /// our calls, and each refusal echoes its request's id. The count bounds
    /// ordinary refusals (`flood_limit` of them, a kilobyte each at most);
    /// what answers past a kilobyte bring (huge ids) is counted in bytes, and
    /// cannot queue more than the write budget again.
    pub fn refuse(&mut self, conn: u64, config: &PeerConfig, answer_bytes: usize) -> Result<(), Flooding> {
        const ORDINARY: usize = 1024;
        self.refused_in_a_row = self.refused_in_a_row.saturating_add(1);
        let bytes = u32::try_from(answer_bytes.saturating_sub(ORDINARY)).unwrap_or(u32::MAX);
        self.refused_bytes_in_a_row = self.refused_bytes_in_a_row.saturating_add(bytes);
        let (count, bytes) = (self.refused_in_a_row as usize, self.refused_bytes_in_a_row as usize);
        if count > config.flood_limit.max(1) || bytes > config.write_budget {
            tracing::warn!(
                conn,
                refused = count,
                bytes,
                "the peer keeps sending past the incoming backlog; disconnecting it"
            );
            return Err(Flooding(format!(
                "flooding: {count} messages refused in a row ({bytes} bytes of large errors)"
            )));
        }
        Ok(())
    }

    /// Counts a dropped notification, with a warning per second at most.
    pub fn dropped_notification(&mut self, conn: u64, counters: &Counters) {
        counters.dropped_notifications.fetch_add(1, Ordering::Relaxed);
        self.dropped_unreported += 1;
        let now = Instant::now();
        if self.last_warning.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
            tracing::warn!(conn, dropped = self.dropped_unreported, "incoming backlog full: notifications dropped");
            self.dropped_unreported = 0;
            self.last_warning = Some(now);
        }
    }

    fn add(&mut self, size: usize, counters: &Counters) {
        self.len += 1;
        self.bytes += size;
        self.refused_in_a_row = 0;
        self.refused_bytes_in_a_row = 0;
        self.publish(counters);
    }

    fn remove(&mut self, size: usize, counters: &Counters) {
        self.len -= 1;
        self.bytes -= size;
        self.publish(counters);
    }

    fn publish(&self, counters: &Counters) {
        counters.backlog.store(self.len, Ordering::Relaxed);
        counters.backlog_bytes.store(self.bytes, Ordering::Relaxed);
    }
}
