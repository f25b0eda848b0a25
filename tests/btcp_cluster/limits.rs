//! A session's agent limit holds across the cluster; the others are each
//! node's own.

use integration_tests::NatsServer;
use serde_json::json;

use crate::cluster::{brokers, nats_available, wait_owned};
use crate::support::{Ws, scripted_browser};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_per_session_limit_counts_every_node() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 3, &[("BTCP_MAX_AGENTS_PER_SESSION", "3")]);
    let _browser = scripted_browser(nodes[0].browser("full").await).await;
    wait_owned(&nodes[1], "full", "node1");
    let join = json!({"sessionId": "full"});
    let mut agents = Vec::new();
    for node in [&nodes[0], &nodes[1], &nodes[2]] {
        let mut agent = Ws::connect(&node.url("/ws?clientType=agent")).await;
        let joined = agent.call(1, "session/join", join.clone()).await;
        assert!(joined.get("result").is_some(), "{joined}");
        agents.push(agent);
    }
    // A fourth agent, on any node, is one too many.
    let mut fourth = Ws::connect(&nodes[1].url("/ws?clientType=agent")).await;
    let refused = fourth.call(1, "session/join", join.clone()).await;
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    assert_eq!(refused["error"]["data"]["maxAgents"], 3, "{refused}");

    // One leaves (on another node): there is room again.
    agents.pop().unwrap().close().await;
    let mut admitted = false;
    for id in 2..200 {
        let answer = fourth.call(id, "session/join", join.clone()).await;
        if answer.get("result").is_some() {
            admitted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(admitted, "a place freed on one node is free for the whole cluster");
}
