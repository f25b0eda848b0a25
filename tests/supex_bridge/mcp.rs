//! `supex-bridge mcp` driven by the official MCP Python SDK over stdio, in
//! front of a real bridge: tools one for one, Ruby errors as tool errors,
//! the token and the client's name in `hello`, reconnection after the bridge
//! restarts, and cancellation.

use std::time::{Duration, Instant};

use integration_tests::{Daemon, HeldPort, McpClient, bin_path, require_tool};
use serde_json::{Value, json};

use super::support::{BIN, Bridge};

fn open(mcp: &mut McpClient, port: u16, extra: &[&str], env: &[(&str, &str)], mode: &str) -> Value {
    let bin = bin_path(BIN);
    let port = port.to_string();
    let mut command = vec![bin.to_str().unwrap(), "mcp", "--port", &port];
    command.extend_from_slice(extra);
    mcp.open_stdio(&command, env, mode, json!(null))
}

fn call(mcp: &mut McpClient, name: &str, arguments: Value) -> Value {
    mcp.ok(json!({"op": "call_tool", "name": name, "arguments": arguments}))
}

#[test]
fn mcp_offers_the_bridge_tools_one_for_one_in_both_protocol_eras() {
    let Some(bridge) = Bridge::start() else { return };
    let port = bridge.bridge.port();
    let listed = bridge.client().call(1, "tools/list", json!({}));
    let bridge_tools: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let Some(mut mcp) = McpClient::start() else { return };
        let session = open(&mut mcp, port, &[], &[], mode);
        assert_eq!(session["protocolVersion"], version, "{mode}: {session}");
        assert_eq!(session["serverInfo"]["name"], "supex-bridge");
        let tools = mcp.ok(json!({"op": "list_tools"}));
        let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, bridge_tools, "{mode}");
        let eval = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == "eval_ruby").unwrap();
        assert_eq!(eval["inputSchema"]["properties"]["code"]["type"], "string", "{eval}");

        // State persists between calls, as in the bridge.
        call(&mut mcp, "eval_ruby", json!({"code": "def twice(x) = x * 2"}));
        let result = call(&mut mcp, "eval_ruby", json!({"code": "twice(21)"}));
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(result["structuredContent"]["result"], "42", "{result}");
        assert!(McpClient::text(&result).contains("\"42\""), "{result}");
    }
}

#[test]
fn mcp_ruby_errors_and_denied_paths_are_tool_errors_with_the_bridge_message() {
    let Some(bridge) = Bridge::start() else { return };
    let Some(mut mcp) = McpClient::start() else { return };
    open(&mut mcp, bridge.bridge.port(), &[], &[], "auto");
    let boom = call(&mut mcp, "eval_ruby", json!({"code": "raise ArgumentError, 'boom'"}));
    assert_eq!(boom["isError"], true, "{boom}");
    let text = McpClient::text(&boom);
    assert!(text.contains("ArgumentError: boom") && text.contains("backtrace"), "{text}");

    let outside = call(&mut mcp, "read_file", json!({"path": "/etc/hostname"}));
    assert_eq!(outside["isError"], true, "{outside}");
    assert!(McpClient::text(&outside).to_lowercase().contains("denied"), "{outside}");

    // The session goes on after errors.
    let ok = call(&mut mcp, "eval_ruby", json!({"code": "1 + 1"}));
    assert_eq!(ok["structuredContent"]["result"], "2", "{ok}");
}

#[test]
fn mcp_says_hello_with_the_token_and_the_agent_name() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_AUTH_TOKEN", "mcp-s3cret")]) else { return };
    let port = bridge.bridge.port();

    let Some(mut wrong) = McpClient::start() else { return };
    open(&mut wrong, port, &[], &[("SUPEX_AUTH_TOKEN", "guess")], "auto");
    let refused = call(&mut wrong, "eval_ruby", json!({"code": "1"}));
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(McpClient::text(&refused).contains("refused hello"), "{refused}");

    let Some(mut right) = McpClient::start() else { return };
    right.ok(json!({
        "op": "open", "client_name": "claude-code-test",
        "server": {"command": bin_path(BIN), "args": ["mcp", "--port", port.to_string()],
                   "env": {"SUPEX_AUTH_TOKEN": "mcp-s3cret", "PATH": std::env::var("PATH").unwrap()}},
    }));
    let result = call(&mut right, "eval_ruby", json!({"code": "6 * 7"}));
    assert_eq!(result["structuredContent"]["result"], "42", "{result}");
    assert!(
        bridge.daemon.wait_for_log("name=claude-code-test", Duration::from_secs(5)),
        "the bridge logs the MCP client's name from hello:\n{}",
        bridge.daemon.stderr()
    );
    assert!(!bridge.daemon.stderr().contains("mcp-s3cret"), "the token is never logged");
}

