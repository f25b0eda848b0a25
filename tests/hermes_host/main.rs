//! hermes-host over real processes and sockets: a Python test extension
//! speaking raw Content-Length (ext.py), one on Node's vscode-jsonrpc
//! (node-ext/, in [`node`]), the daemon, its control socket and its client
//! commands, `hermes-host mcp` in front of it ([`mcp`]), and the editor page
//! in headless Chromium ([`web`], driven by [`browser`]).

mod browser;
mod hl7_text;
mod hostile;
mod large_work;
mod mcp;
mod memory;
mod node;
mod saving;
mod stopping;
mod support;
mod web;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::{bin_path, eventually, require_tool};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use support::{ADT, Control, Host, py_extension};

const LONG: Duration = Duration::from_secs(20);

fn pid_alive(pid: u64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

fn one(name: &str, env: &[(&str, &str)]) -> String {
    py_extension(name, env)
}

/// A host with one ext.py called `py`. Its `test/call` reads `call.json` in
/// its working directory, which is the config file's: the fixture's directory.
fn host_with(env: &[(&str, &str)], extra: &str) -> Host {
    let mut all = vec![("EXT_CALL_FILE", "call.json")];
    all.extend_from_slice(env);
    Host::start(&format!("{extra}{}", one("py", &all)))
}

fn ext_call(host: &Host, method: &str, params: Value) -> Value {
    host.ext_call("py", method, params)
}

#[test]
fn initialize_gets_the_documented_params_and_environment_and_its_result_is_kept() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "");
    let listing = host.wait_state("py", "running", LONG);
    assert_eq!(listing["version"], "1.2.3");
    assert_eq!(listing["restarts"], 0);
    // Declared commands, then toolbar buttons' own, each once (button b2 runs test/ping).
    let commands = ["test/ping", "test/call", "test/burst", "test/garbage", "test/stderr", "test/exit", "test/button"];
    assert_eq!(listing["commands"], json!(commands), "{listing}");
    assert_eq!(listing["toolbarButtons"][0]["id"], "b1");
    assert!(pid_alive(listing["pid"].as_u64().unwrap()));
    let logs = host.logs("py").join("\n");
    let data_dir = host.dir.path().join("data/extensions/py");
    assert!(logs.contains(&format!("HERMES_API_VERSION=1.0 HERMES_DATA_DIR={}", data_dir.display())), "{logs}");
    assert!(data_dir.is_dir());
    assert!(logs.contains("\"apiVersion\": \"1.0\"") && logs.contains("\"hermesVersion\""), "{logs}");
    // The log file has the same lines, with levels.
    let file = std::fs::read_to_string(host.dir.path().join("data/logs/py.log")).unwrap();
    assert!(file.contains("[info] [INFO] starting"), "{file}");
}

/// A request an extension sends before its `initialize` is answered waits,
/// and is served once the extension runs.
#[test]
fn requests_sent_before_initialize_completes_wait_and_are_served_after() {
    if !require_tool("python3") {
        return;
    }
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("adt.hl7");
    std::fs::write(&file, ADT).unwrap();
    let host = Host::start_with(&one("early", &[("EXT_MODE", "early")]), &["--open", &file.display().to_string()]);
    host.wait_state("early", "running", LONG);
    let early: Value = serde_json::from_str(&host.wait_log("early", "EARLY ", 0, LONG)).unwrap();
    assert_eq!(early["afterInitialize"], true, "answered before initialize completed: {early}");
    assert_eq!(early["response"]["result"]["message"], ADT, "{early}");
}

#[test]
fn a_silent_extension_fails_at_the_initialize_timeout_without_holding_up_the_others() {
    if !require_tool("python3") {
        return;
    }
    let config =
        format!("initialize_timeout_ms = 1500\n{}{}", one("silent", &[("EXT_MODE", "silent")]), one("quick", &[]));
    let started = Instant::now();
    let host = Host::start(&config);
    host.wait_state("quick", "running", LONG);
    // Quick runs while silent's initialize is still unanswered: it did not
    // wait for silent's timeout (an order, not a time: a loaded machine
    // slows both alike).
    let silent = host.extension("silent");
    assert_eq!(silent["state"], "starting", "quick waited for silent: {silent}");
    let pid = silent["pid"].as_u64();
    let failed = host.wait_state("silent", "failed", LONG);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1400) && took < Duration::from_secs(5), "{took:?}");
    assert!(failed["reason"].as_str().unwrap().contains("initialize"), "{failed}");
    if let Some(pid) = pid {
        assert!(eventually(Duration::from_secs(2), || !pid_alive(pid)), "the silent extension was not killed");
    }
    // Not restarted: failed until a reload.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(host.extension("silent")["state"], "failed");
}

