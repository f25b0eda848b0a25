//! B10's cluster: a `nats-server -js` and two brokers joined through it, all
//! on the servers' core, and what the benchmarks ask of it over HTTP (the
//! nodes each node sees, the sessions it lists).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::daemon::{Daemon, free_addr, start_on, wait_for};

/// nats-server and two brokers joined through it (node1, node2).
pub(super) struct Cluster {
    cpu: Option<usize>,
    nats_url: String,
    pub(super) nodes: [Node; 2],
    // Dropped after the brokers (fields drop in declaration order).
    nats: Daemon,
    store: PathBuf,
}

pub(super) struct Node {
    pub(super) id: &'static str,
    pub(super) addr: std::net::SocketAddr,
    pub(super) daemon: Daemon,
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

    pub(super) fn ws(&self) -> String {
        format!("ws://{}", self.addr)
    }

    pub(super) fn agent(&self, session: &str) -> String {
        format!("ws://{}/ws?clientType=agent&sessionId={session}", self.addr)
    }
}

impl Cluster {
    pub(super) async fn start(cpu: Option<usize>) -> Result<Cluster> {
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
    pub(super) async fn wait_owned_by_node1(&self, prefix: &str, count: usize) -> Result<()> {
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

    pub(super) fn nats_pid(&self) -> u32 {
        self.nats.id()
    }

    /// SIGKILLs node1 and starts it again (same id, new port), joined.
    pub(super) async fn restart_node1(&mut self) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use crate::suite::b10::cluster::dechunk;

    #[test]
    fn a_chunked_body_is_joined_and_a_short_one_refused() {
        let body = b"5\r\n[{\"a\"\r\n3\r\n:1}\r\n1\r\n]\r\n0\r\n\r\n";
        assert_eq!(dechunk(body).unwrap(), b"[{\"a\":1}]");
        assert!(dechunk(b"9\r\nshort\r\n").is_err());
    }
}
