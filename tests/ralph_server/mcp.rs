//! `ralph-server mcp` driven by the official MCP Python SDK over stdio, in
//! front of real loops with the fake agent: the tools against a live task in
//! both protocol eras, which task a call is about, errors, the task's files
//! as resources with their updates, a task that ends and runs again, and a
//! server that does not answer.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

use integration_tests::{Daemon, McpClient, bin_path};
use serde_json::{Value, json};

use crate::support::{Task, fake_agent};

const TOOLS: [&str; 6] = ["list_tasks", "status", "recent_output", "inject_prompt", "stop", "checkpoint"];

fn open(mcp: &mut McpClient, socket_dir: &Path, extra: &[&str], mode: &str, listen: Value) -> Value {
    let bin = bin_path("ralph-server");
    let mut command = vec![bin.to_str().unwrap(), "mcp"];
    command.extend_from_slice(extra);
    let dir = socket_dir.display().to_string();
    mcp.open_stdio(&command, &[("RALPH_SOCKET_DIR", &dir)], mode, listen)
}

fn call(mcp: &mut McpClient, name: &str, arguments: Value) -> Value {
    mcp.ok(json!({"op": "call_tool", "name": name, "arguments": arguments}))
}

fn ok(mcp: &mut McpClient, name: &str, arguments: Value) -> Value {
    let result = call(mcp, name, arguments);
    assert_eq!(result["isError"], false, "{name}: {result}");
    result
}

fn error(mcp: &mut McpClient, name: &str, arguments: Value) -> String {
    let result = call(mcp, name, arguments);
    assert_eq!(result["isError"], true, "{name}: {result}");
    McpClient::text(&result).to_owned()
}

/// `run` of `task` with its sockets in `socket_dir` (to have two tasks in one).
fn run_in(task: &Task, socket_dir: &Path) -> Daemon {
    let (dir, agent) = (task.dir().display().to_string(), fake_agent());
    let sockets = socket_dir.display().to_string();
    let args = ["run", dir.as_str(), "--agent-cmd", agent.as_str(), "--retry-delay", "0"];
    Daemon::start("ralph-server", &args, &[("RALPH_SOCKET_DIR", sockets.as_str())])
}

/// Waits until the agent has printed a line starting with `prefix`.
fn wait_output(task: &Task, daemon: &Daemon, prefix: &str) {
    let mut client = task.connect(daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    let status = client.call("get_status", json!({}));
    let seen = status["result"]["recent_output"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|l| l.as_str().is_some_and(|l| l.starts_with(prefix)));
    if !seen {
        client.until_line(|l| l.starts_with(prefix)).expect("the agent's output");
    }
}

/// Changes heard within `timeout`, until `enough` holds for them.
fn changes_until(mcp: &mut McpClient, timeout: Duration, enough: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut heard = Vec::new();
    while !enough(&heard) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(change) = mcp.next_change(left.max(Duration::from_millis(10))) else { break };
        heard.push(change["uri"].as_str().unwrap_or_default().to_owned());
        if Instant::now() > deadline {
            break;
        }
    }
    heard
}

