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
