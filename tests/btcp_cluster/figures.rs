//! The cluster's figures, printed (not a pass/fail bound beyond the
//! contract's): node-loss detection over 20 kills, and what a cross-node
//! hop adds to a tools/call on loopback. Slow (a minute): run with
//! `cargo test -p integration-tests --test btcp_cluster -- --ignored --nocapture figures`.

use std::time::{Duration, Instant};

use integration_tests::NatsServer;
use nix::sys::signal::Signal;
use serde_json::json;

use crate::cluster::{brokers, nats_available, node, wait_for_nodes, wait_owned};
use crate::support::{Ws, scripted_browser};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures for the docs and the report; about a minute"]
async fn figures_node_loss_and_cross_node_latency() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let mut nodes = brokers(&[nats.url()], 2, &[("BTCP_RATE_LIMIT", "0")]);

    // Latency: the same echo from an agent on the browser's node and from one on the other.
    let _browser = scripted_browser(nodes[0].browser("lat").await).await;
    wait_owned(&nodes[1], "lat", "node1");
    for (label, node) in [("same node", 0), ("cross node", 1)] {
        let mut agent = nodes[node].agent("lat").await;
        let mut took = Vec::new();
        for i in 0..2000 {
            let started = Instant::now();
            let answer = agent.call(i, "tools/call", json!({"name": "echo"})).await;
            took.push(started.elapsed());
            assert!(answer.get("result").is_some(), "{answer}");
        }
        took.sort();
        eprintln!(
            "figures: tools/call {label}: p50 {:?}, p99 {:?} ({} calls, one at a time)",
            percentile(&took, 0.5),
            percentile(&took, 0.99),
            took.len()
        );
    }

    // Node loss: 20 kills of the browser's node with a call in flight from the other.
    let mut detected = Vec::new();
    for round in 0..20 {
        let session = format!("loss{round}");
        let _browser = scripted_browser(nodes[0].browser(&session).await).await;
        wait_owned(&nodes[1], &session, "node1");
        let mut agent: Ws = nodes[1].agent(&session).await;
        agent.call("warm", "tools/call", json!({"name": "echo"})).await;
        agent
            .send(&json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                "params": {"name": "slow", "arguments": {"ms": 60000}, "timeout": 60000}}))
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let killed = Instant::now();
        nodes[0].daemon.signal(Signal::SIGKILL);
        let answer = agent.response(&json!("slow")).await;
        detected.push(killed.elapsed());
        assert_eq!(answer["error"]["message"], "browser's node lost", "{answer}");
        let _ = nodes[0].daemon.wait_exit(Duration::from_secs(5));
        nodes[0] = node(&nats.url(), 1, &[("BTCP_RATE_LIMIT", "0")]);
        wait_for_nodes(&nodes, 2);
    }
    detected.sort();
    eprintln!(
        "figures: node loss over {} kills: p50 {:?}, p99 {:?}, max {:?}",
        detected.len(),
        percentile(&detected, 0.5),
        percentile(&detected, 0.99),
        detected.last().unwrap()
    );
    assert!(percentile(&detected, 0.99) < Duration::from_secs(1));
}
