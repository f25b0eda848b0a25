//! The SSE + POST transport, alone and mixed with WebSocket in one session.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::support::{Broker, HttpResponse, WAIT, http, scripted_browser, tool};

/// One server-sent event.
#[derive(Debug)]
pub struct SseEvent {
    pub name: String,
    pub data: Value,
}

/// A client of `GET /events` that decodes the chunked stream into events.
pub struct SseClient {
    port: u16,
    events: mpsc::UnboundedReceiver<SseEvent>,
    backlog: Vec<SseEvent>,
    pub welcome: Value,
    reader: tokio::task::JoinHandle<()>,
}

impl SseClient {
    pub async fn connect(port: u16, query: &str) -> SseClient {
        Self::connect_path(port, &format!("/events?{query}")).await
    }

    /// Connects to `path_and_query` as given (e.g. with the slashes a client library adds).
    pub async fn connect_path(port: u16, path_and_query: &str) -> SseClient {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request =
            format!("GET {path_and_query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut raw = Vec::new();
            let mut buf = [0u8; 8192];
            let mut head_done = false;
            let mut text = String::new();
            loop {
                let n = match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                raw.extend_from_slice(&buf[..n]);
                if !head_done {
                    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
                    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                    assert!(head.to_ascii_lowercase().contains("text/event-stream"), "{head}");
                    raw.drain(..end + 4);
                    head_done = true;
                }
                // Chunked transfer coding: `size\r\n data \r\n`.
                while let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") {
                    let size_text = String::from_utf8_lossy(&raw[..line_end]).into_owned();
                    let size = usize::from_str_radix(size_text.trim(), 16).unwrap();
                    if raw.len() < line_end + 2 + size + 2 {
                        break;
                    }
                    let chunk = raw[line_end + 2..line_end + 2 + size].to_vec();
                    raw.drain(..line_end + 2 + size + 2);
                    if size == 0 {
                        return;
                    }
                    text.push_str(&String::from_utf8_lossy(&chunk));
                }
                while let Some(end) = text.find("\n\n") {
                    let block: String = text.drain(..end + 2).collect();
                    let mut name = "message".to_owned();
                    let mut data = Vec::new();
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("event:") {
                            name = v.trim().to_owned();
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                        }
                    }
                    if data.is_empty() {
                        continue; // a keep-alive comment
                    }
                    let data = serde_json::from_str(&data.join("\n")).unwrap();
                    if tx.send(SseEvent { name, data }).is_err() {
                        return;
                    }
                }
            }
        });
        let mut client = SseClient { port, events: rx, backlog: Vec::new(), welcome: Value::Null, reader };
        let welcome = client.next(|e| e.data["method"] == "welcome").await;
        assert_eq!(welcome.name, "message", "notifications are `message` events");
        client.welcome = welcome.data["params"].clone();
        client
    }

    /// Closes the event stream and waits until its socket is gone.
    pub async fn close(mut self) {
        self.reader.abort();
        let _ = (&mut self.reader).await;
    }

    pub fn client_id(&self) -> String {
        self.welcome["clientId"].as_str().unwrap().to_owned()
    }

    pub fn session_id(&self) -> String {
        self.welcome["sessionId"].as_str().unwrap().to_owned()
    }

    pub async fn next(&mut self, matches: impl Fn(&SseEvent) -> bool) -> SseEvent {
        if let Some(i) = self.backlog.iter().position(&matches) {
            return self.backlog.remove(i);
        }
        loop {
            let event = tokio::time::timeout(WAIT, self.events.recv())
                .await
                .expect("no event within the wait")
                .expect("event stream ended");
            if matches(&event) {
                return event;
            }
            self.backlog.push(event);
        }
    }

    /// Whether an event matching `matches` arrives within `within`.
    pub async fn receives_within(&mut self, within: Duration, matches: impl Fn(&SseEvent) -> bool) -> bool {
        if self.backlog.iter().any(&matches) {
            return true;
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) if matches(&event) => return true,
                Ok(Some(event)) => self.backlog.push(event),
                Ok(None) | Err(_) => return false,
            }
        }
    }

    /// POSTs a message as this client; returns the HTTP status.
    pub fn post(&self, message: &Value) -> u16 {
        let client_id = self.client_id();
        post_message(self.port, &[("X-Client-ID", &client_id)], message).status
    }

    pub async fn call(&mut self, id: Value, method: &str, params: Value) -> SseEvent {
        let status = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        assert_eq!(status, 202);
        self.next(|e| e.data["id"] == id && e.data.get("method").is_none()).await
    }
}

