//! The loop end to end: a 3-story PRD run to completion, live output,
//! false completion claims, failures, bad PRDs.

use std::time::Duration;

use serde_json::json;

use crate::support::{Task, event_type, is_status, output_line};

#[test]
fn a_three_story_prd_runs_to_completion_with_events_progress_and_state() {
    let task = Task::new("three", 3);
    task.hold();
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    let reply = client.call("subscribe", json!({"events": ["*"]}));
    assert_eq!(reply["result"], json!({"subscribed": ["*"]}));
    task.release();
    let done = client.until(|e| is_status(e, "completed"));
    assert!(done.is_some(), "no completed state_change; events: {:?}\n{}", client.events, daemon.stderr());
    assert!(daemon.wait_exit(Duration::from_secs(20)).success(), "run exits 0 when completed");

    // Output events carry the agent's lines, live, in order.
    let lines = &client.lines;
    let iterations: Vec<&String> = lines.iter().filter(|l| l.starts_with("fake agent: iteration")).collect();
    assert_eq!(iterations.len(), 3, "{lines:?}");
    assert!(iterations[0].contains("story US-001") && iterations[2].contains("story US-003"), "{iterations:?}");
    // The agent ran in the project root (the task dir: no .git above it) with the variables set.
    assert!(iterations[0].ends_with(&format!("in {}", task.dir().canonicalize().unwrap().display())), "{iterations:?}");
    // state_change events carry only what changed, with an ISO timestamp and timezone.
    let changes: Vec<&serde_json::Value> = client.events.iter().filter(|e| event_type(e) == "state_change").collect();
    let story_change = changes.iter().find(|e| e["params"]["data"]["current_story"] == "US-002").unwrap();
    assert_eq!(story_change["params"]["data"], json!({"iteration": 2, "current_story": "US-002"}));
    let ts = story_change["params"]["timestamp"].as_str().unwrap();
    assert!(ts.len() >= 27 && (ts.ends_with('Z') || ts[26..].starts_with(['+', '-'])), "{ts}");

    let progress = task.read("progress.txt");
    for block in ["ITERATION 1/10 - US-001", "ITERATION 2/10 - US-002", "ITERATION 3/10 - US-003", "COMPLETED"] {
        assert!(progress.contains(block), "{block} missing from progress.txt:\n{progress}");
    }
    let state: serde_json::Value = serde_json::from_str(&task.read(".ralph/state.json")).unwrap();
    assert_eq!((state["status"].as_str(), state["iteration"].as_u64()), (Some("completed"), Some(3)));
    // Unknown fields of prd.json are never dropped (the agent edited it; the loop only reads it).
    assert!(task.read("prd.json").contains("\"team\": \"kept\""));
    assert!(!task.socket().exists(), "the socket is removed on exit");
    assert!(!task.socket_dir().join("three.lock").exists(), "the lock is removed on exit");
}

#[test]
fn output_lines_arrive_live_with_low_latency() {
    let task = Task::new("live", 1);
    task.mode("ticks 100");
    task.hold();
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    task.release();
    // (when the agent printed it, when it arrived), ns since the epoch.
    let mut ticks = Vec::new();
    while let Some(event) = client.recv() {
        let Some(line) = output_line(&event) else { continue };
        if let Some(ns) = line.strip_prefix("tick ").and_then(|n| n.trim().parse::<u128>().ok()) {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
            ticks.push((ns, now));
        }
        if line.starts_with("all done:") {
            break;
        }
    }
    assert_eq!(ticks.len(), 100, "every line is an event");
    let mut latencies: Vec<f64> =
        ticks.iter().map(|(printed, got)| got.saturating_sub(*printed) as f64 / 1e6).collect();
    latencies.sort_by(f64::total_cmp);
    let (p50, p99) = (latencies[50], latencies[98]);
    eprintln!("PTY line -> output event: p50 {p50:.2} ms, p99 {p99:.2} ms (1 subscriber, debug build)");
    // Live, not after the iteration (which lasts 100 x 20 ms): most lines
    // arrive while the agent is still printing, however loaded the machine.
    let last_printed = ticks.iter().map(|(printed, _)| *printed).max().unwrap();
    let live = ticks.iter().filter(|(_, got)| *got < last_printed).count();
    assert!(live >= 50, "{live} of 100 lines arrived before the agent printed its last; p50 {p50} ms");
    // A generous bound for a loaded CI box.
    assert!(p99 < 250.0, "p99 {p99} ms");
    assert!(daemon.wait_exit(Duration::from_secs(20)).success());
}

