//! The HTTP side of the one port: refusals before any upgrade, the token, the
//! Origin policy, and the small endpoints.

use serde_json::json;

use crate::support::{Broker, Ws, http, http_to_host};

const WS_HEADERS: [(&str, &str); 4] = [
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
];

#[test]
fn missing_or_invalid_client_type_is_400_with_a_json_reason_before_any_upgrade() {
    let broker = Broker::start(&[]);
    for (path, reason) in [
        ("/ws", "missing_client_type"),
        ("/ws?sessionId=s", "missing_client_type"),
        ("/ws?clientType=robot", "invalid_client_type"),
        ("/events?clientType=", "invalid_client_type"),
    ] {
        let response = http(broker.port, "GET", path, &WS_HEADERS, b"");
        assert_eq!(response.status, 400, "{path}: {}", response.body);
        assert_eq!(response.json()["reason"], reason, "{path}");
        assert!(response.json()["error"].as_str().unwrap().contains("clientType"));
        assert!(response.header("upgrade").is_none(), "no upgrade happened");
    }
}

#[test]
fn a_plain_get_of_ws_is_426_and_a_good_handshake_is_101() {
    let broker = Broker::start(&[]);
    let response = http(broker.port, "GET", "/ws?clientType=agent", &[], b"");
    assert_eq!(response.status, 426);
    assert_eq!(response.header("upgrade"), Some("websocket"));
    let response = http(broker.port, "GET", "/ws?clientType=agent", &WS_HEADERS, b"");
    assert_eq!(response.status, 101);
    // RFC 6455's own example key and accept value.
    assert_eq!(response.header("sec-websocket-accept"), Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
}

#[tokio::test]
async fn the_token_is_required_as_bearer_header_or_query_and_checked_before_upgrade() {
    let broker = Broker::start(&[("BTCP_AUTH_TOKEN", "s3cret")]);
    let base = broker.url("/ws?clientType=agent");
    let refused = Ws::try_connect(&base, &[]).await.err().unwrap();
    assert!(refused.starts_with("401"), "{refused}");
    let refused = Ws::try_connect(&format!("{base}&token=wrong"), &[]).await.err().unwrap();
    assert!(refused.starts_with("401") && refused.contains("wrong token"), "{refused}");
    Ws::try_connect(&format!("{base}&token=s3cret"), &[]).await.unwrap();
    Ws::try_connect(&base, &[("Authorization", "Bearer s3cret")]).await.unwrap();
    // The read-only endpoints too; the static ones and /health stay open.
    assert_eq!(broker.get("/sessions").status, 401);
    assert_eq!(broker.get("/metrics").status, 401);
    assert_eq!(broker.get("/sessions?token=s3cret").status, 200);
    let response = http(broker.port, "GET", "/metrics", &[("Authorization", "Bearer s3cret")], b"");
    assert_eq!(response.status, 200);
    assert_eq!(broker.get("/health").status, 200);
    assert_eq!(broker.get("/btcp.js").status, 200);
    // Failures are logged without the token.
    assert!(broker.daemon.wait_for_log("authentication failed", crate::support::WAIT));
    assert!(!broker.daemon.stderr().contains("s3cret"));
    assert!(!broker.daemon.stderr().contains("wrong"));
}

#[test]
fn origins_outside_the_policy_are_403() {
    let broker = Broker::start(&[]);
    let with_origin = |origin: &str| {
        let mut headers = WS_HEADERS.to_vec();
        headers.push(("Origin", origin));
        http(broker.port, "GET", "/ws?clientType=browser", &headers, b"").status
    };
    assert_eq!(with_origin("http://evil.example"), 403);
    assert_eq!(with_origin("null"), 403);
    assert_eq!(with_origin("http://localhost:3000"), 101);
    assert_eq!(with_origin(&format!("http://127.0.0.1:{}", broker.port)), 101);

    let listed = Broker::start(&[("BTCP_ALLOWED_ORIGINS", "https://app.example, chrome-extension://abcdef")]);
    let status = |origin: &str| http(listed.port, "GET", "/health", &[("Origin", origin)], b"").status;
    assert_eq!(status("https://app.example"), 200);
    assert_eq!(status("chrome-extension://abcdef"), 200);
    assert_eq!(status("http://localhost:3000"), 403, "the list replaces the default");
    // Allowed origins may read responses (EventSource, fetch) and preflight.
    let response = http(
        listed.port,
        "OPTIONS",
        "/message",
        &[("Origin", "https://app.example"), ("Access-Control-Request-Method", "POST")],
        b"",
    );
    assert_eq!(response.status, 204);
    assert_eq!(response.header("access-control-allow-origin"), Some("https://app.example"));
    assert!(response.header("access-control-allow-headers").unwrap().contains("x-client-id"));
}

#[tokio::test]
async fn health_sessions_and_metrics_report_what_is_connected() {
    let broker = Broker::start(&[]);
    let mut browser = broker.browser("stats").await;
    browser.register(&["echo", "other"]).await;
    let mut agent = broker.agent("stats").await;
    agent.call(1, "tools/call", json!({"name": "missing", "arguments": {}})).await;

    let health = broker.get("/health").json();
    assert_eq!(health["status"], "ok");
    assert_eq!(
        (health["sessions"].as_u64(), health["browsers"].as_u64(), health["agents"].as_u64()),
        (Some(1), Some(1), Some(1))
    );
    assert!(health["version"].is_string() && health["uptime_s"].is_u64());

    let sessions = broker.get("/sessions").json();
    let row = &sessions[0];
    assert_eq!(row["id"], "stats");
    assert_eq!(row["hasBrowser"], true);
    assert_eq!(row["agentCount"], 1);
    assert_eq!(row["toolCount"], 2);
    assert!(row["createdAt"].as_str().unwrap().ends_with('Z'));
    assert!(row["lastActivity"].is_string());

    let metrics = broker.get("/metrics");
    assert_eq!(metrics.status, 200);
    assert!(metrics.header("content-type").unwrap().contains("openmetrics-text"));
    for needle in [
        "btcp_sessions 1",
        "btcp_tool_calls_total{outcome=\"unknown_tool\"} 1",
        "btcp_connections{client_type=\"agent\",transport=\"websocket\"} 1",
        "btcp_tool_call_duration_seconds_count",
    ] {
        assert!(metrics.body.contains(needle), "missing {needle}:\n{}", metrics.body);
    }
}

#[test]
fn the_browser_client_and_the_demo_page_are_served() {
    let broker = Broker::start(&[]);
    let script = broker.get("/btcp.js");
    assert_eq!(script.status, 200);
    assert!(script.header("content-type").unwrap().starts_with("text/javascript"));
    assert!(script.body.contains("export class BtcpClient"));
    let page = broker.get("/");
    assert_eq!(page.status, 200);
    assert!(page.header("content-type").unwrap().starts_with("text/html"));
    assert!(page.body.contains("./btcp.js") && page.body.contains("page_title"));
    assert_eq!(broker.get("/nope").status, 404);
}

#[tokio::test]
async fn metrics_count_a_tool_that_reported_an_error_apart_from_successes() {
    let broker = Broker::start(&[]);
    let browser = crate::support::scripted_browser(broker.browser("outcomes").await).await;
    let mut agent = broker.agent("outcomes").await;
    let answer = agent.call(1, "tools/call", json!({"name": "echo", "arguments": {}})).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // The public client's way: `result` with isError and `error` beside it.
    let answer = agent.call(2, "tools/call", json!({"name": "fail", "arguments": {}})).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");

    let metrics = broker.get("/metrics").body;
    for needle in ["btcp_tool_calls_total{outcome=\"ok\"} 1", "btcp_tool_calls_total{outcome=\"tool_error\"} 1"] {
        assert!(metrics.contains(needle), "missing {needle}:\n{metrics}");
    }
    browser.abort();
}

/// DNS rebinding: a page on `attacker.example` rebound to 127.0.0.1 sends no
/// Origin on its own requests, but its Host names it.
#[test]
fn a_foreign_host_is_refused_on_every_route_and_loopback_hosts_are_served() {
    let broker = Broker::start(&[]);
    let port = broker.port;
    let foreign = format!("attacker.example:{port}");
    for (method, path, headers) in [
        ("GET", "/sessions", &[][..]),
        ("GET", "/events?clientType=agent&sessionId=rebound", &[]),
        ("GET", "/events?clientType=browser&sessionId=rebound", &[("Accept", "text/event-stream")]),
        ("GET", "/ws?clientType=browser&sessionId=rebound", &WS_HEADERS[..]),
        ("POST", "/message?sessionId=rebound", &[]),
        ("POST", "/mcp?sessionId=rebound", &[]),
        ("GET", "/metrics", &[]),
        ("GET", "/health", &[]),
        ("GET", "/btcp.js", &[]),
        ("GET", "/", &[]),
    ] {
        let response = http_to_host(port, &foreign, method, path, headers, b"{}");
        assert_eq!(response.status, 403, "{method} {path}: {}", response.body);
        assert_eq!(response.json()["reason"], "host_not_allowed", "{method} {path}");
        assert!(response.header("upgrade").is_none(), "{method} {path}");
    }
    assert!(broker.get("/sessions").json().as_array().unwrap().is_empty(), "the refused browser made no session");
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "app.localhost".to_owned(),
        "127.0.0.2:1".to_owned(),
    ] {
        let response = http_to_host(port, &host, "GET", "/sessions", &[], b"");
        assert_eq!(response.status, 200, "{host}: {}", response.body);
        let response = http_to_host(port, &host, "GET", "/ws?clientType=agent", &WS_HEADERS, b"");
        assert_eq!(response.status, 101, "{host}: {}", response.body);
    }
    assert_eq!(http_to_host(port, &format!("broker.lan:{port}"), "GET", "/sessions", &[], b"").status, 403);
}

