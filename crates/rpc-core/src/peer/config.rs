//! A connection's limits and timeouts.

use std::time::Duration;

/// Limits and timeouts of one connection. The defaults are the engine's
/// documented budgets (README, "The engine").
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// Incoming requests whose handlers run at once. With the write budget it
    /// bounds what one connection can make the daemon hold: up to
    /// `write_budget` of queued replies plus one reply per running handler.
    pub max_concurrent: usize,
    /// Requests waiting for a handler slot and notifications waiting to run,
    /// together: at most this many...
    pub backlog: usize,
    /// ...and this many bytes (of their frames). Past either, a request is
    /// answered `overloaded` and a notification dropped.
    pub backlog_bytes: usize,
    /// Messages refused in a row (overloaded requests, dropped notifications)
    /// after which the peer is judged to be flooding and disconnected.
    pub flood_limit: usize,
    /// Outbound messages waiting to be written: at most this many...
    pub write_queue: usize,
    /// ...and this many bytes. While either is reached no new incoming request
    /// is started, and producers on other tasks wait for room.
    pub write_budget: usize,
    /// How long writes may make no progress while replies are owed before the
    /// other side is judged not to be reading and the connection is dropped.
    pub write_stall: Duration,
    /// Timeout of [`PeerHandle::request`](super::PeerHandle::request)
    /// (`request_raw` takes its own).
    pub request_timeout: Duration,
    /// Longest batch accepted.
    pub max_batch: usize,
    /// Interval between liveness pings on transports that want them (WebSocket),
    /// and how many may go unanswered.
    pub keepalive: Duration,
    pub keepalive_misses: u32,
    /// A handshake (see [`PeerHandle::handshake_done`](super::PeerHandle::handshake_done))
    /// the other side must complete within this time, or the connection is closed.
    pub handshake_deadline: Option<Duration>,
    /// Give our requests ids the other side cannot predict (still unique, and
    /// below 2^53 so JavaScript reads them exactly), for a daemon that
    /// accepts answers on a channel where a third party could guess the next
    /// id (BTCP's SSE fallback).
    pub unguessable_ids: bool,
}

/// Default number of messages in the incoming backlog.
pub const DEFAULT_BACKLOG: usize = 1024;
/// Default bytes in the incoming backlog.
pub const DEFAULT_BACKLOG_BYTES: usize = 16 * 1024 * 1024;
/// Default byte budget of the outbox.
pub const DEFAULT_WRITE_BUDGET: usize = 8 * 1024 * 1024;

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            max_concurrent: 32,
            backlog: DEFAULT_BACKLOG,
            backlog_bytes: DEFAULT_BACKLOG_BYTES,
            flood_limit: 4 * DEFAULT_BACKLOG,
            write_queue: 1024,
            write_budget: DEFAULT_WRITE_BUDGET,
            write_stall: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            max_batch: 1000,
            keepalive: Duration::from_secs(30),
            keepalive_misses: 2,
            handshake_deadline: None,
            unguessable_ids: false,
        }
    }
}
