//! Bad settings stop the broker at start with one line naming the setting
//! (its env variable), exit code 2, before anything listens.

use integration_tests::run;

/// Runs `btcp-broker` with `env`, expecting the bad-configuration exit.
fn refused(env: &[(&str, &str)]) -> String {
    let (status, _, stderr) = run("btcp-broker", &[], env);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("btcp-broker: bad configuration: "), "{stderr}");
    stderr
}

#[test]
fn an_unparsable_value_names_its_env_variable() {
    let stderr = refused(&[("BTCP_PORT", "99999")]);
    assert!(stderr.contains("BTCP_PORT (--port): invalid value \"99999\""), "{stderr}");
    let stderr = refused(&[("BTCP_CALL_TIMEOUT", "soon")]);
    assert!(stderr.contains("BTCP_CALL_TIMEOUT (--call-timeout)"), "{stderr}");
    let stderr = refused(&[("BTCP_KEEPALIVE", "0")]);
    assert!(stderr.contains("BTCP_KEEPALIVE") && stderr.contains("longer than zero"), "{stderr}");
}

#[test]
fn a_non_loopback_address_without_a_token_is_refused() {
    let stderr = refused(&[("BTCP_HOST", "0.0.0.0")]);
    assert!(stderr.contains("BTCP_HOST: 0.0.0.0 is not a loopback address; set BTCP_AUTH_TOKEN"), "{stderr}");
    let stderr = refused(&[("BTCP_HOST", "no-such-host.invalid")]);
    assert!(stderr.contains("BTCP_HOST: cannot resolve no-such-host.invalid"), "{stderr}");
}

/// What the broker logs at start under `ulimit` settings given to `sh`, with
/// `BTCP_MAX_CONNECTIONS=max`; stopped once it listens (on a port chosen
/// again if another process had it).
fn start_log_under(ulimit: &str, max: u64) -> String {
    integration_tests::on_free_ports(|[port]| {
        let log = log_on_port_under(port, ulimit, max);
        if integration_tests::says_port_taken(&log) {
            return Err(integration_tests::PortTaken);
        }
        assert!(log.contains("listening on"), "the broker did not start under `ulimit {ulimit}`:\n{log}");
        Ok(log)
    })
}

fn log_on_port_under(port: u16, ulimit: &str, max: u64) -> String {
    use std::io::{BufRead, BufReader};
    let port = port.to_string();
    let mut child = std::process::Command::new("sh")
        .args(["-c", &format!("ulimit {ulimit} && exec \"$0\"")])
        .arg(integration_tests::bin_path("btcp-broker"))
        .env("BTCP_PORT", &port)
        .env("BTCP_MAX_CONNECTIONS", max.to_string())
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok) {
        log.push_str(&line);
        log.push('\n');
        if line.contains("listening on") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    log
}

#[test]
fn the_open_file_limit_is_raised_and_warned_about_only_when_too_low() {
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    // The usual default: a soft limit of 1024 under a higher hard one. The
    // broker raises it to the hard limit, which holds the connections: quiet.
    let fits = hard.min(20_000);
    let log = start_log_under("-Sn 1024", fits);
    assert!(!log.contains("open-file limit"), "warned although {hard} descriptors hold {fits} peers:\n{log}");
    // Room for the peers but not for every spare HTTP connection: still quiet.
    let log = start_log_under("-n 2048", 1500);
    assert!(!log.contains("open-file limit"), "{log}");
    // A hard limit below the configured connections: said once, with the fix.
    let log = start_log_under("-n 512", 1000);
    assert_eq!(log.matches("open-file limit").count(), 1, "{log}");
    assert!(log.contains("BTCP_MAX_CONNECTIONS") && log.contains("LimitNOFILE"), "{log}");
}