#[test]
fn a_false_completion_claim_is_logged_and_the_loop_goes_on() {
    let task = Task::new("claims", 2);
    task.mode("claim");
    let mut daemon = task.run(&["--max-iterations", "2"]);
    let status = daemon.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(3), "stopped at max_iterations:\n{}", daemon.stderr());
    let progress = task.read("progress.txt");
    assert_eq!(
        progress.matches("claimed completion, but these stories do not pass yet: US-001, US-002").count(),
        2,
        "{progress}\n{}",
        daemon.stderr()
    );
    assert!(progress.contains("STOPPED: max_iterations reached"), "{progress}");
    let state: serde_json::Value = serde_json::from_str(&task.read(".ralph/state.json")).unwrap();
    assert_eq!((state["status"].as_str(), state["reason"].as_str()), (Some("stopped"), Some("max_iterations")));
}

#[test]
fn the_prompt_echoed_by_the_terminal_never_counts_as_a_claim() {
    // The prompt goes to the agent's terminal (no {PROMPT_FILE}), and the terminal echoes
    // it, marker included; the agent passes its story quietly and claims nothing.
    let task = Task::new("echo", 2);
    task.mode("quiet-pass");
    std::fs::write(task.dir().join("prompt.md"), "Story {STORY_ID}.\nReply <promise>COMPLETE</promise> when done.\n")
        .unwrap();
    let mut daemon = task.run(&[]);
    assert!(daemon.wait_exit(Duration::from_secs(20)).success(), "{}", daemon.stderr());
    let progress = task.read("progress.txt");
    assert!(!progress.contains("claimed completion"), "the echo was taken for a claim:\n{progress}");
    // Completed because no story was left at the start of iteration 3, not by a claim.
    assert!(progress.contains("COMPLETED: every story passes"), "{progress}");
}

#[test]
fn consecutive_failures_end_the_loop_as_failed() {
    let task = Task::new("fails", 1);
    task.mode("fail");
    let mut daemon = task.run(&["--max-failures", "2"]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(1), "{}", daemon.stderr());
    let progress = task.read("progress.txt");
    assert_eq!(progress.matches("FAILURE - US-001").count(), 2, "{progress}");
    assert!(
        progress.contains("the agent ended with exit status 1") && progress.contains("FAILED: 2 failures in a row")
    );
}

#[test]
fn a_bad_prd_is_refused_at_start_with_exit_2() {
    let task = Task::new("bad", 1);
    std::fs::write(task.dir().join("prd.json"), "{\"project\": \"x\"}").unwrap();
    let mut daemon = task.run(&[]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(2));
    assert!(daemon.stderr().contains("missing field `userStories`"), "{}", daemon.stderr());
    std::fs::write(task.dir().join("prd.json"), "{oops").unwrap();
    let mut daemon = task.run(&[]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(2));
    assert!(daemon.stderr().contains("prd.json: not a valid PRD"), "{}", daemon.stderr());
}

#[test]
fn the_agent_holds_its_terminal_as_stdio_and_not_the_master_side() {
    let task = Task::new("fds", 1);
    task.mode("fds");
    task.hold();
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    task.release();
    assert!(daemon.wait_exit(Duration::from_secs(20)).success(), "{}", daemon.stderr());
    client.until(|_| false);
    let fds: Vec<&String> = client.lines.iter().filter(|l| l.starts_with("fd ")).collect();
    assert!(fds.iter().any(|l| l.starts_with("fd 0 -> /dev/pts/")), "{fds:?}");
    assert!(!fds.iter().any(|l| l.ends_with("/dev/ptmx")), "the agent holds the terminal's master: {fds:?}");
}

