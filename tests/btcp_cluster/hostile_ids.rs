//! Session ids are user input: `a.>`, `*`, spaces, non-ASCII and the longest
//! ids each stay in their own session across nodes, and none widens
//! another's; a 4 KiB id is refused before it reaches NATS.

use futures_util::{SinkExt, StreamExt};
use integration_tests::NatsServer;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::cluster::{brokers, nats_available, wait_owned};
use crate::support::{Broker, Ws, tool};

fn encoded(id: &str) -> String {
    id.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// A browser of session `id` on `broker` with one tool, `t<n>`, that
/// answers every call with `n`; returns once its tools are registered.
async fn browser(broker: &Broker, id: &str, n: usize) {
    let url = broker.url(&format!("/ws?clientType=browser&sessionId={}", encoded(id)));
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let register = json!({"jsonrpc": "2.0", "id": "reg", "method": "tools/register",
        "params": {"tools": [tool(&format!("t{n}"))]}});
    ws.send(Message::text(register.to_string())).await.unwrap();
    let (registered_tx, registered) = tokio::sync::oneshot::channel();
    let mut registered_tx = Some(registered_tx);
    let id = id.to_owned();
    tokio::spawn(async move {
        while let Some(Ok(Message::Text(text))) = ws.next().await {
            let message: Value = serde_json::from_str(&text).unwrap();
            if message["method"] == "welcome" {
                assert_eq!(message["params"]["sessionId"], id.as_str());
            } else if message["id"] == "reg" {
                registered_tx.take().map(|tx| tx.send(()));
            } else if message["method"] == "tools/call" {
                let answer = json!({"jsonrpc": "2.0", "id": message["id"],
                    "result": {"content": [{"type": "text", "text": n.to_string()}]}});
                ws.send(Message::text(answer.to_string())).await.unwrap();
            }
        }
    });
    registered.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_session_ids_stay_in_their_session() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 2, &[]);
    // A 4 KiB id is refused at the door, on every node, before any subject.
    let huge = "H".repeat(4096);
    for node in &nodes {
        let path = format!("/ws?clientType=browser&sessionId={huge}");
        let refused =
            crate::support::http(node.port, "GET", &path, &[("Connection", "Upgrade"), ("Upgrade", "websocket")], b"");
        assert_eq!(refused.status, 400, "{}", refused.body);
    }
    // The longest id the broker takes (256 bytes): named by its hash.
    let long = "L".repeat(256);
    let ids = ["a.>", "a.b", "*", ">", "a b", "élan ✓ 日本", long.as_str(), "a"];
    for (n, id) in ids.iter().enumerate() {
        browser(&nodes[0], id, n).await;
    }
    for id in ids {
        wait_owned(&nodes[1], id, "node1");
    }
    for (n, id) in ids.iter().enumerate() {
        let url = nodes[1].url(&format!("/ws?clientType=agent&sessionId={}", encoded(id)));
        let mut agent = Ws::connect(&url).await;
        let listed = agent.call(1, "tools/list", json!({})).await;
        assert_eq!(listed["result"]["tools"], json!([tool(&format!("t{n}"))]), "{id:?}: {listed}");
        let answer = agent.call(2, "tools/call", json!({"name": format!("t{n}")})).await;
        assert_eq!(answer["result"]["content"][0]["text"], n.to_string(), "{id:?}: {answer}");
        let stray: Value = agent.call(3, "tools/call", json!({"name": "t0"})).await;
        if n != 0 {
            assert_eq!(stray["error"]["code"], -32004, "{id:?} reaches no other session's tool: {stray}");
        }
    }
}
