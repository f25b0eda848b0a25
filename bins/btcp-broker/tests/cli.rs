//! The command line: `--help` documents every setting with its env name, and
//! bad configuration stops the broker with one line naming the setting (exit 2).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_btcp-broker");

/// Every environment variable the broker reads.
pub const ENV_VARS: [&str; 22] = [
    "BTCP_HOST",
    "BTCP_PORT",
    "BTCP_AUTH_TOKEN",
    "BTCP_ALLOWED_ORIGINS",
    "BTCP_CALL_TIMEOUT",
    "BTCP_MAX_CALL_TIMEOUT",
    "BTCP_SESSION_IDLE_TTL",
    "BTCP_MAX_AGENTS_PER_SESSION",
    "BTCP_MAX_MESSAGE",
    "BTCP_MAX_TOOLS_PER_SESSION",
    "BTCP_MAX_SESSIONS",
    "BTCP_RATE_LIMIT",
    "BTCP_RATE_BURST",
    "BTCP_MAX_CONNECTIONS",
    "BTCP_KEEPALIVE",
    "BTCP_SHUTDOWN_GRACE",
    "BTCP_WRITE_BUDGET",
    "BTCP_BACKLOG_BYTES",
    "BTCP_TOOLS_BUDGET",
    "BTCP_SSE_SESSION_FALLBACK",
    "RUST_LOG",
    "LOG_FORMAT",
];

fn help(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn help_lists_every_env_variable_with_its_default() {
    let text = help(&["--help"]);
    for var in ENV_VARS {
        assert!(text.contains(&format!("env: {var}")), "--help lacks {var}:\n{text}");
    }
    for default in ["[default: 8765]", "[default: 127.0.0.1]", "[default: 30000]", "[default: 16]"] {
        assert!(text.contains(default), "--help lacks {default}:\n{text}");
    }
    for command in ["serve", "sessions", "tools", "call"] {
        assert!(text.contains(command), "--help lacks the {command} command");
    }
}

#[test]
fn serve_help_has_the_same_settings() {
    let text = help(&["serve", "--help"]);
    for var in ENV_VARS {
        assert!(text.contains(&format!("env: {var}")), "serve --help lacks {var}");
    }
}

#[test]
fn the_token_value_is_never_shown_in_help() {
    let out = Command::new(BIN).arg("--help").env("BTCP_AUTH_TOKEN", "s3cret-value").output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("s3cret-value"));
}

fn config_failure(env: &[(&str, &str)], setting: &str) {
    let mut cmd = Command::new(BIN);
    cmd.env("BTCP_PORT", "0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{env:?}: {stderr}");
    assert!(stderr.contains(setting), "{env:?}: the message names {setting}: {stderr}");
}

#[test]
fn bad_settings_exit_2_naming_the_setting() {
    config_failure(&[("BTCP_HOST", "0.0.0.0")], "BTCP_HOST");
    config_failure(&[("BTCP_HOST", "not-an-ip")], "BTCP_HOST");
    config_failure(&[("BTCP_ALLOWED_ORIGINS", "evil")], "BTCP_ALLOWED_ORIGINS");
    config_failure(&[("BTCP_CALL_TIMEOUT", "5000"), ("BTCP_MAX_CALL_TIMEOUT", "10")], "BTCP_MAX_CALL_TIMEOUT");
    config_failure(&[("BTCP_MAX_SESSIONS", "0")], "BTCP_MAX_SESSIONS");
    config_failure(&[("BTCP_RATE_LIMIT", "-1")], "BTCP_RATE_LIMIT");
}

#[test]
fn an_unparsable_value_exits_2() {
    let out = Command::new(BIN).env("BTCP_PORT", "eighty").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port"));
}

#[test]
fn durations_in_help_say_their_unit() {
    let text = help(&["--help"]);
    for flag in ["--keepalive <", "--shutdown-grace <", "--session-idle-ttl <"] {
        let from = text.find(flag).unwrap_or_else(|| panic!("--help lacks {flag}"));
        let entry = &text[from..from + text[from..].find("[env:").unwrap()];
        assert!(entry.contains("(seconds"), "{flag} does not say its unit:\n{entry}");
    }
    for flag in ["--call-timeout <", "--max-call-timeout <"] {
        let from = text.find(flag).unwrap();
        let entry = &text[from..from + text[from..].find("[env:").unwrap()];
        assert!(entry.contains("(ms"), "{flag} does not say its unit:\n{entry}");
    }
}
