//! The broker's method table: every JSON-RPC method it serves, in one place.

pub mod connection;
pub mod session;
pub mod tools;

use std::sync::Arc;

use rpc_core::{Router, RpcError};

use crate::errors;
use crate::sessions::ClientType;
use crate::state::ConnState;

pub fn router() -> Arc<Router<ConnState>> {
    Router::new()
        .method("hello", connection::hello)
        .method_now("ping", connection::ping)
        .method("session/join", session::join)
        .method("session/leave", session::leave)
        .method("tools/register", tools::register)
        .method("tools/list", tools::list)
        .method("tools/call", tools::call)
        .method("notifications/cancelled", tools::cancelled)
        .guard_conn(|cx, method| allowed_for(cx.state.client_type, method))
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
    Err(errors::wrong_client_type(method, only, client_type))
}
