//! Evaluation through the bridge: results, output, errors, scopes, timeouts,
//! crashes, concurrency and FIFO order.

use std::thread;
use std::time::{Duration, Instant};

use integration_tests::{LineClient, eventually};
use serde_json::json;

use crate::support::{Bridge, alive, error, eval, ok, runtime_pid, start_eval, tool};

#[test]
fn eval_returns_to_s_and_everything_the_code_printed() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let result = ok(
        &mut client,
        "eval_ruby",
        json!({"code": "puts 'hi'; $stderr.puts 'err'; system('echo from-a-child'); $stdout.syswrite(\"raw\\n\"); [1, :two]"}),
    );
    assert_eq!(result["success"], true);
    assert_eq!(result["result"], "[1, :two]");
    assert_eq!(result["output"], "hi\nerr\nfrom-a-child\nraw\n");
    assert_eq!(eval(&mut client, "nil"), "");
    assert_eq!(eval(&mut client, "'é' * 2"), "éé");
    // Output does not leak into the next evaluation.
    assert_eq!(ok(&mut client, "eval_ruby", json!({"code": "1"}))["output"], "");
}

#[test]
fn locals_are_fresh_each_time_while_globals_constants_and_methods_persist() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    eval(&mut client, "x = 1; $g = 2; K = 3; def helper = 4; class Widget; end");
    let reply = tool(&mut client, "eval_ruby", json!({"code": "x"}));
    assert_eq!(error(&reply)["data"]["class"], "NameError", "{reply}");
    assert_eq!(eval(&mut client, "[$g, K, helper, Widget.name, self.to_s].inspect"), r#"[2, 3, 4, "Widget", "main"]"#);
    // Another connection sees the same runtime.
    let mut other = bridge.client();
    assert_eq!(eval(&mut other, "$g + K"), "5");
}

#[test]
fn ruby_exceptions_are_minus_32000_with_class_message_backtrace_and_output() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let reply = tool(&mut client, "eval_ruby", json!({"code": "puts 'before'; 1 / 0"}));
    let err = error(&reply);
    assert_eq!(err["code"], -32000);
    assert_eq!(err["message"], "Ruby error: ZeroDivisionError: divided by 0");
    assert_eq!(err["data"]["class"], "ZeroDivisionError");
    assert_eq!(err["data"]["message"], "divided by 0");
    assert_eq!(err["data"]["reason"], "exception");
    assert_eq!(err["data"]["output"], "before\n");
    let backtrace = err["data"]["backtrace"].as_array().unwrap();
    assert!(backtrace.iter().any(|l| l.as_str().unwrap().starts_with("(eval):1")), "{backtrace:?}");
    assert!(!backtrace.iter().any(|l| l.as_str().unwrap().contains("supex")), "driver frames leak: {backtrace:?}");

    let reply = tool(&mut client, "eval_ruby", json!({"code": "def broken("}));
    assert_eq!(error(&reply)["code"], -32000);
    assert_eq!(error(&reply)["data"]["class"], "SyntaxError");

    let reply = tool(
        &mut client,
        "eval_ruby",
        json!({"code": "def deep(n) = n.zero? ? raise('bottom') : deep(n - 1); deep(100)"}),
    );
    assert_eq!(error(&reply)["data"]["backtrace"].as_array().unwrap().len(), 20);

    // `exit` raises SystemExit; the runtime survives it.
    let pid = runtime_pid(&mut client);
    let reply = tool(&mut client, "eval_ruby", json!({"code": "exit 3"}));
    assert_eq!(error(&reply)["data"]["class"], "SystemExit");
    assert_eq!(runtime_pid(&mut client), pid);
}

