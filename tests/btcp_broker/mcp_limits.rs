//! What `/mcp` holds and how it ends: its MCP sessions are capped (an
//! `initialize` flood cannot grow the broker), and on SIGTERM its calls in
//! flight get the grace period. Spoken to by hand over raw HTTP.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use integration_tests::{peak_rss, rss_bytes};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::support::{Broker, HttpResponse, WAIT, http};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const MIB: u64 = 1024 * 1024;

fn initialize(port: u16, path: &str, id: u64) -> HttpResponse {
    let init = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "flood", "version": "1"}}});
    http(port, "POST", path, &[JSON, ACCEPT], init.to_string().as_bytes())
}

/// Every `initialize` opens an MCP session that rmcp keeps for minutes:
/// unbounded, a flood on one session id grew the broker by 82 KiB each (5 GB
/// in 30 s). Past BTCP_MAX_MCP_SESSIONS it is 503 with a JSON-RPC error
/// naming the limit, and a session that ends gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialize_flood_stays_within_the_mcp_session_cap() {
    const MAX: usize = 32;
    let broker = Broker::start(&[("BTCP_MAX_MCP_SESSIONS", "32")]);
    let (port, pid) = (broker.port, broker.daemon.pid());
    let path = "/mcp?sessionId=flood";
    // The door (its agent connection) is made by the first request.
    let first = initialize_session(port, path).expect("room for the first");
    let before = rss_bytes(pid);
    let (opened, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let until = Instant::now() + Duration::from_secs(6);
    let flood: Vec<_> = (0..4)
        .map(|_| {
            let (opened, refused) = (opened.clone(), refused.clone());
            std::thread::spawn(move || {
                while Instant::now() < until {
                    match initialize(port, path, 1).status {
                        200 => opened.fetch_add(1, Ordering::Relaxed),
                        503 => refused.fetch_add(1, Ordering::Relaxed),
                        other => panic!("initialize answered {other}"),
                    };
                }
            })
        })
        .collect();
    let peak = tokio::task::spawn_blocking(move || peak_rss(pid, Duration::from_secs(6))).await.unwrap();
    for thread in flood {
        thread.join().unwrap();
    }
    let grown = peak.saturating_sub(before) / MIB;
    let (opened, refused) = (opened.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    eprintln!("RSS: +{grown} MiB over {opened} sessions opened, {refused} refused");
    // Before the cap: +828 MiB in these 6 s (10 220 sessions, a debug build).
    assert!(grown < 40, "grew by {grown} MiB ({opened} sessions opened)");
    assert_eq!(opened, MAX - 1, "the first took one place");
    assert!(refused > 0);

    let full = initialize(port, path, 7);
    assert_eq!(full.status, 503, "{}", full.body);
    assert!(full.header("content-type").is_some_and(|t| t.starts_with("application/json")), "{:?}", full.headers);
    let error = full.json();
    assert_eq!(error["id"], 7, "{error}");
    assert_eq!(error["error"]["code"], -32000, "{error}");
    assert_eq!(error["error"]["data"], json!({"reason": "mcp_sessions", "maxMcpSessions": MAX}), "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("BTCP_MAX_MCP_SESSIONS") && message.contains("32"), "{error}");

    // The cap is the broker's, over every session id; a session ended by
    // its client makes room for a new one.
    assert_eq!(initialize_session(port, "/mcp?sessionId=other"), None, "full for every session id");
    let ended = http(port, "DELETE", path, &[ACCEPT, ("Mcp-Session-Id", &first)], b"");
    assert_eq!(ended.status, 200, "{}", ended.body);
    assert!(initialize_session(port, "/mcp?sessionId=other").is_some(), "the ended session's place is free");
}

/// The session id `initialize` on `path` opened, or `None` when refused 503.
fn initialize_session(port: u16, path: &str) -> Option<String> {
    let opened = initialize(port, path, 1);
    match opened.status {
        200 => Some(opened.header("mcp-session-id").expect("a session id").to_owned()),
        503 => None,
        other => panic!("initialize answered {other}: {}", opened.body),
    }
}

/// The JSON-RPC messages of an SSE (or JSON) response body.
fn messages(body: &str) -> Vec<Value> {
    let data = body.lines().filter_map(|line| line.strip_prefix("data:"));
    let from_sse = data.filter_map(|data| serde_json::from_str(data.trim()).ok());
    from_sse.chain(serde_json::from_str(body).ok()).collect()
}

/// SIGTERM with `tools/call`s in flight on `/mcp`: as on every transport
/// (rpc-core's drain), the calls get the grace period. One the browser
/// answers within it gets its answer; one still running at its end gets
/// the MCP side's `shutting_down` (a tool error, as the broker's other
/// errors are); no new request is taken meanwhile. Before: the MCP
/// sessions were closed at the signal, both calls' streams ended with no
/// answer and the broker was gone in 0.03 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_calls_in_flight_at_sigterm_get_the_grace_period() {
    let mut broker = Broker::start(&[("BTCP_SHUTDOWN_GRACE", "2")]);
    let mut browser = broker.browser("mcp-drain").await;
    browser.register(&["slow"]).await;
    let (port, path) = (broker.port, "/mcp?sessionId=mcp-drain");
    let session = initialize_session(port, path).expect("room");
    let post = move |body: Value| {
        let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str()), ("Mcp-Protocol-Version", "2025-03-26")];
        http(port, "POST", path, &headers, body.to_string().as_bytes())
    };
    let initialized = post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(initialized.status, 202, "{}", initialized.body);
    let call = |id: u64| {
        let post = post.clone();
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "slow", "arguments": {"n": id}}});
        std::thread::spawn(move || post(request))
    };
    let (answered, unanswered) = (call(1), call(2));
    let mut forwarded = [browser.request().await, browser.request().await];
    forwarded.sort_by_key(|request| request["params"]["arguments"]["n"].as_u64());
    let signalled = Instant::now();
    broker.daemon.signal(Signal::SIGTERM);

    // Draining: the port takes no new connection, so no new request.
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(signalled.elapsed() < WAIT, "the broker does not drain");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    browser
        .send(&json!({"jsonrpc": "2.0", "id": forwarded[0]["id"],
            "result": {"content": [{"type": "text", "text": "answered in grace"}], "isError": false}}))
        .await;
    let answered = tokio::task::spawn_blocking(move || answered.join().unwrap()).await.unwrap();
    let reply = messages(&answered.body).into_iter().find(|m| m["id"] == 1);
    let reply = reply.unwrap_or_else(|| panic!("no answer to the call answered in the grace: {}", answered.body));
    assert_eq!(reply["result"]["content"][0]["text"], "answered in grace", "{reply}");

    let unanswered = tokio::task::spawn_blocking(move || unanswered.join().unwrap()).await.unwrap();
    let waited = signalled.elapsed();
    let reply = messages(&unanswered.body).into_iter().find(|m| m["id"] == 2);
    let reply = reply.unwrap_or_else(|| panic!("no answer to the call the grace ran out on: {}", unanswered.body));
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let text = reply["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("shutting down") && text.contains("shutting_down"), "{reply}");
    assert!(waited >= Duration::from_millis(1500), "answered before the grace was over: {waited:?}");
    assert!(waited < Duration::from_secs(3), "answered long after the grace: {waited:?}");
    assert_eq!(broker.daemon.wait_exit(WAIT).code(), Some(0));
}
