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

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::{SinkExt, StreamExt};
use rpc_core::codec::websocket;
use rpc_core::{PeerHandle, Router, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::baseline;
use crate::daemon::{Daemon, free_addr, start_on, wait_for};
use crate::load::{self, Load, Report};

use super::options::Options;
use super::row::{Row, throughput_row_of_runs};
use super::runs::{median_of, spread};
use super::servers::Servers;

/// Kills of the browser's node for the node-loss row.
const KILLS: usize = 20;
/// Sessions owned by node1 for the memory row, and agents in each.
const SESSIONS: usize = 1000;
const AGENTS_PER_SESSION: usize = 10;

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
    let mut rows = forwarding(options, &cluster).await?;
    rows.push(node_loss(&mut cluster).await?);
    rows.push(remote_agents_memory(&mut cluster).await?);
    Ok(rows)
}

/// nats-server and two brokers joined through it (node1, node2).
struct Cluster {
    cpu: Option<usize>,
    nats_url: String,
    nodes: [Node; 2],
    // Dropped after the brokers (fields drop in declaration order).
    nats: Daemon,
    store: PathBuf,
}

struct Node {
    id: &'static str,
    addr: std::net::SocketAddr,
    daemon: Daemon,
}

impl Node {
    fn start(nats_url: &str, id: &'static str, cpu: Option<usize>) -> Result<Node> {
        let addr = free_addr();
        let daemon = start_on(
            "btcp-broker",
            &[
                ("BTCP_HOST", "127.0.0.1".into()),
                ("BTCP_PORT", addr.port().to_string()),
                ("BTCP_RATE_LIMIT", "0".into()),
                ("BTCP_MAX_SESSIONS", "100000".into()),
                ("BTCP_CLUSTER", nats_url.into()),
                ("BTCP_CLUSTER_NAME", "bench".into()),
                ("BTCP_NODE_ID", id.into()),
            ],
            &[],
            cpu,
        )?;
        wait_for(addr)?;
        Ok(Node { id, addr, daemon })
    }

    fn ws(&self) -> String {
        format!("ws://{}", self.addr)
    }

    fn agent(&self, session: &str) -> String {
        format!("ws://{}/ws?clientType=agent&sessionId={session}", self.addr)
    }
}

impl Cluster {
    async fn start(cpu: Option<usize>) -> Result<Cluster> {
        let binary = std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
        let port = free_addr().port();
        let store = std::env::temp_dir().join(format!("rpc-bench-nats-{}", std::process::id()));
        std::fs::create_dir_all(&store)?;
        let mut command = Command::new(&binary);
        command
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd", &store.display().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let nats = Daemon::spawn(&mut command, cpu)
            .with_context(|| format!("no nats-server ({binary}; install it or set NATS_SERVER)"))?;
        wait_for(([127, 0, 0, 1], port).into())?;
        let nats_url = format!("nats://127.0.0.1:{port}");
        let nodes = [Node::start(&nats_url, "node1", cpu)?, Node::start(&nats_url, "node2", cpu)?];
        let cluster = Cluster { cpu, nats_url, nodes, nats, store };
        cluster.wait_joined().await?;
        Ok(cluster)
    }

    /// Waits until each node's `/health` lists both.
    async fn wait_joined(&self) -> Result<()> {
        for node in &self.nodes {
            wait_until(&format!("{} to see 2 nodes", node.id), || async {
                let health = get_json(node.addr, "/health").await.ok()?;
                (health["nodes"].as_array()?.len() == 2).then_some(())
            })
            .await?;
        }
        Ok(())
    }

    /// Waits until node2's directory lists `count` sessions whose browser node1 holds.
    async fn wait_owned_by_node1(&self, prefix: &str, count: usize) -> Result<()> {
        wait_until(&format!("node2 to see {count} sessions of node1"), || async {
            let rows = get_json(self.nodes[1].addr, "/sessions").await.ok()?;
            let owned = rows
                .as_array()?
                .iter()
                .filter(|r| {
                    r["id"].as_str().is_some_and(|id| id.starts_with(prefix))
                        && r["node"] == "node1"
                        && r["hasBrowser"] == true
                })
                .count();
            (owned >= count).then_some(())
        })
        .await
    }

