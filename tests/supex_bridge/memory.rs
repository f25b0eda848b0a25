//! What a client can make the daemon hold: replies it never
//! reads and notifications it floods stay within the connection's byte
//! budgets, measured as the daemon's resident memory.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use integration_tests::{rss_bytes, rss_growth_mib};
use serde_json::json;

use crate::support::{Bridge, eval, hello_params, ok};

const MIB: u64 = 1024 * 1024;

/// A connection that has said hello and will never read again; the writes
/// go on in a thread of their own (they block once the daemon stops reading).
fn flood(bridge: &Bridge, lines: Vec<Vec<u8>>) -> TcpStream {
    let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "hello", "params": hello_params()});
    flood_at(bridge.bridge, hello, lines)
}

/// [`flood`] on any server, after its own `hello`.
fn flood_at(addr: std::net::SocketAddr, hello: serde_json::Value, lines: Vec<Vec<u8>>) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    let mut writer = stream.try_clone().unwrap();
    std::thread::spawn(move || {
        let _ = writer.write_all(format!("{hello}\n").as_bytes());
        for line in lines {
            if writer.write_all(&line).is_err() {
                return;
            }
        }
    });
    stream
}

#[test]
fn pipelined_large_reads_that_are_never_read_stay_within_the_budget() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    std::fs::write(bridge.root.join("big.txt"), "a".repeat(MIB as usize)).unwrap();
    let before = rss_bytes(bridge.daemon.pid());
    let lines = (1..=3000)
        .map(|id| {
            let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                 "params": {"name": "read_file", "arguments": {"path": "big.txt"}}});
            format!("{request}\n").into_bytes()
        })
        .collect();
    let _stream = flood(&bridge, lines);
    let grown =
        rss_growth_mib(bridge.daemon.pid(), before, Duration::from_secs(4), "supex-bridge: 3000 unread 1 MiB replies");
    // Unbounded, this is 3 GiB. The budget: 8 MiB of queued replies plus one
    // reply per running handler (32), plus the allocator's slack.
    assert!(grown < 160, "grew by {grown} MiB");
    let mut other = bridge.client();
    assert_eq!(eval(&mut other, "1 + 1"), "2", "the daemon still serves others");
}

#[test]
fn large_notifications_flooded_behind_a_slow_eval_stay_within_the_backlog() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let before = rss_bytes(bridge.daemon.pid());
    let mut lines = vec![
        format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "eval_ruby", "arguments": {"code": "sleep 10"}}})
        )
        .into_bytes(),
    ];
    let padding = "x".repeat(MIB as usize);
    for _ in 0..500 {
        let note = json!({"jsonrpc": "2.0", "method": "tools/call",
                          "params": {"name": "eval_ruby", "arguments": {"code": format!("# {padding}")}}});
        lines.push(format!("{note}\n").into_bytes());
    }
    let _stream = flood(&bridge, lines);
    let grown = rss_growth_mib(
        bridge.daemon.pid(),
        before,
        Duration::from_secs(4),
        "supex-bridge: 500 flooded 1 MiB notifications",
    );
    // Unbounded, this is 500 MiB and more. The incoming backlog holds 16 MiB.
    assert!(grown < 120, "grew by {grown} MiB");
}

/// Code whose value is 4 MiB (the driver's cap) of a control character,
/// which JSON writes in six bytes: a 24 MiB reply.
const LARGE_VALUE: &str = r#""\x01" * 4_000_000"#;

#[test]
fn pipelined_evaluations_with_large_replies_that_are_never_read_stay_within_the_budget() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let before = rss_bytes(bridge.daemon.pid());
    let lines = (1..=32)
        .map(|id| {
            let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                 "params": {"name": "eval_ruby", "arguments": {"code": LARGE_VALUE}}});
            format!("{request}\n").into_bytes()
        })
        .collect();
    let _stream = flood(&bridge, lines);
    let grown = rss_growth_mib(
        bridge.daemon.pid(),
        before,
        Duration::from_secs(8),
        "supex-bridge: 32 unread 24 MiB eval replies",
    );
    // Unbounded, every evaluation runs and queues its reply: 600 MiB and
    // more. The bound: one evaluation of the connection at a time, and only
    // with room in its outbox, so it holds its budget and one reply or two.
    assert!(grown < 250, "grew by {grown} MiB");
    let mut other = bridge.client();
    assert_eq!(eval(&mut other, "1 + 1"), "2", "the daemon still serves others");
    // The reader that stopped holds back its own evaluations, not the runtime.
    assert!(ok(&mut other, "runtime_info", json!({}))["evals"].as_u64() < Some(8));
}

#[test]
fn pipelined_repl_evaluations_that_are_never_read_stay_within_the_budget() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let before = rss_bytes(bridge.daemon.pid());
    // The REPL shows `inspect`: one that returns the control characters as they are.
    let code = format!("o = Object.new; def o.inspect; {LARGE_VALUE}; end; o");
    let lines = (1..=32)
        .map(|id| format!("{}\n", json!({"jsonrpc": "2.0", "id": id, "method": "eval", "params": {"code": code}})))
        .map(String::into_bytes)
        .collect();
    let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "hello", "params": {"name": "test"}});
    let _stream = flood_at(bridge.repl, hello, lines);
    let grown = rss_growth_mib(
        bridge.daemon.pid(),
        before,
        Duration::from_secs(8),
        "supex-bridge: 32 unread 24 MiB REPL replies",
    );
    assert!(grown < 250, "grew by {grown} MiB");
}

#[test]
fn long_lines_printed_outside_evaluations_are_kept_within_a_byte_bound_and_read_within_the_message_limit() {
    // A message limit under what the console keeps (4 MiB), so a reply of it all would not fit.
    let Some(bridge) = Bridge::start_with(&[("SUPEX_MAX_MESSAGE", "2097152")]) else {
        return;
    };
    let mut client = bridge.client();
    let before = rss_bytes(bridge.daemon.pid());
    // 3000 lines of 64 KiB (the longest the console keeps whole): 190 MiB,
    // printed by a thread once the evaluation that started it is over.
    eval(
        &mut client,
        r#"Thread.new { sleep 0.2; 3000.times { |i| STDOUT.puts format("%05d", i) + "c" * 65_000 } }; 1"#,
    );
    let mut newest = String::new();
    let printed = integration_tests::eventually(Duration::from_secs(60), || {
        newest = ok(&mut client, "console_log", json!({"lines": 1}))["lines"][0].as_str().unwrap_or("")[..5].to_owned();
        newest == "02999"
    });
    assert!(printed, "the console's newest line is {newest}");
    let grown = rss_growth_mib(bridge.daemon.pid(), before, Duration::from_secs(1), "supex-bridge: 190 MiB printed");
    // Unbounded, the console keeps all 190 MiB. It keeps 4 MiB.
    assert!(grown < 60, "grew by {grown} MiB");
    let line = {
        client.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                            "params": {"name": "console_log", "arguments": {"lines": 10000}}}));
        client.recv_line().unwrap()
    };
    // The lines take at most half of SUPEX_MAX_MESSAGE.
    assert!(line.len() < MIB as usize + 4096, "a console_log reply of {} bytes", line.len());
    let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
    let log = &reply["result"];
    let lines = log["lines"].as_array().unwrap();
    assert!(!lines.is_empty() && lines.last().unwrap().as_str().unwrap().starts_with("02999"), "{}", lines.len());
    assert_eq!(log["truncated"], true);
    assert!(log["left_out"].as_u64().unwrap() > 0, "{}", log["left_out"]);
}
