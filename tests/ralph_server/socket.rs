//! The socket and the lock: permissions, a second run refused, a stale
//! socket replaced, and the status command's exit codes.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use integration_tests::run;
use serde_json::json;

use crate::support::Task;

#[test]
fn socket_dir_socket_and_lock_are_owner_only_and_a_second_run_is_refused() {
    let task = Task::new("perm", 1);
    task.mode("slow 1000");
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&task.socket_dir()), 0o700);
    assert_eq!(mode(&task.socket()), 0o600);
    let lock = task.socket_dir().join("perm.lock");
    assert_eq!(mode(&lock), 0o600);
    assert_eq!(std::fs::read_to_string(&lock).unwrap().trim(), daemon.pid().to_string());

    let mut second = task.run(&[]);
    assert_eq!(second.wait_exit(Duration::from_secs(10)).code(), Some(2));
    let said = second.stderr();
    assert!(said.contains("already running") && said.contains(&format!("pid {}", daemon.pid())), "{said}");
    // The first one is untouched.
    assert_eq!(client.call("get_status", json!({}))["result"]["status"], "running");

    let env = task.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (status, out, _) = run("ralph-server", &["status", "perm"], &env);
    assert_eq!(status.code(), Some(1), "running: {out}");
    assert!(out.contains("perm: running"), "{out}");
    let (status, out, _) = run("ralph-server", &["status", "--json"], &env);
    assert_eq!(status.code(), Some(1));
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()[0]["task_name"], "perm");

    client.call("stop", json!({"force": true}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3));
    let (status, _, _) = run("ralph-server", &["status", "perm"], &env);
    assert_eq!(status.code(), Some(2), "not running");
    let dir = task.dir().display().to_string();
    let (status, out, _) = run("ralph-server", &["status", &dir, "--json"], &env);
    assert_eq!(status.code(), Some(3), "stopped, from its state file: {out}");
}

#[test]
fn a_stale_socket_left_by_a_dead_run_is_replaced() {
    let task = Task::new("stale", 1);
    std::fs::create_dir_all(task.socket_dir()).unwrap();
    // What a SIGKILLed run leaves: a socket file nobody listens on.
    drop(std::os::unix::net::UnixListener::bind(task.socket()).unwrap());
    task.mode("slow 1000");
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    assert_eq!(client.call("get_status", json!({}))["result"]["task_name"], "stale");
    // SIGKILL leaves the socket and the lock file behind, but not the lock.
    daemon.signal(nix::sys::signal::Signal::SIGKILL);
    daemon.wait_exit(Duration::from_secs(10));
    assert!(task.socket().exists());
    let mut again = task.run(&[]);
    let mut client = task.connect(&again);
    assert_eq!(client.call("get_status", json!({}))["result"]["status"], "running");
    // The killed run's agent did not outlive it.
    client.call("stop", json!({"force": true}));
    again.wait_exit(Duration::from_secs(20));
}
