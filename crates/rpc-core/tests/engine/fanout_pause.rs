//! Event fan-out over real connections: one publisher,
//! many subscribers each served by an engine connection and fed by
//! `fanout::pump`. A subscriber that stops reading loses events, counted, not
//! its connection, and slows neither the publisher nor the others.

use parking_lot::Mutex;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rpc_core::fanout::{self, Event, Fanout, Topics};
use rpc_core::listen::{self, Listener, NdjsonLimits};
use rpc_core::message::Kind;
use rpc_core::peer::CloseReason;
use rpc_core::{Connection, Ctx, NoParams, PeerConfig, PeerHandle, Router, RpcError, Shutdown, Transport};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Polls `done` every few milliseconds until it holds; fails the test after `limit`.
async fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "still waiting after {limit:?} for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The CPU time the calling thread has used. A publish is timed by it: on a
/// loaded machine a thread can wait a hundred milliseconds for a core in the
/// middle of any call, which says nothing about the call. A publish that
/// waited for a subscriber instead would not use CPU time while it waits, but
/// it would stop the publishing, which the paused reader checks: it waits for
/// thousands of events to be published while it does not read.
fn thread_cpu_time() -> Duration {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    Duration::from(now)
}

/// The notification that tells a subscriber how many events it missed.
fn dropped_notice(count: u64) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","method":"dropped","params":{{"count":{count}}}}}"#).into_bytes()
}

const EVENT_PREFIX: &[u8] = br#"{"jsonrpc":"2.0","method":"event","params":{"seq":"#;
const DROPPED_PREFIX: &[u8] = br#"{"jsonrpc":"2.0","method":"dropped","params":{"count":"#;

/// An event carrying its sequence number, padded to a realistic size.
fn event(seq: u64) -> Bytes {
    let mut json = String::from_utf8(EVENT_PREFIX.to_vec()).unwrap();
    write!(json, r#"{seq},"pad":"{}"}}}}"#, "p".repeat(64)).unwrap();
    Bytes::from(json)
}

/// One line a subscriber read.
#[derive(Debug, PartialEq)]
enum Line {
    Event(u64),
    Dropped(u64),
}

fn leading_number(bytes: &[u8]) -> u64 {
    let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&bytes[..digits]).unwrap().parse().unwrap()
}

fn parse(line: &[u8]) -> Line {
    if let Some(rest) = line.strip_prefix(EVENT_PREFIX) {
        Line::Event(leading_number(rest))
    } else if let Some(rest) = line.strip_prefix(DROPPED_PREFIX) {
        Line::Dropped(leading_number(rest))
    } else {
        panic!("unexpected line: {}", String::from_utf8_lossy(line))
    }
}

/// Reads NDJSON lines from a raw socket, cheaply (a hundred of these read
/// 50 000 events each).
struct LineReader {
    read: OwnedReadHalf,
    buf: BytesMut,
}

impl LineReader {
    fn new(read: OwnedReadHalf) -> Self {
        LineReader { read, buf: BytesMut::with_capacity(64 * 1024) }
    }

    /// The next line, or `None` once the server closed the connection.
    async fn next(&mut self) -> Option<Line> {
        loop {
            if let Some(n) = memchr::memchr(b'\n', &self.buf) {
                let line = self.buf.split_to(n + 1);
                return Some(parse(&line[..n]));
            }
            self.buf.reserve(64 * 1024);
            if self.read.read_buf(&mut self.buf).await.unwrap() == 0 {
                return None;
            }
        }
    }
}

/// The engine's side of one subscriber: its connection and its pump.
struct Served {
    peer: PeerHandle,
    run: JoinHandle<CloseReason>,
    pump: JoinHandle<()>,
}

/// Serves a new subscriber of `fanout` on one end of a Unix socket pair and
/// returns the other end.
fn serve_subscriber(fanout: &Fanout<Bytes>, config: &PeerConfig) -> (Served, UnixStream) {
    let (server, client) = UnixStream::pair().unwrap();
    let (r, w) = server.into_split();
    let (peer, conn) =
        Connection::new(Transport::ndjson(r, w, 1 << 20), Router::<()>::empty(), Arc::new(()), config.clone());
    let run = tokio::spawn(conn.run());
    let pump = tokio::spawn(fanout::pump(fanout.subscribe(Topics::all()), peer.clone(), dropped_notice));
    (Served { peer, run, pump }, client)
}

