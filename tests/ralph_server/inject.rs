//! Injected prompts: bounded in count and bytes while they wait, kept apart
//! from state.json (which a call no longer rewrites), found again after a
//! crash, and delivered whole however long, through a file when an argument
//! or a terminal line could not carry them.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::support::{Client, Task, fake_agent};

fn inject(client: &mut Client, prompt: &str) -> Value {
    client.call("inject_prompt", json!({ "prompt": prompt }))
}

fn refusal(reply: &Value) -> &str {
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    reply["error"]["message"].as_str().unwrap_or_default()
}

#[test]
fn pending_injections_are_bounded_in_count_and_bytes_and_survive_a_crash() {
    let task = Task::new("bounded", 2);
    std::fs::write(task.dir().join("fake-mode-US-001"), "slow 100000\n").unwrap();
    let flags = ["--max-pending-prompts", "3", "--max-pending-prompt-bytes", "1000"];
    let mut daemon = task.run(&flags);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    // Once the agent prints, this iteration's prompt was taken: what comes now waits.
    client.until_line(|l| l.starts_with("working")).expect("the agent prints");
    let (a, c) = ("a".repeat(600), "c".repeat(300));
    assert_eq!(inject(&mut client, &a)["result"]["status"], "prompt_injected");
    let too_big = inject(&mut client, &"b".repeat(500));
    let message = refusal(&too_big);
    assert!(message.contains("1000") && message.contains("RALPH_MAX_PENDING_PROMPT_BYTES"), "{message}");
    assert_eq!(inject(&mut client, &c)["result"]["status"], "prompt_injected");
    assert_eq!(inject(&mut client, "d")["result"]["status"], "prompt_injected");
    let too_many = inject(&mut client, "e");
    let message = refusal(&too_many);
    assert!(message.contains('3') && message.contains("RALPH_MAX_PENDING_PROMPTS"), "{message}");
    assert!(!task.read(".ralph/state.json").contains("aaaa"), "state.json holds no injected prompt");

    // A crash: the next run finds what was pending and gives it to the agent, in order, once.
    daemon.signal(Signal::SIGKILL);
    daemon.wait_exit(Duration::from_secs(10));
    std::fs::remove_file(task.dir().join("fake-mode-US-001")).unwrap();
    let mut daemon = task.run(&flags);
    assert!(daemon.wait_exit(Duration::from_secs(30)).success(), "{}", daemon.stderr());
    assert_eq!(task.state()["status"], "completed");
    // Iteration 1 was running when the daemon died: the resumed run goes on with 2.
    let seen = task.read("prompt-seen-2");
    assert!(seen.starts_with(&format!("{a}\n\n{c}\n\nd\n\n---\n\n")), "{seen}");
    assert!(!seen.contains("bbb") && !seen.contains("\ne\n"), "refused prompts are not kept: {seen}");
    assert!(!task.read("prompt-seen-3").contains("aaa"), "given once");
}

