//! The bridge's protocol surface: hello, the gate, tools/list, the legacy
//! shape, bad input.

use std::time::Duration;

use integration_tests::LineClient;
use serde_json::{Value, json};

use crate::support::{Bridge, error, eval, hello_params, ok, tool};

#[test]
fn ping_needs_no_hello_but_everything_else_does() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = LineClient::connect(bridge.bridge);
    assert_eq!(client.call(1, "ping", json!({}))["result"], json!({"status": "ok"}));
    for method in ["tools/list", "tools/call", "resources/list", "no/such/method"] {
        let reply = client.call(2, method, json!({"name": "ping", "arguments": {}}));
        let err = error(&reply);
        assert_eq!(err["code"], -32600, "{method}: {reply}");
        assert_eq!(err["message"], "Client must identify with 'hello' method first");
        assert!(err["data"]["hint"].as_str().unwrap().contains("hello"));
    }
    let reply = client.call(3, "hello", hello_params());
    assert_eq!(
        reply["result"],
        json!({"success": true, "message": "Client identified",
               "server": {"name": "supex-runtime", "version": env!("CARGO_PKG_VERSION")}})
    );
    assert_eq!(client.call(4, "resources/list", json!({}))["result"], json!({"resources": []}));
    assert_eq!(client.call(5, "no/such/method", json!({}))["error"]["code"], -32601);
}

#[test]
fn hello_names_the_missing_or_wrong_field() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = LineClient::connect(bridge.bridge);
    for (field, params) in [
        ("name", json!({"version": "1", "agent": "a", "pid": 1})),
        ("version", json!({"name": "n", "agent": "a", "pid": 1})),
        ("agent", json!({"name": "n", "version": "1", "pid": 2})),
        ("pid", json!({"name": "n", "version": "1", "agent": "a"})),
        ("pid", json!({"name": "n", "version": "1", "agent": "a", "pid": "12"})),
    ] {
        // A fresh connection each time: three failures would close it.
        let mut client = LineClient::connect(bridge.bridge);
        let reply = client.call(1, "hello", params);
        let err = error(&reply);
        assert_eq!(err["code"], -32602, "{reply}");
        assert!(err["message"].as_str().unwrap().contains(field), "{field}: {reply}");
    }
    let reply = client.call(1, "hello", json!({"name": 5, "version": "1", "agent": "a", "pid": 1}));
    assert!(error(&reply)["message"].as_str().unwrap().contains("name: expected a string"));
}

#[test]
fn a_configured_token_is_required_and_checked_first() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_AUTH_TOKEN", "s3cret-token")]) else {
        return;
    };
    let mut client = LineClient::connect(bridge.bridge);
    assert_eq!(client.call(1, "ping", json!({}))["result"]["status"], "ok");
    let reply = client.call(2, "tools/list", json!({}));
    assert_eq!(error(&reply)["code"], -32001);
    // No token and no fields: the token is what is reported.
    let reply = client.call(3, "hello", json!({}));
    assert_eq!(error(&reply)["code"], -32001);
    assert_eq!(error(&reply)["message"], "Authentication failed: invalid or missing token");
    let mut wrong = hello_params();
    wrong["token"] = json!("s3cret-tokeN");
    assert_eq!(error(&client.call(4, "hello", wrong))["code"], -32001);

    let mut client = LineClient::connect(bridge.bridge);
    let mut right = hello_params();
    right["token"] = json!("s3cret-token");
    assert_eq!(client.call(5, "hello", right)["result"]["success"], true);
    assert!(ok(&mut client, "ping", json!({}))["success"] == true);
    // Code evaluated in the runtime, and what it starts, cannot read it.
    assert_eq!(eval(&mut client, "ENV.key?('SUPEX_AUTH_TOKEN').to_s"), "false");
    assert_eq!(eval(&mut client, "`printenv SUPEX_AUTH_TOKEN`"), "");
    assert!(bridge.daemon.wait_for_log("authentication failed", Duration::from_secs(5)));
    assert!(!bridge.daemon.stderr().contains("s3cret"), "the token must never be logged");
}