#[test]
fn a_timeout_kills_and_restarts_the_runtime_and_says_state_was_lost() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_EVAL_TIMEOUT", "1")]) else {
        return;
    };
    let mut client = bridge.client();
    eval(&mut client, "$state = :kept");
    let before = runtime_pid(&mut client);
    let started = Instant::now();
    // Asking for more than the server allows gets the server's limit.
    let reply = tool(&mut client, "eval_ruby", json!({"code": "sleep 30", "timeout": 60}));
    let elapsed = started.elapsed();
    let err = error(&reply);
    assert_eq!(err["code"], -32000, "{reply}");
    assert_eq!(err["data"]["reason"], "timeout");
    assert!(err["message"].as_str().unwrap().contains("state"), "{reply}");
    assert!(elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(eventually(Duration::from_secs(5), || !alive(before)), "the old runtime is gone");
    assert_eq!(eval(&mut client, "$state.inspect"), "nil", "state was lost");
    let info = ok(&mut client, "runtime_info", json!({}));
    assert_eq!(info["restarts"], 1);
    assert_ne!(info["pid"], before);
    assert!(info["evals"].as_u64().unwrap() >= 3);

    // A shorter timeout of its own.
    let started = Instant::now();
    let reply = tool(&mut client, "eval_ruby", json!({"code": "loop {}", "timeout": 0.3}));
    assert_eq!(error(&reply)["data"]["reason"], "timeout");
    assert!(started.elapsed() < Duration::from_millis(900));
}

#[test]
fn a_crash_during_an_eval_is_reported_and_the_runtime_restarts() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let before = runtime_pid(&mut client);
    let reply = tool(&mut client, "eval_ruby", json!({"code": "$stdout.flush; exit!(7)"}));
    let err = error(&reply);
    assert_eq!(err["code"], -32000);
    assert_eq!(err["data"]["reason"], "crashed");
    assert!(err["message"].as_str().unwrap().contains("exit status 7"), "{reply}");
    assert_eq!(eval(&mut client, "40 + 2"), "42");
    let info = ok(&mut client, "runtime_info", json!({}));
    assert_ne!(info["pid"], before);
    assert_eq!(info["restarts"], 1);
}

#[test]
fn a_runtime_killed_while_idle_is_restarted() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let before = runtime_pid(&mut client);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(before as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let restarted = eventually(Duration::from_secs(10), || {
        let info = ok(&mut client, "runtime_info", json!({}));
        info["restarts"] == 1 && info["pid"].is_u64() && info["pid"] != before
    });
    assert!(restarted, "{}", bridge.daemon.stderr());
    assert_eq!(eval(&mut client, "1 + 1"), "2");
    let log = ok(&mut client, "console_log", json!({"lines": 50}));
    let lines = log["lines"].to_string();
    assert!(lines.contains("exited on its own"), "{lines}");
}

#[test]
fn ping_and_other_non_ruby_calls_answer_while_a_long_eval_runs() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut busy = bridge.client();
    std::fs::write(bridge.root.join("note.txt"), "hello").unwrap();
    start_eval(&bridge, &mut busy, "sleep 3; :done");
    let started = Instant::now();
    let mut fresh = LineClient::connect(bridge.bridge);
    assert_eq!(fresh.call(1, "ping", json!({}))["result"]["status"], "ok");
    assert_eq!(fresh.call(2, "hello", crate::support::hello_params())["result"]["success"], true);
    assert!(fresh.call(3, "tools/list", json!({}))["result"]["tools"].is_array());
    assert_eq!(ok(&mut fresh, "ping", json!({}))["status"], "connected");
    assert_eq!(ok(&mut fresh, "read_file", json!({"path": "note.txt"}))["content"], "hello");
    assert!(ok(&mut fresh, "list_dir", json!({"path": "."}))["entries"].is_array());
    assert!(ok(&mut fresh, "console_log", json!({}))["lines"].is_array());
    let mut repl = bridge.repl_client();
    assert_eq!(repl.call(2, "complete", json!({"code": "def f"}))["result"]["complete"], false);
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_millis(1500), "non-Ruby calls waited: {elapsed:?}");
    let done = busy.recv();
    assert_eq!(done["result"]["result"], "done", "{done}");
}

