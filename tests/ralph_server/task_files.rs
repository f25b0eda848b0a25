//! The task's files as an agent, a user or `git clean` may leave them: a
//! FIFO or a device where a file should be, `.ralph` removed while the loop
//! runs, a flood of completion claims against a large prd.json.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Task, fake_agent};

#[test]
fn run_refuses_a_prd_json_or_injected_prompts_that_are_not_regular_files_at_once() {
    let task = Task::new("fifostart", 1);
    std::fs::remove_file(task.dir().join("prd.json")).unwrap();
    nix::unistd::mkfifo(&task.dir().join("prd.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut daemon = task.run(&[]);
    // A blocking read of the FIFO would wait here for a writer that never comes.
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(2), "{}", daemon.stderr());
    assert!(daemon.stderr().contains("prd.json: cannot read: not a regular file"), "{}", daemon.stderr());

    let task = Task::new("zero", 1);
    std::fs::create_dir(task.dir().join(".ralph")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", task.dir().join(".ralph/injected.jsonl")).unwrap();
    let mut daemon = task.run(&[]);
    // An unbounded read of /dev/zero ends in an abort, not exit 2.
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(2), "{}", daemon.stderr());
    assert!(daemon.stderr().contains("injected.jsonl: not a regular file"), "{}", daemon.stderr());
}

#[test]
fn a_prd_json_the_agent_turns_into_a_fifo_fails_the_next_iterations_instead_of_holding_the_loop() {
    let task = Task::new("fifo", 1);
    task.mode("fifo");
    let mut daemon = task.run(&[]);
    // Each iteration after the first finds the FIFO: a FAILURE, and after
    // three the loop has failed (exit 1), where it used to wait for good.
    assert_eq!(daemon.wait_exit(Duration::from_secs(30)).code(), Some(1), "{}", daemon.stderr());
    let progress = task.read("progress.txt");
    assert!(progress.contains("prd.json: cannot read: not a regular file"), "{progress}");
    assert_eq!(task.state()["reason"], "max_failures");
}

#[test]
fn removing_dot_ralph_while_the_loop_runs_keeps_the_directory_locked_and_injections_on_disk() {
    let task = Task::new("cleaned", 2);
    task.mode("gate");
    std::fs::write(task.dir().join("gate"), "").unwrap();
    task.hold();
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    task.release();
    assert!(client.until_line(|l| l.contains("waiting at the gate")).is_some(), "{}", daemon.stderr());
    let reply = client.call("inject_prompt", json!({"prompt": "BEFORE"}));
    assert_eq!(reply["result"]["status"], "prompt_injected", "{reply}");

    // `git clean -fdx` in the project, while the agent works.
    std::fs::remove_dir_all(task.dir().join(".ralph")).unwrap();
    let reply = client.call("inject_prompt", json!({"prompt": "AFTER"}));
    assert_eq!(reply["result"]["status"], "prompt_injected", "{reply}");
    // Acknowledged means on disk, at the path, with the one before it.
    assert_eq!(task.injected(), ["BEFORE", "AFTER"]);

    // The directory is still the first loop's, whatever the name.
    let mut second = task.start(&task.dir(), &fake_agent(), &["--name", "other"]);
    assert_eq!(second.wait_exit(Duration::from_secs(20)).code(), Some(2), "{}", second.stderr());
    assert!(second.stderr().contains(&format!("{} is already running", task.dir().display())), "{}", second.stderr());

    std::fs::remove_file(task.dir().join("gate")).unwrap();
    assert!(daemon.wait_exit(Duration::from_secs(30)).success(), "{}", daemon.stderr());
    let prompt = task.read("prompt-seen-2");
    assert!(prompt.starts_with("BEFORE\n\nAFTER\n\n---"), "{prompt}");
}

#[test]
fn a_flood_of_completion_claims_does_not_slow_the_agent_down() {
    let task = Task::new("claims", 1);
    // A large PRD (2 MB), whose every read and parse costs milliseconds.
    let pad = "d".repeat(2_000_000);
    let prd =
        format!(r#"{{"userStories": [{{"id": "US-001", "priority": 1, "passes": false, "description": "{pad}"}}]}}"#);
    std::fs::write(task.dir().join("prd.json"), prd).unwrap();
    task.mode("claims 5000");
    let started = Instant::now();
    let mut daemon = task.run(&["--max-iterations", "1"]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(120)).code(), Some(3), "{}", daemon.stderr());
    let ns: u64 = task.read("claims-ns").trim().parse().unwrap();
    let took = Duration::from_nanos(ns);
    eprintln!("5000 claims printed in {took:?} (run: {:?})", started.elapsed());
    // Read on each claim, the file held the agent for 10 s and more; read
    // once per change, well under a second (a loaded machine allowed for).
    assert!(took < Duration::from_secs(3), "the agent took {took:?} to print its claims");
    let progress = task.read("progress.txt");
    assert!(progress.contains("WARNING - US-001"), "{progress}");
}