/// Checks what a subscriber that may lose events reads: increasing sequence
/// numbers, and every gap announced by `dropped` notices adding up to it.
#[derive(Default)]
struct Gaps {
    received: u64,
    last: Option<u64>,
    /// Missed events announced and not yet seen as a gap.
    announced: u64,
    notices: Vec<u64>,
}

impl Gaps {
    /// Takes one line; returns the sequence number of an event.
    fn take(&mut self, line: Option<Line>) -> Option<u64> {
        match line {
            Some(Line::Event(seq)) => {
                let expected = self.last.map_or(self.announced, |last| last + 1 + self.announced);
                assert_eq!(seq, expected, "after {:?}, {} missed were announced", self.last, self.announced);
                (self.last, self.announced) = (Some(seq), 0);
                self.received += 1;
                Some(seq)
            }
            Some(Line::Dropped(count)) => {
                assert!(count > 0, "a notice of zero missed events");
                self.announced += count;
                self.notices.push(count);
                None
            }
            None => panic!("connection closed after {} events", self.received),
        }
    }
}

/// What the paused subscriber saw.
#[derive(Debug)]
struct PausedReport {
    received: u64,
    notices: Vec<u64>,
    paused_for: Duration,
    /// Events read after resuming and before the first `dropped` notice
    /// (those written to the socket and the outbox before the gap).
    read_before_notice: u64,
}

