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
