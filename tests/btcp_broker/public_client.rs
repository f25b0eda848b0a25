//! Interoperation with the public `btcp-client` package's WebSocket transport
//! (not on the npm registry, so its documented behaviour is replayed here):
//! it connects to `<url>/ws?clientType=browser&version=1.0.0` without a
//! sessionId, sends JSON-RPC `ping` with string ids (`ping-<ms>`), requests
//! with ids like `btcp-<ms>-<n>`, registers with `tools/register`, answers
//! forwarded calls with `{content, isError}`, and on a tool error sends both
//! `result` (isError: true) and `error`.

use serde_json::json;

use crate::sse::SseClient;
use crate::support::{Broker, Ws, http};

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

/// `new URL("ws://127.0.0.1:8765")` has the path `/`, to which the client's
/// WebSocketTransport appends `/ws`; its HTTP transport appends `/message` to
/// a URL given with a trailing slash.
#[tokio::test]
async fn the_public_clients_documented_base_url_connects_despite_its_double_slash() {
    let broker = Broker::start(&[]);
    let url = format!("ws://127.0.0.1:{}//ws?sessionId=slashes&clientType=browser&version=1.0.0", broker.port);
    let mut browser = Ws::connect(&url).await;
    assert_eq!(browser.session_id(), "slashes");
    browser.register(&["greet"]).await;
    for path in ["/ws/?clientType=agent&sessionId=slashes", "///ws//?clientType=agent&sessionId=slashes"] {
        let mut agent = Ws::connect(&broker.url(path)).await;
        assert_eq!(agent.call(1, "tools/list", json!({})).await["result"]["tools"][0]["name"], "greet", "{path}");
    }

    let mut sse =
        SseClient::connect_path(broker.port, "//events?sessionId=slashes-sse&clientType=browser&version=1.0.0").await;
    assert_eq!(sse.session_id(), "slashes-sse");
    let client_id = sse.client_id();
    for path in ["//message", "/message/"] {
        let ping = json!({"jsonrpc": "2.0", "id": path, "method": "ping"});
        let port = broker.port;
        let body = ping.to_string();
        let id = client_id.clone();
        let status = tokio::task::spawn_blocking(move || {
            http(port, "POST", path, &[("X-Client-ID", &id), ("Content-Type", "application/json")], body.as_bytes())
                .status
        })
        .await
        .unwrap();
        assert_eq!(status, 202, "POST {path}");
        let reply = sse.next(|e| e.data["id"] == path).await;
        assert_eq!(reply.data["result"]["pong"], true);
    }
    // Only slashes are forgiven: other paths stay unknown.
    assert_eq!(broker.get("//wss").status, 404);
    assert_eq!(broker.get("//health/").status, 200);
}
