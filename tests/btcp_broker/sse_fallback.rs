//! The SSE session fallback: a POST that names only its session (`X-Session-ID`,
//! what the public client's HTTP transport sends) speaks for that session's SSE
//! browser. The session id is then all a sender shows, so what it can reach is
//! narrowed: forwarded ids cannot be guessed, generated session ids are long and
//! random, a short chosen one is warned about, and the fallback can be turned off.

use std::time::Duration;

use serde_json::{Value, json};

use crate::sse::{SseClient, post_message};
use crate::support::{Broker, Ws, tool};

/// Connects an SSE browser to `session` that registered the tool `echo`.
async fn sse_browser(broker: &Broker, session: &str) -> SseClient {
    let mut browser = SseClient::connect(broker.port, &format!("clientType=browser&sessionId={session}")).await;
    let reply = browser.call(json!("reg"), "tools/register", json!({"tools": [tool("echo")]})).await;
    assert_eq!(reply.data["result"]["registered"], 1, "{:?}", reply.data);
    browser
}

/// Has the agent call `echo` and returns the id the browser saw.
async fn forwarded_id(agent: &mut Ws, browser: &mut SseClient, agent_id: u64, timeout_ms: u64) -> Value {
    agent
        .send(&json!({"jsonrpc": "2.0", "id": agent_id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {}, "timeout": timeout_ms}}))
        .await;
    browser.next(|e| e.data["method"] == "tools/call").await.data["id"].clone()
}

fn answer(id: &Value, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}], "isError": false}})
}

fn is_hex_id(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[tokio::test]
async fn forwarded_ids_cannot_be_guessed_from_the_last_ones() {
    let session = "victim-3b9f0c2e7d4a4f1e9b6c";
    let broker = Broker::start(&[]);
    let mut browser = sse_browser(&broker, session).await;
    let mut agent = broker.agent(session).await;
    let mut seen = Vec::new();
    for n in 1..=3 {
        let id = forwarded_id(&mut agent, &mut browser, n, 5000).await;
        assert_eq!(browser.post(&answer(&id, "ok")), 202);
        agent.response(&json!(n)).await;
        let id = id.as_u64().unwrap_or_else(|| panic!("a numeric id: {id}"));
        assert!(id < 1 << 53, "{id} is not exact in JavaScript");
        seen.push(id);
    }
    assert!(seen.windows(2).all(|w| w[1].abs_diff(w[0]) > 1000), "forwarded ids follow each other: {seen:?}");

    // An attacker who knows only the session id answers blindly after them.
    let pending = forwarded_id(&mut agent, &mut browser, 99, 1500).await;
    let last = *seen.last().unwrap();
    let port = broker.port;
    for guess in (last + 1..last + 20).chain(1..20) {
        let status = post_message(port, &[("X-Session-ID", session)], &answer(&json!(guess), "forged")).status;
        assert_eq!(status, 202, "the fallback stays on by default");
    }
    let reply = agent.response(&json!(99)).await;
    assert_eq!(reply["error"]["code"], -32001, "a guessed id answered the call: {reply}");
    assert_ne!(pending.as_u64(), Some(last + 1));
}

#[tokio::test]
async fn sessions_and_clients_the_broker_names_get_128_random_bits() {
    let broker = Broker::start(&[]);
    let ws = Ws::connect(&broker.url("/ws?clientType=browser")).await;
    let sse = SseClient::connect(broker.port, "clientType=browser").await;
    let ids = [ws.session_id(), sse.session_id(), ws.welcome["clientId"].as_str().unwrap().to_owned(), sse.client_id()];
    for id in &ids {
        assert!(is_hex_id(id), "{id:?} is not 32 hex digits");
    }
    assert!(ids.iter().enumerate().all(|(i, a)| ids[i + 1..].iter().all(|b| a != b)), "{ids:?}");
}

const SHORT_ID_WARNING: &str = "is short and the SSE session fallback is on";

#[tokio::test]
async fn a_short_chosen_session_id_with_the_fallback_on_is_warned_about_once() {
    let broker = Broker::start(&[]);
    for _ in 0..3 {
        let browser = SseClient::connect(broker.port, "clientType=browser&sessionId=demo").await;
        browser.close().await;
        let browsers = || broker.get("/health").json()["browsers"].as_u64();
        assert!(integration_tests::eventually(Duration::from_secs(5), || browsers() == Some(0)));
    }
    // Long ids and WebSocket browsers (never reached by the fallback) are not warned about.
    let _long = SseClient::connect(broker.port, "clientType=browser&sessionId=0f3c9a7e52b14d6c8e1a9b2d").await;
    let _ws = broker.browser("ws-short").await;
    assert!(broker.daemon.wait_for_log(SHORT_ID_WARNING, Duration::from_secs(5)));
    let log = broker.daemon.stderr();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(SHORT_ID_WARNING)).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(warnings[0].contains("demo"), "{}", warnings[0]);

    let off = Broker::start(&[("BTCP_SSE_SESSION_FALLBACK", "false"), ("RUST_LOG", "info")]);
    let _quiet = SseClient::connect(off.port, "clientType=browser&sessionId=demo").await;
    // Logged after the warning would have been, through the same ordered log.
    assert!(off.daemon.wait_for_log("peer connected", Duration::from_secs(5)), "{}", off.daemon.stderr());
    assert!(!off.daemon.stderr().contains(SHORT_ID_WARNING), "{}", off.daemon.stderr());
}