#[test]
fn the_third_failed_hello_closes_the_connection() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_AUTH_TOKEN", "t0ken")]) else {
        return;
    };
    let mut client = LineClient::connect(bridge.bridge);
    for id in 1..=2 {
        assert_eq!(error(&client.call(id, "hello", json!({"token": "no"})))["code"], -32001);
    }
    // Still open after two.
    assert_eq!(client.call(3, "ping", json!({}))["result"]["status"], "ok");
    // Field errors count as failures too.
    let reply = client.call(4, "hello", json!({"token": "t0ken"}));
    assert_eq!(error(&reply)["code"], -32602, "the third failure is still answered");
    assert!(client.is_closed_within(Duration::from_secs(5)), "closed after the third");

    // A good hello after two bad ones works.
    let mut client = LineClient::connect(bridge.bridge);
    for id in 1..=2 {
        client.call(id, "hello", json!({"token": "no"}));
    }
    let mut right = hello_params();
    right["token"] = json!("t0ken");
    assert_eq!(client.call(3, "hello", right)["result"]["success"], true);
}

/// The third failed hello closes the connection only once every reply owed
/// to it is written: evaluations pipelined ahead of the hellos (an id-less
/// legacy one too) still get their answers; what comes after is refused.
#[test]
fn the_third_failed_hello_closes_only_after_the_replies_owed() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_AUTH_TOKEN", "t0ken")]) else {
        return;
    };
    let mut right = hello_params();
    right["token"] = json!("t0ken");
    let mut client = LineClient::connect(bridge.bridge);
    assert_eq!(client.call(1, "hello", right)["result"]["success"], true);
    // Evaluations take turns: the id-less legacy one finishes last.
    let owed = json!({"name": "eval_ruby", "arguments": {"code": "sleep 0.2; :owed"}});
    client.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": owed}));
    client.send(&json!({"command": "eval_ruby", "parameters": {"code": "sleep 0.3; :legacy"}}));
    for id in 3..=5 {
        client.send(&json!({"jsonrpc": "2.0", "id": id, "method": "hello", "params": {"token": "no"}}));
    }
    client.send(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": owed}));
    let replies: Vec<_> = (0..6).map(|_| client.recv()).collect();
    let by_id = |id: Value| replies.iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("{id}: {replies:?}"));
    for id in 3..=5 {
        assert_eq!(error(by_id(json!(id)))["code"], -32001, "{replies:?}");
    }
    assert!(error(by_id(json!(6)))["message"].as_str().unwrap().contains("too many failed"), "{replies:?}");
    assert_eq!(by_id(json!(2))["result"]["result"], "owed", "{replies:?}");
    assert_eq!(by_id(Value::Null)["result"]["result"], "legacy", "{replies:?}");
    assert!(client.is_closed_within(Duration::from_secs(5)), "closed once they are written");

    // The REPL the same way.
    let mut client = LineClient::connect(bridge.repl);
    assert_eq!(client.call(1, "hello", json!({"token": "t0ken"}))["result"]["success"], true);
    client.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "eval", "params": {"code": "sleep 0.3; :owed"}}));
    for id in 3..=5 {
        client.send(&json!({"jsonrpc": "2.0", "id": id, "method": "hello", "params": {"token": "no"}}));
    }
    let replies: Vec<_> = (0..4).map(|_| client.recv()).collect();
    let eval = replies.iter().find(|r| r["id"] == 2).unwrap_or_else(|| panic!("REPL: {replies:?}"));
    assert_eq!(eval["result"]["output"], "=> :owed\n", "{replies:?}");
    assert!(client.is_closed_within(Duration::from_secs(5)), "REPL: closed once they are written");
}

