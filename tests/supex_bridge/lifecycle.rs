//! Start-up checks, signals, the runtime's lifetime, connection limits and the
//! client commands.

use std::time::Duration;

use integration_tests::{Daemon, LineClient, eventually, free_ports, on_free_ports, pids_matching, run};
use nix::sys::signal::Signal;
use serde_json::json;

use crate::support::{BIN, Bridge, alive, eval, runtime_pid, start_eval};

#[test]
fn sigterm_exits_0_and_leaves_no_ruby_behind() {
    let Some(mut bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let ruby = runtime_pid(&mut client);
    // A grandchild of the runtime goes too.
    let child: u32 = eval(&mut client, "Process.spawn('sleep', '300')").parse().unwrap();
    assert!(alive(ruby) && alive(child));
    let status = bridge.daemon.terminate();
    assert_eq!(status.code(), Some(0), "{}", bridge.daemon.stderr());
    assert!(eventually(Duration::from_secs(5), || !alive(ruby) && !alive(child)));
    assert!(bridge.daemon.stderr().contains("ruby runtime stopped"));
}

#[test]
fn sigkill_of_the_daemon_during_a_busy_loop_leaves_no_ruby_behind() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let ruby = runtime_pid(&mut client);
    start_eval(&bridge, &mut client, "loop {}");
    bridge.daemon.signal(Signal::SIGKILL);
    assert!(eventually(Duration::from_secs(5), || !alive(ruby)), "ruby {ruby} outlived the daemon");
}

#[test]
fn a_second_signal_exits_at_once() {
    let Some(mut bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let ruby = runtime_pid(&mut client);
    start_eval(&bridge, &mut client, "sleep 60");
    bridge.daemon.signal(Signal::SIGTERM);
    // The first signal has begun the drain; only then is the next one a second.
    let draining =
        eventually(Duration::from_secs(5), || bridge.daemon.stderr().contains("a second signal stops at once"));
    assert!(draining, "{}", bridge.daemon.stderr());
    bridge.daemon.signal(Signal::SIGINT);
    let status = bridge.daemon.wait_exit(Duration::from_secs(5));
    assert_eq!(status.code(), Some(1));
    assert!(eventually(Duration::from_secs(5), || !alive(ruby)));
}

#[test]
fn sighup_is_logged_and_ignored() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    bridge.daemon.signal(Signal::SIGHUP);
    assert!(bridge.daemon.wait_for_log("SIGHUP ignored", Duration::from_secs(5)));
    let mut client = bridge.client();
    assert_eq!(eval(&mut client, ":alive"), "alive");
}

fn refused(env: &[(&str, &str)], cwd: Option<&std::path::Path>) -> String {
    let [port, repl] = free_ports().map(|port| port.to_string());
    let mut all = vec![("SUPEX_PORT", port.as_str()), ("SUPEX_REPL_PORT", repl.as_str())];
    all.extend_from_slice(env);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start_in(BIN, &[], &all, Some(cwd.unwrap_or(dir.path())));
    let status = daemon.wait_exit(Duration::from_secs(10));
    // The harness reads stderr on a thread of its own, which may lag the exit.
    eventually(Duration::from_secs(5), || daemon.stderr().ends_with('\n'));
    assert_eq!(status.code(), Some(2), "{}", daemon.stderr());
    let stderr = daemon.stderr();
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    stderr
}

#[test]
fn a_non_loopback_bind_needs_allow_remote_and_a_token() {
    let stderr = refused(&[("SUPEX_HOST", "0.0.0.0")], None);
    assert!(stderr.contains("SUPEX_HOST") && stderr.contains("SUPEX_ALLOW_REMOTE=1"), "{stderr}");
    let stderr = refused(&[("SUPEX_HOST", "0.0.0.0"), ("SUPEX_ALLOW_REMOTE", "1")], None);
    assert!(stderr.contains("SUPEX_AUTH_TOKEN"), "{stderr}");
    let stderr = refused(&[("SUPEX_REPL_HOST", "0.0.0.0")], None);
    assert!(stderr.contains("SUPEX_REPL_HOST"), "{stderr}");
    // With both, it starts.
    let dir = tempfile::tempdir().unwrap();
    on_free_ports(|[port]| {
        let mut daemon = Daemon::start_in(
            BIN,
            &[],
            &[
                ("SUPEX_HOST", "0.0.0.0"),
                ("SUPEX_ALLOW_REMOTE", "1"),
                ("SUPEX_AUTH_TOKEN", "tok"),
                ("SUPEX_PORT", &port.to_string()),
                ("SUPEX_REPL_DISABLED", "1"),
                ("SUPEX_RUBY", "/nonexistent/ruby"),
            ],
            Some(dir.path()),
        );
        daemon.listening_on(([127, 0, 0, 1], port).into())
    });
}

