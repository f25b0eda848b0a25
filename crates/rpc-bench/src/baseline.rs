//! The baselines measured in the same run as the daemons, and the helpers the
//! daemon benchmarks need (a fast browser stub for BTCP, idle connections).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::load;
use futures_util::{SinkExt, StreamExt};
use rpc_core::codec::websocket;
use rpc_core::router::Answer;
use rpc_core::{NoParams, PeerHandle, Router};
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// B1/B4 baseline: echoes bytes back without looking at them, so a client's
/// requests come back as their own "replies".
pub async fn echo_server(addr: SocketAddr) -> Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    Ok(local)
}

/// B2+ baseline: a raw tokio-tungstenite WebSocket echo. Text frames go back
/// as they came (no JSON), every frame already read before one write, the
/// way the engine batches its writes: the limit for a WebSocket JSON-RPC
/// server, as the NDJSON echo is for TCP.
pub async fn ws_echo_server(addr: SocketAddr) -> Result<SocketAddr> {
    use futures_util::FutureExt;
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let config = websocket::config(websocket::DEFAULT_MAX_MESSAGE);
                let Ok(ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await else { return };
                let (mut sink, mut stream) = ws.split();
                while let Some(Ok(first)) = stream.next().await {
                    let mut message = first;
                    loop {
                        if message.is_text() && sink.feed(message).await.is_err() {
                            return;
                        }
                        match stream.next().now_or_never() {
                            Some(Some(Ok(next))) => message = next,
                            Some(_) => return,
                            None => break,
                        }
                    }
                    if sink.flush().await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(local)
}

/// B8s: idle SSE agents, each an open `GET /events` stream whose welcome
/// event has arrived.
pub struct IdleSse {
    _streams: Vec<tokio::net::TcpStream>,
}

impl IdleSse {
    pub async fn open(addr: SocketAddr, count: usize) -> Result<IdleSse> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut streams = Vec::with_capacity(count);
        for _ in 0..count {
            let mut stream = tokio::net::TcpStream::connect(addr).await?;
            let request =
                format!("GET /events?clientType=agent HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
            stream.write_all(request.as_bytes()).await?;
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while memchr::memmem::find(&seen, b"welcome").is_none() {
                let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
                    .await
                    .context("no welcome event within 10 s")??;
                if n == 0 {
                    bail!("the broker closed an SSE stream: {}", String::from_utf8_lossy(&seen));
                }
                seen.extend_from_slice(&buf[..n]);
            }
            streams.push(stream);
        }
        Ok(IdleSse { _streams: streams })
    }
}

/// B2 baseline: jsonrpsee's WebSocket server with a `ping` method.
pub async fn jsonrpsee_server(addr: SocketAddr) -> Result<(SocketAddr, jsonrpsee::server::ServerHandle)> {
    // Its default of 100 connections would refuse B9's 512.
    let config = jsonrpsee::server::ServerConfig::builder().max_connections(10_000).build();
    let server = jsonrpsee::server::Server::builder().set_config(config).build(addr).await?;
    let local = server.local_addr()?;
    let mut module = jsonrpsee::RpcModule::new(());
    module.register_method("ping", |_, _, _| json!({"pong": true}))?;
    Ok((local, server.start(module)))
}

/// The engine alone: rpc-core serving `ping` over NDJSON/TCP and WebSocket, to
/// see what the daemons' own work costs on top of it.
pub async fn core_servers(ndjson: SocketAddr, ws: SocketAddr) -> Result<(SocketAddr, SocketAddr)> {
    let router = Router::<()>::new().method("ping", |_, _: NoParams| async { Ok(json!({"pong": true})) }).build()?;
    let shutdown = rpc_core::Shutdown::new();
    let listener = rpc_core::listen::bind_tcp(ndjson)?;
    let ndjson = listener.local_addr()?;
    let r = router.clone();
    let limits = rpc_core::listen::NdjsonLimits { max_connections: 100_000, ..Default::default() };
    tokio::spawn(async move {
        let listener = rpc_core::listen::Listener::Tcp(listener);
        rpc_core::listen::serve_ndjson(listener, "core-ndjson", limits, &shutdown, r, || ()).await
    });
    let listener = TcpListener::bind(ws).await?;
    let ws = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let router = router.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let config = websocket::config(websocket::DEFAULT_MAX_MESSAGE);
                let Ok(ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await else {
                    return;
                };
                let (_peer, conn) =
                    rpc_core::Connection::new(websocket::transport(ws), router, Arc::new(()), Default::default());
                conn.run().await;
            });
        }
    });
    Ok((ndjson, ws))
}

