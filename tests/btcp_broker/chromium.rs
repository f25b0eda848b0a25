//! End to end in a real browser: headless Chromium opens the broker's demo page,
//! which connects as the session's browser and registers DOM tools; the test
//! is the agent, and the answers must reflect the real page.

use std::time::Duration;

use integration_tests::browser::Chromium;
use integration_tests::require_tool;
use serde_json::{Value, json};

use crate::support::{Broker, Ws};

/// Joins `session` as an agent and waits until the page registered its tools.
async fn agent_with_page_tools(broker: &Broker, session: &str) -> Ws {
    let mut agent = broker.agent(session).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut id = 0;
    loop {
        id += 1;
        let reply = agent.call(id, "tools/list", json!({})).await;
        if reply["result"]["tools"].as_array().is_some_and(|t| t.len() >= 5) {
            return agent;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the demo page did not register its tools within 60 s:\n{}",
            broker.daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn call_text(agent: &mut Ws, id: u64, name: &str, arguments: Value) -> (String, bool) {
    let reply = agent.call(id, "tools/call", json!({"name": name, "arguments": arguments, "timeout": 10000})).await;
    let result = &reply["result"];
    assert!(result.is_object(), "{name}: {reply}");
    let text = result["content"][0]["text"].as_str().unwrap_or("").to_owned();
    (text, result["isError"] == true)
}

async fn exercise_the_demo_page(transport: &str) {
    if !require_tool("chromium") {
        return;
    }
    let broker = Broker::start(&[]);
    let session = format!("chromium-{transport}");
    let _chromium =
        Chromium::open(&format!("http://127.0.0.1:{}/?sessionId={session}&transport={transport}", broker.port));
    let mut agent = agent_with_page_tools(&broker, &session).await;

    let tools = agent.call(100, "tools/list", json!({})).await;
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for expected in ["page_title", "query_text", "click", "fill", "page_info"] {
        assert!(names.contains(&expected), "{names:?}");
    }

    assert_eq!(call_text(&mut agent, 1, "page_title", json!({})).await, ("BTCP demo page".to_owned(), false));
    assert_eq!(
        call_text(&mut agent, 2, "query_text", json!({"selector": "#greeting"})).await,
        ("Hello from the BTCP demo page".to_owned(), false)
    );
    assert_eq!(call_text(&mut agent, 3, "query_text", json!({"selector": "#counter"})).await.0, "0");
    for id in 4..6 {
        let (text, is_error) = call_text(&mut agent, id, "click", json!({"selector": "#counter-button"})).await;
        assert_eq!((text.as_str(), is_error), ("Clicked: #counter-button", false));
    }
    assert_eq!(
        call_text(&mut agent, 6, "query_text", json!({"selector": "#counter"})).await.0,
        "2",
        "the clicks changed the real DOM"
    );
    let (info, _) = call_text(&mut agent, 7, "page_info", json!({})).await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["clicks"], 2);
    assert_eq!(info["items"], json!(["apples", "pears", "plums"]));
    assert!(info["url"].as_str().unwrap().contains(&session));
    // The README's fill, on the page's input.
    let filled = call_text(&mut agent, 9, "fill", json!({"selector": "#note", "value": "from the agent"})).await;
    assert_eq!(filled, ("Filled: #note".to_owned(), false));
    let (text, is_error) = call_text(&mut agent, 8, "query_text", json!({"selector": "#missing"})).await;
    assert!(is_error && text.contains("no element matches #missing"), "{text}");

    let sessions = broker.get("/sessions").json();
    assert_eq!(sessions[0]["hasBrowser"], true);
    assert_eq!(sessions[0]["toolCount"], 5);
}

#[tokio::test]
async fn the_demo_page_in_headless_chromium_serves_an_agent_over_websocket() {
    exercise_the_demo_page("websocket").await;
}

#[tokio::test]
async fn the_demo_page_in_headless_chromium_serves_an_agent_over_sse() {
    exercise_the_demo_page("sse").await;
}

#[tokio::test]
async fn the_demo_page_reconnects_and_registers_again_after_a_broker_restart() {
    if !require_tool("chromium") {
        return;
    }
    let mut broker = Broker::start(&[]);
    let port = broker.port;
    let _chromium = Chromium::open(&format!("http://127.0.0.1:{port}/?sessionId=again"));
    let agent = agent_with_page_tools(&broker, "again").await;
    drop(agent);
    // The broker goes away and comes back on the same port, empty.
    let status = broker.daemon.terminate();
    assert!(status.success());
    let broker = Broker::start_on(port, &[]);
    // btcp.js reconnects (backoff from 0.5 s) with the same session id and
    // registers its tools again, so the page is usable without a reload.
    let mut agent = agent_with_page_tools(&broker, "again").await;
    assert_eq!(
        call_text(&mut agent, 1, "query_text", json!({"selector": "#greeting"})).await,
        ("Hello from the BTCP demo page".to_owned(), false)
    );
}
