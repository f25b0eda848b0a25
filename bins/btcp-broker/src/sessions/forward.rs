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

use futures_util::future::Either;
use rpc_core::CallError;
use rpc_core::message::{WriteJson, write_json_str};
use rpc_core::peer::Reply;
use rpc_core::{CancelNotice, Ctx, PeerHandle};
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use super::session::Session;

/// What the browser receives: the call without the broker's own `timeout`.
pub struct ToolCall<'a> {
    pub name: &'a str,
    pub arguments: &'a RawValue,
}

/// Written straight into the request: the arguments are JSON the broker
/// already holds, and serde's map and raw-value machinery cost 5 % of a
/// forwarded call to write these two members.
impl WriteJson for ToolCall<'_> {
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(b"{\"name\":");
        write_json_str(out, self.name);
        out.extend_from_slice(b",\"arguments\":");
        out.extend_from_slice(self.arguments.get().as_bytes());
        out.push(b'}');
        Ok(())
    }
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
///
/// Not an `async fn`: one would hold its arguments and the engine's future
/// over again, in the future of every forwarded call.
pub fn forward<S>(
    cx: &Ctx<S>,
    browser: &PeerHandle,
    call: &ToolCall<'_>,
    timeout: Duration,
) -> impl Future<Output = Reply> {
    let abandoned = cx.abandoned();
    // Cancelled while it waited behind the agent's other calls: the
    // browser is not bothered at all.
    if abandoned.has_fired() {
        return Either::Left(std::future::ready(Err(CallError::Cancelled)));
    }
    Either::Right(browser.request_abandonable("tools/call", call, Some(timeout), abandoned, Some(CancelNotice::MCP)))
}

/// Asks `browser` on behalf of whoever holds `abandoned`: an agent here
/// ([`forward`]) or, in a cluster, an agent on another node.
pub fn ask(
    browser: &PeerHandle,
    call: &ToolCall<'_>,
    timeout: Duration,
    abandoned: &CancellationToken,
) -> impl Future<Output = Reply> {
    browser.request_cancellable("tools/call", call, Some(timeout), abandoned, Some(CancelNotice::MCP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_writes_the_json_serde_would() {
        for (name, arguments) in [
            ("echo", "{}"),
            ("say \"hi\"\\ \u{1}\n é 🦀", r#"{"text":"a\"b","n":[1,2.5e3,{"deep":null}]}"#),
            ("", "[]"),
        ] {
            let arguments = RawValue::from_string(arguments.to_owned()).unwrap();
            let mut written = Vec::new();
            ToolCall { name, arguments: &arguments }.write_json(&mut written).unwrap();
            let parsed: serde_json::Value = serde_json::from_slice(&written).unwrap();
            let expected = serde_json::json!({ "name": name, "arguments": serde_json::from_str::<serde_json::Value>(arguments.get()).unwrap() });
            assert_eq!(parsed, expected, "{}", String::from_utf8_lossy(&written));
        }
    }
}
