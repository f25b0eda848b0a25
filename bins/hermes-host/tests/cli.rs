//! The command line: `--help` names every setting with its env variable, a
//! bad setting is exit 2 naming it, and a client with no host to talk to
//! says where it looked.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_hermes-host");

#[test]
fn help_describes_the_daemon_and_its_settings() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Hermes") && help.contains("ctl"), "{help}");
    for env in [
        "HERMES_HOST_CONFIG",
        "HERMES_HOST_SOCKET",
        "HERMES_HOST_DATA_DIR",
        "HERMES_HOST_MAX_MESSAGE",
        "HERMES_HOST_MAX_ELEMENTS",
    ] {
        assert!(help.contains(env), "{env} missing from --help:\n{help}");
    }
}

#[test]
fn a_bad_setting_is_exit_2_naming_it() {
    let out = Command::new(BIN).args(["serve", "--max-message", "12"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HERMES_HOST_MAX_MESSAGE"));
    let out = Command::new(BIN).args(["serve", "--max-elements", "12"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HERMES_HOST_MAX_ELEMENTS"));
    let out = Command::new(BIN).args(["serve", "--config", "/nonexistent/hermes.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HERMES_HOST_CONFIG"));
}

#[test]
fn ctl_without_a_host_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("none.sock");
    let out =
        Command::new(BIN).args(["ctl", "--socket", &socket.display().to_string(), "ext", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("hermes-host: hermes-host is not running: no host listens at "), "{stderr}");
    assert!(stderr.contains("none.sock") && stderr.contains("Start it with `hermes-host`"), "{stderr}");
}