#[test]
fn a_line_longer_than_an_event_comes_in_partial_pieces_that_make_it_whole() {
    let task = Task::new("longline", 1);
    let agent = task.root.path().join("long-line.sh");
    // 200 000 bytes on one line: more than three events' worth.
    let script = "#!/bin/sh\nwhile [ -f \"$RALPH_TASK_DIR/hold\" ]; do sleep 0.02; done\n\
                  printf 'S%0199998dE\\n' 0\necho done\n";
    std::fs::write(&agent, script).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    task.hold();
    let command = format!("{} {{PROMPT_FILE}}", agent.display());
    let mut daemon = task.start(&task.dir(), &command, &["--max-iterations", "1"]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    task.release();
    let line = client.until_line(|l| l.starts_with('S')).expect("the long line");
    assert_eq!(line.len(), 200_000, "the pieces up to the first complete one");
    assert!(line.ends_with("0E"));
    daemon.wait_exit(Duration::from_secs(20));
}

#[test]
fn a_typed_prompt_echoed_by_the_terminal_and_printed_by_the_agent_is_no_claim() {
    let task = Task::new("echoes", 1);
    std::fs::write(task.dir().join("prompt.md"), "Work on {STORY_ID}.\nWhen done, say <promise>COMPLETE</promise>.\n")
        .unwrap();
    let agent = task.root.path().join("prints-its-input.sh");
    std::fs::write(&agent, "#!/bin/sh\ncat\necho done\n").unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // No placeholder: the prompt is typed (and echoed), then the agent prints it back.
    let mut daemon = task.start(&task.dir(), &agent.display().to_string(), &["--max-iterations", "1"]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3), "{}", daemon.stderr());
    let progress = task.read("progress.txt");
    assert!(!progress.contains("claimed completion"), "{progress}");
}

/// A story id holding a NUL could never reach the agent (RALPH_STORY_ID is
/// an environment value): such a prd.json is refused at start like any bad
/// one, naming the story, instead of a loop whose agent cannot start.
#[test]
fn a_story_id_holding_a_nul_is_refused_at_start_naming_the_story() {
    let task = Task::new("nulid", 1);
    let prd = r#"{"userStories": [{"id": "US-001", "passes": true}, {"id": "US\u0000002", "passes": false}]}"#;
    std::fs::write(task.dir().join("prd.json"), prd).unwrap();
    let mut daemon = task.run(&[]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(2), "{}", daemon.stderr());
    let stderr = daemon.stderr();
    assert!(stderr.contains(r#"userStories[1]: story id "US\u0000002" holds a NUL byte"#), "{stderr}");
    assert!(stderr.contains("RALPH_STORY_ID") && !stderr.contains("cannot start"), "{stderr}");
    assert!(!task.read("progress.txt").contains("ITERATION"), "no iteration was begun");
}

/// The agent itself writes such an id: the next iteration is a FAILURE that
/// says so (in progress.txt and the log), as for any prd.json it broke.
#[test]
fn a_story_id_holding_a_nul_written_mid_run_fails_the_iteration_saying_why() {
    let task = Task::new("nulmid", 1);
    let agent = task.root.path().join("writes-a-nul-id.sh");
    let script = "#!/bin/sh\necho breaking prd.json\n\
                  printf '{\"userStories\": [{\"id\": \"US\\\\u0000002\", \"passes\": false}]}' \
                  > \"$RALPH_TASK_DIR/prd.json\"\n";
    std::fs::write(&agent, script).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut daemon = task.start(&task.dir(), &agent.display().to_string(), &["--max-failures", "2"]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(1), "{}", daemon.stderr());
    let progress = task.read("progress.txt");
    assert_eq!(progress.matches(r#"story id "US\u0000002" holds a NUL byte"#).count(), 2, "{progress}");
    assert!(!progress.contains("cannot start") && !progress.contains('\0'), "{progress}");
    assert!(daemon.stderr().contains("RALPH_STORY_ID"), "{}", daemon.stderr());
    let state = task.state();
    assert_eq!((state["status"].as_str(), state["reason"].as_str()), (Some("failed"), Some("max_failures")));
}
