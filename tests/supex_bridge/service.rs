//! Running under systemd: READY=1 once listening, and a socket systemd passes
//! is the one served. (Unit files, env file and plist: tests/operations.)

use std::time::Duration;

use integration_tests::{Daemon, LineClient, NotifySocket, SocketActivated, eventually, on_free_ports, require_tool};
use serde_json::json;

use crate::support::BIN;

#[test]
fn ready_is_notified_once_listening() {
    if !require_tool("ruby") {
        return;
    }
    let project = tempfile::tempdir().unwrap();
    let notify = NotifySocket::new();
    let (_daemon, port) = on_free_ports(|[port]| {
        let env = [
            ("SUPEX_PORT", port.to_string()),
            ("SUPEX_REPL_DISABLED", "1".into()),
            ("NOTIFY_SOCKET", notify.path().display().to_string()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut daemon = Daemon::start_in(BIN, &[], &env, Some(project.path()));
        notify.ready_from(&mut daemon).map(|()| (daemon, port))
    });
    // Listening by then.
    let mut client = LineClient::connect(format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(client.call(1, "ping", json!({}))["result"]["status"], "ok");
}

/// The harness's wait for READY=1 tells a bridge that lost its port to
/// another process (to be started again on another) from one that failed.
#[test]
fn a_bridge_whose_port_is_taken_before_ready_is_told_apart() {
    if !require_tool("ruby") {
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let notify = NotifySocket::new();
    let env = [
        ("SUPEX_PORT", port.as_str()),
        ("SUPEX_REPL_DISABLED", "1"),
        ("NOTIFY_SOCKET", notify.path().to_str().unwrap()),
    ];
    let project = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start_in(BIN, &[], &env, Some(project.path()));
    assert!(notify.ready_from(&mut daemon).is_err(), "{}", daemon.stderr());
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
