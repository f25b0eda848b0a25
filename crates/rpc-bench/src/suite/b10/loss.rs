//! B10's node-loss row: an agent on node2 with a call in flight to a browser
//! on node1, node1 SIGKILLed, the time until the agent gets -32002.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::{SinkExt, StreamExt};
use rpc_core::codec::websocket;
use rpc_core::{PeerHandle, Router, RpcError};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::cluster::Cluster;
use crate::suite::row::Row;

/// Kills of the browser's node.
const KILLS: usize = 20;

pub(super) async fn node_loss(cluster: &mut Cluster) -> Result<Row> {
    eprintln!("  node loss: {KILLS} kills of the browser's node, a call in flight from the other");
    let mut took = Vec::with_capacity(KILLS);
    for round in 0..KILLS {
        let session = format!("loss{round}");
        let _browser = silent_browser(&cluster.nodes[0].ws(), &session).await?;
        cluster.wait_owned_by_node1(&session, 1).await?;
        let (ws, _) = tokio_tungstenite::connect_async(cluster.nodes[1].agent(&session)).await?;
        let (mut sink, mut stream) = ws.split();
        let call = |id: &str, name: &str| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": name, "arguments": {}, "timeout": 60000}})
            .to_string()
        };
        sink.send(Message::text(call("warm", "echo"))).await?;
        let warm = reply(&mut stream, "warm").await?;
        if warm.get("result").is_none() {
            bail!("warm-up call failed: {warm}");
        }
        sink.send(Message::text(call("slow", "slow"))).await?;
        // Kills spread over node1's heartbeat period (250 ms), so they do not
        // all fall at the same moment after one.
        tokio::time::sleep(Duration::from_millis(100 + (250 * round / KILLS) as u64)).await;
        let killed = Instant::now();
        cluster.nodes[0].daemon.kill();
        let answer = reply(&mut stream, "slow").await?;
        let elapsed = killed.elapsed();
        if answer["error"]["code"] != -32002 {
            bail!("the call in flight got {answer}, not -32002");
        }
        eprintln!("    kill {round:>2}: -32002 after {:.0} ms", elapsed.as_secs_f64() * 1000.0);
        took.push(elapsed);
        cluster.restart_node1().await?;
    }
    took.sort();
    let at = |p: f64| took[((took.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0;
    let (p50, p99) = (at(0.5), at(0.99));
    Ok(Row {
        id: "B10",
        what: format!("cluster: node loss, browser's node SIGKILLed with a call in flight ({KILLS} kills)"),
        baseline: "–".into(),
        measured: format!(
            "-32002 after p50 {p50:.0} ms, p99 {p99:.0} ms (min {:.0}, max {:.0})",
            at(0.0),
            took.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        ),
        ratio: None,
        target: "p99 ≤ 1 s",
        met: Some(p99 <= 1000.0),
    })
}

/// A browser with two tools: `echo` answers at once, `slow` never does.
async fn silent_browser(base: &str, session: &str) -> Result<PeerHandle> {
    let url = format!("{base}/ws?clientType=browser&sessionId={session}");
    let (ws, _) =
        tokio_tungstenite::connect_async(url.as_str()).await.with_context(|| format!("connecting to {url}"))?;
    let router = Router::<()>::new()
        .method("tools/call", |_, params: Value| async move {
            if params["name"] == "slow" {
                std::future::pending::<()>().await;
            }
            Ok::<_, RpcError>(json!({"content": [{"type": "text", "text": "ok"}], "isError": false}))
        })
        .build()?;
    let peer = rpc_core::client::spawn(websocket::transport(ws), router, ());
    let schema = json!({"type": "object"});
    let tools = json!({"tools": [
        {"name": "echo", "description": "answers at once", "inputSchema": schema},
        {"name": "slow", "description": "never answers", "inputSchema": schema},
    ]});
    let _: Value = peer.request("tools/register", tools).await.context("tools/register")?;
    Ok(peer)
}

/// The reply to `id` on an agent's socket (up to 10 s).
async fn reply<S>(stream: &mut S, id: &str) -> Result<Value>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let wait = async {
        while let Some(message) = stream.next().await {
            if let Message::Text(text) = message? {
                let value: Value = serde_json::from_str(&text)?;
                if value["id"] == id {
                    return Ok(value);
                }
            }
        }
        bail!("the agent's connection closed before the reply to {id}")
    };
    tokio::time::timeout(Duration::from_secs(10), wait).await.with_context(|| format!("no reply to {id} in 10 s"))?
}