/// Rule 5: 100 subscribers of one publisher, one of them paused for three
/// write-stall timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_subscriber_loses_counted_events_not_its_connection_and_slows_no_one() {
    const SUBSCRIBERS: usize = 100;
    const EVENTS: u64 = 50_000;
    /// How far the publisher may run ahead of the slowest live reader: less
    /// than a subscriber's queue, so a reader that keeps up never loses one.
    const WINDOW: u64 = 768;
    /// Published while the paused one does not read: far more than its socket
    /// buffer, outbox and queue can hold, so it has to lose some.
    const PUBLISHED_DURING_PAUSE: u64 = 10_000;
    let config =
        PeerConfig { write_budget: 64 * 1024, write_stall: Duration::from_millis(300), ..PeerConfig::default() };
    let fanout = Fanout::<Bytes>::new(1024, 1024 * 1024);
    let published = Arc::new(AtomicU64::new(0));
    let mut served = Vec::new();
    let mut write_halves = Vec::new();
    let mut progress = Vec::new();
    let mut readers = Vec::new();
    for i in 0..SUBSCRIBERS - 1 {
        let (server, client) = serve_subscriber(&fanout, &config);
        served.push(server);
        let (read, write) = client.into_split();
        // Kept open to the end: dropping it would half-close the socket.
        write_halves.push(write);
        let received = Arc::new(AtomicU64::new(0));
        progress.push(received.clone());
        let mut lines = LineReader::new(read);
        readers.push(tokio::spawn(async move {
            let mut next = 0;
            while next < EVENTS {
                match lines.next().await {
                    Some(Line::Event(seq)) => assert_eq!(seq, next, "subscriber {i}: an event lost or out of order"),
                    Some(Line::Dropped(count)) => panic!("subscriber {i} (reading) was told it missed {count}"),
                    None => panic!("subscriber {i}: connection closed after {next} events"),
                }
                next += 1;
                received.store(next, Ordering::Relaxed);
            }
            lines
        }));
    }

    // The paused subscriber: reads a little, stops for three write stalls (and
    // until enough was published to overflow it), then reads to the end.
    let (paused, client) = serve_subscriber(&fanout, &config);
    let (read, paused_write) = client.into_split();
    let resumed = Arc::new(AtomicBool::new(false));
    let paused_reader = {
        let (published, resumed) = (published.clone(), resumed.clone());
        let pause = config.write_stall * 3;
        tokio::spawn(async move {
            let mut lines = LineReader::new(read);
            let mut seen = Gaps::default();
            while seen.received < 100 {
                seen.take(lines.next().await);
            }
            let stopped = Instant::now();
            let published_at_stop = published.load(Ordering::Relaxed);
            wait_until(Duration::from_secs(30), "the publisher to overflow the paused subscriber", || {
                stopped.elapsed() >= pause
                    && published.load(Ordering::Relaxed) >= (published_at_stop + PUBLISHED_DURING_PAUSE).min(EVENTS)
            })
            .await;
            let paused_for = stopped.elapsed();
            resumed.store(true, Ordering::Relaxed);
            let mut read_before_notice = 0;
            loop {
                let line = lines.next().await;
                if seen.notices.is_empty() && matches!(line, Some(Line::Event(_))) {
                    read_before_notice += 1;
                }
                if seen.take(line) == Some(EVENTS - 1) {
                    break;
                }
            }
            let Gaps { received, notices, .. } = seen;
            (PausedReport { received, notices, paused_for, read_before_notice }, lines)
        })
    };

    // The publisher: paced by the live readers only, timing every publish.
    let begun = Instant::now();
    let (mut slowest_publish, mut slowest_publish_cpu, mut publishing) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut max_paused_queued = 0;
    for seq in 0..EVENTS {
        if seq.is_multiple_of(32) {
            let deadline = Instant::now() + Duration::from_secs(20);
            while seq - progress.iter().map(|p| p.load(Ordering::Relaxed)).min().unwrap() > WINDOW {
                assert!(Instant::now() < deadline, "the live readers stopped making progress at {seq}");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            assert!(!paused.peer.is_closed() && !paused.run.is_finished(), "the paused subscriber was disconnected");
            max_paused_queued = max_paused_queued.max(paused.peer.stats().queued_bytes);
        }
        if seq == EVENTS - 1 {
            // The last event waits for the paused subscriber to have resumed,
            // however fast this machine publishes the rest (a quiet one in a
            // release build is done before three write stalls have passed):
            // the pause must fall inside the publishing.
            wait_until(Duration::from_secs(30), "the paused subscriber to resume", || resumed.load(Ordering::Relaxed))
                .await;
        }
        let item = event(seq);
        let (started, started_cpu) = (Instant::now(), thread_cpu_time());
        let delivered = fanout.publish("event", &item);
        let (took, took_cpu) = (started.elapsed(), thread_cpu_time() - started_cpu);
        assert_eq!(delivered, SUBSCRIBERS);
        slowest_publish = slowest_publish.max(took);
        slowest_publish_cpu = slowest_publish_cpu.max(took_cpu);
        publishing += took;
        published.store(seq + 1, Ordering::Relaxed);
    }
    let published_in = begun.elapsed();
    assert!(resumed.load(Ordering::Relaxed), "the paused subscriber was still paused when publishing ended");

    // Everyone reads to the end (the pumps may still be delivering).
    let mut kept = Vec::new();
    for reader in readers {
        kept.push(tokio::time::timeout(Duration::from_secs(30), reader).await.expect("a live reader").unwrap());
    }
    let (report, paused_lines) =
        tokio::time::timeout(Duration::from_secs(30), paused_reader).await.expect("the paused reader").unwrap();
    let delivered_in = begun.elapsed();
    let missed: u64 = report.notices.iter().sum();
    eprintln!(
        "fan-out: {EVENTS} events to {SUBSCRIBERS} subscribers published in {published_in:?}, all read in {delivered_in:?}; \
         publish: slowest {slowest_publish:?} ({slowest_publish_cpu:?} of CPU), mean {:?}; paused one: {report:?}, missed {missed}, \
         outbox at most {max_paused_queued} B",
        publishing / EVENTS as u32
    );
    assert!(slowest_publish_cpu < Duration::from_millis(100), "a publish took {slowest_publish_cpu:?} of CPU");
    assert!(!report.notices.is_empty(), "the paused subscriber lost nothing: the test proved nothing");
    assert_eq!(report.received + missed, EVENTS, "events lost without being counted: {report:?}");
    assert!(report.paused_for >= config.write_stall * 3);
    assert!(max_paused_queued <= config.write_budget + event(EVENTS).len(), "{max_paused_queued}");
    // After resuming it first reads what was already written or queued for it
    // before the gap (its socket buffer and outbox), then the notice.
    assert!(report.read_before_notice < EVENTS / 10, "{report:?}");
    // Its connection is still there, and so are everyone's.
    assert!(served.iter().chain([&paused]).all(|s| !s.peer.is_closed() && !s.run.is_finished()));

    // Clients leave: every connection ends as a normal close and its pump ends.
    drop((kept, write_halves, paused_lines, paused_write));
    for s in served.into_iter().chain([paused]) {
        let reason = tokio::time::timeout(Duration::from_secs(5), s.run).await.expect("connection kept").unwrap();
        assert_eq!(reason, CloseReason::Eof);
        tokio::time::timeout(Duration::from_secs(5), s.pump).await.expect("pump kept running").unwrap();
    }
    assert_eq!(fanout.subscriber_count(), 0);
}

