//! The REPL server and the `repl` client command.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::{LineClient, bin_path};
use serde_json::json;

use crate::support::{Bridge, error, eval, evals_started, wait_for_evals};

fn repl_eval(client: &mut LineClient, code: &str) -> serde_json::Value {
    let reply = client.call(1, "eval", json!({ "code": code }));
    assert!(reply.get("error").is_none(), "{reply}");
    reply["result"].clone()
}

#[test]
fn hello_names_a_session_and_eval_shows_inspect_output() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = LineClient::connect(bridge.repl);
    let hello = client.call(1, "hello", json!({"name": "me", "version": "1", "pid": 4242}));
    let result = &hello["result"];
    assert_eq!(result["success"], true);
    assert_eq!(result["server"]["name"], "supex-repl");
    assert!(result["session"].as_str().unwrap().ends_with("-4242"), "{hello}");
    assert_eq!(repl_eval(&mut client, "puts 'hi'; 'str'"), json!({"success": true, "output": "hi\n=> \"str\"\n"}));
    assert_eq!(repl_eval(&mut client, "print 'no newline'; nil")["output"], "no newline\n=> nil\n");
    assert_eq!(client.call(2, "ping", json!({}))["result"]["status"], "ok");
}

#[test]
fn all_repl_clients_share_one_top_level_binding() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut a = bridge.repl_client();
    let mut b = bridge.repl_client();
    assert_eq!(repl_eval(&mut a, "shared = 41")["output"], "=> 41\n");
    assert_eq!(repl_eval(&mut b, "shared + 1")["output"], "=> 42\n");
    // The bridge's fresh bindings do not see REPL locals.
    let mut bridge_client = bridge.client();
    let reply = crate::support::tool(&mut bridge_client, "eval_ruby", json!({"code": "shared"}));
    assert_eq!(error(&reply)["data"]["class"], "NameError");
    assert_eq!(eval(&mut bridge_client, "defined?(shared).inspect"), "nil");
}

#[test]
fn exceptions_are_results_a_human_can_read() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.repl_client();
    let result = repl_eval(&mut client, "puts 'first'; def boom = raise(ArgumentError, 'bad'); boom");
    assert_eq!(result["success"], false);
    let output = result["output"].as_str().unwrap();
    assert!(output.starts_with("first\n#<ArgumentError: bad>\n"), "{output}");
    let lines: Vec<&str> = output.lines().collect();
    assert!(lines.len() <= 2 + 5, "at most 5 backtrace lines: {output}");
    assert!(lines[2].contains("(repl):1"), "{output}");
    let result = repl_eval(&mut client, "def (");
    assert_eq!(result["success"], false);
    assert!(result["output"].as_str().unwrap().starts_with("#<SyntaxError:"));
}

#[test]
fn eval_needs_hello_and_code() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = LineClient::connect(bridge.repl);
    let reply = client.call(1, "eval", json!({"code": "1"}));
    assert_eq!(error(&reply)["code"], -32600);
    let reply = client.call(2, "complete", json!({"code": "1"}));
    assert_eq!(error(&reply)["code"], -32600);
    client.call(3, "hello", json!({}));
    let reply = client.call(4, "eval", json!({}));
    assert_eq!(error(&reply)["code"], -32602);
    assert!(error(&reply)["message"].as_str().unwrap().contains("code"));
}

#[test]
fn the_repl_checks_the_token_too() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_AUTH_TOKEN", "repl-token")]) else {
        return;
    };
    let mut client = LineClient::connect(bridge.repl);
    assert_eq!(error(&client.call(1, "eval", json!({"code": "1"})))["code"], -32001);
    assert_eq!(error(&client.call(2, "hello", json!({"name": "x"})))["code"], -32001);
    assert_eq!(client.call(3, "hello", json!({"token": "repl-token"}))["result"]["success"], true);
    assert_eq!(repl_eval(&mut client, "1 + 1")["output"], "=> 2\n");
}

