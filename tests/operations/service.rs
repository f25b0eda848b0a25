//! Socket activation as shipped: `config/systemd/supex-bridge.socket` holds
//! both of supex-bridge's ports in one unit, so systemd passes both sockets
//! under one name, and the daemon must serve each on the right server.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use integration_tests::{LineClient, bin_path, eventually, free_ports, require_tool};
use serde_json::json;

use crate::repo;

/// The launcher, which execs the daemon: killed if a failed assertion leaves
/// it running.
struct Launcher(Child);

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn supex_bridge_socket_as_shipped_activates_the_bridge_and_the_repl() {
    let unit = std::fs::read_to_string(repo().join("config/systemd/supex-bridge.socket")).unwrap();
    let listen: Vec<&str> = unit.lines().filter_map(|l| l.strip_prefix("ListenStream=")).collect();
    // The daemon tells the sockets apart by port: the unit's must be its defaults.
    assert_eq!(listen, ["127.0.0.1:9876", "127.0.0.1:4433"], "supex-bridge.socket listens on {listen:?}");
    // systemd names every socket of a unit after FileDescriptorName=, else the unit.
    let name =
        unit.lines().find_map(|l| l.strip_prefix("FileDescriptorName=")).unwrap_or("supex-bridge.socket").to_owned();
    if !require_tool("systemd-socket-activate") {
        return;
    }
    // The same unit on free ports, the daemon told those ports, as an env file would.
    let [bridge, repl] = free_ports();
    let project = tempfile::tempdir().unwrap();
    let log = project.path().join("daemon.log");
    let child = Command::new("systemd-socket-activate")
        .args(["-l", &format!("127.0.0.1:{bridge}"), "-l", &format!("127.0.0.1:{repl}")])
        .arg(format!("--fdname={name}:{name}"))
        .args(["-E", &format!("SUPEX_PORT={bridge}"), "-E", &format!("SUPEX_REPL_PORT={repl}")])
        .args(["-E", "RUST_LOG=info", "-E", "SUPEX_RUBY=/nonexistent/ruby"])
        // Not the real home's data directory (the runtime's console log).
        .args(["-E", &format!("SUPEX_LOG_DIR={}", project.path().join("logs").display())])
        .arg(bin_path("supex-bridge"))
        .arg("serve")
        .current_dir(project.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut launcher = Launcher(child);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(eventually(Duration::from_secs(10), || read_log().contains("Listening on")), "{}", read_log());

    // The first connection, to the REPL port, starts the daemon with both sockets.
    // Each port is served by its own server: tools/list is the bridge's alone.
    let mut client = LineClient::connect(format!("127.0.0.1:{repl}").parse().unwrap());
    let hello = client.call(1, "hello", json!({}));
    assert!(hello["result"].is_object(), "the REPL's hello: {hello}\n{}", read_log());
    let tools = client.call(2, "tools/list", json!({}));
    assert_eq!(tools["error"]["code"], -32601, "the REPL port answers tools/list: {tools}");
    let mut client = LineClient::connect(format!("127.0.0.1:{bridge}").parse().unwrap());
    let hello = client.call(1, "hello", json!({"name": "test", "version": "1", "agent": "test", "pid": 1}));
    assert!(hello["result"].is_object(), "the bridge's hello: {hello}");
    let tools = client.call(2, "tools/list", json!({}));
    assert!(tools["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "the bridge's tools/list: {tools}");
    // The log is written by its own thread: the lines may follow the answers.
    let both = eventually(Duration::from_secs(5), || read_log().matches("using socket passed by systemd").count() == 2);
    assert!(both, "{}", read_log());

    let pid = nix::unistd::Pid::from_raw(launcher.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let stopped = eventually(Duration::from_secs(15), || launcher.0.try_wait().unwrap().is_some());
    let _ = launcher.0.kill();
    let status = launcher.0.wait().unwrap();
    assert!(stopped && status.success(), "exit {status}:\n{}", read_log());
}
