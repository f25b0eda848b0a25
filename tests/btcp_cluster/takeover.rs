//! A browser connecting on another node takes its session over: the old one
//! is replaced (4001), its in-flight calls fail, agents everywhere follow.
//! Browsers racing on two nodes: exactly one wins, every time.

use std::time::Duration;

use integration_tests::NatsServer;
use serde_json::json;

use crate::cluster::{brokers, nats_available, wait_owned};
use crate::support::scripted_browser;

fn replaced(v: &serde_json::Value) -> bool {
    v["method"] == "session/replaced"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_on_another_node_replaces_the_old_one_and_agents_follow() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 3, &[]);
    let mut old = nodes[0].browser("moved").await;
    old.register(&["silent"]).await;
    wait_owned(&nodes[2], "moved", "node1");
    let mut agent = nodes[2].agent("moved").await;
    let mut local = nodes[0].agent("moved").await;
    agent.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "silent"}})).await;
    old.request().await;

    let new = nodes[1].browser("moved").await;
    old.notification("session/replaced").await;
    assert_eq!(old.closed().await, Some(4001));
    let failed = agent.response(&json!(1)).await;
    assert_eq!(failed["error"]["code"], -32002, "the old browser's calls fail: {failed}");

    let _new = scripted_browser(new).await;
    for agent in [&mut agent, &mut local] {
        agent.notification("session/browserConnected").await;
        let updated = agent.notification("tools/updated").await;
        assert_eq!(updated["params"]["tools"].as_array().unwrap().len(), 5, "{updated}");
    }
    wait_owned(&nodes[2], "moved", "node2");
    for (id, agent) in [(2, &mut agent), (3, &mut local)] {
        let answer = agent.call(id, "tools/call", json!({"name": "echo", "arguments": {"id": id}})).await;
        assert_eq!(answer["result"]["content"][0]["text"], json!({"id": id}).to_string(), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_racing_on_two_nodes_leave_exactly_one_owner() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 3, &[]);
    for round in 0..5 {
        let session = format!("race{round}");
        let (mut one, mut two) = tokio::join!(nodes[0].browser(&session), nodes[1].browser(&session));
        // The loser hears it well within this; the winner never does.
        let within = Duration::from_secs(3);
        let (lost_one, lost_two) =
            tokio::join!(one.receives_within(within, replaced), two.receives_within(within, replaced));
        assert!(lost_one ^ lost_two, "round {round}: exactly one is replaced ({lost_one}, {lost_two})");
        let (mut loser, winner, node) = if lost_one { (one, two, "node2") } else { (two, one, "node1") };
        assert_eq!(loser.closed().await, Some(4001));
        let _winner = scripted_browser(winner).await;
        wait_owned(&nodes[2], &session, node);
        let mut agent = nodes[2].agent(&session).await;
        let answer = agent.call(1, "tools/call", json!({"name": "echo"})).await;
        assert!(answer.get("result").is_some(), "round {round}: the winner answers: {answer}");
    }
}
