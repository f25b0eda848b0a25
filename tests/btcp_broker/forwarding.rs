//! Forwarding tools/call from agents to the browser and the answers back.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Broker, scripted_browser};

#[tokio::test]
async fn a_call_is_forwarded_with_a_fresh_id_and_answered_with_the_agents_own() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("fwd").await;
    browser.register(&["echo"]).await;
    let mut agent = broker.agent("fwd").await;
    agent
        .send(&json!({"jsonrpc": "2.0", "id": "agent-id-1", "method": "tools/call",
            "params": {"name": "echo", "arguments": {"x": 1}, "timeout": 5000}}))
        .await;
    let forwarded = browser.request().await;
    assert_eq!(forwarded["method"], "tools/call");
    assert_ne!(forwarded["id"], "agent-id-1", "the broker uses its own id");
    assert_eq!(forwarded["params"], json!({"name": "echo", "arguments": {"x": 1}}));
    browser
        .send(&json!({"jsonrpc": "2.0", "id": forwarded["id"], "result": {
            "content": [{"type": "text", "text": "hi"}], "isError": false}}))
        .await;
    let answer = agent.response(&json!("agent-id-1")).await;
    assert_eq!(answer["result"], json!({"content": [{"type": "text", "text": "hi"}], "isError": false}));
}

#[tokio::test]
async fn two_agents_using_the_same_id_each_get_their_own_answer() {
    let broker = Broker::start(&[]);
    let browser = scripted_browser(broker.browser("same-id").await).await;
    let mut a = broker.agent("same-id").await;
    let mut b = broker.agent("same-id").await;
    for round in 0..20 {
        let (ra, rb) = tokio::join!(
            a.call(7, "tools/call", json!({"name": "echo", "arguments": {"who": "a", "round": round}})),
            b.call(7, "tools/call", json!({"name": "echo", "arguments": {"who": "b", "round": round}})),
        );
        assert_eq!(ra["id"], 7);
        assert_eq!(rb["id"], 7);
        let ta: serde_json::Value = serde_json::from_str(ra["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        let tb: serde_json::Value = serde_json::from_str(rb["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(ta, json!({"who": "a", "round": round}));
        assert_eq!(tb, json!({"who": "b", "round": round}));
    }
    browser.abort();
}

#[tokio::test]
async fn unknown_tool_is_32004_without_contacting_the_browser() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("unknown").await;
    browser.register(&["echo"]).await;
    let mut agent = broker.agent("unknown").await;
    let reply = agent.call(1, "tools/call", json!({"name": "nope", "arguments": {}})).await;
    assert_eq!(reply["error"]["code"], -32004, "{reply}");
    assert!(
        !browser.receives_within(Duration::from_millis(300), |v| v["method"] == "tools/call").await,
        "the browser was not bothered"
    );
}

#[tokio::test]
async fn no_browser_is_32002_at_once() {
    let broker = Broker::start(&[]);
    let mut agent = broker.agent("empty").await;
    let started = Instant::now();
    let reply = agent.call(1, "tools/call", json!({"name": "echo", "arguments": {}, "timeout": 60000})).await;
    assert_eq!(reply["error"]["code"], -32002, "{reply}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn every_call_in_flight_fails_at_once_when_the_browser_drops() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("drop").await;
    browser.register(&["silent"]).await;
    let mut agent = broker.agent("drop").await;
    for id in 0..5 {
        agent
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "silent", "arguments": {}, "timeout": 60000}}))
            .await;
    }
    for _ in 0..5 {
        browser.request().await;
    }
    let dropped = Instant::now();
    drop(browser);
    for id in 0..5 {
        let reply = agent.response(&json!(id)).await;
        assert_eq!(reply["error"]["code"], -32002, "{reply}");
        assert_eq!(reply["error"]["message"], "browser disconnected");
    }
    assert!(dropped.elapsed() < Duration::from_secs(3), "failed at once, not at the 60 s timeout");
    agent.notification("session/browserDisconnected").await;
}