/// `POST /message` with `headers` (off the async runtime: `http` blocks).
pub fn post_message(port: u16, headers: &[(&str, &str)], message: &Value) -> HttpResponse {
    let mut all: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    all.push(("Content-Type".into(), "application/json".into()));
    let body = message.to_string();
    std::thread::spawn(move || {
        let headers: Vec<(&str, &str)> = all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        http(port, "POST", "/message", &headers, body.as_bytes())
    })
    .join()
    .unwrap()
}

impl Drop for SseClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

#[tokio::test]
async fn an_sse_browser_serves_a_websocket_agent() {
    let broker = Broker::start(&[]);
    let mut browser = SseClient::connect(broker.port, "clientType=browser&sessionId=mixed").await;
    assert_eq!(browser.welcome["sessionId"], "mixed");
    let reply = browser.call(json!("r1"), "tools/register", json!({"tools": [tool("echo")]})).await;
    assert_eq!(reply.name, "response");
    assert_eq!(reply.data["result"], json!({"registered": 1}));

    let mut agent = broker.agent("mixed").await;
    agent
        .send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"q": "sse"}}}))
        .await;
    let forwarded = browser.next(|e| e.data["method"] == "tools/call").await;
    assert_eq!(forwarded.name, "request", "broker-to-client requests are `request` events");
    assert_eq!(forwarded.data["params"]["arguments"], json!({"q": "sse"}));
    let status = browser.post(&json!({"jsonrpc": "2.0", "id": forwarded.data["id"],
        "result": {"content": [{"type": "text", "text": "via sse"}], "isError": false}}));
    assert_eq!(status, 202);
    let answer = agent.response(&json!(5)).await;
    assert_eq!(answer["result"]["content"][0]["text"], "via sse");
}

#[tokio::test]
async fn an_sse_agent_calls_a_websocket_browser() {
    let broker = Broker::start(&[]);
    let browser = scripted_browser(broker.browser("mixed2").await).await;
    let mut agent = SseClient::connect(broker.port, "clientType=agent&sessionId=mixed2").await;
    let reply = agent.call(json!(1), "tools/call", json!({"name": "echo", "arguments": {"n": 2}})).await;
    assert_eq!(reply.name, "response");
    assert_eq!(reply.data["result"]["content"][0]["text"], "{\"n\":2}");
    let reply = agent.call(json!("p"), "ping", json!({})).await;
    assert_eq!(reply.data["result"], json!({"pong": true}));
    browser.abort();
}

#[tokio::test]
async fn a_post_is_routed_by_session_id_to_that_sessions_sse_browser() {
    let broker = Broker::start(&[]);
    let mut browser = SseClient::connect(broker.port, "clientType=browser&sessionId=bysession").await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let port = broker.port;
    let status = tokio::task::spawn_blocking(move || {
        http(port, "POST", "/message", &[("X-Session-ID", "bysession")], body.as_bytes()).status
    })
    .await
    .unwrap();
    assert_eq!(status, 202);
    let reply = browser.next(|e| e.data["id"] == 1).await;
    assert_eq!(reply.data["result"]["pong"], true);
}

