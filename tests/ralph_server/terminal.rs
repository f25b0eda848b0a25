//! The agent's terminal input: a typed prompt and `write_pty` keys that the
//! agent never reads hold nothing up (the loop, its clients, its shutdown).

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;

use crate::support::{Task, fake_agent};

/// An agent (a script in the task's root) that never reads its terminal:
/// its first run exits at once, the next ones wait.
fn agent_that_never_reads(task: &Task) -> String {
    let path = task.root.path().join("never-reads.sh");
    let script = "#!/bin/sh\necho \"not reading, iteration $RALPH_ITERATION\"\n\
                  [ \"$RALPH_ITERATION\" = 1 ] && exit 0\nsleep 100\n";
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[test]
fn a_typed_prompt_the_agent_never_reads_holds_up_neither_the_loop_nor_a_sigterm() {
    let task = Task::new("unread", 1);
    // 64 KiB typed (no placeholder in the command), far more than the terminal holds.
    std::fs::write(task.dir().join("prompt.md"), format!("{}\n", "w".repeat(99)).repeat(655)).unwrap();
    let mut daemon = task.start(&task.dir(), &agent_that_never_reads(&task), &["--max-iterations", "3"]);
    let mut client = task.connect(&daemon);
    // The first agent exits without reading: the loop goes on to the second.
    let second = integration_tests::eventually(Duration::from_secs(20), || {
        let status = &client.call("get_status", json!({}))["result"];
        status["iteration"] == 2 && status["status"] == "running"
    });
    assert!(second, "the loop never reached iteration 2:\n{}", daemon.stderr());
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(0), "{}", daemon.stderr());
    assert_eq!(task.state()["status"], "checkpointed");
}

#[test]
fn keys_the_agent_never_reads_are_bounded_and_leave_the_server_answering() {
    let task = Task::new("unreadkeys", 1);
    task.mode("gate");
    std::fs::write(task.dir().join("gate"), "").unwrap();
    task.hold();
    let mut daemon = task.start(&task.dir(), &format!("{} {{PROMPT_FILE}}", fake_agent()), &[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    task.release();
    client.until_line(|l| l == "waiting at the gate").expect("the agent waits");
    client.call("set_interactive_mode", json!({"enabled": true}));
    // 512 KiB of keys in eight calls to an agent that never reads: each is
    // answered at once, and what the terminal cannot take is refused.
    let keys = format!("{}\n", "k".repeat(99)).repeat(655);
    let mut refused = 0;
    for _ in 0..8 {
        let reply = client.call("write_pty", json!({ "data": keys }));
        match reply["result"]["status"].as_str() {
            Some("forwarded") => {}
            Some("ignored") if reply["result"]["reason"] == "the agent is not reading its terminal" => refused += 1,
            _ => panic!("{reply}"),
        }
    }
    assert!(refused > 0, "512 KiB of keys were all queued");
    assert_eq!(client.call("get_status", json!({}))["result"]["status"], "running");
    client.call("stop", json!({"force": true}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3), "{}", daemon.stderr());
}
