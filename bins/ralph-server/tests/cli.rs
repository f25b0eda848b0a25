//! The command line: `--help` names every setting with its env variable, and
//! bad configuration stops `run` with one line and exit code 2. (Having an
//! integration test also makes `cargo test` build the binary the workspace's
//! integration tests start.)

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_ralph-server");

#[test]
fn help_describes_the_daemon_and_its_settings() {
    let out = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for env in ["RALPH_SOCKET_DIR", "RALPH_AGENT_CMD", "RALPH_MAX_ITERATIONS", "RALPH_MAX_FAILURES"] {
        assert!(help.contains(env), "{env} missing from:\n{help}");
    }
}

#[test]
fn bad_configuration_is_one_line_and_exit_2() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("task");
    std::fs::create_dir(&dir).unwrap();
    let out = Command::new(BIN).args(["run", "/nonexistent/task"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad configuration: TASK_DIR"));
    let out = Command::new(BIN).args(["run", &dir.display().to_string(), "--max-iterations", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RALPH_MAX_ITERATIONS"));
    let out = Command::new(BIN).args(["run", &dir.display().to_string()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "no prd.json");
    assert!(String::from_utf8_lossy(&out.stderr).contains("prd.json: cannot read"));
}

/// A task directory with one story left, and a socket directory, in `root`.
fn task(root: &std::path::Path) -> (String, String) {
    let dir = root.join("task");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("prd.json"),
        r#"{"project": "p", "userStories": [{"id": "US-001", "title": "t", "passes": false}]}"#,
    )
    .unwrap();
    (dir.display().to_string(), root.join("sockets").display().to_string())
}

#[test]
fn a_missing_agent_is_refused_at_start_with_exit_2_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let (dir, sockets) = task(root.path());
    let cases: [(&[&str], &str); 2] = [
        (
            &["--agent-cmd", "/nonexistent/agent {PROMPT}"],
            "the agent `agent` cannot run: /nonexistent/agent is not an executable file",
        ),
        (&["--agent", "codex"], "the agent `codex` cannot run: no codex on PATH"),
    ];
    for (flags, said) in cases {
        let out = Command::new(BIN)
            .args(["run", &dir])
            .args(flags)
            .env("RALPH_SOCKET_DIR", &sockets)
            .env("PATH", root.path().join("empty-path"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(said) && stderr.contains("(story US-001)"), "{flags:?}: {stderr}");
        assert!(stderr.contains("--agent-cmd"), "says how to choose another: {stderr}");
        assert!(!root.path().join("task/progress.txt").exists(), "no iteration ran: {flags:?}");
    }
}

#[test]
fn status_without_a_running_task_says_where_it_looked_and_creates_nothing() {
    let root = tempfile::tempdir().unwrap();
    let typo = root.path().join("sokets");
    let out = Command::new(BIN).arg("status").env("RALPH_SOCKET_DIR", &typo).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains(&format!("no running tasks: {} does not exist", typo.display())), "{stdout}");
    assert!(stdout.contains("start one with `ralph-server run TASK_DIR`"), "{stdout}");
    for args in [&["status"][..], &["status", "some-task"], &["stop", "some-task"], &["inject", "some-task", "hi"]] {
        let _ = Command::new(BIN).args(args).env("RALPH_SOCKET_DIR", &typo).output().unwrap();
        assert!(!typo.exists(), "`ralph-server {args:?}` created the socket directory");
    }
    let out = Command::new(BIN).args(["status", "some-task"]).env("RALPH_SOCKET_DIR", &typo).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("some-task: not running (no server at ") && stdout.contains("ralph-server status TASK_DIR"),
        "{stdout}"
    );
}
