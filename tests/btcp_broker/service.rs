//! Running under systemd: socket activation hands the broker its socket and
//! READY=1 is sent. (Unit files, env file and plist: tests/operations.)

use std::time::Duration;

use integration_tests::{NotifySocket, SocketActivated, eventually, require_tool};

use crate::support::Ws;

#[tokio::test]
async fn socket_activation_hands_over_the_socket_and_ready_is_notified() {
    if !require_tool("systemd-socket-activate") {
        return;
    }
    let notify = NotifySocket::new();
    let notify_path = notify.path().display().to_string();
    let broker = SocketActivated::start("btcp-broker", None, &[("NOTIFY_SOCKET", &notify_path)]);
    let port = broker.port;
    // The first connection starts the broker on the socket systemd holds.
    let mut agent = Ws::connect(&format!("ws://127.0.0.1:{port}/ws?clientType=agent")).await;
    let reply = agent.call(1, "ping", serde_json::json!({})).await;
    assert_eq!(reply["result"]["pong"], true);
    // The log is written by its own thread: the line may follow the answer.
    let handed_over = eventually(Duration::from_secs(5), || broker.log().contains("using socket passed by systemd"));
    assert!(handed_over, "{}", broker.log());
    notify.expect_ready();
    let log = broker.log();
    assert_eq!(broker.terminate().code(), Some(0), "{log}");
}

/// The harness's socket activation on a port another process has: refused
/// there (told apart from the launcher's other failures by what it prints),
/// and started again on another port, as every daemon the tests start is.
#[test]
fn socket_activation_on_a_taken_port_is_started_again_on_another() {
    if !require_tool("systemd-socket-activate") {
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    assert!(SocketActivated::try_start("btcp-broker", &[], &[port], None, &[]).is_err(), "port {port} is taken");
    // Taken as the second of two: the first's "Listening on" is not enough.
    let free = integration_tests::HeldPort::new().release();
    let second = SocketActivated::try_start("btcp-broker", &[], &[free, port], None, &[]);
    assert!(second.is_err(), "port {port} is taken");
    let activated = SocketActivated::start("btcp-broker", None, &[]);
    assert_ne!(activated.port, port);
    assert!(activated.log().contains("Listening on"), "{}", activated.log());
}
