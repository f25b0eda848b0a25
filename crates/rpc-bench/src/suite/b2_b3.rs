//! B2, B2+ and B3: btcp-broker over WebSocket, window 64, at 1 and 8
//! connections. B2 is its `ping` against jsonrpsee's, B2+ the same against a
//! raw WebSocket echo, B3 a `tools/call` forwarded to a browser (this process,
//! on the load side's core) against the broker's own `ping`. The four loads
//! alternate in one comparison, so the three ratios share their runs.

use anyhow::Result;

use crate::baseline;

use super::options::Options;
use super::row::{Row, throughput_row_with_busy};
use super::runs::Runs;
use super::servers::Servers;

/// Every run of the four loads at one connection count.
struct BrokerRuns {
    jsonrpsee_ping: Runs,
    broker_ping: Runs,
    forwarded_call: Runs,
    ws_echo: Runs,
}

/// The rows of B2 and B2+ (if `b2` is asked) and of B3 (if `b3` is), one
/// connection count after the other.
pub(super) async fn broker_ping_and_forwarding(options: &Options, servers: &Servers) -> Result<Vec<Row>> {
    let _browser = baseline::btcp_browser(&format!("ws://{}", servers.broker_addr), "bench").await?;
    eprintln!("B2/B3: btcp-broker ping vs jsonrpsee; forwarded tools/call vs broker ping");
    let mut rows = Vec::new();
    for conns in [1, 8] {
        let runs = alternate(options, servers, conns).await?;
        if options.wants("b2") {
            rows.extend(broker_ping_rows(conns, &runs));
        }
        if options.wants("b3") {
            rows.push(forwarded_call_row(conns, &runs));
        }
    }
    Ok(rows)
}

async fn alternate(options: &Options, servers: &Servers, conns: usize) -> Result<BrokerRuns> {
    let forward = format!("ws://{}/ws?clientType=agent&sessionId=bench", servers.broker_addr);
    let broker = [servers.broker_pid()];
    let base = options.load(&servers.jsonrpsee, "ping", "{}", 64, conns).watching(&[servers.jsonrpsee_pid]);
    let echoed = options.load(&servers.ws_echo, "ping", "{}", 64, conns).watching(&[servers.ws_echo_pid]);
    let ping = options.load(&servers.agent, "ping", "{}", 64, conns).watching(&broker);
    let call = options.load(&forward, "tools/call", r#"{"name":"echo","arguments":{}}"#, 64, conns).watching(&broker);
    let mut m = options
        .compare(&[
            ("jsonrpsee ping", &base),
            ("btcp-broker ping", &ping),
            ("forwarded tools/call", &call),
            ("WebSocket echo", &echoed),
        ])
        .await?
        .into_iter();
    let mut next = || m.next().unwrap();
    Ok(BrokerRuns { jsonrpsee_ping: next(), broker_ping: next(), forwarded_call: next(), ws_echo: next() })
}

/// B2 and B2+: the broker's `ping` against jsonrpsee's and against the echo.
fn broker_ping_rows(conns: usize, runs: &BrokerRuns) -> [Row; 2] {
    let what = format!("btcp-broker `ping` (WS), window 64, {conns} conn");
    let sides = (&runs.jsonrpsee_ping, &runs.broker_ping);
    let b2 = throughput_row_with_busy("B2", what, sides, ("jsonrpsee", "btcp-broker"), 4.0, "≥ 4 × jsonrpsee");
    let what = format!("btcp-broker `ping` (WS), window 64, {conns} conn, against a raw WS echo");
    let sides = (&runs.ws_echo, &runs.broker_ping);
    let b2_plus = throughput_row_with_busy("B2+", what, sides, ("WS echo", "btcp-broker"), 0.8, "≥ 0.8 × WS echo");
    [b2, b2_plus]
}

/// B3: a forwarded `tools/call` against the broker's own `ping`.
fn forwarded_call_row(conns: usize, runs: &BrokerRuns) -> Row {
    let what = format!("btcp-broker forwarded `tools/call`, {conns} conn");
    let sides = (&runs.broker_ping, &runs.forwarded_call);
    throughput_row_with_busy("B3", what, sides, ("broker ping", "forwarded call"), 0.4, "≥ 0.4 × broker ping")
}