#[test]
fn mcp_tools_act_on_the_only_running_task_in_both_protocol_eras() {
    let task = Task::new("mcp-tools", 3);
    task.mode("slow 1000");
    let mut daemon = task.run(&[]);
    wait_output(&task, &daemon, "working 3");
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let Some(mut mcp) = McpClient::start() else { return };
        let session = open(&mut mcp, &task.socket_dir(), &[], mode, json!(null));
        assert_eq!(session["protocolVersion"], version, "{mode}: {session}");
        assert_eq!(session["serverInfo"]["name"], "ralph-server");
        let tools = mcp.ok(json!({"op": "list_tools"}));
        let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, TOOLS, "{mode}");

        let status = ok(&mut mcp, "status", json!({}))["structuredContent"].clone();
        assert_eq!((&status["task_name"], &status["status"]), (&json!("mcp-tools"), &json!("running")), "{status}");
        assert_eq!(status["current_story"], "US-001");
        assert!(status.get("recent_output").is_none(), "left to recent_output: {status}");
        let listed = ok(&mut mcp, "list_tasks", json!({}));
        assert_eq!(listed["structuredContent"]["tasks"][0]["task_name"], "mcp-tools", "{listed}");

        let recent = ok(&mut mcp, "recent_output", json!({"lines": 3}));
        let lines: Vec<&str> = McpClient::text(&recent).lines().collect();
        assert_eq!(lines.len(), 3, "{recent}");
        assert!(lines.iter().all(|l| l.starts_with("working")), "the last three: {lines:?}");
        assert_eq!(recent["structuredContent"]["lines"].as_array().unwrap().len(), 3);

        let injected = ok(&mut mcp, "inject_prompt", json!({"prompt": format!("from {mode}")}));
        assert_eq!(injected["structuredContent"]["status"], "prompt_injected", "{injected}");
        // By name too.
        ok(&mut mcp, "status", json!({"task": "mcp-tools"}));
        ok(&mut mcp, "status", json!({"task": task.dir()}));
    }
    assert_eq!(task.injected(), ["from auto", "from legacy"], "both injections are queued");

    let Some(mut mcp) = McpClient::start() else { return };
    open(&mut mcp, &task.socket_dir(), &[], "auto", json!(null));
    let asked = Instant::now();
    let stopped = ok(&mut mcp, "stop", json!({"force": true}));
    assert_eq!(stopped["structuredContent"], json!({"status": "stop_requested"}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3), "{}", daemon.stderr());
    assert!(asked.elapsed() < Duration::from_secs(5), "force ends the agent now");
}

#[test]
fn mcp_errors_name_the_tasks_and_the_loop_message() {
    let first = Task::new("alpha", 2);
    first.mode("slow 1000");
    let Some(mut mcp) = McpClient::start() else { return };
    open(&mut mcp, &first.socket_dir(), &[], "auto", json!(null));
    let none = error(&mut mcp, "status", json!({}));
    assert!(none.contains("no task is running") && none.contains("ralph-server run"), "{none}");
    let missing = error(&mut mcp, "status", json!({"task": "ghost"}));
    assert!(missing.contains("\"ghost\" is not running"), "{missing}");

    let mut alpha = first.run(&[]);
    wait_output(&first, &alpha, "working");
    ok(&mut mcp, "status", json!({}));
    let empty = error(&mut mcp, "inject_prompt", json!({"prompt": "  "}));
    assert!(empty.ends_with("prompt: must not be empty"), "the loop's own message: {empty}");
    let wrong = error(&mut mcp, "inject_prompt", json!({"prompt": 7}));
    assert!(wrong.contains("prompt"), "{wrong}");
    let bad_lines = error(&mut mcp, "recent_output", json!({"lines": 0}));
    assert!(bad_lines.contains("`lines`"), "{bad_lines}");

    // Two running: a call must say which.
    let second = Task::new("beta", 2);
    second.mode("slow 1000");
    let mut beta = run_in(&second, &first.socket_dir());
    let up = integration_tests::eventually(Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(first.socket_dir().join("beta.sock")).is_ok()
    });
    assert!(up, "{}", beta.stderr());
    let several = error(&mut mcp, "status", json!({}));
    assert!(several.contains("2 tasks are running (alpha, beta)") && several.contains("`task`"), "{several}");
    let beta_status = ok(&mut mcp, "status", json!({"task": "beta"}));
    assert_eq!(beta_status["structuredContent"]["task_name"], "beta");
    let listed = ok(&mut mcp, "list_tasks", json!({}));
    let names: Vec<&str> = listed["structuredContent"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    // --task picks one for calls that name none.
    let Some(mut pinned) = McpClient::start() else { return };
    open(&mut pinned, &first.socket_dir(), &["--task", "beta"], "legacy", json!(null));
    assert_eq!(ok(&mut pinned, "status", json!({}))["structuredContent"]["task_name"], "beta");

    ok(&mut mcp, "stop", json!({"task": "alpha", "force": true}));
    ok(&mut mcp, "stop", json!({"task": "beta", "force": true}));
    assert_eq!(alpha.wait_exit(Duration::from_secs(20)).code(), Some(3));
    assert_eq!(beta.wait_exit(Duration::from_secs(20)).code(), Some(3));
}