#[tokio::test]
async fn timeout_param_is_honoured_and_a_late_answer_is_dropped() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("late").await;
    browser.register(&["echo"]).await;
    let mut agent = broker.agent("late").await;
    let started = Instant::now();
    agent
        .send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {}, "timeout": 300}}))
        .await;
    let forwarded = browser.request().await;
    let reply = agent.response(&json!(1)).await;
    let elapsed = started.elapsed();
    assert_eq!(reply["error"]["code"], -32001, "{reply}");
    assert!(elapsed >= Duration::from_millis(290) && elapsed < Duration::from_secs(3), "{elapsed:?}");
    // The browser answers after all: nobody gets it, nothing breaks.
    browser.send(&json!({"jsonrpc": "2.0", "id": forwarded["id"], "result": {"content": [], "isError": false}})).await;
    assert!(!agent.receives_within(Duration::from_millis(300), |v| v.get("result").is_some()).await);
    let ping = agent.call(2, "ping", json!({})).await;
    assert_eq!(ping["result"], json!({"pong": true}));
}

#[tokio::test]
async fn default_timeout_applies_and_requested_timeouts_are_capped() {
    let broker = Broker::start(&[("BTCP_CALL_TIMEOUT", "200"), ("BTCP_MAX_CALL_TIMEOUT", "400")]);
    let mut browser = broker.browser("caps").await;
    browser.register(&["silent"]).await;
    let mut agent = broker.agent("caps").await;
    let started = Instant::now();
    let reply = agent.call(1, "tools/call", json!({"name": "silent", "arguments": {}})).await;
    assert_eq!(reply["error"]["code"], -32001);
    assert_eq!(reply["error"]["data"]["timeoutMs"], 200);
    assert!(started.elapsed() < Duration::from_secs(2));
    let started = Instant::now();
    let reply = agent.call(2, "tools/call", json!({"name": "silent", "arguments": {}, "timeout": 600000})).await;
    assert_eq!(reply["error"]["code"], -32001);
    assert_eq!(reply["error"]["data"]["timeoutMs"], 400, "capped");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// The docs promise that a `timeout` above BTCP_MAX_CALL_TIMEOUT is capped:
/// also one too large for u64 (it was -32602). Not-integers stay refused.
#[tokio::test]
async fn a_timeout_beyond_u64_is_capped_not_refused() {
    let broker = Broker::start(&[("BTCP_CALL_TIMEOUT", "200"), ("BTCP_MAX_CALL_TIMEOUT", "300")]);
    let mut browser = broker.browser("huge").await;
    browser.register(&["silent"]).await;
    let mut agent = broker.agent("huge").await;
    for (id, timeout) in [(1, "99999999999999999999"), (2, "18446744073709551616")] {
        let started = Instant::now();
        agent
            .send_text(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"silent","timeout":{timeout}}}}}"#
            ))
            .await;
        let reply = agent.response(&json!(id)).await;
        assert_eq!(reply["error"]["code"], -32001, "timeout {timeout}: {reply}");
        assert_eq!(reply["error"]["data"]["timeoutMs"], 300, "capped: {reply}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
    for (id, timeout) in [(3, json!(1.5)), (4, json!(-1)), (5, json!("5"))] {
        let reply = agent.call(id, "tools/call", json!({"name": "silent", "timeout": timeout})).await;
        assert_eq!(reply["error"]["code"], -32602, "timeout {timeout}: {reply}");
    }
}

#[tokio::test]
async fn result_with_error_is_kept_as_the_result_and_malformed_answers_are_32603() {
    let broker = Broker::start(&[]);
    let browser = scripted_browser(broker.browser("norm").await).await;
    let mut agent = broker.agent("norm").await;
    let reply = agent.call(1, "tools/call", json!({"name": "fail", "arguments": {}})).await;
    assert!(reply.get("error").is_none(), "{reply}");
    assert_eq!(reply["result"]["isError"], true);
    assert_eq!(reply["result"]["content"][0]["text"], "Error: boom");
    let reply = agent.call(2, "tools/call", json!({"name": "bad", "arguments": {}})).await;
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    browser.abort();
}

#[tokio::test]
async fn a_browser_error_answer_is_passed_on_as_it_is() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("err").await;
    browser.register(&["echo"]).await;
    let mut agent = broker.agent("err").await;
    agent
        .send(&json!({"jsonrpc": "2.0", "id": "x", "method": "tools/call",
            "params": {"name": "echo", "arguments": {}}}))
        .await;
    let forwarded = browser.request().await;
    browser
        .send(&json!({"jsonrpc": "2.0", "id": forwarded["id"],
            "error": {"code": -32050, "message": "page said no", "data": {"why": 1}}}))
        .await;
    let reply = agent.response(&json!("x")).await;
    assert_eq!(reply["error"], json!({"code": -32050, "message": "page said no", "data": {"why": 1}}));
}