#[test]
fn bad_settings_stop_the_daemon_with_one_line_naming_them() {
    let stderr = refused(&[("SUPEX_PORT", "not-a-port")], None);
    assert!(stderr.contains("SUPEX_PORT"), "{stderr}");
    let stderr = refused(&[("SUPEX_EVAL_TIMEOUT", "-3")], None);
    assert!(stderr.contains("SUPEX_EVAL_TIMEOUT"), "{stderr}");
    let stderr = refused(&[("SUPEX_ALLOWED_ROOTS", "/definitely/not/a/dir")], None);
    assert!(stderr.contains("SUPEX_ALLOWED_ROOTS"), "{stderr}");
    let stderr = refused(&[("SUPEX_PROJECT_ROOT", "/definitely/not/a/dir")], None);
    assert!(stderr.contains("SUPEX_PROJECT_ROOT"), "{stderr}");
    let stderr = refused(&[("SUPEX_RUBY", "'unbalanced")], None);
    assert!(stderr.contains("SUPEX_RUBY"), "{stderr}");
}

#[test]
fn the_root_directory_is_refused_as_an_implicit_project_root() {
    let stderr = refused(&[], Some(std::path::Path::new("/")));
    assert!(stderr.contains("SUPEX_PROJECT_ROOT"), "{stderr}");
    let stderr = refused(&[("SUPEX_PROJECT_ROOT", "/")], None);
    assert!(stderr.contains("SUPEX_ALLOWED_ROOTS='*'"), "{stderr}");
    // Opening everything explicitly is allowed (and warned about).
    let daemon = on_free_ports(|[port]| {
        let mut daemon = Daemon::start_in(
            BIN,
            &[],
            &[
                ("SUPEX_ALLOWED_ROOTS", "*"),
                ("SUPEX_PORT", &port.to_string()),
                ("SUPEX_REPL_DISABLED", "1"),
                ("SUPEX_RUBY", "/nonexistent/ruby"),
            ],
            Some(std::path::Path::new("/")),
        );
        daemon.listening_on(([127, 0, 0, 1], port).into()).map(|()| daemon)
    });
    assert!(daemon.wait_for_log("anywhere", Duration::from_secs(5)), "{}", daemon.stderr());
}

#[test]
fn connections_past_the_limit_are_closed() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_MAX_CONNECTIONS", "2")]) else {
        return;
    };
    let mut a = bridge.client();
    let _b = bridge.client();
    let mut c = LineClient::connect(bridge.bridge);
    assert!(c.is_closed_within(Duration::from_secs(5)));
    assert_eq!(eval(&mut a, "1"), "1");
}