#[test]
fn mcp_resources_are_the_task_files_and_updates_reach_both_eras() {
    let task = Task::new("files", 2);
    // The first story passes; the agent then works on the second until stopped.
    std::fs::write(task.dir().join("fake-mode-US-002"), "slow 1000\n").unwrap();
    task.hold();
    let mut daemon = task.run(&[]);
    task.connect(&daemon);
    let (progress, prd) = ("ralph://files/progress.txt", "ralph://files/prd.json");

    let Some(mut legacy) = McpClient::start() else { return };
    let session = open(&mut legacy, &task.socket_dir(), &[], "legacy", json!(null));
    assert_eq!(session["capabilities"]["resources"]["subscribe"], true, "{session}");
    let listed = legacy.ok(json!({"op": "list_resources"}));
    let uris: Vec<&str> = listed["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, [progress, prd], "{listed}");
    let read = legacy.ok(json!({"op": "read_resource", "uri": prd}));
    assert_eq!(read["contents"][0]["text"], task.read("prd.json"));
    assert_eq!(read["contents"][0]["mimeType"], "application/json");
    legacy.ok(json!({"op": "subscribe", "uri": prd}));

    let Some(mut modern) = McpClient::start() else { return };
    let session = open(&mut modern, &task.socket_dir(), &[], "auto", json!({"resources": [progress, prd]}));
    assert_eq!(session["protocolVersion"], "2026-07-28");
    let text = modern.ok(json!({"op": "read_resource", "uri": progress}));
    assert!(text["contents"][0]["text"].as_str().unwrap().contains("ITERATION 1/10 - US-001"), "{text}");

    // The agent marks the first story (prd.json), the loop starts the second
    // iteration (progress.txt): both heard while the task runs on.
    task.release();
    let heard = changes_until(&mut legacy, Duration::from_secs(20), |h| !h.is_empty());
    assert_eq!(heard, [prd], "the initialize era hears prd.json");
    let heard = changes_until(&mut modern, Duration::from_secs(20), |h| {
        h.iter().any(|u| u == progress) && h.iter().any(|u| u == prd)
    });
    assert!(heard.iter().any(|u| u == progress) && heard.iter().any(|u| u == prd), "the listen stream: {heard:?}");
    let status = ok(&mut modern, "status", json!({}))["structuredContent"].clone();
    assert_eq!((&status["status"], &status["current_story"]), (&json!("running"), &json!("US-002")), "{status}");
    let read = legacy.ok(json!({"op": "read_resource", "uri": prd}));
    let text = read["contents"][0]["text"].as_str().unwrap();
    assert_eq!(text.matches("\"passes\": true").count(), 1, "{text}");
    let log = modern.ok(json!({"op": "read_resource", "uri": progress}));
    assert!(log["contents"][0]["text"].as_str().unwrap().contains("ITERATION 2/10 - US-002"), "{log}");

    ok(&mut modern, "stop", json!({"force": true}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3), "{}", daemon.stderr());
    // The task is gone; its files are still read from where it was.
    let heard = changes_until(&mut modern, Duration::from_secs(5), |h| h.iter().any(|u| u == progress));
    assert!(heard.iter().any(|u| u == progress), "the STOPPED block: {heard:?}");
    let log = modern.ok(json!({"op": "read_resource", "uri": progress}));
    assert!(log["contents"][0]["text"].as_str().unwrap().contains("STOPPED"), "{log}");
    assert!(changes_until(&mut legacy, Duration::from_millis(500), |_| false).iter().all(|u| u == prd));
    let unknown = legacy.send(json!({"op": "read_resource", "uri": "ralph://nowhere/prd.json"}));
    assert!(unknown["error"].as_str().unwrap_or_default().contains("not running"), "{unknown}");
}

#[test]
fn mcp_checkpoint_ends_the_task_and_the_next_run_is_reached_again() {
    let task = Task::new("again", 3);
    task.mode("slow 5");
    // The agent waits until the checkpoint is asked for.
    task.hold();
    let mut daemon = task.run(&[]);
    task.connect(&daemon);
    let Some(mut mcp) = McpClient::start() else { return };
    open(&mut mcp, &task.socket_dir(), &["--task", "again"], "legacy", json!(null));
    mcp.ok(json!({"op": "subscribe", "uri": "ralph://again/progress.txt"}));
    let asked = ok(&mut mcp, "checkpoint", json!({}));
    assert_eq!(asked["structuredContent"], json!({"status": "checkpoint_requested"}));
    task.release();
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3), "{}", daemon.stderr());
    let heard = changes_until(&mut mcp, Duration::from_secs(5), |h| !h.is_empty());
    assert_eq!(heard, ["ralph://again/progress.txt"], "the CHECKPOINT block is an update");
    let log = mcp.ok(json!({"op": "read_resource", "uri": "ralph://again/progress.txt"}));
    assert!(log["contents"][0]["text"].as_str().unwrap().contains("CHECKPOINT"), "{log}");

    let gone = error(&mut mcp, "status", json!({}));
    assert!(gone.contains("\"again\" is not running") && gone.contains("ralph-server run"), "{gone}");

    task.mode("slow 1000");
    let mut daemon = task.run(&[]);
    task.connect(&daemon);
    let mut back = Value::Null;
    let resumed = integration_tests::eventually(Duration::from_secs(10), || {
        back = ok(&mut mcp, "status", json!({}));
        back["structuredContent"]["iteration"] == 2
    });
    assert!(resumed, "resumed after the checkpoint at iteration 2: {back}");
    ok(&mut mcp, "stop", json!({"force": true}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3));
}

