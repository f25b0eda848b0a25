//! The throughput client: replies counted, not matched. A raw echo costs its
//! server a read and a write per batch, so the load side may spend no more
//! than that a message either, or it, not the server, sets the baseline's
//! pace. Per read this client does two SIMD passes over the new bytes
//! (counting newlines, or walking WebSocket frame headers, and looking for
//! `"error"`), one clock read, and one write of pre-built requests: a block
//! of requests whose ids are reused in turn, written straight from the
//! block. The window is kept by count (sent minus received). Latency is
//! sampled: every 16th request's send time is kept, and the reply that
//! brings the received count past it stops its clock (the server answers
//! in order, as every server measured here does on one connection; window-1
//! runs match by id, see `exact.rs`).
//!
//! What is checked: a reply is a line (a WebSocket data message); one with
//! an `"error"` member counts as an error. A connection is first primed with
//! one request whose reply is awaited by id, so what a server sends unasked
//! on connecting (btcp-broker's `welcome`) is not counted.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use memchr::memmem::Finder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::exact::{ConnStats, reply_id};
use super::spec::{Load, Report, Scheme, push_request};
use super::websocket;

/// One round trip in this many is timed.
const SAMPLE_EVERY: u64 = 16;
/// Read buffer: a read takes what the kernel has, up to this.
const READ_BUFFER: usize = 256 * 1024;
/// The id of the priming request.
const PRIME_ID: u64 = 1;

/// A block of requests, written as slices of it: the block is held twice
/// over, so any run of up to a block's count of requests from any position
/// is one slice.
pub(crate) struct Block {
    bytes: Vec<u8>,
    /// Where request `i` starts, for `i` in `0..=2 * count`.
    starts: Vec<usize>,
    count: usize,
}

impl Block {
    /// Requests made by `push` (ids 1000 on), at least `window` of them
    /// (see [`block_count`]), held twice.
    pub(crate) fn new(count: usize, push: impl Fn(&mut Vec<u8>, u64)) -> Block {
        let count = block_count(count);
        let (mut bytes, mut starts) = (Vec::new(), vec![0]);
        for i in 0..2 * count {
            push(&mut bytes, 1_000 + (i % count) as u64);
            starts.push(bytes.len());
        }
        Block { bytes, starts, count }
    }

    /// `n` requests (at most a block's count) from request `ordinal` on.
    pub(crate) fn requests(&self, ordinal: u64, n: usize) -> &[u8] {
        let first = (ordinal % self.count as u64) as usize;
        &self.bytes[self.starts[first]..self.starts[first + n]]
    }
}

/// A connection's counts: requests sent and replies received, the window
/// kept as their difference, the sampled send times, and what was measured.
pub(crate) struct Tally {
    window: u64,
    sent: u64,
    received: u64,
    /// (ordinal of a sampled request, when it was sent), oldest first.
    samples: VecDeque<(u64, Instant)>,
    stats: ConnStats,
    measure_from: Instant,
    stop_at: Instant,
}

impl Tally {
    pub(crate) fn new(window: usize, measure_from: Instant, stop_at: Instant) -> Result<Tally> {
        Ok(Tally {
            window: window as u64,
            sent: 0,
            received: 0,
            samples: VecDeque::new(),
            stats: ConnStats { hist: Histogram::new(3)?, requests: 0, errors: 0 },
            measure_from,
            stop_at,
        })
    }

    /// How many requests to send now to fill the window (none once the
    /// measured time is over).
    pub(crate) fn owed(&self, now: Instant) -> usize {
        if now < self.stop_at { (self.window - (self.sent - self.received)) as usize } else { 0 }
    }

    /// `n` requests were sent at `now`.
    pub(crate) fn sent(&mut self, n: usize, now: Instant) {
        let end = self.sent + n as u64;
        let mut sampled = self.sent.next_multiple_of(SAMPLE_EVERY);
        while sampled < end {
            self.samples.push_back((sampled, now));
            sampled += SAMPLE_EVERY;
        }
        self.sent = end;
    }

