//! Running under systemd: socket activation hands the broker its socket and
//! READY=1 is sent. (Unit files, env file and plist: tests/operations.)

use std::process::{Command, Stdio};
use std::time::Duration;

use integration_tests::{NotifySocket, bin_path, eventually, free_port, require_tool};

use crate::support::Ws;

#[tokio::test]
async fn socket_activation_hands_over_the_socket_and_ready_is_notified() {
    if !require_tool("systemd-socket-activate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let notify = NotifySocket::new();
    let log_path = dir.path().join("broker.log");
    let port = free_port();
    let mut activator = Command::new("systemd-socket-activate")
        .args(["-l", &format!("127.0.0.1:{port}")])
        .args(["-E", "RUST_LOG=info", "-E"])
        .arg(format!("NOTIFY_SOCKET={}", notify.path().display()))
        .arg(bin_path("btcp-broker"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(eventually(Duration::from_secs(10), || log().contains("Listening on")), "{}", log());
    // The first connection starts the broker on the socket systemd holds.
    let mut agent = Ws::connect(&format!("ws://127.0.0.1:{port}/ws?clientType=agent")).await;
    let reply = agent.call(1, "ping", serde_json::json!({})).await;
    assert_eq!(reply["result"]["pong"], true);
    assert!(log().contains("using socket passed by systemd"), "{}", log());
    notify.expect_ready();
    let pid = nix::unistd::Pid::from_raw(activator.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = activator.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", log());
}
