//! The cluster's settings at start, and what a client sees of the whole
//! cluster from any node: `/health`, `btcp-broker sessions`, `/mcp`.

use integration_tests::{HeldPort, NatsServer, run};
use serde_json::json;

use crate::cluster::{brokers, nats_available, wait_owned};
use crate::support::scripted_browser;

#[test]
fn a_cluster_name_nats_would_read_as_a_pattern_stops_the_broker_with_exit_2() {
    for name in ["a.b", "*", ">", "a b", ""] {
        let (status, _, stderr) =
            run("btcp-broker", &["serve"], &[("BTCP_CLUSTER", "nats://127.0.0.1:1"), ("BTCP_CLUSTER_NAME", name)]);
        assert_eq!(status.code(), Some(2), "{name:?}: {stderr}");
        assert!(stderr.contains("BTCP_CLUSTER_NAME"), "{stderr}");
    }
}

#[test]
fn unreachable_nats_stops_the_broker_with_exit_1_naming_btcp_cluster() {
    // Held, so that nothing can be listening there.
    let no_nats = HeldPort::new();
    let nats = format!("nats://127.0.0.1:{}", no_nats.port());
    // Held too: the cluster is joined before the port is bound, so a broker
    // that cannot join never gets as far as finding its port taken.
    let own = HeldPort::new();
    let port = own.port().to_string();
    let (status, _, stderr) =
        run("btcp-broker", &["serve"], &[("BTCP_PORT", port.as_str()), ("BTCP_CLUSTER", nats.as_str())]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("BTCP_CLUSTER"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_the_sessions_command_show_the_whole_cluster_from_any_node() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 3, &[]);
    let _browser = scripted_browser(nodes[0].browser("seen").await).await;
    wait_owned(&nodes[2], "seen", "node1");
    let health = nodes[2].get("/health").json();
    assert_eq!(health["node"], "node3", "{health}");
    assert_eq!(health["nodes"], json!(["node1", "node2", "node3"]), "{health}");
    assert_eq!(health["browsers"], 1, "{health}");
    assert_eq!(health["local"]["browsers"], 0, "{health}");

    let port = nodes[2].port.to_string();
    let (status, stdout, stderr) = run("btcp-broker", &["--port", &port, "sessions", "--json"], &[]);
    assert!(status.success(), "{stderr}");
    let rows: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(rows.as_array().unwrap().iter().any(|r| r["id"] == "seen" && r["node"] == "node1"), "{rows}");
    let (status, stdout, stderr) = run("btcp-broker", &["--port", &port, "call", "seen", "echo", "--arg", "k=v"], &[]);
    assert!(status.success(), "{stderr}");
    assert_eq!(stdout.trim(), r#"{"k":"v"}"#);
}