#[test]
fn every_editor_method_and_format() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "");
    host.wait_state("py", "running", LONG);
    let none = ext_call(&host, "editor/getMessage", json!({"format": "hl7"}));
    assert_eq!(none["error"]["code"], -32003, "{none}");
    assert_eq!(host.call("message/get", json!({}))["error"]["code"], -32003);
    host.result("message/set", json!({"message": ADT, "format": "hl7"}));

    let hl7 = ext_call(&host, "editor/getMessage", json!({"format": "hl7"}));
    assert_eq!(hl7["result"], json!({"message": ADT, "hasFile": false}));
    let tree = ext_call(&host, "editor/getMessage", json!({"format": "json"}));
    let tree: Value = serde_json::from_str(tree["result"]["message"].as_str().unwrap()).unwrap();
    assert_eq!(tree["segments"][1]["fields"]["5"], json!({"1": "DOE", "2": "JOHN"}));
    assert_eq!(tree["segments"][1]["fields"]["3"][1]["4"], "SSA");
    assert_eq!(tree["segments"][0]["fields"]["1"], "|");
    for format in ["yaml", "toml"] {
        let text = ext_call(&host, "editor/getMessage", json!({"format": format}))["result"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(text.contains("DOE") && text.contains("segments"), "{format}: {text}");
        // Back in the same format gives the same message.
        let set = ext_call(&host, "editor/setMessage", json!({"message": text, "format": format}));
        assert_eq!(set["result"], json!({"success": true}), "{format}: {set}");
        assert_eq!(host.result("message/get", json!({}))["message"], ADT, "{format}");
    }

    let patched = ext_call(
        &host,
        "editor/patchMessage",
        json!({"patches": [{"path": "PID.5.1", "value": "TEST"}, {"path": "NOPE.1", "value": "x"}, {"path": "PID.3[2]", "remove": true},
                           {"path": "OBX", "create": true}, {"path": "OBX.5", "value": "42"}]}),
    );
    assert_eq!(patched["result"]["success"], false, "{patched}");
    assert_eq!(patched["result"]["patchesApplied"], 4);
    assert_eq!(patched["result"]["errors"][0]["index"], 1);
    assert_eq!(patched["result"]["errors"][0]["path"], "NOPE.1");
    let now = host.result("message/get", json!({}))["message"].as_str().unwrap().to_owned();
    assert!(now.ends_with("PID|1||12345^^^HOSP^MR||TEST^JOHN||19800101|M\rOBX|||||42"), "{now}");

    let bad = ext_call(&host, "editor/setMessage", json!({"message": "PID|1", "format": "hl7"}));
    assert_eq!(bad["error"]["code"], -32004, "{bad}");
    let bad = ext_call(&host, "editor/setMessage", json!({"message": "{", "format": "json"}));
    assert_eq!(bad["error"]["code"], -32004, "{bad}");
    let json_in = json!({"segments": [{"segment": "MSH", "fields": {"1": "|", "2": "^~\\&", "3": "X"}}]}).to_string();
    let set = ext_call(&host, "editor/setMessage", json!({"message": json_in, "format": "json"}));
    assert_eq!(set["result"]["success"], true, "{set}");
    assert_eq!(host.result("message/get", json!({}))["message"], "MSH|^~\\&|X");
}

