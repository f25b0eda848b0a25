//! However the loop ends (a signal, a second one, an agent that ignores
//! SIGTERM, the loop finishing by itself, a request over the socket), a
//! subscriber reads the last `state_change` before its connection closes,
//! and state.json says the same status.

use std::time::Duration;

use integration_tests::Daemon;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::support::{Client, Task, event_type, is_status};

/// A subscriber to every event, once the agent is printing its lines.
fn subscribe_when_working(task: &Task, daemon: &Daemon) -> Client {
    let mut client = task.connect(daemon);
    client.call("subscribe", json!({"events": ["*"]}));
    client.until_line(|l| l.starts_with("working")).expect("the agent prints");
    client
}

/// Reads to the end of the connection; the last `state_change` that set a status.
fn last_status_change(client: &mut Client) -> Value {
    assert!(client.until(|_| false).is_none());
    let is_status_change = |e: &&Value| event_type(e) == "state_change" && e["params"]["data"]["status"].is_string();
    client.events.iter().rfind(is_status_change).cloned().unwrap_or(Value::Null)
}

fn assert_ended(task: &Task, change: &Value, status: &str, reason: &str) {
    assert_eq!(
        (change["params"]["data"]["status"].as_str(), change["params"]["data"]["reason"].as_str()),
        (Some(status), Some(reason)),
        "the last state_change a subscriber read: {change}"
    );
    let state = task.state();
    assert_eq!((state["status"].as_str(), state["reason"].as_str()), (Some(status), Some(reason)), "{state}");
}

#[test]
fn sigterm_with_an_agent_that_ignores_it_still_tells_subscribers_checkpointed() {
    let task = Task::new("stubborn", 2);
    task.mode("stubborn");
    let mut daemon = task.run(&[]);
    let mut client = subscribe_when_working(&task, &daemon);
    daemon.signal(Signal::SIGTERM);
    // The agent is killed after its grace, the state written, then the event sent.
    let last = last_status_change(&mut client);
    assert_eq!(daemon.wait_exit(Duration::from_secs(30)).code(), Some(0), "{}", daemon.stderr());
    assert_ended(&task, &last, "checkpointed", "signal");
    assert!(task.read("progress.txt").contains("CHECKPOINT: interrupted by a signal"));
}

#[test]
fn sigterm_and_sigint_with_an_agent_that_takes_a_moment_to_stop_tell_subscribers_checkpointed() {
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let task = Task::new("cooperative", 2);
        task.mode("careful");
        let mut daemon = task.run(&[]);
        let mut client = subscribe_when_working(&task, &daemon);
        daemon.signal(signal);
        let last = last_status_change(&mut client);
        assert_eq!(daemon.wait_exit(Duration::from_secs(30)).code(), Some(0), "{signal}: {}", daemon.stderr());
        assert_ended(&task, &last, "checkpointed", "signal");
        assert!(client.lines.iter().any(|l| l == "saving my work"), "{signal}");
    }
}

#[test]
fn a_second_signal_kills_the_agent_at_once_and_still_tells_subscribers() {
    let task = Task::new("twice", 2);
    task.mode("stubborn");
    let mut daemon = task.run(&[]);
    let mut client = subscribe_when_working(&task, &daemon);
    daemon.signal(Signal::SIGTERM);
    client.until(|e| is_status(e, "stopping")).expect("the first signal says stopping");
    daemon.signal(Signal::SIGTERM);
    let last = last_status_change(&mut client);
    assert_eq!(daemon.wait_exit(Duration::from_secs(30)).code(), Some(1), "{}", daemon.stderr());
    assert_ended(&task, &last, "checkpointed", "signal");
}

#[test]
fn a_loop_that_ends_by_itself_tells_subscribers_its_last_state() {
    let cases: [(&str, &[&str], &str, &str, i32); 3] = [
        ("pass", &[], "completed", "all_stories_pass", 0),
        ("fail", &["--max-failures", "1"], "failed", "max_failures", 1),
        ("claim", &["--max-iterations", "1"], "stopped", "max_iterations", 3),
    ];
    for (mode, flags, status, reason, code) in cases {
        let task = Task::new("ends", 1);
        task.mode(mode);
        task.hold();
        let mut daemon = task.run(flags);
        let mut client = task.connect(&daemon);
        client.call("subscribe", json!({"events": ["*"]}));
        task.release();
        let last = last_status_change(&mut client);
        assert_eq!(daemon.wait_exit(Duration::from_secs(30)).code(), Some(code), "{mode}: {}", daemon.stderr());
        assert_ended(&task, &last, status, reason);
    }
}

#[test]
fn stop_and_checkpoint_requests_tell_every_subscriber_before_closing() {
    for (method, params, status, reason) in [
        ("stop", json!({}), "stopped", "stop_requested"),
        ("checkpoint", json!({}), "checkpointed", "checkpoint_requested"),
    ] {
        let task = Task::new("requested", 2);
        task.mode("gate");
        std::fs::write(task.dir().join("gate"), "").unwrap();
        task.hold();
        let mut daemon = task.run(&[]);
        let mut watcher = task.connect(&daemon);
        watcher.call("subscribe", json!({"events": ["*"]}));
        task.release();
        watcher.until_line(|l| l == "waiting at the gate").expect("the agent waits");
        let mut asker = task.connect(&daemon);
        asker.call(method, params);
        watcher.until(|e| is_status(e, "stopping")).expect("stopping");
        std::fs::remove_file(task.dir().join("gate")).unwrap();
        let last = last_status_change(&mut watcher);
        assert_eq!(daemon.wait_exit(Duration::from_secs(30)).code(), Some(3), "{method}: {}", daemon.stderr());
        assert_ended(&task, &last, status, reason);
    }
    // A forced stop of an agent that ignores SIGTERM: killed after its grace.
    let task = Task::new("forced", 2);
    task.mode("stubborn");
    let mut daemon = task.run(&[]);
    let mut watcher = subscribe_when_working(&task, &daemon);
    task.connect(&daemon).call("stop", json!({"force": true}));
    let last = last_status_change(&mut watcher);
    assert_eq!(daemon.wait_exit(Duration::from_secs(30)).code(), Some(3), "{}", daemon.stderr());
    assert_ended(&task, &last, "stopped", "stop_requested");
}
