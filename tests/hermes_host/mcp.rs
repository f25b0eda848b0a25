//! `hermes-host mcp` driven by the official MCP Python SDK over stdio, in
//! front of a real host with the Python test extension: every tool against
//! the live host in both protocol eras, the host's errors as tool errors, the
//! message as resources updated when anyone changes it, a host restart, and
//! a host that does not answer.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

use integration_tests::{Daemon, McpClient, bin_path, eventually, require_tool};
use serde_json::{Value, json};

use crate::support::{ADT, Host, py_extension};

const HL7: &str = "hermes://message.hl7";
const JSON: &str = "hermes://message.json";
const TOOLS: [&str; 9] = [
    "open_message",
    "get_message",
    "set_message",
    "patch_message",
    "save_message",
    "list_extensions",
    "run_command",
    "extension_logs",
    "get_schema",
];

fn open(mcp: &mut McpClient, socket: &Path, extra: &[&str], mode: &str, listen: Value) -> Value {
    let bin = bin_path("hermes-host");
    let socket = socket.display().to_string();
    let mut command = vec![bin.to_str().unwrap(), "mcp", "--socket", &socket];
    command.extend_from_slice(extra);
    mcp.open_stdio(&command, &[], mode, listen)
}

fn call(mcp: &mut McpClient, name: &str, arguments: Value) -> Value {
    mcp.ok(json!({"op": "call_tool", "name": name, "arguments": arguments}))
}

/// A call that must succeed; its result.
fn ok(mcp: &mut McpClient, name: &str, arguments: Value) -> Value {
    let result = call(mcp, name, arguments);
    assert_eq!(result["isError"], false, "{name}: {result}");
    result
}

/// Starts the daemon again on the fixture's socket and configuration.
fn restart(host: &mut Host) {
    let dir = host.dir.path();
    let (config, data) = (dir.join("config.toml"), dir.join("data"));
    let args = ["serve", "--config", config.to_str().unwrap(), "--socket", host.socket.to_str().unwrap()];
    let mut args = args.to_vec();
    args.extend(["--data-dir", data.to_str().unwrap()]);
    host.daemon = Daemon::start("hermes-host", &args, &[]);
    let up = eventually(Duration::from_secs(20), || std::os::unix::net::UnixStream::connect(&host.socket).is_ok());
    assert!(up, "no control socket:\n{}", host.daemon.stderr());
}

