//! Steering a running loop: inject, stop (graceful and forced), checkpoint
//! and resume, interactive mode, and bad params.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Task, is_status, output_line};

#[test]
fn an_injected_prompt_is_prepended_once_and_two_are_both_kept() {
    let task = Task::new("inject", 3);
    // The first agent waits at a gate until both prompts are in, so they are
    // still pending when the test looks, however slow the machine is.
    std::fs::write(task.dir().join("fake-mode-US-001"), "gate\n").unwrap();
    std::fs::write(task.dir().join("gate"), "").unwrap();
    task.hold();
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    task.release();
    client.until_line(|l| l == "waiting at the gate").expect("the agent waits");
    let reply = client.call("inject_prompt", json!({"prompt": "FIRST injected"}));
    assert_eq!(reply["result"], json!({"status": "prompt_injected", "prompt": "FIRST injected"}));
    client.call("inject_prompt", json!({"prompt": "SECOND"}));
    assert_eq!(task.injected(), ["FIRST injected", "SECOND"], "pending prompts are saved");
    // Only what the next iterations print.
    let injected_at = client.lines.len();
    std::fs::remove_file(task.dir().join("gate")).unwrap();
    assert!(daemon.wait_exit(Duration::from_secs(30)).success(), "{}", daemon.stderr());
    client.until(|_| false);
    let starts: Vec<&String> = client.lines[injected_at..].iter().filter(|l| l.starts_with("prompt starts:")).collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[0], "prompt starts: FIRST injected", "{starts:?}");
    assert!(!starts[1].contains("injected"), "given once: {starts:?}");
}

#[test]
fn a_graceful_stop_lets_the_agent_finish_and_a_forced_one_does_not() {
    let task = Task::new("stop", 3);
    task.mode("slow 10");
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["*"]}));
    client.until_line(|l| l.starts_with("working"));
    assert_eq!(client.call("stop", json!({}))["result"], json!({"status": "stop_requested"}));
    client.until(|e| is_status(e, "stopping")).expect("stopping");
    client.until(|e| is_status(e, "stopped")).expect("stopped");
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3));
    // The agent ran to its end: it marked its story.
    assert!(client.lines.iter().any(|l| l == "marked US-001"));
    assert!(task.read("progress.txt").contains("STOPPED: stop requested"));

    let task = Task::new("force", 3);
    task.mode("slow 1000");
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    client.until_line(|l| l.starts_with("working"));
    let asked = Instant::now();
    assert_eq!(client.call("stop", json!({"force": true}))["result"], json!({"status": "stop_requested"}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3));
    assert!(asked.elapsed() < Duration::from_secs(5), "a forced stop ends the agent at once");
    assert!(!task.read("prd.json").contains("\"passes\": true"));
}

#[test]
fn a_checkpoint_exits_and_run_resumes_with_the_right_iteration() {
    let task = Task::new("resume", 3);
    // Set before the start: a first iteration in the default mode passes
    // every story before a subscriber could see it work.
    task.mode("slow 10");
    let mut daemon = task.run(&["--max-iterations", "5"]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["*"]}));
    client.until_line(|l| l.starts_with("working"));
    assert_eq!(client.call("checkpoint", json!({}))["result"], json!({"status": "checkpoint_requested"}));
    client.until(|e| is_status(e, "checkpointed")).expect("checkpointed");
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3));
    let state: serde_json::Value = serde_json::from_str(&task.read(".ralph/state.json")).unwrap();
    let stopped_at = state["iteration"].as_u64().unwrap();
    assert_eq!(state["status"], "checkpointed");
    assert!(task.read("progress.txt").contains("CHECKPOINT"));

    task.mode("pass");
    let mut daemon = task.run(&["--max-iterations", "5"]);
    assert!(daemon.wait_exit(Duration::from_secs(20)).success(), "{}", daemon.stderr());
    let progress = task.read("progress.txt");
    assert!(progress.contains(&format!("RESUMED after iteration {stopped_at}")), "{progress}");
    assert!(progress.contains(&format!("ITERATION {}/5", stopped_at + 1)), "{progress}");
    assert!(!progress.contains("ITERATION 1/5 - US-002"), "iterations count on: {progress}");
}

#[test]
fn sigterm_interrupts_the_agent_and_the_next_run_resumes() {
    let task = Task::new("signal", 2);
    task.mode("slow 1000");
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    client.until_line(|l| l.starts_with("working"));
    assert!(daemon.terminate().success(), "SIGTERM is a clean shutdown: {}", daemon.stderr());
    let state: serde_json::Value = serde_json::from_str(&task.read(".ralph/state.json")).unwrap();
    assert_eq!((state["status"].as_str(), state["reason"].as_str()), (Some("checkpointed"), Some("signal")));
    assert!(!task.socket().exists());
}

#[test]
fn interactive_mode_forwards_keys_to_the_agent_and_its_echo_comes_back() {
    let task = Task::new("interactive", 1);
    task.mode("interactive");
    task.hold();
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["*"]}));
    task.release();
    // The agent's question has no newline: it comes as a partial line.
    client.until(|e| output_line(e).is_some_and(|l| l.contains("your input:"))).expect("the agent's question");
    let ignored = client.call("write_pty", json!({"data": "nope\n"}));
    assert_eq!(ignored["result"], json!({"status": "ignored", "reason": "not in interactive mode"}));
    assert_eq!(
        client.call("set_interactive_mode", json!({"enabled": true}))["result"],
        json!({"interactive_mode": true})
    );
    client.until(|e| e["params"]["data"]["interactive_mode"] == true).expect("state_change");
    assert_eq!(client.call("write_pty", json!({"data": "hello agent\r"}))["result"], json!({"status": "forwarded"}));
    client.until_line(|l| l == "agent got: hello agent").expect("the agent's answer");
    // Interactive mode suppresses completion: the agent's marker does not end the task.
    assert!(daemon.wait_exit(Duration::from_secs(20)).success(), "no story left, so completed anyway");
    client.until(|_| false);
    let status_after: Vec<_> =
        client.events.iter().filter(|e| e["params"]["data"]["interactive_mode"] == false).collect();
    assert!(!status_after.is_empty(), "interactive mode ends with the iteration");
    assert!(!task.read("progress.txt").contains("claim is confirmed"), "{}", task.read("progress.txt"));
}

