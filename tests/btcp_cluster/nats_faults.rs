//! NATS itself failing or spread over servers: a restart under load keeps
//! local calls working and fails cross-node calls fast until it is back;
//! brokers on two NATS servers joined by routes reach each other.

use std::time::{Duration, Instant};

use integration_tests::NatsServer;
use serde_json::{Value, json};

use crate::cluster::{SETTLE, brokers, nats_available, wait_owned};
use crate::support::{Ws, scripted_browser};

/// A cross-node call that fails does so at once, not after its timeout.
const FAST: Duration = Duration::from_secs(2);

async fn echo(agent: &mut Ws, id: u64) -> (Value, Duration) {
    let started = Instant::now();
    let answer = agent.call(id, "tools/call", json!({"name": "echo", "arguments": {"n": id}, "timeout": 10000})).await;
    (answer, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_under_load_spares_local_calls_and_fails_remote_ones_fast() {
    if !nats_available() {
        return;
    }
    let mut nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 2, &[("BTCP_RATE_LIMIT", "0")]);
    let _browser = scripted_browser(nodes[0].browser("steady").await).await;
    wait_owned(&nodes[1], "steady", "node1");
    let mut local = nodes[0].agent("steady").await;
    let mut remote = nodes[1].agent("steady").await;
    assert!(echo(&mut remote, 0).await.0.get("result").is_some());

    // Local calls run all along, in the background.
    let stop = tokio_util_stop();
    let local_load = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let (answer, _) = echo(&mut local, n).await;
                assert!(answer.get("result").is_some(), "a local call failed: {answer}");
            }
            n
        })
    };

    nats.kill();
    let mut failed_fast = false;
    for id in 1..50 {
        let (answer, took) = echo(&mut remote, id).await;
        if answer["error"]["code"] == -32002 {
            assert_eq!(answer["error"]["message"], "cluster unavailable", "{answer}");
            assert!(took < FAST, "failed after {took:?}");
            failed_fast = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(failed_fast, "cross-node calls fail while NATS is down");
    let (answer, took) = echo(&mut remote, 60).await;
    assert_eq!(answer["error"]["message"], "cluster unavailable", "{answer}");
    assert!(took < FAST, "failed after {took:?}");

    nats.restart();
    let deadline = Instant::now() + SETTLE;
    let mut back = false;
    let mut id = 100;
    while Instant::now() < deadline {
        id += 1;
        if echo(&mut remote, id).await.0.get("result").is_some() {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "cross-node calls work again once NATS is back");
    wait_owned(&nodes[1], "steady", "node1");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let local_calls = local_load.await.unwrap();
    assert!(local_calls > 10, "local calls ran meanwhile ({local_calls})");
}

fn tokio_util_stop() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_on_two_routed_nats_servers_call_across_both() {
    if !nats_available() {
        return;
    }
    let servers = NatsServer::start_cluster(2);
    let urls: Vec<String> = servers.iter().map(NatsServer::url).collect();
    // node1 on the first server, node2 on the second.
    let nodes = brokers(&urls, 2, &[]);
    let _browser = scripted_browser(nodes[0].browser("routed").await).await;
    wait_owned(&nodes[1], "routed", "node1");
    let mut agent = nodes[1].agent("routed").await;
    let (answer, _) = echo(&mut agent, 1).await;
    assert_eq!(answer["result"]["content"][0]["text"], r#"{"n":1}"#, "{answer}");
    let _other = scripted_browser(nodes[1].browser("routed-back").await).await;
    wait_owned(&nodes[0], "routed-back", "node2");
    let mut agent = nodes[0].agent("routed-back").await;
    assert!(echo(&mut agent, 2).await.0.get("result").is_some());
}
