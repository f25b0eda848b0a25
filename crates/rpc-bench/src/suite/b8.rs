//! B8: btcp-broker's resident memory holding `--idle` idle WebSocket agents
//! (10 000 by default), read in steps on the way there (the memory curve of
//! B9's picture), each step checking that every connection still answers.

use std::time::Duration;

use anyhow::Result;

use crate::baseline;

use super::options::Options;
use super::row::Row;
use super::servers::Servers;

/// The idle connection counts of the memory curve (B8 is the last).
const IDLE_STEPS: [usize; 5] = [0, 1000, 2500, 5000, 10_000];

/// The broker's resident memory holding a number of idle WebSocket agents.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MemoryPoint {
    pub(super) connections: usize,
    pub(super) rss_mib: f64,
    pub(super) answered: usize,
}

impl MemoryPoint {
    pub(super) fn kib_per_connection(&self, idle_mib: f64) -> f64 {
        if self.connections == 0 { 0.0 } else { (self.rss_mib - idle_mib) * 1024.0 / self.connections as f64 }
    }
}

/// Opens idle agents in steps up to `--idle` and reads the broker's RSS at
/// each step (after a second to settle); at each step every connection
/// opened so far must still answer `ping`.
pub(super) async fn idle_memory(options: &Options, servers: &Servers) -> Result<Vec<MemoryPoint>> {
    eprintln!("B8/B9: broker memory by idle WebSocket connections");
    let pid = servers.broker_pid();
    let steps: Vec<usize> = IDLE_STEPS.iter().copied().filter(|&n| n <= options.idle).chain([options.idle]).collect();
    let mut steps = steps;
    steps.dedup();
    let mut held = Vec::new();
    let mut points = Vec::new();
    let mut opened = 0;
    for step in steps {
        held.push(baseline::IdleConnections::open(&servers.agent, step - opened).await?);
        opened = step;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss_mib = baseline::rss_mib(pid).unwrap_or(f64::NAN);
        let mut answered = 0;
        for idle in &held {
            answered += idle.ping_all().await;
        }
        eprintln!("  {step:>6} idle connections: {rss_mib:.1} MiB RSS, {answered} answered ping");
        points.push(MemoryPoint { connections: step, rss_mib, answered });
    }
    Ok(points)
}

/// The last step against the first (no agents yet).
pub(super) fn idle_memory_row(memory: &[MemoryPoint]) -> Row {
    let last = memory.last().copied().unwrap_or_default();
    Row {
        id: "B8",
        what: format!("btcp-broker holding {} idle WS connections", last.connections),
        baseline: format!("{:.1} MiB at start", memory[0].rss_mib),
        measured: format!(
            "{:.1} MiB RSS ({:.1} KiB a connection), {}/{} answer ping",
            last.rss_mib,
            last.kib_per_connection(memory[0].rss_mib),
            last.answered,
            last.connections
        ),
        ratio: None,
        target: "≤ 50 MiB (≤ 4 KiB a connection), all answer",
        met: Some(
            last.rss_mib <= 50.0
                && last.kib_per_connection(memory[0].rss_mib) <= 4.0
                && last.answered == last.connections,
        ),
    }
}
