//! The client commands against a running broker: `sessions`, `tools`, `call`.

use integration_tests::run;

use serde_json::json;

use crate::support::{Broker, scripted_browser};

/// Runs `btcp-broker ARGS` against the broker (blocking, off the runtime).
async fn command(port: u16, args: &[&str], token: Option<&str>) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let token = token.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let port = port.to_string();
        let mut env = vec![("BTCP_PORT", port.as_str()), ("RUST_LOG", "warn")];
        if let Some(token) = &token {
            env.push(("BTCP_AUTH_TOKEN", token.as_str()));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, out, err) = run("btcp-broker", &args, &env);
        (status.code().unwrap_or(-1), out, err)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn sessions_tools_and_call_work_against_a_running_broker() {
    let broker = Broker::start(&[]);
    let browser = scripted_browser(broker.browser("cli").await).await;

    let (code, out, err) = command(broker.port, &["sessions"], None).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("SESSION"), "{out}");
    let row = out.lines().nth(1).unwrap();
    assert!(row.starts_with("cli ") && row.contains("yes"), "{out}");

    let (code, out, _) = command(broker.port, &["sessions", "--json"], None).await;
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list[0]["toolCount"], 5);

    let (code, out, err) = command(broker.port, &["tools", "cli"], None).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().any(|l| l.starts_with("echo") && l.contains("the echo tool")), "{out}");

    let (code, out, err) = command(
        broker.port,
        &["call", "cli", "echo", "--arg", "name=Zoë", "--arg", "n=3", "--arg", "list=[1,2]"],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let echoed: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(echoed, serde_json::json!({"name": "Zoë", "n": 3, "list": [1, 2]}));

    let (code, out, err) = command(broker.port, &["call", "cli", "fail"], None).await;
    assert_eq!(code, 1, "a tool error is a failure exit");
    assert!(out.contains("Error: boom"), "{out}");
    assert!(err.contains("the tool reported an error"), "{err}");

    let (code, _, err) = command(broker.port, &["call", "cli", "nope"], None).await;
    assert_eq!(code, 1);
    assert!(err.contains("tool not found") && err.contains("-32004"), "{err}");

    let (code, _, err) = command(broker.port, &["tools", "no-such-session"], None).await;
    assert_eq!(code, 1);
    assert!(err.contains("-32003"), "{err}");

    let (code, _, err) =
        command(broker.port, &["call", "cli", "slow", "--arg", "ms=2000", "--timeout", "200"], None).await;
    assert_eq!(code, 1);
    assert!(err.contains("timed out") && err.contains("-32001"), "{err}");
    browser.abort();
}

#[tokio::test]
async fn the_commands_send_the_token() {
    let broker = Broker::start(&[("BTCP_AUTH_TOKEN", "tok")]);
    let (code, _, err) = command(broker.port, &["sessions"], None).await;
    assert_eq!(code, 1);
    assert!(err.contains("401"), "{err}");
    let (code, out, err) = command(broker.port, &["sessions"], Some("tok")).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no sessions"), "{out}");
    let (code, _, err) = command(broker.port, &["tools", "x"], None).await;
    assert_eq!(code, 1);
    assert!(err.contains("401"), "{err}");
    let (code, _, err) = command(broker.port, &["tools", "x"], Some("tok")).await;
    assert_eq!(code, 1);
    assert!(err.contains("-32003"), "joined with the token, then no session: {err}");
}

#[tokio::test]
async fn a_broker_that_is_not_running_is_a_clear_error() {
    let held = integration_tests::HeldPort::new();
    let port = held.port();
    let (code, _, err) = command(port, &["sessions"], None).await;
    assert_eq!(code, 1);
    assert!(err.contains("no btcp-broker is listening"), "{err}");
}

#[tokio::test]
async fn client_commands_without_a_broker_say_how_to_start_one() {
    let held = integration_tests::HeldPort::new();
    let port = held.port();
    for args in [&["sessions"][..], &["tools", "demo"], &["call", "demo", "echo"]] {
        let (code, _, err) = command(port, args, None).await;
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains(&format!("no btcp-broker is listening at 127.0.0.1:{port}"))
                && err.contains("btcp-broker serve"),
            "{args:?}: {err}"
        );
    }
}

/// A page names its tools and session: printed raw, an ESC sequence would
/// clear the terminal or set its title, a newline fake a row.
#[tokio::test]
async fn tools_and_sessions_print_a_pages_control_characters_escaped() {
    let broker = Broker::start(&[]);
    let session = "cli\u{202e}txt.exe";
    let mut browser = broker.browser("cli%E2%80%AEtxt.exe").await;
    let evil = json!({
        "name": "evil\u{1b}[2J\u{1b}]0;PWNED\u{7}",
        "description": "line1\nline2\u{1b}[31mred\u{9b}",
        "inputSchema": {"type": "object"}
    });
    let registered = browser.call(1, "tools/register", json!({"tools": [evil]})).await;
    assert_eq!(registered["result"]["registered"], 1, "{registered}");

    let (code, out, err) = command(broker.port, &["tools", session], None).await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains(['\u{1b}', '\u{7}', '\u{9b}']), "{out:?}");
    assert_eq!(out.lines().count(), 1, "one tool, one line: {out:?}");
    assert!(out.contains(r"evil\u{1b}[2J\u{1b}]0;PWNED\u{7}"), "{out:?}");
    assert!(out.contains(r"line1\u{a}line2\u{1b}[31mred\u{9b}"), "{out:?}");

    let (code, out, err) = command(broker.port, &["sessions"], None).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(r"cli\u{202e}txt.exe") && !out.contains('\u{202e}'), "{out:?}");
    browser.close().await;
}