#[test]
fn mcp_reports_a_stopped_bridge_and_reconnects_when_it_is_back() {
    if !require_tool("ruby") {
        return;
    }
    let Some(mut mcp) = McpClient::start() else { return };
    let held = [HeldPort::new(), HeldPort::new()];
    let [port, repl_port] = [held[0].port(), held[1].port()];
    open(&mut mcp, port, &[], &[], "auto");

    // With the bridge down the agent still sees its tools (and a call says
    // how to start the bridge), as the README promises.
    let listed = mcp.ok(json!({"op": "list_tools"}));
    let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"eval_ruby") && names.contains(&"read_file"), "{listed}");
    let down = call(&mut mcp, "eval_ruby", json!({"code": "1"}));
    assert_eq!(down["isError"], true, "{down}");
    let text = McpClient::text(&down);
    assert!(text.contains("no supex-bridge is listening") && text.contains("supex-bridge serve"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let env = |port: u16, repl: u16| [("SUPEX_PORT", port.to_string()), ("SUPEX_REPL_PORT", repl.to_string())];
    let start = || {
        let env = env(port, repl_port);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut daemon = Daemon::start_in(BIN, &[], &env, Some(dir.path()));
        daemon.wait_for_port(format!("127.0.0.1:{port}").parse().unwrap());
        daemon
    };
    for held in held {
        held.release();
    }
    let mut daemon = start();
    let up = call(&mut mcp, "eval_ruby", json!({"code": "$before = 7"}));
    assert_eq!(up["structuredContent"]["result"], "7", "{up}");

    daemon.terminate();
    let gone = call(&mut mcp, "eval_ruby", json!({"code": "1"}));
    assert_eq!(gone["isError"], true, "{gone}");

    let _daemon = start();
    let back = call(&mut mcp, "eval_ruby", json!({"code": "$before.inspect"}));
    assert_eq!(back["isError"], false, "the next call reconnects: {back}");
    assert_eq!(back["structuredContent"]["result"], "nil", "a new runtime: {back}");
}

#[test]
fn mcp_cancellation_abandons_the_call_and_the_session_goes_on() {
    let Some(bridge) = Bridge::start() else { return };
    let Some(mut mcp) = McpClient::start() else { return };
    open(&mut mcp, bridge.bridge.port(), &[], &[], "auto");
    let started = Instant::now();
    let answer = mcp.send(json!({"op": "call_tool", "name": "eval_ruby",
        "arguments": {"code": "sleep 2; :late"}, "timeout": 0.5}));
    assert!(answer["error"].as_str().unwrap_or_default().contains("timed out"), "{answer}");
    assert!(started.elapsed() < Duration::from_millis(1500), "the client's timeout ends the wait");
    // The bridge finishes the abandoned evaluation; the next call then runs.
    let next = call(&mut mcp, "eval_ruby", json!({"code": ":next"}));
    assert_eq!(next["structuredContent"]["result"], "next", "{next}");
}

#[test]
fn the_official_mcp_inspector_lists_and_calls_the_bridge_tools() {
    let Some(bridge) = Bridge::start() else { return };
    let bin = bin_path(BIN);
    let port = bridge.bridge.port().to_string();
    let server = [bin.to_str().unwrap(), "mcp", "--port", &port];
    let Some(listed) = integration_tests::mcp_inspector(&[&server[..], &["--method", "tools/list"]].concat()) else {
        return;
    };
    assert!(listed["tools"].as_array().unwrap().iter().any(|t| t["name"] == "eval_ruby"), "{listed}");
    let called = integration_tests::mcp_inspector(
        &[&server[..], &["--method", "tools/call", "--tool-name", "eval_ruby", "--tool-arg", "code=6*7"]].concat(),
    )
    .unwrap();
    assert_eq!(called["structuredContent"]["result"], "42", "{called}");
    assert_eq!(called["isError"], false, "{called}");
}