#[test]
fn tools_list_describes_every_tool_with_a_json_schema() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let list = client.call(1, "tools/list", json!({}))["result"]["tools"].clone();
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for expected in [
        "ping",
        "eval_ruby",
        "eval_ruby_file",
        "read_file",
        "write_file",
        "list_dir",
        "runtime_info",
        "reset_runtime",
        "console_log",
    ] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    for tool in list.as_array().unwrap() {
        assert!(!tool["description"].as_str().unwrap().is_empty());
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    let eval = list.as_array().unwrap().iter().find(|t| t["name"] == "eval_ruby").unwrap();
    assert_eq!(eval["inputSchema"]["required"], json!(["code"]));
    assert_eq!(eval["inputSchema"]["properties"]["code"]["type"], "string");
}

#[test]
fn tool_errors_unknown_tools_and_bad_arguments_are_invalid_params() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let reply = tool(&mut client, "no_such_tool", json!({}));
    assert_eq!(error(&reply)["code"], -32602);
    assert!(error(&reply)["message"].as_str().unwrap().contains("Unknown tool: no_such_tool"));
    let reply = tool(&mut client, "eval_ruby", json!({"code": 5}));
    assert_eq!(error(&reply)["code"], -32602);
    assert!(error(&reply)["message"].as_str().unwrap().contains("arguments.code"), "{reply}");
    let reply = tool(&mut client, "eval_ruby", json!({}));
    assert!(error(&reply)["message"].as_str().unwrap().contains("missing field `code`"));
    let reply = tool(&mut client, "eval_ruby", json!({"code": "1", "timeout": -1}));
    assert_eq!(error(&reply)["code"], -32602);
    let reply = client.call(2, "tools/call", json!({"arguments": {}}));
    assert_eq!(error(&reply)["code"], -32602);
}

#[test]
fn the_legacy_command_shape_is_a_tool_call() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = LineClient::connect(bridge.bridge);
    client.send(&json!({"command": "eval_ruby", "parameters": {"code": "6 * 7"}, "id": 9}));
    let reply = client.recv();
    assert_eq!(error(&reply)["code"], -32600, "the gate applies to the legacy shape too");
    assert_eq!(reply["id"], 9);
    client.call(1, "hello", hello_params());
    client.send(&json!({"command": "eval_ruby", "parameters": {"code": "6 * 7"}, "id": 10}));
    let reply = client.recv();
    assert_eq!(reply["id"], 10);
    assert_eq!(reply["result"]["result"], "42");
    client.send(&json!({"command": "ping"}));
    let reply = client.recv();
    assert_eq!(reply["id"], json!(null));
    assert_eq!(reply["result"]["status"], "connected");
}

/// A client of the legacy dialect without ids can match answers only by
/// their order: calls sent back to back are each answered, with `"id": null`,
/// in the order sent, even when a later one is quicker; refusals too.
#[test]
fn id_less_legacy_calls_are_each_answered_in_order_with_a_null_id() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = LineClient::connect(bridge.bridge);
    let slow = json!({"command": "eval_ruby", "parameters": {"code": "sleep 0.3; :first"}});
    client.send(&slow);
    client.send(&json!({"command": "ping"}));
    for _ in 0..2 {
        let reply = client.recv();
        assert_eq!(reply["id"], json!(null), "{reply}");
        assert_eq!(error(&reply)["code"], -32600, "the gate applies: {reply}");
    }
    client.call(1, "hello", hello_params());
    client.send(&slow);
    client.send(&json!({"command": "ping"}));
    client.send(&json!({"command": "eval_ruby", "parameters": {"code": ":third"}, "id": null}));
    client.send(&json!({"command": "eval_ruby", "parameters": {"code": "1 / 0"}}));
    client.send(&json!({"command": "no_such_tool"}));
    let replies: Vec<_> = (0..5).map(|_| client.recv()).collect();
    for reply in &replies {
        assert_eq!(reply["id"], json!(null), "{reply}");
    }
    assert_eq!(replies[0]["result"]["result"], "first", "{replies:?}");
    assert_eq!(replies[1]["result"]["status"], "connected", "{replies:?}");
    assert_eq!(replies[2]["result"]["result"], "third", "{replies:?}");
    assert_eq!(error(&replies[3])["code"], -32000, "{replies:?}");
    assert_eq!(error(&replies[4])["code"], -32602, "{replies:?}");
    // The connection goes on, JSON-RPC alongside.
    assert_eq!(client.call(2, "ping", json!({}))["result"]["status"], "ok");
}