/// hl7 -> json -> hl7 through the control socket gives back the same bytes,
/// escape characters the host does not interpret included: alone, in
/// sequences it does not know, and with delimiters of the message's own.
#[test]
fn hl7_to_json_to_hl7_through_the_control_socket_gives_back_the_same_bytes() {
    let host = Host::start("");
    let messages = [
        "MSH|^~\\&|A\rPID|1||A\\B",
        "MSH|^~\\&|A\rPID|1||\\X\\",
        "MSH|^~\\&|A\rPID|1||\\Z\\",
        "MSH|^~\\&|A\rPID|1||\\T\\^C:\\dir\\^\\.br\\~\\",
        "MSH#@!$%#APP\rPID#1##A$B",
        "MSH#@!$%#APP\rPID#1##$X$@$Z$%$$E$!$",
    ];
    for message in messages {
        host.result("message/set", json!({"message": message}));
        let tree = host.result("message/get", json!({"format": "json"}))["message"].as_str().unwrap().to_owned();
        host.result("message/set", json!({"message": tree, "format": "json"}));
        assert_eq!(host.result("message/get", json!({}))["message"], message, "via {tree}");
    }
}

#[test]
fn non_ascii_content_is_framed_by_bytes_both_ways() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "");
    host.wait_state("py", "running", LONG);
    let message = "MSH|^~\\&|ÄPP|FÄC\rPID|1||42||Müller^Zoë^李雷||19800101|F\rNTE|1||Ünïcödé ✓ 🚑";
    let set = ext_call(&host, "editor/setMessage", json!({"message": message, "format": "hl7"}));
    assert_eq!(set["result"]["success"], true, "{set}");
    assert_eq!(host.result("message/get", json!({}))["message"], message);
    let back = ext_call(&host, "editor/getMessage", json!({"format": "json"}));
    assert!(back["result"]["message"].as_str().unwrap().contains("李雷"), "{back}");
    let back = ext_call(&host, "editor/getMessage", json!({"format": "hl7"}));
    assert_eq!(back["result"]["message"], message);
}

/// Hermes' own test extensions read a body with text-mode
/// `sys.stdin.read(length)`, which counts characters, and send ASCII-only
/// JSON. The host sends ASCII-only JSON too (non-ASCII as `\u` escapes), so
/// both counts agree: non-ASCII content reaches them intact, frame after
/// frame, and their escapes (surrogate pairs included) come back as UTF-8.
#[test]
fn extensions_that_count_characters_get_non_ascii_content_intact() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[("EXT_READ", "chars"), ("EXT_EVENTS", "message/changed+hl7")], "");
    host.wait_state("py", "running", LONG);
    let message = "MSH|^~\\&|ÄPP|FÄC\rPID|1||42||Müller^Zoë^李雷||19800101|F\rNTE|1||Ünïcödé ✓ 🚑";
    host.result("message/set", json!({"message": message}));
    // Twice: the first must not have eaten into the second.
    for _ in 0..2 {
        let got = ext_call(&host, "editor/getMessage", json!({"format": "hl7"}));
        assert_eq!(got["result"]["message"], message, "{got}");
    }
    let tree = ext_call(&host, "editor/getMessage", json!({"format": "json"}));
    assert!(tree["result"]["message"].as_str().unwrap().contains("李雷"), "{tree}");
    let changed = message.replace("Zoë", "Chloë 🚒");
    let set = ext_call(&host, "editor/setMessage", json!({"message": changed, "format": "hl7"}));
    assert_eq!(set["result"]["success"], true, "{set}");
    assert_eq!(host.result("message/get", json!({}))["message"], changed);
    // The debounced message/changed, with the content.
    let heard = || {
        host.logs("py")
            .iter()
            .any(|l| l.starts_with("GOT ") && l.contains("\"message/changed\"") && l.contains("Chloë 🚒"))
    };
    assert!(eventually(Duration::from_secs(5), heard), "{:?}", host.logs("py"));
    let after = ext_call(&host, "editor/getMessage", json!({"format": "hl7"}));
    assert_eq!(after["result"]["message"], changed);
    let listing = host.extension("py");
    assert_eq!((listing["state"].as_str(), listing["restarts"].as_u64()), (Some("running"), Some(0)), "{listing}");
}

