//! Replies the runtime makes too large for their road: an exception's
//! message is cut like a value, and a reply line past the pipe's limit fails
//! its evaluation at once rather than at its timeout.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Bridge, error, eval, ok, runtime_pid};

const MIB: usize = 1024 * 1024;

#[test]
fn a_huge_exception_message_is_cut_and_sent_once() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    client.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": "eval_ruby", "arguments": {"code": "raise 'x' * 20_000_000"}}}));
    let line = client.recv_line().unwrap();
    // Uncut, the message came twice: a 40 MB reply.
    assert!(line.len() < 2 * MIB + 64 * 1024, "an error reply of {} bytes", line.len());
    let reply: Value = serde_json::from_str(&line).unwrap();
    let error = error(&reply);
    assert_eq!(error["data"]["reason"], "exception");
    assert_eq!(error["data"]["class"], "RuntimeError");
    let message = error["data"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("xxxx") && message.contains("[truncated: 20000000 bytes in all]"),
        "{}",
        &message[..40]
    );
    let shown = error["message"].as_str().unwrap();
    assert!(shown.starts_with("Ruby error: RuntimeError: xxxx") && shown.len() < 5000, "{} bytes", shown.len());
    assert!(shown.ends_with("see data.message]"), "{}", &shown[shown.len() - 60..]);
    // The REPL shows the message cut the same way.
    let mut repl = bridge.repl_client();
    let output = repl.call(1, "eval", json!({"code": "raise 'y' * 20_000_000"}))["result"]["output"].clone();
    assert!(output.as_str().unwrap().len() < 2 * MIB, "a REPL output of {} bytes", output.as_str().unwrap().len());
}

/// A driver that lets a value starting with `UNCUT` through whole, so a
/// reply can pass the daemon's 64 MiB limit on a reply line.
const UNCUT_DRIVER: &str = r#"
driver = ARGV.fetch(1)
patched = driver.sub("def limit(text, max)\n", "def limit(text, max)\n return text if text.start_with?('UNCUT')\n")
raise 'the driver has no limit() to patch' if patched == driver
ARGV.clear
eval(patched, TOPLEVEL_BINDING, '-e')
"#;

#[test]
fn a_reply_past_the_pipe_limit_fails_its_evaluation_at_once_and_the_runtime_keeps_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("uncut.rb");
    std::fs::write(&wrapper, UNCUT_DRIVER).unwrap();
    let ruby = format!("ruby {}", wrapper.display());
    let Some(bridge) = Bridge::start_with(&[("SUPEX_RUBY", &ruby), ("SUPEX_EVAL_TIMEOUT", "20")]) else {
        return;
    };
    let mut client = bridge.client();
    eval(&mut client, "$kept = :yes");
    let pid = runtime_pid(&mut client);
    let started = Instant::now();
    // 12 million control characters: 72 MB once escaped.
    let reply = client.call(
        1,
        "tools/call",
        json!({"name": "eval_ruby",
                                                     "arguments": {"code": r#""UNCUT" + "\x01" * 12_000_000"#}}),
    );
    let elapsed = started.elapsed();
    let error = error(&reply);
    assert_eq!(error["data"]["reason"], "unusable_reply", "{error}");
    assert!(error["message"].as_str().unwrap().contains("longer than 64 MiB"), "{error}");
    assert!(elapsed < Duration::from_secs(10), "answered after {elapsed:?}");
    // Nothing was killed: the next evaluation finds the same runtime and its state.
    assert_eq!(eval(&mut client, "$kept.inspect"), ":yes");
    assert_eq!(runtime_pid(&mut client), pid);
    assert_eq!(ok(&mut client, "runtime_info", json!({}))["restarts"], 0);
}