    fn nats_pid(&self) -> u32 {
        self.nats.id()
    }

    /// SIGKILLs node1 and starts it again (same id, new port), joined.
    async fn restart_node1(&mut self) -> Result<()> {
        self.nodes[0].daemon.kill();
        self.nodes[0] = Node::start(&self.nats_url, "node1", self.cpu)?;
        self.wait_joined().await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

async fn wait_until<F, Fut>(what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<()>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if check().await.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("timed out waiting for {what}")
}

/// A GET on the broker's HTTP side (`/health`, `/sessions`), as JSON.
async fn get_json(addr: std::net::SocketAddr, path: &str) -> Result<Value> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let split = memchr::memmem::find(&response, b"\r\n\r\n").context("no end of headers")?;
    let (head, body) = (String::from_utf8_lossy(&response[..split]).to_ascii_lowercase(), &response[split + 4..]);
    let body = if head.contains("transfer-encoding: chunked") { dechunk(body)? } else { body.to_vec() };
    Ok(serde_json::from_slice(&body)?)
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = memchr::memmem::find(body, b"\r\n").context("bad chunk")?;
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line])?.trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(body.get(line + 2..line + 2 + size).context("short chunk")?);
        body = body.get(line + 4 + size..).context("short chunk")?;
    }
}

// ---------------------------------------------------------------------------
// Forwarded tools/call: cross node vs one node.

async fn forwarding(options: &Options, cluster: &Cluster) -> Result<Vec<Row>> {
    let [node1, node2] = &cluster.nodes;
    let _browser = baseline::btcp_browser(&node1.ws(), "b10").await?;
    cluster.wait_owned_by_node1("b10", 1).await?;
    let params = r#"{"name":"echo","arguments":{}}"#;
    let mut rows = Vec::new();
    for conns in [1, 8] {
        let same = options.load(&node1.agent("b10"), "tools/call", params, 64, conns);
        let cross = options.load(&node2.agent("b10"), "tools/call", params, 64, conns);
        let loads = [("one node tools/call", &same), ("cross-node tools/call", &cross)];
        let (m, busy) =
            compare_with_cpu(options, &loads, &[node1.daemon.id(), node2.daemon.id(), cluster.nats_pid()]).await?;
        // busy[load][process]: CPU share; each server's CPU a call in µs.
        let us = |load: usize, process: usize| busy[load][process].1;
        let what = format!(
            "cluster: forwarded `tools/call`, agent and browser on different nodes, window 64, {conns} conn. \
             Load side busy {:.0}% one node, {:.0}% cross. Server CPU a call: one node {:.1} µs; \
             cross {:.1} µs (agent's node {:.1}, nats-server {:.1}, browser's node {:.1})",
            busy[0][0].0 * 100.0,
            busy[1][0].0 * 100.0,
            us(0, 1),
            us(1, 1) + us(1, 2) + us(1, 3),
            us(1, 2),
            us(1, 3),
            us(1, 1),
        );
        rows.push(throughput_row_of_runs("B10", what, &m[0], &m[1], 0.5, "≥ 0.5 × one node"));
    }
    let same = options.load(&node1.agent("b10"), "tools/call", params, 1, 1);
    let cross = options.load(&node2.agent("b10"), "tools/call", params, 1, 1);
    let loads = [("one node RTT", &same), ("cross-node RTT", &cross)];
    let (m, busy) =
        compare_with_cpu(options, &loads, &[node1.daemon.id(), node2.daemon.id(), cluster.nats_pid()]).await?;
    let mut row = added_latency_row(&m[0], &m[1]);
    let us = |load: usize, process: usize| busy[load][process].1;
    row.what += &format!(
        ". Server CPU a call: one node {:.1} µs; cross {:.1} µs (agent's node {:.1}, nats-server {:.1}, \
         browser's node {:.1})",
        us(0, 1),
        us(1, 1) + us(1, 2) + us(1, 3),
        us(1, 2),
        us(1, 3),
        us(1, 1),
    );
    rows.push(row);
    Ok(rows)
}