#[test]
fn a_host_listed_in_btcp_allowed_hosts_is_served() {
    let broker = Broker::start(&[("BTCP_ALLOWED_HOSTS", "broker.lan,proxy.example:443")]);
    let port = broker.port;
    for host in [format!("broker.lan:{port}"), "BROKER.LAN".to_owned(), "proxy.example:443".to_owned()] {
        let response = http_to_host(port, &host, "GET", "/sessions", &[], b"");
        assert_eq!(response.status, 200, "{host}: {}", response.body);
        let response = http_to_host(port, &host, "GET", "/ws?clientType=agent", &WS_HEADERS, b"");
        assert_eq!(response.status, 101, "{host}: {}", response.body);
    }
    for host in ["proxy.example:80".to_owned(), format!("attacker.example:{port}")] {
        let response = http_to_host(port, &host, "GET", "/sessions", &[], b"");
        assert_eq!(response.status, 403, "{host}: {}", response.body);
    }
    assert_eq!(broker.get("/sessions").status, 200, "loopback still served");
}

#[test]
fn an_invalid_websocket_key_is_400_websocket_key_before_any_upgrade() {
    let broker = Broker::start(&[]);
    for key in
        ["", "short", "!!!notbase64!!!", "dGhlIHNhbXBsZQ==", "dGhlIHNhbXBsZSBub25jZSE=", "dGhlIHNhbXBsZSBub25jZQ"]
    {
        let headers = [WS_HEADERS[0], WS_HEADERS[1], WS_HEADERS[2], ("Sec-WebSocket-Key", key)];
        let response = http(broker.port, "GET", "/ws?clientType=agent", &headers, b"");
        assert_eq!(response.status, 400, "{key:?}: {}", response.body);
        assert_eq!(response.json()["reason"], "websocket_key", "{key:?}");
        assert!(response.header("sec-websocket-accept").is_none(), "{key:?}");
    }
    let response = http(broker.port, "GET", "/ws?clientType=agent", &WS_HEADERS, b"");
    assert_eq!(response.status, 101);
}

