//! SIGTERM with evaluations in flight: the running
//! one gets the grace period, the ones waiting for their turn are answered
//! `shutting_down` at once, and nothing goes unanswered before the exit.

use std::time::{Duration, Instant};

use integration_tests::eventually;
use nix::sys::signal::Signal;
use serde_json::json;

use crate::support::{Bridge, alive, error, runtime_pid, start_eval};

fn eval_request(id: u64, code: &str) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "eval_ruby", "arguments": {"code": code}}})
}

#[test]
fn sigterm_lets_the_running_eval_finish_and_refuses_the_queued_one_at_once() {
    let Some(mut bridge) = Bridge::start() else {
        return;
    };
    let mut running = bridge.client();
    start_eval(&bridge, &mut running, "sleep 1.5; 6 * 7");
    let mut queued = bridge.client();
    queued.send(&eval_request(6, "1 + 1"));
    // Give the queued eval time to reach the runtime's queue: a queued
    // evaluation shows nowhere from outside, so there is no state to wait on.
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    bridge.daemon.signal(Signal::SIGTERM);
    let refused = queued.recv();
    assert!(signalled.elapsed() < Duration::from_millis(700), "the queued eval waited: {:?}", signalled.elapsed());
    assert_eq!(refused["id"], 6);
    assert_eq!(error(&refused)["data"]["reason"], "shutting_down", "{refused}");
    let answered = running.recv();
    assert_eq!(answered["id"], 5);
    assert_eq!(answered["result"]["result"], "42", "{answered}");
    let status = bridge.daemon.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{}", bridge.daemon.stderr());
}

#[test]
fn an_eval_that_outlives_the_grace_is_answered_shutting_down_before_the_exit() {
    let Some(mut bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let ruby = runtime_pid(&mut client);
    start_eval(&bridge, &mut client, "sleep 60");
    let signalled = Instant::now();
    bridge.daemon.signal(Signal::SIGTERM);
    let reply = client.recv();
    let waited = signalled.elapsed();
    assert_eq!(reply["id"], 5);
    assert_eq!(error(&reply)["data"]["reason"], "shutting_down", "{reply}");
    assert!(waited >= Duration::from_secs(4), "answered before the 5 s grace was over: {waited:?}");
    assert!(client.is_closed_within(Duration::from_secs(5)), "the connection stays open after the answer");
    let status = bridge.daemon.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{}", bridge.daemon.stderr());
    assert!(eventually(Duration::from_secs(5), || !alive(ruby)), "ruby {ruby} outlived the daemon");
}
