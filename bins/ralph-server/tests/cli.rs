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
