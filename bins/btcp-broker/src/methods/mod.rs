//! The broker's method table: every JSON-RPC method it serves, in one place.

pub mod connection;
pub mod session;
pub mod tools;

use std::sync::Arc;

use rpc_core::{Router, RpcError};

use crate::broker::ConnState;
use crate::session::ClientType;

/// The broker's own error codes (docs/btcp-broker.md lists them for users).
pub mod codes {
    pub const CONNECTION: i64 = -32000;
    pub const TIMEOUT: i64 = -32001;
    pub const NO_BROWSER: i64 = -32002;
    pub const SESSION_NOT_FOUND: i64 = -32003;
    pub const TOOL_NOT_FOUND: i64 = -32004;
    pub const RATE_LIMITED: i64 = -32005;
    pub const WRONG_CLIENT_TYPE: i64 = -32006;
    /// The agent cancelled the call; sent only to an agent that still waits.
    pub const CANCELLED: i64 = -32800;
}

pub fn router() -> Arc<Router<ConnState>> {
    Router::new()
        .method("hello", connection::hello)
        .method("ping", connection::ping)
        .method("session/join", session::join)
        .method("session/leave", session::leave)
        .method("tools/register", tools::register)
        .method("tools/list", tools::list)
        .method("tools/call", tools::call)
        .method("notifications/cancelled", tools::cancelled)
        .guard(|cx, method| allowed_for(cx.state.client_type, method))
        // The public btcp-client answers a failed tool with both `result`
        // (carrying isError: true) and `error`; the result is the answer. Only
        // browsers answer the broker's requests, so only they can send it.
        .result_with_error(|_, _| true)
        .build()
        .expect("each method is registered once")
}

/// Browsers provide tools, agents use them.
fn allowed_for(client_type: ClientType, method: &str) -> Result<(), RpcError> {
    let only = match method {
        "tools/register" => ClientType::Browser,
        "session/join" | "session/leave" | "tools/call" => ClientType::Agent,
        _ => return Ok(()),
    };
    if client_type == only {
        return Ok(());
    }
    Err(RpcError::new(
        codes::WRONG_CLIENT_TYPE,
        format!("{method} is for {} connections; this one is {}", only.as_str(), client_type.as_str()),
    )
    .with_data(serde_json::json!({
        "method": method,
        "clientType": client_type.as_str(),
    })))
}
