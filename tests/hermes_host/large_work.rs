//! One large request (a batch of patches of seconds) does not stop the
//! daemon: other connections are answered meanwhile, and a second signal
//! exits at once with the work unfinished.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::support::{Control, Host};

/// A host holding a 10 000-segment message, and a `message/patch` of
/// `count` patches for it, sent on a connection of its own and not waited for.
fn patching(count: usize) -> (Host, Control) {
    let host = Host::start("");
    let segments: String = (0..10_000).map(|i| format!("\rOBX|{i}|ST|X||v")).collect();
    host.result("message/set", json!({"message": format!("MSH|^~\\&|A{segments}")}));
    let patches: Vec<Value> =
        (0..count).map(|i| json!({"path": format!("OBX[{}].5", 10_000 - i % 50), "value": "z"})).collect();
    let mut patcher = host.client();
    patcher.send(&json!({"jsonrpc": "2.0", "id": 99, "method": "message/patch", "params": {"patches": patches}}));
    (host, patcher)
}

/// While one connection's batch of patches runs (seconds), another
/// connection's `host/status` and `message/get` are answered at once. The
/// daemon under test is built like this test: a release build applies 4000
/// patches in under half a second, so it gets ten times as many.
#[test]
fn other_connections_are_served_while_a_large_patch_runs() {
    let count = if cfg!(debug_assertions) { 4000 } else { 40_000 };
    let (host, mut patcher) = patching(count);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let mut other = host.client();
    assert!(other.call("host/status", json!({})).get("error").is_none());
    let status_took = started.elapsed();
    let got = other.call("message/get", json!({}));
    let both_took = started.elapsed();
    let still_running = patcher.recv_within(Duration::from_millis(1)).is_none();
    eprintln!("host/status in {status_took:?}, message/get too in {both_took:?}, patch still running: {still_running}");
    assert!(got["result"]["message"].as_str().unwrap().starts_with("MSH"), "{got}");
    assert!(both_took < Duration::from_secs(1), "answered after {both_took:?}");
    assert!(still_running, "the patch ended before the other calls: the test shows nothing");
    let patched = patcher.recv();
    assert_eq!(patched["result"]["patchesApplied"], count, "{patched}");
}

/// SIGTERM then SIGINT while a large patch runs: the daemon exits at once,
/// status 1, the work left unfinished.
#[test]
fn a_second_signal_exits_at_once_while_a_large_patch_runs() {
    // As above: a release build gets through 20 000 patches before the signals.
    let (mut host, _patcher) = patching(if cfg!(debug_assertions) { 20_000 } else { 100_000 });
    std::thread::sleep(Duration::from_millis(500));
    host.daemon.signal(Signal::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    let second = Instant::now();
    host.daemon.signal(Signal::SIGINT);
    let status = host.daemon.wait_exit(Duration::from_secs(30));
    let took = second.elapsed();
    eprintln!("exit {status:?} {took:?} after the second signal");
    assert!(took < Duration::from_secs(2), "exited {took:?} after the second signal");
    assert_eq!(status.code(), Some(1));
}
