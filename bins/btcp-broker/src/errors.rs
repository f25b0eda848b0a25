//! The broker's own error codes and the errors built with them
//! (docs/btcp-broker.md lists them for users).
//!
//! | code | meaning |
//! |---|---|
//! | -32000 | connection: a session or the broker is full, a registration from a replaced browser |
//! | -32001 | the tool call timed out |
//! | -32002 | no browser in the session, or it went away during the call (in a cluster also: its node was lost, or NATS is unreachable) |
//! | -32003 | session not found, or not joined to one |
//! | -32004 | the browser registered no tool of that name (it is not asked) |
//! | -32005 | rate limited |
//! | -32006 | a method for the other client type |
//! | -32800 | the agent cancelled the call |
//!
//! A tool's own error (the browser answered with `error`) keeps the browser's
//! code: it is not built here.

use std::time::Duration;

use rpc_core::RpcError;
use serde_json::json;

use crate::sessions::{AttachError, ClientType};

pub const CONNECTION: i64 = -32000;
pub const TIMEOUT: i64 = -32001;
pub const NO_BROWSER: i64 = -32002;
pub const SESSION_NOT_FOUND: i64 = -32003;
pub const TOOL_NOT_FOUND: i64 = -32004;
pub const RATE_LIMITED: i64 = -32005;
pub const WRONG_CLIENT_TYPE: i64 = -32006;
/// In a cluster: the node holding the session's browser was lost mid-call.
pub fn node_lost(session_id: &str) -> RpcError {
    RpcError::new(NO_BROWSER, "browser's node lost").with_data(json!({ "sessionId": session_id }))
}

/// In a cluster: this broker has no NATS connection now, so a browser on
/// another node cannot be reached.
pub fn cluster_unavailable(session_id: &str) -> RpcError {
    RpcError::new(NO_BROWSER, "cluster unavailable").with_data(json!({ "sessionId": session_id }))
}

/// The agent cancelled the call; sent only to an agent that still waits.
pub const CANCELLED: i64 = -32800;

/// A method of the other client type: browsers provide tools, agents use them.
pub fn wrong_client_type(method: &str, only: ClientType, this: ClientType) -> RpcError {
    RpcError::new(
        WRONG_CLIENT_TYPE,
        format!("{method} is for {} connections; this one is {}", only.as_str(), this.as_str()),
    )
    .with_data(json!({
        "method": method,
        "clientType": this.as_str(),
    }))
}

/// The engine's answer to a request it will not finish because the broker
/// stops (-32603, `reason: shutting_down`), for what `/mcp` answers itself.
pub fn shutting_down() -> RpcError {
    RpcError::internal("server is shutting down").with_data(json!({"reason": "shutting_down"}))
}

pub fn not_joined() -> RpcError {
    RpcError::new(SESSION_NOT_FOUND, "not in a session: connect with ?sessionId= or call session/join first")
}

/// A session or the broker had no room, or the session does not exist.
pub fn attach(error: AttachError) -> RpcError {
    match &error {
        AttachError::NotFound(id) => {
            RpcError::new(SESSION_NOT_FOUND, error.to_string()).with_data(json!({ "sessionId": id }))
        }
        AttachError::TooManyAgents { session, max } => {
            RpcError::new(CONNECTION, error.to_string()).with_data(json!({ "sessionId": session, "maxAgents": max }))
        }
        AttachError::TooManySessions(max) => {
            RpcError::new(CONNECTION, error.to_string()).with_data(json!({ "maxSessions": max }))
        }
    }
}

/// A registration from a connection that no longer serves its session.
pub fn not_serving() -> RpcError {
    RpcError::new(
        CONNECTION,
        "this connection no longer serves the session (its event stream closed or another browser replaced it)",
    )
}

/// `tools/register` with a list that does not validate.
pub fn invalid_tools(problems: Vec<String>) -> RpcError {
    RpcError::invalid_params(format!("tools: {}", problems.join("; "))).with_data(json!({ "problems": problems }))
}

pub fn rate_limited(retry_after: Duration) -> RpcError {
    RpcError::new(RATE_LIMITED, "rate limited: too many tools/call")
        .with_data(json!({ "retryAfterMs": retry_after.as_millis() as u64 }))
}

pub fn no_browser(session_id: &str) -> RpcError {
    RpcError::new(NO_BROWSER, format!("no browser connected to session {session_id}"))
        .with_data(json!({ "sessionId": session_id }))
}

pub fn tool_not_found(name: &str, session_id: &str) -> RpcError {
    RpcError::new(TOOL_NOT_FOUND, format!("tool not found: {name:?}"))
        .with_data(json!({ "name": name, "sessionId": session_id }))
}

pub fn timed_out(name: &str, limit: Duration) -> RpcError {
    RpcError::new(TIMEOUT, format!("tool call timed out after {} ms", limit.as_millis())).with_data(json!({
        "name": name,
        "timeoutMs": limit.as_millis() as u64,
    }))
}

/// The browser went away while the call waited for it.
pub fn browser_disconnected(session_id: &str) -> RpcError {
    RpcError::new(NO_BROWSER, "browser disconnected").with_data(json!({ "sessionId": session_id }))
}

pub fn cancelled(name: &str) -> RpcError {
    RpcError::new(CANCELLED, "request cancelled").with_data(json!({ "name": name }))
}

/// The browser's answer was not a JSON-RPC answer the broker can pass on.
pub fn malformed_answer(problem: &str, session_id: &str) -> RpcError {
    RpcError::internal(format!("malformed answer from the browser: {problem}"))
        .with_data(json!({ "reason": "malformed_answer", "sessionId": session_id }))
}