#[test]
fn complete_tells_whether_more_input_is_needed_even_during_an_eval() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.repl_client();
    for (code, complete) in [
        ("1 + 1", true),
        ("def f(x)", false),
        ("def f(x)\n  x\nend", true),
        ("[1,\n2", false),
        ("\"open string", false),
        ("<<~EOS\ntext", false),
        ("1 +", false),
        ("end", true),
        ("foo(", false),
    ] {
        let reply = client.call(1, "complete", json!({ "code": code }));
        assert_eq!(reply["result"]["complete"], complete, "{code:?}: {reply}");
    }
    let mut busy = bridge.repl_client();
    let mut probe = bridge.client();
    let before = evals_started(&mut probe);
    busy.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "eval", "params": {"code": "sleep 2; :ok"}}));
    wait_for_evals(&mut probe, before + 1);
    let started = Instant::now();
    assert_eq!(client.call(2, "complete", json!({"code": "class X"}))["result"]["complete"], false);
    assert!(started.elapsed() < Duration::from_millis(1200), "complete waited for the eval");
    assert_eq!(busy.recv()["result"]["output"], "=> :ok\n");
}

#[test]
fn the_repl_command_reads_continuation_lines_and_prints_results() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let history = bridge.base().join("history");
    let mut child = Command::new(bin_path(crate::support::BIN))
        .args(["repl", "--history", history.to_str().unwrap()])
        .env("SUPEX_REPL_PORT", bridge.repl.port().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"def twice(x)\n  x * 2\nend\ntwice(21)\nputs 'hello'\n[1,\n 2]\n1 / 0\nexit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let expected = "=> :twice\n=> 42\nhello\n=> nil\n=> [1, 2]\n#<ZeroDivisionError: divided by 0>\n";
    assert!(stdout.starts_with(expected), "{stdout}");
    let saved = std::fs::read_to_string(&history).unwrap();
    assert!(saved.contains("twice(21)"), "{saved}");
}

#[test]
fn the_repl_can_be_turned_off() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_REPL_DISABLED", "1")]) else {
        return;
    };
    assert!(std::net::TcpStream::connect(bridge.repl).is_err());
    // The log line comes after the bridge port opens: wait for it.
    assert!(bridge.daemon.wait_for_log("disabled", std::time::Duration::from_secs(5)), "{}", bridge.daemon.stderr());
}

#[test]
fn the_repl_command_reconnects_when_the_server_comes_back() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    let Some(mut first) = Bridge::start() else {
        return;
    };
    let repl_port = first.repl.port().to_string();
    let mut child = Command::new(bin_path(crate::support::BIN))
        .args(["repl", "--history", first.base().join("h").to_str().unwrap()])
        .env("SUPEX_REPL_PORT", &repl_port)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let next = |what: &str| {
        lines.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("no output while waiting for {what}"))
    };
    input.write_all(b"1 + 1\n").unwrap();
    assert_eq!(next("the first result"), "=> 2");

    assert_eq!(first.daemon.terminate().code(), Some(0));
    // The same ports again, as after a service restart.
    let second = integration_tests::Daemon::start_in(
        crate::support::BIN,
        &[],
        &[("SUPEX_PORT", &first.bridge.port().to_string()), ("SUPEX_REPL_PORT", &repl_port)],
        Some(&first.root),
    );
    input.write_all(b"40 + 2\n").unwrap();
    assert_eq!(next("the result after reconnecting"), "=> 42");
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    drop(second);
}

#[test]
fn the_repl_command_without_a_server_says_how_to_start_one_and_exits() {
    // No Ruby needed: nothing listens. Input from a pipe (here: at EOF) cannot
    // wait for someone to start the daemon, so this is said once, at once.
    let held = integration_tests::HeldPort::new();
    let port = held.port().to_string();
    let started = Instant::now();
    let (status, stdout, stderr) =
        integration_tests::run(crate::support::BIN, &["repl"], &[("SUPEX_REPL_PORT", &port)]);
    assert_eq!(status.code(), Some(1), "{stdout}{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(stderr.contains(&format!("no supex-bridge is listening at 127.0.0.1:{port}")), "{stderr}");
    assert!(stderr.contains("start it with `supex-bridge serve`"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line, no retries: {stderr}");
}
