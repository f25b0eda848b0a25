//! Socket activation as shipped: `config/systemd/supex-bridge.socket` holds
//! both of supex-bridge's ports in one unit, so systemd passes both sockets
//! under one name, and the daemon must serve each on the right server.

use std::time::Duration;

use integration_tests::{LineClient, SocketActivated, eventually, on_free_ports, require_tool};
use serde_json::json;

use crate::repo;

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
    let both_names = format!("{name}:{name}");
    let (activated, bridge, repl) = on_free_ports(|[bridge, repl]| {
        let (bridge_port, repl_port) = (bridge.to_string(), repl.to_string());
        let env = [
            ("SUPEX_PORT", bridge_port.as_str()),
            ("SUPEX_REPL_PORT", repl_port.as_str()),
            ("SUPEX_RUBY", "/nonexistent/ruby"),
        ];
        SocketActivated::try_start("supex-bridge", &["serve"], &[bridge, repl], Some(&both_names), &env)
            .map(|activated| (activated, bridge, repl))
    });
    let read_log = || activated.log();

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

    let log = read_log();
    let status = activated.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
}
