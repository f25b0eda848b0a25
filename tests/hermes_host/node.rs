//! An extension on a real third-party JSON-RPC library: Node's
//! `vscode-jsonrpc` (node-ext/ext.js), framing and correlating on its own.
//!
//! Its dependencies are installed with `npm ci --prefix tests/hermes_host/node-ext`
//! (node_modules is not committed). Without them the test prints a skip
//! line, except under CI=true, where it fails.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use integration_tests::{eventually, require_tool};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::{LONG, pid_alive};
use crate::support::Host;

const INSTALL: &str = "npm ci --prefix tests/hermes_host/node-ext";

fn node_ext() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hermes_host/node-ext")
}

/// `node` and the extension's node_modules: present, or a skip line (a
/// failure under CI=true).
fn node_ext_ready() -> bool {
    if !require_tool("node") {
        return false;
    }
    if node_ext().join("node_modules/vscode-jsonrpc/package.json").is_file() {
        return true;
    }
    integration_tests::skip("tests/hermes_host/node-ext/node_modules is missing", &format!("`{INSTALL}`"));
    false
}

fn node_config(name: &str) -> String {
    let script = node_ext().join("ext.js");
    format!(
        "[[extensions]]\nname = {}\nargs = [\"node\", {}]\n",
        serde_json::to_string(name).unwrap(),
        serde_json::to_string(&script.display().to_string()).unwrap()
    )
}

/// The JSON after `TAG ` in the extension's log.
fn logged(host: &Host, tag: &str) -> Value {
    let rest = host.wait_log("node", &format!("{tag} "), 0, LONG);
    serde_json::from_str(&rest).unwrap_or_else(|e| panic!("{tag} {rest}: {e}"))
}

#[test]
fn an_extension_on_vscode_jsonrpc_edits_non_ascii_messages_and_stops_on_sigterm() {
    if !node_ext_ready() {
        return;
    }
    let mut host = Host::start(&node_config("node"));
    let listing = host.wait_state("node", "running", LONG);
    assert_eq!(listing["version"], "2.0.0");
    // node/rewrite is declared and on a toolbar button: listed once.
    assert_eq!(listing["commands"], json!(["node/rewrite", "node/burst", "node/unknown"]), "{listing}");
    let pid = listing["pid"].as_u64().unwrap();
    let init = logged(&host, "INIT");
    assert_eq!(init["apiVersion"], "1.0", "{init}");
    assert!(init["dataDirectory"].as_str().unwrap().ends_with("data/extensions/node"), "{init}");

    let message = "MSH|^~\\&|ÄPP|FÄC|||20231215||ADT^A01|1|P|2.5\rPID|1||42||Müller^Zoë||19800101|F";
    host.result("message/set", json!({"message": message}));
    host.result("command/execute", json!({"command": "node/rewrite"}));
    assert_eq!(host.wait_log("node", "DONE ", 0, LONG), "\"node/rewrite\"");
    // What it got: characters and bytes as JavaScript counts them.
    let got = logged(&host, "GOT");
    assert_eq!(got, json!({"chars": message.chars().count(), "bytes": message.len(), "hasFile": false}));
    assert_eq!(logged(&host, "SET"), json!({"success": true}));
    assert_eq!(logged(&host, "PATCHED"), json!({"success": true, "patchesApplied": 3}));
    assert_eq!(logged(&host, "TREE"), json!({"1": "MÜLLER", "2": "ZOË", "3": "李雷 🚑"}));
    let expected =
        "MSH|^~\\&|ÄPP|FÄC|||20231215||ADT^A01|1|P|2.5\rPID|1||42||MÜLLER^ZOË^李雷 🚑||19800101|F\rNTE|||Grüße ✓";
    assert_eq!(host.result("message/get", json!({}))["message"], expected);
    // message/changed, debounced, with the content in the format it asked for.
    let changed = logged(&host, "CHANGED");
    assert_eq!((changed["format"].as_str(), changed["hasFile"].as_bool()), (Some("json"), Some(false)), "{changed}");
    let tree: Value = serde_json::from_str(changed["message"].as_str().unwrap()).unwrap();
    assert_eq!(tree["segments"][2], json!({"segment": "NTE", "fields": {"3": "Grüße ✓"}}), "{changed}");

    host.result("command/execute", json!({"command": "node/burst"}));
    assert_eq!(logged(&host, "BURST"), json!(200));
    host.result("command/execute", json!({"command": "node/unknown"}));
    assert_eq!(logged(&host, "UNKNOWN"), json!(-32601));

    // SIGTERM: `shutdown {reason: "closing"}`, answered; it exits by itself
    // when the host closes its stdin, well before the 5 s SIGKILL.
    host.daemon.signal(Signal::SIGTERM);
    let started = Instant::now();
    let status = host.daemon.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status}:\n{}", host.daemon.stderr());
    assert!(started.elapsed() < Duration::from_secs(4), "waited for SIGKILL: {:?}", started.elapsed());
    assert!(eventually(Duration::from_secs(2), || !pid_alive(pid)), "node outlived the host");
    let log = std::fs::read_to_string(host.dir.path().join("data/logs/node.log")).unwrap();
    assert!(log.contains(r#"SHUTDOWN {"reason":"closing"}"#), "{log}");
    assert!(!log.contains("killed"), "{log}");
}
