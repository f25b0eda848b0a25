//! Interoperation with the public `btcp-client` package's WebSocket transport
//! (not on the npm registry, so its documented behaviour is replayed here):
//! it connects to `<url>/ws?clientType=browser&version=1.0.0` without a
//! sessionId, sends JSON-RPC `ping` with string ids (`ping-<ms>`), requests
//! with ids like `btcp-<ms>-<n>`, registers with `tools/register`, answers
//! forwarded calls with `{content, isError}`, and on a tool error sends both
//! `result` (isError: true) and `error`.

use serde_json::json;

use crate::support::{Broker, Ws};

#[tokio::test]
async fn the_public_clients_websocket_behaviour_works_end_to_end() {
    let broker = Broker::start(&[]);
    let mut browser = Ws::connect(&broker.url("/ws?clientType=browser&version=1.0.0")).await;
    let session = browser.session_id();

    let pong = browser.call("ping-1700000000000", "ping", json!(null)).await;
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": "ping-1700000000000", "result": {"pong": true}}));
    let registered = browser
        .call(
            "btcp-1700000000001-1",
            "tools/register",
            json!({"tools": [{
                "name": "greet",
                "description": "Greet a person by name",
                "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
            }]}),
        )
        .await;
    assert_eq!(registered["result"]["registered"], 1);

    let mut agent = broker.agent(&session).await;
    agent
        .send(&json!({"jsonrpc": "2.0", "id": "6", "method": "tools/call",
            "params": {"name": "greet", "arguments": {"name": "Ada"}, "timeout": 30000}}))
        .await;
    let call = browser.request().await;
    assert_eq!(call["params"], json!({"name": "greet", "arguments": {"name": "Ada"}}));
    browser
        .send(&json!({"jsonrpc": "2.0", "id": call["id"],
            "result": {"content": [{"type": "text", "text": "Hello, Ada!"}], "isError": false}}))
        .await;
    let answer = agent.response(&json!("6")).await;
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "id": "6",
            "result": {"content": [{"type": "text", "text": "Hello, Ada!"}], "isError": false}})
    );

    // A failing handler: createToolCallErrorResponse sends both members.
    agent
        .send(&json!({"jsonrpc": "2.0", "id": "7", "method": "tools/call",
            "params": {"name": "greet", "arguments": {}}}))
        .await;
    let call = browser.request().await;
    browser
        .send(&json!({"jsonrpc": "2.0", "id": call["id"],
            "result": {"content": [{"type": "text", "text": "Error: name is required"}], "isError": true},
            "error": {"code": -32603, "message": "name is required"}}))
        .await;
    let answer = agent.response(&json!("7")).await;
    assert!(answer.get("error").is_none(), "{answer}");
    assert_eq!(answer["result"]["isError"], true);
    assert_eq!(answer["result"]["content"][0]["text"], "Error: name is required");

    // Its keep-alive pings keep working in between.
    let pong = browser.call("ping-1700000030000", "ping", json!(null)).await;
    assert_eq!(pong["result"]["pong"], true);
}
