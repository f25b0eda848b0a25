//! Exact matching: every reply matched to its request by id, every round
//! trip timed. What the latency benchmarks (window 1) use, and B6's
//! extension; throughput runs count instead (`counting.rs`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use super::spec::{Load, Scheme, push_request, request};

pub(super) struct ConnStats {
    pub(super) hist: Histogram<u64>,
    pub(super) requests: u64,
    pub(super) errors: u64,
}

/// The id of a reply, or `None` for a notification.
pub(super) fn reply_id(text: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find(text, b"\"id\":")? + 5;
    let digits = text[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&text[at..at + digits]).ok()?.parse().ok()
}

fn is_error(text: &[u8]) -> bool {
    memchr::memmem::find(text, b"\"error\":").is_some()
}

/// Slots of a connection's send-time ring: far more than any window.
pub(super) const SENT_SLOTS: usize = 1 << 14;

/// Bookkeeping shared by every transport (B6's Content-Length pipe too): ids,
/// send times, the histogram.
pub(super) struct Flight {
    next_id: u64,
    /// Send times by id, in a ring indexed by the id: ids are issued in
    /// order and at most a window is out, so a slot is free again long before
    /// its id comes round (a reply that never came is overwritten, and its
    /// late copy does not match the slot's id). Cheaper than a hash map.
    sent: Vec<(u64, Instant)>,
    outstanding: usize,
    stats: ConnStats,
    measure_from: Instant,
    stop_at: Instant,
}

impl Flight {
    pub(super) fn new(measure_from: Instant, stop_at: Instant) -> Result<Self> {
        Ok(Flight {
            next_id: 1_000,
            sent: vec![(0, measure_from); SENT_SLOTS],
            outstanding: 0,
            stats: ConnStats { hist: Histogram::new(3)?, requests: 0, errors: 0 },
            measure_from,
            stop_at,
        })
    }

    pub(super) fn issue(&mut self, now: Instant) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let slot = &mut self.sent[id as usize % SENT_SLOTS];
        if slot.0 != 0 {
            // Its reply never came: that request is given up.
            self.outstanding -= 1;
        }
        *slot = (id, now);
        self.outstanding += 1;
        id
    }

    /// Records a reply; true if it was one of ours.
    pub(super) fn complete(&mut self, text: &[u8], now: Instant) -> bool {
        let Some(id) = reply_id(text) else { return false };
        let slot = &mut self.sent[id as usize % SENT_SLOTS];
        if slot.0 != id {
            return false;
        }
        let sent = slot.1;
        slot.0 = 0;
        self.outstanding -= 1;
        if now >= self.measure_from && now < self.stop_at {
            self.stats.requests += 1;
            if is_error(text) {
                self.stats.errors += 1;
            }
            let _ = self.stats.hist.record((now - sent).as_nanos() as u64);
        }
        true
    }

    pub(super) fn running(&self, now: Instant) -> bool {
        now < self.stop_at
    }

    /// Done: nothing more will be sent, and the replies are in or overdue.
    pub(super) fn finished(&self, now: Instant) -> bool {
        !self.running(now) && self.outstanding == 0 || now > self.stop_at + Duration::from_secs(10)
    }
}

pub(super) async fn connection(load: &Load, measure_from: Instant, stop_at: Instant) -> Result<ConnStats> {
    match load.scheme()? {
        Scheme::Ndjson(addr) => ndjson_connection(addr, load, measure_from, stop_at).await,
        Scheme::WebSocket => ws_connection(load, measure_from, stop_at).await,
    }
}

async fn ndjson_connection(addr: &str, load: &Load, measure_from: Instant, stop_at: Instant) -> Result<ConnStats> {
    let mut stream = TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(64 * 1024);
    if let Some((method, params)) = &load.hello {
        stream.write_all(format!("{}\n", request(1, method, params)).as_bytes()).await?;
        read_line(&mut stream, &mut buf).await?;
        buf.clear();
    }
    let mut flight = Flight::new(measure_from, stop_at)?;
    let mut out = String::new();
    let now = Instant::now();
    for _ in 0..load.window {
        let id = flight.issue(now);
        push_request(&mut out, id, &load.method, &load.params);
        out.push('\n');
    }
    stream.write_all(out.as_bytes()).await?;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("server closed the connection");
        }
        buf.extend_from_slice(&chunk[..n]);
        let now = Instant::now();
        out.clear();
        let mut start = 0;
        while let Some(end) = memchr::memchr(b'\n', &buf[start..]) {
            let line = &buf[start..start + end];
            start += end + 1;
            if flight.complete(line, now) && flight.running(now) {
                let id = flight.issue(now);
                push_request(&mut out, id, &load.method, &load.params);
                out.push('\n');
            }
        }
        buf.drain(..start);
        if !out.is_empty() {
            stream.write_all(out.as_bytes()).await?;
        }
        if flight.finished(now) {
            return Ok(flight.stats);
        }
    }
}

async fn read_line(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<()> {
    let mut byte = [0u8; 1];
    loop {
        if stream.read(&mut byte).await? == 0 {
            bail!("server closed the connection during hello");
        }
        if byte[0] == b'\n' {
            return Ok(());
        }
        buf.push(byte[0]);
    }
}

async fn ws_connection(load: &Load, measure_from: Instant, stop_at: Instant) -> Result<ConnStats> {
    let (mut ws, _) = tokio_tungstenite::connect_async(load.target.as_str())
        .await
        .with_context(|| format!("connecting to {}", load.target))?;
    if let Some((method, params)) = &load.hello {
        ws.send(Message::text(request(1, method, params))).await?;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) if reply_id(t.as_bytes()) == Some(1) => break,
                Some(Ok(_)) => continue,
                other => bail!("no answer to hello: {other:?}"),
            }
        }
    }
    let (mut sink, mut stream) = ws.split();
    let mut flight = Flight::new(measure_from, stop_at)?;
    let now = Instant::now();
    for _ in 0..load.window {
        let id = flight.issue(now);
        sink.feed(Message::text(request(id, &load.method, &load.params))).await?;
    }
    sink.flush().await?;
    loop {
        // Write what the replies at hand triggered only once no more are at hand.
        let msg = match futures_util::FutureExt::now_or_never(stream.next()) {
            Some(msg) => msg,
            None => {
                sink.flush().await?;
                stream.next().await
            }
        };
        let Some(msg) = msg else { bail!("server closed the connection") };
        let now = Instant::now();
        let text = match msg? {
            Message::Text(t) => t,
            Message::Close(_) => bail!("server closed the connection"),
            _ => continue,
        };
        if flight.complete(text.as_bytes(), now) && flight.running(now) {
            let id = flight.issue(now);
            sink.feed(Message::text(request(id, &load.method, &load.params))).await?;
        }
        if flight.finished(now) {
            break;
        }
    }
    let mut ws = sink.reunite(stream)?;
    let _ = ws.close(None).await;
    Ok(flight.stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_ids_are_found_in_replies_and_echoed_requests_but_not_notifications() {
        assert_eq!(reply_id(br#"{"jsonrpc":"2.0","id":1234,"result":{"pong":true}}"#), Some(1234));
        assert_eq!(reply_id(request(77, "ping", "{}").as_bytes()), Some(77));
        assert_eq!(
            reply_id(br#"{"jsonrpc":"2.0","method":"welcome","params":{"sessionId":"x","clientId":"y"}}"#),
            None
        );
        assert!(is_error(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#));
    }
}