#[test]
fn an_11_mib_line_is_refused_and_the_connection_still_works() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let mut line =
        br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"eval_ruby","arguments":{"code":""#.to_vec();
    line.resize(line.len() + 11 * 1024 * 1024, b'x');
    line.extend_from_slice(b"\"}}}\n");
    client.send_raw(&line);
    let reply = client.recv();
    assert_eq!(error(&reply)["code"], -32600, "{reply}");
    assert!(error(&reply)["message"].as_str().unwrap().contains("too large"));
    assert_eq!(reply["id"], json!(null));
    assert_eq!(client.call(8, "ping", json!({}))["result"]["status"], "ok");
    assert_eq!(crate::support::eval(&mut client, "1 + 1"), "2");
}

#[test]
fn garbage_gets_parse_errors_and_the_connection_goes_on() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    client.send_raw(b"{not json\n");
    assert_eq!(client.recv()["error"]["code"], -32700);
    client.send_raw(b"[]\n");
    assert_eq!(client.recv()["error"]["code"], -32600);
    client.send_raw(b"\xff\xfe\n");
    assert_eq!(client.recv()["error"]["code"], -32700);
    assert_eq!(client.call(1, "ping", json!({}))["result"]["status"], "ok");
}

/// 50 wrong hellos and the right one in one batch: every failure counts, the
/// fourth hello on is refused without its token being looked at, and the
/// connection closes once the batch is answered.
#[test]
fn a_batch_of_hellos_cannot_get_around_the_failure_limit() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_AUTH_TOKEN", "t0ken")]) else {
        return;
    };
    let mut right = hello_params();
    right["token"] = json!("t0ken");
    let repl_right = json!({"name": "test", "token": "t0ken"});
    for (server, right) in [(bridge.bridge, right), (bridge.repl, repl_right)] {
        let mut batch: Vec<_> = (1..=50)
            .map(
                |id| json!({"jsonrpc": "2.0", "id": id, "method": "hello", "params": {"token": format!("guess-{id}")}}),
            )
            .collect();
        batch.push(json!({"jsonrpc": "2.0", "id": 51, "method": "hello", "params": right}));
        let mut client = LineClient::connect(server);
        client.send(&json!(batch));
        let replies = client.recv();
        let replies = replies.as_array().unwrap_or_else(|| panic!("{server}: expected a batch reply: {replies}"));
        assert_eq!(replies.len(), 51, "{server}: every hello is answered");
        for reply in replies {
            assert_eq!(error(reply)["code"], -32001, "{server}: {reply}");
        }
        let last = replies.iter().find(|r| r["id"] == 51).unwrap();
        assert!(error(last)["message"].as_str().unwrap().contains("too many failed"), "{server}: {last}");
        assert!(client.is_closed_within(Duration::from_secs(5)), "{server}: closed after the batch");
    }
}

/// Without a token, failures are field errors; they count the same way.
#[test]
fn a_batch_of_bad_hellos_without_a_token_also_closes_the_connection() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut batch: Vec<_> =
        (1..=5).map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "hello", "params": {"name": "x"}})).collect();
    batch.push(json!({"jsonrpc": "2.0", "id": 6, "method": "hello", "params": hello_params()}));
    let mut client = LineClient::connect(bridge.bridge);
    client.send(&json!(batch));
    let replies = client.recv();
    let codes: Vec<_> = replies.as_array().unwrap().iter().map(|r| r["error"]["code"].clone()).collect();
    assert_eq!(codes, [-32602, -32602, -32602, -32001, -32001, -32001], "{replies}");
    assert!(client.is_closed_within(Duration::from_secs(5)));
}
