//! The command line without a running server: help, version, and the checks
//! that refuse to start. (Everything over sockets is in tests/supex_bridge.)

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_supex-bridge");

fn help(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn help_lists_every_setting_with_its_env_variable_and_default() {
    let text = help(&["--help"]);
    for var in [
        "SUPEX_HOST",
        "SUPEX_PORT",
        "SUPEX_REPL_HOST",
        "SUPEX_REPL_PORT",
        "SUPEX_REPL_DISABLED",
        "SUPEX_AUTH_TOKEN",
        "SUPEX_ALLOW_REMOTE",
        "SUPEX_ALLOWED_ROOTS",
        "SUPEX_PROJECT_ROOT",
        "SUPEX_RUBY",
        "SUPEX_EVAL_TIMEOUT",
        "SUPEX_MAX_MESSAGE",
        "SUPEX_MAX_CONNECTIONS",
        "SUPEX_HELLO_TIMEOUT",
        "SUPEX_WRITE_BUDGET",
        "SUPEX_BACKLOG_BYTES",
        "SUPEX_WRITE_STALL",
        "SUPEX_LOG_DIR",
        "RUST_LOG",
        "LOG_FORMAT",
    ] {
        assert!(text.contains(&format!("[env: {var}")), "--help lacks {var}:\n{text}");
    }
    for default in [
        "[default: 9876]",
        "[default: 4433]",
        "[default: 30]",
        "[default: 10485760]",
        "[default: 64]",
        "[default: ruby]",
        "[default: 10]",
        "[default: 8388608]",
        "[default: 16777216]",
    ] {
        assert!(text.contains(default), "--help lacks {default}");
    }
    for command in ["serve", "call", "repl", "ping"] {
        assert!(text.contains(command), "--help lacks the {command} command");
    }
    assert_eq!(help(&["serve", "--help"]).matches("[env: SUPEX_").count(), 18);
}

#[test]
fn the_token_value_is_never_shown_in_help() {
    let out = Command::new(BIN).arg("--help").env("SUPEX_AUTH_TOKEN", "very-secret-value").output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("very-secret-value"));
}

#[test]
fn client_commands_document_their_settings() {
    assert!(help(&["call", "--help"]).contains("--arg <KEY=VALUE>"));
    assert!(help(&["repl", "--help"]).contains("SUPEX_REPL_HISTORY"));
    let ping = help(&["ping", "--help"]);
    assert!(ping.contains("--repl"));
    // The exit codes a health check relies on, including Ruby's absence.
    assert!(ping.contains("exit 0") && ping.contains("3 when it answers without Ruby"), "{ping}");
}

#[test]
fn a_bad_value_is_one_line_naming_the_env_variable_and_exit_2() {
    let out = Command::new(BIN).env("SUPEX_MAX_CONNECTIONS", "many").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("SUPEX_MAX_CONNECTIONS (--max-connections)"), "{stderr}");
}