/// `%FF` and `%FE` are no UTF-8: decoded lossily both were U+FFFD, and an
/// agent naming one joined the session of the browser that named the other.
#[test]
fn a_session_id_that_is_not_utf8_once_decoded_is_400_invalid_session_id() {
    let broker = Broker::start(&[]);
    for (method, path, headers) in [
        ("GET", "/ws?clientType=browser&sessionId=%FFtag", &WS_HEADERS[..]),
        ("GET", "/ws?clientType=agent&sessionId=%FEtag", &WS_HEADERS[..]),
        ("GET", "/events?clientType=browser&sessionId=%FFtag", &[]),
        ("GET", "/events?clientType=agent&sessionId=tag%C3", &[]),
        ("POST", "/message?sessionId=%FEtag", &[]),
        ("POST", "/mcp?sessionId=%FFtag", &[]),
    ] {
        let response = http(broker.port, method, path, headers, b"{}");
        assert_eq!(response.status, 400, "{method} {path}: {}", response.body);
        assert_eq!(response.json()["reason"], "invalid_session_id", "{method} {path}");
    }
    let response = http(broker.port, "GET", "/ws?clientType=agent&version=%FF", &WS_HEADERS, b"");
    assert_eq!((response.status, response.json()["reason"].as_str()), (400, Some("bad_query")));
    assert!(broker.get("/sessions").json().as_array().unwrap().is_empty(), "no session was made");
    // UTF-8 is fine: `é` percent-encoded.
    let response = http(broker.port, "GET", "/ws?clientType=browser&sessionId=%C3%A9tag", &WS_HEADERS, b"");
    assert_eq!(response.status, 101, "{}", response.body);
}
