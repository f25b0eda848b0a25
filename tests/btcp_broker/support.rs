//! Helpers for the broker tests: start the binary, speak WebSocket and HTTP to
//! it, and a scriptable browser that answers forwarded tool calls.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use integration_tests::{Daemon, PortTaken, on_free_ports};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long a test waits for any one message before failing.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct Broker {
    pub daemon: Daemon,
    pub port: u16,
}

impl Broker {
    /// Starts btcp-broker on a free port with extra environment.
    pub fn start(env: &[(&str, &str)]) -> Broker {
        on_free_ports(|[port]| Self::try_start_on(port, env))
    }

    /// Starts btcp-broker on `port` (e.g. again after stopping one there).
    pub fn start_on(port: u16, env: &[(&str, &str)]) -> Broker {
        Self::try_start_on(port, env).unwrap_or_else(|PortTaken| panic!("another process had port {port}"))
    }

    fn try_start_on(port: u16, env: &[(&str, &str)]) -> Result<Broker, PortTaken> {
        let port_text = port.to_string();
        let mut all = vec![("BTCP_PORT", port_text.as_str()), ("BTCP_HOST", "127.0.0.1")];
        all.extend_from_slice(env);
        let mut daemon = Daemon::start("btcp-broker", &[], &all);
        daemon.listening_on(SocketAddr::from(([127, 0, 0, 1], port)))?;
        Ok(Broker { daemon, port })
    }

    pub fn url(&self, path_and_query: &str) -> String {
        format!("ws://127.0.0.1:{}{path_and_query}", self.port)
    }

    pub async fn browser(&self, session: &str) -> Ws {
        Ws::connect(&self.url(&format!("/ws?clientType=browser&sessionId={session}"))).await
    }

    pub async fn agent(&self, session: &str) -> Ws {
        Ws::connect(&self.url(&format!("/ws?clientType=agent&sessionId={session}"))).await
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        http(self.port, "GET", path, &[], b"")
    }
}

/// A WebSocket test client that keeps what it read but did not yet consume.
pub struct Ws {
    stream: WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>,
    backlog: VecDeque<Value>,
    pub welcome: Value,
}

impl Ws {
    /// Connects and reads the welcome (panics if refused).
    pub async fn connect(url: &str) -> Ws {
        match Self::try_connect(url, &[]).await {
            Ok(ws) => ws,
            Err(status) => panic!("connecting to {url}: HTTP {status}"),
        }
    }

    /// Connects with extra headers; a refusal gives its HTTP status and body.
    pub async fn try_connect(url: &str, headers: &[(&str, &str)]) -> Result<Ws, String> {
        let mut request = url.into_client_request().unwrap();
        for (k, v) in headers {
            let name: tokio_tungstenite::tungstenite::http::HeaderName = k.parse().unwrap();
            request.headers_mut().insert(name, v.parse().unwrap());
        }
        let (stream, _) = match tokio_tungstenite::connect_async(request).await {
            Ok(ok) => ok,
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let body =
                    response.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
                return Err(format!("{} {body}", response.status().as_u16()));
            }
            Err(e) => return Err(format!("error {e}")),
        };
        let mut ws = Ws { stream, backlog: VecDeque::new(), welcome: Value::Null };
        let welcome = ws.notification("welcome").await;
        ws.welcome = welcome["params"].clone();
        Ok(ws)
    }

    pub fn session_id(&self) -> String {
        self.welcome["sessionId"].as_str().unwrap().to_owned()
    }

    pub async fn send(&mut self, value: &Value) {
        self.send_text(&value.to_string()).await;
    }

    pub async fn send_text(&mut self, text: &str) {
        self.stream.send(Message::text(text)).await.unwrap();
    }

    /// The next JSON message from the broker (not from the backlog).
    async fn read(&mut self) -> Option<Value> {
        loop {
            let message = tokio::time::timeout(WAIT, self.stream.next())
                .await
                .expect("no message from the broker within the wait")?;
            match message {
                Ok(Message::Text(text)) => return Some(serde_json::from_str(&text).unwrap()),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }

    /// The first message (backlog first) that `matches`, keeping the others.
    pub async fn next_matching(&mut self, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&matches) {
            return self.backlog.remove(i).unwrap();
        }
        loop {
            let value = self.read().await.expect("connection closed while waiting for a message");
            if matches(&value) {
                return value;
            }
            self.backlog.push_back(value);
        }
    }

    pub async fn notification(&mut self, method: &str) -> Value {
        self.next_matching(|v| v["method"] == method && v.get("id").is_none()).await
    }

    /// The next request the broker sends us (a forwarded tools/call).
    pub async fn request(&mut self) -> Value {
        self.next_matching(|v| v.get("method").is_some() && v.get("id").is_some()).await
    }

    pub async fn response(&mut self, id: &Value) -> Value {
        let id = id.clone();
        self.next_matching(move |v| v.get("method").is_none() && v["id"] == id).await
    }

    /// Sends a request and waits for its response.
    pub async fn call(&mut self, id: impl Into<Value>, method: &str, params: Value) -> Value {
        let id = id.into();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        self.response(&id).await
    }

    /// Registers tools (given by name) as a browser; returns the response.
    pub async fn register(&mut self, names: &[&str]) -> Value {
        let tools: Vec<Value> = names.iter().map(|n| tool(n)).collect();
        self.call("reg", "tools/register", json!({"tools": tools})).await
    }

    /// Waits for the close frame (or end) and returns its code.
    pub async fn closed(&mut self) -> Option<u16> {
        loop {
            let message =
                tokio::time::timeout(WAIT, self.stream.next()).await.expect("connection not closed within the wait");
            match message {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(Message::Text(text))) => self.backlog.push_back(serde_json::from_str(&text).unwrap()),
                Some(Ok(_)) => {}
                None | Some(Err(_)) => return None,
            }
        }
    }

    pub async fn close(mut self) {
        let _ = self.stream.close(None).await;
    }

    /// Whether a message matching `matches` arrives within `within`.
    pub async fn receives_within(&mut self, within: Duration, matches: impl Fn(&Value) -> bool) -> bool {
        if self.backlog.iter().any(&matches) {
            return true;
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let Ok(message) = tokio::time::timeout_at(deadline, self.stream.next()).await else {
                return false;
            };
            match message {
                Some(Ok(Message::Text(text))) => {
                    let value: Value = serde_json::from_str(&text).unwrap();
                    if matches(&value) {
                        return true;
                    }
                    self.backlog.push_back(value);
                }
                Some(Ok(_)) => {}
                None | Some(Err(_)) => return false,
            }
        }
    }
}