/// A 20 MiB message: in from an extension, out to it, and through the control socket.
#[test]
fn a_20_mib_message_goes_both_ways() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "");
    host.wait_state("py", "running", LONG);
    let mut big = String::from("MSH|^~\\&|BIG|FAC|||20231215||ORU^R01|1|P|2.5");
    let mut n = 0;
    while big.len() < 20 * 1024 * 1024 {
        n += 1;
        big.push_str(&format!("\rOBX|{n}|TX|NOTE||{}", "x".repeat(1000)));
    }
    let set = ext_call(&host, "editor/setMessage", json!({"message": big, "format": "hl7"}));
    assert_eq!(set["result"]["success"], true);
    let got = ext_call(&host, "editor/getMessage", json!({"format": "hl7"}));
    assert_eq!(got["result"]["messageBytes"].as_u64(), Some(big.len() as u64), "{got}");
    let mut control = host.client();
    let echoed = control.call("message/get", json!({}));
    assert_eq!(echoed["result"]["message"].as_str().map(str::len), Some(big.len()));
    assert_eq!(host.extension("py")["state"], "running");
}

#[test]
fn headless_dialogs_answer_by_the_documented_policy() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "");
    host.wait_state("py", "running", LONG);
    let cases = [
        ("ui/showMessage", json!({"message": "hi", "kind": "info"}), json!({"acknowledged": true})),
        ("ui/showConfirm", json!({"message": "sure?", "buttons": "yesNo"}), json!({"confirmed": false})),
        ("ui/openFile", json!({"title": "pick"}), json!({"path": null})),
        ("ui/openFiles", json!({}), json!({"paths": null})),
        ("ui/saveFile", json!({"defaultName": "a.hl7"}), json!({"path": null})),
        ("ui/selectDirectory", json!({}), json!({"path": null})),
    ];
    for (method, params, expected) in cases {
        let answer = ext_call(&host, method, params);
        assert_eq!(answer["result"], expected, "{method}: {answer}");
    }
    let window = ext_call(&host, "ui/openWindow", json!({"url": "http://localhost:1/x", "title": "w"}));
    assert_eq!(window["error"]["code"], -32008, "{window}");
    let bad_url = ext_call(&host, "ui/openWindow", json!({"url": "file:///etc/passwd", "title": "w"}));
    assert_eq!(bad_url["error"]["code"], -32007, "{bad_url}");
    let bad_params = ext_call(&host, "ui/showConfirm", json!({"title": "no message"}));
    assert_eq!(bad_params["error"]["code"], -32602, "{bad_params}");
}

#[test]
fn headless_confirm_is_configurable() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "[ui]\nheadless_confirm = true\n");
    host.wait_state("py", "running", LONG);
    let answer = ext_call(&host, "ui/showConfirm", json!({"message": "sure?"}));
    assert_eq!(answer["result"], json!({"confirmed": true}));
}

/// The UI answers a confirm; while it waits, another extension's editor
/// calls are served.
#[test]
fn an_attached_ui_answers_dialogs_while_other_extensions_keep_editing() {
    if !require_tool("python3") {
        return;
    }
    let config = format!(
        "{}{}",
        one("a", &[("EXT_CALL_FILE", "call.json"), ("EXT_COMMANDS", "test/call")]),
        one("b", &[("EXT_COMMANDS", "test/burst"), ("EXT_BURST", "5")])
    );
    let host = Host::start(&config);
    host.wait_state("a", "running", LONG);
    host.wait_state("b", "running", LONG);
    host.result("message/set", json!({"message": ADT}));

    let mut ui = host.client();
    assert_eq!(ui.call("ui/attach", json!({}))["result"]["attached"], true);
    let second = host.call("ui/attach", json!({}));
    assert!(second.get("error").is_some(), "a second UI was let in: {second}");

    std::fs::write(
        host.call_file(),
        json!({"method": "ui/showConfirm", "params": {"message": "Delete?", "title": "T"}}).to_string(),
    )
    .unwrap();
    host.result("command/execute", json!({"command": "test/call"}));
    let request = ui.recv();
    assert_eq!(request["method"], "ui/showConfirm", "{request}");
    assert_eq!(request["params"]["extension"], "a");
    assert_eq!(request["params"]["message"], "Delete?");

    // The dialog is pending: b's editor calls are served meanwhile.
    host.result("command/execute", json!({"command": "test/burst"}));
    assert_eq!(host.wait_log("b", "BURST ", 0, Duration::from_secs(5)), "5");

    ui.send(&json!({"jsonrpc": "2.0", "id": request["id"], "result": {"confirmed": true}}));
    let answer = host.wait_log("a", "RESULT ", 0, LONG);
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["result"], json!({"confirmed": true}), "{answer}");

    // A window: the host names it, the UI is told, the owner may close it, another may not.
    std::fs::write(
        host.call_file(),
        json!({"method": "ui/openWindow", "params": {"url": "https://example.org/w", "title": "W"}}).to_string(),
    )
    .unwrap();
    host.result("command/execute", json!({"command": "test/call"}));
    let open = ui.recv();
    assert_eq!(open["method"], "ui/openWindow");
    ui.send(&json!({"jsonrpc": "2.0", "id": open["id"], "result": {}}));
    let opened: Value = serde_json::from_str(&host.wait_log("a", "RESULT ", 1, LONG)).unwrap();
    let window = opened["result"]["windowId"].as_str().unwrap().to_owned();
    assert_eq!(open["params"]["windowId"], window.as_str());

    // The UI leaves: the window is gone and its owner hears so.
    drop(ui);
    let got = eventually(Duration::from_secs(5), || host.logs("a").iter().any(|l| l.contains("window/closed")));
    assert!(got, "{:?}", host.logs("a"));
}

