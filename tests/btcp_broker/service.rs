//! The service files: units that systemd accepts, socket activation that
//! works, READY=1, and an env file that names every setting.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use integration_tests::{bin_path, eventually, free_port, require_tool};

use crate::support::Ws;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

#[test]
fn the_units_pass_systemd_analyze_verify() {
    if !require_tool("systemd-analyze") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let units = repo().join("config/systemd");
    // verify checks that ExecStart exists: point it at the binary just built.
    let service = std::fs::read_to_string(units.join("btcp-broker.service"))
        .unwrap()
        .replace("/usr/local/bin/btcp-broker", bin_path("btcp-broker").to_str().unwrap());
    std::fs::write(dir.path().join("btcp-broker.service"), service).unwrap();
    std::fs::copy(units.join("btcp-broker.socket"), dir.path().join("btcp-broker.socket")).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "btcp-broker.socket", "btcp-broker.service"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify failed:\n{stderr}");
    assert!(!stderr.contains("btcp-broker"), "warnings about our units:\n{stderr}");
}

#[tokio::test]
async fn socket_activation_hands_over_the_socket_and_ready_is_notified() {
    if !require_tool("systemd-socket-activate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let log_path = dir.path().join("broker.log");
    let port = free_port();
    let mut activator = Command::new("systemd-socket-activate")
        .args(["-l", &format!("127.0.0.1:{port}")])
        .args(["-E", "RUST_LOG=info", "-E"])
        .arg(format!("NOTIFY_SOCKET={}", notify_path.display()))
        .arg(bin_path("btcp-broker"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(eventually(Duration::from_secs(10), || log().contains("Listening on")), "{}", log());
    // The first connection starts the broker on the socket systemd holds.
    let mut agent = Ws::connect(&format!("ws://127.0.0.1:{port}/ws?clientType=agent")).await;
    let reply = agent.call(1, "ping", serde_json::json!({})).await;
    assert_eq!(reply["result"]["pong"], true);
    assert!(log().contains("using socket passed by systemd"), "{}", log());
    let mut buf = [0u8; 64];
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    let pid = nix::unistd::Pid::from_raw(activator.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = activator.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", log());
}

#[test]
fn the_env_file_names_every_setting_and_its_default() {
    let env_file = std::fs::read_to_string(repo().join("config/env/btcp-broker.env")).unwrap();
    let help = Command::new(bin_path("btcp-broker")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let vars: Vec<&str> = help.split("[env: ").skip(1).map(|rest| rest.split(['=', ']']).next().unwrap()).collect();
    assert!(vars.len() >= 18, "{vars:?}");
    for var in vars {
        assert!(env_file.contains(&format!("#{var}=")), "config/env/btcp-broker.env lacks {var}");
    }
    for default in ["#BTCP_PORT=8765", "#BTCP_CALL_TIMEOUT=30000", "#BTCP_MAX_SESSIONS=10000"] {
        assert!(env_file.contains(default), "{default}");
    }
}

#[test]
fn the_launchd_plist_runs_the_broker_and_keeps_it_alive() {
    let plist = std::fs::read_to_string(repo().join("config/launchd/org.rpc-daemons.btcp-broker.plist")).unwrap();
    for needle in [
        "<string>org.rpc-daemons.btcp-broker</string>",
        "<string>/usr/local/bin/btcp-broker</string>",
        "<key>KeepAlive</key>",
        "<key>EnvironmentVariables</key>",
        "<key>StandardErrorPath</key>",
    ] {
        assert!(plist.contains(needle), "plist lacks {needle}");
    }
}