/// A connection's evaluations enter the runtime's queue one at a time; its
/// other calls do not wait for them.
#[test]
fn a_connection_with_evaluations_queued_still_answers_its_other_calls_at_once() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut busy = bridge.client();
    std::fs::write(bridge.root.join("note.txt"), "hello").unwrap();
    start_eval(&bridge, &mut busy, "sleep 2; :first");
    busy.send(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                      "params": {"name": "eval_ruby", "arguments": {"code": ":second"}}}));
    let started = Instant::now();
    assert_eq!(busy.call(7, "ping", json!({}))["result"]["status"], "ok");
    let read = busy.call(8, "tools/call", json!({"name": "read_file", "arguments": {"path": "note.txt"}}));
    assert_eq!(read["result"]["content"], "hello", "{read}");
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_millis(1000), "the same connection's calls waited: {elapsed:?}");
    let replies: Vec<_> = (0..2).map(|_| busy.recv()).collect();
    assert_eq!(replies[0]["result"]["result"], "first", "{replies:?}");
    assert_eq!(replies[1]["result"]["result"], "second", "{replies:?}");
}

#[test]
fn twenty_clients_evaluating_at_once_all_get_their_own_answers() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let addr = bridge.bridge;
    let workers: Vec<_> = (0..20u64)
        .map(|n| {
            thread::spawn(move || {
                let mut client = LineClient::connect(addr);
                client.call(0, "hello", crate::support::hello_params());
                for round in 0..5u64 {
                    let code = format!("x = {n}; y = {round}; puts \"#{{x}}-#{{y}}\"; x * 1000 + y");
                    let result = ok(&mut client, "eval_ruby", json!({ "code": code }));
                    assert_eq!(result["result"], (n * 1000 + round).to_string());
                    assert_eq!(result["output"], format!("{n}-{round}\n"));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a client got a wrong answer");
    }
    let mut client = bridge.client();
    assert_eq!(ok(&mut client, "runtime_info", json!({}))["evals"], 100);
}

#[test]
fn evaluations_from_both_servers_run_one_at_a_time_in_arrival_order() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut first = bridge.client();
    eval(&mut first, "$order = []");
    first.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "eval_ruby", "arguments": {"code": "sleep 0.5; $order << :first"}}}));
    let mut probe = bridge.client();
    assert!(eventually(Duration::from_secs(10), || {
        ok(&mut probe, "runtime_info", json!({}))["evals"].as_u64() >= Some(2)
    }));
    let mut second = bridge.repl_client();
    second.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "eval", "params": {"code": "$order << :second"}}));
    // The second is queued behind the first, and a queued evaluation shows
    // nowhere from outside: a pause is all that lets the server read it
    // before the third.
    thread::sleep(Duration::from_millis(100));
    let mut third = bridge.client();
    third.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "eval_ruby", "arguments": {"code": "$order << :third; $order.inspect"}}}));
    assert_eq!(third.recv()["result"]["result"], "[:first, :second, :third]");
    assert!(first.recv()["result"].is_object());
    assert_eq!(second.recv()["result"]["success"], true);
}

#[test]
fn reset_runtime_stops_a_running_eval_and_starts_fresh() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut busy = bridge.client();
    let mut control = bridge.client();
    eval(&mut control, "$before_reset = 1");
    let before = runtime_pid(&mut control);
    busy.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "eval_ruby", "arguments": {"code": "sleep 60"}}}));
    assert!(eventually(Duration::from_secs(10), || {
        ok(&mut control, "runtime_info", json!({}))["evals"].as_u64() >= Some(2)
    }));
    let started = Instant::now();
    let reset = ok(&mut control, "reset_runtime", json!({}));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(reset["success"], true);
    let after = reset["pid"].as_u64().unwrap() as u32;
    assert_ne!(after, before);
    let stopped = busy.recv();
    assert_eq!(error(&stopped)["data"]["reason"], "reset", "{stopped}");
    assert!(!alive(before));
    assert_eq!(eval(&mut control, "$before_reset.inspect"), "nil");
    assert_eq!(runtime_pid(&mut control), after);
}