#[tokio::test]
async fn the_fallback_registers_tools_only_while_the_browsers_stream_is_connected() {
    let session = "fallback-3f1d8c0b9a7e4c52b6d1";
    let broker = Broker::start(&[]);
    let mut browser = SseClient::connect(broker.port, &format!("clientType=browser&sessionId={session}")).await;
    // The public client's way: only X-Session-ID.
    let register = |id: &str, names: &[&str]| {
        let tools: Vec<Value> = names.iter().map(|n| tool(n)).collect();
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/register", "params": {"tools": tools}})
    };
    let port = broker.port;
    let response = post_message(port, &[("X-Session-ID", session)], &register("r1", &["a", "b"]));
    assert_eq!(response.status, 202, "{}", response.body);
    let reply = browser.next(|e| e.data["id"] == "r1").await;
    assert_eq!(reply.data["result"]["registered"], 2);

    browser.close().await;
    let browsers = || broker.get("/health").json()["browsers"].as_u64();
    assert!(integration_tests::eventually(Duration::from_secs(5), || browsers() == Some(0)));
    let response = post_message(port, &[("X-Session-ID", session)], &register("r2", &["forged"]));
    assert_eq!(response.status, 404, "{}", response.body);
    let mut agent = broker.agent(session).await;
    let tools = agent.call(1, "tools/list", json!({})).await;
    assert_eq!(tools["result"]["tools"].as_array().map(Vec::len), Some(2), "{tools}");
}

#[tokio::test]
async fn with_the_fallback_off_a_post_must_name_its_client() {
    let session = "nofallback-7c2e9d4b1a8f4e36";
    let broker = Broker::start(&[("BTCP_SSE_SESSION_FALLBACK", "false")]);
    let mut browser = SseClient::connect(broker.port, &format!("clientType=browser&sessionId={session}")).await;
    let ping = json!({"jsonrpc": "2.0", "id": "p", "method": "ping"});
    let response = post_message(broker.port, &[("X-Session-ID", session)], &ping);
    assert_eq!(response.status, 400, "{}", response.body);
    assert_eq!(response.json()["reason"], "client_id_required");
    assert!(response.json()["error"].as_str().unwrap().contains("BTCP_SSE_SESSION_FALLBACK"));
    assert!(!browser.receives_within(Duration::from_millis(300), |e| e.data["id"] == "p").await);
    assert_eq!(browser.post(&ping), 202);
    assert_eq!(browser.next(|e| e.data["id"] == "p").await.data["result"]["pong"], true);
}