    /// `n` replies, `errors` of them errors, were read at `now`.
    pub(crate) fn received(&mut self, n: usize, errors: usize, now: Instant) -> Result<()> {
        self.received += n as u64;
        if self.received > self.sent {
            bail!("{} replies to {} requests: the server sent something unasked", self.received, self.sent);
        }
        let measured = now >= self.measure_from && now < self.stop_at;
        while let Some(&(ordinal, sent)) = self.samples.front() {
            if ordinal >= self.received {
                break;
            }
            self.samples.pop_front();
            if measured {
                let _ = self.stats.hist.record((now - sent).as_nanos() as u64);
            }
        }
        if measured {
            self.stats.requests += n as u64;
            self.stats.errors += errors as u64;
        }
        Ok(())
    }

    /// Requests sent so far: the block's position.
    pub(crate) fn sent_count(&self) -> u64 {
        self.sent
    }

    /// What was measured, over `duration`.
    pub(crate) fn report(&self, duration: Duration) -> Report {
        let ConnStats { hist, requests, errors } = &self.stats;
        Report::from_histogram(hist, *requests, *errors, duration.as_secs_f64())
    }

    /// Done: nothing more will be sent, and the replies are in or overdue.
    pub(crate) fn finished(&self, now: Instant) -> bool {
        now >= self.stop_at && self.sent == self.received || now > self.overdue()
    }

    /// Replies still owed after this never come.
    fn overdue(&self) -> Instant {
        self.stop_at + OVERDUE
    }
}

/// How long after the measured time a connection waits for the replies it
/// is still owed.
const OVERDUE: Duration = Duration::from_secs(10);

/// Reads more replies into `room`, unless there is nothing left to wait for:
/// `None` once `tally` is finished. A connection whose handshake and priming
/// ended only after the measured time (512 WebSocket connections to a busy
/// server with a short warm-up) sent nothing, and reading would wait for
/// ever; a server that stops answering is waited for until the replies it
/// owes are overdue.
async fn read_owed(stream: &mut TcpStream, room: &mut [u8], unit: &str, tally: &Tally) -> Result<Option<usize>> {
    if tally.finished(Instant::now()) {
        return Ok(None);
    }
    let overdue = tokio::time::Instant::from_std(tally.overdue());
    match tokio::time::timeout_at(overdue, read_more(stream, room, unit, "")).await {
        Ok(read) => read.map(Some),
        Err(_) => Ok(None),
    }
}

pub(super) async fn connection(load: &Load, measure_from: Instant, stop_at: Instant) -> Result<ConnStats> {
    match load.scheme()? {
        Scheme::Ndjson(addr) => ndjson(addr, load, measure_from, stop_at).await,
        Scheme::WebSocket => ws(load, measure_from, stop_at).await,
    }
}

/// The block's request count: at least a window (one write sends at most
/// that many), and a power of two.
fn block_count(window: usize) -> usize {
    window.max(256).next_power_of_two()
}

/// Writes the requests `tally` owes now, if any.
async fn send_owed(stream: &mut TcpStream, block: &Block, tally: &mut Tally, now: Instant) -> Result<()> {
    let owed = tally.owed(now);
    if owed > 0 {
        stream.write_all(block.requests(tally.sent, owed)).await?;
        tally.sent(owed, now);
    }
    Ok(())
}

/// What [`read_more`] adds to its complaints while priming.
const BEFORE_FIRST: &str = " before the first reply";

/// Reads into `room` (the free end of the read buffer): how many bytes came.
/// No room left means one `unit` (a reply, a frame) outgrew the buffer.
async fn read_more(stream: &mut TcpStream, room: &mut [u8], unit: &str, when: &str) -> Result<usize> {
    if room.is_empty() {
        bail!("{unit} longer than {READ_BUFFER} bytes{when}");
    }
    match stream.read(room).await? {
        0 if when.is_empty() => bail!("server closed the connection"),
        0 => bail!("server closed the connection before answering the first request"),
        n => Ok(n),
    }
}

fn ndjson_request(out: &mut Vec<u8>, id: u64, method: &str, params: &str) {
    let mut text = String::new();
    push_request(&mut text, id, method, params);
    out.extend_from_slice(text.as_bytes());
    out.push(b'\n');
}