#[test]
fn eval_ruby_file_runs_a_file_at_top_level() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    std::fs::write(bridge.root.join("script.rb"), "def from_file = :defined\nlocal = 6\nputs 'running'\nlocal * 7\n")
        .unwrap();
    let result = ok(&mut client, "eval_ruby_file", json!({"file_path": "script.rb"}));
    assert_eq!(result["success"], true);
    assert_eq!(result["result"], "42");
    assert_eq!(result["output"], "running\n");
    assert_eq!(result["file_name"], "script.rb");
    assert_eq!(result["file_path"], bridge.root.join("script.rb").to_str().unwrap());
    assert_eq!(eval(&mut client, "from_file"), "defined");

    std::fs::write(bridge.root.join("bad.rb"), "\n\nraise ArgumentError, 'in file'\n").unwrap();
    let reply = tool(&mut client, "eval_ruby_file", json!({"file_path": "bad.rb"}));
    let err = error(&reply);
    assert_eq!(err["data"]["class"], "ArgumentError");
    let top = err["data"]["backtrace"][0].as_str().unwrap();
    assert!(top.ends_with("bad.rb:3:in `<main>'") || top.contains("bad.rb:3"), "{top}");

    let outside = bridge.base().join("outside.rb");
    std::fs::write(&outside, "1").unwrap();
    let reply = tool(&mut client, "eval_ruby_file", json!({"file_path": outside}));
    assert_eq!(error(&reply)["code"], -32002);
    let reply = tool(&mut client, "eval_ruby_file", json!({"file_path": "missing.rb"}));
    assert_eq!(error(&reply)["code"], -32602);
}

#[test]
fn the_console_log_keeps_what_ruby_printed_outside_evaluations() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    eval(&mut client, "Thread.new { sleep 0.2; puts 'from a thread'; warn 'a warning' }; :started");
    let mut lines = String::new();
    assert!(
        eventually(Duration::from_secs(5), || {
            lines = ok(&mut client, "console_log", json!({"lines": 10}))["lines"].to_string();
            lines.contains("from a thread") && lines.contains("a warning")
        }),
        "{lines}"
    );
    let log = ok(&mut client, "console_log", json!({"lines": 1}));
    assert_eq!(log["lines"].as_array().unwrap().len(), 1);
    let file = log["log_file"].as_str().unwrap();
    assert!(file.starts_with(bridge.logs.to_str().unwrap()), "{file}");
    let written = std::fs::read_to_string(file).unwrap();
    assert!(written.contains("from a thread"), "{written}");
    assert!(written.contains("runtime started"), "{written}");
}

#[test]
fn without_ruby_the_daemon_starts_and_explains_how_to_get_it() {
    let bridge = Bridge::start_unchecked(&[("SUPEX_RUBY", "/nonexistent/bin/ruby")]);
    let mut client = bridge.client();
    let mut pong = json!(null);
    let settled = integration_tests::eventually(Duration::from_secs(10), || {
        pong = client.call(1, "ping", json!({}))["result"].clone();
        pong["status"] != "starting"
    });
    assert!(settled, "{pong}");
    // The health check does not say "ok" for a bridge that cannot evaluate.
    assert_eq!(pong["status"], "unavailable", "{pong}");
    assert!(pong["problem"].as_str().unwrap().contains("SUPEX_RUBY"), "{pong}");
    let pong = ok(&mut client, "ping", json!({}));
    assert_eq!(pong["ruby_version"], json!(null));
    assert_eq!(pong["runtime"], "unavailable");
    let reply = tool(&mut client, "eval_ruby", json!({"code": "1"}));
    let err = error(&reply);
    assert_eq!(err["code"], -32000);
    assert_eq!(err["data"]["reason"], "unavailable");
    let message = err["message"].as_str().unwrap();
    assert!(message.contains("SUPEX_RUBY") && message.contains("apt install ruby"), "{message}");
    let info = ok(&mut client, "runtime_info", json!({}));
    assert_eq!(info["state"], "unavailable");
    assert!(bridge.daemon.stderr().contains("Ruby is not available"));

    // `supex-bridge ping`: up, but not healthy (exit 3, not 0 and not 1).
    let port = bridge.bridge.port().to_string();
    let (status, stdout, stderr) = integration_tests::run(crate::support::BIN, &["ping"], &[("SUPEX_PORT", &port)]);
    assert_eq!(status.code(), Some(3), "{stdout}{stderr}");
    assert!(stderr.contains("Ruby runtime is unavailable") && stderr.contains("SUPEX_RUBY"), "{stderr}");
    let repl_port = bridge.repl.port().to_string();
    let (status, _, _) =
        integration_tests::run(crate::support::BIN, &["ping", "--repl"], &[("SUPEX_REPL_PORT", &repl_port)]);
    assert_eq!(status.code(), Some(3));
}

