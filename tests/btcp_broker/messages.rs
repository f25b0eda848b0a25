//! The messages: welcome, hello, ping, join/leave, register, list, and the
//! notifications agents get.

use std::time::Duration;

use serde_json::json;

use crate::support::{Broker, Ws, tool};

#[tokio::test]
async fn welcome_names_the_session_and_client_and_a_browser_without_id_gets_one() {
    let broker = Broker::start(&[]);
    let browser = Ws::connect(&broker.url("/ws?clientType=browser")).await;
    let w = &browser.welcome;
    let session = browser.session_id();
    assert!(session.len() >= 16, "a generated id: {session}");
    assert_eq!(w["clientType"], "browser");
    assert_eq!(w["protocolVersion"], "1.0.0");
    assert!(w["clientId"].is_string() && w["serverVersion"].is_string());
    assert!(w.get("availableSessions").is_none(), "only agents get the list");

    let agent = Ws::connect(&broker.url("/ws?clientType=agent")).await;
    assert_eq!(agent.welcome["clientType"], "agent");
    assert_eq!(agent.welcome["sessionId"], serde_json::Value::Null);
    assert_eq!(agent.welcome["availableSessions"], json!([session]));
    assert_ne!(agent.welcome["clientId"], w["clientId"]);
}

#[tokio::test]
async fn hello_and_ping_answer_with_string_ids() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("hp").await;
    let reply = browser
        .call("h-1", "hello", json!({"clientType": "browser", "version": "1.0.0", "capabilities": ["dom:read"]}))
        .await;
    assert_eq!(reply["id"], "h-1");
    assert_eq!(reply["result"]["sessionId"], "hp");
    assert_eq!(reply["result"]["clientId"], browser.welcome["clientId"]);
    assert!(reply["result"]["serverVersion"].is_string());
    let reply = browser.call("ping-17", "ping", json!(null)).await;
    assert_eq!(reply, json!({"jsonrpc": "2.0", "id": "ping-17", "result": {"pong": true}}));
    let reply = browser.call("h-2", "hello", json!({"clientType": "agent"})).await;
    assert_eq!(reply["error"]["code"], -32602, "the type is fixed by the URL");
}

#[tokio::test]
async fn join_list_and_leave() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("jl").await;
    browser.register(&["a", "b"]).await;
    let mut agent = Ws::connect(&broker.url("/ws?clientType=agent")).await;
    let reply = agent.call(1, "tools/list", json!({})).await;
    assert_eq!(reply["error"]["code"], -32003, "not joined yet");
    let reply = agent.call(2, "session/join", json!({"sessionId": "nope"})).await;
    assert_eq!(reply["error"]["code"], -32003);
    let reply = agent.call(3, "session/join", json!({"sessionId": "jl"})).await;
    assert_eq!(reply["result"]["sessionId"], "jl");
    assert_eq!(reply["result"]["tools"], json!([tool("a"), tool("b")]));
    let reply = agent.call(4, "tools/list", json!({})).await;
    assert_eq!(reply["result"]["tools"], json!([tool("a"), tool("b")]));
    assert!(
        !browser.receives_within(Duration::from_millis(200), |v| v.get("method").is_some()).await,
        "tools/list is answered from the broker's copy"
    );
    let reply = agent.call(5, "session/leave", json!({})).await;
    assert_eq!(reply["result"], json!({"left": "jl"}));
    let reply = agent.call(6, "session/leave", json!({})).await;
    assert_eq!(reply["error"]["code"], -32003);
    assert_eq!(broker.get("/sessions").json()[0]["agentCount"], 0);
}

#[tokio::test]
async fn register_validates_and_lists_every_problem() {
    let broker = Broker::start(&[("BTCP_MAX_TOOLS_PER_SESSION", "3")]);
    let mut browser = broker.browser("val").await;
    let reply = browser
        .call(
            1,
            "tools/register",
            json!({"tools": [
                tool("a"),
                tool("a"),
                {"name": "", "inputSchema": {}},
                {"name": "x", "inputSchema": "object"},
            ]}),
        )
        .await;
    let error = &reply["error"];
    assert_eq!(error["code"], -32602, "{reply}");
    let problems = error["data"]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 4, "{problems:?}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("too many tools: 4"), "{message}");
    assert!(message.contains("duplicate name \"a\""), "{message}");
    assert!(message.contains("tools[2].name"), "{message}");
    assert!(message.contains("tools[3].inputSchema"), "{message}");
    let reply = browser.call(2, "tools/register", json!({"tools": "no"})).await;
    assert_eq!(reply["error"]["code"], -32602);
    let reply = browser.register(&["ok"]).await;
    assert_eq!(reply["result"], json!({"registered": 1}));
}

#[tokio::test]
async fn agents_hear_about_tools_and_their_browser() {
    let broker = Broker::start(&[]);
    let mut agent = broker.agent("events").await;
    assert_eq!(agent.welcome["sessionId"], "events", "joined from the URL");
    let mut browser = broker.browser("events").await;
    let connected = agent.notification("session/browserConnected").await;
    assert_eq!(connected["params"]["sessionId"], "events");
    browser.register(&["t1"]).await;
    let updated = agent.notification("tools/updated").await;
    assert_eq!(updated["params"]["tools"], json!([tool("t1")]));
    agent.notification("notifications/tools/list_changed").await;
    browser.close().await;
    let gone = agent.notification("session/browserDisconnected").await;
    assert_eq!(gone["params"]["sessionId"], "events");
}

#[tokio::test]
async fn each_side_may_only_do_its_own_part() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("roles").await;
    let mut agent = broker.agent("roles").await;
    let reply = agent.call(1, "tools/register", json!({"tools": [tool("x")]})).await;
    assert_eq!(reply["error"]["code"], -32006, "{reply}");
    for (method, params) in [("tools/call", json!({"name": "x"})), ("session/join", json!({"sessionId": "roles"}))] {
        let reply = browser.call(1, method, params).await;
        assert_eq!(reply["error"]["code"], -32006, "{method}: {reply}");
    }
}

#[tokio::test]
async fn protocol_errors_are_json_rpc_errors_and_the_connection_lives_on() {
    let broker = Broker::start(&[]);
    let mut agent = broker.agent("errs").await;
    agent.send_text("{not json").await;
    let reply = agent.response(&serde_json::Value::Null).await;
    assert_eq!(reply["error"]["code"], -32700);
    let reply = agent.call(1, "no/such", json!({})).await;
    assert_eq!(reply["error"]["code"], -32601);
    let reply = agent.call(2, "tools/call", json!({"arguments": {}})).await;
    assert_eq!(reply["error"]["code"], -32602);
    assert!(reply["error"]["message"].as_str().unwrap().contains("name"));
    agent.send_text(r#"[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","id":"b","method":"ping"}]"#).await;
    let batch = agent.next_matching(|v| v.is_array()).await;
    assert_eq!(batch.as_array().unwrap().len(), 2);
    let reply = agent.call(3, "ping", json!({})).await;
    assert_eq!(reply["result"]["pong"], true);
}

#[tokio::test]
async fn hello_naming_another_client_type_says_which_the_connection_is() {
    let broker = Broker::start(&[]);
    let mut agent = broker.agent("hello-type").await;
    let reply = agent.call(1, "hello", json!({"clientType": "browser"})).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("this connection is an agent (from its URL)"), "{message}");
}