#[test]
fn call_and_ping_commands_talk_to_the_bridge() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_AUTH_TOKEN", "cli-token")]) else {
        return;
    };
    let port = bridge.bridge.port().to_string();
    let env = [("SUPEX_PORT", port.as_str()), ("SUPEX_AUTH_TOKEN", "cli-token")];

    let (status, stdout, stderr) = run(BIN, &["call", "eval_ruby", "--arg", "code=6 * 7"], &env);
    assert!(status.success(), "{stderr}");
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["result"], "42");
    // `code=42` is Ruby code (the schema says string), not a number.
    let (status, stdout, _) = run(BIN, &["call", "eval_ruby", "--arg", "code=42"], &env);
    assert!(status.success());
    assert!(stdout.contains("\"42\""), "{stdout}");
    let (status, stdout, _) = run(BIN, &["call", "eval_ruby", "--json", r#"{"code": "[1].size"}"#], &env);
    assert!(status.success() && stdout.contains("\"1\""), "{stdout}");
    let (status, stdout, _) = run(BIN, &["call", "tools/list"], &env);
    assert!(status.success() && stdout.contains("eval_ruby_file"));

    let (status, _, stderr) = run(BIN, &["call", "eval_ruby", "--arg", "code=raise 'nope'"], &env);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("-32000") && stderr.contains("nope"), "{stderr}");
    let (status, _, stderr) =
        run(BIN, &["call", "eval_ruby", "--arg", "code=1"], &[("SUPEX_PORT", &port), ("SUPEX_AUTH_TOKEN", "wrong")]);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("-32001"), "{stderr}");

    let (status, stdout, _) = run(BIN, &["ping"], &env);
    assert!(status.success() && stdout.starts_with("ok"), "{stdout}");
    let repl_port = bridge.repl.port().to_string();
    let (status, _, _) = run(BIN, &["ping", "--repl"], &[("SUPEX_REPL_PORT", &repl_port)]);
    assert!(status.success());
    let held = integration_tests::HeldPort::new();
    let dead = held.port().to_string();
    let (status, _, stderr) = run(BIN, &["ping", "--timeout", "1"], &[("SUPEX_PORT", &dead)]);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains(&format!("no supex-bridge is listening at 127.0.0.1:{dead}")), "{stderr}");
    assert!(stderr.contains("supex-bridge serve"), "{stderr}");
}

#[test]
fn sigterm_during_a_long_evaluation_still_exits_0_without_ruby() {
    let Some(mut bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let ruby = runtime_pid(&mut client);
    start_eval(&bridge, &mut client, "sleep 60");
    // The grace period (5 s) runs out; the evaluation is abandoned, Ruby stopped.
    let status = bridge.daemon.terminate();
    assert_eq!(status.code(), Some(0), "{}", bridge.daemon.stderr());
    assert!(eventually(Duration::from_secs(5), || !alive(ruby)));
}

#[test]
fn sigkill_of_the_daemon_leaves_nothing_an_evaluation_started() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let ruby = runtime_pid(&mut client);
    // argv[0] carries the marker, so the sleep can be found by its command line.
    let marker = format!("supex-orphan-check-{}", std::process::id());
    let spawned: u32 = eval(&mut client, &format!("Process.spawn(['sleep', '{marker}'], '300')")).parse().unwrap();
    assert_eq!(pids_matching(&marker), [spawned]);
    bridge.daemon.signal(Signal::SIGKILL);
    let gone = eventually(Duration::from_secs(5), || pids_matching(&marker).is_empty() && !alive(ruby));
    let left = pids_matching(&marker);
    for &pid in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    assert!(gone, "outlived the SIGKILLed daemon: ruby alive: {}, spawned: {left:?}", alive(ruby));
}

#[test]
fn a_runtime_that_keeps_dying_between_evaluations_waits_for_the_next_one() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let info = |client: &mut LineClient| crate::support::ok(client, "runtime_info", json!({}));
    // Three exits on their own within five minutes: restarted twice, then left.
    for _ in 0..3 {
        let ruby = runtime_pid(&mut client);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(ruby as i32), Signal::SIGKILL).unwrap();
        let moved_on = eventually(Duration::from_secs(10), || {
            let now = info(&mut client);
            now["state"] == "unavailable" || (now["pid"].is_u64() && now["pid"] != ruby)
        });
        assert!(moved_on, "{}", bridge.daemon.stderr());
    }
    let stopped = info(&mut client);
    assert_eq!(stopped["state"], "unavailable", "{stopped}");
    let problem = stopped["problem"].as_str().unwrap_or_default();
    assert!(problem.contains("3 times") && problem.contains("the next evaluation"), "{problem}");
    assert_eq!(stopped["restarts"], 2);
    // The next evaluation starts it again.
    assert_eq!(eval(&mut client, "1 + 1"), "2");
    assert_eq!(info(&mut client)["state"], "running");
}