#[test]
fn an_interpreter_that_is_not_ruby_is_reported_with_what_it_printed() {
    let bridge = Bridge::start_unchecked(&[("SUPEX_RUBY", "sh -c 'echo not-a-ruby >&2; exit 3' --")]);
    let mut client = bridge.client();
    let reply = tool(&mut client, "eval_ruby", json!({"code": "1"}));
    let message = error(&reply)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("exit status 3") && message.contains("not-a-ruby"), "{message}");
}

#[test]
fn an_evaluation_whose_client_left_still_finishes_before_the_next_one() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_EVAL_TIMEOUT", "1")]) else {
        return;
    };
    let mut client = bridge.client();
    eval(&mut client, "$step = :started");
    {
        let mut leaving = bridge.client();
        start_eval(&bridge, &mut leaving, "sleep 0.4; $step = :finished");
    }
    assert_eq!(eval(&mut client, "$step.inspect"), ":finished");
    // One that never ends is still cut off by the timeout, and the runtime comes back.
    {
        let mut leaving = bridge.client();
        start_eval(&bridge, &mut leaving, "loop {}");
    }
    let started = Instant::now();
    assert_eq!(eval(&mut client, ":alive"), "alive");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(ok(&mut client, "runtime_info", json!({}))["restarts"], 1);
}

/// Whatever one evaluation does to the standard streams, the next one starts
/// with working ones: its prints, its subprocesses and `$stdout.write` are
/// captured, for every client and the REPL alike.
#[test]
fn an_eval_that_breaks_the_standard_streams_does_not_break_the_next_one() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let mut repl = bridge.repl_client();
    let probe = "puts 'out'; $stderr.puts 'err'; Process.wait(spawn('echo spawned')); \
                 system('echo child >&2'); $stdout.write(\"w\\n\"); STDOUT.print(\"p\\n\"); warn 'warned'; :done";
    let breakers = [
        "STDOUT.close; STDERR.close",
        "$stdout = nil",
        "STDOUT.reopen('/dev/null')",
        "STDOUT.reopen('/dev/null'); STDERR.reopen('/dev/null'); $stdout = $stderr = File.open(File::NULL, 'w')",
        "$stdout.close; $stderr.close",
        "require 'stringio'; $stdout = StringIO.new; $stderr = StringIO.new",
        "STDOUT.close; STDERR.close; $stdout = $stderr = File.open(File::NULL, 'w')",
        "Object.send(:remove_const, :STDOUT); Object.const_set(:STDOUT, 5)",
    ];
    for breaker in breakers {
        // The breaker may raise (`$stdout = nil` does): only what follows matters.
        tool(&mut client, "eval_ruby", json!({ "code": breaker }));
        let result = ok(&mut client, "eval_ruby", json!({ "code": probe }));
        assert_eq!(result["result"], "done", "after {breaker}: {result}");
        assert_eq!(result["output"], "out\nerr\nspawned\nchild\nw\np\nwarned\n", "after {breaker}");
        let mut other = bridge.client();
        assert_eq!(
            ok(&mut other, "eval_ruby", json!({"code": "puts 'other'"}))["output"],
            "other\n",
            "after {breaker}"
        );
        let reply = repl.call(1, "eval", json!({"code": "puts 'repl'; 1"}));
        assert_eq!(reply["result"]["output"], "repl\n=> 1\n", "after {breaker}: {reply}");
    }
    // Nothing meant for an evaluation leaked into the console log either.
    let console = ok(&mut client, "console_log", json!({}));
    assert!(!console.to_string().contains("spawned"), "{console}");
}
