//! SIGTERM with work in flight: a forwarded call
//! gets the grace period, what outlives it is answered `shutting_down`, and
//! nothing an agent sent goes unanswered before its connection closes.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use crate::support::{Broker, WAIT, Ws};

#[tokio::test]
async fn a_forwarded_call_in_flight_at_sigterm_gets_the_grace_period() {
    let mut broker = Broker::start(&[("BTCP_SHUTDOWN_GRACE", "5")]);
    let mut browser = broker.browser("grace").await;
    browser.register(&["slow"]).await;
    let mut agent = broker.agent("grace").await;
    agent.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow"}})).await;
    let forwarded = browser.request().await;
    let signalled = Instant::now();
    broker.daemon.signal(Signal::SIGTERM);
    // The browser takes its time: well within the grace, after the broker
    // has begun to drain.
    until_draining(&mut agent).await;
    // A new call after the signal is refused, not forwarded.
    let refused = agent.call(2, "tools/call", json!({"name": "slow"})).await;
    assert_eq!(refused["error"]["data"]["reason"], "shutting_down", "{refused}");
    browser
        .send(&json!({"jsonrpc": "2.0", "id": forwarded["id"],
            "result": {"content": [{"type": "text", "text": "done"}], "isError": false}}))
        .await;
    let answer = agent.response(&json!(1)).await;
    assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
    assert_eq!(agent.closed().await, Some(1001));
    let status = broker.daemon.wait_exit(WAIT);
    assert_eq!(status.code(), Some(0));
    assert!(signalled.elapsed() < Duration::from_secs(5), "exited as soon as nothing was owed");
}

/// Pings until the broker answers `shutting_down`: it has seen the signal
/// and drains. (A ping's answer comes from the broker itself, at once.)
async fn until_draining(agent: &mut Ws) {
    let deadline = Instant::now() + WAIT;
    for id in 100.. {
        let reply = agent.call(id, "ping", json!({})).await;
        if reply["error"]["data"]["reason"] == "shutting_down" {
            return;
        }
        assert!(Instant::now() < deadline, "the broker does not drain: {reply}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_forwarded_call_that_outlives_the_grace_is_answered_shutting_down() {
    let mut broker = Broker::start(&[("BTCP_SHUTDOWN_GRACE", "1")]);
    let mut browser = broker.browser("late").await;
    browser.register(&["never"]).await;
    let mut agent = broker.agent("late").await;
    agent.send(&json!({"jsonrpc": "2.0", "id": "x", "method": "tools/call", "params": {"name": "never"}})).await;
    let _forwarded = browser.request().await;
    let signalled = Instant::now();
    broker.daemon.signal(Signal::SIGTERM);
    let answer = agent.response(&json!("x")).await;
    let waited = signalled.elapsed();
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "shutting_down", "{answer}");
    assert!(waited >= Duration::from_millis(900), "answered before the grace was over: {waited:?}");
    assert!(waited < Duration::from_secs(4), "answered long after the grace: {waited:?}");
    let status = broker.daemon.wait_exit(WAIT);
    assert_eq!(status.code(), Some(0));
}
