//! The MCP front door: a Model Context Protocol server (the official `rmcp`
//! SDK) in front of one of the daemons, so a coding agent can use it directly.
//!
//! It is a *client* of the daemon's own JSON-RPC protocol, through rpc-core's
//! client: every call goes over the daemon's socket with the daemon's
//! handshake, so the daemon's token, path roots and limits apply to an agent
//! exactly as to any other client. Nothing here reaches into a daemon's state.
//!
//! A daemon supplies a [`Door`]: its tools (fixed, or listed by the daemon),
//! how to call one, and optionally resources. [`Front`] turns that into an
//! rmcp server handler for both protocol eras: the `initialize` handshake
//! (change notifications go to the session) and 2026-07-28's per-request
//! envelope (change notifications go to `subscriptions/listen` streams).
//! [`Link`] keeps the connection to the daemon and makes a new one after the
//! daemon restarts.
//!
//! What it is not: an MCP client, or a second implementation of any daemon's
//! methods.

mod changes;
mod content;
mod door;
mod front;
mod link;
mod stdio;
mod unread;

pub use changes::{Change, Changes};
pub use content::{failure, passed_on, resource_text, success, success_text, tool, tool_from_json};
pub use door::{Caller, Door, ServerName};
pub use front::Front;
pub use link::{Failure, Link, Upstream, keep_connected};
pub use stdio::serve_stdio;

/// The SDK itself, for a daemon that mounts the HTTP transport.
pub use rmcp;
/// The rmcp types a door needs, so daemons name one dependency.
pub use rmcp::ErrorData as McpError;
pub use rmcp::model::{CallToolResult, JsonObject, Tool};
pub use tokio_util::sync::CancellationToken;
