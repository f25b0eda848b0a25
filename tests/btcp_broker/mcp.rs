//! The broker's MCP front door, driven by the official MCP Python SDK:
//! `btcp-broker mcp --session ID` on stdio and `/mcp?sessionId=ID` over
//! streamable HTTP, against real browsers on WebSocket.

use std::time::{Duration, Instant};

use integration_tests::{HeldPort, McpClient, bin_path};
use serde_json::{Value, json};

use super::support::{Broker, Ws, http, scripted_browser};

/// The SDK client is blocking; the browsers run on the test's runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn open_stdio(mcp: &mut McpClient, port: u16, session: &str, mode: &str) -> Value {
    let bin = bin_path("btcp-broker");
    let port = port.to_string();
    mcp.open_stdio(
        &[bin.to_str().unwrap(), "mcp", "--session", session, "--port", &port],
        &[],
        mode,
        json!({"tools": true}),
    )
}

fn open_http(mcp: &mut McpClient, url: &str, mode: &str) -> Value {
    mcp.ok(json!({"op": "open", "server": {"url": url}, "mode": mode, "listen": {"tools": true}}))
}

fn tool_names(mcp: &mut McpClient) -> Vec<String> {
    let tools = mcp.ok(json!({"op": "list_tools"}));
    tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

fn call(mcp: &mut McpClient, name: &str, arguments: Value) -> Value {
    mcp.ok(json!({"op": "call_tool", "name": name, "arguments": arguments}))
}

/// Waits for a tools/list_changed, skipping nothing else (there is nothing else).
fn expect_tools_changed(mcp: &mut McpClient, why: &str) {
    let change = mcp.next_change(Duration::from_secs(10));
    assert_eq!(change.as_ref().map(|c| c["change"].clone()), Some(json!("tools")), "{why}: {change:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_offers_the_session_browser_tools_in_both_protocol_eras() {
    let broker = Broker::start(&[]);
    let _browser = scripted_browser(broker.browser("mcp-s1").await).await;
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let Some(mut mcp) = McpClient::start() else { return };
        blocking(|| {
            let session = open_stdio(&mut mcp, broker.port, "mcp-s1", mode);
            assert_eq!(session["protocolVersion"], version, "{session}");
            assert_eq!(session["capabilities"]["tools"]["listChanged"], true, "{session}");
            assert_eq!(tool_names(&mut mcp), ["echo", "slow", "fail", "bad", "silent"], "{mode}");

            let echoed = call(&mut mcp, "echo", json!({"x": 1}));
            assert_eq!(echoed["isError"], false, "{echoed}");
            assert_eq!(McpClient::text(&echoed), r#"{"x":1}"#, "{echoed}");

            // The public client's failed tool: result with isError, passed on as it is.
            let failed = call(&mut mcp, "fail", json!({}));
            assert_eq!(failed["isError"], true, "{failed}");
            assert_eq!(McpClient::text(&failed), "Error: boom", "{failed}");

            let unknown = call(&mut mcp, "nope", json!({}));
            assert_eq!(unknown["isError"], true, "{unknown}");
            assert!(McpClient::text(&unknown).contains("tool not found"), "{unknown}");
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tool_list_follows_the_browser_registering_replacing_and_leaving() {
    let broker = Broker::start(&[]);
    for (mode, session) in [("auto", "mcp-follow-a"), ("legacy", "mcp-follow-b")] {
        let Some(mut mcp) = McpClient::start() else { return };
        let page = format!("?sessionId={session}");
        blocking(|| {
            open_stdio(&mut mcp, broker.port, session, mode);
            assert!(tool_names(&mut mcp).is_empty(), "no browser, no tools");
            let early = call(&mut mcp, "echo", json!({}));
            assert_eq!(early["isError"], true, "{early}");
            assert!(McpClient::text(&early).contains(&page), "says which page to open: {early}");
        });

        let mut browser = broker.browser(session).await;
        blocking(|| expect_tools_changed(&mut mcp, "browser connected"));
        browser.register(&["first", "second"]).await;
        blocking(|| {
            // Connected and registered may arrive as one or two notifications.
            let deadline = Instant::now() + Duration::from_secs(10);
            while tool_names(&mut mcp) != ["first", "second"] {
                assert!(Instant::now() < deadline, "{mode}: the registered tools are listed");
                expect_tools_changed(&mut mcp, "registered");
            }
            while mcp.next_change(Duration::from_millis(300)).is_some() {}
        });

        browser.register(&["third"]).await;
        blocking(|| {
            expect_tools_changed(&mut mcp, "replaced");
            assert_eq!(tool_names(&mut mcp), ["third"], "{mode}");
        });

        browser.close().await;
        blocking(|| {
            expect_tools_changed(&mut mcp, "browser gone");
            assert!(tool_names(&mut mcp).is_empty(), "{mode}: the browser's tools go with it");
            let gone = call(&mut mcp, "third", json!({}));
            assert_eq!(gone["isError"], true, "{gone}");
            assert!(McpClient::text(&gone).contains("no browser"), "{gone}");
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_cancellation_cancels_the_forwarded_call_at_the_browser() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("mcp-cancel").await;
    browser.register(&["silent"]).await;
    let Some(mut mcp) = McpClient::start() else { return };
    let started = Instant::now();
    let answer = blocking(|| {
        open_stdio(&mut mcp, broker.port, "mcp-cancel", "auto");
        mcp.send(json!({"op": "call_tool", "name": "silent", "arguments": {}, "timeout": 0.5}))
    });
    assert!(answer["error"].as_str().unwrap_or_default().contains("timed out"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(8));

    let forwarded = browser.request().await;
    assert_eq!(forwarded["params"]["name"], "silent");
    let cancelled = browser.notification("notifications/cancelled").await;
    assert_eq!(cancelled["params"]["requestId"], forwarded["id"], "the browser hears which call to stop");

    let metrics = broker.get("/metrics");
    assert!(metrics.body.contains(r#"btcp_tool_calls_total{outcome="cancelled"} 1"#), "{}", metrics.body);

    // The MCP session goes on.
    browser.register(&["silent", "echo"]).await;
    let echo = blocking(|| {
        let listed = integration_tests::eventually(Duration::from_secs(10), || {
            tool_names(&mut mcp).contains(&"echo".to_owned())
        });
        assert!(listed, "the new tool is listed");
        mcp.send(json!({"op": "call_tool", "name": "echo", "arguments": {}, "timeout": 5}))
    });
    // Our hand-driven browser does not answer: the call waits, proving it was forwarded.
    let second = browser.request().await;
    assert_eq!(second["params"]["name"], "echo", "{echo}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_http_on_the_broker_port_with_its_token_and_origin_rules() {
    let broker = Broker::start(&[("BTCP_AUTH_TOKEN", "mcp-http-token")]);
    let browser = Ws::connect(&broker.url("/ws?clientType=browser&sessionId=web&token=mcp-http-token")).await;
    let _browser = scripted_browser(browser).await;
    let url = format!("http://127.0.0.1:{}/mcp?sessionId=web&token=mcp-http-token", broker.port);
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let Some(mut mcp) = McpClient::start() else { return };
        blocking(|| {
            let session = open_http(&mut mcp, &url, mode);
            assert_eq!(session["protocolVersion"], version, "{session}");
            assert_eq!(tool_names(&mut mcp), ["echo", "slow", "fail", "bad", "silent"], "{mode}");
            let echoed = call(&mut mcp, "echo", json!({"over": "http"}));
            assert_eq!(McpClient::text(&echoed), r#"{"over":"http"}"#, "{echoed}");
            // The SDK ends its session (DELETE in the 2025 era) and takes
            // the answer as it expects (it logs a warning otherwise).
            let closed = mcp.ok(json!({"op": "close"}));
            assert_eq!(closed["warnings"], json!([]), "{mode}: closing the session");
        });
    }

    // list_changed over HTTP too.
    let Some(mut mcp) = McpClient::start() else { return };
    blocking(|| {
        open_http(&mut mcp, &url.replace("sessionId=web", "sessionId=web2"), "auto");
        assert!(tool_names(&mut mcp).is_empty());
    });
    let mut second = Ws::connect(&broker.url("/ws?clientType=browser&sessionId=web2&token=mcp-http-token")).await;
    second.register(&["late"]).await;
    blocking(|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while tool_names(&mut mcp) != ["late"] {
            assert!(Instant::now() < deadline, "the late tool is listed");
            expect_tools_changed(&mut mcp, "over HTTP");
        }
    });

    // No token: refused before MCP; a foreign Origin: 403.
    let Some(mut anonymous) = McpClient::start() else { return };
    let refused = blocking(|| {
        let url = format!("http://127.0.0.1:{}/mcp?sessionId=web", broker.port);
        anonymous.send(json!({"op": "open", "server": {"url": url}}))
    });
    assert!(refused.get("error").is_some(), "{refused}");
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let path = "/mcp?sessionId=web&token=mcp-http-token";
    let foreign = http(
        broker.port,
        "POST",
        path,
        &[("Origin", "http://evil.example"), ("Content-Type", "application/json")],
        body,
    );
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    let anonymous = http(broker.port, "POST", "/mcp?sessionId=web", &[("Content-Type", "application/json")], body);
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    let no_session =
        http(broker.port, "POST", "/mcp?token=mcp-http-token", &[("Content-Type", "application/json")], body);
    assert_eq!(no_session.status, 400, "{}", no_session.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_waits_for_a_stopped_broker_and_picks_the_tools_up_when_it_is_back() {
    let held = HeldPort::new();
    let port = held.port();
    let Some(mut mcp) = McpClient::start() else { return };
    blocking(|| {
        open_stdio(&mut mcp, port, "later", "auto");
        assert!(tool_names(&mut mcp).is_empty(), "no broker, no tools");
        let down = call(&mut mcp, "anything", json!({}));
        assert_eq!(down["isError"], true, "{down}");
        assert!(McpClient::text(&down).contains("btcp-broker serve"), "says how to start it: {down}");
    });
    let broker = Broker::start_on(held.release(), &[]);
    let mut browser = broker.browser("later").await;
    browser.register(&["found"]).await;
    blocking(|| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while tool_names(&mut mcp) != ["found"] {
            assert!(Instant::now() < deadline, "the MCP side reconnects by itself");
            let _ = mcp.next_change(Duration::from_secs(1));
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_inspector_uses_the_broker_over_stdio_and_http() {
    let broker = Broker::start(&[]);
    let _browser = scripted_browser(broker.browser("inspected").await).await;
    let bin = bin_path("btcp-broker");
    let port = broker.port.to_string();
    let stdio = [bin.to_str().unwrap(), "mcp", "--session", "inspected", "--port", &port];
    let url = format!("http://127.0.0.1:{port}/mcp?sessionId=inspected");
    let http_server = [url.as_str(), "--transport", "http"];
    for server in [&stdio[..], &http_server[..]] {
        let listed = blocking(|| integration_tests::mcp_inspector(&[server, &["--method", "tools/list"]].concat()));
        let Some(listed) = listed else { return };
        let names: Vec<&str> =
            listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["echo", "slow", "fail", "bad", "silent"], "{server:?}");
        let called = blocking(|| {
            let call = ["--method", "tools/call", "--tool-name", "echo", "--tool-arg", "word=hi"];
            integration_tests::mcp_inspector(&[server, &call[..]].concat()).unwrap()
        });
        assert_eq!(called["content"][0]["text"], r#"{"word":"hi"}"#, "{server:?}: {called}");
    }
}

/// A `/mcp` door no one uses (no request, no stream) for `BTCP_MCP_IDLE` is
/// closed: its agent leaves the session, and the door's slot is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_door_left_unused_is_closed_and_its_agent_leaves_the_session() {
    let broker = Broker::start(&[("BTCP_MCP_IDLE", "1")]);
    let browser = Ws::connect(&broker.url("/ws?clientType=browser&sessionId=idle")).await;
    let _browser = scripted_browser(browser).await;
    let agents = || broker.get("/sessions").json()[0]["agentCount"].as_u64();
    let Some(mut mcp) = McpClient::start() else { return };
    let url = format!("http://127.0.0.1:{}/mcp?sessionId=idle", broker.port);
    blocking(|| {
        open_http(&mut mcp, &url, "legacy");
        assert_eq!(tool_names(&mut mcp), ["echo", "slow", "fail", "bad", "silent"]);
        assert_eq!(agents(), Some(1), "the door's agent is in the session");
        mcp.ok(json!({"op": "close"}));
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while agents() != Some(0) {
        assert!(Instant::now() < deadline, "the unused door's agent is still in the session: {:?}", agents());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