#[test]
fn mcp_offers_every_tool_against_the_live_host_in_both_protocol_eras() {
    if !require_tool("python3") {
        return;
    }
    let host = Host::start(&py_extension("py", &[("EXT_SCHEMA", r#"{"PID": {"5": {"note": "name"}}}"#)]));
    host.wait_state("py", "running", Duration::from_secs(20));
    let file = host.dir.path().join("adt.hl7");
    std::fs::write(&file, ADT).unwrap();
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let Some(mut mcp) = McpClient::start() else { return };
        let session = open(&mut mcp, &host.socket, &[], mode, json!(null));
        assert_eq!(session["protocolVersion"], version, "{mode}: {session}");
        assert_eq!(session["serverInfo"]["name"], "hermes-host");
        assert_eq!(session["capabilities"]["resources"]["subscribe"], true, "{session}");
        let tools = mcp.ok(json!({"op": "list_tools"}));
        let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, TOOLS, "{mode}");

        let opened = ok(&mut mcp, "open_message", json!({"path": file}));
        assert_eq!(opened["structuredContent"]["filePath"], file.display().to_string(), "{opened}");
        let hl7 = ok(&mut mcp, "get_message", json!({}));
        assert_eq!(McpClient::text(&hl7), ADT.replace('\r', "\n"), "one segment per line: {hl7}");
        assert!(hl7["content"][1]["text"].as_str().unwrap().contains("adt.hl7"), "{hl7}");
        let tree = ok(&mut mcp, "get_message", json!({"format": "json"}));
        let tree: Value = serde_json::from_str(McpClient::text(&tree)).unwrap();
        assert_eq!(tree["segments"][1]["fields"]["5"], json!({"1": "DOE", "2": "JOHN"}), "{tree}");

        ok(&mut mcp, "set_message", json!({"message": ADT.replace("DOE", "ROE")}));
        let patched = ok(
            &mut mcp,
            "patch_message",
            json!({"patches": [{"path": "PID.5.2", "value": "JANE"}, {"path": "NTE", "create": true},
                               {"path": "NTE.3", "value": "from the agent"}]}),
        );
        assert_eq!(patched["structuredContent"]["patchesApplied"], 3, "{patched}");
        let now = host.result("message/get", json!({}))["message"].as_str().unwrap().to_owned();
        assert!(now.contains("ROE^JANE") && now.ends_with("\rNTE|||from the agent"), "{now}");

        let saved_to = host.dir.path().join(format!("saved-{mode}.hl7"));
        let saved = ok(&mut mcp, "save_message", json!({"path": saved_to}));
        assert_eq!(saved["structuredContent"]["filePath"], saved_to.display().to_string(), "{saved}");
        assert_eq!(std::fs::read_to_string(&saved_to).unwrap(), now);

        let extensions = ok(&mut mcp, "list_extensions", json!({}));
        let py = &extensions["structuredContent"]["extensions"][0];
        assert_eq!((&py["name"], &py["state"]), (&json!("py"), &json!("running")), "{extensions}");

        let pongs = |mcp: &mut McpClient| {
            let logs = ok(mcp, "extension_logs", json!({"name": "py", "lines": 1000}));
            McpClient::text(&logs).lines().filter(|l| l.ends_with("pong")).count()
        };
        let before = pongs(&mut mcp);
        let sent = ok(&mut mcp, "run_command", json!({"command": "test/ping"}));
        assert_eq!(sent["structuredContent"], json!({"sent": true, "extension": "py"}));
        let ran = eventually(Duration::from_secs(10), || pongs(&mut mcp) != before);
        assert!(ran, "the extension ran the command: {:?}", host.logs("py"));
        let logs = ok(&mut mcp, "extension_logs", json!({"name": "py", "lines": 1000}));
        assert!(McpClient::text(&logs).contains("[info] pong"), "levels shown: {logs}");

        let schema = ok(&mut mcp, "get_schema", json!({}));
        assert_eq!(schema["structuredContent"], json!({"PID": {"5": {"note": "name"}}}));

        // Text as a new message: no file, so saving asks for a path.
        let fresh = ok(&mut mcp, "open_message", json!({"message": ADT.replace("DOE", "NEW")}));
        assert_eq!(fresh["structuredContent"]["hasFile"], false, "{fresh}");
        let unsaved = ok(&mut mcp, "get_message", json!({}));
        assert!(McpClient::text(&unsaved).contains("NEW^JOHN"), "{unsaved}");
        assert!(unsaved["content"][1]["text"].as_str().unwrap().contains("not saved"), "{unsaved}");
        assert_eq!(call(&mut mcp, "save_message", json!({}))["isError"], true);
        assert_eq!(std::fs::read_to_string(&saved_to).unwrap(), now, "the earlier file is untouched");
    }
}

#[test]
fn mcp_host_errors_are_tool_errors_with_the_host_message() {
    let host = Host::start("");
    let Some(mut mcp) = McpClient::start() else { return };
    open(&mut mcp, &host.socket, &[], "auto", json!(null));
    let error = |mcp: &mut McpClient, name: &str, arguments: Value| {
        let result = call(mcp, name, arguments);
        assert_eq!(result["isError"], true, "{name}: {result}");
        McpClient::text(&result).to_owned()
    };
    assert_eq!(error(&mut mcp, "get_message", json!({})), "no message open");
    let missing = error(&mut mcp, "open_message", json!({"path": "/nonexistent/x.hl7"}));
    assert!(missing.contains("/nonexistent/x.hl7"), "{missing}");
    let invalid = error(&mut mcp, "open_message", json!({"message": "PID|1||42"}));
    assert!(invalid.starts_with("invalid message"), "{invalid}");
    assert_eq!(error(&mut mcp, "run_command", json!({"command": "no/such"})), "command not found: no/such");
    let both = error(&mut mcp, "open_message", json!({"path": "a", "message": "b"}));
    assert!(both.contains("not both"), "{both}");
    let unnamed = error(&mut mcp, "extension_logs", json!({"name": "ghost"}));
    assert!(unnamed.contains("ghost"), "{unnamed}");

    ok(&mut mcp, "open_message", json!({"message": ADT}));
    let bad = error(
        &mut mcp,
        "patch_message",
        json!({"patches": [{"path": "PID.5x", "value": "?"}, {"path": "PID.8", "value": "F"}]}),
    );
    assert!(bad.contains("1 patch(es) failed") && bad.contains("1 applied") && bad.contains("PID.5x"), "{bad}");
    assert!(host.result("message/get", json!({}))["message"].as_str().unwrap().ends_with("|F"), "the rest applied");
    // Malformed patches: the host's own params error, naming the field.
    let shape = error(&mut mcp, "patch_message", json!({"patches": [{"value": "x"}]}));
    assert!(shape.contains("path"), "{shape}");
    // The session goes on.
    assert_eq!(mcp.ok(json!({"op": "list_tools"}))["tools"].as_array().unwrap().len(), TOOLS.len());
}

#[test]
fn mcp_resources_are_the_message_and_changes_reach_both_eras() {
    let host = Host::start("");
    // Initialize era: resources/subscribe, one URI at a time.
    let Some(mut legacy) = McpClient::start() else { return };
    open(&mut legacy, &host.socket, &[], "legacy", json!(null));
    let listed = legacy.ok(json!({"op": "list_resources"}));
    let uris: Vec<&str> = listed["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, [HL7, JSON], "{listed}");
    let nothing = legacy.send(json!({"op": "read_resource", "uri": HL7}));
    assert!(nothing["error"].as_str().unwrap_or_default().contains("no message open"), "{nothing}");
    legacy.ok(json!({"op": "subscribe", "uri": HL7}));

    // 2026-07-28 era: a subscriptions/listen stream for both.
    let Some(mut modern) = McpClient::start() else { return };
    let session = open(&mut modern, &host.socket, &[], "auto", json!({"resources": [HL7, JSON]}));
    assert_eq!(session["protocolVersion"], "2026-07-28");
    assert_eq!(modern.ok(json!({"op": "list_resources"}))["resources"], listed["resources"]);

    // A change by another control client (not through MCP) reaches both.
    host.result("message/new", json!({"message": ADT}));
    let change = legacy.next_change(Duration::from_secs(5)).expect("resources/updated in the initialize era");
    assert_eq!(change, json!({"change": "resource", "uri": HL7}));
    let mut heard: Vec<String> = (0..2)
        .filter_map(|_| modern.next_change(Duration::from_secs(5)))
        .map(|c| c["uri"].as_str().unwrap().to_owned())
        .collect();
    heard.sort();
    assert_eq!(heard, [HL7, JSON], "resources/updated on the listen stream");
    assert_eq!(legacy.next_change(Duration::from_millis(300)), None, "only what was subscribed");

    let hl7 = legacy.ok(json!({"op": "read_resource", "uri": HL7}));
    assert_eq!(hl7["contents"][0]["text"], ADT.replace('\r', "\n"), "{hl7}");
    assert_eq!(hl7["contents"][0]["mimeType"], "text/plain");
    let tree = modern.ok(json!({"op": "read_resource", "uri": JSON}));
    assert_eq!(tree["contents"][0]["mimeType"], "application/json");
    let tree: Value = serde_json::from_str(tree["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(tree["segments"][0]["segment"], "MSH", "{tree}");

    // An edit through a tool is a change too; a save is not (same text).
    ok(&mut modern, "patch_message", json!({"patches": [{"path": "PID.5.1", "value": "ROE"}]}));
    assert_eq!(legacy.next_change(Duration::from_secs(5)), Some(json!({"change": "resource", "uri": HL7})));
    let after = legacy.ok(json!({"op": "read_resource", "uri": HL7}));
    assert!(after["contents"][0]["text"].as_str().unwrap().contains("ROE^JOHN"), "{after}");
    ok(&mut modern, "save_message", json!({"path": host.dir.path().join("out.hl7")}));
    assert_eq!(legacy.next_change(Duration::from_millis(500)), None, "a save changes no text");
}

#[test]
fn mcp_reports_a_stopped_host_and_reconnects_and_resubscribes_when_it_is_back() {
    let mut host = Host::start("");
    let Some(mut mcp) = McpClient::start() else { return };
    open(&mut mcp, &host.socket, &[], "legacy", json!(null));
    mcp.ok(json!({"op": "subscribe", "uri": HL7}));
    ok(&mut mcp, "open_message", json!({"message": ADT}));
    assert!(mcp.next_change(Duration::from_secs(5)).is_some());

    host.daemon.terminate();
    let mut down = call(&mut mcp, "get_message", json!({}));
    if McpClient::text(&down).contains("broke") {
        // The call went out before the connection was seen closing.
        down = call(&mut mcp, "get_message", json!({}));
    }
    assert_eq!(down["isError"], true, "{down}");
    let text = McpClient::text(&down);
    assert!(text.contains("not reachable") && text.contains("hermes-host serve"), "{text}");

    restart(&mut host);
    // The new host holds no message: the agent hears that its resources
    // changed once the connection is made again, without calling anything.
    let change = mcp.next_change(Duration::from_secs(10)).expect("an update after the reconnect");
    assert_eq!(change["uri"], HL7);
    let back = call(&mut mcp, "get_message", json!({}));
    assert_eq!(McpClient::text(&back), "no message open", "the restarted host answers: {back}");
    // The new connection is subscribed again: another client's change arrives.
    host.result("message/new", json!({"message": ADT}));
    assert_eq!(mcp.next_change(Duration::from_secs(5)), Some(json!({"change": "resource", "uri": HL7})));
}

/// A control socket that takes connections and subscriptions but answers
/// nothing else: a host stuck in a long call.
fn silent_host(path: &Path) {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let request: Value = serde_json::from_str(&line).unwrap_or_default();
                    if request["method"] == "subscribe" {
                        let reply =
                            json!({"jsonrpc": "2.0", "id": request["id"], "result": {"events": ["message_changed"]}});
                        let _ = writeln!(writer, "{reply}");
                    }
                }
            });
        }
    });
}

