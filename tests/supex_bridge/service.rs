//! The service files: a unit systemd accepts, READY=1 and socket activation,
//! a launchd plist, and an env file that names every setting.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use integration_tests::{Daemon, LineClient, bin_path, eventually, free_port, require_tool};
use serde_json::json;

use crate::support::BIN;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// Every env variable named in the help of the daemon and its subcommands.
fn env_variables() -> Vec<String> {
    let mut vars = Vec::new();
    for args in [&["--help"][..], &["serve", "--help"], &["call", "--help"], &["repl", "--help"], &["ping", "--help"]] {
        let out = Command::new(bin_path(BIN)).args(args).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        for rest in help.split("[env: ").skip(1) {
            let var = rest.split(['=', ']']).next().unwrap().to_owned();
            if !vars.contains(&var) {
                vars.push(var);
            }
        }
    }
    vars
}

#[test]
fn the_env_file_names_every_setting() {
    let env_file = std::fs::read_to_string(repo().join("config/env/supex-bridge.env")).unwrap();
    let vars = env_variables();
    assert!(vars.len() >= 17, "{vars:?}");
    for var in &vars {
        assert!(env_file.contains(&format!("#{var}=")), "config/env/supex-bridge.env lacks {var}");
    }
    for (var, default) in [
        ("SUPEX_PORT", "9876"),
        ("SUPEX_REPL_PORT", "4433"),
        ("SUPEX_EVAL_TIMEOUT", "30"),
        ("SUPEX_MAX_MESSAGE", "10485760"),
        ("SUPEX_MAX_CONNECTIONS", "64"),
        ("SUPEX_RUBY", "ruby"),
    ] {
        assert!(env_file.contains(&format!("#{var}={default}\n")), "{var} default");
    }
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    if !require_tool("systemd-analyze") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // verify checks that ExecStart exists: point it at the binary just built.
    let unit = std::fs::read_to_string(repo().join("config/systemd/supex-bridge.service"))
        .unwrap()
        .replace("/usr/local/bin/supex-bridge", bin_path(BIN).to_str().unwrap());
    assert!(unit.contains("Type=notify") && unit.contains("EnvironmentFile=-/etc/supex-bridge/supex-bridge.env"));
    std::fs::write(dir.path().join("supex-bridge.service"), unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "supex-bridge.service"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify failed:\n{stderr}");
    assert!(!stderr.contains("supex-bridge"), "warnings about the unit:\n{stderr}");
}

#[test]
fn the_launchd_plist_runs_serve_and_keeps_it_alive() {
    let plist = std::fs::read_to_string(repo().join("config/launchd/org.rpc-daemons.supex-bridge.plist")).unwrap();
    for needle in [
        "<key>Label</key>",
        "<string>serve</string>",
        "<key>KeepAlive</key>",
        "<key>EnvironmentVariables</key>",
        "<key>StandardErrorPath</key>",
        "SUPEX_PROJECT_ROOT",
    ] {
        assert!(plist.contains(needle), "plist lacks {needle}");
    }
    if require_tool("python3") {
        // plistlib is the reference parser for the format.
        let status = Command::new("python3")
            .args(["-c", "import plistlib,sys; d=plistlib.load(open(sys.argv[1],'rb')); assert d['ProgramArguments'][1]=='serve'"])
            .arg(repo().join("config/launchd/org.rpc-daemons.supex-bridge.plist"))
            .status()
            .unwrap();
        assert!(status.success(), "the plist does not parse");
    }
}

#[test]
fn ready_is_notified_once_listening() {
    if !require_tool("ruby") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let port = free_port();
    let _daemon = Daemon::start_in(
        BIN,
        &[],
        &[
            ("SUPEX_PORT", &port.to_string()),
            ("SUPEX_REPL_DISABLED", "1"),
            ("NOTIFY_SOCKET", notify_path.to_str().unwrap()),
        ],
        Some(dir.path()),
    );
    let mut buf = [0u8; 64];
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    // Listening by then.
    let mut client = LineClient::connect(format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(client.call(1, "ping", json!({}))["result"]["status"], "ok");
}

#[test]
fn a_socket_passed_by_systemd_is_used() {
    if !require_tool("systemd-socket-activate") || !require_tool("ruby") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("bridge.log");
    let port = free_port();
    let mut activator = Command::new("systemd-socket-activate")
        .args(["-l", &format!("127.0.0.1:{port}"), "--fdname=bridge"])
        .args(["-E", "RUST_LOG=info", "-E", "SUPEX_REPL_DISABLED=1", "-E", "SUPEX_PORT=1"])
        .arg(bin_path(BIN))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(eventually(Duration::from_secs(10), || log().contains("Listening on")), "{}", log());
    let mut client = LineClient::connect(format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(client.call(1, "ping", json!({}))["result"]["status"], "ok");
    assert!(log().contains("using socket passed by systemd"), "{}", log());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(activator.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    assert_eq!(activator.wait().unwrap().code(), Some(0), "{}", log());
}
