//! Running under systemd: READY=1 once listening, and a socket systemd passes
//! is the one served. (Unit files, env file and plist: tests/operations.)

use std::time::Duration;

use integration_tests::{Daemon, LineClient, NotifySocket, SocketActivated, eventually, free_port, require_tool};
use serde_json::json;

use crate::support::BIN;

#[test]
fn ready_is_notified_once_listening() {
    if !require_tool("ruby") {
        return;
    }
    let project = tempfile::tempdir().unwrap();
    let notify = NotifySocket::new();
    let port = free_port();
    let _daemon = Daemon::start_in(
        BIN,
        &[],
        &[
            ("SUPEX_PORT", &port.to_string()),
            ("SUPEX_REPL_DISABLED", "1"),
            ("NOTIFY_SOCKET", notify.path().to_str().unwrap()),
        ],
        Some(project.path()),
    );
    notify.expect_ready();
    // Listening by then.
    let mut client = LineClient::connect(format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(client.call(1, "ping", json!({}))["result"]["status"], "ok");
}

#[test]
fn a_socket_passed_by_systemd_is_used() {
    if !require_tool("systemd-socket-activate") || !require_tool("ruby") {
        return;
    }
    let env = [("SUPEX_REPL_DISABLED", "1"), ("SUPEX_PORT", "1")];
    let bridge = SocketActivated::start(BIN, Some("bridge"), &env);
    let port = bridge.port;
    let mut client = LineClient::connect(format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(client.call(1, "ping", json!({}))["result"]["status"], "ok");
    // The log is written by its own thread: the line may follow the answer.
    let handed_over = eventually(Duration::from_secs(5), || bridge.log().contains("using socket passed by systemd"));
    assert!(handed_over, "{}", bridge.log());
    let log = bridge.log();
    assert_eq!(bridge.terminate().code(), Some(0), "{log}");
}
