//! B7's subscribers: each connects to ralph-server's socket, subscribes to
//! `output`, and times every paced line from the agent's stamp to its
//! arrival, counting the events the server says it dropped.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::agent::monotonic_ns;

/// Every line of the agent starts with it.
const TAG: &[u8] = b"rpcbench ";
const SUBSCRIBE: &[u8] =
    b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"subscribe\",\"params\":{\"events\":[\"output\"]}}\n";

/// How many subscribers a round has.
#[derive(Clone, Copy, Debug)]
pub struct Subscribers {
    pub count: usize,
    /// The first one subscribes and then never reads.
    pub one_stalled: bool,
}

/// What one subscriber saw.
pub(super) struct Tally {
    /// Paced line → event, nanoseconds, in arrival order; into one histogram
    /// at the end.
    pub(super) samples: Vec<u64>,
    /// Events the server told it it had lost (`dropped {count}`).
    pub(super) dropped: u64,
}

impl Tally {
    /// Room for `lines` samples, its memory written before the agent starts.
    /// The instrument must not be what it measures: a histogram each (450 KB
    /// of counts, paged in on first use) made a thousand subscribers fault in
    /// pages as the first timed lines arrived, and the backlog that built
    /// showed up as the server's latency (40-120 ms for the first 60 lines).
    fn new(lines: usize) -> Tally {
        Tally { samples: touched(lines), dropped: 0 }
    }

    /// Counts one line from the server; true at the agent's last line.
    fn line(&mut self, line: &[u8], now: u64) -> bool {
        if let Some(at) = memchr::memmem::find(line, TAG) {
            let rest = &line[at + TAG.len()..];
            match rest.first() {
                Some(b'L') => {
                    if let Some(stamp) = number_after(rest, 2) {
                        self.samples.push(now.saturating_sub(stamp));
                    }
                }
                Some(b'D') => return true,
                _ => {}
            }
        } else if memchr::memmem::find(line, b"\"type\":\"dropped\"").is_some()
            && let Some(at) = memchr::memmem::find(line, b"\"count\":")
        {
            self.dropped += number_after(&line[at + 8..], 0).unwrap_or(0);
        }
        false
    }
}

/// The number that is word `skip` (0-based, split at spaces) of `text`.
fn number_after(text: &[u8], skip: usize) -> Option<u64> {
    let word = text.split(|&b| b == b' ').nth(skip)?;
    let digits = word.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&word[..digits]).ok()?.parse().ok()
}

/// An empty vector with room for `len` items, every page of it written
/// (so none is first touched while the subscribers time the agent's lines).
fn touched(len: usize) -> Vec<u64> {
    let mut v = vec![u64::MAX; len];
    std::hint::black_box(&mut v);
    v.clear();
    v
}

/// Connects and subscribes to `output`; returns the stream and what came
/// after the reply.
async fn subscribe(socket: &Path) -> Result<(UnixStream, Vec<u8>)> {
    let mut stream =
        UnixStream::connect(socket).await.with_context(|| format!("connecting to {}", socket.display()))?;
    stream.write_all(SUBSCRIBE).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("ralph-server closed the connection before answering subscribe");
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = memchr::memchr(b'\n', &buf) {
            let line: Vec<u8> = buf.drain(..=end).collect();
            if memchr::memmem::find(&line, b"\"id\":1").is_some() {
                if memchr::memmem::find(&line, b"\"subscribed\"").is_none() {
                    bail!("subscribe failed: {}", String::from_utf8_lossy(&line));
                }
                return Ok((stream, buf));
            }
        }
    }
}

/// Reads events until the agent's last line or the server goes away.
async fn read_events(mut stream: UnixStream, mut buf: Vec<u8>, mut tally: Tally) -> Result<Tally> {
    // Non-zero, so written (paged in) now rather than by the first reads.
    let mut chunk = vec![1u8; 64 * 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        let now = monotonic_ns();
        if n == 0 {
            return Ok(tally);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        let mut done = false;
        while let Some(end) = memchr::memchr(b'\n', &buf[start..]) {
            done |= tally.line(&buf[start..start + end], now);
            start += end + 1;
        }
        buf.drain(..start);
        if done {
            return Ok(tally);
        }
    }
}

/// Connects the subscribers (the stalled one first: the worst place for it),
/// lets the agent go, and reads until its last line.
pub(super) async fn subscribe_and_read(
    socket: &Path,
    go: &Path,
    subs: Subscribers,
    lines: usize,
    timeout: Duration,
) -> Result<Vec<Tally>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        if Instant::now() > deadline {
            bail!("no ralph-server socket at {} after 20 s", socket.display());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut stalled = None;
    let mut readers = Vec::new();
    for i in 0..subs.count {
        let (stream, buf) = subscribe(socket).await?;
        if subs.one_stalled && i == 0 {
            stalled = Some(stream);
        } else {
            readers.push(tokio::spawn(read_events(stream, buf, Tally::new(lines))));
        }
    }
    std::fs::write(go, "")?;
    let mut tallies = Vec::new();
    let until = tokio::time::Instant::now() + timeout;
    for reader in readers {
        let tally =
            tokio::time::timeout_at(until, reader).await.context("a subscriber never saw the agent's end")???;
        tallies.push(tally);
    }
    drop(stalled);
    Ok(tallies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_lines_are_timed_and_dropped_counts_added() {
        let mut tally = Tally::new(4);
        let event = br#"{"jsonrpc":"2.0","method":"event","params":{"type":"output","timestamp":"t","data":{"line":"rpcbench L 7 1000\r"}}}"#;
        assert!(!tally.line(event, 4000));
        assert_eq!(tally.samples, [3000]);
        let dropped =
            br#"{"jsonrpc":"2.0","method":"event","params":{"type":"dropped","timestamp":"t","data":{"count":42}}}"#;
        assert!(!tally.line(dropped, 0));
        assert_eq!(tally.dropped, 42);
        assert!(tally.line(br#"{"params":{"data":{"line":"rpcbench D"}}}"#, 0));
    }
}
