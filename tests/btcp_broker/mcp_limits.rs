//! What `/mcp` holds and how it ends: its MCP sessions are capped (an
//! `initialize` flood cannot grow the broker), spoken to by hand over raw
//! HTTP.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use integration_tests::{peak_rss, rss_bytes};
use serde_json::json;

use super::support::{Broker, HttpResponse, http};

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