#[tokio::test]
async fn calls_over_the_rate_get_32005() {
    let broker = Broker::start(&[("BTCP_RATE_LIMIT", "1"), ("BTCP_RATE_BURST", "3")]);
    let browser = scripted_browser(broker.browser("rate").await).await;
    let mut agent = broker.agent("rate").await;
    let mut codes = Vec::new();
    for id in 0..5 {
        let reply = agent.call(id, "tools/call", json!({"name": "echo", "arguments": {}})).await;
        codes.push(reply["error"]["code"].as_i64().unwrap_or(0));
    }
    assert_eq!(codes, [0, 0, 0, -32005, -32005]);
    // Another agent has its own bucket.
    let mut other = broker.agent("rate").await;
    let reply = other.call(1, "tools/call", json!({"name": "echo", "arguments": {}})).await;
    assert!(reply.get("result").is_some(), "{reply}");
    browser.abort();
}

#[tokio::test]
async fn an_agent_leaving_forgets_its_calls_and_the_browser_carries_on() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("agent-gone").await;
    browser.register(&["echo"]).await;
    let mut agent = broker.agent("agent-gone").await;
    agent
        .send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {}}}))
        .await;
    let forwarded = browser.request().await;
    agent.close().await;
    browser.send(&json!({"jsonrpc": "2.0", "id": forwarded["id"], "result": {"content": [], "isError": false}})).await;
    let reply = browser.call(9, "ping", json!({})).await;
    assert_eq!(reply["result"]["pong"], true);
}

#[tokio::test]
async fn an_answer_without_result_or_error_fails_the_call_at_once_and_is_not_bounced() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("lacks").await;
    browser.register(&["echo"]).await;
    let mut agent = broker.agent("lacks").await;
    agent
        .send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {}, "timeout": 30000}}))
        .await;
    let forwarded = browser.request().await;
    let answered = Instant::now();
    browser.send(&json!({"jsonrpc": "2.0", "id": forwarded["id"]})).await;
    let reply = agent.response(&json!(1)).await;
    let waited = answered.elapsed();
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    assert_eq!(reply["error"]["data"]["reason"], "malformed_answer", "{reply}");
    assert!(waited < Duration::from_secs(1), "the agent waited {waited:?}");
    let bounced = browser.receives_within(Duration::from_millis(500), |v| v.get("error").is_some()).await;
    assert!(!bounced, "the malformed answer was bounced back to the browser as an invalid request");
    // The browser's connection carries on.
    assert_eq!(browser.call(9, "ping", json!({})).await["result"]["pong"], true);
}

/// An agent's calls past its 32 handler slots wait for one. The wait counts
/// against their `timeout`, and a call the agent cancels while it waits
/// never reaches the browser.
#[tokio::test]
async fn a_waiting_call_keeps_its_timeout_and_a_cancelled_one_never_reaches_the_browser() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("waiting").await;
    browser.register(&["silent"]).await;
    let mut agent = broker.agent("waiting").await;
    let call = |id: u64, timeout: u64, marker: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "silent", "arguments": {"marker": marker}, "timeout": timeout}})
    };
    // Calls the browser never answers hold every slot for a second.
    for id in 0..32 {
        agent.send(&call(id, 1000, "holder")).await;
    }
    for _ in 0..32 {
        browser.request().await;
    }
    let started = Instant::now();
    agent.send(&call(100, 1500, "short")).await;
    agent.send(&call(101, 60_000, "cancelled")).await;
    agent.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 101}})).await;

    let cancelled = agent.response(&json!(101)).await;
    assert_eq!(cancelled["error"]["code"], -32800, "{cancelled}");
    let short = agent.response(&json!(100)).await;
    let elapsed = started.elapsed();
    assert_eq!(short["error"]["code"], -32001, "{short}");
    // Its 1.5 s from when it was sent, not from when a slot freed (2.5 s).
    assert!(elapsed >= Duration::from_millis(1450) && elapsed < Duration::from_millis(2200), "{elapsed:?}");
    let reached = |v: &serde_json::Value| v["params"]["arguments"]["marker"] == "cancelled";
    assert!(!browser.receives_within(Duration::from_millis(500), reached).await, "the cancelled call was forwarded");
}
