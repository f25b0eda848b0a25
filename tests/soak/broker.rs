//! btcp-broker under mixed load: browsers registering tools, agents joining
//! and calling them over WebSocket and over SSE+POST, sessions coming and
//! going (an idle session is swept after a second).

#[allow(dead_code)]
#[path = "../btcp_broker/support.rs"]
pub mod support;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::rss::{Dice, Plan, Record, Sampler, Tally};
use support::{Broker, Ws, http, scripted_browser};

const PACE: Duration = Duration::from_millis(2);

/// An agent's `tools/call echo`: the browser answers with its arguments.
async fn echo_call(agent: &mut Ws, id: u64, tag: &str, tally: &Tally) {
    let reply = agent.call(id, "tools/call", json!({"name": "echo", "arguments": {"tag": tag, "n": id}})).await;
    let expected = json!({"tag": tag, "n": id}).to_string();
    tally.check(reply["result"]["content"][0]["text"] == expected.as_str(), || format!("ws echo {tag}/{id}: {reply}"));
}

/// A WebSocket agent: joins, lists the tools, calls `calls` times, leaves.
async fn ws_agent(broker: &Broker, session: &str, calls: u64, tally: &Tally) {
    let mut agent = broker.agent(session).await;
    let tools = agent.call(0, "tools/list", json!({})).await;
    tally.check(tools["result"]["tools"].as_array().is_some_and(|t| t.len() == 5), || format!("tools/list: {tools}"));
    for id in 1..=calls {
        if id % 10 == 0 {
            let pong = agent.call(id, "ping", json!({})).await;
            tally.check(pong["result"]["pong"] == true, || format!("ping: {pong}"));
        } else {
            echo_call(&mut agent, id, session, tally).await;
        }
        tokio::time::sleep(PACE).await;
    }
    agent.close().await;
}

/// A chunked body as a plain byte stream (the SSE stream is one).
struct Dechunked<R> {
    inner: R,
    left: usize,
}

impl<R: BufRead> Read for Dechunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            let mut size = String::new();
            while size.trim().is_empty() {
                size.clear();
                if self.inner.read_line(&mut size)? == 0 {
                    return Ok(0);
                }
            }
            self.left = usize::from_str_radix(size.trim(), 16).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("chunk size {size:?}: {e}"))
            })?;
            if self.left == 0 {
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

/// A blocking SSE client (an agent, or a browser): `GET /events`, then
/// `POST /message` per message.
pub struct SseAgent {
    events: BufReader<Dechunked<BufReader<TcpStream>>>,
    pub client_id: String,
    port: u16,
}

impl SseAgent {
    pub fn connect(port: u16, session: &str) -> SseAgent {
        Self::connect_as(port, "agent", session)
    }

    /// Connects as `client_type` (`agent` or `browser`).
    pub fn connect_as(port: u16, client_type: &str, session: &str) -> SseAgent {
        use std::io::Write;
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "GET /events?clientType={client_type}&sessionId={session} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             Accept: text/event-stream\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "GET /events: {line}");
        while line != "\r\n" {
            line.clear();
            reader.read_line(&mut line).unwrap();
        }
        let mut agent =
            SseAgent { events: BufReader::new(Dechunked { inner: reader, left: 0 }), client_id: String::new(), port };
        let welcome = agent.next_event().expect("a welcome event");
        agent.client_id = welcome["params"]["clientId"].as_str().expect("a clientId in the welcome").to_owned();
        agent
    }

    /// The next event's data (keep-alive comments skipped); `None` at the end.
    pub fn next_event(&mut self) -> Option<Value> {
        let mut data = String::new();
        loop {
            let mut line = String::new();
            if self.events.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(value) = line.strip_prefix("data:") {
                data.push_str(value.trim_start());
            } else if line.is_empty() && !data.is_empty() {
                return Some(serde_json::from_str(&data).unwrap_or_else(|e| panic!("event data {data:?}: {e}")));
            }
        }
    }

    /// POSTs `message` as this client; the HTTP status.
    pub fn post(&self, message: &Value) -> u16 {
        let headers = [("X-Client-ID", self.client_id.as_str()), ("Content-Type", "application/json")];
        http(self.port, "POST", "/message", &headers, message.to_string().as_bytes()).status
    }

    /// A request and its response event.
    pub fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        let status = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        assert_eq!(status, 202, "POST {method}");
        loop {
            let event = self.next_event().expect("the event stream ended before the response");
            if event["id"] == id && event.get("method").is_none() {
                return event;
            }
        }
    }
}