async fn ndjson(addr: &str, load: &Load, measure_from: Instant, stop_at: Instant) -> Result<ConnStats> {
    let mut stream = TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let block = Block::new(load.window, |out, id| ndjson_request(out, id, &load.method, &load.params));
    let mut buf = vec![0u8; READ_BUFFER];
    let mut filled = prime_ndjson(&mut stream, load, &mut buf).await?;
    let error = Finder::new(b"\"error\"");
    let mut tally = Tally::new(load.window, measure_from, stop_at)?;
    send_owed(&mut stream, &block, &mut tally, Instant::now()).await?;
    loop {
        let now = if filled > 0 && memchr::memchr(b'\n', &buf[..filled]).is_some() {
            // Replies left over from priming.
            Instant::now()
        } else {
            let Some(read) = read_owed(&mut stream, &mut buf[filled..], "a reply", &tally).await? else {
                return Ok(tally.stats);
            };
            filled += read;
            Instant::now()
        };
        if let Some(last) = memchr::memrchr(b'\n', &buf[..filled]) {
            let whole = &buf[..=last];
            let replies = memchr::memchr_iter(b'\n', whole).count();
            tally.received(replies, error.find_iter(whole).count(), now)?;
            buf.copy_within(last + 1..filled, 0);
            filled -= last + 1;
        }
        send_owed(&mut stream, &block, &mut tally, now).await?;
        if tally.finished(now) {
            return Ok(tally.stats);
        }
    }
}

/// Sends the hello (or one request of the load) and reads until its reply;
/// returns how many bytes after it are already in `buf`.
async fn prime_ndjson(stream: &mut TcpStream, load: &Load, buf: &mut [u8]) -> Result<usize> {
    let (method, params) = load.hello.as_ref().map_or((&load.method, &load.params), |(m, p)| (m, p));
    let mut first = Vec::new();
    ndjson_request(&mut first, PRIME_ID, method, params);
    stream.write_all(&first).await?;
    let mut filled = 0;
    loop {
        while let Some(end) = memchr::memchr(b'\n', &buf[..filled]) {
            let primed = reply_id(&buf[..end]) == Some(PRIME_ID);
            buf.copy_within(end + 1..filled, 0);
            filled -= end + 1;
            if primed {
                return Ok(filled);
            }
        }
        filled += read_more(stream, &mut buf[filled..], "a line", BEFORE_FIRST).await?;
    }
}

fn ws_request(out: &mut Vec<u8>, id: u64, method: &str, params: &str) {
    let mut text = String::new();
    push_request(&mut text, id, method, params);
    websocket::push_text_frame(out, text.as_bytes());
}

async fn ws(load: &Load, measure_from: Instant, stop_at: Instant) -> Result<ConnStats> {
    let (mut stream, early) = websocket::connect(&load.target).await?;
    let block = Block::new(load.window, |out, id| ws_request(out, id, &load.method, &load.params));
    let mut buf = vec![0u8; READ_BUFFER];
    buf[..early.len()].copy_from_slice(&early);
    let mut filled = prime_ws(&mut stream, load, &mut buf, early.len()).await?;
    let error = Finder::new(b"\"error\"");
    let mut tally = Tally::new(load.window, measure_from, stop_at)?;
    send_owed(&mut stream, &block, &mut tally, Instant::now()).await?;
    let mut pongs = Vec::new();
    let mut first = filled > 0;
    loop {
        if !first {
            let Some(read) = read_owed(&mut stream, &mut buf[filled..], "a frame", &tally).await? else {
                return Ok(tally.stats);
            };
            filled += read;
        }
        first = false;
        let now = Instant::now();
        let frames = websocket::walk(&buf[..filled]);
        if frames.closed {
            bail!("server closed the WebSocket");
        }
        let whole = &buf[..frames.end];
        tally.received(frames.messages, error.find_iter(whole).count(), now)?;
        for &(from, to) in &frames.pings {
            websocket::push_pong_frame(&mut pongs, &buf[from..to]);
        }
        buf.copy_within(frames.end..filled, 0);
        filled -= frames.end;
        if !pongs.is_empty() {
            stream.write_all(&pongs).await?;
            pongs.clear();
        }
        send_owed(&mut stream, &block, &mut tally, now).await?;
        if tally.finished(now) {
            return Ok(tally.stats);
        }
    }
}