/// A change of topics asked for by the client.
enum Change {
    Add(String),
    Remove(String),
}

type Changes = mpsc::UnboundedSender<(Change, oneshot::Sender<u64>)>;

/// Topic sets over time: `history[epoch]` is the set after `epoch` changes.
/// The publisher publishes and the forwarder changes topics under this lock, so
/// each event is stamped with the set it was filtered by.
struct Gate {
    history: Vec<Topics>,
}

#[derive(Deserialize, Clone, Debug, PartialEq)]
struct Stamped {
    topic: String,
    seq: u64,
    epoch: usize,
}

/// Rule 6: a subscriber changes its topics (adding and removing, including
/// after `*`) while the publisher runs, over a real connection, and receives
/// exactly the events of the topics it had when each was published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_changed_while_publishing_deliver_exactly_the_subscribed_topics() {
    const TOPICS: [&str; 3] = ["a", "b", "c"];
    const PER_EPOCH: u64 = 90;
    let fanout = Fanout::<Bytes>::new(4096, 16 * 1024 * 1024);
    let subscription = fanout.subscribe(Topics::only(["a"]));
    let gate = Arc::new(Mutex::new(Gate { history: vec![subscription.topics()] }));

    // Server: `subscribe`/`unsubscribe` handlers hand the change to the loop
    // that owns the subscription and forwards its events.
    let (changes, mut change_rx) = mpsc::unbounded_channel::<(Change, oneshot::Sender<u64>)>();
    async fn ask(cx: Ctx<Changes>, change: Change) -> Result<u64, RpcError> {
        let (tx, rx) = oneshot::channel();
        cx.state.send((change, tx)).map_err(RpcError::internal)?;
        rx.await.map_err(RpcError::internal)
    }
    let router = Router::<Changes>::new()
        .method("subscribe", |cx, [topic]: [String; 1]| ask(cx, Change::Add(topic)))
        .method("unsubscribe", |cx, [topic]: [String; 1]| ask(cx, Change::Remove(topic)))
        .build()
        .unwrap();
    let (server_end, client_end) = UnixStream::pair().unwrap();
    let (r, w) = server_end.into_split();
    let (server, conn) =
        Connection::new(Transport::ndjson(r, w, 1 << 20), router, Arc::new(changes), PeerConfig::default());
    tokio::spawn(conn.run());
    let forwarder = {
        let (gate, server) = (gate.clone(), server.clone());
        let mut subscription = subscription;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    change = change_rx.recv() => {
                        let Some((change, ack)) = change else { return };
                        let mut gate = gate.lock();
                        subscription.update_topics(|topics| match &change {
                            Change::Add(topic) => topics.add(topic),
                            Change::Remove(topic) => topics.remove(topic),
                        });
                        gate.history.push(subscription.topics());
                        let _ = ack.send(gate.history.len() as u64 - 1);
                    }
                    event = subscription.recv() => {
                        let json = match event {
                            Some(Event::Item(json)) => json,
                            Some(Event::Missed(count)) => Bytes::from(dropped_notice(count)),
                            None => return,
                        };
                        if server.send_raw(Kind::Notification, json).await.is_err() {
                            return;
                        }
                    }
                    _ = server.closed() => return,
                }
            }
        })
    };

    // Client: an engine peer that records the events it is sent.
    #[derive(Default)]
    struct Received {
        events: Mutex<Vec<Stamped>>,
        dropped: AtomicU64,
    }
    let client_router = Router::<Received>::new()
        .method("event", |cx, event: Stamped| async move {
            cx.state.events.lock().push(event);
            Ok(())
        })
        .method("dropped", |cx, _: NoParams| async move {
            cx.state.dropped.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .build()
        .unwrap();
    let received = Arc::new(Received::default());
    let (r, w) = client_end.into_split();
    let (client, conn) =
        Connection::new(Transport::ndjson(r, w, 1 << 20), client_router, received.clone(), PeerConfig::default());
    tokio::spawn(conn.run());

    // Publisher: round-robin over the topics, each event stamped with the topic
    // set it was filtered by, checking `publish` delivered it exactly then.
    let published = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let (fanout, gate, published, stop, received) =
            (fanout.clone(), gate.clone(), published.clone(), stop.clone(), received.clone());
        tokio::spawn(async move {
            let mut expected = Vec::new();
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..8 {
                    let topic = TOPICS[seq as usize % TOPICS.len()];
                    let gate = gate.lock();
                    let epoch = gate.history.len() - 1;
                    let stamped = Stamped { topic: topic.to_owned(), seq, epoch };
                    let json = format!(
                        r#"{{"jsonrpc":"2.0","method":"event","params":{{"topic":"{topic}","seq":{seq},"epoch":{epoch}}}}}"#
                    );
                    let wanted = gate.history[epoch].contains(topic);
                    assert_eq!(fanout.publish(topic, &Bytes::from(json)), usize::from(wanted), "{stamped:?}");
                    drop(gate);
                    if wanted {
                        expected.push(stamped);
                    }
                    seq += 1;
                }
                published.store(seq, Ordering::Relaxed);
                while expected.len() > received.events.lock().len() + 512 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (expected, seq)
        })
    };

    let steps = [
        ("subscribe", "b"),
        ("subscribe", "*"),
        ("unsubscribe", "a"),
        ("unsubscribe", "*"),
        ("subscribe", "c"),
        ("unsubscribe", "c"),
        ("subscribe", "*"),
    ];
    let wait_for_events = |from: u64| {
        let published = published.clone();
        async move {
            wait_until(Duration::from_secs(10), "events under the new topics", || {
                published.load(Ordering::Relaxed) >= from + PER_EPOCH
            })
            .await
        }
    };
    wait_for_events(published.load(Ordering::Relaxed)).await;
    for (n, (method, topic)) in steps.iter().enumerate() {
        let epoch: u64 = client.request(method, [topic]).await.unwrap();
        assert_eq!(epoch, n as u64 + 1);
        wait_for_events(published.load(Ordering::Relaxed)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (expected, next_seq) = publisher.await.unwrap();

    // An end marker, under the last set (`*`), then compare.
    let end = {
        let gate = gate.lock();
        let epoch = gate.history.len() - 1;
        assert!(gate.history[epoch].contains("a"));
        let json = format!(
            r#"{{"jsonrpc":"2.0","method":"event","params":{{"topic":"a","seq":{next_seq},"epoch":{epoch}}}}}"#
        );
        assert_eq!(fanout.publish("a", &Bytes::from(json)), 1);
        Stamped { topic: "a".into(), seq: next_seq, epoch }
    };
    wait_until(Duration::from_secs(10), "the end marker", || received.events.lock().last() == Some(&end)).await;
    let got = received.events.lock().clone();
    let history = gate.lock().history.clone();
    eprintln!("topics: {} published, {} delivered over {} topic sets", next_seq + 1, got.len(), history.len());
    assert_eq!(received.dropped.load(Ordering::Relaxed), 0);
    assert_eq!(got[..got.len() - 1], expected[..], "delivered events differ from those of the subscribed topics");
    // Each set saw events of exactly its topics (the publisher round-robins all three).
    for (epoch, topics) in history.iter().enumerate() {
        for topic in TOPICS {
            let seen = got.iter().any(|e| e.epoch == epoch && e.topic == topic);
            assert_eq!(seen, topics.contains(topic), "topic {topic} under set {epoch} ({topics:?})");
        }
    }
    assert!(history[3].contains("b") && !history[3].contains("a"), "unsubscribing after `*`: {:?}", history[3]);
    assert!(history[4].is_empty());
    drop(forwarder);
}

/// Rule 6: dropping a subscription removes it, whatever state it is in, and
/// so does ending the task that pumps it (how a daemon unsubscribes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_subscription_in_any_state_removes_it() {
    let fanout = Fanout::<Bytes>::new(8, 1024 * 1024);
    let fresh = fanout.subscribe(Topics::all());
    let mut all_but = fanout.subscribe(Topics::all());
    all_but.update_topics(|t| t.remove("x"));
    let overflowing = fanout.subscribe(Topics::only(["x", "y"]));
    let nothing = fanout.subscribe(Topics::none());
    assert_eq!(fanout.subscriber_count(), 4);
    for n in 0..20u8 {
        assert_eq!(fanout.publish("y", &Bytes::from(vec![n])), 3);
    }
    assert_eq!(overflowing.len(), 8, "full, with events dropped and counted");
    assert!(matches!(all_but.recv().await, Some(Event::Missed(12))));
    assert_eq!(fanout.publish("x", &Bytes::from_static(b"x")), 2);

    drop(overflowing);
    assert_eq!((fanout.subscriber_count(), fanout.publish("x", &Bytes::from_static(b"x"))), (3, 1));
    drop(all_but);
    assert_eq!((fanout.subscriber_count(), fanout.publish("y", &Bytes::from_static(b"y"))), (2, 1));
    drop(nothing);
    drop(fresh);
    assert_eq!((fanout.subscriber_count(), fanout.publish("y", &Bytes::from_static(b"y"))), (0, 0));

    // A pumped subscription, its client not reading (the pump waits for room
    // in a full outbox): aborting the pump unsubscribes.
    let fanout = Fanout::<Bytes>::new(4096, 4 * 1024 * 1024);
    let config = PeerConfig { write_budget: 1024, ..PeerConfig::default() };
    let (served, client) = serve_subscriber(&fanout, &config);
    for n in 0..4000u64 {
        fanout.publish("x", &event(n));
    }
    wait_until(Duration::from_secs(5), "the outbox to fill", || served.peer.stats().queued_bytes >= 1024).await;
    assert_eq!(fanout.subscriber_count(), 1);
    served.pump.abort();
    wait_until(Duration::from_secs(5), "the aborted pump's subscription to go", || fanout.subscriber_count() == 0)
        .await;
    assert!(!served.peer.is_closed(), "unsubscribing does not close the connection");
    drop(client);
}

/// Records warnings and errors logged on this thread.
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let meta = event.metadata();
        self.0.lock().push(format!("{} {}: {}", meta.level(), meta.target(), fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// What the `subscribe` method of the listener test shares.
struct Hub {
    fanout: Fanout<Bytes>,
    pumps: Mutex<Vec<JoinHandle<()>>>,
}

/// Rule 6: a client that disconnects ends its pump and its subscription,
/// whether the pump was idle or waiting for room in a full outbox, and
/// nothing is logged as a warning or an error. Served by `serve_ndjson` on
/// a Unix socket; one thread, so the log capture sees every task.
#[tokio::test(flavor = "current_thread")]
async fn a_client_disconnecting_ends_its_pump_without_a_warning() {
    let logged = Arc::new(Mutex::new(Vec::new()));
    let _capture = tracing::subscriber::set_default(Capture(logged.clone()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.sock");
    let (listener, _file) = listen::bind_unix(&path).unwrap();
    let hub = Arc::new(Hub { fanout: Fanout::new(64, 1024 * 1024), pumps: Mutex::default() });
    let router = Router::<Arc<Hub>>::new()
        .method("subscribe", |cx: Ctx<Arc<Hub>>, _: NoParams| async move {
            let subscription = cx.state.fanout.subscribe(Topics::all());
            let pump = tokio::spawn(fanout::pump(subscription, cx.peer.clone(), dropped_notice));
            cx.state.pumps.lock().push(pump);
            Ok("subscribed")
        })
        .build()
        .unwrap();
    let shutdown = Shutdown::new();
    let limits =
        NdjsonLimits { peer: PeerConfig { write_budget: 4096, ..PeerConfig::default() }, ..NdjsonLimits::default() };
    let server = {
        let (shutdown, hub) = (shutdown.clone(), hub.clone());
        tokio::spawn(async move {
            listen::serve_ndjson(Listener::Unix(listener), "events", limits, &shutdown, router, move || hub.clone())
                .await
        })
    };

    let subscribe = b"{\"jsonrpc\":\"2.0\",\"method\":\"subscribe\",\"id\":1}\n";
    // One client reads its events; the other never reads.
    let mut reading = UnixStream::connect(&path).await.unwrap();
    let mut idle = UnixStream::connect(&path).await.unwrap();
    reading.write_all(subscribe).await.unwrap();
    idle.write_all(subscribe).await.unwrap();
    wait_until(Duration::from_secs(5), "both subscriptions", || hub.fanout.subscriber_count() == 2).await;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), reading.read(&mut buf)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("\"subscribed\""));
    hub.fanout.publish("x", &event(0));
    let n = tokio::time::timeout(Duration::from_secs(5), reading.read(&mut buf)).await.unwrap().unwrap();
    assert!(buf[..n].starts_with(EVENT_PREFIX), "{}", String::from_utf8_lossy(&buf[..n]));

    // Fill the idle one's outbox, so its pump waits for room.
    for n in 0..3000u64 {
        hub.fanout.publish("x", &event(n));
        if n.is_multiple_of(100) {
            tokio::task::yield_now().await;
        }
    }
    let pumps_running = || hub.pumps.lock().iter().filter(|p| !p.is_finished()).count();
    assert_eq!(pumps_running(), 2);

    // Both clients go.
    drop(reading);
    drop(idle);
    wait_until(Duration::from_secs(5), "the pumps to end", || pumps_running() == 0).await;
    let pumps = std::mem::take(&mut *hub.pumps.lock());
    for pump in pumps {
        pump.await.expect("a pump failed");
    }
    assert_eq!(hub.fanout.subscriber_count(), 0);
    shutdown.begin();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("the listener kept going").unwrap();
    let logged = logged.lock();
    assert!(logged.is_empty(), "warnings or errors logged for a normal close: {logged:#?}");
}

/// A subscriber that never reads holds its queue and about one batch in its
/// outbox, not its whole write budget: the events wait in the queue, where
/// the oldest are dropped and counted. (Each held up to its 8 MiB budget in
/// the outbox besides its 4 MiB queue.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_holds_its_queue_and_a_batch_not_its_write_budget() {
    let config = PeerConfig::default();
    let fanout = Fanout::<Bytes>::new(1024, 1024 * 1024);
    let (served, client) = serve_subscriber(&fanout, &config);
    let (_unread, _write) = client.into_split();
    let big =
        Bytes::from(format!("{{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":\"{}\"}}", "x".repeat(16 * 1024)));
    let mut max_queued = 0;
    // 32 MiB of events, four budgets' worth.
    for n in 0..2048 {
        fanout.publish("event", &big);
        if n % 16 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
            max_queued = max_queued.max(served.peer.stats().queued_bytes);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    max_queued = max_queued.max(served.peer.stats().queued_bytes);
    eprintln!("a subscriber that never reads: at most {max_queued} B in its outbox (budget {} B)", config.write_budget);
    assert!(max_queued <= 2 * rpc_core::fanout::ring::PUMP_BATCH_BYTES + big.len(), "{max_queued} B queued");
    assert!(!served.peer.is_closed(), "never closed");
}