#[test]
fn bad_params_and_unknown_event_types_are_invalid_params() {
    let task = Task::new("params", 1);
    task.mode("slow 30");
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    let reply = client.call("inject_prompt", json!({"prompt": 42}));
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert_eq!(client.call("inject_prompt", json!({}))["error"]["code"], -32602);
    assert_eq!(client.call("set_interactive_mode", json!({"enabled": "yes"}))["error"]["code"], -32602);
    let reply = client.call("subscribe", json!({"events": ["output", "bogus"]}));
    assert_eq!(reply["error"]["code"], -32602);
    assert!(reply["error"]["message"].as_str().unwrap().contains("output, state_change, *"), "{reply}");
    assert_eq!(client.call("nope", json!({}))["error"]["code"], -32601);
    let status = client.call("get_status", json!({}))["result"].clone();
    let keys: Vec<&str> = status.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys.iter().copied().collect::<std::collections::BTreeSet<_>>(),
        [
            "agent",
            "current_story",
            "interactive_mode",
            "iteration",
            "max_iterations",
            "recent_output",
            "started_at",
            "status",
            "task_dir",
            "task_name",
            "updated_at"
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(status["task_name"], "params");
    assert_eq!(status["agent"], "fake-agent.sh");
    // unsubscribe from any state, including after `*`
    assert_eq!(client.call("subscribe", json!({"events": ["*"]}))["result"], json!({"subscribed": ["*"]}));
    assert_eq!(
        client.call("unsubscribe", json!({"events": ["output"]}))["result"],
        json!({"subscribed": ["state_change"]})
    );
    client.call("stop", json!({"force": true}));
    daemon.wait_exit(Duration::from_secs(20));
}

#[test]
fn prompts_injected_from_many_clients_at_once_are_all_saved() {
    let task = Task::new("inject-many", 1);
    // Once the agent prints, its prompt was taken, and the next is far off:
    // what is injected now stays pending, in .ralph/injected.jsonl.
    task.mode("slow 1000");
    let mut daemon = task.run(&[]);
    let mut watcher = task.connect(&daemon);
    watcher.call("subscribe", json!({"events": ["output"]}));
    watcher.until_line(|l| l.starts_with("working")).expect("the agent prints");
    let injectors: Vec<_> = (0..4)
        .map(|c| {
            let mut client = task.connect(&daemon);
            std::thread::spawn(move || {
                for n in 0..25 {
                    let reply = client.call("inject_prompt", json!({"prompt": format!("p{c}-{n}")}));
                    assert_eq!(reply["result"]["status"], "prompt_injected", "{reply}");
                }
            })
        })
        .collect();
    for injector in injectors {
        injector.join().unwrap();
    }
    let pending = task.injected();
    let missing: Vec<String> =
        (0..4).flat_map(|c| (0..25).map(move |n| format!("p{c}-{n}"))).filter(|p| !pending.contains(p)).collect();
    assert!(missing.is_empty(), "lost injected prompts {missing:?}\n{}", daemon.stderr());
    assert_eq!(pending.len(), 100, "{pending:?}");
    assert!(!daemon.stderr().contains("cannot save"), "{}", daemon.stderr());
    daemon.terminate();
}

/// A batch of large `get_status` replies and a `stop`: the replies reach the
/// connection's write budget, and the members after that are answered
/// `overloaded` ("send the rest again"). Such a refused `stop` must not
/// have stopped anything: a handler runs only in its turn (it once ran as
/// the batch was read, so the loop stopped though the client was told no).
#[test]
fn a_stop_refused_in_a_batch_past_the_write_budget_stops_nothing() {
    let task = Task::new("refused", 2);
    task.mode("wide 200");
    std::fs::write(task.dir().join("gate"), "").unwrap();
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    client.until_line(|l| l == "waiting at the gate").expect("the agent's lines");
    let mut batch: Vec<_> = (0..100).map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "get_status"})).collect();
    batch.push(json!({"jsonrpc": "2.0", "id": "stop", "method": "stop"}));
    client.send(&json!(batch));
    let replies = loop {
        let message = client.recv().expect("the batch's reply");
        if message.is_array() {
            break message;
        }
    };
    let replies = replies.as_array().unwrap();
    let statuses = replies.iter().filter(|r| r["result"]["recent_output"].is_array()).count();
    assert!(statuses < 100, "the replies did not reach the budget: {statuses} statuses");
    let stop = replies.iter().find(|r| r["id"] == "stop").expect("the stop's answer");
    assert_eq!(stop["error"]["data"]["reason"], "overloaded", "{stop}");
    std::fs::remove_file(task.dir().join("gate")).unwrap();
    assert_eq!(daemon.wait_exit(Duration::from_secs(30)).code(), Some(0), "the loop ran to its end");
    assert!(!task.read("prd.json").contains("\"passes\": false"), "every story done");
}
