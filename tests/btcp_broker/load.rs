//! Many clients at once: 1000 WebSocket connections (100 sessions of one
//! browser and nine agents) exchanging calls, none lost or misrouted.
//! `SOAK=1` runs a bigger, longer version.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;

use crate::support::{Broker, tool};

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open(url: String, connecting: &Semaphore) -> Socket {
    // A bounded number of handshakes at a time keeps the listen backlog sane.
    let _permit = connecting.acquire().await.unwrap();
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    // The welcome.
    let first = ws.next().await.unwrap().unwrap();
    assert!(first.to_text().unwrap().contains("\"welcome\""));
    ws
}

/// A browser that registers `echo` and answers every call with its arguments.
async fn browser(mut ws: Socket, registered: tokio::sync::mpsc::Sender<()>) {
    let register = json!({"jsonrpc": "2.0", "id": "r", "method": "tools/register",
        "params": {"tools": [tool("echo")]}});
    ws.send(Message::text(register.to_string())).await.unwrap();
    while let Some(Ok(message)) = ws.next().await {
        let Message::Text(text) = message else {
            continue;
        };
        let m: Value = serde_json::from_str(&text).unwrap();
        if m["id"] == "r" {
            assert_eq!(m["result"]["registered"], 1);
            registered.send(()).await.unwrap();
            continue;
        }
        if m["method"] == "tools/call" {
            let answer = json!({"jsonrpc": "2.0", "id": m["id"], "result": {
                "content": [{"type": "text", "text": m["params"]["arguments"].to_string()}],
                "isError": false}});
            if ws.send(Message::text(answer.to_string())).await.is_err() {
                return;
            }
        }
    }
}

/// An agent that pipelines `calls` tool calls and checks every answer is its own.
async fn agent(mut ws: Socket, me: usize, calls: usize) -> usize {
    for n in 0..calls {
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"agent": me, "n": n}}});
        ws.feed(Message::text(call.to_string())).await.unwrap();
    }
    ws.flush().await.unwrap();
    let mut answered = vec![false; calls];
    let mut count = 0;
    while count < calls {
        let message = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .expect("an answer within 60 s")
            .expect("connection open")
            .unwrap();
        let Message::Text(text) = message else {
            continue;
        };
        let m: Value = serde_json::from_str(&text).unwrap();
        let Some(n) = m["id"].as_u64() else { continue }; // notifications
        let text =
            m["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("agent {me}: not a result: {m}"));
        let echoed: Value = serde_json::from_str(text).unwrap();
        assert_eq!(echoed, json!({"agent": me, "n": n}), "misrouted answer");
        assert!(!std::mem::replace(&mut answered[n as usize], true), "answered twice");
        count += 1;
    }
    let _ = ws.close(None).await;
    count
}

async fn run_load(sessions: usize, agents_per_session: usize, calls: usize) {
    // The soft open-file limit is often 1024: too few for this many sockets.
    let needed = (sessions * (agents_per_session + 1) + 512) as u64;
    let limit = rpc_core::listen::raise_fd_limit().unwrap_or(0);
    assert!(limit >= needed, "RLIMIT_NOFILE {limit} < {needed}");
    let broker = Broker::start(&[("RUST_LOG", "warn"), ("BTCP_RATE_LIMIT", "0")]);
    let connecting = Arc::new(Semaphore::new(64));
    let started = Instant::now();
    let (registered_tx, mut registered_rx) = tokio::sync::mpsc::channel(sessions);
    let mut browsers = Vec::new();
    for s in 0..sessions {
        let url = broker.url(&format!("/ws?clientType=browser&sessionId=load-{s}"));
        let connecting = connecting.clone();
        let registered = registered_tx.clone();
        browsers.push(tokio::spawn(async move { browser(open(url, &connecting).await, registered).await }));
    }
    for _ in 0..sessions {
        tokio::time::timeout(Duration::from_secs(60), registered_rx.recv())
            .await
            .expect("every browser registered")
            .unwrap();
    }
    let mut agents = Vec::new();
    for a in 0..sessions * agents_per_session {
        let url = broker.url(&format!("/ws?clientType=agent&sessionId=load-{}", a % sessions));
        let connecting = connecting.clone();
        agents.push(tokio::spawn(async move { agent(open(url, &connecting).await, a, calls).await }));
    }
    let mut answered = 0;
    for agent in agents {
        answered += agent.await.unwrap();
    }
    let expected = sessions * agents_per_session * calls;
    assert_eq!(answered, expected, "every call answered exactly once");
    eprintln!(
        "{} connections, {expected} forwarded calls in {:?}",
        sessions * (1 + agents_per_session),
        started.elapsed()
    );
    let health = broker.get("/health").json();
    assert_eq!(health["sessions"], sessions);
    assert_eq!(health["browsers"], sessions);
    for browser in browsers {
        browser.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_across_a_hundred_sessions_lose_no_call() {
    if std::env::var("SOAK").is_ok_and(|v| v == "1") {
        run_load(500, 9, 200).await;
    } else {
        run_load(100, 9, 10).await;
    }
}