#[test]
fn mcp_calls_to_a_host_that_does_not_answer_end_at_either_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("silent.sock");
    silent_host(&socket);
    let Some(mut mcp) = McpClient::start() else { return };
    open(&mut mcp, &socket, &["--timeout", "1"], "auto", json!(null));

    // The client's own timeout cancels the call at once.
    let started = Instant::now();
    let answer = mcp.send(json!({"op": "call_tool", "name": "list_extensions", "arguments": {}, "timeout": 0.3}));
    assert!(answer["error"].as_str().unwrap_or_default().contains("timed out"), "{answer}");
    assert!(started.elapsed() < Duration::from_millis(900), "{:?}", started.elapsed());

    // Without one, --timeout ends it as a tool error.
    let started = Instant::now();
    let late = call(&mut mcp, "list_extensions", json!({}));
    assert_eq!(late["isError"], true, "{late}");
    assert!(McpClient::text(&late).contains("no answer"), "{late}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert_eq!(mcp.ok(json!({"op": "list_tools"}))["tools"].as_array().unwrap().len(), TOOLS.len());
}

#[test]
fn the_official_mcp_inspector_lists_tools_reads_the_message_and_patches_it() {
    let host = Host::start("");
    let file = host.dir.path().join("adt.hl7");
    std::fs::write(&file, ADT).unwrap();
    host.result("message/open", json!({"path": file}));
    let bin = bin_path("hermes-host");
    let socket = host.socket.display().to_string();
    let server = [bin.to_str().unwrap(), "mcp", "--socket", &socket];
    let inspect = |args: &[&str]| integration_tests::mcp_inspector(&[&server[..], args].concat());
    let Some(listed) = inspect(&["--method", "tools/list"]) else { return };
    let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TOOLS);
    let resources = inspect(&["--method", "resources/list"]).unwrap();
    assert_eq!(resources["resources"].as_array().map(Vec::len), Some(2), "{resources}");
    let read = inspect(&["--method", "resources/read", "--uri", HL7]).unwrap();
    assert!(read["contents"][0]["text"].as_str().unwrap().contains("DOE^JOHN"), "{read}");
    let patched = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "patch_message",
        "--tool-arg",
        r#"patches=[{"path": "PID.5.2", "value": "JANE"}]"#,
    ])
    .unwrap();
    assert_eq!(patched["isError"], false, "{patched}");
    let now = host.result("message/get", json!({}))["message"].as_str().unwrap().to_owned();
    assert!(now.contains("DOE^JANE"), "{now}");
}
