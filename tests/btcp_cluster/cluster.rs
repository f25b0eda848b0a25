//! A cluster of brokers on one NATS, for the tests.

use std::time::Duration;

use integration_tests::{NatsServer, eventually, require_tool};
use serde_json::Value;

use crate::support::Broker;

/// Generous bound for states the cluster reaches by itself.
pub const SETTLE: Duration = Duration::from_secs(15);

/// Whether `nats-server` can run here (a skip line if not; CI=true fails).
pub fn nats_available() -> bool {
    require_tool(&NatsServer::binary())
}

/// `count` brokers on the NATS servers `urls` (round robin), named
/// node1, node2..., their cluster joined (every node sees every other).
pub fn brokers(urls: &[String], count: usize, env: &[(&str, &str)]) -> Vec<Broker> {
    let brokers: Vec<Broker> = (0..count).map(|i| node(&urls[i % urls.len()], i + 1, env)).collect();
    wait_for_nodes(&brokers, count);
    brokers
}

/// Broker `node<n>` on NATS `url`.
pub fn node(url: &str, n: usize, env: &[(&str, &str)]) -> Broker {
    let id = format!("node{n}");
    let mut all = vec![("BTCP_CLUSTER", url), ("BTCP_NODE_ID", id.as_str()), ("BTCP_CLUSTER_NAME", "t")];
    all.extend_from_slice(env);
    Broker::start(&all)
}

pub fn health(broker: &Broker) -> Value {
    broker.get("/health").json()
}

pub fn wait_for_nodes(brokers: &[Broker], count: usize) {
    for broker in brokers {
        let joined = eventually(SETTLE, || health(broker)["nodes"].as_array().is_some_and(|n| n.len() == count));
        assert!(joined, "{} nodes never seen: {}", count, health(broker));
    }
}

/// The rows of `GET /sessions` on `broker`.
pub fn sessions(broker: &Broker) -> Vec<Value> {
    broker.get("/sessions").json().as_array().cloned().unwrap_or_default()
}

/// Waits until `broker`'s directory lists `session` with a browser owned by `node`.
pub fn wait_owned(broker: &Broker, session: &str, node: &str) {
    let owned = eventually(SETTLE, || {
        sessions(broker).iter().any(|r| r["id"] == session && r["node"] == node && r["hasBrowser"] == true)
    });
    assert!(owned, "{session} never owned by {node}: {:?}", sessions(broker));
}
