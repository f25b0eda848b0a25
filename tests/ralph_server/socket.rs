//! The socket and the locks: permissions, a second run of the same task or
//! of the same directory refused, a stale socket replaced, and the status
//! command's exit codes.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use integration_tests::run;
use serde_json::json;

use crate::support::{Task, fake_agent};

#[test]
fn socket_dir_socket_and_lock_are_owner_only_and_a_second_run_is_refused() {
    let task = Task::new("perm", 1);
    task.mode("slow 1000");
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    // Running once the agent prints ("starting" before).
    client.call("subscribe", json!({"events": ["output"]}));
    client.until_line(|l| l.starts_with("working")).expect("the agent prints");
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
    // Killed once its agent runs: killed while forking it, the child would
    // hold the listening socket a moment longer, take the next connection
    // and reset it.
    client.call("subscribe", json!({"events": ["output"]}));
    client.until_line(|l| l.starts_with("working")).expect("the agent prints");
    // SIGKILL leaves the socket and the lock file behind, but not the lock.
    daemon.signal(nix::sys::signal::Signal::SIGKILL);
    daemon.wait_exit(Duration::from_secs(10));
    assert!(task.socket().exists());
    let mut again = task.run(&[]);
    let mut client = task.connect(&again);
    client.call("subscribe", json!({"events": ["output"]}));
    client.until_line(|l| l.starts_with("working")).expect("the agent prints");
    assert_eq!(client.call("get_status", json!({}))["result"]["status"], "running");
    // The killed run's agent did not outlive it.
    client.call("stop", json!({"force": true}));
    again.wait_exit(Duration::from_secs(20));
}

#[test]
fn a_task_directory_runs_once_whatever_the_name_or_the_spelling_of_its_path() {
    let task = Task::new("onedir", 1);
    task.mode("slow 100000");
    let mut daemon = task.run(&[]);
    let mut client = task.connect(&daemon);
    client.call("subscribe", json!({"events": ["output"]}));
    client.until_line(|l| l.starts_with("working")).expect("the agent prints");
    let progress = task.read("progress.txt");
    let alias = task.root.path().join("alias");
    std::os::unix::fs::symlink(task.dir(), &alias).unwrap();
    let dotted = task.socket_dir().join("../onedir");
    let canonical = task.dir().canonicalize().unwrap().display().to_string();
    for (dir, name) in [(task.dir(), "other"), (alias.clone(), "third"), (dotted, "fourth")] {
        let mut second = task.start(&dir, &fake_agent(), &["--name", name]);
        assert_eq!(second.wait_exit(Duration::from_secs(10)).code(), Some(2), "{}: {}", dir.display(), second.stderr());
        let said = second.stderr();
        assert!(
            said.contains(&canonical) && said.contains("\"onedir\"") && said.contains(&format!("pid {}", daemon.pid())),
            "{said}"
        );
        assert!(!task.socket_dir().join(format!("{name}.sock")).exists());
    }
    // The first loop is untouched.
    assert_eq!(client.call("get_status", json!({}))["result"]["status"], "running");
    assert_eq!(task.read("progress.txt"), progress);
    client.call("stop", json!({"force": true}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3));
    // Once it has ended, the directory runs again, under any name.
    let mut again = task.start(&alias, &fake_agent(), &["--name", "renamed"]);
    let mut client = task.connect_to(&again, "renamed");
    client.call("subscribe", json!({"events": ["output"]}));
    client.until_line(|l| l.starts_with("working")).expect("it runs the agent");
    assert_eq!(client.call("get_status", json!({}))["result"]["task_name"], "renamed");
    client.call("stop", json!({"force": true}));
    assert_eq!(again.wait_exit(Duration::from_secs(20)).code(), Some(3));
}

#[test]
fn symlinks_planted_at_a_lock_or_a_temporary_file_are_never_followed() {
    let task = Task::new("planted", 1);
    let victim = task.root.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::create_dir_all(task.dir().join(".ralph")).unwrap();
    std::fs::create_dir_all(task.socket_dir()).unwrap();
    // At either lock: refused as bad configuration, naming the link.
    for lock in [task.dir().join(".ralph/lock"), task.socket_dir().join("planted.lock")] {
        std::os::unix::fs::symlink(&victim, &lock).unwrap();
        let mut daemon = task.run(&[]);
        assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(2), "{}", daemon.stderr());
        assert!(daemon.stderr().contains("is a symbolic link"), "{}", daemon.stderr());
        std::fs::remove_file(&lock).unwrap();
    }
    // Where the prompt file was written first: a name that is never used any more.
    std::os::unix::fs::symlink(&victim, task.dir().join(".ralph/prompt.tmp")).unwrap();
    let mut daemon = task.start(&task.dir(), &format!("{} {{PROMPT_FILE}}", fake_agent()), &[]);
    assert!(daemon.wait_exit(Duration::from_secs(30)).success(), "{}", daemon.stderr());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(task.read("prompt-seen-1").contains("US-001"), "the agent got its prompt");
}

#[test]
fn a_socket_directory_other_users_may_write_to_is_refused() {
    let task = Task::new("shared", 1);
    std::fs::create_dir_all(task.socket_dir()).unwrap();
    std::fs::set_permissions(task.socket_dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut daemon = task.run(&[]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(2), "{}", daemon.stderr());
    assert!(daemon.stderr().contains("chmod 700"), "{}", daemon.stderr());
    assert!(!task.socket().exists() && !task.socket_dir().join("shared.lock").exists());
}

#[test]
fn whatever_stands_at_the_socket_path_or_a_path_too_long_is_bad_configuration() {
    let task = Task::new("blocked", 1);
    std::fs::create_dir_all(task.socket_dir()).unwrap();
    let elsewhere = task.root.path().join("elsewhere");
    std::fs::write(&elsewhere, "precious").unwrap();
    let refused = |what: &str, extra: &[&str], says: &str| {
        let mut daemon = task.run(extra);
        assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(2), "{what}: {}", daemon.stderr());
        assert!(daemon.stderr().contains(says), "{what}: {}", daemon.stderr());
    };
    let socket = task.socket().display().to_string();
    std::fs::write(task.socket(), "precious").unwrap();
    refused("a file", &[], &socket);
    std::fs::remove_file(task.socket()).unwrap();
    std::fs::create_dir(task.socket()).unwrap();
    refused("a directory", &[], &socket);
    std::fs::remove_dir(task.socket()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, task.socket()).unwrap();
    refused("a symlink", &[], &socket);
    std::fs::remove_file(task.socket()).unwrap();
    let listening = std::os::unix::net::UnixListener::bind(task.socket()).unwrap();
    refused("another server's socket", &[], &socket);
    drop(listening);
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "precious");
    // A socket path longer than a socket address holds.
    refused("a long path", &["--name", &"n".repeat(120)], "longer than a Unix socket's path may be");
}