/// `hermes-host ctl ui` on `socket`, `answers` typed ahead, once it says it
/// is attached (probing with an attach of our own could take the place
/// first: `ctl ui` is then refused and exits). Its stdin and stderr, kept
/// open for as long as the caller holds them.
fn attached_ctl_ui(
    socket: &str,
    answers: &[u8],
) -> (std::process::Child, std::process::ChildStdin, std::io::BufReader<std::process::ChildStderr>) {
    let mut ui = Command::new(bin_path("hermes-host"))
        .args(["ctl", "--socket", socket, "ui"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = ui.stdin.take().unwrap();
    stdin.write_all(answers).unwrap();
    let mut stderr = std::io::BufReader::new(ui.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("attached as the UI") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0, "ctl ui ended before attaching");
    }
    (ui, stdin, stderr)
}

#[test]
fn ctl_ui_answers_a_confirm_from_standard_input() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "");
    host.wait_state("py", "running", LONG);
    let (ui, stdin, _stderr) = attached_ctl_ui(&host.socket.display().to_string(), b"y\n");
    let answer = ext_call(&host, "ui/showConfirm", json!({"message": "Proceed?", "title": "Q"}));
    assert_eq!(answer["result"], json!({"confirmed": true}), "{answer}");
    let message = ext_call(&host, "ui/showMessage", json!({"message": "done", "kind": "warning"}));
    assert_eq!(message["result"], json!({"acknowledged": true}));
    drop(stdin);
    let picked = ext_call(&host, "ui/openFile", json!({"title": "pick"}));
    assert_eq!(picked["result"], json!({"path": null}), "input ended: cancelled");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(ui.id() as i32), Signal::SIGINT).unwrap();
    let out = ui.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("[py] Q: Proceed? [y/n]"), "{stdout}");
    assert!(stdout.contains("warning: done"), "{stdout}");
}

#[test]
fn a_crash_is_seen_at_once_and_the_extension_restarts_with_backoff() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "");
    let first = host.wait_state("py", "running", LONG);
    let old_pid = first["pid"].as_u64().unwrap();
    host.result("command/execute", json!({"command": "test/exit"}));
    let failed = host.wait_state("py", "failed", Duration::from_secs(2));
    assert!(failed["reason"].as_str().unwrap().contains("exit status 3"), "{failed}");
    let again = host.wait_state("py", "running", Duration::from_secs(5));
    assert_eq!(again["restarts"], 1);
    assert_ne!(again["pid"].as_u64().unwrap(), old_pid);
}

#[test]
fn an_exit_during_initialize_fails_the_pending_call_at_once() {
    if !require_tool("python3") {
        return;
    }
    let started = Instant::now();
    let host = Host::start(&one("dies", &[("EXT_MODE", "exit_during_init")]));
    let failed = host.wait_state("dies", "failed", Duration::from_secs(3));
    assert!(started.elapsed() < Duration::from_secs(3), "waited for the 10 s timeout");
    assert!(failed["reason"].as_str().unwrap().contains("exited during initialize"), "{failed}");
}