/// The Ruby driver supex-bridge embeds, for B5's bare-pipe baseline.
const SUPEX_DRIVER: &str = include_str!("../../../bins/supex-bridge/src/runtime/driver.rb");

/// B5 baseline: `1+1` evaluated by supex-bridge's own driver over a bare pipe
/// (requests on its stdin, replies on fd 3), one at a time, for `duration`.
pub async fn ruby_pipe_eval(
    ruby: &str,
    duration: Duration,
    warmup: Duration,
    cpu: Option<usize>,
) -> Result<load::Report> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    // fd 3 (replies) goes to our pipe; the driver's console output is dropped.
    // Ruby runs on the servers' core, as the bridge's Ruby does.
    let pin = cpu.map(|cpu| format!("taskset -c {cpu} ")).unwrap_or_default();
    let script = format!("exec {pin}\"$0\" -e \"$SUPEX_DRIVER\" 3>&1 >/dev/null 2>&1");
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &script, ruby])
        .env("SUPEX_DRIVER", SUPEX_DRIVER)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {ruby}"))?;
    let mut requests = child.stdin.take().context("stdin")?;
    let mut replies = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let ready = replies.next_line().await?.context("the driver exited before it was ready")?;
    if !ready.contains("\"ready\":true") {
        bail!("unexpected first line from the driver: {ready}");
    }
    let mut hist = hdrhistogram::Histogram::<u64>::new(3)?;
    let started = Instant::now();
    let (measure_from, stop_at) = (started + warmup, started + warmup + duration);
    let mut id = 0u64;
    loop {
        let now = Instant::now();
        if now >= stop_at {
            break;
        }
        id += 1;
        let line = format!("{{\"id\":{id},\"op\":\"eval\",\"code\":\"1+1\",\"scope\":\"fresh\",\"show\":\"to_s\"}}\n");
        requests.write_all(line.as_bytes()).await?;
        let reply = replies.next_line().await?.context("the driver exited")?;
        if !reply.contains("\"value\":\"2\"") {
            bail!("unexpected reply: {reply}");
        }
        if now >= measure_from {
            hist.record(now.elapsed().as_nanos() as u64)?;
        }
    }
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok(load::Report {
        requests: hist.len(),
        errors: 0,
        seconds: duration.as_secs_f64(),
        per_second: hist.len() as f64 / duration.as_secs_f64(),
        p50_us: us(0.5),
        p99_us: us(0.99),
        p999_us: us(0.999),
    })
}

