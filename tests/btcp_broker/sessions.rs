//! Sessions: replacement, reconnects, caps, idle cleanup, size limits.

use std::time::Duration;

use serde_json::json;

use crate::support::{Broker, WAIT, Ws, scripted_browser, tool};

#[tokio::test]
async fn a_second_browser_replaces_the_first_which_is_told_and_closed_with_4001() {
    let broker = Broker::start(&[]);
    let mut first = broker.browser("rep").await;
    first.register(&["old"]).await;
    let mut agent = broker.agent("rep").await;
    let second = broker.browser("rep").await;
    let replaced = first.notification("session/replaced").await;
    assert_eq!(replaced["params"]["sessionId"], "rep");
    assert_eq!(first.closed().await, Some(4001));
    // The successor serves the session; the old one's exit did not unseat it.
    let browser = scripted_browser(second).await;
    agent.notification("tools/updated").await;
    let reply = agent.call(1, "tools/call", json!({"name": "echo", "arguments": {"n": 1}})).await;
    assert_eq!(reply["result"]["content"][0]["text"], "{\"n\":1}", "{reply}");
    assert_eq!(broker.get("/sessions").json()[0]["hasBrowser"], true);
    browser.abort();
}

#[tokio::test]
async fn a_browser_reconnecting_finds_its_agents_joined_and_tools_cached() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("back").await;
    browser.register(&["kept"]).await;
    let mut agent = broker.agent("back").await;
    browser.close().await;
    agent.notification("session/browserDisconnected").await;
    let reply = agent.call(1, "tools/list", json!({})).await;
    assert_eq!(reply["result"]["tools"], json!([tool("kept")]), "cached");
    let reply = agent.call(2, "tools/call", json!({"name": "kept", "arguments": {}})).await;
    assert_eq!(reply["error"]["code"], -32002, "no browser meanwhile");

    let mut browser = broker.browser("back").await;
    agent.notification("session/browserConnected").await;
    agent
        .send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "kept", "arguments": {}}}))
        .await;
    let forwarded = browser.request().await;
    browser.send(&json!({"jsonrpc": "2.0", "id": forwarded["id"], "result": {"content": [], "isError": false}})).await;
    assert_eq!(agent.response(&json!(3)).await["result"]["isError"], false);
}

#[tokio::test]
async fn agents_per_session_are_capped() {
    let broker = Broker::start(&[("BTCP_MAX_AGENTS_PER_SESSION", "2")]);
    let _browser = broker.browser("cap").await;
    let _a = broker.agent("cap").await;
    let _b = broker.agent("cap").await;
    let refused = Ws::try_connect(&broker.url("/ws?clientType=agent&sessionId=cap"), &[]).await.err().unwrap();
    assert!(refused.starts_with("503"), "{refused}");
    let mut c = Ws::connect(&broker.url("/ws?clientType=agent")).await;
    let reply = c.call(1, "session/join", json!({"sessionId": "cap"})).await;
    assert_eq!(reply["error"]["code"], -32000, "{reply}");
    assert_eq!(reply["error"]["data"]["maxAgents"], 2);
}

#[tokio::test]
async fn sessions_are_capped() {
    let broker = Broker::start(&[("BTCP_MAX_SESSIONS", "2")]);
    let _a = broker.browser("s1").await;
    let _b = broker.browser("s2").await;
    let refused = Ws::try_connect(&broker.url("/ws?clientType=browser&sessionId=s3"), &[]).await.err().unwrap();
    assert!(refused.starts_with("503") && refused.contains("capacity"), "{refused}");
    // An existing session can still be reached.
    let _c = broker.agent("s1").await;
}

#[tokio::test]
async fn an_unattended_session_is_removed_after_the_idle_ttl() {
    let broker = Broker::start(&[("BTCP_SESSION_IDLE_TTL", "300ms")]);
    let browser = broker.browser("idle").await;
    let agent = broker.agent("idle").await;
    let sessions = || broker.get("/sessions").json().as_array().unwrap().len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(sessions(), 1, "attended sessions live on");
    browser.close().await;
    agent.close().await;
    assert!(integration_tests::eventually(Duration::from_secs(5), || sessions() == 0), "removed after the TTL");
}

#[tokio::test]
async fn oversized_messages_close_with_1009_and_too_many_tools_are_refused() {
    let broker = Broker::start(&[("BTCP_MAX_MESSAGE", "2048"), ("BTCP_MAX_TOOLS_PER_SESSION", "2")]);
    let mut browser = broker.browser("big").await;
    let reply = browser.register(&["a", "b", "c"]).await;
    assert_eq!(reply["error"]["code"], -32602);
    assert!(reply["error"]["message"].as_str().unwrap().contains("too many tools"));
    let big = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(4096));
    browser.send_text(&big).await;
    assert_eq!(browser.closed().await, Some(1009));
}

#[tokio::test]
async fn binary_frames_close_with_1003() {
    use futures_util::SinkExt;
    let broker = Broker::start(&[]);
    let (mut ws, _) = tokio_tungstenite::connect_async(broker.url("/ws?clientType=agent")).await.unwrap();
    ws.send(tokio_tungstenite::tungstenite::Message::binary(vec![1, 2])).await.unwrap();
    let code = tokio::time::timeout(WAIT, async {
        use futures_util::StreamExt;
        while let Some(Ok(m)) = ws.next().await {
            if let tokio_tungstenite::tungstenite::Message::Close(frame) = m {
                return frame.map(|f| u16::from(f.code));
            }
        }
        None
    })
    .await
    .unwrap();
    assert_eq!(code, Some(1003));
}

#[tokio::test]
async fn sigterm_closes_peers_with_1001_and_exits_0() {
    let mut broker = Broker::start(&[]);
    let mut agent = broker.agent("bye").await;
    broker.daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(agent.closed().await, Some(1001));
    let status = broker.daemon.wait_exit(WAIT);
    assert_eq!(status.code(), Some(0));
}