#[test]
fn three_crashes_within_five_minutes_leave_it_failed_until_a_reload() {
    if !require_tool("python3") {
        return;
    }
    let host = Host::start(&one("loop", &[("EXT_MODE", "crash")]));
    let cut_off = || host.extension("loop")["reason"].as_str().is_some_and(|r| r.contains("3 times"));
    assert!(eventually(LONG, cut_off), "no cut-off: {}", host.extension("loop"));
    let failed = host.extension("loop");
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["restarts"], 2);
    std::thread::sleep(Duration::from_secs(3));
    let still = host.extension("loop");
    assert_eq!((still["state"].as_str(), still["restarts"].as_u64()), (Some("failed"), Some(2)), "{still}");
    // A reload with a fixed config brings it back.
    std::fs::write(host.dir.path().join("config.toml"), one("loop", &[])).unwrap();
    host.result("extensions/reload", json!({}));
    let back = host.wait_state("loop", "running", LONG);
    assert_eq!(back["restarts"], 0);
}

#[test]
fn garbage_frames_are_skipped_and_the_extension_keeps_running() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "");
    host.wait_state("py", "running", LONG);
    host.result("message/set", json!({"message": ADT}));
    let before = host.logs("py").iter().filter(|l| l.starts_with("RESULT ")).count();
    host.result("command/execute", json!({"command": "test/garbage"}));
    let after: Value = serde_json::from_str(&host.wait_log("py", "RESULT ", before, LONG)).unwrap();
    assert_eq!(after["result"]["message"], ADT, "{after}");
    let logs = host.logs("py").join("\n");
    assert!(logs.contains("-32700"), "bad JSON was not answered -32700:\n{logs}");
    assert_eq!(host.extension("py")["restarts"], 0);
}

#[test]
fn two_hundred_concurrent_requests_from_one_extension() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[("EXT_BURST", "200")], "");
    host.wait_state("py", "running", LONG);
    host.result("message/set", json!({"message": ADT}));
    host.result("command/execute", json!({"command": "test/burst"}));
    assert_eq!(host.wait_log("py", "BURST ", 0, LONG), "200");
}

#[test]
fn commands_go_to_the_first_extension_that_declares_them() {
    if !require_tool("python3") {
        return;
    }
    let host = Host::start(&format!("{}{}", one("first", &[]), one("second", &[])));
    host.wait_state("first", "running", LONG);
    host.wait_state("second", "running", LONG);
    let sent = host.result("command/execute", json!({"command": "test/ping"}));
    assert_eq!(sent["extension"], "first");
    assert_eq!(host.wait_log("first", "pong", 0, LONG), "");
    assert!(host.logs("second").iter().any(|l| l.contains("also declared by first")));
    let unknown = host.call("command/execute", json!({"command": "no/such"}));
    assert_eq!(unknown["error"]["code"], -32009);
}

#[test]
fn stderr_lines_get_levels() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[], "");
    host.wait_state("py", "running", LONG);
    host.result("command/execute", json!({"command": "test/stderr"}));
    host.wait_log("py", "debug: details", 0, LONG);
    let logs = host.result("extensions/logs", json!({"name": "py", "lines": 4}));
    let levels: Vec<&str> = logs["lines"].as_array().unwrap().iter().map(|l| l["level"].as_str().unwrap()).collect();
    assert_eq!(levels, ["error", "warn", "info", "debug"]);
}

