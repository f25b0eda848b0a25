//! Every kind of child process SIGKILLed in the middle of a request: the
//! Ruby runtime during an evaluation, a Hermes extension during a command
//! whose dialog is pending at the UI, the ralph agent while it prints. Each
//! daemon reports it and recovers as its documentation says.

use std::time::{Duration, Instant};

use integration_tests::require_tool;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// Whether a process is alive (a zombie has exited: it is not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
}

fn sigkill(pid: u32) {
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
}

fn eval_request(id: u64, code: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "eval_ruby", "arguments": {"code": code}}})
}

#[test]
fn supex_bridge_ruby_sigkilled_mid_eval_fails_it_clearly_and_the_queue_runs_on_a_new_runtime() {
    use crate::bridge::support::{Bridge, error, eval, ok, runtime_pid, start_eval};
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    eval(&mut client, "$kept = :before");
    let ruby = runtime_pid(&mut client);
    start_eval(&bridge, &mut client, "sleep 30; :never");
    // Two more wait for their turn behind it: a bridge client and the REPL.
    let mut queued = bridge.client();
    queued.send(&eval_request(6, "40 + 2"));
    let mut repl = bridge.repl_client();
    repl.send(&json!({"jsonrpc": "2.0", "id": 8, "method": "eval", "params": {"code": "$kept"}}));
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    sigkill(ruby);
    let reply = client.recv();
    assert!(killed.elapsed() < Duration::from_secs(5), "the caller waited {:?}", killed.elapsed());
    let err = error(&reply);
    assert_eq!((err["code"].as_i64(), err["data"]["reason"].as_str()), (Some(-32000), Some("crashed")), "{reply}");
    let message = err["message"].as_str().unwrap_or_default();
    assert!(message.contains("SIGKILL") || message.contains("signal 9"), "does not say how it died: {message}");
    assert!(message.contains("state"), "does not say the state was lost: {message}");
    // The ones that waited run on the new runtime, which starts empty.
    assert_eq!(queued.recv()["result"]["result"], "42", "the queued evaluation runs after the restart");
    let repl_reply = repl.recv();
    assert_eq!(repl_reply["result"]["output"], "=> nil\n", "{repl_reply}");
    let info = ok(&mut client, "runtime_info", json!({}));
    assert_eq!((info["state"].as_str(), info["restarts"].as_u64()), (Some("running"), Some(1)), "{info}");
    assert_ne!(info["pid"], ruby, "{info}");
    assert!(!crate::children::alive(ruby));
    assert_eq!(eval(&mut client, "6 * 7"), "42");
}

#[test]
fn hermes_host_extension_sigkilled_mid_command_is_reported_restarted_and_its_dialog_dropped() {
    use crate::hermes::support::{Host, py_extension};
    if !require_tool("python3") {
        return;
    }
    let host = Host::start(&py_extension("py", &[("EXT_CALL_FILE", "call.json")]));
    let old = host.wait_state("py", "running", Duration::from_secs(20))["pid"].as_u64().unwrap() as u32;
    let mut watcher = host.client();
    watcher.call("subscribe", json!({"events": ["extension_state"]}));
    let mut ui = host.client();
    assert_eq!(ui.call("ui/attach", json!({}))["result"]["attached"], true);
    let confirm = json!({"method": "ui/showConfirm", "params": {"message": "Delete?", "title": "T"}});
    std::fs::write(host.call_file(), confirm.to_string()).unwrap();
    host.result("command/execute", json!({"command": "test/call"}));
    let dialog = ui.recv();
    assert_eq!(dialog["method"], "ui/showConfirm", "{dialog}");

    // Killed while its command waits on the person at the UI.
    let killed = Instant::now();
    sigkill(old);
    let failed = watcher.recv();
    assert!(killed.elapsed() < Duration::from_secs(5), "reported after {:?}", killed.elapsed());
    assert_eq!(failed["params"]["name"], "py", "{failed}");
    assert_eq!(failed["params"]["state"], "failed", "{failed}");
    let reason = failed["params"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("SIGKILL") || reason.contains("signal 9"), "the reason does not say how: {failed}");
    // Restarted after its 1 s backoff.
    let back = host.wait_state("py", "running", Duration::from_secs(10));
    assert_eq!(back["restarts"], 1, "{back}");
    assert_ne!(back["pid"].as_u64(), Some(old as u64));
    // The person answers the dead extension's dialog late: dropped, harmless.
    ui.send(&json!({"jsonrpc": "2.0", "id": dialog["id"], "result": {"confirmed": true}}));
    // The new process's dialog reaches the UI, and its answer reaches it.
    host.result("command/execute", json!({"command": "test/call"}));
    let again = ui.recv();
    assert_eq!(again["method"], "ui/showConfirm", "{again}");
    assert_ne!(again["id"], dialog["id"], "a fresh request");
    ui.send(&json!({"jsonrpc": "2.0", "id": again["id"], "result": {"confirmed": true}}));
    let answer: Value = serde_json::from_str(&host.wait_log("py", "RESULT ", 0, Duration::from_secs(10))).unwrap();
    assert_eq!(answer["result"], json!({"confirmed": true}), "{answer}");
    assert!(!alive(old));
}

#[test]
fn ralph_server_agent_sigkilled_mid_output_is_a_failure_and_the_loop_goes_on() {
    use crate::ralph::support::{Client, Task, is_status, output_line};
    let task = Task::new("killed", 1);
    task.mode("slow 1000");
    let mut daemon = task.run(&[]);
    let mut client: Client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["*"]}));
    client.until(|e| output_line(e).is_some_and(|l| l.starts_with("working 3"))).expect("the agent prints");
    let agent = crate::rss::descendants(daemon.pid())
        .into_iter()
        .find(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("fake-agent.sh"))
        })
        .expect("the agent runs under the daemon");
    // The next run waits at its start until the test has told it to pass.
    task.hold();
    sigkill(agent);
    let second = client.until(|e| e["params"]["data"]["iteration"] == 2).expect("a second iteration starts");
    task.mode("pass");
    task.release();
    assert_eq!(second["params"]["type"], "state_change", "{second}");
    let progress = task.read("progress.txt");
    assert!(progress.contains("FAILURE - US-001"), "{progress}");
    assert!(progress.contains("SIGKILL") || progress.contains("signal 9"), "not said how it ended: {progress}");
    // The loop goes on and completes with the next run.
    client.until(|e| is_status(e, "completed")).expect("completed");
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(0), "{}", daemon.stderr());
    assert!(!alive(agent));
}
