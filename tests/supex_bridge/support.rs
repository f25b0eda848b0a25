//! Starting a bridge for one test and talking to it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use integration_tests::{Daemon, LineClient, on_free_ports, require_tool};
use serde_json::{Value, json};

pub const BIN: &str = "supex-bridge";

/// A running supex-bridge with its own project directory (the cwd, canonical).
pub struct Bridge {
    pub daemon: Daemon,
    pub bridge: SocketAddr,
    pub repl: SocketAddr,
    pub root: PathBuf,
    pub logs: PathBuf,
    _dir: tempfile::TempDir,
}

impl Bridge {
    /// A bridge with defaults, or `None` (after a skip line) without Ruby.
    pub fn start() -> Option<Bridge> {
        Self::start_with(&[])
    }

    pub fn start_with(env: &[(&str, &str)]) -> Option<Bridge> {
        if !require_tool("ruby") {
            return None;
        }
        Some(Self::start_unchecked(env))
    }

    /// Starts without checking for Ruby (for tests that point SUPEX_RUBY elsewhere).
    pub fn start_unchecked(env: &[(&str, &str)]) -> Bridge {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let root = base.join("project");
        let logs = base.join("logs");
        std::fs::create_dir_all(&root).unwrap();
        let logs_text = logs.to_string_lossy().into_owned();
        let (daemon, bridge, repl) = on_free_ports(|[bridge_port, repl_port]| {
            let (bp, rp) = (bridge_port.to_string(), repl_port.to_string());
            let mut all: Vec<(&str, &str)> =
                vec![("SUPEX_PORT", &bp), ("SUPEX_REPL_PORT", &rp), ("SUPEX_LOG_DIR", &logs_text)];
            all.extend_from_slice(env);
            let mut daemon = Daemon::start_in(BIN, &[], &all, Some(&root));
            let bridge = SocketAddr::from(([127, 0, 0, 1], bridge_port));
            daemon.listening_on(bridge)?;
            Ok((daemon, bridge, SocketAddr::from(([127, 0, 0, 1], repl_port))))
        });
        Bridge { daemon, bridge, repl, root, logs, _dir: dir }
    }

    /// The directory holding the project root, for files outside of it.
    pub fn base(&self) -> &Path {
        self.root.parent().unwrap()
    }

    /// A bridge connection that has said hello.
    pub fn client(&self) -> LineClient {
        let mut client = LineClient::connect(self.bridge);
        let reply = client.call(0, "hello", hello_params());
        assert!(reply["result"]["success"] == true, "hello failed: {reply}");
        client
    }

    /// A REPL connection that has said hello.
    pub fn repl_client(&self) -> LineClient {
        let mut client = LineClient::connect(self.repl);
        let reply = client.call(0, "hello", json!({"name": "test", "pid": std::process::id()}));
        assert!(reply["result"]["success"] == true, "REPL hello failed: {reply}");
        client
    }
}

pub fn hello_params() -> Value {
    json!({"name": "supex-driver", "version": "0.2.0", "agent": "test", "pid": std::process::id()})
}

/// Calls a tool; the whole response.
pub fn tool(client: &mut LineClient, name: &str, arguments: Value) -> Value {
    client.call(1, "tools/call", json!({"name": name, "arguments": arguments}))
}

/// Calls a tool that must succeed; its result.
pub fn ok(client: &mut LineClient, name: &str, arguments: Value) -> Value {
    let reply = tool(client, name, arguments);
    assert!(reply.get("error").is_none(), "{name} failed: {reply}");
    reply["result"].clone()
}

/// Evaluates code that must succeed; its `result` string.
pub fn eval(client: &mut LineClient, code: &str) -> String {
    ok(client, "eval_ruby", json!({ "code": code }))["result"].as_str().unwrap().to_owned()
}

/// The error of a response that must be one.
pub fn error(reply: &Value) -> &Value {
    assert!(reply.get("result").is_none(), "expected an error, got {reply}");
    &reply["error"]
}

/// Whether a process is alive (a zombie is not: it has exited, only its
/// entry waits to be reaped).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The runtime's pid, once it has started.
pub fn runtime_pid(client: &mut LineClient) -> u32 {
    let mut info = Value::Null;
    let started = integration_tests::eventually(Duration::from_secs(20), || {
        info = ok(client, "runtime_info", json!({}));
        info["pid"].is_u64()
    });
    assert!(started, "the runtime did not start: {info}");
    info["pid"].as_u64().unwrap() as u32
}

/// How many evaluations the runtime has started (taken the turn for), as
/// `runtime_info` counts them.
pub fn evals_started(probe: &mut LineClient) -> u64 {
    ok(probe, "runtime_info", json!({}))["evals"].as_u64().expect("runtime_info counts evals")
}

/// Waits until the runtime has started `count` evaluations in all: an
/// evaluation sent without waiting for its reply is then running, not queued.
pub fn wait_for_evals(probe: &mut LineClient, count: u64) {
    let mut seen = 0;
    let started = integration_tests::eventually(Duration::from_secs(10), || {
        seen = evals_started(probe);
        seen >= count
    });
    assert!(started, "the runtime started {seen} evaluations, not {count}");
}

/// Sends `code` for evaluation on `client` without waiting for its reply, and
/// returns once the runtime has started it (not merely queued it).
pub fn start_eval(bridge: &Bridge, client: &mut LineClient, code: &str) {
    let mut probe = bridge.client();
    let before = evals_started(&mut probe);
    client.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                        "params": {"name": "eval_ruby", "arguments": {"code": code}}}));
    wait_for_evals(&mut probe, before + 1);
}
