//! The smallest SSE agent: open `/events`, post one `tools/call`, read its
//! answer from the stream (blocking; run it off the async runtime).

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::{Value, json};

use crate::support::{WAIT, http};

/// Calls `tool` with `{"via": "sse"}` as an SSE agent of `session`.
pub fn call_once(port: u16, session: &str, tool: &str) -> Value {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let request = format!(
        "GET /events?clientType=agent&sessionId={session} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let welcome = read_data(&mut stream, |v| v["method"] == "welcome");
    let client_id = welcome["params"]["clientId"].as_str().unwrap().to_owned();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {"via": "sse"}}});
    let posted = http(
        port,
        "POST",
        "/message",
        &[("X-Client-ID", &client_id), ("Content-Type", "application/json")],
        call.to_string().as_bytes(),
    );
    assert_eq!(posted.status, 202, "{}", posted.body);
    read_data(&mut stream, |v| v["id"] == 1)
}

/// The first `data:` line whose JSON `matches`.
fn read_data(stream: &mut TcpStream, matches: impl Fn(&Value) -> bool) -> Value {
    let mut text = String::new();
    let mut buf = [0u8; 8192];
    loop {
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data:")
                && let Ok(value) = serde_json::from_str::<Value>(data.trim())
                && matches(&value)
            {
                return value;
            }
        }
        let n = stream.read(&mut buf).expect("the event stream within the wait");
        assert!(n > 0, "the event stream ended: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}
