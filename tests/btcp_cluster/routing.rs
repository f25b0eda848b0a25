//! Calls from agents on one node to a browser on another: list, call,
//! list_changed, cancel, timeouts, -32004, rate limit, SSE agents, and many
//! calls at once, each answer to the agent that asked.

use std::time::Duration;

use integration_tests::NatsServer;
use serde_json::{Value, json};

use crate::cluster::{brokers, nats_available, wait_owned};
use crate::support::{Ws, scripted_browser};

fn text_of(response: &Value) -> &str {
    response["result"]["content"][0]["text"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_two_nodes_use_a_browser_on_a_third() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 3, &[("BTCP_RATE_LIMIT", "1"), ("BTCP_RATE_BURST", "20")]);
    let browser = nodes[0].browser("s1").await;
    let _browser = scripted_browser(browser).await;
    wait_owned(&nodes[1], "s1", "node1");

    let mut agent2 = nodes[1].agent("s1").await;
    let mut agent3 = nodes[2].agent("s1").await;
    assert!(agent2.welcome["availableSessions"].as_array().unwrap().contains(&json!("s1")), "{}", agent2.welcome);
    let listed = agent2.call(1, "tools/list", json!({})).await;
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "slow", "fail", "bad", "silent"], "{listed}");

    let answer = agent2.call(2, "tools/call", json!({"name": "echo", "arguments": {"from": 2}})).await;
    assert_eq!(text_of(&answer), r#"{"from":2}"#, "{answer}");
    let answer = agent3.call("x", "tools/call", json!({"name": "fail", "arguments": {}})).await;
    assert_eq!(answer["result"]["isError"], true, "a tool's failure passes as it is: {answer}");
    let answer = agent3.call(3, "tools/call", json!({"name": "nope"})).await;
    assert_eq!(answer["error"]["code"], -32004, "{answer}");
    let answer = agent3.call(4, "tools/call", json!({"name": "silent", "timeout": 300})).await;
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    let answer = agent3.call(5, "tools/call", json!({"name": "bad"})).await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");

    // Cancel: the browser's node hears it and tells its browser.
    agent2.send(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "silent"}})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    agent2.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 6}})).await;
    let cancelled = agent2.response(&json!(6)).await;
    assert_eq!(cancelled["error"]["code"], -32800, "{cancelled}");

    // The rate limit is the agent's node's.
    let mut limited = false;
    for i in 0..40 {
        let answer = agent3.call(100 + i, "tools/call", json!({"name": "echo"})).await;
        if answer["error"]["code"] == -32005 {
            limited = true;
            break;
        }
    }
    assert!(limited, "the rate limit applies on the agent's node");
}

/// The owner tells its browser which of its calls an agent on another node
/// cancelled, and, for a second call, which one an agent that left gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_browser_hears_which_call_a_remote_agent_gave_up() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 2, &[]);
    let mut browser = nodes[0].browser("s-cancel").await;
    browser.register(&["silent"]).await;
    wait_owned(&nodes[1], "s-cancel", "node1");

    let mut agent = nodes[1].agent("s-cancel").await;
    agent.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "silent"}})).await;
    let forwarded = browser.request().await;
    assert_eq!(forwarded["params"]["name"], "silent", "{forwarded}");
    agent.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})).await;
    assert_eq!(agent.response(&json!(1)).await["error"]["code"], -32800);
    let cancelled = browser.notification("notifications/cancelled").await;
    assert_eq!(cancelled["params"]["requestId"], forwarded["id"], "{cancelled} for {forwarded}");

    agent.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "silent"}})).await;
    let forwarded = browser.request().await;
    agent.close().await;
    let cancelled = browser.notification("notifications/cancelled").await;
    assert_eq!(cancelled["params"]["requestId"], forwarded["id"], "{cancelled} for {forwarded}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_tool_list_reaches_agents_on_other_nodes() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 3, &[]);
    let mut browser = nodes[0].browser("s2").await;
    browser.register(&["one"]).await;
    wait_owned(&nodes[2], "s2", "node1");
    let mut agent = nodes[2].agent("s2").await;
    let joined = agent.call(1, "session/join", json!({"sessionId": "s2"})).await;
    assert_eq!(joined["result"]["hasBrowser"], true, "{joined}");
    assert_eq!(joined["result"]["tools"][0]["name"], "one", "{joined}");

    browser.register(&["one", "two"]).await;
    // The owner announces its browser and tools once its claim is stored,
    // which this node can see first: that announcement (the list the agent
    // joined with) may reach the agent before the new list does.
    let updated = loop {
        let updated = agent.notification("tools/updated").await;
        if updated["params"]["tools"] != joined["result"]["tools"] {
            break updated;
        }
    };
    assert_eq!(updated["params"]["tools"].as_array().unwrap().len(), 2, "{updated}");
    agent.notification("notifications/tools/list_changed").await;
    let listed = agent.call(2, "tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 2, "the copy is current: {listed}");

    browser.close().await;
    agent.notification("session/browserDisconnected").await;
    let answer = agent.call(3, "tools/call", json!({"name": "one"})).await;
    assert_eq!(answer["error"]["code"], -32002, "no browser anywhere: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_agent_on_one_node_calls_a_websocket_browser_on_another() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 2, &[]);
    let _browser = scripted_browser(nodes[0].browser("sse1").await).await;
    wait_owned(&nodes[1], "sse1", "node1");
    let port = nodes[1].port;
    let answer =
        tokio::task::spawn_blocking(move || crate::support_sse::call_once(port, "sse1", "echo")).await.unwrap();
    assert_eq!(text_of(&answer), r#"{"via":"sse"}"#, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_calls_from_two_nodes_each_answer_their_agent() {
    if !nats_available() {
        return;
    }
    let nats = NatsServer::start();
    let nodes = brokers(&[nats.url()], 3, &[("BTCP_RATE_LIMIT", "0")]);
    let _browser = scripted_browser(nodes[0].browser("many").await).await;
    wait_owned(&nodes[1], "many", "node1");
    let mut tasks = Vec::new();
    for (n, node) in [&nodes[1], &nodes[2]].into_iter().enumerate() {
        for a in 0..5 {
            let url = node.url("/ws?clientType=agent&sessionId=many");
            tasks.push(tokio::spawn(async move {
                let mut agent = Ws::connect(&url).await;
                for i in 0..100 {
                    let tag = format!("{n}-{a}-{i}");
                    let id = json!(i);
                    agent
                        .send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"tag": tag}}}))
                        .await;
                }
                for i in 0..100 {
                    let answer = agent.response(&json!(i)).await;
                    let expected = json!({"tag": format!("{n}-{a}-{i}")}).to_string();
                    assert_eq!(text_of(&answer), expected, "{answer}");
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
}
