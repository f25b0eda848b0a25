//! The MCP front door from any node: `btcp-broker mcp` and `/mcp` on nodes
//! without the session's browser, driven by the official MCP Python SDK.

use integration_tests::{McpClient, NatsServer, bin_path};
use serde_json::json;

use crate::cluster::{brokers, nats_available, wait_owned};
use crate::support::scripted_browser;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_on_stdio_and_over_http_reaches_a_browser_on_another_node() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 3, &[]);
    let _browser = scripted_browser(nodes[0].browser("mcp-far").await).await;
    wait_owned(&nodes[2], "mcp-far", "node1");

    let Some(mut stdio) = McpClient::start() else { return };
    let bin = bin_path("btcp-broker");
    let port = nodes[1].port.to_string();
    tokio::task::block_in_place(|| {
        let command = [bin.to_str().unwrap(), "mcp", "--session", "mcp-far", "--port", &port];
        stdio.open_stdio(&command, &[], "auto", json!({"tools": true}));
        let tools = stdio.ok(json!({"op": "list_tools"}));
        assert_eq!(tools["tools"].as_array().unwrap().len(), 5, "{tools}");
        let echoed = stdio.ok(json!({"op": "call_tool", "name": "echo", "arguments": {"via": "stdio"}}));
        assert_eq!(McpClient::text(&echoed), r#"{"via":"stdio"}"#, "{echoed}");
    });

    let Some(mut http) = McpClient::start() else { return };
    let url = format!("http://127.0.0.1:{}/mcp?sessionId=mcp-far", nodes[2].port);
    tokio::task::block_in_place(|| {
        http.ok(json!({"op": "open", "server": {"url": url}, "mode": "auto", "listen": {"tools": true}}));
        let echoed = http.ok(json!({"op": "call_tool", "name": "echo", "arguments": {"via": "http"}}));
        assert_eq!(McpClient::text(&echoed), r#"{"via":"http"}"#, "{echoed}");
    });
}