/// [`prime_ndjson`] over WebSocket: `filled` bytes of frames already in `buf`.
async fn prime_ws(stream: &mut TcpStream, load: &Load, buf: &mut [u8], mut filled: usize) -> Result<usize> {
    let (method, params) = load.hello.as_ref().map_or((&load.method, &load.params), |(m, p)| (m, p));
    let mut first = Vec::new();
    ws_request(&mut first, PRIME_ID, method, params);
    stream.write_all(&first).await?;
    loop {
        // One frame at a time, so what follows the reply stays in `buf`.
        loop {
            let frames = websocket::walk(&buf[..filled]);
            if frames.end == 0 {
                break;
            }
            let one = frame_len(&buf[..filled]);
            let primed = frames.messages > 0 && reply_id(&buf[..one]) == Some(PRIME_ID);
            buf.copy_within(one..filled, 0);
            filled -= one;
            if primed {
                return Ok(filled);
            }
        }
        filled += read_more(stream, &mut buf[filled..], "a frame", BEFORE_FIRST).await?;
    }
}

/// The length of the first complete frame of `buf` (0 if none).
fn frame_len(buf: &[u8]) -> usize {
    // Walk a prefix growing by a byte until it holds one frame: frames
    // here are short, and this runs once a connection.
    (1..=buf.len()).find(|&end| websocket::walk(&buf[..end]).end > 0).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_run_of_up_to_a_block_of_requests_is_one_slice_with_ids_in_turn() {
        let block = Block::new(4, |out, id| out.extend_from_slice(format!("{};", id - 1000).as_bytes()));
        assert_eq!(block.count, 256);
        assert_eq!(block.requests(0, 4), b"0;1;2;3;");
        assert_eq!(block.requests(254, 3), b"254;255;0;");
        assert_eq!(block.requests(256 * 3 + 9, 2), b"9;10;");
        assert_eq!(block_count(64), 256);
        assert_eq!(block_count(1000), 1024);
    }

    #[test]
    fn the_window_is_kept_by_count_and_every_sixteenth_round_trip_is_timed() {
        let start = Instant::now();
        let mut tally = Tally::new(64, start, start + Duration::from_secs(60)).unwrap();
        assert_eq!(tally.owed(start), 64);
        tally.sent(64, start);
        assert_eq!(tally.owed(start), 0);
        let later = start + Duration::from_micros(100);
        tally.received(20, 1, later).unwrap();
        assert_eq!(tally.owed(later), 20);
        // Ordinals 0 and 16 are answered; 32 and 48 still out.
        assert_eq!(tally.stats.hist.len(), 2);
        assert_eq!(tally.stats.hist.value_at_quantile(0.5) / 1000, 100);
        assert_eq!((tally.stats.requests, tally.stats.errors), (20, 1));
        assert_eq!(tally.samples.len(), 2);
        assert!(tally.received(45, 0, later).is_err(), "more replies than requests");
    }

    #[test]
    fn nothing_is_owed_after_the_measured_time_and_the_run_ends_when_all_are_back() {
        let start = Instant::now();
        let stop = start + Duration::from_secs(1);
        let mut tally = Tally::new(8, start, stop).unwrap();
        tally.sent(8, start);
        assert!(!tally.finished(stop));
        tally.received(8, 0, stop).unwrap();
        assert_eq!(tally.owed(stop), 0);
        assert!(tally.finished(stop));
        // Replies after the measured time are not counted.
        assert_eq!(tally.stats.requests, 0);
    }

    #[test]
    fn a_priming_frame_is_taken_alone() {
        let mut buf = Vec::new();
        websocket::push_text_frame(&mut buf, br#"{"id":1}"#);
        let one = buf.len();
        websocket::push_text_frame(&mut buf, br#"{"id":2}"#);
        assert_eq!(frame_len(&buf), one);
    }
}
