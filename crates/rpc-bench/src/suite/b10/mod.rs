//! B10: btcp-broker as a cluster through NATS (`BTCP_CLUSTER`), against the
//! same work on one node, in the same run. A local `nats-server -js` (on
//! PATH, or `NATS_SERVER`) and two brokers joined through it, all pinned to
//! the servers' core like every other server of the suite:
//!
//! - forwarded `tools/call` with the agent on node2 and the browser (a fast
//!   stub in this process, as in B3) on node1, against the agent on node1:
//!   throughput at window 64 (1 and 8 connections) and the p50 a cross-node
//!   hop adds at window 1;
//! - node loss: 20 times an agent on node2 with a call in flight to a
//!   browser on node1, node1 SIGKILLed, the time until the agent's -32002;
//! - memory: 10 000 idle agents in 1000 sessions owned by node1, on node2
//!   (RSS growth of node2) against the same agents on node1.
//!
//! Without a nats-server the B10 rows say so and the suite goes on.

mod cluster;
mod forwarding;
mod loss;
mod memory;

use anyhow::Result;

use self::cluster::Cluster;
use super::options::Options;
use super::row::Row;
use super::servers::Servers;

pub(super) async fn cluster(options: &Options, servers: &Servers) -> Result<Vec<Row>> {
    eprintln!("B10: btcp-broker cluster through NATS vs one node");
    let mut cluster = match Cluster::start(servers.cpu).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("  B10 skipped: {e:#}");
            return Ok(vec![Row {
                id: "B10",
                what: "btcp-broker cluster (NATS)".into(),
                baseline: "–".into(),
                measured: format!("not measured: {e:#}"),
                ratio: None,
                target: "–",
                met: None,
            }]);
        }
    };
    let mut rows = forwarding::forwarding(options, &cluster).await?;
    rows.push(loss::node_loss(&mut cluster).await?);
    rows.push(memory::remote_agents_memory(&mut cluster).await?);
    Ok(rows)
}
