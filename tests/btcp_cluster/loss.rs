//! A node killed mid-call: the agents on the other nodes hear -32002 within
//! a second, the browser's reconnection to another node makes that node the
//! owner, calls work again, and the directory forgets the dead node.

use std::time::{Duration, Instant};

use integration_tests::{NatsServer, eventually};
use nix::sys::signal::Signal;
use serde_json::json;

use crate::cluster::{SETTLE, brokers, nats_available, sessions, wait_owned};
use crate::support::scripted_browser;

/// The contract: calls in flight to a lost node's sessions fail this soon.
const LOSS_BOUND: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_browsers_node_fails_calls_within_a_second_and_the_browser_moves() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 3, &[]);
    let _browser = scripted_browser(nodes[0].browser("moving").await).await;
    wait_owned(&nodes[1], "moving", "node1");
    let mut agent2 = nodes[1].agent("moving").await;
    let mut agent3 = nodes[2].agent("moving").await;
    // Both calls reach the browser (an echo first proves the route is up).
    for agent in [&mut agent2, &mut agent3] {
        let answer = agent.call("warm", "tools/call", json!({"name": "echo"})).await;
        assert!(answer.get("result").is_some(), "{answer}");
        agent
            .send(&json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                "params": {"name": "slow", "arguments": {"ms": 60000}, "timeout": 60000}}))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let killed = Instant::now();
    nodes[0].daemon.signal(Signal::SIGKILL);
    for agent in [&mut agent2, &mut agent3] {
        let answer = agent.response(&json!("slow")).await;
        let after = killed.elapsed();
        assert_eq!(answer["error"]["code"], -32002, "{answer}");
        assert_eq!(answer["error"]["message"], "browser's node lost", "{answer}");
        assert!(after < LOSS_BOUND, "answered {after:?} after the kill");
        eprintln!("node loss: in-flight call failed {} ms after SIGKILL", after.as_millis());
        agent.notification("session/browserDisconnected").await;
    }

    // The browser's retry lands on node 2, which becomes the owner.
    let _browser = scripted_browser(nodes[1].browser("moving").await).await;
    agent3.notification("session/browserConnected").await;
    let answer = agent3.call("again", "tools/call", json!({"name": "echo", "arguments": {"n": 3}})).await;
    assert_eq!(answer["result"]["content"][0]["text"], r#"{"n":3}"#, "{answer}");
    let answer = agent2.call("local", "tools/call", json!({"name": "echo"})).await;
    assert!(answer.get("result").is_some(), "{answer}");

    // No directory lists the dead node's sessions 2 s after the kill.
    let wait = Duration::from_secs(2).saturating_sub(killed.elapsed());
    tokio::time::sleep(wait).await;
    for node in &nodes[1..] {
        let rows = sessions(node);
        assert!(rows.iter().all(|r| r["node"] != "node1"), "{rows:?}");
        assert!(rows.iter().any(|r| r["id"] == "moving" && r["node"] == "node2"), "{rows:?}");
    }
    let nodes_seen = eventually(SETTLE, || crate::cluster::health(&nodes[2])["nodes"] == json!(["node2", "node3"]));
    assert!(nodes_seen, "{}", crate::cluster::health(&nodes[2]));
}