#[test]
fn a_post_for_nobody_is_404_and_an_oversized_one_413() {
    let broker = Broker::start(&[("BTCP_MAX_MESSAGE", "2048")]);
    let response = http(broker.port, "POST", "/message", &[("X-Client-ID", "nobody")], b"{}");
    assert_eq!(response.status, 404);
    assert_eq!(response.json()["reason"], "unknown_client");
    let big = vec![b' '; 4096];
    let response = http(broker.port, "POST", "/message", &[("X-Client-ID", "nobody")], &big);
    assert_eq!(response.status, 413);
}

#[tokio::test]
async fn closing_the_event_stream_ends_the_sse_peer() {
    let broker = Broker::start(&[]);
    let browser = SseClient::connect(broker.port, "clientType=browser&sessionId=gone").await;
    let mut agent = broker.agent("gone").await;
    drop(browser);
    agent.notification("session/browserDisconnected").await;
    let health = || broker.get("/health").json()["browsers"].as_u64();
    assert!(integration_tests::eventually(Duration::from_secs(5), || health() == Some(0)));
}

#[tokio::test]
async fn an_sse_answer_without_result_or_error_fails_the_call_at_once_and_is_not_bounced() {
    let broker = Broker::start(&[]);
    let mut browser = SseClient::connect(broker.port, "clientType=browser&sessionId=sse-lacks").await;
    browser.call(json!("r"), "tools/register", json!({"tools": [tool("echo")]})).await;
    let mut agent = broker.agent("sse-lacks").await;
    agent
        .send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {}, "timeout": 30000}}))
        .await;
    let forwarded = browser.next(|e| e.data["method"] == "tools/call").await;
    let answered = std::time::Instant::now();
    assert_eq!(browser.post(&json!({"jsonrpc": "2.0", "id": forwarded.data["id"]})), 202);
    let reply = agent.response(&json!(1)).await;
    let waited = answered.elapsed();
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    assert_eq!(reply["error"]["data"]["reason"], "malformed_answer", "{reply}");
    assert!(waited < Duration::from_secs(1), "the agent waited {waited:?}");
    let bounced = browser.receives_within(Duration::from_millis(500), |e| e.data.get("error").is_some()).await;
    assert!(!bounced, "the malformed answer was bounced back to the browser as an invalid request");
}

/// Sends only the request head of a POST and returns the status line and how
/// long it took to come.
fn post_head_only(port: u16, content_length: &str) -> (String, Duration) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let head = format!(
        "POST /message HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         X-Client-ID: somebody\r\nContent-Length: {content_length}\r\n\r\n"
    );
    let started = std::time::Instant::now();
    stream.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 1024];
    while !raw.windows(2).any(|w| w == b"\r\n") {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => panic!("no reply within {:?}: {e}", started.elapsed()),
        }
    }
    let text = String::from_utf8_lossy(&raw);
    (text.lines().next().unwrap_or("").to_owned(), started.elapsed())
}

#[test]
fn a_declared_length_over_the_limit_is_413_from_the_header_alone() {
    let broker = Broker::start(&[]);
    for length in ["99999999999", "4194305"] {
        let (status, took) = post_head_only(broker.port, length);
        assert!(status.starts_with("HTTP/1.1 413"), "Content-Length {length}: {status}");
        assert!(took < Duration::from_secs(1), "Content-Length {length}: 413 after {took:?}");
    }
}

#[tokio::test]
async fn a_chunked_post_over_the_limit_is_413() {
    let broker = Broker::start(&[("BTCP_MAX_MESSAGE", "2048")]);
    let client = SseClient::connect(broker.port, "clientType=agent").await;
    let (port, client_id) = (broker.port, client.client_id());
    let status = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let chunk = " ".repeat(1500);
        let request = format!(
            "POST /message HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Client-ID: {client_id}\r\n\
             Transfer-Encoding: chunked\r\n\r\n{n:x}\r\n{chunk}\r\n{n:x}\r\n{chunk}\r\n0\r\n\r\n",
            n = chunk.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut reply = [0u8; 64];
        let n = stream.read(&mut reply).unwrap();
        String::from_utf8_lossy(&reply[..n]).into_owned()
    })
    .await
    .unwrap();
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    drop(client);
}