/// An SSE agent (blocking: run it on its own thread): joins, calls, leaves.
fn sse_agent(port: u16, session: &str, calls: u64, tally: &Tally) {
    let mut agent = SseAgent::connect(port, session);
    for id in 1..=calls {
        let reply = agent.call(id, "tools/call", json!({"name": "echo", "arguments": {"sse": id}}));
        let expected = json!({"sse": id}).to_string();
        tally.check(reply["result"]["content"][0]["text"] == expected.as_str(), || format!("sse echo {id}: {reply}"));
        std::thread::sleep(PACE);
    }
}

/// Rounds of one session each: a browser registers its tools, two
/// WebSocket agents and one SSE agent join and call, then all leave and the
/// session is left to the idle sweep.
async fn session_rounds(broker: Arc<Broker>, worker: u64, until: Instant, tally: Arc<Tally>) {
    let mut dice = Dice::new(worker + 10);
    let mut round = 0;
    while Instant::now() < until {
        let session = format!("soak-{worker}-{round}");
        let browser = scripted_browser(broker.browser(&session).await).await;
        let calls = 10 + dice.below(30);
        let sse = {
            let (port, session, tally) = (broker.port, session.clone(), tally.clone());
            tokio::task::spawn_blocking(move || sse_agent(port, &session, calls, &tally))
        };
        let one = ws_agent(&broker, &session, calls, &tally);
        let two = ws_agent(&broker, &session, calls / 2, &tally);
        tokio::join!(one, two);
        sse.await.expect("the SSE agent does not panic");
        browser.abort();
        round += 1;
    }
}

/// One session that lasts the whole run: its browser stays, an agent calls
/// it steadily.
async fn steady_session(broker: Arc<Broker>, until: Instant, tally: Arc<Tally>) {
    let browser = scripted_browser(broker.browser("soak-steady").await).await;
    let mut agent = broker.agent("soak-steady").await;
    let mut id = 0;
    while Instant::now() < until {
        id += 1;
        echo_call(&mut agent, id, "steady", &tally).await;
        tokio::time::sleep(PACE).await;
    }
    agent.close().await;
    browser.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_btcp_broker_mixed_load_keeps_memory_flat() {
    let plan = Plan::from_env();
    let broker =
        Arc::new(Broker::start(&[("RUST_LOG", "warn"), ("BTCP_RATE_LIMIT", "0"), ("BTCP_SESSION_IDLE_TTL", "1")]));
    let sampler = Sampler::start(broker.daemon.pid(), plan);
    let until = Instant::now() + plan.duration;
    let tally = Arc::new(Tally::default());
    let mut load = vec![tokio::spawn(steady_session(broker.clone(), until, tally.clone()))];
    for worker in 0..3 {
        load.push(tokio::spawn(session_rounds(broker.clone(), worker, until, tally.clone())));
    }
    let mut crashed = 0;
    for task in load {
        crashed += usize::from(task.await.is_err());
    }
    let samples = tokio::task::spawn_blocking(move || sampler.finish(crashed > 0)).await.unwrap();
    assert_eq!(crashed, 0, "a load task panicked (see above)");
    // Still answering; and what left was forgotten: no agent is counted, and
    // the rounds' sessions were swept.
    let mut agent = broker.agent("soak-final").await;
    assert_eq!(agent.call(1, "ping", json!({})).await["result"]["pong"], true, "the broker answers after the soak");
    agent.close().await;
    let port = broker.port;
    let swept = tokio::task::spawn_blocking(move || {
        integration_tests::eventually(Duration::from_secs(10), || {
            let health = http(port, "GET", "/health", &[], b"").json();
            health["sessions"] == 0 && health["agents"] == 0 && health["browsers"] == 0
        })
    })
    .await
    .unwrap();
    let health = broker.get("/health").json();
    assert!(swept, "sessions, agents or browsers left behind after the load: {health}");
    tally.assert_clean("btcp-broker", plan.duration.as_secs() * 50);
    Record { name: "btcp-broker".into(), plan, samples }.report_and_check(None);
}
