//! B1: supex-bridge's `ping` throughput over TCP NDJSON, window 64, at 1 and
//! 8 connections, against the raw NDJSON echo.

use anyhow::Result;

use super::options::Options;
use super::row::{Row, throughput_row_with_busy};
use super::servers::Servers;

pub(super) async fn bridge_ping_throughput(options: &Options, servers: &Servers) -> Result<Vec<Row>> {
    eprintln!("B1: supex-bridge ping over TCP NDJSON vs raw echo");
    let mut rows = Vec::new();
    for conns in [1, 8] {
        let base = options.load(&servers.echo, "ping", "{}", 64, conns).watching(&[servers.echo_pid]);
        let got = options.load(&servers.bridge, "ping", "{}", 64, conns).watching(&[servers.bridge_pid]);
        let m = options.compare(&[("echo", &base), ("supex-bridge ping", &got)]).await?;
        let what = format!("supex-bridge `ping`, window 64, {conns} conn");
        let (sides, names) = ((&m[0], &m[1]), ("echo", "supex-bridge"));
        rows.push(throughput_row_with_busy("B1", what, sides, names, 0.5, "≥ 0.5 × echo"));
    }
    Ok(rows)
}
