//! What every client command does to reach a server: where to connect,
//! connecting with a message that says how to start the daemon, a request
//! with its own timeout, and errors in words.

use std::time::Duration;

use rpc_core::{CallError, PeerHandle};
use serde_json::Value;

/// Where to connect for a server bound to `host`: a wildcard bind address
/// (`0.0.0.0`, `::`) is reached on loopback.
pub fn address(host: &str, port: u16) -> String {
    rpc_core::config::connect_address(host, port)
}

/// Which of the daemon's servers a client talks to: the settings that say
/// where it listens differ.
#[derive(Clone, Copy, Debug)]
pub enum Server {
    Bridge,
    Repl,
}

impl Server {
    fn settings(self) -> &'static str {
        match self {
            Server::Bridge => "SUPEX_HOST/SUPEX_PORT",
            Server::Repl => "SUPEX_REPL_HOST/SUPEX_REPL_PORT",
        }
    }
}

/// Connects, giving up after `timeout`. Nothing listening is the common
/// case (the daemon is not started): the error says how to start it.
pub async fn connect(server: Server, addr: &str, timeout: Duration) -> Result<PeerHandle, String> {
    match tokio::time::timeout(timeout, rpc_core::client::connect_ndjson(addr)).await {
        Ok(Ok(peer)) => Ok(peer),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err(format!(
            "no supex-bridge is listening at {addr}: start it with `supex-bridge serve` \
             (or set {} to where it listens)",
            server.settings()
        )),
        Ok(Err(e)) => Err(format!("cannot connect to {addr}: {e}")),
        Err(_) => Err(format!("cannot connect to {addr}: no answer within {timeout:?}")),
    }
}

/// A request with its own timeout, the result as JSON.
pub async fn request(peer: &PeerHandle, method: &str, params: &Value, timeout: Duration) -> Result<Value, CallError> {
    let raw = peer.request_raw(method, params, Some(timeout)).await?;
    serde_json::from_str(raw.get()).map_err(|e| CallError::Malformed(e.to_string()))
}

/// A JSON-RPC failure in words, with its data when there is any.
pub fn describe(error: &CallError) -> String {
    match error {
        CallError::Rpc(e) => match &e.data {
            Some(data) => format!("error {}: {}\n{}", e.code, e.message, pretty(data)),
            None => format!("error {}: {}", e.code, e.message),
        },
        other => other.to_string(),
    }
}

pub fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}
