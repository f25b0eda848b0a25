//! The placeholder binary: `--help` describes the daemon, and running it says
//! plainly that it is not implemented instead of pretending to serve.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_hermes-host");

#[test]
fn help_describes_the_daemon() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Hermes") && help.contains("not implemented"), "{help}");
}

#[test]
fn serving_fails_with_a_clear_message() {
    let out = Command::new(BIN).arg("serve").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not implemented"));
}
