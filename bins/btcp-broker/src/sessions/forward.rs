//! An agent's `tools/call` on its way to the session's browser: the broker's
//! hot path. `methods/tools.rs` admits the call (rate, session, arguments,
//! timeout), then [`route`] finds who answers it and [`forward`] asks.
//!
//! The agent's handler asks the browser through the engine, which gives the
//! forwarded request a fresh id on the browser's connection and routes the
//! answer back to this very future. So the id is rewritten, the answer goes to
//! the agent that asked, a browser that drops fails the call at once, and a
//! late answer finds nobody and is dropped.

use std::time::Duration;

use rpc_core::peer::Reply;
use rpc_core::{CancelNotice, Ctx, PeerHandle};
use serde::Serialize;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use super::session::Session;

/// What the browser receives: the call without the broker's own `timeout`.
#[derive(Serialize)]
pub struct ToolCall<'a> {
    pub name: &'a str,
    pub arguments: &'a RawValue,
}

/// Why a call cannot be sent at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unroutable {
    /// The session has no browser now.
    NoBrowser,
    /// Its browser registered no tool of that name: it is not bothered.
    UnknownTool,
}

/// The browser that answers a call of `tool` in `session`.
pub fn route(session: &Session, tool: &str) -> Result<PeerHandle, Unroutable> {
    let (browser, tools) = session.browser_and_tools();
    let browser = browser.ok_or(Unroutable::NoBrowser)?;
    if !tools.contains(tool) {
        return Err(Unroutable::UnknownTool);
    }
    Ok(browser)
}

/// Asks `browser` and waits at most `timeout` for its answer. When the agent
/// cancels this call (`notifications/cancelled`) or goes away, the browser is
/// told which of its calls to stop, and its late answer is dropped.
pub async fn forward<S>(cx: &Ctx<S>, browser: &PeerHandle, call: &ToolCall<'_>, timeout: Duration) -> Reply {
    browser.request_abandonable("tools/call", call, Some(timeout), cx.abandoned(), Some(CancelNotice::MCP)).await
}

/// Asks `browser` on behalf of whoever holds `abandoned`: an agent here
/// ([`forward`]) or, in a cluster, an agent on another node.
pub async fn ask(browser: &PeerHandle, call: &ToolCall<'_>, timeout: Duration, abandoned: &CancellationToken) -> Reply {
    browser.request_cancellable("tools/call", call, Some(timeout), abandoned, Some(CancelNotice::MCP)).await
}
