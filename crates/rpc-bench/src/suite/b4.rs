//! B4: round-trip latency at window 1 (one request at a time on one
//! connection), p50 and p99, of supex-bridge's and btcp-broker's `ping`
//! against the raw echo of each one's transport (NDJSON, WebSocket).

use anyhow::Result;

use super::options::Options;
use super::row::{Row, latency_row_of_runs};
use super::servers::Servers;

pub(super) async fn round_trip_latency(options: &Options, servers: &Servers) -> Result<Vec<Row>> {
    eprintln!("B4: round trip at window 1 vs raw echo (NDJSON for the bridge, WebSocket for the broker)");
    let base = options.load(&servers.echo, "ping", "{}", 1, 1);
    let ws_base = options.load(&servers.ws_echo, "ping", "{}", 1, 1);
    let bridge_ping = options.load(&servers.bridge, "ping", "{}", 1, 1);
    let broker_ping = options.load(&servers.agent, "ping", "{}", 1, 1);
    let m = options
        .compare(&[
            ("echo RTT", &base),
            ("WebSocket echo RTT", &ws_base),
            ("supex-bridge RTT", &bridge_ping),
            ("btcp-broker RTT", &broker_ping),
        ])
        .await?;
    // Each daemon against the raw echo of its own transport: the broker's
    // round trip against an NDJSON echo would count the client's WebSocket
    // framing (about 4 µs a round trip here) as the broker's.
    let mut rows = Vec::new();
    for (name, echo, got) in [("supex-bridge", &m[0], &m[2]), ("btcp-broker", &m[1], &m[3])] {
        let pair = (&echo.reports[..], &got.reports[..]);
        let what = format!("{name} `ping` RTT p50, window 1");
        rows.push(latency_row_of_runs("B4", what, pair, |r| r.p50_us, 1.15, "≤ 1.15 × echo"));
        let what = format!("{name} `ping` RTT p99, window 1");
        rows.push(latency_row_of_runs("B4", what, pair, |r| r.p99_us, 1.15, "≤ 1.15 × echo"));
    }
    Ok(rows)
}
