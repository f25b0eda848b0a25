//! What clients send reaches the text log escaped: one event, one line.

use std::time::Duration;

use crate::support::{Broker, Ws};

#[tokio::test]
async fn a_version_with_a_newline_and_an_escape_sequence_is_logged_escaped_on_one_line() {
    let broker = Broker::start(&[("LOG_FORMAT", "text")]);
    let version = "1.0%0A2026-01-01T00:00:00Z%20INFO%20FORGED-LINE%1B%5B31mRED";
    let agent = Ws::connect(&broker.url(&format!("/ws?clientType=agent&version={version}"))).await;
    assert!(broker.daemon.wait_for_log("FORGED-LINE", Duration::from_secs(5)), "{}", broker.daemon.stderr());
    agent.close().await;
    let log = broker.daemon.stderr();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("FORGED-LINE")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("peer connected"), "the forged text stays inside its event's line: {log}");
    assert!(lines[0].contains(r"1.0\u{a}2026-01-01T00:00:00Z INFO FORGED-LINE\u{1b}[31mRED"), "{log}");
    assert!(!log.contains('\u{1b}'), "no escape character reaches the log: {log:?}");
}

/// The engine's own debug lines carry peers' text too: an unknown
/// notification's method name is logged escaped, on its event's line.
#[tokio::test]
async fn a_method_name_with_a_newline_is_logged_escaped_by_the_engine() {
    let broker = Broker::start(&[("LOG_FORMAT", "text"), ("RUST_LOG", "debug")]);
    let mut agent = Ws::connect(&broker.url("/ws?clientType=agent")).await;
    let method = "nope\n2026-01-01T00:00:00Z  INFO FORGED-METHOD\u{1b}[31mRED";
    agent.send(&serde_json::json!({"jsonrpc": "2.0", "method": method})).await;
    assert!(broker.daemon.wait_for_log("FORGED-METHOD", Duration::from_secs(5)), "{}", broker.daemon.stderr());
    agent.close().await;
    let log = broker.daemon.stderr();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("FORGED-METHOD")).collect();
    assert!(!lines.is_empty() && lines.iter().all(|l| l.contains(r"nope\u{a}2026")), "{log}");
    assert!(!log.contains('\u{1b}'), "no escape character reaches the log: {log:?}");
}
