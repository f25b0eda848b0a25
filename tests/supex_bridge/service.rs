//! Running under systemd: READY=1 once listening, and a socket systemd passes
//! is the one served. (Unit files, env file and plist: tests/operations.)

use std::process::{Command, Stdio};
use std::time::Duration;

use integration_tests::{Daemon, LineClient, NotifySocket, bin_path, eventually, free_port, require_tool};
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
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("bridge.log");
    let port = free_port();
    let mut activator = Command::new("systemd-socket-activate")
        .args(["-l", &format!("127.0.0.1:{port}"), "--fdname=bridge"])
        .args(["-E", "RUST_LOG=info", "-E", "SUPEX_REPL_DISABLED=1", "-E", "SUPEX_PORT=1"])
        .arg(bin_path(BIN))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(eventually(Duration::from_secs(10), || log().contains("Listening on")), "{}", log());
    let mut client = LineClient::connect(format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(client.call(1, "ping", json!({}))["result"]["status"], "ok");
    assert!(log().contains("using socket passed by systemd"), "{}", log());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(activator.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    assert_eq!(activator.wait().unwrap().code(), Some(0), "{}", log());
}