#[test]
fn opening_patching_and_saving_reach_subscribers_and_extensions() {
    if !require_tool("python3") {
        return;
    }
    let host = host_with(&[("EXT_EVENTS", "message/changed+json,message/opened,message/saved")], "");
    host.wait_state("py", "running", LONG);
    let file = host.dir.path().join("in.hl7");
    std::fs::write(&file, ADT.replace('\r', "\n")).unwrap();
    let mut events = host.client();
    events.call("subscribe", json!({"events": ["message_changed"]}));
    host.result("message/open", json!({"path": file}));
    assert_eq!(events.recv()["params"]["change"], "opened");
    // Two edits in a burst: one debounced message/changed, with content.
    host.result("message/set", json!({"message": ADT.replace("DOE", "ROE")}));
    host.result("message/set", json!({"message": ADT.replace("DOE", "POE")}));
    assert_eq!(events.recv()["params"]["change"], "edited");
    let saved_to = host.dir.path().join("out.hl7");
    host.result("message/save", json!({"path": saved_to}));
    assert_eq!(std::fs::read_to_string(&saved_to).unwrap(), ADT.replace("DOE", "POE"));
    let heard = |what: &str| host.logs("py").iter().any(|l| l.contains(what));
    assert!(eventually(Duration::from_secs(3), || heard("message/saved") && heard("\"message/changed\"")));
    // Well past the debounce: still one.
    std::thread::sleep(Duration::from_millis(800));
    let logs = host.logs("py");
    let changed: Vec<&String> = logs.iter().filter(|l| l.contains("\"message/changed\"")).collect();
    assert_eq!(changed.len(), 1, "not debounced: {changed:?}");
    assert!(changed[0].contains("POE") && changed[0].contains("\"format\": \"json\""), "{changed:?}");
    assert!(logs.iter().any(|l| l.contains("message/opened") && l.contains("\"isNew\": false")), "{logs:?}");
    assert!(logs.iter().any(|l| l.contains("message/saved") && l.contains("\"saveAs\": true")), "{logs:?}");
    // Nothing open: save is -32003.
    let fresh = Host::start("");
    assert_eq!(fresh.call("message/save", json!({"path": saved_to}))["error"]["code"], -32003);
}

/// `message/patch` is `editor/patchMessage` for control clients, and
/// `message/new {message}` opens text as a new message with no file, so a
/// save never overwrites the file that was open before.
#[test]
fn control_clients_patch_and_open_text_as_a_new_message() {
    let host = Host::start("");
    let file = host.dir.path().join("in.hl7");
    std::fs::write(&file, ADT).unwrap();
    let mut events = host.client();
    events.call("subscribe", json!({"events": ["message_changed"]}));
    host.result("message/open", json!({"path": file}));
    assert_eq!(events.recv()["params"]["change"], "opened");

    let outcome = host.result(
        "message/patch",
        json!({"patches": [{"path": "PID.5.1", "value": "ROE"}, {"path": "PID.5x", "value": "?"}]}),
    );
    assert_eq!(outcome["success"], false, "{outcome}");
    assert_eq!(outcome["patchesApplied"], 1, "{outcome}");
    assert_eq!(outcome["errors"][0]["index"], 1, "{outcome}");
    let edited = events.recv();
    assert_eq!((&edited["params"]["change"], &edited["params"]["by"]), (&json!("edited"), &json!("control")));
    assert!(host.result("message/get", json!({}))["message"].as_str().unwrap().contains("ROE^JOHN"));

    let text = ADT.replace("DOE", "NEW").replace('\r', "\n");
    assert_eq!(host.result("message/new", json!({"message": text})), json!({"hasFile": false}));
    assert_eq!(events.recv()["params"], json!({"change": "opened", "isNew": true, "filePath": null}));
    let got = host.result("message/get", json!({}));
    assert!(got["message"].as_str().unwrap().contains("NEW^JOHN") && got["hasFile"] == false, "{got}");
    assert_eq!(host.call("message/save", json!({}))["error"]["code"], -32005, "no file to overwrite");

    // Text that is not a message: -32004, and the message stays.
    assert_eq!(host.call("message/new", json!({"message": "PID|1"}))["error"]["code"], -32004);
    assert!(host.result("message/get", json!({}))["message"].as_str().unwrap().contains("NEW^JOHN"));
    let tree = host.result("message/get", json!({"format": "json"}))["message"].as_str().unwrap().to_owned();
    host.result("message/new", json!({"message": tree, "format": "json"}));
    assert!(host.result("message/get", json!({}))["message"].as_str().unwrap().contains("NEW^JOHN"));
    // Without params: a bare header, as before.
    host.result("message/new", json!({}));
    assert_eq!(host.result("message/get", json!({}))["message"], "MSH|^~\\&");

    // ctl patch: PATH=VALUE, +SEGMENT; exit 1 when a patch failed.
    let ctl = |args: &[&str]| {
        Command::new(bin_path("hermes-host"))
            .args(["ctl", "--socket", &host.socket.display().to_string()])
            .args(args)
            .output()
            .unwrap()
    };
    let ok = ctl(&["patch", "MSH.3=APP", "+NTE", "NTE.3=hello"]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "3 applied");
    assert_eq!(host.result("message/get", json!({}))["message"], "MSH|^~\\&|APP\rNTE|||hello");
    let bad = ctl(&["patch", "-MSH"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stdout).contains("MSH"), "{}", String::from_utf8_lossy(&bad.stdout));
}