/// [`Options::compare`], also reading how busy each process was during each
/// load: this one (the load side: the client and the browser stub; near
/// 100 % the client, not the servers, set the pace) first, then `watched`
/// (pid each). For each load and process, the median over the runs of its
/// CPU share (CPU seconds over wall seconds) and of its CPU µs a request
/// (the share over the rate: robust to other work on the machine, which
/// moves the rate and the share together).
async fn compare_with_cpu(
    options: &Options,
    loads: &[(&str, &Load)],
    watched: &[u32],
) -> Result<(Vec<Vec<Report>>, Vec<Vec<(f64, f64)>>)> {
    let pids: Vec<String> = std::iter::once("self".to_owned()).chain(watched.iter().map(u32::to_string)).collect();
    let mut runs: Vec<Vec<Report>> = vec![Vec::new(); loads.len()];
    let mut busy: Vec<Vec<Vec<(f64, f64)>>> = vec![vec![Vec::new(); pids.len()]; loads.len()];
    for _ in 0..options.repeat.max(1) {
        for (i, (label, load)) in loads.iter().enumerate() {
            let (cpu, wall): (Vec<f64>, _) = (pids.iter().map(|p| cpu_seconds(p)).collect(), Instant::now());
            let report = load::run(load).await.with_context(|| format!("{label} ({})", load.target))?;
            let wall = wall.elapsed().as_secs_f64();
            let shares: Vec<f64> = pids.iter().zip(&cpu).map(|(p, before)| (cpu_seconds(p) - before) / wall).collect();
            let shown: Vec<String> = shares.iter().map(|s| format!("{:.0}%", s * 100.0)).collect();
            eprintln!("  {label:<40} {} (busy: load side, then servers: {})", report.line(), shown.join(" "));
            for (b, share) in busy[i].iter_mut().zip(shares) {
                b.push((share, share / report.per_second * 1e6));
            }
            runs[i].push(report);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians = busy
        .into_iter()
        .map(|per_pid| {
            per_pid
                .into_iter()
                .map(|b| (median(b.iter().map(|x| x.0).collect()), median(b.iter().map(|x| x.1).collect())))
                .collect()
        })
        .collect();
    Ok((runs, medians))
}

/// A process's CPU time so far (user and system, every thread), `self` or a pid.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name in brackets: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // USER_HZ, 100 on Linux.
    (ticks(14) + ticks(15)) / 100.0
}

/// What the cross-node hop adds to the p50 round trip at window 1.
fn added_latency_row(same: &[Report], cross: &[Report]) -> Row {
    let p50 = |r: &Report| r.p50_us;
    let added = median_of(cross, p50) - median_of(same, p50);
    Row {
        id: "B10",
        what: "cluster: forwarded `tools/call` p50 RTT, window 1, added by the cross-node hop".into(),
        baseline: format!("{} one node", spread(same, p50, 1, " µs")),
        measured: format!("{} cross node: +{added:.1} µs", spread(cross, p50, 1, " µs")),
        ratio: Some(median_of(cross, p50) / median_of(same, p50)),
        target: "added p50 ≤ 150 µs",
        met: Some(added <= 150.0 && cross.iter().all(|r| r.errors == 0)),
    }
}

// ---------------------------------------------------------------------------
// Node loss: time from SIGKILL of the browser's node to the agent's -32002.

async fn node_loss(cluster: &mut Cluster) -> Result<Row> {
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

// ---------------------------------------------------------------------------
// Memory: idle agents in sessions owned by another node vs on the owner.

async fn remote_agents_memory(cluster: &mut Cluster) -> Result<Row> {
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