#[test]
fn mcp_a_task_server_that_does_not_answer_ends_at_either_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let listener = UnixListener::bind(dir.path().join("stuck.sock")).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            // Reads and never answers.
            std::thread::spawn(move || for _ in BufReader::new(stream).lines() {});
        }
    });
    let Some(mut mcp) = McpClient::start() else { return };
    open(&mut mcp, dir.path(), &["--timeout", "1"], "auto", json!(null));
    let started = Instant::now();
    let answer = mcp.send(json!({"op": "call_tool", "name": "status", "arguments": {"task": "stuck"}, "timeout": 0.3}));
    assert!(answer["error"].as_str().unwrap_or_default().contains("timed out"), "{answer}");
    assert!(started.elapsed() < Duration::from_millis(900), "{:?}", started.elapsed());
    let started = Instant::now();
    let late = error(&mut mcp, "status", json!({"task": "stuck"}));
    assert!(late.contains("did not answer"), "{late}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert_eq!(mcp.ok(json!({"op": "list_tools"}))["tools"].as_array().unwrap().len(), TOOLS.len());
}

#[test]
fn the_official_mcp_inspector_lists_tools_and_reads_the_task_status() {
    let task = Task::new("inspected", 3);
    task.mode("slow 1000");
    let daemon = task.run(&[]);
    wait_output(&task, &daemon, "working 1");
    let bin = bin_path("ralph-server");
    let dir = task.socket_dir().display().to_string();
    let env = format!("RALPH_SOCKET_DIR={dir}");
    // The inspector's own options, then `--` and the server command.
    let server = ["--", bin.to_str().unwrap(), "mcp"];
    let inspect =
        |args: &[&str]| integration_tests::mcp_inspector(&[&["-e", env.as_str()], args, &server[..]].concat());
    let Some(listed) = inspect(&["--method", "tools/list"]) else { return };
    let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TOOLS);
    let status = inspect(&["--method", "tools/call", "--tool-name", "status"]).unwrap();
    assert_eq!(status["structuredContent"]["task_name"], "inspected", "{status}");
    let resources = inspect(&["--method", "resources/list"]).unwrap();
    let uris: Vec<&str> =
        resources["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert!(uris.contains(&"ralph://inspected/prd.json"), "{resources}");
}
