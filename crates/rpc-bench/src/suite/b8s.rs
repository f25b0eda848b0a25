//! B8s: what btcp-broker's memory grows by when 1000 idle agents hold an SSE
//! stream (`GET /events`) open, a second after they are all in.

use std::time::Duration;

use anyhow::Result;

use crate::baseline;

use super::row::Row;
use super::servers::Servers;

pub(super) async fn sse_memory(servers: &Servers) -> Result<Row> {
    eprintln!("B8s: 1000 idle SSE agents");
    let pid = servers.broker_pid();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = baseline::rss_mib(pid).unwrap_or(0.0);
    let idle = baseline::IdleSse::open(servers.broker_addr, 1000).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = baseline::rss_mib(pid).unwrap_or(f64::NAN);
    let per = (rss - before) * 1024.0 / 1000.0;
    eprintln!("  broker RSS {before:.1} MiB -> {rss:.1} MiB: {per:.1} KiB a stream");
    drop(idle);
    Ok(Row {
        id: "B8s",
        what: "btcp-broker holding 1000 idle SSE agents".into(),
        baseline: format!("{before:.1} MiB before"),
        measured: format!("{rss:.1} MiB RSS, {per:.1} KiB a connection"),
        ratio: None,
        target: "≤ 8 KiB a connection",
        met: Some(per <= 8.0),
    })
}