#[test]
fn injections_neither_grow_nor_rewrite_the_state_file() {
    let task = Task::new("flat", 1);
    task.mode("slow 100000");
    let mut daemon = task.run(&["--max-pending-prompts", "120", "--max-pending-prompt-bytes", "8000000"]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    client.until_line(|l| l.starts_with("working")).expect("the agent prints");
    let state_file = task.dir().join(".ralph/state.json");
    let before = std::fs::metadata(&state_file).unwrap();
    let prompt = "x".repeat(32 * 1024);
    for n in 0..120 {
        let reply = inject(&mut client, &format!("{n} {prompt}"));
        assert_eq!(reply["result"]["status"], "prompt_injected", "{reply}");
    }
    let after = std::fs::metadata(&state_file).unwrap();
    assert_eq!((after.ino(), after.size()), (before.ino(), before.size()), "state.json was rewritten");
    assert!(after.size() < 4096, "state.json is {} bytes", after.size());
    assert!(refusal(&inject(&mut client, "one more")).contains("RALPH_MAX_PENDING_PROMPTS"));
    assert!(daemon.terminate().success());
}

/// Over 200 KiB (within the 256 KiB of one injection) in numbered lines,
/// one of them of 8 KiB, longer than a terminal's line.
fn large_prompt() -> String {
    let mut prompt = format!("{}\n", "w".repeat(8 * 1024));
    let mut n = 0;
    while prompt.len() < 205 * 1024 {
        prompt.push_str(&format!("injected line {n}: keep every word of this\n"));
        n += 1;
    }
    prompt
}

#[test]
fn a_prompt_too_long_for_an_argument_or_a_terminal_line_reaches_the_agent_through_a_file() {
    let prompt_argument = format!("{} --prompt {{PROMPT}}", fake_agent());
    for agent in [prompt_argument, fake_agent()] {
        let task = Task::new("large", 2);
        std::fs::write(task.dir().join("fake-mode-US-001"), "gate\n").unwrap();
        std::fs::write(task.dir().join("gate"), "").unwrap();
        task.hold();
        let mut daemon = task.start(&task.dir(), &agent, &[]);
        let mut client = task.connect(&daemon);
        client.call("subscribe", json!({"events": ["output"]}));
        task.release();
        client.until_line(|l| l == "waiting at the gate").expect("the agent waits");
        let large = large_prompt();
        assert_eq!(inject(&mut client, &large)["result"]["status"], "prompt_injected");
        std::fs::remove_file(task.dir().join("gate")).unwrap();
        assert!(daemon.wait_exit(Duration::from_secs(30)).success(), "{agent}: {}", daemon.stderr());
        let seen = task.read("prompt-seen-2");
        assert!(
            seen.starts_with(&format!("{}\n\n---\n\n", large.trim_end())),
            "{agent}: the agent saw {} bytes: {}...",
            seen.len(),
            &seen[..seen.len().min(300)]
        );
        assert!(!task.read("progress.txt").contains("FAILURE"), "{}", task.read("progress.txt"));
    }
}

#[test]
fn a_nul_is_refused_by_inject_prompt_and_one_already_queued_reaches_the_agent_through_a_file() {
    let task = Task::new("nul", 1);
    task.mode("gate");
    std::fs::write(task.dir().join("gate"), "").unwrap();
    // What an older version may have queued: a prompt no argument can carry.
    std::fs::create_dir_all(task.dir().join(".ralph")).unwrap();
    std::fs::write(task.dir().join(".ralph/injected.jsonl"), "{\"prompt\": \"queued\\u0000before\"}\n").unwrap();
    task.hold();
    let mut daemon = task.start(&task.dir(), &format!("{} --prompt {{PROMPT}}", fake_agent()), &[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    task.release();
    client.until_line(|l| l == "waiting at the gate").expect("the agent waits");
    let message = refusal(&inject(&mut client, "a\u{0}b")).to_owned();
    assert!(message.contains("prompt") && message.contains("NUL"), "{message}");
    std::fs::remove_file(task.dir().join("gate")).unwrap();
    assert!(daemon.wait_exit(Duration::from_secs(30)).success(), "{}", daemon.stderr());
    // The agent was told to read the file, which holds the prompt byte for byte.
    assert!(
        task.read(".ralph/prompt.md").starts_with("queued\0before\n\n---\n\n"),
        "{}",
        task.read(".ralph/prompt.md")
    );
    assert!(task.read("prompt-seen-1").contains("before"), "{}", task.read("prompt-seen-1"));
    assert!(!task.read("progress.txt").contains("FAILURE"), "{}", task.read("progress.txt"));
}

#[test]
fn a_typed_prompt_with_control_characters_reaches_the_agent_byte_for_byte() {
    let task = Task::new("controls", 2);
    std::fs::write(task.dir().join("fake-mode-US-001"), "gate\n").unwrap();
    std::fs::write(task.dir().join("gate"), "").unwrap();
    task.hold();
    // No placeholder: the prompt is typed, where Ctrl-C would interrupt the agent and Ctrl-U erase the line.
    let mut daemon = task.start(&task.dir(), &fake_agent(), &[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    task.release();
    client.until_line(|l| l == "waiting at the gate").expect("the agent waits");
    let prompt = "before ctrl-c \u{3} after ctrl-c, ctrl-u \u{15} after ctrl-u";
    assert_eq!(inject(&mut client, prompt)["result"]["status"], "prompt_injected");
    std::fs::remove_file(task.dir().join("gate")).unwrap();
    assert!(daemon.wait_exit(Duration::from_secs(30)).success(), "{}", daemon.stderr());
    let seen = task.read("prompt-seen-2");
    assert!(seen.starts_with(&format!("{prompt}\n\n---\n\n")), "the agent saw {seen:?}");
    assert!(!task.read("progress.txt").contains("FAILURE"), "{}", task.read("progress.txt"));
}