#[test]
fn sigterm_shuts_every_extension_down_and_leaves_no_process() {
    if !require_tool("python3") {
        return;
    }
    let config = format!("{}{}", one("polite", &[]), one("stubborn", &[("EXT_MODE", "ignore_shutdown")]));
    let mut host = Host::start(&config);
    let polite = host.wait_state("polite", "running", LONG)["pid"].as_u64().unwrap();
    let stubborn = host.wait_state("stubborn", "running", LONG)["pid"].as_u64().unwrap();
    host.daemon.signal(Signal::SIGTERM);
    let started = Instant::now();
    let status = host.daemon.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status}:\n{}", host.daemon.stderr());
    assert!(started.elapsed() < Duration::from_secs(9), "{:?}", started.elapsed());
    assert!(!pid_alive(polite) && !pid_alive(stubborn), "a process outlived the host");
    assert!(!host.socket.exists(), "the socket file is still there");
    let log = std::fs::read_to_string(host.dir.path().join("data/logs/polite.log")).unwrap();
    assert!(log.contains("shutdown reason=closing"), "{log}");
}

#[test]
fn sighup_reloads_the_extensions_with_reason_reload() {
    if !require_tool("python3") {
        return;
    }
    let host = Host::start(&one("py", &[]));
    let old = host.wait_state("py", "running", LONG)["pid"].as_u64().unwrap();
    host.daemon.signal(Signal::SIGHUP);
    assert!(eventually(LONG, || host.extension("py")["pid"].as_u64().is_some_and(|p| p != old)));
    host.wait_state("py", "running", LONG);
    let log = std::fs::read_to_string(host.dir.path().join("data/logs/py.log")).unwrap();
    assert!(log.contains("shutdown reason=reload"), "{log}");
    assert!(!pid_alive(old));
}

#[test]
fn schemas_are_merged_in_config_order() {
    if !require_tool("python3") {
        return;
    }
    let config = format!(
        "{}{}",
        one("a", &[("EXT_SCHEMA", r#"{"PID": {"3": {"note": "a", "x": 1}}}"#)]),
        one("b", &[("EXT_SCHEMA", r#"{"PID": {"3": {"note": "b"}}}"#)])
    );
    let host = Host::start(&config);
    host.wait_state("a", "running", LONG);
    host.wait_state("b", "running", LONG);
    assert_eq!(host.result("schema/get", json!({})), json!({"PID": {"3": {"note": "b", "x": 1}}}));
}

/// Schemas in Hermes' own shape (field lists): entries for the same field
/// and component merge, the others are all kept.
#[test]
fn hermes_field_list_schemas_merge_entry_by_entry() {
    if !require_tool("python3") {
        return;
    }
    let a = r#"{"segments": {"PID": {"fields": [{"field": 3, "component": 1, "note": "a", "pattern": "x"}, {"field": 8, "note": "sex"}]}}}"#;
    let b = r#"{"segments": {"PID": {"fields": [{"field": 3, "component": 1, "note": "b"}, {"field": 11, "note": "address"}]}}}"#;
    let host = Host::start(&format!("{}{}", one("a", &[("EXT_SCHEMA", a)]), one("b", &[("EXT_SCHEMA", b)])));
    host.wait_state("a", "running", LONG);
    host.wait_state("b", "running", LONG);
    let fields = host.result("schema/get", json!({}))["segments"]["PID"]["fields"].clone();
    assert_eq!(
        fields,
        json!([{"field": 3, "component": 1, "note": "b", "pattern": "x"}, {"field": 8, "note": "sex"}, {"field": 11, "note": "address"}])
    );
}

#[test]
fn the_control_socket_is_private_and_bad_config_is_exit_2() {
    use std::os::unix::fs::PermissionsExt;
    let host = Host::start("");
    let mode = std::fs::metadata(&host.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[extensions]]\ncomand = 'x'\n").unwrap();
    let (status, _, stderr) =
        integration_tests::run("hermes-host", &["serve", "--config", &bad.display().to_string()], &[]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("HERMES_HOST_CONFIG") && stderr.contains("comand"), "{stderr}");
    let _ = Control::connect(&host.socket);
}