/// B3's browser side: connects to a BTCP broker as the browser of `session`,
/// registers an `echo` tool and answers every call at once.
pub async fn btcp_browser(base: &str, session: &str) -> Result<PeerHandle> {
    let url = format!("{base}/ws?clientType=browser&sessionId={session}");
    let (ws, _) =
        tokio_tungstenite::connect_async(url.as_str()).await.with_context(|| format!("connecting to {url}"))?;
    // A browser whose tool costs nothing: the call is answered by the read
    // loop itself (`method_now`), its arguments skipped rather than built
    // into a `Value`, its result written as it stands. B3 measures the
    // broker's forwarding; a stub that built and serialised a `Value` a call
    // took more of the load side's core than the agents it answers.
    static ANSWER: LazyLock<Box<RawValue>> = LazyLock::new(|| {
        RawValue::from_string(r#"{"content":[{"type":"text","text":"ok"}],"isError":false}"#.to_owned())
            .expect("the stub's answer is JSON")
    });
    let router = Router::<()>::new()
        .method_now("tools/call", |_, _: IgnoredAny| Answer::Now(Ok(&**ANSWER)))
        .method_now("ping", |_, _: NoParams| Answer::Now(Ok(json!({"pong": true}))))
        .build()?;
    let peer = rpc_core::client::spawn(websocket::transport(ws), router, ());
    let tools =
        json!({"tools": [{"name": "echo", "description": "answers at once", "inputSchema": {"type": "object"}}]});
    let registered: Value = peer.request("tools/register", tools).await.context("tools/register")?;
    if registered.get("registered") != Some(&json!(1)) {
        bail!("unexpected tools/register answer: {registered}");
    }
    Ok(peer)
}

/// B8: opens `count` WebSocket connections and keeps them idle. Returns how many
/// are open and a function-like handle to ping all of them.
pub struct IdleConnections {
    sockets: Vec<tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<bool>>>,
}

impl IdleConnections {
    pub async fn open(url: &str, count: usize) -> Result<IdleConnections> {
        Self::open_each(std::iter::repeat_n(url, count), count).await
    }

    /// One idle connection to each of `urls` (`count` of them), e.g. agents
    /// spread over many sessions.
    pub async fn open_each<'u>(urls: impl IntoIterator<Item = &'u str>, count: usize) -> Result<IdleConnections> {
        let config = websocket::config(64 * 1024).read_buffer_size(1024);
        let opened = Arc::new(AtomicUsize::new(0));
        let mut sockets = Vec::with_capacity(count);
        let started = Instant::now();
        for (i, url) in urls.into_iter().enumerate() {
            let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), false)
                .await
                .with_context(|| format!("opening connection {i} of {count}"))?;
            let (tx, mut rx) = tokio::sync::mpsc::channel::<tokio::sync::oneshot::Sender<bool>>(1);
            let opened = opened.clone();
            tokio::spawn(async move {
                let (mut sink, mut stream) = ws.split();
                opened.fetch_add(1, Ordering::Relaxed);
                while let Some(done) = rx.recv().await {
                    let ok = async {
                        sink.send(Message::text(r#"{"jsonrpc":"2.0","id":"idle","method":"ping"}"#)).await.ok()?;
                        loop {
                            match stream.next().await? {
                                Ok(Message::Text(t)) if t.as_str().contains(r#""id":"idle""#) => {
                                    return Some(());
                                }
                                Ok(_) => continue,
                                Err(_) => return None,
                            }
                        }
                    };
                    let answered = tokio::time::timeout(Duration::from_secs(10), ok).await.ok().flatten().is_some();
                    let _ = done.send(answered);
                }
            });
            sockets.push(tx);
        }
        eprintln!("opened {count} connections in {:.1} s", started.elapsed().as_secs_f64());
        Ok(IdleConnections { sockets })
    }

    /// Pings every connection (64 at a time); returns how many answered.
    pub async fn ping_all(&self) -> usize {
        futures_util::stream::iter(self.sockets.iter())
            .map(|tx| async move {
                let (done, result) = tokio::sync::oneshot::channel();
                tx.send(done).await.ok()?;
                result.await.ok().filter(|ok| *ok)
            })
            .buffer_unordered(64)
            .filter_map(|r| async move { r })
            .count()
            .await
    }
}

/// Resident set size of a process, from /proc (Linux).
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stub as B3 uses it: registers `echo` and answers each call with
    /// the same result, whatever its arguments, over a real WebSocket.
    #[tokio::test]
    async fn the_browser_stub_registers_echo_and_answers_every_call() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen, mut registered) = tokio::sync::mpsc::unbounded_channel();
        let broker = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let ws = tokio_tungstenite::accept_async(stream).await.unwrap();
            let router = Router::<()>::new()
                .method("tools/register", move |_, params: Value| {
                    let tools = params["tools"].as_array().cloned().unwrap_or_default();
                    let _ = seen.send(tools.clone());
                    async move { Ok(json!({ "registered": tools.len() })) }
                })
                .build()
                .unwrap();
            rpc_core::client::spawn(websocket::transport(ws), router, ())
        });
        let _browser = btcp_browser(&format!("ws://{addr}"), "s").await.unwrap();
        let to_browser = broker.await.unwrap();
        let tools = registered.try_recv().expect("the stub registered its tools");
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0]["name"], "echo");
        for arguments in [json!({}), json!({"text": "hi", "n": [1, 2.5, {"deep": null}]})] {
            let answer: Value =
                to_browser.request("tools/call", json!({ "name": "echo", "arguments": arguments })).await.unwrap();
            assert_eq!(answer, json!({"content": [{"type": "text", "text": "ok"}], "isError": false}));
        }
        let pong: Value = to_browser.request("ping", json!({})).await.unwrap();
        assert_eq!(pong, json!({"pong": true}));
    }
}
