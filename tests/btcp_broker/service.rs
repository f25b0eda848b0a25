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