pub fn tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": format!("the {name} tool"),
        "inputSchema": {"type": "object", "properties": {}}
    })
}

/// A browser that answers forwarded calls by tool name:
/// `echo` → text of the arguments; `slow` → after `arguments.ms`;
/// `fail` → `result` (isError) and `error` together, like the public client;
/// `bad` → a malformed answer; `silent` → never answers.
pub async fn scripted_browser(mut ws: Ws) -> JoinHandle<()> {
    ws.register(&["echo", "slow", "fail", "bad", "silent"]).await;
    tokio::spawn(async move {
        let (mut sink, mut stream) = {
            let Ws { stream, .. } = ws;
            stream.split()
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let writer = tokio::spawn(async move {
            while let Some(text) = rx.recv().await {
                if sink.send(Message::text(text)).await.is_err() {
                    break;
                }
            }
            sink
        });
        while let Some(Ok(message)) = stream.next().await {
            let Message::Text(text) = message else {
                continue;
            };
            let m: Value = serde_json::from_str(&text).unwrap();
            if m["method"] != "tools/call" {
                continue;
            }
            let id = m["id"].clone();
            let args = m["params"]["arguments"].clone();
            let tx = tx.clone();
            match m["params"]["name"].as_str().unwrap_or("") {
                "echo" => {
                    let _ = tx.send(
                        json!({"jsonrpc": "2.0", "id": id, "result": {
                            "content": [{"type": "text", "text": args.to_string()}], "isError": false}})
                        .to_string(),
                    );
                }
                "slow" => {
                    let ms = args["ms"].as_u64().unwrap_or(100);
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        let _ = tx.send(
                            json!({"jsonrpc": "2.0", "id": id, "result": {
                                "content": [{"type": "text", "text": format!("slept {ms}")}], "isError": false}})
                            .to_string(),
                        );
                    });
                }
                "fail" => {
                    let _ = tx.send(
                        json!({"jsonrpc": "2.0", "id": id,
                            "result": {"content": [{"type": "text", "text": "Error: boom"}], "isError": true},
                            "error": {"code": -32603, "message": "boom"}})
                        .to_string(),
                    );
                }
                "bad" => {
                    let _ = tx.send(json!({"jsonrpc": "2.0", "id": id, "error": "not an error object"}).to_string());
                }
                _ => {}
            }
        }
        drop(tx);
        let _ = writer.await;
    })
}

/// A blocking HTTP/1.1 exchange (Connection: close), chunked bodies decoded.
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
    http_to_host(port, &format!("127.0.0.1:{port}"), method, path, headers, body)
}

/// [`http`] with the `Host` header given (the socket is 127.0.0.1's all the same).
pub fn http_to_host(
    port: u16,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        // A 101 keeps the connection open for the upgraded protocol.
        if raw.starts_with(b"HTTP/1.1 101") && raw.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> HttpResponse {
    let text = String::from_utf8_lossy(raw);
    let (head, rest) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(rest) } else { rest.to_owned() };
    HttpResponse { status, headers, body }
}

/// Decodes a chunked body (complete or cut short).
pub fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            body.push_str(&after[..after.len().min(n)]);
            break;
        }
        body.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    body
}
