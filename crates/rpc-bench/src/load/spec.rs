//! What a run is asked to do ([`Load`]) and what it found ([`Report`]), and
//! the requests every connection writes: the leaf the load's transports and
//! the runner share.

use std::time::Duration;

use anyhow::{Result, bail};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// What to send and how hard.
#[derive(Clone, Debug)]
pub struct Load {
    /// `tcp://host:port` (NDJSON) or `ws://host:port/path?query`.
    pub target: String,
    pub method: String,
    /// JSON text of the params.
    pub params: String,
    pub window: usize,
    pub connections: usize,
    pub duration: Duration,
    pub warmup: Duration,
    /// A request (method, params JSON) sent and answered before the load starts.
    pub hello: Option<(String, String)>,
    /// Match every reply to its request by id and time every round trip,
    /// rather than count replies (see the module doc).
    pub exact: bool,
    /// The server's processes, whose CPU share over the measured time each
    /// run reports beside the load side's.
    pub servers: Vec<u32>,
}

/// The framing a load speaks, by its target's scheme.
pub(crate) enum Scheme<'a> {
    /// `tcp://HOST:PORT`: NDJSON to that address.
    Ndjson(&'a str),
    /// `ws://...`: WebSocket text frames to that URL (the whole target).
    WebSocket,
}

impl Load {
    /// The framing the target asks for; an error names a target that is neither.
    pub(crate) fn scheme(&self) -> Result<Scheme<'_>> {
        if let Some(addr) = self.target.strip_prefix("tcp://") {
            Ok(Scheme::Ndjson(addr))
        } else if self.target.starts_with("ws://") {
            Ok(Scheme::WebSocket)
        } else {
            bail!("target must start with tcp:// or ws://: {}", self.target)
        }
    }

    /// The same load, with the server's processes to watch.
    pub fn watching(mut self, pids: &[u32]) -> Load {
        self.servers = pids.to_vec();
        self
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    pub per_second: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
}

impl Report {
    pub fn line(&self) -> String {
        format!(
            "{:>10.0} req/s  p50 {:>7.1} µs  p99 {:>8.1} µs  p99.9 {:>8.1} µs  ({} requests, {} errors)",
            self.per_second, self.p50_us, self.p99_us, self.p999_us, self.requests, self.errors
        )
    }

    /// Throughput over `seconds` and the percentiles of `hist` (nanoseconds).
    pub fn from_histogram(hist: &Histogram<u64>, requests: u64, errors: u64, seconds: f64) -> Report {
        let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
        Report {
            requests,
            errors,
            seconds,
            per_second: requests as f64 / seconds,
            p50_us: us(0.5),
            p99_us: us(0.99),
            p999_us: us(0.999),
        }
    }
}

pub(crate) fn request(id: u64, method: &str, params: &str) -> String {
    let mut out = String::new();
    push_request(&mut out, id, method, params);
    out
}

/// Appends one request to `out`: the load side must cost less than the
/// fastest server it measures (a raw echo), so no allocation per request.
pub(crate) fn push_request(out: &mut String, id: u64, method: &str, params: &str) {
    out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
    out.push_str(itoa::Buffer::new().format(id));
    out.push_str(",\"method\":\"");
    out.push_str(method);
    out.push_str("\",\"params\":");
    out.push_str(params);
    out.push('}');
}
