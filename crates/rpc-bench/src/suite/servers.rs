//! The servers the benchmarks share, started once for the whole suite, each
//! a process of its own on the servers' core: the baselines (raw NDJSON and
//! WebSocket echoes, jsonrpsee) and the daemons under test (supex-bridge,
//! btcp-broker). Baselines run as processes like the daemons: inside the load
//! generator's runtime their round trips would be unfairly short.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;

use crate::daemon::{Daemon, free_addr, start_on, wait_for};

pub(super) struct Servers {
    /// The servers' core, where everything the suite starts runs.
    pub(super) cpu: Option<usize>,
    /// `tcp://` of the raw NDJSON echo.
    pub(super) echo: String,
    /// `ws://` of jsonrpsee's `ping`.
    pub(super) jsonrpsee: String,
    /// `ws://` of the raw WebSocket echo.
    pub(super) ws_echo: String,
    /// `tcp://` of supex-bridge.
    pub(super) bridge: String,
    /// btcp-broker's address, for URLs other than the agent's.
    pub(super) broker_addr: SocketAddr,
    /// `ws://` of btcp-broker's agent endpoint (no session).
    pub(super) agent: String,
    /// Process ids of the echo, jsonrpsee, the WebSocket echo and
    /// supex-bridge, whose CPU each run reads.
    pub(super) echo_pid: u32,
    pub(super) jsonrpsee_pid: u32,
    pub(super) ws_echo_pid: u32,
    pub(super) bridge_pid: u32,
    /// supex-bridge's project root, removed at the end.
    project: PathBuf,
    // Stopped when the suite ends, in this order (fields drop in declaration order).
    broker: Daemon,
    _bridge: Daemon,
    _ws_echo: Daemon,
    _jsonrpsee: Daemon,
    _echo: Daemon,
}

impl Servers {
    /// Starts the baselines, waits for them, then starts the daemons and
    /// waits for them.
    pub(super) fn start(cpu: Option<usize>) -> Result<Servers> {
        let start = |bin: &str, env: &[(&str, String)], args: &[&str]| start_on(bin, env, args, cpu);
        let echo = free_addr();
        let _echo = start("rpc-bench", &[], &["echo-server", "--addr", &echo.to_string()])?;
        let jsonrpsee = free_addr();
        let _jsonrpsee = start("rpc-bench", &[], &["jsonrpsee-server", "--addr", &jsonrpsee.to_string()])?;
        let ws_echo = free_addr();
        let _ws_echo = start("rpc-bench", &[], &["ws-echo-server", "--addr", &ws_echo.to_string()])?;
        wait_for(echo)?;
        wait_for(jsonrpsee)?;
        wait_for(ws_echo)?;

        let bridge_addr = free_addr();
        let project = std::env::temp_dir().join(format!("rpc-bench-supex-{}", std::process::id()));
        std::fs::create_dir_all(&project)?;
        let _bridge = start(
            "supex-bridge",
            &[
                ("SUPEX_HOST", "127.0.0.1".into()),
                ("SUPEX_PORT", bridge_addr.port().to_string()),
                ("SUPEX_REPL_DISABLED", "1".into()),
                ("SUPEX_PROJECT_ROOT", project.display().to_string()),
                // The runtime's console log in the scratch directory, not the user's data directory.
                ("SUPEX_LOG_DIR", project.join(".supex-logs").display().to_string()),
                ("SUPEX_MAX_CONNECTIONS", "1024".into()),
            ],
            &[],
        )?;
        let broker_addr = free_addr();
        let broker = start(
            "btcp-broker",
            &[
                ("BTCP_HOST", "127.0.0.1".into()),
                ("BTCP_PORT", broker_addr.port().to_string()),
                // The benchmark measures forwarding, not the per-agent rate limit.
                ("BTCP_RATE_LIMIT", "0".into()),
                ("BTCP_MAX_SESSIONS", "100000".into()),
            ],
            &[],
        )?;
        wait_for(bridge_addr)?;
        wait_for(broker_addr)?;
        Ok(Servers {
            cpu,
            echo_pid: _echo.id(),
            jsonrpsee_pid: _jsonrpsee.id(),
            ws_echo_pid: _ws_echo.id(),
            bridge_pid: _bridge.id(),
            echo: format!("tcp://{echo}"),
            jsonrpsee: format!("ws://{jsonrpsee}"),
            ws_echo: format!("ws://{ws_echo}"),
            bridge: format!("tcp://{bridge_addr}"),
            broker_addr,
            agent: format!("ws://{broker_addr}/ws?clientType=agent"),
            project,
            broker,
            _bridge,
            _ws_echo,
            _jsonrpsee,
            _echo,
        })
    }

    /// btcp-broker's process id, to read its memory (B8, B8s).
    pub(super) fn broker_pid(&self) -> u32 {
        self.broker.id()
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.project);
    }
}
