//! B10's memory row: idle agents in sessions owned by another node against
//! the same agents on the owner.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::baseline;

use super::cluster::Cluster;
use crate::suite::row::Row;

/// Sessions owned by node1, and agents in each.
const SESSIONS: usize = 1000;
const AGENTS_PER_SESSION: usize = 10;

pub(super) async fn remote_agents_memory(cluster: &mut Cluster) -> Result<Row> {
    let agents = SESSIONS * AGENTS_PER_SESSION;
    eprintln!("  memory: {agents} idle agents in {SESSIONS} sessions of node1, on node2 then on node1");
    let sessions: Vec<String> = (0..SESSIONS).map(|i| format!("idle{i}")).collect();
    let browsers: Vec<String> = sessions
        .iter()
        .map(|s| format!("ws://{}/ws?clientType=browser&sessionId={s}", cluster.nodes[0].addr))
        .collect();
    let _browsers = baseline::IdleConnections::open_each(browsers.iter().map(String::as_str), SESSIONS).await?;
    cluster.wait_owned_by_node1("idle", SESSIONS).await?;

    let mut growth = [0.0; 2];
    let mut answered = [0; 2];
    // node2 (the sessions are elsewhere) first, then node1 (their owner).
    for (i, node) in [1, 0].into_iter().enumerate() {
        let node = &cluster.nodes[node];
        let pid = node.daemon.id();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = baseline::rss_mib(pid).context("reading RSS")?;
        let urls: Vec<String> =
            sessions.iter().flat_map(|s| std::iter::repeat_n(node.agent(s), AGENTS_PER_SESSION)).collect();
        let idle = baseline::IdleConnections::open_each(urls.iter().map(String::as_str), agents).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = baseline::rss_mib(pid).context("reading RSS")?;
        answered[i] = idle.ping_all().await;
        growth[i] = after - before;
        eprintln!(
            "    {}: {before:.1} → {after:.1} MiB ({:.2} KiB an agent), {}/{agents} answered ping",
            node.id,
            growth[i] * 1024.0 / agents as f64,
            answered[i]
        );
    }
    let [remote, owner] = growth;
    let ratio = remote / owner;
    let kib = |mib: f64| mib * 1024.0 / agents as f64;
    Ok(Row {
        id: "B10",
        what: format!("cluster: RSS growth for {agents} idle agents in {SESSIONS} sessions owned by another node"),
        baseline: format!("+{owner:.1} MiB on the owner ({:.1} KiB an agent)", kib(owner)),
        measured: format!("+{remote:.1} MiB ({:.1} KiB an agent), {}/{agents} answer ping", kib(remote), answered[0]),
        ratio: Some(ratio),
        target: "≤ 1.5 × on the owner",
        met: Some(ratio <= 1.5 && answered == [agents, agents]),
    })
}
